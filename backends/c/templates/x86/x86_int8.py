"""int8 kernels for x86 with AVX-512 VNNI (ISA ``avx512vnni``, the ``vnni`` feature of x86 targets):
NCHW convolutions (dense, 1x1, grouped; depthwise on its own), elementwise Q-modes and max pooling.
Results are exact against :mod:`semantics.quant_kernels`.

Dense, 1x1 and grouped convolutions are :mod:`backends.c.templates.x86.x86_int8_gemm` (a register-tiled
``vpdpbusd`` GEMM over 4-channel ``x + 128`` planes; its units take the helpers below). The outputs
stay NCHW (pixels are the vector lanes), so these kernels slot into the plain int8 graph.

Requantization is ``backends/c/templates/portable/requant.py``'s definition on 16 lanes (``xm_q*16`` below):
an integer bias joins the accumulator only where the reference adds it in int32; an 8-bit result with
a bias or an activation is ``xm_qpost`` (the accumulator and the float32 bias scaled separately,
added, activation, times ``1.0f / s_out``), otherwise one multiplication by ``s_acc / s_out``; then
``trunc(y + copysign(0.5, y))`` in float32 (never ``cvtps``' ties-to-even), saturated. Products and
sums are the explicitly rounded intrinsics, which no compiler contracts into an FMA.
Where :mod:`backends.c.templates.x86.x86_int8_requant` proves it equal over every accumulator a channel
can produce, a channel's int8 result is instead ``floor(u * a + b)`` of its raw accumulator (one
product, one sum, a conversion rounding down): ``p["affine"]``, the slopes and offsets one more
operand, the other channels on the exact epilogue behind a per-channel test.

Depthwise convolutions take 16 output columns per vector (``ConvDepthwiseQ8Vnni``: ``vpdpbusd`` on
row windows for filters up to 4 taps wide, ``vpdpwssd`` per widened tap for the others); borders are
masked loads. A ReLU6 float island after a convolution runs in its epilogue, in the cheapest form
that :func:`island_form` proves equal to the reference on every int8 value.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation, SSAValue

import backends.c.examples as E
from backends.c.match import code, dtype_key, qparams, same_type
from backends.c.templates import Template
from backends.c.templates.portable.generic import _ptr_args
from backends.c.templates.portable.requant import (
    REQUANT_C,
    exact,
    f32,
    int_activation,
    inverse,
    post_processed,
    ratio,
)
from backends.c.templates.portable.typed import Conv2dQ8, ElemwiseQ, Pool2dQ8, contiguous_q8_elemwise
from backends.c.templates.x86.nchw88 import TypeCvtF16C
from backends.c.templates.x86.x86_int8_requant import affine_requant
from dialects import enums
from dialects import kernel as K
from dialects import tensor as T
from dialects.dtypes import quantized_numpy_dtype
from passes.lowering.kernels import Lowered, const_array
from semantics.kernels import ELEMWISE as REF_ELEMWISE
from semantics.quant_kernels import dequantize, quantize

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "avx512vnni"
TILES = ((3, 8), (4, 6), (2, 12))  # (vectors of 16 pixels, output channels) per register tile
# below this many multiply-adds a kernel runs on one thread (a barrier costs more than it saves)
PARALLEL_WORK = 1 << 20
DW_ROWS = 8  # output rows of a depthwise block (window mode): each input row's windows built once

@dataclass(frozen=True)
class VectorWidth:
    """How the int8 epilogues spell one vector width: int32 / float32 lanes, the ``xm_q*{lanes}``
    helpers (x86_int8's SUPPORT on 16 lanes, x86_int8_avx2's on 8) and each result kind's store of a
    lane range (a mask on AVX-512, ``[lo, hi)`` on AVX2)."""

    lanes: int  # int32 / float32 lanes
    q8_store: str  # the store of a lane range of int8, int32 and float32 results
    q32_store: str
    f32_store: str
    narrow: str  # int32 lanes to int8, saturated (the instruction named in comments)
    saturating: str
    narrow_in_range: str  # the same for values in [-128, 127]

    @property
    def bits(self) -> int:
        return 32 * self.lanes

    @property
    def mm(self) -> str:
        """The intrinsics' prefix."""
        return f"_mm{self.bits}"

    @property
    def ivec(self) -> str:
        return f"__m{self.bits}i"

    @property
    def fvec(self) -> str:
        return f"__m{self.bits}"

    def aligned(self, ptr: str, const: bool = False) -> str:
        """``ptr`` as an aligned load's or store's operand (AVX-512's take any pointer)."""
        return ptr if self.bits == 512 else f"({'const ' if const else ''}{self.ivec}*)({ptr})"

    def izero(self) -> str:
        return f"{self.mm}_setzero_si{self.bits}()"

    def set1(self, value: str, kind: str = "ps") -> str:
        return f"{self.mm}_set1_{kind}({value})"

    def helper(self, name: str, variant: str = "") -> str:
        """An ``xm_q*`` helper of this width: ``helper("xm_qscaled", "_finite")`` is
        ``xm_qscaled16_finite`` on 16 lanes."""
        return f"{name}{self.lanes}{variant}"

    def store(self, out: str) -> str:
        return {"q8": self.q8_store, "q32_same": self.q32_store, "f32": self.f32_store}[out]


W16 = VectorWidth(
    16, "_mm_mask_storeu_epi8", "_mm512_mask_storeu_epi32", "_mm512_mask_storeu_ps",
    narrow="_mm512_cvtsepi32_epi8", saturating="vpmovsdb", narrow_in_range="_mm512_cvtepi32_epi8",
)  # fmt: skip
# the 8-lane helpers and stores are x86_int8_avx2's
W8 = VectorWidth(
    8, "xm_q8_put8", "xm_i32_put8", "xm_f32_put8",
    narrow="xm_q8_narrow8", saturating="vpackssdw/vpacksswb", narrow_in_range="xm_q8_narrow8",
)  # fmt: skip


def island_helpers_c(w: VectorWidth) -> str:
    """The C helpers of the ReLU6 island forms (:func:`island_form`) on ``w``'s lanes, in terms of
    that width's ``xm_qadd`` / ``xm_qmul`` (products and sums never contracted)."""
    f, n, h = w.fvec, w.lanes, w.helper
    return f"""
/* A ReLU6 float island after the int8 result r = round_x86(y) saturated: the island maps every r <= 0
   to 0 (checked at compile time), so it reads max(r, 0) = trunc(y + 0.5) clamped to [0, hi]: exactly,
   as y < 0 gives 0 either way. hi = 127: the island's own operations follow (xm_qisland_*); a smaller
   hi where the island is that clamp (xm_qisland_clamp{n}, done) */
static inline {f} {h("xm_qisland_in")}({f} y, float hi) {{
  const {f} v = {w.mm}_max_ps({h("xm_qadd")}(y, {w.mm}_set1_ps(0.5f)), {w.mm}_setzero_ps());
  return {w.mm}_min_ps(v, {w.mm}_set1_ps(hi));
}}
static inline __m128i {h("xm_qisland_clamp")}({f} y, float hi) {{
  return {w.narrow_in_range}({w.mm}_cvttps_epi32({h("xm_qisland_in")}(y, hi)));
}}
/* r (float lanes of integers in [0, 127]) to the island's result: trunc(min(r * k + 0.5, hi)), for
   a k checked against every r at compile time (hi = 127: {w.saturating}'s saturation is the bound) */
static inline __m128i {h("xm_qisland_scale")}({f} r, {f} k, float hi) {{
  {f} v = {h("xm_qadd")}({h("xm_qmul")}(r, k), {w.mm}_set1_ps(0.5f));
  if (hi < 127.f) v = {w.mm}_min_ps(v, {w.mm}_set1_ps(hi));
  return {w.narrow}({w.mm}_cvttps_epi32(v));
}}
/* the island's own float32 operations on r in [0, 127] (dequantize by s, relu6: only 6 bounds it,
   quantize by 1.0f / s_out: a product >= +0, so round_x86 is trunc(y + 0.5f)), saturated at 127 */
static inline __m128i {h("xm_qisland_float")}({f} r, {f} s, {f} inv_out) {{
  const {f} x = {w.mm}_min_ps({h("xm_qmul")}(r, s), {w.mm}_set1_ps(6.f));
  const {f} v = {h("xm_qadd")}({h("xm_qmul")}(x, inv_out), {w.mm}_set1_ps(0.5f));
  return {w.narrow}({w.mm}_cvttps_epi32(v));
}}"""


def activation_helpers_c(w: VectorWidth) -> str:
    """The C helpers of requant.py's activations and dequantization on ``w``'s lanes."""
    f, h, mm = w.fvec, w.helper, w.mm
    return f"""
/* xm_qact's RELU (y < 0 ? 0 : y; max_ps returns its second operand on a NaN or two zeros) */
static inline {f} {h("xm_qrelu")}({f} y) {{ return {mm}_max_ps({mm}_setzero_ps(), y); }}
/* hswish_x86: x * min(max(x + 3, 0), 6) * (1.0f / 6) */
static inline {f} {h("xm_qhswish")}({f} x) {{
  {f} r6 = {h("xm_qadd")}(x, {mm}_set1_ps(3.f));
  r6 = {mm}_max_ps({mm}_setzero_ps(), {mm}_min_ps({mm}_set1_ps(6.f), r6));
  return {h("xm_qmul")}({h("xm_qmul")}(x, r6), {mm}_set1_ps(1.f / 6.f));
}}
static inline {f} {h("xm_qdeq")}({w.ivec} q, {f} scale) {{ \
return {h("xm_qmul")}({mm}_cvtepi32_ps(q), scale); }}"""


SUPPORT = (
    r"""
#ifndef XM_X86_INT8
#define XM_X86_INT8
/* requant.py's xm_qround / xm_qsat / xm_qhswish / xm_qpost on 16 lanes. Products and sums use the
   explicitly rounded intrinsics (_mm512_mul_round_ps ...): a compiler never contracts them into an
   FMA, which would skip the rounding of the product that decides the ties. */
#define XM_RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
static inline __m512 xm_qmul16(__m512 a, __m512 b) { return _mm512_mul_round_ps(a, b, XM_RN); }
static inline __m512 xm_qadd16(__m512 a, __m512 b) { return _mm512_add_round_ps(a, b, XM_RN); }
/* round_x86: trunc(y + (y >= 0 ? 0.5f : -0.5f)), the addition in float32 (not cvtps' ties-to-even) */
static inline __m512 xm_qround16(__m512 y) {
  const __mmask16 nonneg = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GE_OQ);
  const __m512 half = _mm512_mask_blend_ps(nonneg, _mm512_set1_ps(-0.5f), _mm512_set1_ps(0.5f));
  return _mm512_roundscale_ps(xm_qadd16(y, half), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
/* scaled_to int8, as float32 lanes: rounded, NaN to 0, clamped to [-128, 127] */
static inline __m512 xm_qint16(__m512 y) {
  __m512 r = xm_qround16(y);
  r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);
  return _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-128.f)), _mm512_set1_ps(127.f));
}
static inline __m128i xm_qscaled16(__m512 y) {
  return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(xm_qint16(y)));
}
/* the same for the finite values of an accumulator's epilogue (no NaN), as int8 lanes:
   y + copysign(0.5, y) in one ternary-logic op (a -0.0 takes -0.5 here, +0.5 above: both truncate
   to a zero), capped at 127 (a larger value could leave int32), the truncating conversion, and
   vpmovsdb's signed saturation for the lower bound (a value below -2^31 converts to INT_MIN) */
static inline __m128i xm_qscaled16_finite(__m512 y) {
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u), half = _mm512_set1_epi32(0x3F000000);
  const __m512 h = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(y), sign, half, 0xEA));
  const __m512 v = _mm512_min_ps(xm_qadd16(y, h), _mm512_set1_ps(127.f));
  return _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(v));
}
/* the same for y >= +-0 (after a RELU): y + 0.5 */
static inline __m128i xm_qscaled16_nonneg(__m512 y) {
  const __m512 v = _mm512_min_ps(xm_qadd16(y, _mm512_set1_ps(0.5f)), _mm512_set1_ps(127.f));
  return _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(v));
}"""
    + island_helpers_c(W16)
    + r"""
/* x86_int8_requant's affine epilogue: floor(u * a + b) of the raw accumulator u, one fused
   multiply-add rounded once to nearest as the check emulated it, the conversion rounding down */
static inline __m512i xm_qaffine16(__m512i u, __m512 a, __m512 b) {
  const __m512 y = _mm512_fmadd_round_ps(_mm512_cvtepi32_ps(u), a, b, XM_RN);
  return _mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
/* its result through a ReLU6 island that is a clamp: the int8 lanes of min(r, hi) (r >= 0 already) */
static inline __m128i xm_qaffine_clamp16(__m512i r, int hi) {
  return _mm512_cvtsepi32_epi8(_mm512_min_epi32(r, _mm512_set1_epi32(hi)));
}
/* its result through a ReLU6 island: r clamped to [0, 127] as float lanes */
static inline __m512 xm_qaffine_island16(__m512i r) {
  const __m512i nonneg = _mm512_max_epi32(r, _mm512_setzero_si512());
  return _mm512_cvtepi32_ps(_mm512_min_epi32(nonneg, _mm512_set1_epi32(127)));
}
static inline __m512 xm_qtrunc16(__m512 v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}"""
    + activation_helpers_c(W16)
    + r"""
static inline __mmask16 xm_q8_lanes(long n) {
  return (__mmask16)(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
}
/* the lanes t < len of a load of a row's bytes from column c0 that fall inside the row [0, iw) */
static inline unsigned xm_q8_span(int c0, int len, int iw) {
  const int lo = c0 < 0 ? -c0 : 0, hi = iw - c0 < len ? iw - c0 : len;
  if (hi <= lo) return 0u;
  return (unsigned)((((unsigned long long)1 << hi) - 1) & ~(((unsigned long long)1 << lo) - 1));
}
/* the same as a 64-lane mask, for spans up to 63 bytes */
static inline __mmask64 xm_q8_span64(int c0, int len, int iw) {
  const int lo = c0 < 0 ? -c0 : 0, hi = iw - c0 < len ? iw - c0 : len;
  if (hi <= lo) return 0;
  return (__mmask64)((((unsigned long long)1 << hi) - 1) & ~(((unsigned long long)1 << lo) - 1));
}
/* acc += the four u8 x s8 products of each lane of b (unsigned) and a (signed): vpdpbusd in inline
   assembly, as GCC 12 copies and spills every accumulator of _mm512_dpbusd_epi32 on each step of a
   register tile of more than about 16 of them (x86_int8_gemm), and in long unrolled blocks */
#define XM_DPBUSD(acc, b, a) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(b), "v"(a))
/* the windows of one input row for 16 output columns of a depthwise filter row: lane j's dword the
   four bytes (+ 128) from column c0 + j * stride (perm and shuf encode the stride); the bytes the
   span mask m leaves out, and a row outside [0, ih), are padding: 128 */
static inline __m512i xm_q8_window16(const int8_t* xp, int iy, int c0, __mmask64 m, __m512i perm,
                                     __m512i shuf, int ih, int iw) {
  if ((unsigned)iy >= (unsigned)ih) return _mm512_set1_epi8((char)0x80);
  const uintptr_t at = (uintptr_t)(xp + (long)iy * iw) + (uintptr_t)(intptr_t)c0;
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const __m512i v = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, (const void*)at), flip);
  return _mm512_shuffle_epi8(_mm512_permutexvar_epi32(perm, v), shuf);
}
/* dst[i] = src[i * sw + off] for 0 <= i * sw + off < iw, else 0 (a padded im2col row) */
static inline void xm_q8_row(int8_t* dst, const int8_t* src, int n, int off, int sw, int iw) {
  int lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
  int hi = iw - off <= 0 ? 0 : (iw - off + sw - 1) / sw;
  if (lo > n) lo = n;
  if (hi > n) hi = n;
  if (hi < lo) hi = lo;
  memset(dst, 0, (size_t)lo);
  const int8_t* s = src + off;
  int i = lo;
  if (sw == 1) {
    memcpy(dst + lo, s + lo, (size_t)(hi - lo));
    i = hi;
  } else if (sw == 2) {
    for (; i + 16 <= hi; i += 16) {
      const __m256i v = _mm256_maskz_loadu_epi8(0x7FFFFFFFu, s + 2 * i);
      _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtepi16_epi8(v));
    }
  }
  for (; i < hi; ++i) dst[i] = s[i * sw];
  memset(dst + hi, 0, (size_t)(n - hi));
}
/* four rows of n bytes interleaved into n groups of 4, each byte plus 128 (x ^ 0x80) */
static inline void xm_q8_quad(uint8_t* dst, const int8_t* r0, const int8_t* r1, const int8_t* r2,
                              const int8_t* r3, long n) {
  const __m128i flip = _mm_set1_epi8((char)0x80);
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm_loadu_si128((const __m128i*)(r0 + i));
    const __m128i b = _mm_loadu_si128((const __m128i*)(r1 + i));
    const __m128i c = _mm_loadu_si128((const __m128i*)(r2 + i));
    const __m128i d = _mm_loadu_si128((const __m128i*)(r3 + i));
    const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
    const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
    __m128i* o = (__m128i*)(dst + 4 * i);
    _mm_storeu_si128(o + 0, _mm_xor_si128(_mm_unpacklo_epi16(ab0, cd0), flip));
    _mm_storeu_si128(o + 1, _mm_xor_si128(_mm_unpackhi_epi16(ab0, cd0), flip));
    _mm_storeu_si128(o + 2, _mm_xor_si128(_mm_unpacklo_epi16(ab1, cd1), flip));
    _mm_storeu_si128(o + 3, _mm_xor_si128(_mm_unpackhi_epi16(ab1, cd1), flip));
  }
  for (; i < n; ++i) {
    dst[4 * i + 0] = (uint8_t)(r0[i] ^ 0x80); dst[4 * i + 1] = (uint8_t)(r1[i] ^ 0x80);
    dst[4 * i + 2] = (uint8_t)(r2[i] ^ 0x80); dst[4 * i + 3] = (uint8_t)(r3[i] ^ 0x80);
  }
}
#endif
"""
)


def _out_ctype(out: str) -> str:
    return {"q8": "int8_t", "q32_same": "int32_t", "f32": "float"}[out]


def _rq_params(p: dict[str, Any]) -> bool:
    """Result kinds these kernels write exactly: int8 (zero point 0), the int32 accumulator, float32."""
    return p["out"] in ("q32_same", "f32") or (p["out"] == "q8" and p["zp_out"] == 0)


def _vec_int_activation(p: dict[str, Any], acc: str, w: VectorWidth = W16) -> str:
    """``int_activation`` on int32 lanes: RELU on the accumulator where no float post-process runs."""
    return f"{acc} = {w.mm}_max_epi32({acc}, {w.izero()});" if int_activation(p, "a") else ""


def _epilogue_value(p: dict[str, Any], acc: str, fbias: str, w: VectorWidth = W16) -> tuple[str, str, str]:
    """Vector form of ``requant.result_expr``: the stored value of the true accumulator ``acc`` (int32
    lanes, integer bias and RELU applied) as (C vector type, expression, store of a lane range);
    ``fbias`` is the channel's float bias (a C float) where the result is post-processed."""
    out, act = p["out"], p["act"]
    h = w.helper
    if out == "q32_same":
        return w.ivec, acc, w.store(out)
    s_acc = w.set1(f32(p["s_acc"]))
    if out == "f32":
        y = f"{h('xm_qdeq')}({acc}, {s_acc})"
        return w.fvec, f"{h('xm_qhswish')}({y})" if act == "hswish" else y, w.store(out)
    if post_processed(p):  # _post_process: scaled accumulator + scaled bias, activation, * 1/s_out
        y = f"{h('xm_qdeq')}({acc}, {s_acc})"
        if p["bias"]:
            y = f"{h('xm_qadd')}({y}, {w.set1(fbias)})"
        y = {"relu": f"{h('xm_qrelu')}({y})", "hswish": f"{h('xm_qhswish')}({y})"}.get(act, y)
        y = f"{h('xm_qmul')}({y}, {w.set1(f32(inverse(p['s_out'])))})"
    else:  # the TypeCvt QuantizedS32 -> QuantizedS8: one multiplication by s_acc / s_out
        y = f"{h('xm_qdeq')}({acc}, {w.set1(f32(ratio(p['s_acc'], p['s_out'])))})"
    if p.get("island"):  # the int8 result goes on through its ReLU6 float island (Relu6Island)
        if _island_by_lut(p):  # max(r, 0) (see xm_qisland_in) through the island's table
            r = f"_mm512_cvtepi32_epi8({_island_lut_lanes(y, w)})"
            return "__m128i", f"xm_qisland_lut16({r}, island_lo, island_hi)", w.store("q8")
        return "__m128i", _island_value(y, *p["island"], w), w.store("q8")
    nonneg = post_processed(p) and act == "relu"
    return "__m128i", f"{h('xm_qscaled', '_nonneg' if nonneg else '_finite')}({y})", w.store("q8")


def _island_lut_lanes(y: str, w: VectorWidth = W16) -> str:
    """The int32 lanes (in [0, 127]) of ``max(r, 0)`` for the scaled value ``y``: the island table's
    index (see xm_qisland_in)."""
    return f"{w.mm}_cvttps_epi32({w.helper('xm_qisland_in')}({y}, 127.f))"


def island_lut_index(p: dict[str, Any], acc: str, fbias: str) -> tuple[str, str] | None:
    """The int32 lanes of accumulator ``acc`` whose int8 saturation, clamped at 0, indexes the island
    table of a table-island kernel with an int8 result (16 lanes), as (the exact epilogue's
    :func:`_island_lut_lanes`, the affine form's on an ``x86_int8_requant`` channel: "" where the
    kernel has none, the exact one "" where every channel is affine); None where the epilogue is not
    that (no table, or an integer activation on the accumulator)."""
    exact_p = {k: v for k, v in p.items() if k != "affine"}
    if not _island_by_lut(p) or p["out"] != "q8" or _vec_int_activation(exact_p, acc):
        return None
    _, exact_value, _ = _epilogue_value(exact_p, acc, fbias)
    prefix, suffix = "xm_qisland_lut16(_mm512_cvtepi32_epi8(", "), island_lo, island_hi)"
    assert exact_value.startswith(prefix) and exact_value.endswith(suffix), exact_value
    exact_lanes = exact_value[len(prefix) : -len(suffix)]
    if not p.get("affine"):
        return exact_lanes, ""
    affine = f"xm_qaffine16({acc}, _mm512_set1_ps(fa), _mm512_set1_ps(fo))"
    return ("" if p["affine"][1] else exact_lanes), affine


def _affine_value(p: dict[str, Any], acc: str, w: VectorWidth = W16) -> tuple[str, str, str]:
    """``_epilogue_value`` of an ``x86_int8_requant`` channel: ``acc`` is the raw accumulator (its
    integer bias is 0: the channel's offset ``fo`` holds it), ``fa`` the channel's slope."""
    lo, _ = p["affine"]
    h = w.helper
    r = f"{h('xm_qaffine')}({acc}, {w.set1('fa')}, {w.set1('fo')})"
    nonneg = f"{w.mm}_max_epi32({r}, {w.izero()})"
    if lo == 0:
        r = nonneg
    island = p.get("island")
    if not island:
        return "__m128i", f"{w.narrow}({r})", w.store("q8")
    form, k, hi = island_form(float(np.float32(island[0])), float(np.float32(island[1])))
    if form == "clamp":
        r = r if lo == 0 else nonneg
        value = f"{h('xm_qaffine_clamp')}({r}, {hi})"
    elif _island_by_lut(p):  # r clamped to [0, 127] (vpmovsdb saturates above) through the table
        assert w.lanes == 16, "the island table has a 16-lane helper only"
        r = r if lo == 0 else nonneg
        value = f"xm_qisland_lut16(_mm512_cvtsepi32_epi8({r}), island_lo, island_hi)"
    elif form == "scale":
        value = f"{h('xm_qisland_scale')}({h('xm_qaffine_island')}({r}), {w.set1(f32(k))}, {hi}.f)"
    else:
        value = (f"{h('xm_qisland_float')}({h('xm_qaffine_island')}({r}), {w.set1(f32(island[0]))}, "
                 f"{w.set1(f32(inverse(island[1])))})")  # fmt: skip
    return "__m128i", value, w.store("q8")


def island_table(s_in: float, s_out: float) -> np.ndarray:
    """The ReLU6 float island of every int8 value r in [-128, 127] (index r + 128), by the reference's
    own operations: ``quantize(relu6(dequantize(r)))``."""
    r = np.arange(-128, 128).astype(np.int8).view(quantized_numpy_dtype("qint8", s_in))
    x = REF_ELEMWISE[enums.ElemwiseMode.RELU6](dequantize(r))
    return quantize(x, quantized_numpy_dtype("qint8", s_out)).view(np.int8).astype(np.int64)


@functools.cache
def island_form(s_in: float, s_out: float) -> tuple[str, float, int]:
    """The cheapest vector form of a ReLU6 island that gives the reference's value for every int8 r,
    checked exhaustively (the float32 operations of the C helpers, emulated in numpy), as (form, k,
    hi), hi the island's largest value: ``"clamp"``, the island is ``clamp(r, 0, hi)`` (equal
    scales); ``"scale"``, ``min(trunc(r * k + 0.5), hi)`` (one product instead of the island's two,
    and no clamp at 6 but the last one); else ``"float"``, the island's own operations. Each form
    maps r <= 0 to 0, which the island does for every scale."""
    want = island_table(s_in, s_out)
    r = np.arange(-128, 128, dtype=np.float32)
    if want[:129].any():
        raise AssertionError(f"a ReLU6 island ({s_in}, {s_out}) maps a value r <= 0 off zero")
    rp = np.maximum(r, np.float32(0))
    hi = int(want[-1])
    if np.array_equal(want, np.minimum(rp, hi)):
        return "clamp", 0.0, hi
    f = np.float32
    s, inv = f(s_in), f(inverse(s_out))
    candidates = [np.multiply(s, inv, dtype=f), f(s / f(s_out))]
    for k0 in list(candidates):  # and a few neighbours: any k that matches every r is as good
        for step in (1, -1, 2, -2):
            k = k0
            for _ in range(abs(step)):
                k = np.nextafter(k, f(np.inf) if step > 0 else f(0))
            candidates.append(k)
    for k in candidates:
        got = np.trunc(np.minimum(np.add(np.multiply(rp, k, dtype=f), f(0.5), dtype=f), f(hi)))
        if np.array_equal(want, got):
            return "scale", float(k), hi
    return "float", 0.0, hi


def _island_by_lut(p: dict[str, Any]) -> bool:
    """Whether the kernel's ReLU6 island is its byte table (AVX512-VBMI units), not float operations:
    every form but a clamp, which costs less than the lookup."""
    if not p.get("island_lut"):
        return False
    return island_form(float(np.float32(p["island"][0])), float(np.float32(p["island"][1])))[0] != "clamp"


def _island_lut_decls(p: dict[str, Any]) -> str:
    """The island's results for r = 0..127 as the two 64-byte tables ``island_lo``, ``island_hi`` of
    ``xm_qisland_lut16`` (from :func:`island_table`: the reference's own operations)."""
    if not _island_by_lut(p):
        return ""
    table = island_table(float(np.float32(p["island"][0])), float(np.float32(p["island"][1])))[128:]
    values = ", ".join(str(int(v)) for v in table)
    return (
        f" static const int8_t island_lut[128] __attribute__((aligned(64))) = {{{values}}};"
        " const __m512i island_lo = _mm512_load_si512((const void*)island_lut),"
        " island_hi = _mm512_load_si512((const void*)(island_lut + 64));"
    )


def _island_value(y: str, s_in: float, s_out: float, w: VectorWidth = W16) -> str:
    """The int8 lanes of the island after the convolution's scaled value ``y`` (see island_form)."""
    form, k, hi = island_form(float(np.float32(s_in)), float(np.float32(s_out)))
    h = w.helper
    if form == "clamp":
        return f"{h('xm_qisland_clamp')}({y}, {hi}.f)"
    r = f"{h('xm_qtrunc')}({h('xm_qisland_in')}({y}, 127.f))"
    if form == "scale":
        return f"{h('xm_qisland_scale')}({r}, {w.set1(f32(k))}, {hi}.f)"
    return f"{h('xm_qisland_float')}({r}, {w.set1(f32(s_in))}, {w.set1(f32(inverse(s_out)))})"


def _epilogue_stmt(
    p: dict[str, Any], acc: str, fbias: str, put: Callable[[str, str, str], str], w: VectorWidth = W16
) -> str:
    """The statements storing accumulator ``acc`` (integer bias added): the integer activation and
    :func:`_epilogue_value`, or for an ``x86_int8_requant`` convolution its affine form on the
    channels that have one (``fa != 0``; 16 lanes). ``put(vector type, value, store)`` stores."""
    exact_p = {k: v for k, v in p.items() if k != "affine"}
    value = put(*_epilogue_value(exact_p, acc, fbias, w))
    exact_code = f"{_vec_int_activation(exact_p, acc, w)} {value}".strip()
    if not p.get("affine"):
        return exact_code
    fast_code = put(*_affine_value(p, acc, w))
    if p["affine"][1]:  # every channel
        return fast_code
    return f"if (fa != 0.f) {{ {fast_code} }} else {{ {exact_code} }}"


def _epilogue(p: dict[str, Any], acc: str, fbias: str, dst: str, mask: str) -> str:
    """:func:`_epilogue_stmt` stored at ``dst`` under ``mask``."""
    return _epilogue_stmt(p, acc, fbias, lambda _, value, store: f"{store}({dst}, {mask}, {value});")


# a matched int8 convolution: its parameters, its operands, and its (flipped) filter's values
ConvQ8 = tuple[dict[str, Any], list[SSAValue | np.ndarray], np.ndarray]


def _conv_q8(op: Operation) -> ConvQ8 | None:
    """The portable int8 convolution's parameters and operands, with the (flipped) filter's values."""
    lowered = Conv2dQ8.match(Conv2dQ8(), op)
    if lowered is None or not _rq_params(lowered.params):
        return None
    p, operands = dict(lowered.params), list(lowered.operands)
    w = operands[1]
    wv = w if isinstance(w, np.ndarray) else const_array(w)
    if wv is None or p["n"] * p["ic"] == 0:
        return None
    wv = np.asarray(wv).view(np.int8).astype(np.int64)
    return p, operands, wv


def _bias_operands(
    p: dict[str, Any], operands: list[SSAValue | np.ndarray], correction: np.ndarray
) -> list[np.ndarray] | None:
    """The per-output-channel operands of the epilogue: int32 ``correction`` (the unsigned-offset
    term, int64) plus the integer bias where the bias joins the accumulator, then the float32 bias
    where the result is post-processed (``requant.bias_values`` made it); None if int32 overflows."""
    total = np.asarray(correction, np.int64).copy()
    extra: list[np.ndarray] = []
    if p["bias"]:
        b = operands[2]
        assert isinstance(b, np.ndarray)
        if post_processed(p):
            extra.append(np.ascontiguousarray(b, np.float32).reshape(-1))
        else:
            total += b.astype(np.int64).reshape(-1)
    if np.abs(total).max(initial=0) >= 2**31:
        return None
    return [total.astype(np.int32), *extra]


def _requant_operands(
    p: dict[str, Any],
    operands: list[SSAValue | np.ndarray],
    wv: np.ndarray,
    correction: np.ndarray,
    x_range: tuple[int, int] = (0, 255),
) -> list[np.ndarray] | None:
    """``_bias_operands``, and where ``x86_int8_requant`` proves its shorter epilogue exact for some
    channels, that epilogue: ``p["affine"] = [lo, every channel]`` and one more operand, float32
    ``[slopes][offsets]`` (slope 0: the exact epilogue), those channels' integer bias 0 (their
    offset holds it)."""
    biases = _bias_operands(p, operands, correction)
    if biases is None:
        return None
    fb = biases[1] if len(biases) > 1 else None
    got = affine_requant(p, wv, biases[0].astype(np.int64), fb, x_range)
    if got is None:
        return biases
    p["affine"] = [got.lo, int(got.ok.all())]
    return [np.where(got.ok, 0, biases[0]).astype(np.int32), *biases[1:], np.concatenate([got.a, got.b])]


def _affine_tag(p: dict[str, Any]) -> str:
    """A symbol's mark of the affine epilogue (two convolutions of one shape may differ there)."""
    return "_aff" if p.get("affine") else ""


def _bias_vector(p: dict[str, Any], channel: str, w: VectorWidth) -> str:
    """The channel's integer bias on int32 lanes (zero where every channel is affine: raw sums)."""
    if p.get("affine") and p["affine"][1]:
        return w.izero()
    return w.set1(f"bias[{channel}]", "epi32")


def _affine_decls(p: dict[str, Any], channel: str) -> str:
    """The channel's affine slope ``fa`` and offset ``fo`` (x86_int8_requant), where it has them."""
    if not p.get("affine"):
        return ""
    return f" const float fa = afc[{channel}], fo = afc[{p['oc']} + {channel}]; (void)fa; (void)fo;"


def _channel_vectors(p: dict[str, Any], channel: str, w: VectorWidth = W16) -> str:
    """A kernel's per-channel declarations: the integer bias ``bv`` and, with the affine epilogue,
    the channel's slope and offset."""
    return f"const {w.ivec} bv = {_bias_vector(p, channel, w)};{_affine_decls(p, channel)}"


def _has_fbias(p: dict[str, Any]) -> bool:
    """Whether the kernel takes the float32 bias operand."""
    return bool(p["bias"] and post_processed(p))


def _kernel_args(p: dict[str, Any]) -> str:
    fbias = ["const void* fb_"] if _has_fbias(p) else []
    fbias += ["const void* af_"] if p.get("affine") else []
    return ", ".join(["const void* x_", "const void* w_", "const void* b_", *fbias, "void* y_",
                      "unsigned char* ws", "int nt"])  # fmt: skip


def _bias_decls(p: dict[str, Any]) -> str:
    fbias = _has_fbias(p)
    return "const int32_t* bias = (const int32_t*)b_;" + (
        " const float* fbias = (const float*)fb_;" if fbias else ""
    ) + (" const float* afc = (const float*)af_;" if p.get("affine") else "") + _island_lut_decls(p)


def _depthwise_signature(sym: str, p: dict[str, Any], otype: str) -> str:
    """An int8 depthwise kernel's signature and its operand pointers (no workspace)."""
    return f"""static void {sym}({_kernel_args(p)}) {{
  const int8_t* x = (const int8_t*)x_;
  const int32_t* w = (const int32_t*)w_;
  {_bias_decls(p)}
  {otype}* y = ({otype}*)y_;
  (void)ws;"""


def _is_depthwise(p: dict[str, Any]) -> bool:
    return p["groups"] == p["ic"] == p["oc"] and p["groups"] > 1


def _dense_conv_q8(op: Operation) -> ConvQ8 | None:
    """``_conv_q8`` of a dense or grouped convolution (None for a depthwise one: its own family)."""
    got = _conv_q8(op)
    if got is None or _is_depthwise(got[0]):
        return None
    return got


def _depthwise_conv_q8(op: Operation) -> ConvQ8 | None:
    """``_conv_q8`` of a depthwise convolution of stride 1 or 2 along the rows (the depthwise units')."""
    got = _conv_q8(op)
    if got is None or not _is_depthwise(got[0]) or got[0]["sw"] > 2:
        return None
    return got


def _depthwise_plane_loop(
    p: dict[str, Any], work: int, otype: str, weights: str, count: int, w: VectorWidth = W16
) -> str:
    """The opening of an int8 depthwise kernel's loop over (image, channel) planes: the plane's input and
    output pointers, its float bias where the result is post-processed, its ``count`` int32 weight pairs
    broadcast into ``weights[]`` (vectors of ``w``) and its integer bias ``bv``."""
    n, c, ih, iw, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oh", "ow"))
    fbias = "fbias[ch]" if _has_fbias(p) else "0.f"
    threaded = f"nt > 1 && {work}L > {PARALLEL_WORK // 4}L"
    return f"""#pragma omp parallel for schedule(static) num_threads(nt) if({threaded})
  for (int nc = 0; nc < {n * c}; ++nc) {{
    const int ch = nc % {c};
    const int8_t* xp = x + (long)nc * {ih * iw};
    {otype}* yp = y + (long)nc * {oh * ow};
    const float fb = {fbias}; (void)fb;
    {w.ivec} {weights}[{count}];
    for (int k = 0; k < {count}; ++k) {weights}[k] = {w.set1(f"w[(long)ch * {count} + k]", "epi32")};
    {_channel_vectors(p, "ch", w)}"""


class ConvDepthwiseQ8Vnni(Template):
    """Depthwise int8 NCHW convolution, 16 output columns per vector (pixels are the lanes).

    Filters up to 4 taps wide (undilated, strides 1 and 2: MobileNetV2's 3x3) run as ``window``:
    ``vpdpbusd`` takes one filter row per instruction, each lane's dword the four input bytes its
    output column reads (``x + 128``, unsigned; the channel's ``-128 * sum(w)`` joins its bias), built
    from one masked 64-byte row load by a ``vpermd`` (each 128-bit lane the 16 bytes its four outputs
    read) and a ``vpshufb`` (the four overlapping windows). A block of ``DW_ROWS`` output rows builds
    each input row's windows once and multiply-adds them into every output row that reads them.
    Other filters (``widen``) widen every tap's 16 input bytes to int32 lanes and multiply-add with
    ``vpdpwssd`` against the tap weight in the low 16 bits (the high half is zero, so the
    sign-extension bits contribute nothing)."""
    examples = (
        E.conv2d_q8((1, 7, 19, 37), 7, 3, pad=1, groups=7, act="relu"),
        E.conv2d_q8((2, 5, 35, 36), 5, 3, stride=2, pad=1, groups=5),
        E.conv2d_q8((1, 3, 7, 20), 3, 5, pad=2, groups=3),
        E.conv2d_q8((1, 17, 6, 21), 17, 2, pad=1, groups=17),
    )

    family = "conv2d_dw_q8_x86"
    isa = ISA
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 96

    def match(self, op: Operation) -> Lowered | None:
        got = _depthwise_conv_q8(op)
        if got is None:
            return None
        p, operands, wv = got
        window = p["fw"] <= 4 and p["dw"] == 1
        correction = -128 * wv.reshape(p["oc"], -1).sum(axis=1) if window else np.zeros(p["oc"], np.int64)
        biases = _requant_operands(p, operands, wv, correction, (0, 255) if window else (-128, 127))
        if biases is None:
            return None
        p["mode"] = "window" if window else "widen"
        return Lowered(p, [operands[0], operands[1], *biases])

    def symbol(self, p: dict[str, Any]) -> str:
        kind = "dww" if p["mode"] == "window" else "dw"
        return f"vnni_{kind}_{Conv2dQ8.symbol(Conv2dQ8(), p)}{_affine_tag(p)}"

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        w = np.asarray(array).view(np.int8)
        if p["mode"] == "window":  # [C][FH] dwords: a filter row's bytes, zero-padded to four
            rows = np.zeros((p["oc"], p["fh"], 4), np.int8)
            rows[:, :, : p["fw"]] = w.reshape(p["oc"], p["fh"], p["fw"])
            return np.ascontiguousarray(rows).view(np.int32).reshape(-1), "dw_rows4"
        # each tap weight as an int32 whose high 16 bits are zero (the vpdpwssd pair partner)
        w16 = w.astype(np.int32).reshape(-1) & 0xFFFF
        return np.ascontiguousarray(w16.astype(np.int32)), "dw_w16"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        return self._render_window(sym, p) if p["mode"] == "window" else self._render_widen(sym, p)

    def _render_window(self, sym: str, p: dict[str, Any]) -> str:
        n, c, iw, oh, ow = (p[k] for k in ("n", "ic", "iw", "oh", "ow"))
        fh, sh, sw, ph, pw = (p[k] for k in ("fh", "sh", "sw", "ph", "pw"))
        otype = _out_ctype(p["out"])
        rows = min(DW_ROWS, oh)
        tail = oh % rows  # the last rows, a block of their own (no rows computed past the plane)
        span = 15 * sw + 4  # the bytes 16 output columns read: columns c0 + [0, 15 * sw + 4)
        window_decls, _ = self._window_builder(p)
        narrow, narrow_columns = self._narrow_columns(p)
        tail_block = f"""
      if (r0 < {oh}) {{
        {self._window_block(p, tail)}
      }}""" if tail else ""
        work = n * c * oh * ow * fh * p["fw"]
        return exact(f"""
{_depthwise_signature(sym, p, otype)}
  {window_decls}
  {_depthwise_plane_loop(p, work, otype, "wr", fh)}
    {self._plane_prologue(p)}
    for (int q0 = 0; q0 < {ow - narrow}; q0 += 16) {{
      const int c0 = q0 * {sw} - {pw};
      const __mmask64 m = xm_q8_span64(c0, {span}, {iw});
      const __mmask16 out_mask = xm_q8_lanes({ow} - q0);
      int r0 = 0;
      for (; r0 + {rows} <= {oh}; r0 += {rows}) {{
        {self._window_block(p, rows)}
      }}{tail_block}
    }}
    {narrow_columns}
  }}
}}
""")

    def _window_block(self, p: dict[str, Any], rows: int) -> str:
        """One block of ``rows`` output rows from ``r0`` (window mode): each input row's windows built
        once and multiply-added into every output row that reads them, then the rows' epilogues."""
        ih, iw, oh, ow, fh, sh, ph, dh = (p[k] for k in ("ih", "iw", "oh", "ow", "fh", "sh", "ph", "dh"))
        _, window = self._window_builder(p)
        steps = []
        for t in range((rows - 1) * sh + (fh - 1) * dh + 1):  # the block's input rows, t from iy0
            uses = [(r, kh) for r in range(rows) for kh in range(fh) if r * sh + kh * dh == t]
            if not uses:  # a row between dilated taps
                continue
            steps.append(
                f"{{ const __m512i x = {window.format(row=f'iy0 + {t}', ih=ih, iw=iw)};"
                + "".join(f" XM_DPBUSD(a{r}, x, wr[{kh}]);" for r, kh in uses)
                + " }"
            )
        packed = self._packed_rows(p, rows)
        own = range(rows // 4 * 4 if packed else 0, rows)  # the rows with an epilogue of their own
        stores = "\n        ".join(
            [packed] + [
                f"if (r0 + {r} < {oh}) {{ "
                f"{_epilogue(p, f'a{r}', 'fb', f'yp + (long)(r0 + {r}) * {ow} + q0', 'out_mask')} }}"
                for r in own
            ]
        )
        return "\n        ".join([
            f"const int iy0 = r0 * {sh} - {ph};",
            " ".join(f"__m512i a{r} = bv;" for r in range(rows)),
            *steps,
            stores,
        ])  # fmt: skip

    def _narrow_columns(self, p: dict[str, Any]) -> tuple[int, str]:
        """(count, C code) of the plane's last output columns where a unit runs them on their own,
        after the blocks of 16 columns: (0, "") here, every column vector runs those blocks."""
        return 0, ""

    def _packed_rows(self, p: dict[str, Any], rows: int) -> str:
        """The stores of the block's output rows in groups of four sharing one narrowing epilogue
        (rows ``4 * (rows // 4)`` on use their own), or "" where this unit has no such epilogue."""
        return ""

    def _plane_prologue(self, p: dict[str, Any]) -> str:
        """C run once per plane before its blocks (window mode): none here, the windows read the input."""
        return ""

    def _window_builder(self, p: dict[str, Any]) -> tuple[str, str]:
        """The window mode's constants (C declarations) and its call building one input row's windows
        (a format string over ``row``, ``ih``, ``iw``): ``xm_q8_window16``, two shuffles."""
        sw = p["sw"]
        # vpermd: 128-bit lane k holds the 16 bytes from 4k * sw; vpshufb: its dword i, bytes from i * sw
        perm = ", ".join(str(sw * k + d) for k in range(4) for d in range(4))
        shuf = ", ".join(str(sw * i + b) for i in range(4) for b in range(4))
        decls = (
            f"const __m512i perm = _mm512_setr_epi32({perm});"
            f" const __m512i shuf = _mm512_broadcast_i32x4(_mm_setr_epi8({shuf}));"
        )
        return decls, "xm_q8_window16(xp, {row}, c0, m, perm, shuf, {ih}, {iw})"

    def _render_widen(self, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        otype = _out_ctype(p["out"])
        taps = fh * fw
        # lane j of a vector of 16 output columns from q0 reads input column q0 * sw - pw + kw * dw +
        # j * sw: a masked load (lanes outside the row read nothing, and never fault) is the padding
        if sw == 1:
            load = "_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m[{kw}], row + c0[{kw}]))"
            span = 16
        else:
            load = ("_mm512_cvtepi8_epi32(_mm256_cvtepi16_epi8(_mm256_maskz_loadu_epi8(m[{kw}], "
                    "row + c0[{kw}])))")  # fmt: skip
            span = 31
        masks = "\n      ".join(
            f"c0[{kw}] = q0 * {sw} - {pw} + {kw * dw}; m[{kw}] = xm_q8_span(c0[{kw}], {span}, {iw});"
            for kw in range(fw)
        )
        rows = "\n        ".join(
            f"if ((unsigned)(iy0 + {kh * dh}) < {ih}u) {{"
            f" const int8_t* row = xp + (long)(iy0 + {kh * dh}) * {iw};"
            + "".join(
                f" v = _mm512_dpwssd_epi32(v, {load.format(kw=kw)}, wv[{kh * fw + kw}]);" for kw in range(fw)
            )
            + " }"
            for kh in range(fh)
        )
        work = n * c * oh * ow * taps
        return exact(f"""
{_depthwise_signature(sym, p, otype)}
  {_depthwise_plane_loop(p, work, otype, "wv", taps)}
    for (int q0 = 0; q0 < {ow}; q0 += 16) {{
      int c0[{fw}];
      {"__mmask16" if sw == 1 else "__mmask32"} m[{fw}];
      {masks}
      const __mmask16 out_mask = xm_q8_lanes({ow} - q0);
      for (int r = 0; r < {oh}; ++r) {{
        const int iy0 = r * {sh} - {ph};
        __m512i v = bv;
        {rows}
        {_epilogue(p, "v", "fb", "yp + (long)r * " + str(ow) + " + q0", "out_mask")}
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT


def relu6_island(
    op: Operation, producer_family: str, producer_isa: str = ISA
) -> tuple[K.CallOp, tuple[float, float]] | None:
    """The ReLU6 float island post-training quantization leaves after an int8 convolution
    (MobileNetV2): ``op`` is ``typecvt f32 -> q8`` of ``relu6`` of ``typecvt q8 -> f32`` of a call of
    ``producer_family`` (template ISA ``producer_isa``: the VNNI or the AMX convolutions), each value
    read once. Returns that call and the island's (dequantization scale, result scale); kernel-select
    lowered the producers already (program order)."""
    if not isinstance(op, T.TypeCvtOp) or code(op.results[0]) != "q8" or qparams(op.results[0])[1]:
        return None
    chain: list[K.CallOp] = []
    value = op.operands[0]
    for family in ("elemwise", "typecvt", producer_family):
        call = value.owner
        if not isinstance(call, K.CallOp) or not value.has_one_use() or len(call.outputs) != 1:
            return None
        d = call.definition()
        if d.family.data != family or (family == producer_family and d.isa.data != producer_isa):
            return None
        chain.append(call)
        if family != producer_family:
            value = call.args[0]
    relu6, dequantize, producer = (c.definition().param_values() for c in chain)
    if relu6.get("mode") != "relu6" or len(chain[0].args) != 1:
        return None
    if (dequantize["src"], dequantize["dst"], dequantize["zp_in"]) != ("q8", "f32", 0):
        return None
    if producer.get("out") != "q8" or np.float32(producer["s_out"]) != np.float32(dequantize["s_in"]):
        return None
    return chain[2], (float(dequantize["s_in"]), qparams(op.results[0])[0])


class _Relu6Island:
    """An int8 convolution with the ReLU6 float island after it (``typecvt -> relu6 -> typecvt``) as
    one kernel: the convolution's own int8 result (rounded and saturated as the reference does) is
    dequantized, clamped to [0, 6] and quantized again in its epilogue, on the same float32 operations
    as the three ops. The unit serves the island's last ``typecvt``; the convolution's call and the
    island's first two calls are then unused, and kernel-select drops them. Mixed into a convolution
    unit (its ``isa`` is the convolution's)."""
    examples = (
        E.relu6_island((1, 13, 9, 11), 19, 3, pad=1),
        E.relu6_island((1, 16, 9, 10), 16, 3, pad=1, groups=16),
        E.relu6_island((2, 8, 7, 7), 24, 1, stride=2),
    )

    ops = (T.TypeCvtOp,)
    conv_family: str
    isa: str
    producer_isa: str | None = None  # the convolution's ISA where it is not the unit's (x86_int8_vbmi)
    island_lut = False  # the island by a byte table lookup (AVX512-VBMI; x86_int8_vbmi's units)

    def match(self, op: Operation) -> Lowered | None:
        got = relu6_island(op, self.conv_family, self.producer_isa or self.isa)
        if got is None:
            return None
        conv, island = got
        params = {**conv.definition().param_values(), "island": list(island)}
        if self.island_lut:
            params["island_lut"] = 1
        return Lowered(params, list(conv.args))

    def symbol(self, p: dict[str, Any]) -> str:
        key = dtype_key(("q8", "q8"), tuple(p["island"]), (0, 0))
        lut = "_lut" if p.get("island_lut") else ""
        return f"{super().symbol(p)}_relu6_{key}{lut}"  # type: ignore[misc]


class ConvDepthwiseQ8Relu6Vnni(_Relu6Island, ConvDepthwiseQ8Vnni):
    family = "conv2d_dw_q8_relu6_x86"
    conv_family = ConvDepthwiseQ8Vnni.family
    priority = 101


# ----------------------------------------------------------------------------------------------
# Elementwise and pooling

def vec_modes(w: VectorWidth) -> dict[str, str]:
    """The float modes with a vector form: C over ``w``'s float vectors a, b (dequantized operands),
    the float32 operations of requant.py / typed.py's QUANTIZED_ELEMWISE_C, each rounded (never
    contracted: AVX-512's explicitly rounded intrinsics, AVX2's plain ones under XM_EXACT_BEGIN)."""
    h = w.helper
    sub = "_mm512_sub_round_ps(a, b, XM_RN)" if w.bits == 512 else f"{w.mm}_sub_ps(a, b)"
    return {
        "add": f"{h('xm_qadd')}(a, b)",
        "sub": sub,
        "mul": f"{h('xm_qmul')}(a, b)",
        "fuse_add_relu": f"{h('xm_qrelu')}({h('xm_qadd')}(a, b))",
        "relu": f"{h('xm_qrelu')}(a)",
        "h_swish": f"{h('xm_qhswish')}(a)",
        "fuse_add_h_swish": f"{h('xm_qhswish')}({h('xm_qadd')}(a, b))",
    }


VEC_MODES = vec_modes(W16)
# the largest magnitude (a square of the dequantized operands, by the result's scale) whose float32
# arithmetic stays far from infinity in every vector mode
FINITE_BOUND = 1e30
UNARY_MODES = ("relu", "h_swish")


class ElemwiseQ8Vnni(Template):
    """int8 ``quantize(f(dequantize(a), dequantize(b)))`` on same-shape operands (ResNet's residual
    ``QFUSE_ADD_RELU``, MobileNetV2's ``QADD``), 16 lanes at a time, the reference's float32 order."""
    examples = (
        E.elemwise_q8("qadd", (1, 13, 9, 11), (1, 13, 9, 11)),
        E.elemwise_q8("qfuse_add_relu", (2, 7, 5, 3), (2, 7, 5, 3)),
        E.elemwise_q8("qmul", (3, 37), (3, 37)),
        E.elemwise_q8("qh_swish", (5, 19)),
    )

    family = "elemwise_q8_x86"
    isa = ISA
    ops = (T.ElemwiseOp, T.ElemwiseMultiTypeOp)
    priority = 95  # ahead of the portable elemwise_q (90), behind float32 elemwise (100)

    def match(self, op: Operation) -> Lowered | None:
        return contiguous_q8_elemwise(op, VEC_MODES, UNARY_MODES)

    def symbol(self, p: dict[str, Any]) -> str:
        return "vnni_" + ElemwiseQ.symbol(ElemwiseQ(), p)

    width = W16

    def _lanes(self, size: int) -> str:
        """The C declaration of ``m``, the lanes from element ``i`` inside the ``size`` elements."""
        return f"const __mmask16 m = xm_q8_lanes({size} - i);"

    def _load(self, ptr: str) -> str:
        """The int8 elements at ``ptr`` (lanes ``m``) as int32 lanes."""
        return f"_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, {ptr}))"

    def _store(self, ptr: str, value: str) -> str:
        return f"_mm_mask_storeu_epi8({ptr}, m, {value});"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        w = self.width
        arity = len(p["strides"])
        size = p["shape"][0]
        scales = p["scales"]
        names = "ab"[:arity]
        vloads = " ".join(
            f"const {w.fvec} {names[i]} = {w.helper('xm_qdeq')}({self._load(f'in{i} + i')}, "
            f"{w.set1(f32(scales[i]))});"
            for i in range(arity)
        )
        # a result no mode can take past float32's range (no infinity, so no NaN) rounds by the
        # shorter helper of finite values (the same int8 for every finite value, half the operations)
        largest = 128 * max(scales[:arity]) + 3  # h-swish's x + 3
        finite = "_finite" if largest * largest * max(1.0, inverse(scales[arity])) < FINITE_BOUND else ""
        result = f"{w.helper('xm_qscaled', finite)}({w.helper('xm_qmul')}(f, vinv))"
        return exact(f"""
static void {sym}({_ptr_args(arity, 1)}) {{
  {" ".join(f"const int8_t* in{i} = (const int8_t*)in{i}_;" for i in range(arity))}
  int8_t* out = (int8_t*)out0_;
  const {w.fvec} vinv = {w.set1(f32(inverse(scales[arity])))};
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {size} > 262144)
  for (long i = 0; i < {size}; i += {w.lanes}) {{
    {self._lanes(size)}
    {vloads}
    const {w.fvec} f = {vec_modes(w)[p["mode"]]};
    {self._store("out + i", result)}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT


class MaxPoolQ8Vnni(Template):
    """int8 max pooling, NCHW, same dtype in and out: 16 output columns per vector (strides 1, 2)."""
    examples = (
        E.pool2d((1, 13, 9, 11), "max", 3, 2, 1, dtype="q8"),
        E.pool2d((2, 5, 17, 18), "max", 2, 1, dtype="q8"),
    )

    family = "pool2d_q8_x86"
    isa = ISA
    ops = (T.PoolingOp,)
    priority = 95

    def match(self, op: Operation) -> Lowered | None:
        lowered = Pool2dQ8.match(Pool2dQ8(), op)
        if lowered is None or lowered.params["mode"] != "max" or lowered.params["sw"] > 2:
            return None
        if not same_type(op) or code(op.operands[0]) != "q8" or qparams(op.operands[0])[1]:
            return None
        return lowered

    def symbol(self, p: dict[str, Any]) -> str:
        return "vnni_" + Pool2dQ8.symbol(Pool2dQ8(), p)

    def _stride2_load(self) -> str:
        """The 16 bytes ``src[2 * t]`` (reading no byte past ``src[30]``)."""
        return "_mm256_cvtepi16_epi8(_mm256_maskz_loadu_epi8(0x7FFFFFFFu, src))"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        ih, iw, oh, ow, fh, fw = p["ih"], p["iw"], p["oh"], p["ow"], p["fh"], p["fw"]
        sh, sw, ph, pw = p["sh"], p["sw"], p["ph"], p["pw"]
        lo = min(ow, max(0, -(-pw // sw)))
        hi = max(lo, min(ow, (iw - 1 + pw - (fw - 1)) // sw + 1))
        load = "_mm_loadu_si128((const __m128i*)src)" if sw == 1 else self._stride2_load()
        nc = p["n"] * p["c"]
        return f"""
static void {sym}(const void* x_, void* y_, unsigned char* ws, int nt) {{
  const int8_t* x = (const int8_t*)x_;
  int8_t* y = (int8_t*)y_;
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {nc * oh * ow * fh * fw} > 262144)
  for (int nc = 0; nc < {nc}; ++nc) {{
    const int8_t* xp = x + (long)nc * {ih * iw};
    int8_t* yp = y + (long)nc * {oh * ow};
    for (int oy = 0; oy < {oh}; ++oy) {{
      int8_t* yr = yp + (long)oy * {ow};
      int q = {lo};
      for (; q + 16 <= {hi}; q += 16) {{
        __m128i v = _mm_set1_epi8(-128);
        for (int r = 0; r < {fh}; ++r) {{
          const int iy = oy * {sh} - {ph} + r;
          if ((unsigned)iy >= {ih}u) continue;
          const int8_t* row = xp + (long)iy * {iw} + q * {sw} - {pw};
          for (int s = 0; s < {fw}; ++s) {{
            const int8_t* src = row + s;
            v = _mm_max_epi8(v, {load});
          }}
        }}
        _mm_storeu_si128((__m128i*)(yr + q), v);
      }}
      for (int qq = 0; qq < {ow}; ++qq) {{
        if (qq >= {lo} && qq < q) {{ qq = q - 1; continue; }}
        int8_t a = -128;
        for (int r = 0; r < {fh}; ++r) {{
          const int iy = oy * {sh} - {ph} + r;
          if ((unsigned)iy >= {ih}u) continue;
          for (int s = 0; s < {fw}; ++s) {{
            const int ix = qq * {sw} - {pw} + s;
            if ((unsigned)ix < {iw}u && xp[(long)iy * {iw} + ix] > a) a = xp[(long)iy * {iw} + ix];
          }}
        }}
        yr[qq] = a;
      }}
    }}
  }}
}}
"""


# xm_qscaled16(xm_qmul16(x, inv)) in five operations instead of about ten: y + copysign(0.5, y) by
# one ternary-logic op (-0.0 takes -0.5, xm_qround16 +0.5: both truncate to a zero), clamped to
# [-128, 127] before the truncation (the bounds are integers: the same as after it), and a NaN kept
# by max_ps / min_ps (each returns its second operand, here y, on a NaN) converts to INT_MIN, whose
# low byte, vpmovdb's result, is xm_qint16's 0
# values the quantize prefetches ahead (a page: the hardware's stream prefetch stops at page ends;
# MobileNetV2's 602 KB input from L3 0.029 -> 0.028 ms, from memory 0.054 -> 0.040 ms)
QUANTIZE_AHEAD = 1024
QUANTIZE_C = r"""
#ifndef XM_QUANTIZE16
#define XM_QUANTIZE16
static inline __m128i xm_quantize16(__m512 x, __m512 inv) {
  const __m512 y = xm_qmul16(x, inv);
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u), half = _mm512_set1_epi32(0x3F000000);
  const __m512 h = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(y), sign, half, 0xEA));
  const __m512 t = _mm512_max_ps(_mm512_set1_ps(-128.f), xm_qadd16(y, h));
  return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(_mm512_min_ps(_mm512_set1_ps(127.f), t)));
}
/* 64 consecutive floats quantized as one 64-byte vector (four loads, one store for the caller) */
static inline __m512i xm_quantize64(const float* in, __m512 inv) {
  const __m128i a = xm_quantize16(_mm512_loadu_ps(in), inv);
  const __m128i b = xm_quantize16(_mm512_loadu_ps(in + 16), inv);
  const __m128i c = xm_quantize16(_mm512_loadu_ps(in + 32), inv);
  const __m128i d = xm_quantize16(_mm512_loadu_ps(in + 48), inv);
  const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
  const __m256i cd = _mm256_inserti128_si256(_mm256_castsi128_si256(c), d, 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(ab), cd, 1);
}
#endif
"""


class TypeCvtQ8Vnni(TypeCvtF16C):
    """``typecvt`` between float32 and int8 (zero point 0) 16 lanes at a time, the reference's
    quantize (``roundf(x * (1.f / s))`` saturated) and dequantize; other pairs as on AVX2. The float
    islands quantized graphs keep (MobileNetV2's RELU6 between a dequantize and a quantize) pay
    these conversions on every activation, and a quantized model's input its quantize.

    The quantize runs 64 values a step (four loads, one 64-byte store, the lines a page ahead
    prefetched) in :data:`QUANTIZE_C`'s shorter form of ``xm_qscaled16``; only the last partial step
    is masked."""

    isa = ISA

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        pair = (p["src"], p["dst"])
        if pair not in (("f32", "q8"), ("q8", "f32")) or p["zp_in"] or p["zp_out"]:
            return super().render(em, sym, p)
        size = p["size"]
        parallel = f"#pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {size} > 262144)"
        # the helpers travel with the function (include-guarded): support() must stay the portable
        # template's string, which the emitter then writes once for both
        if pair == ("f32", "q8"):  # quantize: x * (1.0f / s), rounded, saturated
            inv = f32(inverse(p["s_out"]))
            full = size - size % 64
            return REQUANT_C + SUPPORT + QUANTIZE_C + exact(f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const float* in = (const float*)in_;
  int8_t* out = (int8_t*)out_;
  const __m512 inv = _mm512_set1_ps({inv});
  (void)ws;
  {parallel}
  for (long i = 0; i < {full}; i += 64) {{
    if (i + {QUANTIZE_AHEAD + 64} <= {size})  /* the four lines {QUANTIZE_AHEAD * 4} bytes ahead */
      for (int line = 0; line < 4; ++line)
        _mm_prefetch((const char*)(in + i + {QUANTIZE_AHEAD} + 16 * line), _MM_HINT_T0);
    _mm512_storeu_si512((void*)(out + i), xm_quantize64(in + i, inv));
  }}
  for (long i = {full}; i < {size}; i += 16) {{
    const __mmask16 m = xm_q8_lanes({size} - i);
    _mm_mask_storeu_epi8(out + i, m, xm_quantize16(_mm512_maskz_loadu_ps(m, in + i), inv));
  }}
}}
""")
        return REQUANT_C + SUPPORT + exact(f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const int8_t* in = (const int8_t*)in_;
  float* out = (float*)out_;
  (void)ws;
  {parallel}
  for (long i = 0; i < {size}; i += 16) {{
    const __mmask16 m = xm_q8_lanes({size} - i);
    const __m512i q = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, in + i));
    _mm512_mask_storeu_ps(out + i, m, xm_qdeq16(q, _mm512_set1_ps({f32(p["s_in"])})));
  }}
}}
""")


KERNEL_UNITS = (
    ConvDepthwiseQ8Vnni(), ConvDepthwiseQ8Relu6Vnni(), ElemwiseQ8Vnni(), MaxPoolQ8Vnni(), TypeCvtQ8Vnni(),
)  # fmt: skip

__all__ = ["ISA", "KERNEL_UNITS"]
