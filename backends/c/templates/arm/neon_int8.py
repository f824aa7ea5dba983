"""Register-blocked int8 NCHW44 convolutions with the ARMv8.2 dot product (``arm-nchw44-dot``):
the implicit GEMM of :mod:`backends.c.templates.arm.neon_gemm` with ``sdot`` as its multiply-add.

A register tile is ``MB = 3`` blocks of 4 output channels times ``NB = 8`` pixels: 24 int32x4
accumulators. Per input block of 4 channels and tap, the tile loads its 3 weight blocks (16 bytes
each, ``k4c4``: one ``sdot`` is 4 output x 4 input channels) and, for stride-1 convolutions, the 4
channels of 4 neighbouring pixels per 16-byte load, then issues 24 ``sdot``-by-element (``vdotq_laneq_s32``:
lane ``j`` is pixel ``j``'s 4 channels); strided or left-over pixels broadcast their 4 channels
(``ld1r``) into a plain ``sdot``. The int32 bias (at the accumulator's scale) is the accumulators'
start; the epilogue is requant.py's exact requantization on 4 lanes (:func:`scaled_vector`:
``float(acc) * s_acc``, plus the bias, ReLU, times ``1 / s_out``; ``xm_qround4_neon``: ``trunc(y +
copysign(0.5, y))``; saturating narrows to int8, 16 bytes per store).

It serves the 1x1 stride-1 layers (already a GEMM over the NCHW44 rows); the other dense layers and
the first layers go to the packed-input GEMMs of :mod:`backends.c.templates.arm.neon_i8mm` (``sdot``, or
``smmla`` with ``i8mm``), which take this unit's rule, requantization and symbols.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import code, pool_geometry, same_type
from backends.c.templates import Template, sym_join
from backends.c.templates.arm.neon import _NEON_Q8, nchw44_int8, pool_planes
from backends.c.templates.arm.neon_gemm import ConvGemmNchw44
from backends.c.templates.portable.generic import _ptr_args
from backends.c.templates.portable.requant import (
    REQUANT_C,
    bias_ctype,
    exact,
    f32,
    inverse,
    post_processed,
    ratio,
)
from backends.c.templates.portable.typed import ElemwiseQ, contiguous_q8_elemwise
from dialects import enums
from dialects import tensor as T
from dialects.layout import SPECS, Layout, LayoutSpec
from passes.lowering.kernels import Lowered

MB, NB = 3, 8

NEON_REQUANT_C = r"""#ifndef XM_NEON_REQUANT_DEFINED
#define XM_NEON_REQUANT_DEFINED
XM_EXACT_BEGIN
/* requant.py's xm_qround on 4 lanes: trunc(y + copysign(0.5, y)) with the addition in float32;
   vcvtq_s32_f32 truncates, saturates to int32 and turns NaN into 0, as xm_qsat does (zero point 0) */
static inline __attribute__((always_inline)) int32x4_t xm_qround4_neon(float32x4_t y) {
  const uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(y), vdupq_n_u32(0x80000000u));
  const float32x4_t half = vreinterpretq_f32_u32(vorrq_u32(sign, vreinterpretq_u32_f32(vdupq_n_f32(0.5f))));
  return vcvtq_s32_f32(vaddq_f32(y, half));
}
/* xm_qsat to int8 of 16 rounded values: saturating narrows, int32 -> int16 -> int8 */
static inline __attribute__((always_inline)) int8x16_t xm_qnarrow16_neon(int32x4_t a, int32x4_t b,
                                                                        int32x4_t c, int32x4_t d) {
  const int16x8_t ab = vqmovn_high_s32(vqmovn_s32(a), b), cd = vqmovn_high_s32(vqmovn_s32(c), d);
  return vqmovn_high_s16(vqmovn_s16(ab), cd);
}
static inline __attribute__((always_inline)) int8x8_t xm_qnarrow8_neon(int32x4_t a, int32x4_t b) {
  return vqmovn_s16(vqmovn_high_s32(vqmovn_s32(a), b));
}
XM_EXACT_END
#endif
"""


def scaled_vector(p: dict[str, Any], acc: str, bias: str | None) -> str:
    """The float32x4 expression of :func:`requant.result_expr` before rounding, for an 8-bit result
    without zero point: ``xm_qpost`` (``float(acc) * s_acc``, plus the float32 bias, ReLU, times
    ``1 / s_out``) or, without bias and activation, ``float(acc) * (s_acc / s_out)``; the same float32
    operations in the same order (no fused multiply-add: the kernel is :func:`exact`)."""
    act = p.get("act", "identity")
    if p["out"] != "q8" or p["zp_out"] or act not in ("identity", "relu"):
        raise ValueError(f"no NEON requantization for out={p['out']} act={act} zp={p['zp_out']}")
    y = f"vcvtq_f32_s32({acc})"
    if not post_processed(p):
        return f"vmulq_f32({y}, vdupq_n_f32({f32(ratio(p['s_acc'], p['s_out']))}))"
    y = f"vmulq_f32({y}, vdupq_n_f32({f32(p['s_acc'])}))"
    if p["bias"]:
        y = f"vaddq_f32({y}, {bias})"
    if act == "relu":  # y < 0 ? 0 : y; -0.0 and +0.0 round alike
        y = f"vmaxq_f32({y}, vdupq_n_f32(0.f))"
    return f"vmulq_f32({y}, vdupq_n_f32({f32(inverse(p['s_out']))}))"


def requant_store(p: dict[str, Any], mb: int, nb: int, y_c: int) -> list[str]:
    """Statements storing accumulators ``a{b}_{j}`` (output block ``b``, pixel ``j``: 4 channels) as
    int8 at ``yb + b * y_c + j * 4``, four pixels (16 bytes) per saturating narrow where it can."""
    lines = []
    for b in range(mb):
        bias = f"vld1q_f32(bb + {b * 4})" if p["bias"] else None
        if bias:
            lines.append(f"  {{ const float32x4_t bv{b} = {bias};")
        else:
            lines.append("  {")
        for j in range(nb):
            value = scaled_vector(p, f"a{b}_{j}", f"bv{b}")
            lines.append(f"  const int32x4_t r{b}_{j} = xm_qround4_neon({value});")
        j = 0
        while j < nb:
            dst = f"yb + {b * y_c + j * 4}"
            if nb - j >= 4:
                rs = ", ".join(f"r{b}_{j + k}" for k in range(4))
                lines.append(f"  vst1q_s8({dst}, xm_qnarrow16_neon({rs}));")
                j += 4
            elif nb - j >= 2:
                lines.append(f"  vst1_s8({dst}, xm_qnarrow8_neon(r{b}_{j}, r{b}_{j + 1}));")
                j += 2
            else:
                narrow = f"vreinterpret_s32_s8(xm_qnarrow8_neon(r{b}_{j}, r{b}_{j}))"
                lines.append(f"  vst1_lane_s32((int32_t*)({dst}), {narrow}, 0);")
                j += 1
        lines.append("  }")
    return lines


class ConvDotGemmNchw44(ConvGemmNchw44):
    """``conv2d_nchw44_dot_gemm``: dense int8 NCHW44_DOT convolution, ``sdot`` register tiles."""
    examples = (
        E.conv2d_q8((1, 8, 9, 11), 12, 1),
        E.conv2d_q8((2, 16, 7, 6), 8, 1, act="relu"),
        E.conv2d_q8((1, 12, 5, 9), 20, 1, sy=1 / 4, ties=True),
    )

    family = "conv2d_nchw44_dot_gemm"
    priority = 205  # ahead of the direct conv2d_nchw44_dot (200)
    source_layout = Layout.KCRSk4c4

    def __init__(self, isa: str = "dot"):
        self.kind = "dot"
        self.isa = isa

    # dense layers (k4c4 filters); the packed-input GEMMs (neon_i8mm.py) add first layers (plain NCHW
    # input, KRSCk4 filters)
    modes: tuple[str, ...] = ("dense",)

    def match(self, op: Operation) -> Lowered | None:
        lowered = nchw44_int8(op, self.isa, dot=True)
        if lowered is None and "hybrid" in self.modes:
            lowered = nchw44_int8(op, self.isa, dot=False)
        if lowered is None or lowered.params["mode"] not in self.modes:
            return None
        if lowered.params["out"] != "q8" or lowered.params["act"] not in ("identity", "relu"):
            return None  # other results and h-swish: the direct kernels
        return lowered

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(super().symbol(p), f"q{p['qid']}")

    def tiling(self, p: dict[str, Any]) -> tuple[int, int]:
        return MB, NB

    def types(self, p: dict[str, Any]) -> tuple[str, str]:
        return "int8_t", bias_ctype(p)

    def weight_type(self, p: dict[str, Any]) -> str:
        return "int8_t"

    def panel(self, mb: int, mode: str) -> LayoutSpec:
        # per panel, input block and tap: mb blocks of 16 bytes, each output-channel major (k4c4)
        return LayoutSpec("KCRS", f"K/{4 * mb} C/4 R S K%{4 * mb} C%4")

    def pack_panels(self, logical: np.ndarray, p: dict[str, Any], mb: int) -> np.ndarray:
        packed = self.panel(mb, p["mode"]).pack(logical)
        return np.ascontiguousarray(packed)

    def support(self, em: Any) -> str:
        return "#include <stdint.h>\n" + _NEON_Q8 + REQUANT_C  # the direct kernels' text: emitted once

    def render(self, em: Any, sym: str, p: dict[str, Any]) -> str:
        # the 4-lane requantization: guarded, so the first kernel that needs it defines it. The
        # caller is exact too: gcc contracts the inlined tiles' multiply and add under the caller's
        # options (an fmla there moves ties)
        return NEON_REQUANT_C + exact(super().render(em, sym, p))

    def _tile(self, name: str, p: dict[str, Any], mb: int, nb: int, geo: dict[str, int]) -> str:
        xpix = p["sw"] * 4  # bytes between neighbouring output pixels' inputs
        lines = [
            f"static inline __attribute__((always_inline)) void {name}(const int8_t* restrict xb, "
            "const int8_t* restrict wk, int8_t* restrict yb, "
            f"const {bias_ctype(p)}* restrict bb, "
            "const int8_t* restrict rb) {",
            "  (void)bb; (void)rb;",
        ]
        # an int32 bias starts the accumulators; a float32 one joins after scaling (requant.py)
        init = "vld1q_s32(bb + {o})" if p["bias"] and not post_processed(p) else "vdupq_n_s32(0)"
        lines += [f"  int32x4_t a{b}_{j} = {init.format(o=b * 4)};" for b in range(mb) for j in range(nb)]
        lines.append(f"  for (int cb = 0; cb < {geo['cbn']}; ++cb) {{")
        lines.append(f"    const int8_t* xc = xb + (long)cb * {geo['x_c']};")
        if p["fh"] * p["fw"] > 1:
            lines.append(f"    for (int r = 0; r < {p['fh']}; ++r) for (int s = 0; s < {p['fw']}; ++s) {{")
            tap = f"(long)r * {p['dh'] * geo['x_h']} + s * {p['dw'] * 4}"
            lines.append(f"    const int8_t* xt = xc + {tap};")
        else:
            lines.append("    { const int8_t* xt = xc;")
        lines += self._dot_step(p, mb, nb, xpix)
        lines.append("    }")
        lines.append("  }")
        lines += requant_store(p, mb, nb, geo["y_c"])
        lines.append("}")
        return exact("\n".join(lines) + "\n")

    def _dot_step(self, p: dict[str, Any], mb: int, nb: int, xpix: int) -> list[str]:
        """One input block and tap of a dense layer: ``mb`` 16-byte weight blocks, ``sdot``."""
        by_lane = nb // 4 * 4 if p["sw"] == 1 else 0  # pixels loaded 4 at a time
        lines = [f"    const int8x16_t w{b} = vld1q_s8(wk + {b * 16});" for b in range(mb)]
        lines.append(f"    wk += {16 * MB};")
        for g in range(by_lane // 4):
            lines.append(f"    {{ const int8x16_t xv = vld1q_s8(xt + {g * 16});")
            for jj in range(4):
                j = 4 * g + jj
                lines += [f"      a{b}_{j} = vdotq_laneq_s32(a{b}_{j}, w{b}, xv, {jj});" for b in range(mb)]
            lines.append("    }")
        for j in range(by_lane, nb):
            dup = f"vld1q_dup_s32((const int32_t*)(xt + {j * xpix}))"
            lines.append(f"    {{ const int8x16_t xv = vreinterpretq_s8_s32({dup});")
            lines += [f"      a{b}_{j} = vdotq_s32(a{b}_{j}, w{b}, xv);" for b in range(mb)]
            lines.append("    }")
        return lines


# quantized elementwise modes on 4 float32 lanes: requant.py / typed.py's float expression, operation
# for operation (``fuse_add_relu``: ``a + b <= 0 ? 0 : a + b``; -0.0 and +0.0 round alike)
Q8_VEC_MODES = {
    "add": "vaddq_f32(a, b)",
    "sub": "vsubq_f32(a, b)",
    "mul": "vmulq_f32(a, b)",
    "fuse_add_relu": "vmaxq_f32(vaddq_f32(a, b), vdupq_n_f32(0.f))",
    "relu": "vmaxq_f32(a, vdupq_n_f32(0.f))",
}


class ElemwiseQ8Neon(Template):
    """``elemwise_q8_neon``: int8 ``quantize(f(dequantize(a), dequantize(b)))`` on operands of the
    result's shape (ResNet's residual ``QFUSE_ADD_RELU`` in any layout), 16 lanes per step: widen,
    ``float(x) * scale``, the float op, ``* (1 / s_out)``, ``xm_qround4_neon``, saturating narrows."""
    examples = (
        # 140 elements: 8 vector steps and a 12-element tail, on rounding ties
        E.elemwise_q8("qfuse_add_relu", (1, 4, 5, 7), (1, 4, 5, 7), sy=1 / 4, ties=True),
        E.elemwise_q8("qadd", (1, 4, 5, 7), (1, 4, 5, 7), sy=1 / 4, ties=True),
        E.elemwise_q8("qsub", (1, 4, 5, 7), (1, 4, 5, 7), sy=1 / 4, ties=True),
        E.elemwise_q8("qmul", (1, 4, 5, 7), (1, 4, 5, 7), sy=1 / 32, ties=True),
        E.elemwise_q8("qadd", (1, 13, 9, 11), (1, 13, 9, 11)),
        E.elemwise_q8("qrelu", (5, 19)),
    )

    family = "elemwise_q8_neon"
    ops = (T.ElemwiseOp, T.ElemwiseMultiTypeOp)
    priority = 94  # ahead of the portable elemwise_q (90); x86's 16-lane family is 95

    def __init__(self, isa: str = "neon"):
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        return contiguous_q8_elemwise(op, Q8_VEC_MODES, ("relu",))

    def symbol(self, p: dict[str, Any]) -> str:
        return "neon_" + ElemwiseQ.symbol(ElemwiseQ(), p)

    def support(self, em: Any) -> str:
        return "#include <stdint.h>\n" + REQUANT_C

    def render(self, em: Any, sym: str, p: dict[str, Any]) -> str:
        arity = len(p["strides"])
        size, scales = p["shape"][0], p["scales"]
        names = "ab"[:arity]
        quarters = []
        for q in range(4):
            widen = ["vmovl_s16(vget_low_s16({h}))", "vmovl_high_s16({h})"][q % 2]
            half = "lo" if q < 2 else "hi"
            deq = [
                f"const float32x4_t {n} = vmulq_f32(vcvtq_f32_s32({widen.format(h=f'{n}_{half}')}), s{i});"
                for i, n in enumerate(names)
            ]
            quarters.append(
                f"{{ {' '.join(deq)} r{q} = xm_qround4_neon(vmulq_f32({Q8_VEC_MODES[p['mode']]}, inv)); }}"
            )
        loads = " ".join(
            f"const int8x16_t {n}_v = vld1q_s8(src{i}); "
            f"const int16x8_t {n}_lo = vmovl_s8(vget_low_s8({n}_v)), {n}_hi = vmovl_high_s8({n}_v);"
            for i, n in enumerate(names)
        )
        block = "\n      ".join(quarters)
        srcs = ", ".join(f"const int8_t* src{i}" for i in range(arity))
        at_i = ", ".join(f"in{i} + i" for i in range(arity))
        return NEON_REQUANT_C + exact(f"""
static inline __attribute__((always_inline)) void {sym}_16({srcs}, int8_t* dst) {{
  {" ".join(f"const float32x4_t s{i} = vdupq_n_f32({f32(scales[i])});" for i in range(arity))}
  const float32x4_t inv = vdupq_n_f32({f32(inverse(scales[arity]))});
  {loads}
  int32x4_t r0, r1, r2, r3;
  {block}
  vst1q_s8(dst, xm_qnarrow16_neon(r0, r1, r2, r3));
}}
static void {sym}({_ptr_args(arity, 1)}) {{
  {" ".join(f"const int8_t* in{i} = (const int8_t*)in{i}_;" for i in range(arity))}
  int8_t* out = (int8_t*)out0_;
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {size} > 262144)
  for (long i = 0; i < {size // 16 * 16}; i += 16) {sym}_16({at_i}, out + i);
  if ({size % 16}) {{  /* the last elements through a 16-byte copy */
    int8_t tail[{arity + 1}][16] = {{{{0}}}};
    {" ".join(f"memcpy(tail[{i}], in{i} + {size // 16 * 16}, {size % 16});" for i in range(arity))}
    {sym}_16({", ".join(f"tail[{i}]" for i in range(arity))}, tail[{arity}]);
    memcpy(out + {size // 16 * 16}, tail[{arity}], {size % 16});
  }}
}}
""")


class MaxPoolQ8Nchw44(Template):
    """``pool2d_nchw44_q8``: int8 max pooling of NCHW44 activations with ``vmax``: four output pixels
    (16 bytes) per vector where their windows lie inside the row (stride 1: one load per tap;
    stride 2: the even pixels of a de-interleaving ``ld2`` of 32-bit lanes), edge pixels one 4-byte
    vector each; rows out of the image are skipped as in the reference (``-128`` when none is left)."""
    examples = (
        # stride 1 and 2 vector groups with edges, stride 3 edges only
        E.conv2d_q8((1, 4, 7, 13), 8, 1, pool=("max", 3, 2, 1), ties=True),
        E.conv2d_q8((1, 4, 9, 20), 8, 1, pool=("max", 3, 1, 1), ties=True),
        E.conv2d_q8((1, 4, 8, 8), 8, 1, pool=("max", 2, 2, 0), ties=True),
        E.conv2d_q8((1, 4, 6, 11), 8, 1, pool=("max", 3, 3, 0), ties=True),
        E.conv2d_q8((1, 4, 5, 23), 8, 1, pool=("max", 5, 2, 2), ties=True),
    )

    family = "pool2d_nchw44_q8"
    ops = (T.PoolingOp,)
    priority = 205  # ahead of pool2d_nchw44 (200, scalar for int8)

    def __init__(self, isa: str = "neon"):
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PoolingOp)
        if op.params()["format"] != enums.Format.NCHW44 or not same_type(op) or code(op.operands[0]) != "q8":
            return None
        p = pool_geometry(op)
        if p is None or p["mode"] != "max" or p["c"] % 4:
            return None
        return Lowered(p, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("pool2d_nchw44_q8", self.isa, p["mode"], f"n{p['n']}", f"c{p['c']}",
                        f"{p['ih']}x{p['iw']}", f"k{p['fh']}x{p['fw']}", f"s{p['sh']}x{p['sw']}",
                        f"p{p['ph']}x{p['pw']}")  # fmt: skip

    def render(self, em: Any, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        xs = SPECS[Layout.NCHW44].dim_strides((n, c, ih, iw))
        ys = SPECS[Layout.NCHW44].dim_strides((n, c, oh, ow))
        # output columns whose 4-pixel group reads only inside the row (stride 2 reads 8 pixels)
        lo = min(ow, -(-pw // sw))
        span = {1: 4, 2: 8}.get(sw, 0)
        hi = lo
        if span:
            while hi + 4 <= ow and hi * sw - pw + fw - 1 + span - 1 <= iw - 1:
                hi += 4
        if span == 4:
            tap = "vld1q_s8(xr + (long)(ox - {pw} + s) * 4)"
        else:
            pixels = "(const int32_t*)(xr + (long)(ox * 2 - {pw} + s) * 4)"
            tap = f"vreinterpretq_s8_s32(vld2q_s32({pixels}).val[0])"
        tap = tap.format(pw=pw)
        return pool_planes(sym, "int8_t", n, c, xs, ys, f"""      for (int oy = 0; oy < {oh}; ++oy) {{
        const int r0 = oy * {sh} - {ph} < 0 ? {ph} - oy * {sh} : 0;
        const int r1 = oy * {sh} - {ph} + {fh} > {ih} ? {ih} - oy * {sh} + {ph} : {fh};
        int8_t* yr = yb + (long)oy * {ys["H"]};
        for (int ox = {lo}; ox < {hi}; ox += 4) {{
          int8x16_t m = vdupq_n_s8(-128);
          for (int r = r0; r < r1; ++r) {{
            const int8_t* xr = xb + (long)(oy * {sh} - {ph} + r) * {xs["H"]};
            for (int s = 0; s < {fw}; ++s) m = vmaxq_s8(m, {tap});
          }}
          vst1q_s8(yr + (long)ox * 4, m);
        }}
        for (int ox = 0; ox < {ow}; ++ox) {{
          if (ox == {lo}) ox = {hi};
          if (ox >= {ow}) break;
          int8x8_t m = vdup_n_s8(-128);
          for (int r = r0; r < r1; ++r) {{
            const int8_t* xr = xb + (long)(oy * {sh} - {ph} + r) * {xs["H"]};
            for (int s = 0; s < {fw}; ++s) {{
              const int xx = ox * {sw} - {pw} + s;
              if ((unsigned)xx >= {iw}u) continue;
              m = vmax_s8(m, vreinterpret_s8_s32(vld1_dup_s32((const int32_t*)(xr + (long)xx * 4))));
            }}
          }}
          vst1_lane_s32((int32_t*)(yr + (long)ox * 4), vreinterpret_s32_s8(m), 0);
        }}
      }}""")


KERNEL_UNITS = (ConvDotGemmNchw44(), ElemwiseQ8Neon(), MaxPoolQ8Nchw44())
