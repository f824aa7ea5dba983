"""int8 kernels for x86 CPUs with AVX2 but no AVX512-VNNI (template ISA ``avx2``: the
``x86-avx2*`` targets, ``x86-avx512*`` without ``vnni``, and the host target on such a CPU).

The units are x86_int8's and x86_int8_gemm's families on the ``avx2`` ISA, so a target's ISA order
picks them exactly where no ``avx512vnni`` unit is searched first: dense and grouped convolutions
(``conv2d_q8_x86``), depthwise ones (``conv2d_dw_q8_x86``), each with its fused ReLU6 island, the
same-shape elementwise Q-modes, max pooling and the float32 <-> int8 ``typecvt`` (which takes that
family's ``avx2`` place from nchw88's float16 conversions, kept as its other pairs). Beside the GEMM
below they are x86_int8's generators on :data:`W8` (8 lanes).

Depthwise products have no ``vpdpbusd``: the taps go in horizontal pairs through ``vpmaddwd`` on
int16-widened input bytes (``ConvDepthwiseQ8Avx2``), from a zero-padded copy of each plane.

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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

from backends.c.templates.portable.requant import REQUANT_C, exact, f32, inverse
from backends.c.templates.portable.typed import Conv2dQ8, ElemwiseQ, Pool2dQ8
from backends.c.templates.x86.nchw88 import TypeCvtF16C
from backends.c.templates.x86.x86_int8 import (
    W8,
    ConvDepthwiseQ8Vnni,
    ElemwiseQ8Vnni,
    MaxPoolQ8Vnni,
    _bias_operands,
    _depthwise_conv_q8,
    _depthwise_plane_loop,
    _depthwise_signature,
    _epilogue_stmt,
    _out_ctype,
    _Relu6Island,
    activation_helpers_c,
    island_helpers_c,
)
from backends.c.templates.x86.x86_int8_gemm import Conv2dQ8Gemm, GemmIsa
from passes.lowering.kernels import Lowered

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
/* x86_int8's xm_qaffine16 (x86_int8_requant's epilogue): floor(u * a + b), one fused multiply-add
   rounded once (the default rounding, to nearest) as the check emulated it; floor then the truncating
   conversion (beyond int32: INT_MIN, as the rounding conversion of the AVX-512 form) */
static inline __m256i xm_qaffine8(__m256i u, __m256 a, __m256 b) {
  const __m256 y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), a, b);
  return _mm256_cvttps_epi32(_mm256_floor_ps(y));
}
static inline __m128i xm_qaffine_clamp8(__m256i r, int hi) {
  return xm_q8_narrow8(_mm256_min_epi32(r, _mm256_set1_epi32(hi)));
}
static inline __m256 xm_qaffine_island8(__m256i r) {
  const __m256i nonneg = _mm256_max_epi32(r, _mm256_setzero_si256());
  return _mm256_cvtepi32_ps(_mm256_min_epi32(nonneg, _mm256_set1_epi32(127)));
}
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
/* the first n (<= 8) bytes at p in the low 8 bytes, the others 0 (no byte past p[n - 1] read) */
static inline __m128i xm_q8_load8(const int8_t* p, long n) {
  if (n >= 8) return _mm_loadl_epi64((const __m128i*)p);
  int8_t t[8] = {0};
  memcpy(t, p, (size_t)n);
  return _mm_loadl_epi64((const __m128i*)t);
}
/* 8 bytes row[c + t*sw] in the low 8 bytes for the t whose column lies in [0, iw), else 0 */
static inline __m128i xm_q8_cols8(const int8_t* row, int c, int sw, int iw) {
  if (c >= 0 && sw == 1 && c + 8 <= iw) return _mm_loadl_epi64((const __m128i*)(row + c));
  if (c >= 0 && sw == 2 && c + 16 <= iw) {
    const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    return _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(row + c)), even);
  }
  int8_t v[16] = {0};
  for (int t = 0; t < 8; ++t) {
    const int col = c + t * sw;
    v[t] = (unsigned)col < (unsigned)iw ? row[col] : 0;
  }
  return _mm_loadu_si128((const __m128i*)v);
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
    # step_latency: a step's fixed cost (its loop, pointers, the tap offset), which the per-accumulator
    # terms leave out; at 0 every tile costs the same per product and the 1 x 1 tile won (a call and
    # an accumulator store per 8 outputs): 8 (1 x 8 tiles) measured MobileNetV2 int8/f32 1.74 -> 1.28,
    # ResNet-18 1.38 -> 1.20 (6 and 10 a little slower, 14 slower)
    steps_per_cycle, load_cycles, step_latency, epilogue_cycles = 1, 0.5, 8, 10
    x_offset, plane_type, pad_byte = 0, "int8_t", "0"
    x_range = (-128, 127)
    accumulator_limit = 2**31
    affine = True  # x86_int8_requant's epilogue where it is exact (xm_qaffine8)
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


DW_ROWS_AVX2 = 4  # output rows of a depthwise block: 4 accumulators, 2 tap operands, 6 weights of 16 ymm
DW_PAD_BYTES = 1 << 16  # the largest zero-padded plane copied onto a thread's stack


def _padded_plane(p: dict[str, Any]) -> tuple[int, int]:
    """(row pitch, rows) of a depthwise plane with its padding: every row and column an output's
    vector of 8 columns reads (16 bytes from each tap's first column at stride 2), zero outside
    the input."""
    ih, iw, oh, ow = p["ih"], p["iw"], p["oh"], p["ow"]
    fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
    last_q0 = (ow - 1) // 8 * 8
    last_byte = last_q0 * sw + (fw - 1) * dw + (7 if sw == 1 else 15)  # padded coordinates
    pitch = max(pw + iw, last_byte + 1)
    rows = max(ph + ih, (oh - 1) * sh + (fh - 1) * dh + 1)
    return pitch, rows


class ConvDepthwiseQ8Avx2(ConvDepthwiseQ8Vnni):
    """Depthwise int8 NCHW convolution on AVX2, 8 output columns per vector: x86_int8's plane loop and
    epilogue on :data:`W8`, every filter size and dilation (``mode`` ``pairs``). Without ``vpdpbusd``
    the taps go in horizontal pairs through ``vpmaddwd``: the two input columns a pair reads,
    interleaved bytewise and sign-extended to int16, against the pair's two weights in one dword (an
    odd last tap: its column sign-extended to int32 against the weight in the low 16 bits, the high
    half zero). Every product and pair sum fits int32: exact for every int8 input and weight."""

    isa = ISA

    def match(self, op: Operation) -> Lowered | None:
        got = _depthwise_conv_q8(op)
        if got is None:
            return None
        p, operands, _ = got
        biases = _bias_operands(p, operands, np.zeros(p["oc"], np.int64))  # no affine form on 8 lanes
        if biases is None:
            return None
        p["mode"] = "pairs"
        return Lowered(p, [operands[0], operands[1], *biases])

    def symbol(self, p: dict[str, Any]) -> str:
        return f"avx2_dw_{Conv2dQ8.symbol(Conv2dQ8(), p)}"

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        """The filter as [C][FH][ceil(FW / 2)] dwords: taps (2j, 2j + 1) of a row as two int16."""
        if operand != 1:
            return None
        fw = p["fw"]
        taps = np.asarray(array).view(np.int8).astype(np.int32).reshape(p["oc"], p["fh"], fw)
        pairs = np.zeros((p["oc"], p["fh"], (fw + 1) // 2, 2), np.int32)
        pairs.reshape(p["oc"], p["fh"], -1)[:, :, :fw] = taps
        words = (pairs[..., 0] & 0xFFFF) | (pairs[..., 1] << 16)
        return np.ascontiguousarray(words.astype(np.int32)).reshape(-1), "dw_pairs16"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        pitch, height = _padded_plane(p)
        if pitch * height <= DW_PAD_BYTES:
            return self._render_padded(sym, p, pitch, height)
        return self._render_checked(sym, p)

    def _store(self, p: dict[str, Any], acc: str, row: str) -> str:
        """The epilogue of accumulator ``acc``, output row ``row``, the ``nq`` columns from ``q0``."""
        ow = p["ow"]
        return _epilogue_stmt(
            p, acc, "fb", lambda _, value, put: f"{put}(yp + (long)({row}) * {ow} + q0, {value}, 0, nq);", W8
        )

    def _taps(self, p: dict[str, Any], load: Callable[[int], str], uses: list[tuple[str, int]]) -> str:
        """The multiply-adds of one input row into accumulators: ``uses`` the (accumulator, filter row)
        pairs that read it, the row's 8 columns from tap ``kw``'s ``load(kw)`` (int8 in the low 8
        bytes); each tap pair's operand built once for them all."""
        fw = p["fw"]
        per_row = (fw + 1) // 2
        code = []
        for j in range(per_row):
            kw = 2 * j
            if kw + 1 < fw:
                x = f"_mm256_cvtepi8_epi16(_mm_unpacklo_epi8({load(kw)}, {load(kw + 1)}))"
            else:
                x = f"_mm256_cvtepi8_epi32({load(kw)})"
            code.append(f"const __m256i x{j} = {x};")
        for j in range(per_row):
            code += [f"{a} = _mm256_add_epi32({a}, _mm256_madd_epi16(x{j}, wv[{kh * per_row + j}]));"
                     for a, kh in uses]  # fmt: skip
        return " ".join(code)

    def _render_padded(self, sym: str, p: dict[str, Any], pitch: int, height: int) -> str:
        """Each plane copied into a zero-padded stack buffer (every load in bounds, no border test), then
        blocks of ``DW_ROWS_AVX2`` output rows: each input row's tap operands built once and
        multiply-added into every output row of the block that reads it."""
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        otype = _out_ctype(p["out"])
        rows = min(DW_ROWS_AVX2, oh)
        if sw == 1:
            def load(kw: int) -> str:
                return f"_mm_loadl_epi64((const __m128i*)(row + {kw * dw}))"
        else:
            def load(kw: int) -> str:
                return f"_mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(row + {kw * dw})), even)"

        def block(count: int) -> str:
            accs = [f"a{r}" for r in range(count)]
            steps = []
            for t in range((count - 1) * sh + (fh - 1) * dh + 1):  # the block's input rows
                uses = [(f"a{r}", kh) for r in range(count) for kh in range(fh) if r * sh + kh * dh == t]
                if uses:  # (none: a row between dilated taps)
                    steps.append(f"{{ const int8_t* row = base + {t * pitch}; {self._taps(p, load, uses)} }}")
            return "\n        ".join([
                f"const int8_t* base = col + (long)r0 * {sh * pitch};",
                " ".join(f"__m256i {a} = bv;" for a in accs),
                *steps,
                *(self._store(p, f"a{r}", f"r0 + {r}") for r in range(count)),
            ])  # fmt: skip

        tail = oh % rows
        tail_block = f"""
      if (r0 < {oh}) {{
        {block(tail)}
      }}""" if tail else ""  # fmt: skip
        even = "0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1"
        work = n * c * oh * ow * fh * fw
        return exact(f"""
{_depthwise_signature(sym, p, otype)}
  const __m128i even = _mm_setr_epi8({even}); (void)even;
  {_depthwise_plane_loop(p, work, otype, "wv", fh * ((fw + 1) // 2), W8)}
    int8_t pad[{height * pitch}] __attribute__((aligned(32)));
    memset(pad, 0, sizeof pad);
    for (int iy = 0; iy < {ih}; ++iy)
      memcpy(pad + (long)(iy + {ph}) * {pitch} + {pw}, xp + (long)iy * {iw}, {iw});
    for (int q0 = 0; q0 < {ow}; q0 += 8) {{
      const int8_t* col = pad + q0 * {sw};
      const int nq = {ow} - q0 < 8 ? {ow} - q0 : 8;
      int r0 = 0;
      for (; r0 + {rows} <= {oh}; r0 += {rows}) {{
        {block(rows)}
      }}{tail_block}
    }}
  }}
}}
""")

    def _render_checked(self, sym: str, p: dict[str, Any]) -> str:
        """A plane too large for the stack copy: each row and column tested (``xm_q8_cols8``)."""
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        otype = _out_ctype(p["out"])

        def load(kw: int) -> str:
            return f"xm_q8_cols8(row, c0 + {kw * dw}, {sw}, {iw})"

        rows = "\n        ".join(
            f"if ((unsigned)(iy0 + {kh * dh}) < {ih}u) {{"
            f" const int8_t* row = xp + (long)(iy0 + {kh * dh}) * {iw}; {self._taps(p, load, [('v', kh)])} }}"
            for kh in range(fh)
        )
        work = n * c * oh * ow * fh * fw
        return exact(f"""
{_depthwise_signature(sym, p, otype)}
  {_depthwise_plane_loop(p, work, otype, "wv", fh * ((fw + 1) // 2), W8)}
    for (int q0 = 0; q0 < {ow}; q0 += 8) {{
      const int c0 = q0 * {sw} - {pw};
      const int nq = {ow} - q0 < 8 ? {ow} - q0 : 8;
      for (int r = 0; r < {oh}; ++r) {{
        const int iy0 = r * {sh} - {ph};
        __m256i v = bv;
        {rows}
        {self._store(p, "v", "r")}
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT


class ConvDepthwiseQ8Relu6Avx2(_Relu6Island, ConvDepthwiseQ8Avx2):
    family = "conv2d_dw_q8_relu6_x86"
    conv_family = ConvDepthwiseQ8Avx2.family
    priority = 101  # the family's (x86_int8)


class ElemwiseQ8Avx2(ElemwiseQ8Vnni):
    """x86_int8's same-shape int8 elementwise kernel on 8 lanes (:data:`W8`)."""

    isa = ISA
    width = W8

    def symbol(self, p: dict[str, Any]) -> str:
        return "avx2_" + ElemwiseQ.symbol(ElemwiseQ(), p)

    def _lanes(self, size: int) -> str:
        return f"const long m = {size} - i < 8 ? {size} - i : 8;"

    def _load(self, ptr: str) -> str:
        return f"_mm256_cvtepi8_epi32(xm_q8_load8({ptr}, m))"

    def _store(self, ptr: str, value: str) -> str:
        return f"xm_q8_put8({ptr}, {value}, 0, (int)m);"

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT


class MaxPoolQ8Avx2(MaxPoolQ8Vnni):
    """x86_int8's int8 max pooling (SSE4.1 ``pmaxsb`` on 16 columns) with an AVX2 stride-2 load."""

    isa = ISA

    def symbol(self, p: dict[str, Any]) -> str:
        return "avx2_" + Pool2dQ8.symbol(Pool2dQ8(), p)

    def _stride2_load(self) -> str:
        # the even bytes of src[0, 16) and of src[15, 31): byte 31 may lie past the tensor
        return ("_mm_unpacklo_epi64(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)src), "
                "_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1)), "
                "_mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(src + 15)), "
                "_mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1)))")  # fmt: skip


class TypeCvtQ8Avx2(TypeCvtF16C):
    """``typecvt`` between float32 and int8 (zero point 0) 8 lanes at a time on AVX2: the quantize is
    ``xm_qscaled8(x * (1.0f / s))`` (requant.py's rounding, NaN to 0, saturation), the dequantize
    ``q * s``; other pairs as :class:`TypeCvtF16C` (this unit takes the family's ``avx2`` place)."""

    isa = ISA

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        pair = (p["src"], p["dst"])
        if pair not in (("f32", "q8"), ("q8", "f32")) or p["zp_in"] or p["zp_out"]:
            return super().render(em, sym, p)
        size = p["size"]
        full = size - size % 8
        parallel = f"#pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {size} > 262144)"
        if pair == ("f32", "q8"):
            step = f"xm_qscaled8(xm_qmul8({{load}}, {W8.set1(f32(inverse(p['s_out'])))}))"
            body = f"_mm_storel_epi64((__m128i*)(out + i), {step.format(load='_mm256_loadu_ps(in + i)')});"
            last = step.format(load="_mm256_loadu_ps(t)")
            tail = (f"float t[8] = {{0}}; memcpy(t, in + {full}, {size % 8} * sizeof(float));"
                    f" xm_q8_put8(out + {full}, {last}, 0, {size % 8});")  # fmt: skip
            types = "const float* in = (const float*)in_;\n  int8_t* out = (int8_t*)out_;"
        else:
            scale = W8.set1(f32(p["s_in"]))
            deq = "xm_qdeq8(_mm256_cvtepi8_epi32({load}), " + scale + ")"
            body = f"_mm256_storeu_ps(out + i, {deq.format(load='xm_q8_load8(in + i, 8)')});"
            tail = (f"xm_f32_put8(out + {full}, {deq.format(load=f'xm_q8_load8(in + {full}, {size % 8})')},"
                    f" 0, {size % 8});")  # fmt: skip
            types = "const int8_t* in = (const int8_t*)in_;\n  float* out = (float*)out_;"
        # the helpers travel with the function (include-guarded), as x86_int8's TypeCvtQ8Vnni's
        return REQUANT_C + SUPPORT + exact(f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  {types}
  (void)ws;
  {parallel}
  for (long i = 0; i < {full}; i += 8) {body}
  {("{ " + tail + " }") if size % 8 else ""}
}}
""")


KERNEL_UNITS = (
    Conv2dQ8Avx2(), Conv2dQ8Relu6Avx2(), ConvDepthwiseQ8Avx2(), ConvDepthwiseQ8Relu6Avx2(), ElemwiseQ8Avx2(),
    MaxPoolQ8Avx2(), TypeCvtQ8Avx2(),
)  # fmt: skip

__all__ = ["AVX2", "ISA", "KERNEL_UNITS"]
