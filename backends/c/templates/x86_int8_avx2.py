"""int8 convolutions for x86 CPUs with AVX2 but no AVX512-VNNI (template ISA ``avx2``: the
``x86-avx2*`` targets, ``x86-avx512*`` without ``vnni``, and the host target on such a CPU).

The units are the VNNI families' (``conv2d_q8_x86``, ``conv2d_q8_relu6_x86``) on the ``avx2`` ISA, so
a target's ISA order picks them exactly where no ``avx512vnni`` unit is searched first.

The GEMM is x86_int8_gemm's (the same stride phases, planes of 4-channel dwords and filter packing),
with ``vpmaddubsw`` (u8 x s8 pairs summed into int16) then ``vpmaddwd`` by ones for ``vpdpbusd``.
``vpmaddubsw`` saturates at int16, so VNNI's ``x + 128`` activations (``2 * 255 * 127`` overflows) are
not used: the planes hold ``x`` itself, and each call checks while packing whether any activation is
negative. None (the input of a convolution after a RELU: every ResNet convolution but the stem) is the
fast case: ``x`` is a 7-bit unsigned operand and ``2 * 127 * 128`` fits int16, exact for every weight.
Otherwise every byte is split ``x = (x & 127) - 128 * (x < 0)``, two exact ``vpmaddubsw`` (7-bit and
1-bit operands) weighted 1 and -128 by the ``vpmaddwd``. Both are exact for every int8 input.

The epilogue is requant.py's definition on 8 lanes (``xm_q*8``, the AVX2 spelling of x86_int8's
``xm_q*16``), bit-exact with the reference; it is compiled without floating-point contraction, the
``_round`` intrinsics of the AVX-512 helpers having no AVX2 form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.c.templates.requant import REQUANT_C
from backends.c.templates.x86_int8 import W8, _Relu6Island, activation_helpers_c, island_helpers_c
from backends.c.templates.x86_int8_gemm import Conv2dQ8Gemm, GemmIsa

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "avx2"

SUPPORT = (
    r"""
#ifndef XM_X86_INT8_AVX2
#define XM_X86_INT8_AVX2
#include <string.h>
XM_EXACT_BEGIN
/* requant.py's xm_qround / xm_qsat / xm_qhswish / xm_qpost on 8 lanes (x86_int8's xm_q*16 in AVX2):
   plain products and sums, which XM_EXACT_BEGIN keeps from being contracted into an FMA */
static inline __m256 xm_qmul8(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
static inline __m256 xm_qadd8(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
static inline __m256 xm_qtrunc8(__m256 v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
/* round_x86: trunc(y + (y >= 0 ? 0.5f : -0.5f)), the addition in float32 */
static inline __m256 xm_qround8(__m256 y) {
  const __m256 nonneg = _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GE_OQ);
  return xm_qtrunc8(xm_qadd8(y, _mm256_blendv_ps(_mm256_set1_ps(-0.5f), _mm256_set1_ps(0.5f), nonneg)));
}
/* 8 int32 lanes as 8 int8 (the low half), saturated both ways */
static inline __m128i xm_q8_narrow8(__m256i v) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return _mm_packs_epi16(w, w);
}
/* scaled_to int8 of any float32 lanes: rounded, NaN to 0, clamped to [-128, 127] */
static inline __m128i xm_qscaled8(__m256 y) {
  __m256 r = xm_qround8(y);
  r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-128.f)), _mm256_set1_ps(127.f));
  return xm_q8_narrow8(_mm256_cvttps_epi32(r));
}
/* the same for the finite values of an accumulator's epilogue: y + copysign(0.5, y) (a -0.0 takes
   -0.5, +0.5 in xm_qround8: both truncate to a zero), capped at 127 (a larger value could leave
   int32), the truncating conversion (below -2^31: INT_MIN) and the packs' signed saturation */
static inline __m128i xm_qscaled8_finite(__m256 y) {
  const __m256 h = _mm256_or_ps(_mm256_and_ps(y, _mm256_set1_ps(-0.f)), _mm256_set1_ps(0.5f));
  return xm_q8_narrow8(_mm256_cvttps_epi32(_mm256_min_ps(xm_qadd8(y, h), _mm256_set1_ps(127.f))));
}
/* the same for y >= +-0 (after a RELU): y + 0.5 */
static inline __m128i xm_qscaled8_nonneg(__m256 y) {
  const __m256 v = _mm256_min_ps(xm_qadd8(y, _mm256_set1_ps(0.5f)), _mm256_set1_ps(127.f));
  return xm_q8_narrow8(_mm256_cvttps_epi32(v));
}"""
    + island_helpers_c(W8)
    + activation_helpers_c(W8)
    + r"""
XM_EXACT_END
/* lanes [lo, hi) of a result vector to d[0, hi - lo) */
static inline __m256i xm_lanes8(int lo, int hi) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), lane),
                             _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), lane));
}
static inline void xm_q8_put8(int8_t* d, __m128i r, int lo, int hi) {
  if (lo == 0 && hi == 8) { _mm_storel_epi64((__m128i*)d, r); return; }
  int8_t t[16];
  _mm_storeu_si128((__m128i*)t, r);
  memcpy(d, t + lo, (size_t)(hi - lo));
}
static inline void xm_i32_put8(int32_t* d, __m256i r, int lo, int hi) {
  if (lo == 0 && hi == 8) { _mm256_storeu_si256((__m256i*)d, r); return; }
  int32_t t[8];
  _mm256_storeu_si256((__m256i*)t, r);
  memcpy(d, t + lo, (size_t)(hi - lo) * sizeof(int32_t));
}
static inline void xm_f32_put8(float* d, __m256 r, int lo, int hi) {
  if (lo == 0 && hi == 8) { _mm256_storeu_ps(d, r); return; }
  float t[8];
  _mm256_storeu_ps(t, r);
  memcpy(d, t + lo, (size_t)(hi - lo) * sizeof(float));
}
/* 16 bytes row[c0 + t*sw] for the t whose column lies in [0, iw), else 0 */
static inline __m128i xm_q8_gather16_avx2(const int8_t* row, int c0, int sw, int iw) {
  if (!row) return _mm_setzero_si128();
  if (c0 >= 0 && sw == 1 && c0 + 16 <= iw) return _mm_loadu_si128((const __m128i*)(row + c0));
  if (c0 >= 0 && sw == 2 && c0 + 32 <= iw) {
    const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i a = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(row + c0)), even);
    const __m128i b = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(row + c0 + 16)), even);
    return _mm_unpacklo_epi64(a, b);
  }
  int8_t v[16];
  for (int t = 0; t < 16; ++t) {
    const int c = c0 + t * sw;
    v[t] = (unsigned)c < (unsigned)iw ? row[c] : 0;
  }
  return _mm_loadu_si128((const __m128i*)v);
}
/* n pixels (at most 16) of four channel rows as n dwords (channel bytes in order) */
static inline void xm_q8_quad16_avx2(int8_t* dst, __m128i a, __m128i b, __m128i c, __m128i d, int n) {
  const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
  const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
  const __m256i lo = _mm256_set_m128i(_mm_unpackhi_epi16(ab0, cd0), _mm_unpacklo_epi16(ab0, cd0));
  const __m256i hi = _mm256_set_m128i(_mm_unpackhi_epi16(ab1, cd1), _mm_unpacklo_epi16(ab1, cd1));
  if (n >= 16) {
    _mm256_storeu_si256((__m256i*)dst, lo);
    _mm256_storeu_si256((__m256i*)(dst + 32), hi);
    return;
  }
  int8_t t[64];
  _mm256_storeu_si256((__m256i*)t, lo);
  _mm256_storeu_si256((__m256i*)(t + 32), hi);
  memcpy(dst, t, (size_t)n * 4);
}
#endif
"""
)


class Avx2Gemm(GemmIsa):
    """x86_int8_gemm's generator on AVX2: ``x`` itself in the planes, ``vpmaddubsw`` then ``vpmaddwd``
    by ones for ``vpdpbusd`` (two micro-kernels: 7-bit activations, or each byte split where the
    call's input has a negative one), 8 lanes stored as ``[lo, hi)`` ranges."""

    prefix = "avx2"
    width = W8
    # ymm registers: accumulators, NV activations, a broadcast, the ones and a product; three vector
    # ports (the products on two) for vpmaddubsw, vpmaddwd and vpaddd per accumulator and step
    vregs, spare_regs, max_nv, max_mr, max_accumulators = 16, 3, 4, 12, 16
    steps_per_cycle, load_cycles, step_latency, epilogue_cycles = 1, 0.5, 0, 10
    x_offset, plane_type, pad_byte = 0, "int8_t", "0"
    x_range = (-128, 127)
    accumulator_limit = 2**31
    affine = False
    gather = "xm_q8_gather16_avx2"
    kernels = ("_u7", "_s8")

    def pack_prologue(self) -> str:
        return "\n      int signs = 0;"

    def pack_chunk(self, gathers: list[str], length: int) -> str:
        return f"""const __m128i q[4] = {{{", ".join(gathers)}}};
          signs |= _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q[0], q[1]), _mm_or_si128(q[2], q[3])));
          xm_q8_quad16_avx2(dst + 4 * c0, q[0], q[1], q[2], q[3], {length} - c0 < 16 ? {length} - c0 : 16);"""

    def pack_epilogue(self, p: dict[str, Any]) -> str:
        """Whether any activation of the image and group is negative: the split micro-kernel."""
        g = p["groups"]
        return f"""
      if (signs) {{
        #pragma omp atomic write
        negative[nn * {g} + g] = 1;
      }}
      #pragma omp barrier
      int split;
      #pragma omp atomic read
      split = negative[nn * {g} + g];"""

    def segment_arrays(self, nv: int, segments: int) -> str:
        return f"int seg_lo[{nv}][{segments}], seg_hi[{nv}][{segments}], segs[{nv}];"

    def segment_record(self, ow: int) -> str:
        return ("seg_lo[v][k] = q - q0; seg_hi[v][k] = q - q0 + len;\n"
                f"              seg_at[v][k] = (long)oy * {ow} + ox;")  # fmt: skip

    def put(self, p: dict[str, Any], v: int, store: str) -> str:
        if p["wq"] == p["ow"]:
            q, pixels = f"p0 + {8 * v}", p["pixels"]
            end = f"{pixels} - ({q}) < 8 ? {pixels} - ({q}) : 8"
            return f"if ({q} < {pixels}) {store}(yo + {q}, r, 0, {end});"
        lanes = f"seg_lo[{v}][k], seg_hi[{v}][k]"
        return f"for (int k = 0; k < segs[{v}]; ++k) {store}(yo + seg_at[{v}][k], r, {lanes});"

    def tile_constants(self, kernel: str) -> str:
        constants = "const __m256i ones = _mm256_set1_epi16(1);"
        if kernel == "_s8":
            constants += (
                " const __m256i m128 = _mm256_set1_epi16(-128), low7 = _mm256_set1_epi8(0x7F),"
                " one8 = _mm256_set1_epi8(1);"
            )
        return constants

    def tile_loads(self, nv: int, kernel: str) -> str:
        loads = " ".join(
            f"const __m256i b{v} = _mm256_loadu_si256((const __m256i*)(bk + {32 * v}));" for v in range(nv)
        )
        if kernel == "_s8":  # x = (x & 127) - 128 * (x < 0): the low bits weighted 1, the sign bit -128
            loads += " " + " ".join(
                f"const __m256i l{v} = _mm256_and_si256(b{v}, low7),"
                f" s{v} = _mm256_and_si256(_mm256_srli_epi16(b{v}, 7), one8);"
                for v in range(nv)
            )
        return loads

    def tile_row(self, i: int, accumulators: list[str], kernel: str) -> str:
        def product(v: int) -> str:
            if kernel == "_s8":
                return (f"_mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(l{v}, a), ones), "
                        f"_mm256_madd_epi16(_mm256_maddubs_epi16(s{v}, a), m128))")  # fmt: skip
            return f"_mm256_madd_epi16(_mm256_maddubs_epi16(b{v}, a), ones)"

        sums = "".join(f" {c} = _mm256_add_epi32({c}, {product(v)});" for v, c in enumerate(accumulators))
        return f"{{ const __m256i a = _mm256_set1_epi32(ak[{i}]);{sums} }}"

    def call_decls(self, p: dict[str, Any]) -> str:
        why = "per image and group: an activation below zero (the split kernel)"
        return f"\n  int negative[{p['n'] * p['groups']}] = {{0}};  /* {why} */"

    def tile_call(self, sym: str, planes: str, weights: str) -> str:
        call = f"if (split) {sym}_tile_s8(bp, ak, acc); else {sym}_tile_u7(bp, ak, acc);"
        return f"const int8_t* bp = {planes};\n        const int32_t* ak = {weights};\n        {call}"


AVX2 = Avx2Gemm()


class Conv2dQ8Avx2(Conv2dQ8Gemm):
    """Dense and grouped int8 NCHW convolution on AVX2 (:class:`Avx2Gemm`)."""

    isa = ISA
    gemm = AVX2  # priority 95: the family's; the target's ISA order puts avx512vnni first

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT


class Conv2dQ8Relu6Avx2(_Relu6Island, Conv2dQ8Avx2):
    family = "conv2d_q8_relu6_x86"
    conv_family = Conv2dQ8Avx2.family
    priority = 102  # the family's (x86_int8_gemm)


KERNEL_UNITS = (Conv2dQ8Avx2(), Conv2dQ8Relu6Avx2())

__all__ = ["AVX2", "ISA", "KERNEL_UNITS"]
