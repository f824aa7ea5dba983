"""The ends of an int8 network on AArch64: float32 <-> int8 conversions (the input's quantization,
the output's dequantization, int32 accumulators to int8) on 16 lanes, and the int8 matrix product of
classifier heads with ``sdot``.

* ``typecvt`` (``neon``): ``quantize`` is ``x * (1.0f / s)`` then requant.py's rounding on 4 lanes
  (``xm_qround4_neon``: ``trunc(y + copysign(0.5, y))``; ``vcvtq_s32_f32`` saturates and turns NaN into
  0) and saturating narrows; ``dequantize`` is ``float(q) * s``; an int32 accumulator to int8 is
  ``float(acc) * (s_in / s_out)`` rounded the same way. Other pairs (and zero points) are the
  portable template's.
* ``matmul_q8`` (``dot``): ``y = a @ b^T`` (``transpose_b``, e.g. the fully connected layer's weights
  ``(N, K)``), 4 rows of ``b`` per step, 16 bytes of K per ``sdot``, the lanes summed at the end;
  the epilogue is requant.py's scalar expression per result. Other layouts are the portable
  template's.
"""

from __future__ import annotations

from typing import Any

import backends.c.examples as E
from backends.c.templates.arm.neon_int8 import NEON_REQUANT_C
from backends.c.templates.portable.requant import CTYPES as OUT_CTYPES
from backends.c.templates.portable.requant import exact, f32, inverse, ratio, result_expr
from backends.c.templates.portable.typed import MatmulQ8, TypeCvt, matmul_q8_head

# (source, destination) -> (C types, the int8x16 / float32 body of 16 elements at ``in + i``)
_CONVERSIONS = {
    ("f32", "q8"): ("float", "int8_t"),
    ("q8", "f32"): ("int8_t", "float"),
    ("q32", "q8"): ("int32_t", "int8_t"),
}


class TypeCvtQ8Neon(TypeCvt):
    """``typecvt`` float32 / int32 -> int8 and int8 -> float32 (zero point 0) on 16 lanes."""

    isa = "neon"

    def __init__(self, isa: str = "neon"):
        self.isa = isa

    def render(self, em: Any, sym: str, p: dict[str, Any]) -> str:
        pair = (p["src"], p["dst"])
        if pair not in _CONVERSIONS or p["zp_in"] or p["zp_out"]:
            return super().render(em, sym, p)
        src_t, dst_t = _CONVERSIONS[pair]
        size = p["size"]
        if pair == ("q8", "f32"):
            scale = f"vdupq_n_f32({f32(p['s_in'])})"
            body = "\n    ".join(
                [
                    "const int8x16_t q = vld1q_s8(src);",
                    "const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);",
                    f"vst1q_f32(dst, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), {scale}));",
                    f"vst1q_f32(dst + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), {scale}));",
                    f"vst1q_f32(dst + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), {scale}));",
                    f"vst1q_f32(dst + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), {scale}));",
                ]
            )
        else:
            if pair == ("f32", "q8"):  # quantize: x * (1.0f / s)
                factor, load = inverse(p["s_out"]), "vld1q_f32(src + {o})"
            else:  # an int32 accumulator: float(acc) * (s_in / s_out)
                factor, load = ratio(p["s_in"], p["s_out"]), "vcvtq_f32_s32(vld1q_s32(src + {o}))"
            scaled = [f"vmulq_f32({load.format(o=4 * k)}, vdupq_n_f32({f32(factor)}))" for k in range(4)]
            rounded = [f"xm_qround4_neon({v})" for v in scaled]
            body = f"vst1q_s8(dst, xm_qnarrow16_neon({', '.join(rounded)}));"
        full = size // 16 * 16
        rest = size - full
        return NEON_REQUANT_C + exact(f"""
static inline __attribute__((always_inline)) void {sym}_16(const {src_t}* restrict src,
                                                          {dst_t}* restrict dst) {{
    {body}
}}
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const {src_t}* in = (const {src_t}*)in_;
  {dst_t}* out = ({dst_t}*)out_;
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {size} > 262144)
  for (long i = 0; i < {full}; i += 16) {sym}_16(in + i, out + i);
  if ({rest}) {{  /* the last elements through a 16-element copy */
    {src_t} tail_in[16] = {{0}};
    {dst_t} tail_out[16];
    memcpy(tail_in, in + {full}, {rest} * sizeof({src_t}));
    {sym}_16(tail_in, tail_out);
    memcpy(out + {full}, tail_out, {rest} * sizeof({dst_t}));
  }}
}}
""")


class MatmulQ8Dot(MatmulQ8):
    """``matmul_q8`` with ``sdot``: ``a @ b^T`` (``b`` rows contiguous), 4 results per step."""

    # rows of 4, K in 16-byte steps and a scalar rest; the accumulators and them requantized
    examples = (
        E.matmul_q8_const(1, 512, 10, tb=True, sx=1 / 16, sy=128),
        E.matmul_q8_const(3, 37, 7, tb=True, sx=1 / 16, sy=37 / 4),
        E.matmul_q8_const(2, 16, 4, tb=True, sx=1 / 16, sy=4),
        *MatmulQ8.examples,
    )

    def __init__(self, isa: str = "dot"):
        self.isa = isa

    def render(self, em: Any, sym: str, p: dict[str, Any]) -> str:
        if p["ta"] or not p["tb"] or p["out"] not in ("q32_same", "q8", "f32"):
            return super().render(em, sym, p)
        m, n, k = p["m"], p["n"], p["k"]
        k16 = k // 16 * 16
        otype = OUT_CTYPES[p["out"]]
        store = "\n".join(
            f"        {{ int32_t acc = vaddvq_s32(s{r}); for (int kk = {k16}; kk < {k}; ++kk) "
            f"acc += (int32_t)ai[kk] * b{r}[kk]; yi[j + {r}] = {result_expr(p, 'acc')}; }}"
            for r in range(4)
        )
        return exact(f"""{matmul_q8_head(sym, p)}
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {m * n * k} > 1048576)
    for (int i = 0; i < {m}; ++i) {{
      const int8_t* ai = a + (long)i * {k};
      {otype}* yi = y + (long)i * {n};
      for (int j = 0; j < {n // 4 * 4}; j += 4) {{
        const int8_t *b0 = b + (long)j * {k}, *b1 = b0 + {k}, *b2 = b1 + {k}, *b3 = b2 + {k};
        int32x4_t s0 = vdupq_n_s32(0), s1 = s0, s2 = s0, s3 = s0;
        #pragma GCC unroll 4
        for (int kk = 0; kk < {k16}; kk += 16) {{
          const int8x16_t av = vld1q_s8(ai + kk);
          s0 = vdotq_s32(s0, av, vld1q_s8(b0 + kk));
          s1 = vdotq_s32(s1, av, vld1q_s8(b1 + kk));
          s2 = vdotq_s32(s2, av, vld1q_s8(b2 + kk));
          s3 = vdotq_s32(s3, av, vld1q_s8(b3 + kk));
        }}
{store}
      }}
      for (int j = {n // 4 * 4}; j < {n}; ++j) {{
        int32_t acc = 0;
        for (int kk = 0; kk < {k}; ++kk) acc += (int32_t)ai[kk] * b[(long)j * {k} + kk];
        yi[j] = {result_expr(p, "acc")};
      }}
    }}
  }}
}}
""")


KERNEL_UNITS = (TypeCvtQ8Neon(), MatmulQ8Dot())
