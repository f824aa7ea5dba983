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

import numpy as np
from xdsl.ir import Operation

from backends.c.templates import Template
from backends.c.templates.requant import REQUANT_C, exact, f32, int_activation, inverse, post_processed, ratio
from backends.c.templates.typed import Conv2dQ8
from backends.c.templates.x86_int8 import (
    PARALLEL_WORK,
    _bias_decls,
    _bias_operands,
    _conv_q8,
    _kernel_args,
    _out_ctype,
    _Relu6Island,
    island_form,
)
from backends.c.templates.x86_int8_gemm import Conv2dQ8Vnni
from backends.c.templates.x86_int8_gemm import _geometry as gemm_geometry
from dialects import tensor as T
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "avx2"
VREGS = 16  # ymm registers
EPILOGUE_CYCLES = 10  # requantization and store of one vector of 8 pixels, about

SUPPORT = r"""
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
}
/* x86_int8's ReLU6 island forms (xm_qisland_*16; island_form proves them) on 8 lanes */
static inline __m256 xm_qisland_in8(__m256 y, float hi) {
  const __m256 v = _mm256_max_ps(xm_qadd8(y, _mm256_set1_ps(0.5f)), _mm256_setzero_ps());
  return _mm256_min_ps(v, _mm256_set1_ps(hi));
}
static inline __m128i xm_qisland_clamp8(__m256 y, float hi) {
  return xm_q8_narrow8(_mm256_cvttps_epi32(xm_qisland_in8(y, hi)));
}
static inline __m128i xm_qisland_scale8(__m256 r, __m256 k, float hi) {
  __m256 v = xm_qadd8(xm_qmul8(r, k), _mm256_set1_ps(0.5f));
  if (hi < 127.f) v = _mm256_min_ps(v, _mm256_set1_ps(hi));
  return xm_q8_narrow8(_mm256_cvttps_epi32(v));
}
static inline __m128i xm_qisland_float8(__m256 r, __m256 s, __m256 inv_out) {
  const __m256 x = _mm256_min_ps(xm_qmul8(r, s), _mm256_set1_ps(6.f));
  return xm_q8_narrow8(_mm256_cvttps_epi32(xm_qadd8(xm_qmul8(x, inv_out), _mm256_set1_ps(0.5f))));
}
/* xm_qact's RELU (y < 0 ? 0 : y: max_ps returns its second operand on a NaN or two zeros) */
static inline __m256 xm_qrelu8(__m256 y) { return _mm256_max_ps(_mm256_setzero_ps(), y); }
/* hswish_x86: x * min(max(x + 3, 0), 6) * (1.0f / 6) */
static inline __m256 xm_qhswish8(__m256 x) {
  __m256 r6 = xm_qadd8(x, _mm256_set1_ps(3.f));
  r6 = _mm256_max_ps(_mm256_setzero_ps(), _mm256_min_ps(_mm256_set1_ps(6.f), r6));
  return xm_qmul8(xm_qmul8(x, r6), _mm256_set1_ps(1.f / 6.f));
}
static inline __m256 xm_qdeq8(__m256i q, __m256 scale) { return xm_qmul8(_mm256_cvtepi32_ps(q), scale); }
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


def _vec_int_activation(p: dict[str, Any], acc: str) -> str:
    """``int_activation`` on int32 lanes: RELU on the accumulator where no float post-process runs."""
    return f"{acc} = _mm256_max_epi32({acc}, _mm256_setzero_si256());" if int_activation(p, "a") else ""


def _island_value(y: str, s_in: float, s_out: float) -> str:
    """The int8 lanes of the ReLU6 island after the convolution's scaled value ``y`` (x86_int8's
    island_form decides the form)."""
    form, k, hi = island_form(float(np.float32(s_in)), float(np.float32(s_out)))
    if form == "clamp":
        return f"xm_qisland_clamp8({y}, {hi}.f)"
    r = f"xm_qtrunc8(xm_qisland_in8({y}, 127.f))"
    if form == "scale":
        return f"xm_qisland_scale8({r}, _mm256_set1_ps({f32(k)}), {hi}.f)"
    return f"xm_qisland_float8({r}, _mm256_set1_ps({f32(s_in)}), _mm256_set1_ps({f32(inverse(s_out))}))"


def epilogue_value(p: dict[str, Any], acc: str, fbias: str) -> tuple[str, str, str]:
    """x86_int8's ``_epilogue_value`` on 8 lanes: the stored value of the true accumulator ``acc``
    (int32 lanes, integer bias and RELU applied) as (C vector type, expression, the ``xm_*_put8``
    store of a lane range); ``fbias`` is the channel's float bias where the result is post-processed."""
    out, act = p["out"], p["act"]
    if out == "q32_same":
        return "__m256i", acc, "xm_i32_put8"
    s_acc = f"_mm256_set1_ps({f32(p['s_acc'])})"
    if out == "f32":
        y = f"xm_qdeq8({acc}, {s_acc})"
        return "__m256", f"xm_qhswish8({y})" if act == "hswish" else y, "xm_f32_put8"
    if post_processed(p):  # _post_process: scaled accumulator + scaled bias, activation, * 1/s_out
        y = f"xm_qdeq8({acc}, {s_acc})"
        if p["bias"]:
            y = f"xm_qadd8({y}, _mm256_set1_ps({fbias}))"
        y = {"relu": f"xm_qrelu8({y})", "hswish": f"xm_qhswish8({y})"}.get(act, y)
        y = f"xm_qmul8({y}, _mm256_set1_ps({f32(inverse(p['s_out']))}))"
    else:  # the TypeCvt QuantizedS32 -> QuantizedS8: one multiplication by s_acc / s_out
        y = f"xm_qdeq8({acc}, _mm256_set1_ps({f32(ratio(p['s_acc'], p['s_out']))}))"
    if p.get("island"):
        return "__m128i", _island_value(y, *p["island"]), "xm_q8_put8"
    nonneg = post_processed(p) and act == "relu"
    return "__m128i", f"xm_qscaled8_{'nonneg' if nonneg else 'finite'}({y})", "xm_q8_put8"


def choose_tile(pixels: int, ocg: int, steps: int) -> tuple[int, int]:
    """(NV, MR) of the register tile with the fewest estimated cycles: ``steps`` dword steps of
    ``vpmaddubsw``, ``vpmaddwd`` and ``vpaddd`` per accumulator (three vector ports, the products on
    two) and the loads (NV activation vectors, MR weight broadcasts, two a cycle), plus the epilogue
    of each vector. Registers: accumulators, NV activations, a broadcast, the ones and a product."""
    best: tuple[float, int, int] | None = None
    for nv in range(1, 5):
        for mr in range(1, 13):
            if mr * nv + nv + 3 > VREGS:
                continue
            step = max(mr * nv, (nv + mr) / 2)
            tiles = -(-pixels // (8 * nv)) * -(-ocg // mr)
            cycles = tiles * (steps * step + EPILOGUE_CYCLES * nv * mr)
            if best is None or cycles < best[0]:
                best = (cycles, nv, mr)
    assert best is not None
    return best[1], best[2]


class Conv2dQ8Avx2(Template):
    """Dense and grouped int8 NCHW convolution on AVX2: x86_int8_gemm's planes (without its ``+ 128``)
    and filter packing, a register-tiled ``vpmaddubsw`` GEMM (7-bit activations, or each byte split
    where the call's input has a negative one), bias, RELU and requantization fused in the tile's
    epilogue."""

    family = "conv2d_q8_x86"
    isa = ISA
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 95  # the family's (x86_int8_gemm): the target's ISA order puts avx512vnni first

    def match(self, op: Operation) -> Lowered | None:
        got = _conv_q8(op)
        if got is None:
            return None
        p, operands, _ = got
        g = p["groups"]
        if g == p["ic"] == p["oc"] and g > 1:
            return None  # depthwise: conv2d_dw_q8_x86
        if (p["ic"] // g) * p["fh"] * p["fw"] * 128 * 128 >= 2**31:
            return None  # the int32 accumulator could overflow
        biases = _bias_operands(p, operands, np.zeros(p["oc"], np.int64))
        if biases is None:
            return None
        geo = gemm_geometry(p)
        pixels = p["oh"] * geo["wq"]
        nv, mr = choose_tile(pixels, p["oc"] // g, geo["c4"] * p["fh"] * p["fw"])
        ppad = -(-pixels // (8 * nv)) * 8 * nv
        # a plane holds every dword a tile may read: ppad + the farthest tap's offset, in 32 bytes
        plane = -(-(ppad + (geo["hq"] - p["oh"]) * geo["wq"] + geo["wq"]) // 8) * 8
        p.update(geo, nv=nv, mr=mr, pixels=pixels, ppad=ppad, plane=plane)
        return Lowered(p, [operands[0], operands[1], *biases])

    def symbol(self, p: dict[str, Any]) -> str:
        return "avx2_" + Conv2dQ8.symbol(Conv2dQ8(), p)

    def workspace(self, p: dict[str, Any]) -> int:
        phases = len(p["row_phases"]) * len(p["col_phases"])
        return p["c4"] * phases * p["plane"] * 4 + 64  # + 64: the planes start on a cache line

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        # x86_int8_gemm's [G][OC/MR][IC/4][tap][MR][4]: one broadcast dword per tile row
        return Conv2dQ8Vnni.pack(Conv2dQ8Vnni(), operand, array, p)

    def _pack_code(self, p: dict[str, Any]) -> str:
        """The parallel loop packing one image and group into planes; ``negative`` becomes 1 when an
        activation is negative."""
        ih, iw = p["ih"], p["iw"]
        sh, sw, ph, pw = p["sh"], p["sw"], p["ph"], p["pw"]
        hq, wq, c4, plane = p["hq"], p["wq"], p["c4"], p["plane"]
        rows, cols = p["row_phases"], p["col_phases"]
        nph = len(rows) * len(cols)
        icg = p["ic"] // p["groups"]
        # a plane without padding or phases is the channel itself: one row of hq * wq pixels
        flat = (sh, sw, ph, pw, hq, wq) == (1, 1, 0, 0, ih, iw)
        lines, length = (1, hq * wq) if flat else (hq, wq)
        row_len = length if flat else iw
        gathers = ", ".join(f"xm_q8_gather16_avx2(src[{j}], col, {sw}, {row_len})" for j in range(4))
        return f"""
      int signs = 0;
      #pragma omp for schedule(static)
      for (int item = 0; item < {c4 * nph * lines}; ++item) {{
        const int cq = item / {nph * lines}, phase = item / {lines} % {nph}, i = item % {lines};
        static const int row_phase[] = {{{", ".join(str(a) for a in rows)}}};
        static const int col_phase[] = {{{", ".join(str(b) for b in cols)}}};
        const int a = row_phase[phase / {len(cols)}], b = col_phase[phase % {len(cols)}];
        const int iy = i * {sh} + a - {ph};
        const int8_t* src[4];
        for (int j = 0; j < 4; ++j) {{
          const int c = 4 * cq + j;
          src[j] = c < {icg} && (unsigned)iy < {ih}u ? xg + ((long)c * {ih} + iy) * {iw} : NULL;
        }}
        int8_t* dst = planes + ((long)(cq * {nph} + phase) * {plane} + (long)i * {length}) * 4;
        for (int c0 = 0; c0 < {length}; c0 += 16) {{
          const int col = c0 * {sw} + b - {pw};
          const __m128i q[4] = {{{gathers}}};
          signs |= _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q[0], q[1]), _mm_or_si128(q[2], q[3])));
          xm_q8_quad16_avx2(dst + 4 * c0, q[0], q[1], q[2], q[3], {length} - c0 < 16 ? {length} - c0 : 16);
        }}
        if (i == {lines - 1}) memset(dst + {length * 4}, 0, {(plane - hq * wq) * 4});
      }}
      if (signs) {{
        #pragma omp atomic write
        negative[nn * {p["groups"]} + g] = 1;
      }}
      #pragma omp barrier"""

    def _store_code(self, p: dict[str, Any]) -> str:
        """The tile's epilogue: requantize each accumulator (``acc``, MR x NV vectors) and store the
        lanes of real pixels."""
        oh, ow, wq, nv, mr, pixels = (p[k] for k in ("oh", "ow", "wq", "nv", "mr", "pixels"))
        oc, ocg = p["oc"], p["oc"] // p["groups"]
        otype = _out_ctype(p["out"])
        vtype, value, put = epilogue_value(p, "t", "fb")
        contiguous = wq == ow
        segments = 8 // wq + 2
        prologue = ""
        if not contiguous:
            # the runs of one vector's lanes that are real pixels of one output row: the lanes [lo, hi)
            # and the output offset of lane lo, the same for every channel of the tile
            prologue = f"""
        long seg_at[{nv}][{segments}]; int seg_lo[{nv}][{segments}], seg_hi[{nv}][{segments}], segs[{nv}];
        for (int v = 0; v < {nv}; ++v) {{
          const int q0 = p0 + 8 * v, end = q0 + 8 < {pixels} ? q0 + 8 : {pixels};
          int k = 0;
          for (int q = q0; q < end;) {{
            const int oy = q / {wq}, ox = q - oy * {wq};
            const int run = end - q < {wq} - ox ? end - q : {wq} - ox;
            if (ox < {ow}) {{
              const int len = run < {ow} - ox ? run : {ow} - ox;
              seg_lo[v][k] = q - q0; seg_hi[v][k] = q - q0 + len;
              seg_at[v][k] = (long)oy * {ow} + ox;
              ++k;
            }}
            q += run;
          }}
          segs[v] = k;
        }}"""
        fb = "fbias[o]" if p["bias"] and post_processed(p) else "0.f"
        rows = []
        for i in range(mr):
            body = []
            for v in range(nv):
                if contiguous:
                    q = f"p0 + {8 * v}"
                    end = f"{pixels} - ({q}) < 8 ? {pixels} - ({q}) : 8"
                    store = f"if ({q} < {pixels}) {put}(yo + {q}, r, 0, {end});"
                else:
                    store = (
                        f"for (int k = 0; k < segs[{v}]; ++k) "
                        f"{put}(yo + seg_at[{v}][k], r, seg_lo[{v}][k], seg_hi[{v}][k]);"
                    )
                body.append(
                    f"{{ __m256i t = _mm256_load_si256((const __m256i*)(acc + {(i * nv + v) * 8}));"
                    f" t = _mm256_add_epi32(t, bv); {_vec_int_activation(p, 't')}"
                    f" const {vtype} r = {value}; {store} }}"
                )
            rows.append(
                f"if (o0 + {i} < {ocg}) {{ const int o = g * {ocg} + o0 + {i};"
                f" const __m256i bv = _mm256_set1_epi32(bias[o]); const float fb = {fb}; (void)fb;"
                f" {otype}* yo = y + ((long)nn * {oc} + o) * {oh * ow};\n          "
                + "\n          ".join(body)
                + " }"
            )
        return prologue + "\n        " + "\n        ".join(rows)

    def _tile_code(self, sym: str, p: dict[str, Any], offsets: list[int], split: bool) -> str:
        """The micro-kernel: MR x NV accumulators over every channel quadruple and tap, 7-bit
        activations (``split`` false) or each byte split into its low 7 bits and its sign."""
        nv, mr, c4, plane = (p[k] for k in ("nv", "mr", "c4", "plane"))
        nph = len(p["row_phases"]) * len(p["col_phases"])
        acc = [[f"c{i}_{v}" for v in range(nv)] for i in range(mr)]
        decl = " ".join(f"__m256i {a} = _mm256_setzero_si256();" for row in acc for a in row)
        spill = " ".join(
            f"_mm256_store_si256((__m256i*)(acc + {8 * (i * nv + v)}), {name});"
            for i, row in enumerate(acc)
            for v, name in enumerate(row)
        )
        loads = " ".join(
            f"const __m256i b{v} = _mm256_loadu_si256((const __m256i*)(bk + {32 * v}));" for v in range(nv)
        )
        if split:  # x = (x & 127) - 128 * (x < 0): the low bits weighted 1, the sign bit -128
            loads += " " + " ".join(
                f"const __m256i l{v} = _mm256_and_si256(b{v}, low7),"
                f" s{v} = _mm256_and_si256(_mm256_srli_epi16(b{v}, 7), one8);"
                for v in range(nv)
            )
            product = (
                "_mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(l{v}, a), ones), "
                "_mm256_madd_epi16(_mm256_maddubs_epi16(s{v}, a), m128))"
            )
        else:
            product = "_mm256_madd_epi16(_mm256_maddubs_epi16(b{v}, a), ones)"
        products = "\n      ".join(
            f"{{ const __m256i a = _mm256_set1_epi32(ak[{i}]);"
            + "".join(
                f" {acc[i][v]} = _mm256_add_epi32({acc[i][v]}, {product.format(v=v)});" for v in range(nv)
            )
            + " }"
            for i in range(mr)
        )
        name = f"{sym}_tile_{'s8' if split else 'u7'}"
        constants = "const __m256i ones = _mm256_set1_epi16(1);"
        if split:
            constants += (
                " const __m256i m128 = _mm256_set1_epi16(-128), low7 = _mm256_set1_epi8(0x7F),"
                " one8 = _mm256_set1_epi8(1);"
            )
        return f"""
static __attribute__((noinline)) void {name}(const int8_t* bp, const int32_t* ak, int32_t* acc) {{
  static const int tap_offset[{len(offsets)}] = {{{", ".join(map(str, offsets))}}};
  {constants}
  {decl}
  for (int cq = 0; cq < {c4}; ++cq, bp += {nph * plane * 4})
    for (int tap = 0; tap < {len(offsets)}; ++tap, ak += {mr}) {{
      const int8_t* bk = bp + tap_offset[tap];
      {loads}
      {products}
    }}
  {spill}
}}"""

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc = (p[k] for k in ("n", "ic", "ih", "iw", "oc"))
        fh, fw, sh, sw, dh, dw, g = (p[k] for k in ("fh", "fw", "sh", "sw", "dh", "dw", "groups"))
        nv, mr, ppad, wq, c4, plane = (p[k] for k in ("nv", "mr", "ppad", "wq", "c4", "plane"))
        rows, cols = p["row_phases"], p["col_phases"]
        nph = len(rows) * len(cols)
        ocg, taps = oc // g, fh * fw
        ocb = -(-ocg // mr)
        ptiles = ppad // (8 * nv)
        tiles = ptiles * ocb
        # the inner tile loop walks the smaller operand, so that the larger one streams through the
        # caches once: the weights (deep layers with few pixels) or the planes
        weights_first = ocg * c4 * 4 * taps > nph * plane * 4 * c4
        tile_of = (
            f"const int o0 = t / {ptiles} * {mr}, p0 = t % {ptiles} * {8 * nv};"
            if weights_first
            else f"const int p0 = t / {ocb} * {8 * nv}, o0 = t % {ocb} * {mr};"
        )
        otype = _out_ctype(p["out"])
        # the byte offset of each tap's dwords from a tile's first pixel in its channel quadruple
        offsets = [
            ((rows.index(r * dh % sh) * len(cols) + cols.index(s * dw % sw)) * plane + (r * dh // sh) * wq
             + s * dw // sw) * 4
            for r in range(fh)
            for s in range(fw)
        ]  # fmt: skip
        work = n * oc * p["oh"] * p["ow"] * (ic // g) * taps
        # the micro-kernels are functions of their own: the epilogue's constants then cost no registers
        return exact(f"""
{self._tile_code(sym, p, offsets, split=False)}
{self._tile_code(sym, p, offsets, split=True)}
static void {sym}({_kernel_args(p)}) {{
  const int8_t* x = (const int8_t*)x_;
  const int32_t* wpk = (const int32_t*)w_;
  {_bias_decls(p)}
  {otype}* y = ({otype}*)y_;
  int8_t* planes = (int8_t*)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  int negative[{n * g}] = {{0}};  /* per image and group: an activation below zero (the split kernel) */
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  for (int nn = 0; nn < {n}; ++nn)
    for (int g = 0; g < {g}; ++g) {{
      const int8_t* xg = x + ((long)nn * {ic} + (long)g * {ic // g}) * {ih * iw};
      {self._pack_code(p)}
      int split;
      #pragma omp atomic read
      split = negative[nn * {g} + g];
      #pragma omp for schedule(static)
      for (int t = 0; t < {tiles}; ++t) {{
        {tile_of}
        int32_t acc[{mr * nv * 8}] __attribute__((aligned(32)));
        const int8_t* bp = planes + (long)p0 * 4;
        const int32_t* ak = wpk + ((long)g * {ocb} + o0 / {mr}) * {c4 * taps * mr};
        if (split) {sym}_tile_s8(bp, ak, acc); else {sym}_tile_u7(bp, ak, acc);
        {self._store_code(p)}
      }}
    }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT


class Conv2dQ8Relu6Avx2(_Relu6Island, Conv2dQ8Avx2):
    family = "conv2d_q8_relu6_x86"
    conv_family = Conv2dQ8Avx2.family
    priority = 102  # the family's (x86_int8_gemm)


KERNEL_UNITS = (Conv2dQ8Avx2(), Conv2dQ8Relu6Avx2())

__all__ = ["ISA", "KERNEL_UNITS", "choose_tile", "epilogue_value"]
