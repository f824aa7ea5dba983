"""Portable C templates (ISA ``generic``, so every x86 and ARM target has them) for the ops that
segmentation, pose, GAN and transformer models add to classification networks: resampling
(``resize``), transposed convolution (``deconv2d``), ``layer_norm``, ``batch_norm`` (inference, when
no pass folded it), ``argmax``/``argmin`` (``arg_reduce``) and ``padding``; the running sums
(``cumsum``) and the per-row picks (``indexing_one_hot``) of detection and sequence models.

Each computes what its reference kernel (``backends/reference/kernels.py``) computes, in the same
order where float32 rounding could tell them apart; index tables that only depend on shapes (resize
taps and weights, padding source offsets) are worked out here from the reference's own functions
and emitted as constant arrays, so the C holds no copy of that arithmetic. Float32 NCHW operands:
blocked layouts reach these kernels through the relayouts the layout passes insert, float16 through
``kernel-widen-f16``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import axis_split, code, esize, is_f32, same_plain_type
from backends.c.templates import Template, conv_sym, sym_join
from backends.c.templates.portable.generic import BYTES_CTYPE, _par
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.lowering.kernels import Lowered, shape
from semantics.kernels import interp_taps

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


def c_float(v: float) -> str:
    """A C float literal (NaN and infinities by name)."""
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return f"{float(np.float32(v))!r}f"


def c_array(ctype: str, name: str, values: Sequence[Any]) -> str:
    body = ", ".join(c_float(v) if ctype == "float" else str(int(v)) for v in values)
    return f"static const {ctype} {name}[{max(1, len(values))}] = {{{body or '0'}}};"


def _plain(*values: Any) -> bool:
    return all(L.layout_of(v.type) is None for v in values)


# ----------------------------------------------------------------------------------------------
# Resize


def resize_taps(n_in: int, n_out: int, imode: Any) -> tuple[list[int], list[int], list[float], list[float]]:
    """Per output index: the source indices MegEngine's kernel reads and their weights (the
    reference's :func:`interp_taps`; nearest reads one index)."""
    lo, hi, w_lo, w_hi = interp_taps(n_in, n_out, imode)
    return [int(i) for i in lo], [int(i) for i in hi], [float(w) for w in w_lo], [float(w) for w in w_hi]


class Resize(Template):
    """Nearest / bilinear (half-pixel) resampling of NCHW float32 planes: per output row, two source
    rows blended with per-column taps from constant tables."""
    examples = (E.resize((1, 3, 5, 7), (9, 4)), E.resize((2, 2, 4, 3), (7, 8), "nearest"))

    family = "resize"
    ops = (T.ResizeOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ResizeOp)
        p = op.params()
        if (
            p["format"] != enums.Format.NCHW
            or p["imode"] == enums.InterpolationMode.CUBIC  # image.ResizeCubic
            or not is_f32(*op.operands, *op.results)
            or not _plain(*op.operands)
        ):
            return None
        n, c, ih, iw = shape(op.operands[0])
        _, _, oh, ow = shape(op.results[0])
        params = {"imode": p["imode"].value, "nc": n * c, "ih": ih, "iw": iw, "oh": oh, "ow": ow}
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("resize", p["imode"], f"nc{p['nc']}", f"{p['ih']}x{p['iw']}", "to",
                        f"{p['oh']}x{p['ow']}", "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        nc, ih, iw, oh, ow = (p[k] for k in ("nc", "ih", "iw", "oh", "ow"))
        imode = enums.InterpolationMode(p["imode"])
        ylo, yhi, yw0, yw1 = resize_taps(ih, oh, imode)
        xlo, xhi, xw0, xw1 = resize_taps(iw, ow, imode)
        tables = [c_array("int", "ylo", ylo), c_array("int", "xlo", xlo)]
        if imode == enums.InterpolationMode.NEAREST:
            row = "yo[q] = r0[xlo[q]];"
        else:
            tables += [c_array("int", "yhi", yhi), c_array("int", "xhi", xhi), c_array("float", "yw0", yw0),
                       c_array("float", "yw1", yw1), c_array("float", "xw0", xw0),
                       c_array("float", "xw1", xw1)]  # fmt: skip
            row = (
                "const float top = xw0[q] * r0[xlo[q]] + xw1[q] * r0[xhi[q]];\n"
                "      const float bot = xw0[q] * r1[xlo[q]] + xw1[q] * r1[xhi[q]];\n"
                "      yo[q] = yw0[r] * top + yw1[r] * bot;"
            )
        r1 = (
            "" if imode == enums.InterpolationMode.NEAREST else f"const float* r1 = xp + (long)yhi[r] * {iw};"
        )
        return f"""
static void {sym}(const float* x, float* y, unsigned char* ws, int nt) {{
  {chr(10).join("  " + t for t in tables).strip()}
  (void)ws;
  {_par(nc * oh * ow * 4)}
  for (long t = 0; t < {nc * oh}; ++t) {{
    const long plane = t / {oh};
    const int r = (int)(t % {oh});
    const float* xp = x + plane * {ih * iw};
    const float* r0 = xp + (long)ylo[r] * {iw};
    {r1}
    float* yo = y + plane * {oh * ow} + (long)r * {ow};
    for (int q = 0; q < {ow}; ++q) {{
      {row}
    }}
  }}
}}
"""


# ----------------------------------------------------------------------------------------------
# Transposed convolution


class Deconv2d(Template):
    """``mgb.convolution_backward_data`` (transposed convolution), NCHW float32, any groups, stride,
    padding, dilation and output padding. Per output row, every (tap row, input channel, tap column)
    adds one scaled input row into the row's accumulators at stride ``sw``: no races (each thread
    owns output planes) and no bounds checks in the inner loop."""
    examples = (E.deconv2d((1, 5, 4, 6), 3, 3, stride=2, pad=1), E.deconv2d((2, 4, 3, 5), 6, 2, groups=2))

    family = "deconv2d"
    ops = (T.ConvolutionBackwardDataOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ConvolutionBackwardDataOp)
        w, x = op.operands
        if not is_f32(*op.operands, *op.results) or not _plain(*op.operands):
            return None
        p = op.params()
        ws = shape(w)
        groups, icg, ocg, fh, fw = ws if p["sparse"] == enums.ConvSparse.GROUP else (1, *ws)
        n, ic, ih, iw = shape(x)
        _, oc, oh, ow = shape(op.results[0])
        params = {
            "n": n, "ic": ic, "ih": ih, "iw": iw, "oc": oc, "oh": oh, "ow": ow, "fh": fh, "fw": fw,
            "sh": p["stride"][0], "sw": p["stride"][1], "ph": p["padding"][0], "pw": p["padding"][1],
            "dh": p["dilation"][0], "dw": p["dilation"][1], "groups": groups,
            "flip": int(p["mode"] == enums.ConvMode.CONVOLUTION),
        }  # fmt: skip
        assert icg * groups == ic and ocg * groups == oc
        return Lowered(params, [x, w])

    def symbol(self, p: dict[str, Any]) -> str:
        words = conv_sym(p, explicit=True)  # the output size goes after the input's, before the window
        flip = "flip" if p["flip"] else ""
        return sym_join("deconv2d", *words[:4], f"{p['oh']}x{p['ow']}", *words[4:], flip, "f32")

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw, g = (
            p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw", "groups")
        )
        icg, ocg = ic // g, oc // g
        kyf = f"{fh - 1} - ky" if p["flip"] else "ky"
        kxf = f"{fw - 1} - kx" if p["flip"] else "kx"
        return f"""
static void {sym}(const float* x, const float* w, float* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(n * oc * oh * ow * icg * fh * fw // max(1, sh * sw))}
  for (int no = 0; no < {n * oc}; ++no) {{
    const int nn = no / {oc}, o = no % {oc}, gi = o / {ocg}, oo = o % {ocg};
    for (int oy = 0; oy < {oh}; ++oy) {{
      float acc[{ow}];
      for (int q = 0; q < {ow}; ++q) acc[q] = 0.f;
      for (int ky = 0; ky < {fh}; ++ky) {{
        const int t = oy + {ph} - ky * {dh};
        if (t < 0 || t % {sh}) continue;
        const int iy = t / {sh};
        if (iy >= {ih}) continue;
        for (int ci = 0; ci < {icg}; ++ci) {{
          const float* row = x + (((long)nn * {ic} + gi * {icg} + ci) * {ih} + iy) * {iw};
          const float* wk = w + (((long)gi * {icg} + ci) * {ocg} + oo) * {fh * fw} + ({kyf}) * {fw};
          for (int kx = 0; kx < {fw}; ++kx) {{
            const float wv = wk[{kxf}];
            const int off = kx * {dw} - {pw};  /* output column of input column ix: ix * sw + off */
            const int lo = off < 0 ? (-off + {sw - 1}) / {sw} : 0;
            int hi = {ow - 1} - off < 0 ? -1 : ({ow - 1} - off) / {sw};
            if (hi > {iw - 1}) hi = {iw - 1};
            for (int ix = lo; ix <= hi; ++ix) acc[ix * {sw} + off] += wv * row[ix];
          }}
        }}
      }}
      float* yo = y + ((long)no * {oh} + oy) * {ow};
      for (int q = 0; q < {ow}; ++q) yo[q] = acc[q];
    }}
  }}
}}
"""


# ----------------------------------------------------------------------------------------------
# Normalisation


class LayerNorm(Template):
    """Per row of ``normalized_size`` elements: mean and variance in double (as the reference),
    ``(x - mean) * rstd`` in float32, then the affine weight and bias; also writes mean and rstd."""
    examples = (E.layer_norm((3, 10), 10), E.layer_norm((2, 3, 7), 7, affine=False))

    family = "layer_norm"
    ops = (T.LayerNormOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.LayerNormOp)
        if not is_f32(*op.operands, *op.results) or not _plain(*op.operands):
            return None
        p = op.params()
        size = int(p["normalized_size"])
        rows = math.prod(shape(op.operands[0])) // size
        params = {"rows": rows, "size": size, "affine": int(bool(p["affine"])), "eps": float(p["eps"])}
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("layer_norm", f"r{p['rows']}", f"n{p['size']}", "affine" if p["affine"] else "",
                        f"e{p['eps']!r}", "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        rows, size = p["rows"], p["size"]
        affine = p["affine"]
        args = ["const float* x", *(["const float* gamma", "const float* beta"] if affine else []),
                "float* y", "float* mean", "float* rstd", "unsigned char* ws", "int nt"]  # fmt: skip
        scale = " * gamma[i] + beta[i]" if affine else ""
        return f"""
static void {sym}({", ".join(args)}) {{
  (void)ws;
  {_par(rows * size * 3)}
  for (long r = 0; r < {rows}; ++r) {{
    const float* xr = x + r * {size};
    float* yr = y + r * {size};
    double s = 0.0;
    for (int i = 0; i < {size}; ++i) s += xr[i];
    const double m = s / {size}.0;
    double v = 0.0;
    for (int i = 0; i < {size}; ++i) {{ const double d = (double)xr[i] - m; v += d * d; }}
    const float mf = (float)m;
    const float rs = (float)(1.0 / sqrt(v / {size}.0 + {p["eps"]!r}));
    for (int i = 0; i < {size}; ++i) yr[i] = (xr[i] - mf) * rs{scale};
    mean[r] = mf;
    rstd[r] = rs;
  }}
}}
"""


class BatchNorm(Template):
    """Inference batch normalisation over axis 1 with per-channel (scale, bias, mean, variance), as
    the reference computes it: ``(x - mean) / sqrt(var + eps) * scale + bias`` in float32."""
    examples = (E.batch_norm((2, 5, 3, 7)),)

    family = "batch_norm"
    ops = (T.BatchNormOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.BatchNormOp)
        if not is_f32(*op.operands, *op.results) or not _plain(*op.operands):
            return None
        p = op.params()
        if p["fwd_mode"] != enums.BNFwdMode.INFERENCE:
            return None
        s = shape(op.operands[0])
        params = {"outer": s[0], "c": s[1], "inner": math.prod(s[2:]), "eps": float(p["epsilon"])}
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "batch_norm", f"o{p['outer']}", f"c{p['c']}", f"i{p['inner']}", f"e{p['eps']!r}", "f32"
        )

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        o, c, i = p["outer"], p["c"], p["inner"]
        return f"""
static void {sym}(const float* x, const float* scale, const float* bias, const float* mean,
                  const float* var, float* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(o * c * i)}
  for (long t = 0; t < {o * c}; ++t) {{
    const int ch = (int)(t % {c});
    const float m = mean[ch], d = sqrtf(var[ch] + {c_float(p["eps"])}), s = scale[ch], b = bias[ch];
    const float* xp = x + t * {i};
    float* yp = y + t * {i};
    for (long k = 0; k < {i}; ++k) yp[k] = (xp[k] - m) / d * s + b;
  }}
}}
"""


# ----------------------------------------------------------------------------------------------
# Arg-reductions and padding


class ArgReduce(Template):
    """int32 index of the first largest (``argmax``) or smallest (``argmin``) value along an axis; a
    NaN wins as in numpy (the first NaN's index)."""
    examples = (E.arg_reduce((3, 7, 5), 1), E.arg_reduce((4, 9), 1, largest=False))

    family = "arg_reduce"
    ops = (T.ArgmaxOp, T.ArgminOp)
    priority = 100

    # element types it reads: C type, and whether NaN needs its clause (integers have none)
    ELEMENTS: ClassVar[dict[str, tuple[str, bool]]] = {"f32": ("float", True), "i32": ("int32_t", False)}

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ArgmaxOp | T.ArgminOp)
        elem = code(op.operands[0])
        if elem not in self.ELEMENTS or code(op.results[0]) != "i32" or not _plain(op.operands[0]):
            return None
        kind = "max" if isinstance(op, T.ArgmaxOp) else "min"
        return Lowered(
            {"kind": kind, "elem": elem, **axis_split(shape(op.operands[0]), op.params()["axis"])},
            [op.operands[0]],
        )

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("arg" + p["kind"], f"o{p['outer']}", f"a{p['axis']}", f"i{p['inner']}", p["elem"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        o, a, i = p["outer"], p["axis"], p["inner"]
        better = ">" if p["kind"] == "max" else "<"
        ctype, has_nan = self.ELEMENTS[p["elem"]]
        nan_wins = " || (e != e && best == best)" if has_nan else ""
        return f"""
static void {sym}(const {ctype}* x, int32_t* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(o * a * i)}
  for (long t = 0; t < {o * i}; ++t) {{
    const {ctype}* xp = x + (t / {i}) * {a * i} + t % {i};
    {ctype} best = xp[0];
    int32_t at = 0;
    for (int k = 1; k < {a}; ++k) {{
      const {ctype} e = xp[(long)k * {i}];
      if (e {better} best{nan_wins}) {{ best = e; at = k; }}
    }}
    y[t] = at;
  }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return "#include <stdint.h>\n"


class Pad(Template):
    """``mgb.padding`` (constant, reflect, replicate) of any rank: per output axis a table of source
    offsets (``np.pad`` of the axis' indices, -1 for the constant border), so the body is one gather."""
    examples = (
        E.pad((2, 3, 4, 5), (0, 1, 2, 0), (0, 2, 1, 3), value=1.5),
        E.pad((1, 2, 5, 6), (0, 0, 2, 1), (0, 0, 1, 2), "reflect"),
        E.pad((1, 2, 3, 4), (0, 0, 1, 2), (0, 0, 2, 1), "replicate"),
    )

    family = "pad"
    ops = (T.PaddingOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PaddingOp)
        p = op.params()
        if is_f32(*op.operands, *op.results) and _plain(*op.operands):
            elem = "f32"
        elif same_plain_type(op) and p["value"] == 0:
            elem = f"e{esize(op.operands[0])}"
        else:
            return None
        if p["mode"] != enums.PaddingMode.CONSTANT and any(
            d == 0 and f + b for d, f, b in zip(shape(op.operands[0]), p["front"], p["back"], strict=True)
        ):
            return None
        params = {
            "shape": shape(op.operands[0]), "front": tuple(p["front"]), "back": tuple(p["back"]),
            "mode": p["mode"].value, "value": float(p["value"]), "elem": elem,
        }  # fmt: skip
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        value = f"v{p['value']!r}" if p["mode"] == "constant" else ""
        return sym_join("pad", p["mode"], p["shape"], "f", p["front"], "b", p["back"], value, p["elem"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        s, front, back = p["shape"], p["front"], p["back"]
        stride = [math.prod(s[k + 1 :]) for k in range(len(s))]
        np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[p["mode"]]
        tables, out_shape = [], []
        for k, (d, f, b) in enumerate(zip(s, front, back, strict=True)):
            idx = np.arange(d, dtype=np.int64)
            src = (
                np.pad(idx, (f, b), constant_values=-1)
                if np_mode == "constant"
                else np.pad(idx, (f, b), mode=np_mode)
            )
            src = np.where(src < 0, -1, src * stride[k])
            tables.append(c_array("long", f"t{k}", src.tolist()))
            out_shape.append(len(src))
        nd = len(s)
        if p["elem"] == "f32":
            ctype, fill = "float", c_float(p["value"])
        else:
            ctype, fill = BYTES_CTYPE[int(p["elem"][1:])], "0"
        loops = [f"{'  ' * k}for (long i{k} = 0; i{k} < {d}; ++i{k})" for k, d in enumerate(out_shape)]
        out_stride = [math.prod(out_shape[k + 1 :]) for k in range(nd)]
        o = " + ".join(f"i{k} * {out_stride[k]}L" for k in range(nd)) or "0"
        neg = " | ".join(f"t{k}[i{k}]" for k in range(nd)) or "0"
        src = " + ".join(f"t{k}[i{k}]" for k in range(nd)) or "0"
        body = f"out[{o}] = ({neg}) < 0 ? ({ctype}){fill} : in[{src}];"
        return f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const {ctype}* in = (const {ctype}*)in_;
  {ctype}* out = ({ctype}*)out_;
  {chr(10).join("  " + t for t in tables).strip()}
  (void)ws; (void)nt;
{chr(10).join("  " + lp for lp in loops)}
  {"  " * nd}{body}
}}
"""

    def support(self, em: CEmitter) -> str:
        return "#include <stdint.h>\n"


# ----------------------------------------------------------------------------------------------
# Scans


class Cumsum(Template):
    """``mgb.cumsum`` of float32 or int32: per line along the axis one running sum, added element
    after element in the reference's order (from the end with ``reverse``; stored before the add
    with ``exclusive``), so float results are the reference's bit for bit; int32 sums wrap around as
    numpy's do (added as unsigned: no signed overflow in C)."""
    # every axis of a 4-D input, inclusive and exclusive, forward and reverse; int32
    examples = (
        E.cumsum((2, 5, 7, 3), 0),
        E.cumsum((2, 5, 7, 3), 1, exclusive=True),
        E.cumsum((2, 5, 7, 3), 2, reverse=True),
        E.cumsum((2, 5, 7, 3), 3, exclusive=True, reverse=True),
        E.cumsum((7, 6), 0, exclusive=True, reverse=True),
        E.cumsum((4, 21), 1, dtype="i32"),
        E.cumsum((4, 21), 0, dtype="i32"),
    )

    family = "cumsum"
    ops = (T.CumsumOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.CumsumOp)
        elem = code(op.operands[0])
        if elem not in ("f32", "i32") or not _plain(*op.operands):
            return None
        p = op.params()
        flags = {"exclusive": int(p["exclusive"]), "reverse": int(p["reverse"]), "elem": elem}
        return Lowered({**axis_split(shape(op.operands[0]), p["axis"]), **flags}, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        flags = ("excl" if p["exclusive"] else "", "rev" if p["reverse"] else "")
        return sym_join("cumsum", f"o{p['outer']}", f"a{p['axis']}", f"i{p['inner']}", *flags, p["elem"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        o, a, i = p["outer"], p["axis"], p["inner"]
        k = f"{a - 1} - j" if p["reverse"] else "j"
        if p["elem"] == "f32":
            ctype, acc, add, store = "float", "float", "s += xp[at];", "s"
        else:
            ctype, acc, add, store = "int32_t", "uint32_t", "s += (uint32_t)xp[at];", "(int32_t)s"
        step = f"yp[at] = {store}; {add}" if p["exclusive"] else f"{add} yp[at] = {store};"
        return f"""
static void {sym}(const {ctype}* x, {ctype}* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(o * a * i)}
  for (long t = 0; t < {o * i}; ++t) {{
    const long base = (t / {i}) * {a * i} + t % {i};
    const {ctype}* xp = x + base;
    {ctype}* yp = y + base;
    {acc} s = 0;
    for (long j = 0; j < {a}; ++j) {{
      const long at = ({k}) * {i}L;
      {step}
    }}
  }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return "#include <stdint.h>\n"


class IndexingOneHot(Template):
    """``mgb.indexing_one_hot`` of float32 by int32 indices: one gather per output element. An index
    outside ``[0, n)``, which MegEngine asserts against and the reference refuses, fails the run
    (``xm_index_error``: :class:`backends.c.build.RunError` naming the kernel) and gives NaN meanwhile,
    never a read out of bounds."""
    examples = tuple(E.one_hot((2, 7, 5, 3), axis) for axis in range(4)) + (E.one_hot((6, 7), 1),)

    family = "indexing_one_hot"
    ops = (T.IndexingOneHotOp,)
    priority = 100
    fails = True

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.IndexingOneHotOp)
        src, index = op.operands
        if not is_f32(src, *op.results) or code(index) != "i32" or not _plain(src, index):
            return None
        return Lowered(axis_split(shape(src), op.params()["axis"]), [src, index])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("indexing_one_hot", f"o{p['outer']}", f"a{p['axis']}", f"i{p['inner']}", "f32")

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        o, a, i = p["outer"], p["axis"], p["inner"]
        return f"""
static void {sym}(const float* x, const int32_t* index, float* y, unsigned char* ws, int nt, xm_ctx* ctx) {{
  (void)ws;
  {_par(o * i)}
  for (long t = 0; t < {o * i}; ++t) {{
    const int32_t k = index[t];
    if (k < 0 || k >= {a}) xm_index_error(ctx, "{sym}", k, {a});
    y[t] = (k >= 0 && k < {a}) ? x[(t / {i}) * {a * i} + (long)k * {i} + t % {i}] : NAN;
  }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return "#include <math.h>\n#include <stdint.h>\n"


# ----------------------------------------------------------------------------------------------
# Sorting


class SortRows(Template):
    """``mgb.argsort`` and ``mgb.topk`` of float32 or int32 rows: a stable bottom-up merge sort of
    each row's column indices (the workspace: two index buffers of one row), ordered as the
    reference's stable sort is (NaN the largest); topk keeps the first ``|k|`` (or the k-th)."""
    examples = (E.argsort((3, 9)), E.argsort((2, 7), descending=True), E.topk((4, 11), 3))

    family = "sort_rows"
    ops = (T.ArgsortOp, T.TopKOp)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ArgsortOp | T.TopKOp)
        elem = code(op.operands[0])
        if elem not in ("f32", "i32") or not _plain(*op.operands):
            return None
        rows, cols = shape(op.operands[0])
        p = op.params()
        if isinstance(op, T.ArgsortOp):
            keep, desc, kth = cols, int(bool(p["descending"])), 0
        else:
            keep, desc, kth = abs(int(p["k"])), int(int(p["k"]) < 0), int(int(p["mode"]) == 0)
        return Lowered({"rows": rows, "cols": cols, "keep": keep, "desc": desc, "kth": kth, "elem": elem},
                       [op.operands[0]])  # fmt: skip

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("sort_rows", f"r{p['rows']}", f"c{p['cols']}", f"k{p['keep']}",
                        "desc" if p["desc"] else "", "kth" if p["kth"] else "", p["elem"])  # fmt: skip

    def workspace(self, p: dict[str, Any]) -> int:
        return 2 * max(1, p["cols"]) * 4

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        rows, cols, keep = p["rows"], p["cols"], p["keep"]
        ctype = "float" if p["elem"] == "f32" else "int32_t"
        cmp = ">" if p["desc"] else "<"
        # before(a, b): a strictly precedes b; NaN is the largest value, as in the reference
        first, second = ("a", "b") if p["desc"] else ("b", "a")
        nan = f"(isnan({first}) && !isnan({second}))" if p["elem"] == "f32" else "0"
        if p["kth"]:
            store = f"vr[0] = xr[a[{keep - 1}]]; ir[0] = a[{keep - 1}];"
            vstep, istep = 1, 1
        else:
            store = f"for (long j = 0; j < {keep}; ++j) {{ vr[j] = xr[a[j]]; ir[j] = a[j]; }}"
            vstep = istep = keep
        return f"""
static int {sym}_before({ctype} a, {ctype} b) {{ return (a {cmp} b) || {nan}; }}

static void {sym}(const {ctype}* x, {ctype}* v, int32_t* idx, unsigned char* ws, int nt) {{
  (void)nt;
  int32_t* buf0 = (int32_t*)ws;
  int32_t* buf1 = buf0 + {max(1, cols)};
  for (long r = 0; r < {rows}; ++r) {{
    const {ctype}* xr = x + r * {cols}L;
    {ctype}* vr = v + r * {vstep}L;
    int32_t* ir = idx + r * {istep}L;
    int32_t* a = buf0;
    int32_t* b = buf1;
    for (int32_t j = 0; j < {cols}; ++j) a[j] = j;
    for (long w = 1; w < {cols}; w *= 2) {{
      for (long lo = 0; lo < {cols}; lo += 2 * w) {{
        long mid = lo + w < {cols} ? lo + w : {cols};
        long hi = lo + 2 * w < {cols} ? lo + 2 * w : {cols};
        long i = lo, j = mid, o = lo;
        while (i < mid && j < hi) b[o++] = {sym}_before(xr[a[j]], xr[a[i]]) ? a[j++] : a[i++];
        while (i < mid) b[o++] = a[i++];
        while (j < hi) b[o++] = a[j++];
      }}
      int32_t* t = a; a = b; b = t;
    }}
    {store}
  }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return "#include <math.h>\n#include <stdint.h>\n"


KERNEL_UNITS = (
    Resize(), Deconv2d(), LayerNorm(), BatchNorm(), ArgReduce(), Pad(), Cumsum(), IndexingOneHot(),
    SortRows()
)  # fmt: skip
