"""int8 CUDA kernels on the NVIDIA blocked layouts (NCHW4, NCHW32, CHWN4, NCHW64 for int8).

Every activation and filter offset comes from ``dialects/layout.py`` (:func:`offset_expr`: the
layout's physical dims over the physical shape), so one kernel family serves every blocked layout:

* ``conv2d_blocked_q8`` (ISA ``dp4a``): dense or grouped convolution, four channels per ``__dp4a``
  (the layouts keep four consecutive channels in one aligned 32-bit word in activations and filters);
* ``conv2d_nchw32_mma`` (ISA ``mma``): dense NCHW32 convolution as an implicit GEMM on int8 tensor
  cores (WMMA m16n16k16, int32 accumulators), one warp per 16 pixels x 16 output channels;
* ``pool2d_blocked_q8`` (ISA ``generic``): max / average pooling.

Epilogues repeat ``backends/reference/quant_kernels.py`` with the C backends' one definition of
requantization (:mod:`backends.c.templates.portable.requant`, ``__host__ __device__`` under nvcc): ``z`` joins
the int32 accumulator at its scale; an int8 result is the conv-bias post-process (accumulator and
float32 bias scaled separately, RELU / h-swish, times ``1.0f / s_out``, rounded ``trunc(y ± 0.5)``),
an int32 or float result adds the int32 bias and applies RELU on integers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation, SSAValue

import backends.c.examples as E
from backends.c.match import acc_scale, code, dtype_key, pool_geometry, qparams, requant_params
from backends.c.templates import conv_sym, plane_sym, sym_join
from backends.c.templates.portable import requant
from backends.c.templates.portable.generic import BYTES_CTYPE
from backends.cuda.templates import CudaRender, kernel_args, pointwise
from backends.cuda.templates.portable import int_average
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.dtypes import numpy_dtype
from passes.lowering.kernels import KernelUnit, Lowered, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# activation layout -> the filter layouts its dense / group convs use, with four channels per word
DP4A_LAYOUTS: dict[str, tuple[str, ...]] = {
    "nchw4": ("KCRSc4", "GKCRSc4"),
    "nchw32": ("KCRSc32",),
    "chwn4": ("CRSKc4",),
    "nchw64": ("KCRSc64",),
}


def offset_expr(layout: str | None, physical: tuple[int, ...], names: dict[str, str]) -> str:
    """C expression of the element offset of the logical index ``names`` (logical axis letter ->
    C expression) in a contiguous tensor of ``layout`` (None: plain row-major over ``names``' order)."""
    if layout is None:
        letters = list(names)
        strides = [math.prod(physical[k + 1 :]) for k in range(len(physical))]
        return " + ".join(f"({names[a]}) * {s}L" for a, s in zip(letters, strides, strict=True))
    spec = L.SPECS[L.Layout(layout)]
    terms = []
    for k, d in enumerate(spec.dims):
        stride = math.prod(physical[k + 1 :])
        idx = names[spec.logical[d.axis]]
        if d.block > 1 and not d.pad_only:
            idx = f"({idx}) % {d.block}" if d.inner else f"({idx}) / {d.block}"
        terms.append(f"({idx}) * {stride}L")
    return " + ".join(terms)


def _layout_name(v: SSAValue) -> str | None:
    lay = L.layout_of(v.type)
    return lay.value if lay is not None else None


def _z_term(p: dict[str, Any], z: str) -> str:
    """``z`` in the accumulator's integer domain (exact when the scales agree, else rounded)."""
    if p["z_same"]:
        return f"(int32_t){z}"
    return f"(int32_t)round((double)((float){z} * {p['s_z']!r}f) / {p['acc']!r})"


class ConvBlockedQ8(CudaRender, KernelUnit):
    family = "conv2d_blocked_q8"
    isa = "dp4a"
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 200
    examples = (
        E.conv2d_q8((1, 8, 9, 11), 12, 3, pad=1, act="relu"),
        E.conv2d_q8((2, 4, 7, 6), 8, 1, stride=2),
        E.conv2d_q8((1, 16, 7, 7), 8, 3, pad=2, dil=2),
    )

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
        p = op.params()
        x, w, *rest = op.operands
        y = op.results[0]
        xl, wl, yl = _layout_name(x), _layout_name(w), _layout_name(y)
        if xl not in DP4A_LAYOUTS or wl not in DP4A_LAYOUTS[xl] or yl not in (xl, None):
            return None
        if code(x) != "q8" or code(w) != "q8" or qparams(x)[1] or qparams(w)[1]:
            return None
        if p["mode"] != enums.ConvMode.CROSS_CORRELATION:
            return None
        rq = requant_params(x, w, y)
        if rq is None or (yl is None and rq["out"] != "f32"):
            return None
        scale = acc_scale(x, w)
        n, icp, ih, iw = L.to_logical(x.type).get_shape()  # type: ignore[arg-type]
        _, ocp, oh, ow = L.to_logical(y.type).get_shape()  # type: ignore[arg-type]
        group = wl == "GKCRSc4"
        wlog = tuple(L.to_logical(w.type).get_shape())  # type: ignore[arg-type]
        groups = wlog[0] if group else 1
        params: dict[str, Any] = {
            "n": n,
            "ic": icp,
            "ih": ih,
            "iw": iw,
            "oc": ocp,
            "oh": oh,
            "ow": ow,
            "fh": wlog[-2],
            "fw": wlog[-1],
            "icg": wlog[-3],
            "groups": groups,
            "sh": p["stride"][0],
            "sw": p["stride"][1],
            "ph": p["padding"][0],
            "pw": p["padding"][1],
            "dh": p["dilation"][0],
            "dw": p["dilation"][1],
            "x": xl,
            "w": wl,
            "y": yl,
            "xshape": shape(x),
            "wshape": shape(w),
            "yshape": shape(y),
            "bias": 0,
            "z": 0,
            "act": "identity",
            "acc": scale,
            **rq,
        }
        if params["icg"] % 4:
            return None
        operands: list[SSAValue | np.ndarray] = [x, w]
        if isinstance(op, T.ConvBiasOp):
            act = requant.INT8_ACT.get(p["nonline_mode"])
            if act is None or len(rest) > 2:
                return None
            params["act"] = act
            if rest:
                params["bias"] = 1
                bias = requant.bias_values(rest[0], scale, params)
                if bias is None or bias.size != ocp:
                    return None
                operands.append(bias)
            if len(rest) == 2:
                z = rest[1]
                if shape(z) != shape(y) or code(z) not in ("q8", "q32") or qparams(z)[1]:
                    return None
                s_z = qparams(z)[0]
                params.update(z=1, zcode=code(z), s_z=s_z, z_same=int(np.float32(s_z) == np.float32(scale)))
                params["qid"] = dtype_key(
                    ("acc", params["out"], "z"), (rq["s_acc"], rq["s_out"], s_z), (0, 0, 0)
                )
        return Lowered(params, operands)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "conv2d_q8",
            self.isa,
            p["x"],
            *conv_sym(p, explicit=True),
            "bias" if p["bias"] else "",
            "z" if p["z"] else "",
            p["act"].upper(),
            p["out"],
            p["qid"],
        )

    def _epilogue(self, p: dict[str, Any], k: str, y_at: str) -> str:
        lines = []
        if p["bias"] and not requant.post_processed(p):
            lines.append(f"acc += bias[{k}];")
        if p["z"]:
            lines.append(f"acc += {_z_term(p, f'z[{y_at}]')};")
        lines.append(requant.int_activation(p, "acc"))
        lines.append(f"y[{y_at}] = {requant.result_expr(p, 'acc', f'bias[{k}]')};")
        return "\n    ".join(line for line in lines if line)

    def support(self, em: CEmitter) -> str:
        return requant.REQUANT_C

    def _args(self, p: dict[str, Any]) -> list[tuple[str, str]]:
        ztype = "int8_t" if p.get("zcode") == "q8" else "int32_t"
        return [
            ("const int8_t*", "x"),
            ("const int8_t*", "w"),
            *([(f"const {requant.bias_ctype(p)}*", "bias")] * p["bias"]),
            *([(f"const {ztype}*", "z")] * p["z"]),
            (f"{requant.CTYPES[p['out']]}*", "y"),
        ]

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, oc, oh, ow, icg = p["n"], p["oc"], p["oh"], p["ow"], p["icg"]
        ocg = oc // p["groups"]
        x_at = offset_expr(
            p["x"], p["xshape"], {"N": "nn", "C": "g * " + str(icg) + " + c", "H": "yy", "W": "xx"}
        )
        if p["w"] == "GKCRSc4":
            w_at = offset_expr(
                p["w"], p["wshape"], {"G": "g", "K": f"k % {ocg}", "C": "c", "R": "r", "S": "s"}
            )
        else:
            w_at = offset_expr(p["w"], p["wshape"], {"K": "k", "C": "c", "R": "r", "S": "s"})
        y_at = offset_expr(p["y"], p["yshape"], {"N": "nn", "C": "k", "H": "oy", "W": "ox"})
        body = f"""const int ox = (int)(i % {ow}), oy = (int)(i / {ow} % {oh});
    const int k = (int)(i / {ow * oh} % {oc});
    const int nn = (int)(i / {ow * oh * oc}), g = k / {ocg};
    (void)g;
    int32_t acc = 0;
    for (int r = 0; r < {p["fh"]}; ++r) {{
      const int yy = oy * {p["sh"]} - {p["ph"]} + r * {p["dh"]};
      if ((unsigned)yy >= {p["ih"]}u) continue;
      for (int s = 0; s < {p["fw"]}; ++s) {{
        const int xx = ox * {p["sw"]} - {p["pw"]} + s * {p["dw"]};
        if ((unsigned)xx >= {p["iw"]}u) continue;
        for (int c = 0; c < {icg}; c += 4)
          acc = __dp4a(*(const int*)(x + {x_at}), *(const int*)(w + {w_at}), acc);
      }}
    }}
    {self._epilogue(p, "k", y_at)}"""
        return requant.exact(pointwise(sym, self._args(p), n * oc * oh * ow, body))


MMA_TILE = 16  # WMMA int8 m16n16k16


class ConvNchw32Mma(ConvBlockedQ8):
    """Dense NCHW32 convolution on int8 tensor cores: per (r, s) and 16-channel slice, the warp
    stages a 16 pixel x 16 channel tile of the input and a 16 channel x 16 output channel tile of
    the filter in shared memory (zeros outside the image), multiplies them with WMMA into int32
    accumulators, and finally runs the reference's epilogue from shared memory."""
    examples = (
        E.conv2d_q8((1, 32, 9, 11), 64, 3, pad=1, act="relu"),
        E.conv2d_q8((2, 64, 7, 6), 32, 1, stride=2),
    )

    family = "conv2d_nchw32_mma"
    isa = "mma"
    priority = 220

    def match(self, op: Operation) -> Lowered | None:
        got = super().match(op)
        if got is None or got.params["x"] != "nchw32" or got.params["groups"] != 1:
            return None
        return got

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        t = MMA_TILE
        n, oc, oh, ow, ic = p["n"], p["oc"], p["oh"], p["ow"], p["ic"]
        pixels = n * oh * ow
        x_at = offset_expr(p["x"], p["xshape"], {"N": "nn", "C": "c0 + col", "H": "yy", "W": "xx"})
        w_at = offset_expr(p["w"], p["wshape"], {"K": "k", "C": "c0 + col", "R": "r", "S": "s"})
        y_at = offset_expr(p["y"], p["yshape"], {"N": "nn", "C": "k", "H": "oy", "W": "ox"})
        params, launcher, casts = kernel_args(self._args(p))
        grid = f"dim3({math.ceil(pixels / t)}, {oc // t})"
        return requant.exact(f"""
extern "C" __global__ void __launch_bounds__(32) {sym}_k({params}) {{
  using namespace nvcuda;
  __shared__ __align__(32) signed char a_tile[{t * t}];
  __shared__ __align__(32) signed char b_tile[{t * t}];
  __shared__ __align__(32) int c_tile[{t * t}];
  const int lane = threadIdx.x;
  const long m0 = (long)blockIdx.x * {t};
  const int k0 = blockIdx.y * {t};
  wmma::fragment<wmma::matrix_a, {t}, {t}, {t}, signed char, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, {t}, {t}, {t}, signed char, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, {t}, {t}, {t}, int> acc;
  wmma::fill_fragment(acc, 0);
  for (int r = 0; r < {p["fh"]}; ++r)
    for (int s = 0; s < {p["fw"]}; ++s)
      for (int c0 = 0; c0 < {ic}; c0 += {t}) {{
        for (int e = lane; e < {t * t}; e += 32) {{
          const int row = e / {t}, col = e % {t};
          const long m = m0 + row;
          signed char v = 0;
          if (m < {pixels}) {{
            const int ox = (int)(m % {ow}), oy = (int)(m / {ow} % {oh}), nn = (int)(m / {ow * oh});
            const int yy = oy * {p["sh"]} - {p["ph"]} + r * {p["dh"]};
            const int xx = ox * {p["sw"]} - {p["pw"]} + s * {p["dw"]};
            if ((unsigned)yy < {p["ih"]}u && (unsigned)xx < {p["iw"]}u) v = x[{x_at}];
          }}
          a_tile[e] = v;
          const int k = k0 + row;
          b_tile[e] = w[{w_at}];  /* column k of B: 16 consecutive input channels */
        }}
        __syncthreads();
        wmma::load_matrix_sync(a, a_tile, {t});
        wmma::load_matrix_sync(b, b_tile, {t});
        wmma::mma_sync(acc, a, b, acc);
        __syncthreads();
      }}
  wmma::store_matrix_sync(c_tile, acc, {t}, wmma::mem_row_major);
  __syncthreads();
  for (int e = lane; e < {t * t}; e += 32) {{
    const long m = m0 + e / {t};
    if (m >= {pixels}) continue;
    const int k = k0 + e % {t};
    const int ox = (int)(m % {ow}), oy = (int)(m / {ow} % {oh}), nn = (int)(m / {ow * oh});
    int32_t acc = c_tile[e];
    {self._epilogue(p, "k", y_at)}
  }}
}}
static void {sym}({launcher}) {{
  (void)ws; (void)nt;
  XM_LAUNCH_SYNC({sym}_k, {grid}, dim3(32), {casts});
}}
""")


class PoolBlockedQ8(CudaRender, KernelUnit):
    """int8 max / average pooling in any blocked activation layout (integer window sums, averages
    rounded half away from zero, as the NCHW kernel)."""
    examples = (
        E.conv2d_q8((1, 8, 9, 11), 8, 1, pool=("max", 3, 2, 1)),
        E.conv2d_q8((2, 4, 7, 6), 12, 3, pad=1, pool=("average", 2, 2, 0)),
    )

    family = "pool2d_blocked_q8"
    ops = (T.PoolingOp, T.AdaptivePoolingOp)
    priority = 200

    def match(self, op: Operation) -> Lowered | None:
        x, y = op.operands[0], op.results[0]
        lay = _layout_name(x)
        if lay not in DP4A_LAYOUTS or _layout_name(y) != lay or code(x) != "q8" or code(y) != "q8":
            return None
        if qparams(x) != qparams(y) or qparams(x)[1]:
            return None
        params = pool_geometry(op)
        if params is None:
            return None
        params.update(layout=lay, xshape=shape(x), yshape=shape(y))
        return Lowered(params, [x])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "pool2d_q8",
            p["layout"],
            p["mode"],
            *plane_sym(p),
        )

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        c, oh, ow = p["c"], p["oh"], p["ow"]
        x_at = offset_expr(p["layout"], p["xshape"], {"N": "nn", "C": "ch", "H": "yy", "W": "xx"})
        y_at = offset_expr(p["layout"], p["yshape"], {"N": "nn", "C": "ch", "H": "oy", "W": "ox"})
        step = "if (e > a) a = e;" if p["mode"] == "max" else "a += e;"
        result = "a" if p["mode"] == "max" else int_average(p)
        body = f"""const int ox = (int)(i % {ow}), oy = (int)(i / {ow} % {oh});
    const int ch = (int)(i / {ow * oh} % {c});
    const int nn = (int)(i / {ow * oh * c});
    int32_t a = {"-128" if p["mode"] == "max" else "0"};
    int cnt = 0;
    for (int r = 0; r < {p["fh"]}; ++r) {{
      const int yy = oy * {p["sh"]} - {p["ph"]} + r;
      if ((unsigned)yy >= {p["ih"]}u) continue;
      for (int s = 0; s < {p["fw"]}; ++s) {{
        const int xx = ox * {p["sw"]} - {p["pw"]} + s;
        if ((unsigned)xx >= {p["iw"]}u) continue;
        const int32_t e = x[{x_at}];
        {step}
        ++cnt;
      }}
    }}
    (void)cnt;
    y[{y_at}] = (int8_t)({result});"""
        return pointwise(sym, [("const int8_t*", "x"), ("int8_t*", "y")], p["n"] * c * oh * ow, body)


class RelayoutBlocked(CudaRender, KernelUnit):
    """Between two blocked layouts (NCHW4 -> NCHW32 / CHWN4 / NCHW64, and back), through the logical
    index: one thread per element of the destination, zero where the source has no such channel."""
    # a first layer in NCHW4, the next ones in NCHW32: relayouts between the two blocked layouts
    examples = (E.conv2d_q8_chain((1, 4, 9, 11), (32, 3, 1), (64, 3, 2)),)

    family = "relayout_blocked"
    ops = (L.RelayoutOp,)
    priority = 90  # after the plain <-> blocked relayout

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, L.RelayoutOp)
        p = op.params()
        if p["src"] is None or p["dst"] is None:
            return None
        specs = (L.SPECS[p["src"]], L.SPECS[p["dst"]])
        if any(s.logical != "NCHW" for s in specs):
            return None
        x, y = op.operands[0], op.results[0]
        params = {
            "src": p["src"].value,
            "dst": p["dst"].value,
            "xshape": shape(x),
            "yshape": shape(y),
            "xlogical": tuple(L.to_logical(x.type).get_shape()),  # type: ignore[arg-type]
            "ylogical": tuple(L.to_logical(y.type).get_shape()),  # type: ignore[arg-type]
            "esize": numpy_dtype(x.type.element_type).itemsize,  # type: ignore[attr-defined]
        }
        return Lowered(params, [x])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "relayout", p["src"], "to", p["dst"], "x".join(map(str, p["ylogical"])), f"e{p['esize']}"
        )

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, h, w = p["ylogical"]
        names = {"N": "nn", "C": "ch", "H": "hh", "W": "ww"}
        x_at, y_at = offset_expr(p["src"], p["xshape"], names), offset_expr(p["dst"], p["yshape"], names)
        t = BYTES_CTYPE[p["esize"]]
        body = f"""const int ww = (int)(i % {w}), hh = (int)(i / {w} % {h}), ch = (int)(i / {w * h} % {c});
    const int nn = (int)(i / {w * h * c});
    y[{y_at}] = ch < {p["xlogical"][1]} ? x[{x_at}] : ({t})0;"""
        return pointwise(sym, [(f"const {t}*", "x"), (f"{t}*", "y")], n * c * h * w, body)


KERNEL_UNITS = (ConvBlockedQ8(), ConvNchw32Mma(), PoolBlockedQ8(), RelayoutBlocked())
