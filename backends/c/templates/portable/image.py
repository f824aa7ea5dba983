# ruff: noqa: E501  (C source lines in f-strings)
"""Portable C templates of the image ops preprocessing graphs run: ``mgb.warp_affine`` (NHWC
float32/uint8 nearest, linear, cubic; NCHW float32 linear), ``mgb.remap`` (NCHW float32/uint8),
``mgb.cvt_color`` and the bicubic mode of ``mgb.resize``.

Each repeats its reference kernel (``semantics/image_kernels.py``) operation for operation, in the
same float32 order (compiled without floating-point contraction) or the same integer fixed point,
so the results are bit-identical; weight tables and source positions that depend only on shapes
and parameters come from the reference's own functions and are folded into the specialisation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import is_f32
from backends.c.templates import Template, sym_join
from backends.c.templates.portable.generic import _par
from backends.c.templates.portable.portable import _plain, c_array, c_float
from backends.c.templates.portable.vision import HEADER, _exact
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import dtype_name
from passes.lowering.kernels import Lowered, shape
from semantics import image_kernels as K
from semantics.vision_kernels import COORD_LIMIT

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

I = enums.InterpolationMode
B = enums.BorderMode


def _dt(v: Any) -> str:
    return dtype_name(v.type.element_type)


def _ctype(dt: str) -> str:
    return "uint8_t" if dt == "uint8" else "float"


def _border_int(bmode: Any) -> str:
    """The reference's ``_coords`` of an integer ``p`` on an axis of ``n`` pixels (clamped to
    +-2^24 first), as C statements ending in ``return``."""
    lim = COORD_LIMIT
    head = f"if (p < -{lim}LL) p = -{lim}LL; else if (p > {lim}LL) p = {lim}LL;\n  "
    if bmode == B.REPLICATE:
        return head + "return p < 0 ? 0 : p >= n ? n - 1 : p;"
    if bmode in (B.REFLECT, B.REFLECT_101):
        period = "2 * n" if bmode == B.REFLECT else "2 * n - 2"
        back = "period - 1 - m" if bmode == B.REFLECT else "period - m"
        return head + (f"if (n == 1) return 0;\n  const long long period = {period};\n"
                       f"  long long m = p % period; if (m < 0) m += period;\n  return m < n ? m : {back};")  # fmt: skip
    if bmode == B.WRAP:
        return head + "long long m = p % n; if (m < 0) m += n;\n  return m;"
    return head + "return p >= 0 && p < n ? p : -1;"


def _coord_fns(sym: str, bmode: Any) -> str:
    """``{sym}_bi`` (integer coordinate) and ``{sym}_bf`` (float coordinate: NaN is -2^24, the
    integer part after clamping) border functions."""
    lim = f"{float(COORD_LIMIT)!r}f"
    return f"""
static long long {sym}_bi(long long p, long long n) {{
  {_border_int(bmode)}
}}

static long long {sym}_bf(float f, long long n) {{
  const long long p = f != f ? -{COORD_LIMIT}LL : f > {lim} ? {COORD_LIMIT}LL : f < -{lim} ? -{COORD_LIMIT}LL
                      : (long long)f;
  return {sym}_bi(p, n);
}}
"""


# ----------------------------------------------------------------------------------------------
# WarpAffine


class WarpAffine(Template):
    """Affine warp by per-image 2x3 matrices. NHWC (float32 or uint8; nearest, linear, cubic): the
    reference's fixed-point source positions (double matrix, 1/1024 then 1/32 pixel), the 1-D
    float32 weights multiplied per tap (uint8: the corrected 2^15 integer table) and the taps summed
    row by row; NCHW (float32, linear): float positions and the four-tap blend of WarpPerspective.
    Threads split output rows."""

    family = "warp_affine"
    examples = (
        E.warp_affine((2, 7, 9, 3), (6, 5)),
        E.warp_affine((1, 6, 7, 2), (8, 9), "constant", "cubic"),
        E.warp_affine((1, 6, 7, 1), (5, 8), "reflect", "nearest"),
        E.warp_affine((2, 6, 7, 3), (5, 6), "reflect_101", "linear", dtype="uint8"),
        E.warp_affine((1, 6, 7, 3), (5, 6), "wrap", "cubic", dtype="uint8"),
        E.warp_affine((1, 6, 7, 2), (5, 6), "constant", "linear", dtype="uint8"),
        E.warp_affine((2, 3, 6, 7), (5, 8), "constant", fmt="NCHW"),
        E.warp_affine((1, 2, 6, 7), (5, 8), "wrap", fmt="NCHW"),
    )
    ops = (T.WarpAffineOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.WarpAffineOp)
        dt = _dt(op.operands[0])
        if dt not in ("float32", "uint8") or not is_f32(op.operands[1]) or not _plain(*op.operands):
            return None
        p = op.params()
        nchw = p["format"] == enums.Format.NCHW
        s, o = shape(op.operands[0]), shape(op.results[0])
        n, c, ih, iw = s if nchw else (s[0], s[3], s[1], s[2])
        oh, ow = (o[2], o[3]) if nchw else (o[1], o[2])
        params = {"dt": dt, "nchw": int(nchw), "n": n, "c": c, "ih": ih, "iw": iw, "oh": oh, "ow": ow,
                  "imode": enums.number(p["imode"]), "bmode": enums.number(p["bmode"]),
                  "border_val": float(p["border_val"])}  # fmt: skip
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        bmode = list(B)[p["bmode"]].value
        bv = c_float(p["border_val"]).rstrip("f") if list(B)[p["bmode"]] == B.CONSTANT else ""
        return sym_join("warp_affine", "nchw" if p["nchw"] else "nhwc", list(I)[p["imode"]].value, bmode,
                        f"bv{bv}" if bv else "", f"n{p['n']}", f"c{p['c']}", f"{p['ih']}x{p['iw']}", "to",
                        f"{p['oh']}x{p['ow']}", "u8" if p["dt"] == "uint8" else "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        if p["nchw"]:
            return self._render_nchw(sym, p)
        imode, bmode = list(I)[p["imode"]], list(B)[p["bmode"]]
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        u8 = p["dt"] == "uint8"
        ct = _ctype(p["dt"])
        constant = bmode == B.CONSTANT
        # uint8: the reference's border value (truncated, wrapped to 8 bits)
        cval = str(K.u8_border(p["border_val"])) if u8 else c_float(p["border_val"])
        near = imode == I.NEAREST
        rd = K.AB_SCALE // 2 if near else K.AB_SCALE // K.INTER_TAB_SIZE // 2
        shift = K.AB_BITS if near else K.AB_BITS - K.INTER_BITS
        at = (f"(yy < 0 || xx < 0 ? ({ct}){cval} : src[(yy * {iw} + xx) * {c} + ch])" if constant
              else f"src[(yy * {iw} + xx) * {c} + ch]")  # fmt: skip
        tables = ""
        if near:
            body = f"""
        const long long yy = {sym}_bi(Y, {ih}), xx = {sym}_bi(X, {iw});
        for (int ch = 0; ch < {c}; ++ch) yo[ch] = {at};"""
        else:
            k = 2 if imode == I.LINEAR else 4
            first = 0 if k == 2 else 1
            if u8:
                tab = K.warp_table_int(imode).reshape(-1)
                tables = c_array("int32_t", f"{sym}_wi", tab.tolist())
                acc_t, acc0 = "long long", "0"
                weight = f"(long long){sym}_wi[(((long)fy * {K.INTER_TAB_SIZE} + fx) * {k} + i) * {k} + j]"
                store = f"acc = (acc + {1 << (K.COEF_BITS - 1)}) >> {K.COEF_BITS}; yo[ch] = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);"  # noqa: E501
            else:
                tab = K.weights_1d(imode).reshape(-1)
                tables = c_array("float", f"{sym}_w1", tab.tolist())
                acc_t, acc0 = "float", "0.0f"
                weight = f"({sym}_w1[fy * {k} + i] * {sym}_w1[fx * {k} + j])"
                store = "yo[ch] = acc;"
                if constant:
                    store = (f"yo[ch] = (x0 >= {iw} || x0 + {k} <= 0 || y0 >= {ih} || y0 + {k} <= 0) "
                             f"? {cval} : acc;")  # fmt: skip
            body = f"""
        const long long sx = X >> {K.INTER_BITS}, sy = Y >> {K.INTER_BITS};
        const int fx = (int)(X & {K.INTER_TAB_SIZE - 1}), fy = (int)(Y & {K.INTER_TAB_SIZE - 1});
        const long long x0 = sx - {first}, y0 = sy - {first};
        long long rows[{k}], cols[{k}];
        for (int i = 0; i < {k}; ++i) {{ rows[i] = {sym}_bi(y0 + i, {ih}); cols[i] = {sym}_bi(x0 + i, {iw}); }}
        for (int ch = 0; ch < {c}; ++ch) {{
          {acc_t} acc = {acc0};
          for (int i = 0; i < {k}; ++i) {{
            const long long yy = rows[i];
            for (int j = 0; j < {k}; ++j) {{
              const long long xx = cols[j];
              acc = acc + ({acc_t}){at} * {weight};
            }}
          }}
          {store}
        }}"""
        return _exact(f"""
{tables}
{_coord_fns(sym, bmode)}
static long long {sym}_sr(double v) {{
  /* saturate_cast<int>: NaN to INT32_MIN, ties to even, saturated */
  if (v != v) return {K.INT32_MIN}LL;
  v = nearbyint(v);
  return v < {float(K.INT32_MIN)!r} ? {K.INT32_MIN}LL : v > {float(K.INT32_MAX)!r} ? {K.INT32_MAX}LL : (long long)v;
}}

static void {sym}(const {ct}* x, const float* mat, {ct}* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(n * oh * ow * c * 16)}
  for (long t = 0; t < {n * oh}; ++t) {{
    const long b = t / {oh};
    const long r = t % {oh};
    const float* mm = mat + b * 6;
    const double m0 = mm[0], m1 = mm[1], m2 = mm[2], m3 = mm[3], m4 = mm[4], m5 = mm[5];
    const {ct}* src = x + b * {ih * iw * c}L;
    const long long X0 = {sym}_sr((m1 * (double)r + m2) * {K.AB_SCALE}.0) + {rd};
    const long long Y0 = {sym}_sr((m4 * (double)r + m5) * {K.AB_SCALE}.0) + {rd};
    for (long s = 0; s < {ow}; ++s) {{
      const long long X = (X0 + {sym}_sr(m0 * (double)s * {K.AB_SCALE}.0)) >> {shift};
      const long long Y = (Y0 + {sym}_sr(m3 * (double)s * {K.AB_SCALE}.0)) >> {shift};
      {ct}* yo = y + ((b * {oh} + r) * {ow} + s) * {c}L;
      {body.strip()}
    }}
  }}
}}
""")

    def _render_nchw(self, sym: str, p: dict[str, Any]) -> str:
        bmode = list(B)[p["bmode"]]
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        bv = c_float(p["border_val"])
        constant = bmode == B.CONSTANT
        at = (f"((hh) < 0 || (ww) < 0 ? {bv} : xp[(hh) * {iw} + (ww)])" if constant
              else f"xp[(hh) * {iw} + (ww)]")  # fmt: skip
        store = f"isfinite(val) ? val : {bv}" if constant else "val"
        return _exact(f"""
{_coord_fns(sym, bmode)}
static void {sym}(const float* x, const float* mat, float* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(n * oh * ow * c * 8)}
  for (long t = 0; t < {n * oh}; ++t) {{
    const long b = t / {oh};
    const long r = t % {oh};
    const float* mm = mat + b * 6;
    const float* xs = x + b * {c * ih * iw}L;
    for (long s = 0; s < {ow}; ++s) {{
      const float fs = (float)s, fr = (float)r;
      /* WarpPerspective with the row (0, 0, 1): its denominator is exactly 1 */
      const float aw = mm[0] * fs + mm[1] * fr + mm[2];
      const float ah = mm[3] * fs + mm[4] * fr + mm[5];
      const float fw = floorf(aw), fh = floorf(ah);
      const long long w0 = {sym}_bf(fw, {iw}), w1 = {sym}_bf(fw + 1.0f, {iw});
      const long long h0 = {sym}_bf(fh, {ih}), h1 = {sym}_bf(fh + 1.0f, {ih});
      const float bw = aw - fw, bh = ah - fh;
      for (int ch = 0; ch < {c}; ++ch) {{
        const float* xp = xs + (long)ch * {ih * iw};
#define AT(hh, ww) {at}
        const float val = AT(h0, w0) * (1.0f - bw) * (1.0f - bh) + AT(h0, w1) * bw * (1.0f - bh)
                          + AT(h1, w0) * (1.0f - bw) * bh + AT(h1, w1) * bw * bh;
#undef AT
        y[((b * {c} + ch) * {oh} + r) * {ow}L + s] = {store};
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# Remap


class Remap(Template):
    """Remap of NCHW float32 or uint8 images by a float32 (N, OH, OW, 2) map: the reference's
    float32 floor (nearest: ties-to-even rounding), border mapping and four-tap blend; uint8
    rounded half away from zero. Threads split output rows."""

    family = "remap"
    examples = (
        E.remap((2, 3, 6, 7), (5, 4)),
        E.remap((1, 2, 6, 7), (4, 5), "constant", "nearest"),
        E.remap((1, 2, 5, 6), (4, 5), "reflect"),
        E.remap((1, 2, 5, 6), (4, 5), "reflect_101", dtype="uint8"),
        E.remap((1, 1, 5, 6), (3, 5), "wrap", "nearest", dtype="uint8"),
        E.remap((1, 2, 5, 6), (4, 5), "constant", dtype="uint8"),
    )
    ops = (T.RemapOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.RemapOp)
        dt = _dt(op.operands[0])
        if dt not in ("float32", "uint8") or not is_f32(op.operands[1]) or not _plain(*op.operands):
            return None
        p = op.params()
        n, c, ih, iw = shape(op.operands[0])
        _, oh, ow, _ = shape(op.operands[1])
        params = {"dt": dt, "n": n, "c": c, "ih": ih, "iw": iw, "oh": oh, "ow": ow,
                  "imode": enums.number(p["imode"]), "bmode": enums.number(p["bmode"]),
                  "scalar": float(p["scalar"])}  # fmt: skip
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        bmode = list(B)[p["bmode"]]
        sc = c_float(p["scalar"]).rstrip("f") if bmode == B.CONSTANT else ""
        return sym_join("remap", list(I)[p["imode"]].value, bmode.value, f"sc{sc}" if sc else "", f"n{p['n']}",
                        f"c{p['c']}", f"{p['ih']}x{p['iw']}", "to", f"{p['oh']}x{p['ow']}",
                        "u8" if p["dt"] == "uint8" else "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        bmode = list(B)[p["bmode"]]
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        ct = _ctype(p["dt"])
        sc = c_float(float(K.remap_scalar(p["scalar"], np.dtype(p["dt"]))))
        at = (f"((hh) < 0 || (ww) < 0 ? {sc} : (float)xp[(hh) * {iw} + (ww)])" if bmode == B.CONSTANT
              else f"(float)xp[(hh) * {iw} + (ww)]")  # fmt: skip
        if list(I)[p["imode"]] == I.NEAREST:
            taps = f"""const long long hn = {sym}_bf(nearbyintf(cy), {ih}), wn = {sym}_bf(nearbyintf(cx), {iw});"""
            value = "AT(hn, wn)"
        else:
            taps = f"""const float fx = floorf(cx), fy = floorf(cy);
      const long long h0 = {sym}_bf(fy, {ih}), h1 = {sym}_bf(fy + 1.0f, {ih});
      const long long w0 = {sym}_bf(fx, {iw}), w1 = {sym}_bf(fx + 1.0f, {iw});
      const float u = cy - fy, v = cx - fx;"""
            value = ("AT(h0, w0) * (1.0f - v) * (1.0f - u) + AT(h0, w1) * (1.0f - u) * v "
                     "+ AT(h1, w0) * (1.0f - v) * u + AT(h1, w1) * u * v")  # fmt: skip
        if p["dt"] == "uint8":
            store = ("const float rr = truncf(val + copysignf(0.5f, val));\n"
                     "        yo[(long)ch * " + str(oh * ow) + "] = (uint8_t)(rr < 0.0f ? 0.0f : rr > 255.0f ? 255.0f : rr);")  # fmt: skip  # noqa: E501
        else:
            store = f"yo[(long)ch * {oh * ow}] = val;"
        return _exact(f"""
{_coord_fns(sym, bmode)}
static void {sym}(const {ct}* x, const float* map, {ct}* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(n * oh * ow * c * 8)}
  for (long t = 0; t < {n * oh}; ++t) {{
    const long b = t / {oh};
    const long r = t % {oh};
    const {ct}* xs = x + b * {c * ih * iw}L;
    for (long s = 0; s < {ow}; ++s) {{
      const float* mp = map + (t * {ow} + s) * 2;
      const float cx = mp[0], cy = mp[1];
      {taps}
      {ct}* yo = y + b * {c * oh * ow}L + r * {ow} + s;
      for (int ch = 0; ch < {c}; ++ch) {{
        const {ct}* xp = xs + (long)ch * {ih * iw};
#define AT(hh, ww) {at}
        const float val = {value};
#undef AT
        {store}
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# CvtColor

M = enums.CvtColorMode


def _cvt_body(mode: Any, u8: bool) -> str:
    """C statements from ``const T* s`` (one pixel) to ``T* d``; the reference's formulas."""
    if mode == M.GRAY2RGB:
        return "d[0] = s[0]; d[1] = s[0]; d[2] = s[0];"
    if mode == M.RGBA2RGB:
        return "d[0] = s[0]; d[1] = s[1]; d[2] = s[2];"
    if mode in (M.BGR2RGB, M.RGB2BGR, M.RGBA2BGR):
        return "d[0] = s[2]; d[1] = s[1]; d[2] = s[0];"
    if u8:
        sat = "(uint8_t)(({v}) < 0 ? 0 : ({v}) > 255 ? 255 : ({v}))"
        gray = f"(r * {K.Y_R} + g * {K.Y_G} + b * {K.Y_B} + {K.HALF}) >> {K.SHIFT}"
        if mode in (M.RGB2GRAY, M.RGBA2GRAY, M.BGR2GRAY):
            r, b = ("s[2]", "s[0]") if mode == M.BGR2GRAY else ("s[0]", "s[2]")
            return f"const long long r = {r}, g = s[1], b = {b};\n  const long long yv = {gray};\n  d[0] = {sat.format(v='yv')};"  # noqa: E501
        if mode == M.RGB2YUV:
            delta = (128 << K.SHIFT) + K.HALF
            return (f"const long long b = s[0], g = s[1], r = s[2];\n  const long long yv = {gray};\n"
                    f"  const long long u = ((b - yv) * {K.U_B} + {delta}) >> {K.SHIFT};\n"
                    f"  const long long v = ((r - yv) * {K.V_R} + {delta}) >> {K.SHIFT};\n"
                    f"  d[0] = {sat.format(v='yv')}; d[1] = {sat.format(v='u')}; d[2] = {sat.format(v='v')};")  # fmt: skip
        return (f"const long long yv = s[0], u = (long long)s[1] - 128, v = (long long)s[2] - 128;\n"
                f"  const long long b = yv + (({K.B_U} * u + {K.HALF}) >> {K.SHIFT});\n"
                f"  const long long g = yv + (({K.G_V} * v + {K.G_U} * u + {K.HALF}) >> {K.SHIFT});\n"
                f"  const long long r = yv + (({K.R_V} * v + {K.HALF}) >> {K.SHIFT});\n"
                f"  d[0] = {sat.format(v='b')}; d[1] = {sat.format(v='g')}; d[2] = {sat.format(v='r')};")  # fmt: skip
    gray = "{0} * 0.114f + s[1] * 0.587f + {1} * 0.299f"
    if mode == M.RGB2GRAY:
        return "d[0] = " + gray.format("s[2]", "s[0]") + ";"
    if mode == M.BGR2GRAY:
        return "d[0] = " + gray.format("s[0]", "s[2]") + ";"
    if mode == M.RGB2YUV:
        return ("const float yv = " + gray.format("s[0]", "s[2]") + ";\n"
                "  d[0] = yv; d[1] = (s[0] - yv) * 0.492f + 0.5f; d[2] = (s[2] - yv) * 0.877f + 0.5f;")  # fmt: skip
    return ("const float yv = s[0], u = s[1] - 0.5f, v = s[2] - 0.5f;\n"
            "  d[0] = yv + u * 2.032f; d[1] = yv + (u * -0.395f + v * -0.581f); d[2] = yv + v * 1.14f;")  # fmt: skip


class CvtColor(Template):
    """Per-pixel colour conversion of NHWC float32 / uint8 images, in the reference's float32
    order or 14-bit fixed point. Threads split the pixels."""

    family = "cvt_color"
    examples = (
        E.cvt_color((2, 3, 5, 3), "RGB2GRAY"),
        E.cvt_color((1, 3, 5, 3), "BGR2GRAY"),
        E.cvt_color((1, 3, 5, 3), "RGB2YUV"),
        E.cvt_color((1, 3, 5, 3), "YUV2RGB"),
        E.cvt_color((1, 3, 5, 1), "GRAY2RGB"),
        E.cvt_color((1, 3, 5, 3), "RGB2YUV", dtype="uint8"),
        E.cvt_color((1, 3, 5, 3), "YUV2RGB", dtype="uint8"),
        E.cvt_color((1, 3, 5, 4), "RGBA2GRAY", dtype="uint8"),
        E.cvt_color((1, 3, 5, 4), "RGBA2BGR", dtype="uint8"),
        E.cvt_color((1, 3, 5, 3), "BGR2GRAY", dtype="uint8"),
    )
    ops = (T.CvtColorOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.CvtColorOp)
        dt = _dt(op.operands[0])
        if dt not in ("float32", "uint8") or not _plain(*op.operands):
            return None
        s, o = shape(op.operands[0]), shape(op.results[0])
        params = {"dt": dt, "mode": enums.number(op.params()["mode"]), "pixels": s[0] * s[1] * s[2],
                  "cin": s[3], "cout": o[3]}  # fmt: skip
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("cvt_color", list(M)[p["mode"]].value, f"px{p['pixels']}",
                        "u8" if p["dt"] == "uint8" else "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        ct = _ctype(p["dt"])
        body = _cvt_body(list(M)[p["mode"]], p["dt"] == "uint8")
        return _exact(f"""
static void {sym}(const {ct}* x, {ct}* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(p["pixels"] * 8)}
  for (long t = 0; t < {p["pixels"]}; ++t) {{
    const {ct}* s = x + t * {p["cin"]};
    {ct}* d = y + t * {p["cout"]};
    {body}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# Resize, bicubic


class ResizeCubic(Template):
    """Bicubic NCHW float32 resize: per output the reference's 16 taps (edge rows and columns
    repeated) summed row by row as ``v * wy * wx`` from constant tables. Threads split rows."""

    family = "resize_cubic"
    examples = (E.resize((1, 3, 5, 7), (9, 4), "cubic"), E.resize((2, 2, 6, 5), (3, 10), "cubic"))
    ops = (T.ResizeOp,)
    priority = 110

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ResizeOp)
        p = op.params()
        if (p["imode"] != I.CUBIC or p["format"] != enums.Format.NCHW or not is_f32(*op.operands, *op.results)
                or not _plain(*op.operands)):  # fmt: skip
            return None
        n, c, ih, iw = shape(op.operands[0])
        _, _, oh, ow = shape(op.results[0])
        return Lowered({"nc": n * c, "ih": ih, "iw": iw, "oh": oh, "ow": ow}, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "resize_cubic", f"nc{p['nc']}", f"{p['ih']}x{p['iw']}", "to", f"{p['oh']}x{p['ow']}", "f32"
        )

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        nc, ih, iw, oh, ow = (p[k] for k in ("nc", "ih", "iw", "oh", "ow"))
        y0, wy = K.cubic_taps(ih, oh)
        x0, wx = K.cubic_taps(iw, ow)
        tables = "\n".join([
            c_array("int", f"{sym}_y0", y0.tolist()), c_array("int", f"{sym}_x0", x0.tolist()),
            c_array("float", f"{sym}_wy", wy.reshape(-1).tolist()),
            c_array("float", f"{sym}_wx", wx.reshape(-1).tolist()),
        ])  # fmt: skip
        return _exact(f"""
{tables}
static void {sym}(const float* x, float* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(nc * oh * ow * 32)}
  for (long t = 0; t < {nc * oh}; ++t) {{
    const long plane = t / {oh};
    const int r = (int)(t % {oh});
    const float* xp = x + plane * {ih * iw}L;
    float* yo = y + t * {ow}L;
    for (int q = 0; q < {ow}; ++q) {{
      float acc = 0.0f;
      for (int i = 0; i < 4; ++i) {{
        int yy = {sym}_y0[r] + i;
        yy = yy < 0 ? 0 : yy > {ih - 1} ? {ih - 1} : yy;
        const float wyv = {sym}_wy[r * 4 + i];
        for (int j = 0; j < 4; ++j) {{
          int xx = {sym}_x0[q] + j;
          xx = xx < 0 ? 0 : xx > {iw - 1} ? {iw - 1} : xx;
          acc = acc + xp[(long)yy * {iw} + xx] * wyv * {sym}_wx[q * 4 + j];
        }}
      }}
      yo[q] = acc;
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# DeformableConv


class DeformableConv(Template):
    """Deformable convolution (DCNv2), NCHW float32, any groups, deformable groups, stride, padding,
    dilation: per output pixel the reference's modulated samples of every (input channel, tap)
    (float32 positions, four zero-bordered corners summed in order, times the mask), then each
    output channel sums its (input channel, tap) products in that order from 0. Threads split
    output rows."""

    family = "deformable_conv"
    examples = (
        E.deformable_conv((2, 4, 7, 8), 6, 3, dg=2),
        E.deformable_conv((1, 4, 7, 8), 6, (3, 2), stride=2, pad=(1, 2), dil=(1, 2), groups=2),
    )
    ops = (T.DeformableConvOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.DeformableConvOp)
        if not is_f32(*op.operands, *op.results) or not _plain(*op.operands):
            return None
        p = op.params()
        n, c, ih, iw = shape(op.operands[0])
        f = shape(op.operands[1])
        groups = f[0] if p["sparse"] == enums.ConvSparse.GROUP else 1
        fh, fw = f[-2:]
        _, oc, oh, ow = shape(op.results[0])
        dg = shape(op.operands[2])[1] // (2 * fh * fw)
        params = {"n": n, "c": c, "ih": ih, "iw": iw, "oc": oc, "oh": oh, "ow": ow, "fh": fh, "fw": fw,
                  "groups": groups, "dg": dg, "stride": tuple(p["stride"]), "pad": tuple(p["padding"]),
                  "dil": tuple(p["dilation"])}  # fmt: skip
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("deformable_conv", f"n{p['n']}", f"c{p['c']}", f"{p['ih']}x{p['iw']}", f"oc{p['oc']}",
                        "k", (p["fh"], p["fw"]), f"g{p['groups']}", f"dg{p['dg']}", "s", p["stride"], "p", p["pad"],
                        "d", p["dil"], "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oc, oh, ow, fh, fw = (
            p[k] for k in ("n", "c", "ih", "iw", "oc", "oh", "ow", "fh", "fw")
        )
        (sh, sw), (ph, pw), (dh, dw) = p["stride"], p["pad"], p["dil"]
        k = fh * fw
        groups, dg = p["groups"], p["dg"]
        icpg, ocpg, cpdg = c // groups, oc // groups, c // dg
        return _exact(f"""
static void {sym}(const float* x, const float* wt, const float* off, const float* mask, float* y,
                  unsigned char* ws, int nt) {{
  (void)ws;
  {_par(n * oh * ow * (c * k * 8 + oc * icpg * k))}
  for (long t = 0; t < {n * oh}; ++t) {{
    const long b = t / {oh};
    const long r = t % {oh};
    float cols[{c * k}];
    for (long s = 0; s < {ow}; ++s) {{
      for (int ch = 0; ch < {c}; ++ch) {{
        const int g = ch / {cpdg};
        const float* plane = x + (b * {c} + ch) * {ih * iw}L;
        for (int q = 0; q < {k}; ++q) {{
          const long pix = r * {ow} + s;
          const float dy = off[((b * {2 * dg * k} + (long)(g * {k} + q) * 2) * {oh * ow}) + pix];
          const float dx = off[((b * {2 * dg * k} + (long)(g * {k} + q) * 2 + 1) * {oh * ow}) + pix];
          const float hh = (float)(r * {sh} - {ph} + (q / {fw}) * {dh}) + dy;
          const float ww = (float)(s * {sw} - {pw} + (q % {fw}) * {dw}) + dx;
          const int inside = hh > -1.0f && ww > -1.0f && hh < {float(ih)!r}f && ww < {float(iw)!r}f;
          const float h0 = floorf(hh), w0 = floorf(ww);
          const float lh = hh - h0, lw = ww - w0, uh = 1.0f - lh, uw = 1.0f - lw;
          const long r0 = inside ? (long)h0 : 0, c0 = inside ? (long)w0 : 0;  /* no cast of NaN or huge values */
          float val = 0.0f;
#define CORNER(dr, dc, wgt) {{ \
            const long rr = r0 + (dr), cc = c0 + (dc); \
            const int ok = inside && rr >= 0 && cc >= 0 && rr < {ih} && cc < {iw}; \
            val = val + (wgt) * (ok ? plane[rr * {iw} + cc] : 0.0f); }}
          CORNER(0, 0, uh * uw) CORNER(0, 1, uh * lw) CORNER(1, 0, lh * uw) CORNER(1, 1, lh * lw)
#undef CORNER
          cols[ch * {k} + q] = val * mask[(b * {dg * k} + (long)g * {k} + q) * {oh * ow} + pix];
        }}
      }}
      for (int o = 0; o < {oc}; ++o) {{
        const int g = o / {ocpg};
        const float* wo = wt + (long)o * {icpg * k};
        const float* cg = cols + (long)g * {icpg * k};
        float acc = 0.0f;
        for (int i = 0; i < {icpg * k}; ++i) acc = acc + cg[i] * wo[i];
        y[((b * {oc} + o) * {oh} + r) * {ow}L + s] = acc;
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# RegionRestrictedConvolution


class RegionRestrictedConv(Template):
    """Region-restricted grouped convolution, NCHW float32 with int32 or uint8 region ids: each
    output sums its (fh, fw, input channel) taps in that order from 0, a tap of another region
    (or in the padding) reading 0. Threads split output rows."""

    family = "region_restricted_conv"
    examples = (
        E.region_restricted_conv((2, 4, 7, 8), 4, 3, 4, pad=1),
        E.region_restricted_conv((1, 4, 7, 8), 6, 3, 2, pad=1, stride=2, dil=(2, 1), dtype="uint8"),
    )
    ops = (T.RegionRestrictedConvOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.RegionRestrictedConvOp)
        if not is_f32(op.operands[0], op.operands[1], *op.results) or not _plain(*op.operands):
            return None
        p = op.params()
        n, c, ih, iw = shape(op.operands[0])
        groups, ocpg, icpg, fh, fw = shape(op.operands[1])
        _, _, oh, ow = shape(op.results[0])
        params = {"n": n, "c": c, "ih": ih, "iw": iw, "oh": oh, "ow": ow, "groups": groups, "ocpg": ocpg,
                  "icpg": icpg, "fh": fh, "fw": fw, "stride": tuple(p["stride"]), "pad": tuple(p["padding"]),
                  "dil": tuple(p["dilation"]), "rt": _dt(op.operands[2])}  # fmt: skip
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("region_restricted_conv", f"n{p['n']}", f"c{p['c']}", f"{p['ih']}x{p['iw']}",
                        f"g{p['groups']}", f"o{p['ocpg']}", "k", (p["fh"], p["fw"]), "s", p["stride"], "p", p["pad"],
                        "d", p["dil"], "u8" if p["rt"] == "uint8" else "i32", "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        groups, ocpg, icpg, fh, fw = (p[k] for k in ("groups", "ocpg", "icpg", "fh", "fw"))
        (sh, sw), (ph, pw), (dh, dw) = p["stride"], p["pad"], p["dil"]
        rt = "uint8_t" if p["rt"] == "uint8" else "int32_t"
        oc = groups * ocpg
        return _exact(f"""
static void {sym}(const float* x, const float* wt, const {rt}* rin, const {rt}* rout, float* y,
                  unsigned char* ws, int nt) {{
  (void)ws;
  {_par(n * oc * oh * ow * icpg * fh * fw)}
  for (long t = 0; t < {n * oh}; ++t) {{
    const long b = t / {oh};
    const long r = t % {oh};
    for (long s = 0; s < {ow}; ++s) {{
      const {rt} region = rout[(b * {oh} + r) * {ow} + s];
      for (int o = 0; o < {oc}; ++o) {{
        const int g = o / {ocpg};
        const float* wo = wt + (long)o * {icpg * fh * fw};
        float acc = 0.0f;
        for (int a = 0; a < {fh}; ++a) {{
          const long yy = r * {sh} - {ph} + a * {dh};
          for (int q = 0; q < {fw}; ++q) {{
            const long xx = s * {sw} - {pw} + q * {dw};
            const int ok = yy >= 0 && yy < {ih} && xx >= 0 && xx < {iw}
                           && rin[(b * {ih} + yy) * {iw} + xx] == region;
            for (int i = 0; i < {icpg}; ++i) {{
              const float v = ok ? x[((b * {c} + g * {icpg} + i) * {ih} + yy) * {iw}L + xx] : 0.0f;
              acc = acc + v * wo[(i * {fh} + a) * {fw} + q];
            }}
          }}
        }}
        y[((b * {oc} + o) * {oh} + r) * {ow}L + s] = acc;
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# DeformablePSROIPooling


class DeformablePSROIPooling(Template):
    """Deformable PSRoI pooling, NCHW float32: per roi the reference's float32 geometry (pixels
    rounded half away from zero, bins moved by the roi's trans row on the part grid), per bin its
    in-image samples' floor/ceil bilinear values summed in order and divided by their count.
    A roi's batch index outside the input fails the run naming the kernel. Threads split rois."""

    family = "deformable_psroi_pooling"
    examples = (
        E.deformable_psroi_pooling((2, 3, 9, 10), 3, 3, part=3, samples=2),
        E.deformable_psroi_pooling((2, 2, 8, 7), 2, 4, part=2, samples=3, no_trans=True),
    )
    ops = (T.DeformablePSROIPoolingOp,)
    priority = 100
    fails = True

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.DeformablePSROIPoolingOp)
        if not is_f32(*op.operands, *op.results) or not _plain(*op.operands):
            return None
        p = op.params()
        n, c, h, w = shape(op.operands[0])
        k = shape(op.operands[1])[0]
        params = {"n": n, "c": c, "h": h, "w": w, "k": k, **{key: int(p[key]) for key in
                  ("pooled_h", "pooled_w", "part_size", "sample_per_part")},
                  "no_trans": int(bool(p["no_trans"])), "ss": float(p["spatial_scale"]),
                  "ts": float(p["trans_std"])}  # fmt: skip
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("deformable_psroi_pooling", f"n{p['n']}", f"c{p['c']}", f"{p['h']}x{p['w']}", f"k{p['k']}",
                        "to", (p["pooled_h"], p["pooled_w"]), f"part{p['part_size']}", f"s{p['sample_per_part']}",
                        "sc" + c_float(p["ss"]).rstrip("f"), "ts" + c_float(p["ts"]).rstrip("f"),
                        "notrans" if p["no_trans"] else "", "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        c, h, w, k = p["c"], p["h"], p["w"], p["k"]
        ph_n, pw_n, part, spp = p["pooled_h"], p["pooled_w"], p["part_size"], p["sample_per_part"]
        ss, ts = c_float(p["ss"]), c_float(p["ts"])
        if p["no_trans"]:
            trans = "const float tx = 0.0f, ty = 0.0f;"
        else:
            trans = (f"const float tx = trans[((rk * 2) * {part} + part_h) * {part} + part_w] * {ts};\n"
                     f"        const float ty = trans[((rk * 2 + 1) * {part} + part_h) * {part} + part_w] * {ts};")  # fmt: skip
        return _exact(f"""
static void {sym}(const float* x, const float* rois, const float* trans, float* y, float* cnt,
                  unsigned char* ws, int nt, xm_ctx* ctx) {{
  (void)ws; (void)trans;
  {_par(k * c * ph_n * pw_n * spp * spp * 8)}
  for (long rk = 0; rk < {k}; ++rk) {{
    const float* roi = rois + rk * 5;
    const long b = (long)roi[0];
    if (b < 0 || b >= {p["n"]}) {{ xm_index_error(ctx, "{sym}", b, {p["n"]}); continue; }}
    const float sw = roundf(roi[1]) * {ss} - 0.5f, sh = roundf(roi[2]) * {ss} - 0.5f;
    const float ew = (roundf(roi[3]) + 1.0f) * {ss} - 0.5f, eh = (roundf(roi[4]) + 1.0f) * {ss} - 0.5f;
    const float dw_ = ew - sw, dh_ = eh - sh;
    const float rw = 0.1f > dw_ ? 0.1f : dw_, rh = 0.1f > dh_ ? 0.1f : dh_;
    const float bw = rw / {float(pw_n)!r}f, bh = rh / {float(ph_n)!r}f;
    const float sbw = bw / {float(spp)!r}f, sbh = bh / {float(spp)!r}f;
    const float* plane0 = x + b * {c * h * w}L;
    for (int ph = 0; ph < {ph_n}; ++ph) {{
      for (int pw = 0; pw < {pw_n}; ++pw) {{
        const long part_h = (long)floorf((float)ph / {float(ph_n)!r}f * {float(part)!r}f);
        const long part_w = (long)floorf((float)pw / {float(pw_n)!r}f * {float(part)!r}f);
        {trans}
        const float wstart = (float)pw * bw + sw + tx * rw, hstart = (float)ph * bh + sh + ty * rh;
        for (int ch = 0; ch < {c}; ++ch) {{
          const float* plane = plane0 + (long)ch * {h * w};
          float acc = 0.0f;
          int count = 0;
          for (int ih = 0; ih < {spp}; ++ih) {{
            for (int iw = 0; iw < {spp}; ++iw) {{
              float sx = wstart + (float)iw * sbw, sy = hstart + (float)ih * sbh;
              if (sx < -0.5f || sx > {w - 0.5!r}f || sy < -0.5f || sy > {h - 0.5!r}f) continue;
              sx = 0.0f > sx ? 0.0f : sx;
              sx = {float(w - 1)!r}f < sx ? {float(w - 1)!r}f : sx;
              sy = 0.0f > sy ? 0.0f : sy;
              sy = {float(h - 1)!r}f < sy ? {float(h - 1)!r}f : sy;
              const long x1 = (long)floorf(sx), x2 = (long)ceilf(sx), y1 = (long)floorf(sy), y2 = (long)ceilf(sy);
              const float dx = sx - (float)x1, dy = sy - (float)y1;
              float val = (1.0f - dx) * (1.0f - dy) * plane[y1 * {w} + x1];
              val = val + (1.0f - dx) * dy * plane[y2 * {w} + x1];
              val = val + dx * (1.0f - dy) * plane[y1 * {w} + x2];
              val = val + dx * dy * plane[y2 * {w} + x2];
              acc = acc + val;
              ++count;
            }}
          }}
          const long at = ((rk * {c} + ch) * {ph_n} + ph) * {pw_n} + pw;
          y[at] = count ? acc / (float)count : 0.0f;
          cnt[at] = (float)count;
        }}
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


KERNEL_UNITS = (
    WarpAffine(), Remap(), CvtColor(), ResizeCubic(), DeformableConv(), RegionRestrictedConv(),
    DeformablePSROIPooling(),
)  # fmt: skip
