"""int8 kernels for x86 with AVX-512 VNNI (ISA ``avx512vnni``, the ``vnni`` feature of x86 targets):
NCHW convolutions (dense, 1x1, grouped; depthwise on its own), elementwise Q-modes and max pooling.
Results are exact against :mod:`backends.reference.quant_kernels`.

Dense convolutions are a GEMM over the im2col matrix. ``vpdpbusd`` multiplies *unsigned* bytes by
signed bytes, so activations are packed as ``x + 128`` (``x ^ 0x80``; a padding zero becomes 128)
and each output channel's bias absorbs ``-128 * sum(w)`` at pack time: exact in int32. The packed
activations (workspace) are ``[K/4][P][4]`` bytes, K = IC/groups x FH x FW (zero-padded to 4 in the
filter), P = OH x OW pixels padded to the tile width; filters are packed ``[OC/MR][K/4][MR][4]``.
A register tile is MR output channels x NV vectors of 16 pixels (int32 accumulators); MR and NV are
chosen per convolution to waste the fewest padded products. The output stays NCHW (pixels are the
vector lanes), so these kernels slot into the plain int8 graph.

Requantization repeats the reference's float32 arithmetic: ``(float)acc * s_acc`` then
``* (1.f / s_out)``, rounded half away from zero (truncate, then step by the sign where the exact
remainder is at least 0.5), saturated. RELU is applied to the integer accumulator first, as the
reference does.

Depthwise convolutions take 16 output columns per vector: every tap widens 16 input bytes to int32
lanes and multiply-adds with ``vpdpwssd`` against the tap weight in the low 16 bits (the high half is
zero, so the sign-extension bits contribute nothing); border columns run scalar.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation, SSAValue

from backends.c.match import code, qparams, same_type
from backends.c.templates import Template
from backends.c.templates.generic import _ptr_args
from backends.c.templates.nchw88 import TypeCvtF16C
from backends.c.templates.typed import Conv2dQ8, ElemwiseQ, Pool2dQ8
from backends.reference.quant_kernels import Q_MODES
from dialects import tensor as T
from passes.lowering.kernels import Lowered, const_array

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "avx512vnni"
TILES = ((3, 8), (4, 6), (2, 12))  # (vectors of 16 pixels, output channels) per register tile
# below this many multiply-adds a kernel runs on one thread (a barrier costs more than it saves)
PARALLEL_WORK = 1 << 20

SUPPORT = r"""
#ifndef XM_X86_INT8
#define XM_X86_INT8
/* the reference's requantization, scalar: roundf((float)acc * s_acc * inv), saturated to int8 */
static inline int8_t xm_q8_requant(int32_t acc, float s_acc, float inv) {
  const float r = roundf((float)acc * s_acc * inv);
  return (int8_t)(r < -128.f ? -128.f : r > 127.f ? 127.f : r);
}
/* the same on 16 lanes: round half away from zero from the exact remainder of a truncation */
static inline __m128i xm_q8_requant16(__m512i acc, __m512 s_acc, __m512 inv) {
  const __m512 f = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), s_acc), inv);
  const __m512 t = _mm512_roundscale_ps(f, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 d = _mm512_abs_ps(_mm512_sub_ps(f, t));
  const __mmask16 up = _mm512_cmp_ps_mask(d, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.f), _mm512_and_ps(f, _mm512_set1_ps(-0.f)));
  __m512 r = _mm512_mask_add_ps(t, up, t, one);
  r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-128.f)), _mm512_set1_ps(127.f));
  return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r));
}
static inline __mmask16 xm_q8_lanes(long n) {
  return (__mmask16)(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
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


def _out_ctype(out: str) -> str:
    return {"q8": "int8_t", "q32_same": "int32_t", "f32": "float"}[out]


def _rq_params(p: dict[str, Any]) -> bool:
    """Result kinds these kernels write exactly: int8 (zero point 0), the int32 accumulator, float32."""
    return p["out"] in ("q32_same", "f32") or (p["out"] == "q8" and p["zp_out"] == 0)


def _epilogue(p: dict[str, Any], acc: str, dst: str, mask: str) -> str:
    """Vector epilogue: ``acc`` (int32 lanes, bias and RELU applied) stored at ``dst`` under ``mask``."""
    if p["out"] == "q8":
        return f"_mm_mask_storeu_epi8({dst}, {mask}, xm_q8_requant16({acc}, vs_acc, vinv));"
    if p["out"] == "f32":
        return f"_mm512_mask_storeu_ps({dst}, {mask}, _mm512_mul_ps(_mm512_cvtepi32_ps({acc}), vs_acc));"
    return f"_mm512_mask_storeu_epi32({dst}, {mask}, {acc});"


def _scalar_epilogue(p: dict[str, Any], acc: str) -> str:
    if p["out"] == "q8":
        return f"xm_q8_requant({acc}, s_acc, inv)"
    if p["out"] == "f32":
        return f"(float)({acc}) * s_acc"
    return acc


def _consts(p: dict[str, Any]) -> str:
    s_acc, inv = float(np.float32(p["s_acc"])), float(np.float32(p["inv_out"]))
    return (
        f"const float s_acc = {s_acc!r}f, inv = {inv!r}f; (void)s_acc; (void)inv;\n"
        "  const __m512 vs_acc = _mm512_set1_ps(s_acc), vinv = _mm512_set1_ps(inv);"
        " (void)vs_acc; (void)vinv;"
    )


def _conv_q8(op: Operation) -> tuple[dict[str, Any], list[SSAValue | np.ndarray], np.ndarray] | None:
    """The portable int8 convolution's parameters and operands, with the (flipped) filter's values."""
    lowered = Conv2dQ8.match(Conv2dQ8(), op)
    if lowered is None or not _rq_params(lowered.params) or lowered.params["act"] not in ("identity", "relu"):
        return None
    p, operands = dict(lowered.params), list(lowered.operands)
    w = operands[1]
    wv = w if isinstance(w, np.ndarray) else const_array(w)
    if wv is None or p["n"] * p["ic"] == 0:
        return None
    wv = np.asarray(wv).view(np.int8).astype(np.int64)
    return p, operands, wv


def _bias_with(
    p: dict[str, Any], operands: list[SSAValue | np.ndarray], extra: np.ndarray
) -> np.ndarray | None:
    """The int32 per-output-channel bias plus ``extra`` (int64), or None if it leaves int32."""
    bias = np.zeros(p["oc"], np.int64)
    if p["bias"]:
        b = operands[2]
        assert isinstance(b, np.ndarray)
        bias += b.astype(np.int64).reshape(-1)
    total = bias + extra
    if np.abs(total).max(initial=0) >= 2**31:
        return None
    return total.astype(np.int32)


class Conv2dQ8Vnni(Template):
    """Dense and grouped int8 NCHW convolution: im2col packed for ``vpdpbusd``, register-tiled GEMM,
    bias, RELU and requantization fused in the tile's epilogue."""

    family = "conv2d_q8_x86"
    isa = ISA
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 95  # ahead of the portable conv2d_q8 (90), which stays the fallback

    def match(self, op: Operation) -> Lowered | None:
        got = _conv_q8(op)
        if got is None:
            return None
        p, operands, wv = got
        g = p["groups"]
        if g == p["ic"] == p["oc"] and g > 1:
            return None  # depthwise: conv2d_dw_q8_x86
        kk = (p["ic"] // g) * p["fh"] * p["fw"]
        if kk * 255 * 128 >= 2**30:
            return None  # the unsigned-offset accumulator could leave int32
        sums = wv.reshape(p["oc"], -1).sum(axis=1)
        bias = _bias_with(p, operands, -128 * sums)
        if bias is None:
            return None
        pixels = p["oh"] * p["ow"]
        ocg = p["oc"] // g
        nv, mr = min(
            TILES,
            key=lambda t: (-(-pixels // (16 * t[0])) * 16 * t[0] * -(-ocg // t[1]) * t[1], -t[0] * t[1]),
        )
        p.update(bias=1, k=kk, k4=-(-kk // 4), nv=nv, mr=mr, pixels=pixels)
        p["ppad"] = -(-pixels // (16 * nv)) * 16 * nv
        return Lowered(p, [operands[0], operands[1], bias])

    def symbol(self, p: dict[str, Any]) -> str:
        return "vnni_" + Conv2dQ8.symbol(Conv2dQ8(), p)

    def workspace(self, p: dict[str, Any]) -> int:
        return p["k4"] * p["ppad"] * 4

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        g, mr, k4 = p["groups"], p["mr"], p["k4"]
        ocg = p["oc"] // g
        ocb = -(-ocg // mr)
        w = np.asarray(array).view(np.int8).reshape(g, ocg, p["k"])
        full = np.zeros((g, ocb * mr, k4 * 4), np.int8)
        full[:, :ocg, : p["k"]] = w
        # [G][OC/MR][K/4][MR][4]: one tile row's four bytes are one broadcast dword
        packed = full.reshape(g, ocb, mr, k4, 4).transpose(0, 1, 3, 2, 4)
        return np.ascontiguousarray(packed), f"vnni_mr{mr}"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw, g = (
            p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw", "groups")
        )
        icg, ocg = ic // g, oc // g
        kk, k4, nv, mr, pixels, ppad = (p[k] for k in ("k", "k4", "nv", "mr", "pixels", "ppad"))
        ocb = -(-ocg // mr)
        tiles = (ppad // (16 * nv)) * ocb
        otype = _out_ctype(p["out"])
        pointwise = (fh, fw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0)
        if pointwise:
            pack = f"""
      #pragma omp for schedule(static)
      for (int kq = 0; kq < {k4}; ++kq) {{
        const int8_t* r[4];
        for (int j = 0; j < 4; ++j)
          r[j] = 4 * kq + j < {kk} ? xg + (long)(4 * kq + j) * {pixels} : zero;
        xm_q8_quad(xp + (long)kq * {ppad * 4}, r[0], r[1], r[2], r[3], {pixels});
        memset(xp + (long)kq * {ppad * 4} + {pixels * 4}, 0x80, {(ppad - pixels) * 4});
      }}"""
            zero_len = pixels
        else:
            pack = f"""
      #pragma omp for schedule(static)
      for (int item = 0; item < {k4 * oh}; ++item) {{
        const int kq = item / {oh}, oy = item % {oh};
        int8_t rows[4][{ow}];
        for (int j = 0; j < 4; ++j) {{
          const int k = 4 * kq + j;
          const int c = k / {fh * fw}, r = k / {fw} % {fh}, s = k % {fw};
          const int iy = oy * {sh} - {ph} + r * {dh};
          if (k >= {kk} || (unsigned)iy >= {ih}u) memset(rows[j], 0, {ow});
          else xm_q8_row(rows[j], xg + ((long)c * {ih} + iy) * {iw}, {ow}, s * {dw} - {pw}, {sw}, {iw});
        }}
        uint8_t* dst = xp + (long)kq * {ppad * 4} + (long)oy * {ow * 4};
        xm_q8_quad(dst, rows[0], rows[1], rows[2], rows[3], {ow});
        if (oy == {oh - 1}) memset(dst + {ow * 4}, 0x80, {(ppad - pixels) * 4});
      }}"""
            zero_len = 1
        acc = [[f"c{i}_{v}" for v in range(nv)] for i in range(mr)]
        decl = " ".join(f"__m512i {a} = _mm512_setzero_si512();" for row in acc for a in row)
        loads = " ".join(
            f"const __m512i b{v} = _mm512_loadu_si512((const void*)(bk + {64 * v}));" for v in range(nv)
        )
        fmas = "\n          ".join(
            f"{{ const __m512i a = _mm512_set1_epi32(ak[{i}]); "
            + " ".join(f"{acc[i][v]} = _mm512_dpbusd_epi32({acc[i][v]}, b{v}, a);" for v in range(nv))
            + " }"
            for i in range(mr)
        )
        relu = "_mm512_max_epi32(t, _mm512_setzero_si512())" if p["act"] == "relu" else "t"
        stores = []
        for i in range(mr):
            body = " ".join(
                f"{{ const __m512i t = _mm512_add_epi32({acc[i][v]}, bv); const __m512i u = {relu}; "
                f"{_epilogue(p, 'u', f'yo + p0 + {16 * v}', f'xm_q8_lanes({pixels} - p0 - {16 * v})')} }}"
                for v in range(nv)
            )
            stores.append(
                f"if (o0 + {i} < {ocg}) {{ const int o = g * {ocg} + o0 + {i};"
                f" const __m512i bv = _mm512_set1_epi32(bias[o]);"
                f" {otype}* yo = y + ((long)nn * {oc} + o) * {pixels}; {body} }}"
            )
        store = "\n        ".join(stores)
        work = n * oc * pixels * kk
        return f"""
static void {sym}(const void* x_, const void* w_, const void* b_, void* y_, unsigned char* ws, int nt) {{
  const int8_t* x = (const int8_t*)x_;
  const int32_t* wpk = (const int32_t*)w_;
  const int32_t* bias = (const int32_t*)b_;
  {otype}* y = ({otype}*)y_;
  uint8_t* xp = (uint8_t*)ws;
  static const int8_t zero[{zero_len}];
  (void)zero;
  {_consts(p)}
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  for (int nn = 0; nn < {n}; ++nn)
    for (int g = 0; g < {g}; ++g) {{
      const int8_t* xg = x + ((long)nn * {ic} + (long)g * {icg}) * {ih * iw};
      (void)xg;{pack}
      #pragma omp for schedule(static)
      for (int t = 0; t < {tiles}; ++t) {{
        const int p0 = t / {ocb} * {16 * nv}, o0 = t % {ocb} * {mr};
        const uint8_t* bp = xp + (long)p0 * 4;
        const int32_t* ap = wpk + ((long)g * {ocb} + o0 / {mr}) * {k4 * mr};
        {decl}
        for (int kq = 0; kq < {k4}; ++kq) {{
          const uint8_t* bk = bp + (long)kq * {ppad * 4};
          const int32_t* ak = ap + kq * {mr};
          {loads}
          {fmas}
        }}
        {store}
      }}
    }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return SUPPORT


class ConvDepthwiseQ8Vnni(Template):
    """Depthwise int8 NCHW convolution: 16 output columns per vector, one ``vpdpwssd`` per tap."""

    family = "conv2d_dw_q8_x86"
    isa = ISA
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 96

    def match(self, op: Operation) -> Lowered | None:
        got = _conv_q8(op)
        if got is None:
            return None
        p, operands, wv = got
        if not (p["groups"] == p["ic"] == p["oc"] and p["groups"] > 1) or p["sw"] > 2:
            return None
        bias = _bias_with(p, operands, np.zeros(p["oc"], np.int64))
        if bias is None:
            return None
        p["bias"] = 1
        return Lowered(p, [operands[0], operands[1], bias])

    def symbol(self, p: dict[str, Any]) -> str:
        return "vnni_dw_" + Conv2dQ8.symbol(Conv2dQ8(), p)

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        # each tap weight as an int32 whose high 16 bits are zero (the vpdpwssd pair partner)
        w = np.asarray(array).view(np.int8).astype(np.int32).reshape(-1) & 0xFFFF
        return np.ascontiguousarray(w.astype(np.int32)), "dw_w16"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        otype = _out_ctype(p["out"])
        # interior columns: every tap of the 16 lanes inside the row
        lo = min(ow, max(0, -(-pw // sw)))
        hi = max(lo, min(ow, (iw - 1 + pw - (fw - 1) * dw) // sw + 1))
        load = (
            "_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)src))"
            if sw == 1
            else "_mm512_cvtepi8_epi32(_mm256_cvtepi16_epi8(_mm256_maskz_loadu_epi8(0x7FFFFFFFu, src)))"
        )
        relu_v = "v = _mm512_max_epi32(v, _mm512_setzero_si512());" if p["act"] == "relu" else ""
        relu_s = "if (a < 0) a = 0;" if p["act"] == "relu" else ""
        work = n * c * oh * ow * fh * fw
        return f"""
static void {sym}(const void* x_, const void* w_, const void* b_, void* y_, unsigned char* ws, int nt) {{
  const int8_t* x = (const int8_t*)x_;
  const int32_t* w = (const int32_t*)w_;
  const int32_t* bias = (const int32_t*)b_;
  {otype}* y = ({otype}*)y_;
  (void)ws;
  {_consts(p)}
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK // 4}L)
  for (int nc = 0; nc < {n * c}; ++nc) {{
    const int ch = nc % {c};
    const int8_t* xp = x + (long)nc * {ih * iw};
    const int32_t* wp = w + (long)ch * {fh * fw};
    {otype}* yp = y + (long)nc * {oh * ow};
    for (int r = 0; r < {oh}; ++r) {{
      {otype}* yr = yp + (long)r * {ow};
      int q = {lo};
      for (; q + 16 <= {hi}; q += 16) {{
        __m512i v = _mm512_set1_epi32(bias[ch]);
        for (int kh = 0; kh < {fh}; ++kh) {{
          const int iy = r * {sh} - {ph} + kh * {dh};
          if ((unsigned)iy >= {ih}u) continue;
          const int8_t* row = xp + (long)iy * {iw} + q * {sw} - {pw};
          for (int kw = 0; kw < {fw}; ++kw) {{
            const int8_t* src = row + kw * {dw};
            v = _mm512_dpwssd_epi32(v, {load}, _mm512_set1_epi32(wp[kh * {fw} + kw]));
          }}
        }}
        {relu_v}
        {_epilogue(p, "v", "yr + q", "0xFFFF")}
      }}
      for (int qq = 0; qq < {ow}; ++qq) {{
        if (qq >= {lo} && qq < q) {{ qq = q - 1; continue; }}
        int32_t a = bias[ch];
        for (int kh = 0; kh < {fh}; ++kh) {{
          const int iy = r * {sh} - {ph} + kh * {dh};
          if ((unsigned)iy >= {ih}u) continue;
          for (int kw = 0; kw < {fw}; ++kw) {{
            const int ix = qq * {sw} - {pw} + kw * {dw};
            if ((unsigned)ix < {iw}u) a += (int32_t)(int16_t)wp[kh * {fw} + kw] * xp[(long)iy * {iw} + ix];
          }}
        }}
        {relu_s}
        yr[qq] = {_scalar_epilogue(p, "a")};
      }}
    }}
  }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return SUPPORT


# ----------------------------------------------------------------------------------------------
# Elementwise and pooling

# float modes with a vector form: C over __m512 a, b (dequantized operands)
VEC_MODES = {
    "add": "_mm512_add_ps(a, b)",
    "sub": "_mm512_sub_ps(a, b)",
    "mul": "_mm512_mul_ps(a, b)",
    "fuse_add_relu": "_mm512_max_ps(_mm512_add_ps(a, b), _mm512_setzero_ps())",
    "relu": "_mm512_max_ps(a, _mm512_setzero_ps())",
}
SCALAR_MODES = {
    "add": "a + b",
    "sub": "a - b",
    "mul": "a * b",
    "fuse_add_relu": "(a + b > 0.f ? a + b : 0.f)",
    "relu": "(a > 0.f ? a : 0.f)",
}


class ElemwiseQ8Vnni(Template):
    """int8 ``quantize(f(dequantize(a), dequantize(b)))`` on same-shape operands (ResNet's residual
    ``QFUSE_ADD_RELU``, MobileNetV2's ``QADD``), 16 lanes at a time, the reference's float32 order."""

    family = "elemwise_q8_x86"
    isa = ISA
    ops = (T.ElemwiseOp, T.ElemwiseMultiTypeOp)
    priority = 95  # ahead of the portable elemwise_q (90), behind float32 elemwise (100)

    def match(self, op: Operation) -> Lowered | None:
        if isinstance(op, T.ElemwiseMultiTypeOp):
            mode = op.params()["mode"]
            if mode not in Q_MODES:
                return None
        lowered = ElemwiseQ.match(ElemwiseQ(), op)
        if lowered is None:
            return None
        p = lowered.params
        arity = len(p["strides"])
        if p["mode"] not in VEC_MODES or arity != (1 if p["mode"] == "relu" else 2):
            return None
        if set(p["dtypes"]) != {"q8"} or any(p["zps"]) or len(p["shape"]) != 1:
            return None
        if any(s != (1,) for s in p["strides"]):
            return None  # broadcasts stay portable
        return lowered

    def symbol(self, p: dict[str, Any]) -> str:
        return "vnni_" + ElemwiseQ.symbol(ElemwiseQ(), p)

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        arity = len(p["strides"])
        size = p["shape"][0]
        scales = [float(np.float32(s)) for s in p["scales"]]
        inv = float(np.float32(1.0) / np.float32(scales[arity]))
        names = "ab"[:arity]
        vloads = " ".join(
            f"const __m512 {names[i]} = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32("
            f"_mm_maskz_loadu_epi8(m, in{i} + i))), _mm512_set1_ps({scales[i]!r}f));"
            for i in range(arity)
        )
        return f"""
static void {sym}({_ptr_args(arity, 1)}) {{
  {" ".join(f"const int8_t* in{i} = (const int8_t*)in{i}_;" for i in range(arity))}
  int8_t* out = (int8_t*)out0_;
  const __m512 vinv = _mm512_set1_ps({inv!r}f);
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {size} > 262144)
  for (long i = 0; i < {size}; i += 16) {{
    const __mmask16 m = xm_q8_lanes({size} - i);
    {vloads}
    const __m512 f = {VEC_MODES[p["mode"]]};
    _mm_mask_storeu_epi8(out + i, m, xm_q8_requant_f(f, vinv));
  }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return SUPPORT + REQUANT_F


REQUANT_F = r"""
#ifndef XM_X86_INT8_F
#define XM_X86_INT8_F
/* quantize 16 float lanes to int8: roundf(f * inv) saturated, as the reference's quantize */
static inline __m128i xm_q8_requant_f(__m512 v, __m512 inv) {
  const __m512 f = _mm512_mul_ps(v, inv);
  const __m512 t = _mm512_roundscale_ps(f, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 d = _mm512_abs_ps(_mm512_sub_ps(f, t));
  const __mmask16 up = _mm512_cmp_ps_mask(d, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.f), _mm512_and_ps(f, _mm512_set1_ps(-0.f)));
  __m512 r = _mm512_mask_add_ps(t, up, t, one);
  r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-128.f)), _mm512_set1_ps(127.f));
  return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r));
}
#endif
"""


class MaxPoolQ8Vnni(Template):
    """int8 max pooling, NCHW, same dtype in and out: 16 output columns per vector (strides 1, 2)."""

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

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        ih, iw, oh, ow, fh, fw = p["ih"], p["iw"], p["oh"], p["ow"], p["fh"], p["fw"]
        sh, sw, ph, pw = p["sh"], p["sw"], p["ph"], p["pw"]
        lo = min(ow, max(0, -(-pw // sw)))
        hi = max(lo, min(ow, (iw - 1 + pw - (fw - 1)) // sw + 1))
        load = (
            "_mm_loadu_si128((const __m128i*)src)"
            if sw == 1
            else "_mm256_cvtepi16_epi8(_mm256_maskz_loadu_epi8(0x7FFFFFFFu, src))"
        )
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


class TypeCvtQ8Vnni(TypeCvtF16C):
    """``typecvt`` between float32 and int8 (zero point 0) 16 lanes at a time, the reference's
    quantize (``roundf(x * (1.f / s))`` saturated) and dequantize; other pairs as on AVX2. The float
    islands quantized graphs keep (MobileNetV2's RELU6 between a dequantize and a quantize) pay
    these conversions on every activation."""

    isa = ISA

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        pair = (p["src"], p["dst"])
        if pair not in (("f32", "q8"), ("q8", "f32")) or p["zp_in"] or p["zp_out"]:
            return super().render(em, sym, p)
        size = p["size"]
        if pair == ("f32", "q8"):
            inv = float(np.float32(1.0) / np.float32(p["s_out"]))
            ctypes, body = ("float", "int8_t"), (
                f"_mm_mask_storeu_epi8(out + i, m, xm_q8_requant_f(_mm512_maskz_loadu_ps(m, in + i), "
                f"_mm512_set1_ps({inv!r}f)));"
            )
        else:
            scale = float(np.float32(p["s_in"]))
            ctypes, body = ("int8_t", "float"), (
                "_mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32("
                f"_mm_maskz_loadu_epi8(m, in + i))), _mm512_set1_ps({scale!r}f)));"
            )
        # the helpers travel with the function (include-guarded): support() must stay the portable
        # template's string, which the emitter then writes once for both
        return SUPPORT + REQUANT_F + f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const {ctypes[0]}* in = (const {ctypes[0]}*)in_;
  {ctypes[1]}* out = ({ctypes[1]}*)out_;
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {size} > 262144)
  for (long i = 0; i < {size}; i += 16) {{
    const __mmask16 m = xm_q8_lanes({size} - i);
    {body}
  }}
}}
"""



KERNEL_UNITS = (Conv2dQ8Vnni(), ConvDepthwiseQ8Vnni(), ElemwiseQ8Vnni(), MaxPoolQ8Vnni(), TypeCvtQ8Vnni())

__all__ = ["ISA", "KERNEL_UNITS"]
