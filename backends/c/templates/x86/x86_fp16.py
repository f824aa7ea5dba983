"""Float16 kernels computing in AVX512-FP16 arithmetic (the ``avx512fp16`` ISA, ``x86-avx512-fp16+ioc16``):
32 ``_Float16`` lanes per ``__m512h``, plain NCHW activations.

* ``conv2d_gemm_f16``: dense and grouped convolutions as a packed GEMM, ``out[oc, p] = sum_k W[oc, k] *
  col[k, p]`` (``k = (ic, kh, kw)``): the filter is packed ahead of time into ``MR``-row panels, the
  im2col matrix at run time into ``NR``-column panels (a copy for 1x1 stride-1 convolutions, row-aligned
  runs or a general gather otherwise, :func:`backends.c.templates.x86.gemm.conv_pack_mode`); 3x3 stride-1
  layers that Winograd wins are ``x86_fp16_winograd.py``'s, first layers ``x86_fp16_stem.py``'s, small
  outputs ``x86_fp16_pixrows.py``'s (pixels x channels tiles). The
  micro-kernel holds a ``24 x 32`` tile (``16 x 32`` for 64 or 128 output channels) in one ``__m512h``
  accumulator per row and issues one embedded-broadcast ``vfmadd231ph`` per row and ``k`` for one
  vector load; the epilogue (bias along the channels,
  residual, ReLU / ReLU6) runs on the registers of the last ``K`` block before the single store.
* ``matmul_f16``: (batched) matrix products on the same micro-kernel; a constant right-hand side (the
  Linear layer's weight) is packed ahead of time; bias along the columns, residual, ReLU / ReLU6. One
  row times a constant matrix (a classifier head) is a dot product per column panel instead.
* ``conv2d_dw_f16``: depthwise convolutions, 32 output columns per vector, every tap one FMA on a masked
  load (stride 1: 32 consecutive inputs; stride 2: 64 inputs keeping the even lanes; other strides a
  gather), so border columns need no scalar path.
* ``pool2d_f16``: max pooling in float16, average pooling summed in float32 (as the reference does) and
  rounded once; masked loads as in the depthwise kernel.
* ``elemwise_f16`` (the ARM family, rendered for AVX512-FP16): the common modes, each operation rounded
  to float16 as the reference's float16 numpy (``_round`` intrinsics keep gcc from contracting a
  multiply and an add into one FMA).

Float16 accumulation: a convolution's sum over ``K = C * R * S`` terms is accumulated in float16, so
its error against the reference (float32 accumulation, rounded once) grows like ``sqrt(K)`` float16
ulps of the partial sums (``tests/test_x86_fp16.py`` states the tolerances). Ops without a unit here
(softmax, reductions, resize, sigmoid, ...) are computed in float32 by ``kernel-widen-f16``; data
movement (concat, split, dimshuffle, subtensor) is the raw-word family of every element type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import code, conv_common, depthwise_lowered, pool_geometry, same_type
from backends.c.templates import Template, sym_join
from backends.c.templates.arm.neon_fp16 import ElemwiseF16
from backends.c.templates.x86.gemm import ConvGemm, MatmulGemm, conv_pack_mode, matmul_common, matmul_sym
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.lowering.kernels import EpilogueSupport, Lowered, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "avx512fp16"
LANES = 32  # float16 lanes of one zmm register
# the GEMM register tile: MR rows (output channels) x NR columns (pixels, NR / 32 vectors each), K blocks
# 24 x 32: one vector per row, so every A value is an embedded broadcast of its FMA (a separate
# vpbroadcastw would take the second FMA port); the packers below assume NR == LANES
MR, NR, KC = 24, 32, 256
GLOBAL_PLANES = 8  # a global average pool's planes summed side by side (latency 4 x 2 adds per cycle)
# the narrower tile for output channel counts that are multiples of 16 but not of 24 (64, 128: 11% of
# the 24-row tiles' rows would be padding)
MR_NARROW = 16
ACTIVATIONS = frozenset({"identity", "relu", "relu6"})
ACT_CODES = {"identity": 0, "relu": 1, "relu6": 2}
CONV_EPILOGUE = EpilogueSupport(bias="channels", residual=True, activations=ACTIVATIONS)
MATMUL_EPILOGUE = EpilogueSupport(bias="columns", residual=True, activations=ACTIVATIONS)

# helpers every unit here shares: masks, masked loads and stores, strided row loads, the activations
COMMON = """#ifndef XM_H_COMMON
#define XM_H_COMMON
#include <stdint.h>
typedef _Float16 xm_h;
static inline __mmask32 xm_h_mask(long n) {
  return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1u);
}
static inline __m512h xm_h_loadn(const xm_h* p, long n) {
  return _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(xm_h_mask(n), p));
}
static inline void xm_h_storen(xm_h* p, long n, __m512h v) {
  _mm512_mask_storeu_epi16(p, xm_h_mask(n), _mm512_castph_si512(v));
}
/* maxph / minph return their second operand when either is NaN: v goes second, so NaN stays */
static inline __m512h xm_h_act(__m512h v, int act) {
  if (act == 1) return _mm512_max_ph(_mm512_setzero_ph(), v);
  if (act == 2) return _mm512_min_ph(_mm512_set1_ph((xm_h)6), _mm512_max_ph(_mm512_setzero_ph(), v));
  return v;
}
/* numpy's maximum / minimum: a NaN in either operand is the result */
static inline __m512h xm_h_max(__m512h a, __m512h b) {
  return _mm512_mask_blend_ph(_mm512_cmp_ph_mask(a, a, _CMP_UNORD_Q), _mm512_max_ph(a, b), a);
}
static inline __m512h xm_h_min(__m512h a, __m512h b) {
  return _mm512_mask_blend_ph(_mm512_cmp_ph_mask(a, a, _CMP_UNORD_Q), _mm512_min_ph(a, b), a);
}
/* 32 halves row[base + l * s] for the lanes l < nv whose index lies in [0, len); other lanes are fill */
static inline __m512h xm_h_row(const xm_h* row, long base, int s, long nv, long len, __m512i fill) {
  if (s == 1) {
    const long lo = base < 0 ? -base : 0, hi = len - base < nv ? len - base : nv;
    const __mmask32 m = (__mmask32)(xm_h_mask(hi) & ~xm_h_mask(lo));
    return _mm512_castsi512_ph(_mm512_mask_loadu_epi16(fill, m, row + base));
  }
  if (s == 2) {
    /* 64 consecutive halves, then the even ones: the low word of each 32-bit lane */
    const long lo = base < 0 ? -base : 0, hi = len - base < 2 * nv ? len - base : 2 * nv;
    const __mmask32 m0 = (__mmask32)(xm_h_mask(hi) & ~xm_h_mask(lo));
    const __mmask32 m1 = (__mmask32)(xm_h_mask(hi - 32) & ~xm_h_mask(lo - 32));
    const __m512i a = _mm512_mask_loadu_epi16(fill, m0, row + base);
    const __m512i b = _mm512_mask_loadu_epi16(fill, m1, row + base + 32);
    return _mm512_castsi512_ph(_mm512_inserti64x4(
        _mm512_castsi256_si512(_mm512_cvtepi32_epi16(a)), _mm512_cvtepi32_epi16(b), 1));
  }
  xm_h t[32];
  _mm512_storeu_si512(t, fill);
  for (long l = 0; l < nv && l < 32; ++l) {
    const long i = base + l * s;
    if (i >= 0 && i < len) t[l] = row[i];
  }
  return _mm512_loadu_ph(t);
}
#endif
"""


def micro_kernel(mr: int = MR, spread: bool = False) -> str:
    """``xm_hukr_<mr>x32(K, A, B, C, ldc, first, mv, nv, epi, pf)``: C[mv x nv] (+)= A-panel x B-panel in
    float16, one vector of ``NR == LANES`` columns per row; ``epi`` (the last K block only) adds the row
    bias, column bias and residual and applies the activation before the store. Rows >= mv and columns
    >= nv are neither read nor written. ``pf`` (or null): each ``k`` step prefetches the line ``pf + 32 k``
    into L1 (the next A panel, where A panels stream from L3).

    ``spread``: ``xm_hukr_<mr>x32_spread(..., pf, pstep)`` instead prefetches line ``(k * pstep) >> 16``
    of ``pf`` into L2, ``K * pstep / 65536`` lines over the call's ``K`` steps at an even rate: the caller's
    share of a block it reads a while later (the Winograd GEMM's next point's ``U``)."""
    rows = [f"c{i}_0" for i in range(mr)]
    res_row = "xm_h_loadn(epi->res + {i} * epi->ldr + 0, nv - 0)"
    lines = [
        "#ifndef XM_HUKR_EPI",
        "#define XM_HUKR_EPI",
        "typedef struct {",
        "  const xm_h* bias; const xm_h* cbias; const xm_h* res; long ldr; int act;",
        "} xm_hepi;",
        "#endif",
        f"static inline void xm_hukr_{mr}x{NR}{'_spread' if spread else ''}(long K, const xm_h* restrict A,",
        "    const xm_h* restrict B, xm_h* restrict C, long ldc, int first, int mv, int nv,",
        "    const xm_hepi* epi, const xm_h* pf" + (", long pstep) {" if spread else ") {"),
    ]
    lines += [
        f"  __m512h {c} = (first || {i} >= mv) ? _mm512_setzero_ph() : xm_h_loadn(C + {i} * ldc + 0, nv - 0);"
        for i, c in enumerate(rows)
    ]
    lines += ["  #pragma GCC unroll 2", "  for (long k = 0; k < K; ++k) {"]
    lines.append(f"    const __m512h b0 = _mm512_loadu_ph(B + k * {NR} + 0);")
    if spread:
        lines.append("    if (pf) _mm_prefetch((const char*)(pf + ((k * pstep) >> 16) * 32), _MM_HINT_T1);")
    else:
        lines.append("    if (pf) _mm_prefetch((const char*)(pf + k * 32), _MM_HINT_T0);")
    for i, c in enumerate(rows):  # each A value an embedded broadcast of its one FMA
        lines += [
            f"    {{ const __m512h a = _mm512_set1_ph(A[k * {mr} + {i}]);",
            f"      {c} = _mm512_fmadd_ph(a, b0, {c});",
        ]
        lines.append("    }")
    lines += [
        "  }",
        "  if (epi) {",
        "    const __m512h cb0 = epi->cbias ? xm_h_loadn(epi->cbias + 0, nv - 0) : _mm512_setzero_ph();",
    ]
    for i, c in enumerate(rows):
        lines += [
            f"    if ({i} < mv) {{",
            f"      const __m512h rb = epi->bias ? _mm512_set1_ph(epi->bias[{i}]) : _mm512_setzero_ph();",
            f"      {c} = _mm512_add_ph(_mm512_add_ph({c}, rb), cb0);",
            f"      if (epi->res) {c} = _mm512_add_ph({c}, {res_row.format(i=i)});",
            f"      {c} = xm_h_act({c}, epi->act);",
            "    }",
        ]
    lines.append("  }")
    lines += [
        f"  if ({i} < mv) {{ xm_h_storen(C + {i} * ldc + 0, nv - 0, {c}); }}" for i, c in enumerate(rows)
    ]
    lines.append("}")
    # one definition per translation unit: the Winograd unit (x86_fp16_winograd.py) shares it
    guard = f"XM_HUKR_{mr}X{NR}{'_SPREAD' if spread else ''}"
    return f"#ifndef {guard}\n#define {guard}\n" + "\n".join(lines) + "\n#endif\n"


def conv_rows(channels: int) -> int:
    """The GEMM tile's rows (output channels) for a convolution group of ``channels`` outputs."""
    return MR_NARROW if channels % MR_NARROW == 0 and channels % MR != 0 else MR


def _epilogue_words(p: dict[str, Any]) -> list[str]:
    return [
        "bias" if p["bias"] else "",
        "res" if p["residual"] else "",
        p["act"].upper() if p["act"] != "identity" else "",
    ]


def _f16_compute(op: Operation) -> bool:
    """Float16 arithmetic asked for: ``+io16xc32`` (compute_mode float32) stays with the float32-compute
    kernels."""
    return op.params().get("compute_mode", enums.ComputeMode.DEFAULT) != enums.ComputeMode.FLOAT32


def f16_args(p: dict[str, Any], a: str = "x", b: str = "w") -> str:
    """A float16 conv / matmul kernel's C parameters: inputs ``a_`` and ``b_``, the bias and residual its
    epilogue takes, ``y_``, the workspace and the thread count."""
    extra = (["const void* bias_"] if p["bias"] else []) + (["const void* res_"] if p["residual"] else [])
    return ", ".join(
        [f"const void* {a}_", f"const void* {b}_", *extra, "void* y_", "unsigned char* ws", "int nt"]
    )


def f16_head(sym: str, p: dict[str, Any], a: str = "x", b: str = "w") -> str:
    """The kernel's signature (:func:`f16_args`) and first lines: its inputs and output as ``xm_h``."""
    return f"""static void {sym}({f16_args(p, a, b)}) {{
  const xm_h* {a} = (const xm_h*){a}_;
  const xm_h* {b} = (const xm_h*){b}_;
  xm_h* y = (xm_h*)y_;"""


def f16_conv(op: Operation) -> tuple[dict[str, Any], list[Any]] | None:
    """``conv_common``'s parameters and operands of a float16-compute convolution whose activation the
    float16 epilogue applies (every float16 conv unit starts here), else None."""
    got = conv_common(op, "f16")
    if got is None or not _f16_compute(op) or got[0]["act"] not in ACTIVATIONS:
        return None
    return got


def conv_words(p: dict[str, Any]) -> tuple[str, ...]:
    """Symbol words of a convolution's geometry: batch, channels, image, kernel, stride, padding and the
    dilation where it is not 1."""
    dil = (p.get("dh", 1), p.get("dw", 1))
    return (
        f"n{p['n']}", f"ic{p['ic']}", f"{p['ih']}x{p['iw']}", f"oc{p['oc']}", f"k{p['fh']}x{p['fw']}",
        f"s{p['sh']}x{p['sw']}", f"p{p['ph']}x{p['pw']}", f"d{dil[0]}x{dil[1]}" if dil != (1, 1) else "",
    )  # fmt: skip


class ConvUnitF16(Template):
    """What the float16 NCHW convolution units share: their ops, epilogue and ISA, ``dense``, the start
    of a match that takes ungrouped convolutions only, and a symbol naming the geometry and epilogue."""

    ops = (T.ConvolutionOp, T.ConvBiasOp)
    epilogues = {"float16": CONV_EPILOGUE}
    isa = ISA

    @staticmethod
    def dense(op: Operation) -> tuple[dict[str, Any], list[Any]] | None:
        got = f16_conv(op)
        return None if got is None or got[0]["groups"] != 1 else got

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(self.family, *conv_words(p), *_epilogue_words(p))


# the GEMM units' thread split: with few column panels (deep layers, small images) the row panels are
# split between threads too (mch chunks of mper panels; the "n" order's inner loop)
THREAD_SPLIT = (
    "  /* few column panels (deep layers, small images): split the channel panels between threads too */\n"
    "  const int mch = (nt > 1 && {NP} < 2 * nt) ? ({MP} < nt ? {MP} : nt) : 1;\n"
    "  const int mper = ({MP} + mch - 1) / mch;\n"
    "  (void)mper;"
)


def gemm_sweep(order: str, geo: dict[str, int], p: dict[str, Any], rows: int, cols: str, call: str) -> str:
    """The loops over a packed GEMM's ``MP`` row panels, ``K`` blocks and ``NP`` column panels around
    ``call`` (a micro-kernel call on ``kl``, ``mp``, ``m0``, ``mv``, ``j``, ``nv`` and the packed B block
    ``B``), ``rows`` rows in all; ``cols`` declares the panel's first column ``col0`` and ``nv0``. Order
    ``m``: row panels outermost (each A panel, the filter, read once), else column panels outermost
    with :data:`THREAD_SPLIT`'s ``mch`` chunks of row panels."""
    mr, nr, kc, K, NP, MP = p["mr"], p["nr"], p["kc"], geo["K"], geo["NP"], geo["MP"]
    if order == "m":
        return f"""
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int mp = 0; mp < {MP}; ++mp) {{
      const int m0 = mp * {mr};
      const int mv = {rows} - m0 < {mr} ? {rows} - m0 : {mr};
      for (int k0 = 0; k0 < {K}; k0 += {kc}) {{
        const long kl = {K} - k0 < {kc} ? {K} - k0 : {kc};
        for (int j = 0; j < {NP}; ++j) {{
          {cols}
          const int nv = nv0 < {nr} ? nv0 : {nr};
          const xm_h* B = bp + (long)j * {K * nr} + (long)k0 * {nr};
          {call}
        }}
      }}
    }}"""
    return f"""
    #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
    for (int j = 0; j < {NP}; ++j)
    for (int mc = 0; mc < mch; ++mc) {{
      {cols}
      const int nv = nv0 < {nr} ? nv0 : {nr};
      const int mlo = mc * mper, mhi = (mc + 1) * mper < {MP} ? (mc + 1) * mper : {MP};
      for (int k0 = 0; k0 < {K}; k0 += {kc}) {{
        const long kl = {K} - k0 < {kc} ? {K} - k0 : {kc};
        const xm_h* B = bp + (long)j * {K * nr} + (long)k0 * {nr};
        for (int mp = mlo; mp < mhi; ++mp) {{
          const int m0 = mp * {mr};
          const int mv = {rows} - m0 < {mr} ? {rows} - m0 : {mr};
          {call}
        }}
      }}
    }}"""


class ConvGemmF16(ConvGemm):
    """``conv2d_gemm_f16``: dense or grouped NCHW float16 convolution by packed GEMM (module doc); the
    float32 GEMM's geometry, workspace and filter packing on float16 panels."""

    family = "conv2d_gemm_f16"
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 104  # float16 only; the depthwise conv2d_dw_f16 (108) goes first
    epilogues = {"float16": CONV_EPILOGUE}
    panel_dtype = np.float16
    panel_tag = "gemm_h"

    def __init__(self) -> None:
        super().__init__(ISA)

    def match(self, op: Operation) -> Lowered | None:
        got = f16_conv(op)
        if got is None:
            return None
        params, operands = got
        params.update({"mr": conv_rows(params["oc"] // params["groups"]), "nr": NR, "kc": KC})
        params["pack"] = conv_pack_mode(params, NR)
        # more filter than im2col bytes (deep layers, small images): the channel panels go outermost so
        # that each weight is read from memory once, else the column panels
        geo = self.geometry(params)
        params["order"] = "m" if geo["MP"] * params["mr"] > geo["NP"] * NR else "n"
        return Lowered(params, operands)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, *conv_words(p), f"g{p['groups']}" if p["groups"] != 1 else "", p["pack"],
            "mfirst" if p["order"] == "m" else "", *_epilogue_words(p),
        )  # fmt: skip

    def support(self, em: CEmitter) -> str:
        kernels = [micro_kernel(mr, spread) for mr in (MR, MR_NARROW) for spread in (False, True)]
        return COMMON + "".join(kernels)

    def _pack_panel(self, p: dict[str, Any], geo: dict[str, int]) -> str:
        """C statements filling panel ``j`` (``dst``, K x NR) of the im2col matrix of image ``xg``."""
        nr, K = p["nr"], geo["K"]
        ih, iw, oh, ow = p["ih"], p["iw"], p["oh"], p["ow"]
        sh, sw, ph, pw, dh, dw = p["sh"], p["sw"], p["ph"], p["pw"], p["dh"], p["dw"]
        P = oh * ow
        if p["pack"] == "copy":
            return f"""
      const long p0 = (long)j * {nr};
      for (int k = 0; k < {K}; ++k)
        for (int v = 0; v < {nr // LANES}; ++v)
          _mm512_storeu_ph(dst + (long)k * {nr} + v * 32,
                           xm_h_loadn(xg + (long)k * {P} + p0 + v * 32, {P} - p0 - v * 32));"""
        if p["pack"] == "rows":
            return f"""
      const int orow = j / {geo["RP"]}, ow0 = (j % {geo["RP"]}) * {nr};
      const __m512i zero = _mm512_setzero_si512();
      int k = 0;
      for (int ic = 0; ic < {geo["icg"]}; ++ic) {{
        const xm_h* plane = xg + (long)ic * {ih * iw};
        for (int kh = 0; kh < {p["fh"]}; ++kh) {{
          const int ihh = orow * {sh} - {ph} + kh * {dh};
          for (int kw = 0; kw < {p["fw"]}; ++kw, ++k) {{
            xm_h* d = dst + (long)k * {nr};
            const int ok = (unsigned)ihh < {ih}u;
            const xm_h* row = plane + (ok ? (long)ihh * {iw} : 0);
            const long base = (long)ow0 * {sw} - {pw} + kw * {dw};
            for (int v = 0; v < {nr // LANES}; ++v) {{
              const long nv = ok ? {ow} - ow0 - v * 32 : 0;
              _mm512_storeu_ph(d + v * 32, xm_h_row(row, base + v * {32 * sw}, {sw}, nv, {iw}, zero));
            }}
          }}
        }}
      }}"""
        # a panel's NR pixels are runs along output rows: each run is one strided masked row load
        return f"""
      int seg_r[{nr}], seg_c[{nr}], seg_n[{nr}], seg_o[{nr}], ns = 0;
      const int q1 = (j + 1) * {nr} < {P} ? (j + 1) * {nr} : {P};
      for (int q = j * {nr}; q < q1; ++ns) {{
        seg_r[ns] = q / {ow}; seg_c[ns] = q % {ow}; seg_o[ns] = q - j * {nr};
        seg_n[ns] = {ow} - seg_c[ns] < q1 - q ? {ow} - seg_c[ns] : q1 - q;
        q += seg_n[ns];
      }}
      const __m512i zero = _mm512_setzero_si512();
      int k = 0;
      for (int ic = 0; ic < {geo["icg"]}; ++ic) {{
        const xm_h* plane = xg + (long)ic * {ih * iw};
        for (int kh = 0; kh < {p["fh"]}; ++kh)
          for (int kw = 0; kw < {p["fw"]}; ++kw, ++k) {{
            xm_h* d = dst + (long)k * {nr};
            _mm512_storeu_si512(d, zero);
            for (int t = 0; t < ns; ++t) {{
              const int ihh = seg_r[t] * {sh} - {ph} + kh * {dh};
              if ((unsigned)ihh >= {ih}u) continue;
              const long base = (long)seg_c[t] * {sw} - {pw} + kw * {dw};
              xm_h_storen(d + seg_o[t], seg_n[t],
                          xm_h_row(plane + (long)ihh * {iw}, base, {sw}, seg_n[t], {iw}, zero));
            }}
          }}
      }}"""

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        geo = self.geometry(p)
        mr, nr, kc = p["mr"], p["nr"], p["kc"]
        K, NP, MP, RP, ocg = geo["K"], geo["NP"], geo["MP"], geo["RP"], geo["ocg"]
        P = p["oh"] * p["ow"]
        if p["pack"] == "rows":
            cols = (
                f"const int col0 = (j / {RP}) * {p['ow']} + (j % {RP}) * {nr}; "
                f"const int nv0 = {p['ow']} - (j % {RP}) * {nr};"
            )
        else:
            cols = f"const int col0 = j * {nr}; const int nv0 = {P} - col0;"
        bias = f"(const xm_h*)bias_ + g * {ocg} + m0" if p["bias"] else "0"
        res = f"resg + (long)m0 * {P} + col0" if p["residual"] else "0"
        resg = f"(const xm_h*)res_ + ((long)n * {p['oc']} + (long)g * {ocg}) * {P}" if p["residual"] else "0"
        # filter blocks stream from L3 or memory (2 MB at ResNet-50's 1x1 512 -> 2048): each call
        # prefetches (part of) the block the sweep reads next. Order m: the panel's blocks, then the next
        # panel's, lie contiguous; the next block's lines are shared out between the NP calls on this
        # block and prefetched into L2 at an even rate over their K steps (all of them in the first
        # call's steps asked for one line per 12 FMAs, faster than one core's misses return from memory:
        # 512 -> 2048 at 7x7 streamed its filters at 4 GB/s). Order n (row panels innermost): the next
        # row panel's block, into L1
        spread = p["order"] == "m"
        if spread:
            after = f"wg + (long)mp * {K * mr} + (k0 + kl) * {mr}"
            pf = f"nl ? {after} + lo * 32 : 0, (nl << 16) / kl"
            # 64-byte lines of the block after this one (the next K block, or the next panel's first)
            rows = (
                f"k0 + kl < {K} ? ({K} - k0 - kl < {kc} ? {K} - k0 - kl : {kc})"
                f" : mp + 1 < {MP} ? {min(K, kc)} : 0"
            )
            next_lines = f"""const long nxl = ({rows}) * {mr} / 32;
          const long pshare = (nxl + {NP - 1}) / {NP}, lo = j * pshare;
          const long nl = lo < nxl ? (nxl - lo < pshare ? nxl - lo : pshare) : 0;
          """
        else:
            pf = f"mp + 1 < {MP} ? wg + (long)(mp + 1) * {K * mr} + (long)k0 * {mr} : 0"
            next_lines = ""
        ukr = f"xm_hukr_{mr}x{nr}{'_spread' if spread else ''}"
        call = f"""const xm_hepi epi = {{{bias}, 0, {res}, {P}, {ACT_CODES[p["act"]]}}};
          {next_lines}{ukr}(kl, wg + (long)mp * {K * mr} + (long)k0 * {mr}, B, yg + (long)m0 * {P} + col0,
                            {P}, k0 == 0, mv, nv, k0 + kl >= {K} ? &epi : 0, {pf});"""
        compute = gemm_sweep(p["order"], geo, p, ocg, cols, call)
        return f"""
{f16_head(sym, p)}
  xm_h* bp = (xm_h*)ws;
{THREAD_SPLIT.format(NP=NP, MP=MP)}
  for (int n = 0; n < {p["n"]}; ++n)
  for (int g = 0; g < {p["groups"]}; ++g) {{
    const xm_h* xg = x + ((long)n * {p["ic"]} + (long)g * {geo["icg"]}) * {p["ih"] * p["iw"]};
    xm_h* yg = y + ((long)n * {p["oc"]} + (long)g * {ocg}) * {P};
    const xm_h* resg = {resg};
    const xm_h* wg = w + (long)g * {MP * K * mr};
    (void)resg;
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int j = 0; j < {NP}; ++j) {{
      xm_h* dst = bp + (long)j * {K * nr};
      {self._pack_panel(p, geo)}
    }}
{compute}
  }}
}}
"""


class MatmulF16(MatmulGemm):
    """``matmul_f16``: (batched) ``y = op(a) @ op(b)`` in float16 on the GEMM micro-kernel; a constant b
    (a Linear layer's weight) is packed ahead of time. Epilogue: bias along the columns, residual,
    ReLU / ReLU6. The float32 ``matmul_gemm``'s geometry, workspace and b packing on float16 panels."""

    family = "matmul_f16"
    ops = (T.MatrixMulOp, T.BatchedMatrixMulOp)
    priority = 99  # float16 only (float32 matmul_gemm is 100, int8 95, other element types 90)
    epilogues = {"float16": MATMUL_EPILOGUE}

    def __init__(self) -> None:
        super().__init__(ISA)

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.MatrixMulOp | T.BatchedMatrixMulOp)
        if not _f16_compute(op) or any(L.layout_of(v.type) is not None for v in (*op.operands, *op.results)):
            return None
        lowered = matmul_common(op, "f16")
        if lowered is not None:
            lowered.params.update({"mr": MR, "nr": NR, "kc": KC})
        return lowered

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(self.family, *matmul_sym(p), *_epilogue_words(p))

    def _a_floats(self, p: dict[str, Any]) -> int:
        # packed A in halves, rounded up to 64 bytes so that packed B after it starts on a cache line
        return -(-self.geometry(p)["MP"] * p["mr"] * p["k"] // 32) * 32

    def workspace(self, p: dict[str, Any]) -> int:
        if p["b_const"] and p["m"] == 1:
            return 0  # _render_row reads a and the packed b in place
        return super().workspace(p) // 2  # the float32 unit's sizes count 4-byte elements, halves 2

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        got = super().pack(operand, array, p)
        # float16 -> float32 -> float16 is exact: the same panels as packing in float16
        return None if got is None else (got[0].astype(np.float16), f"gemm_hb{p['nr']}")

    def support(self, em: CEmitter) -> str:
        return COMMON + micro_kernel()

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        geo = self.geometry(p)
        mr, nr = p["mr"], p["nr"]
        M, N, Kd, MP, NP = p["m"], p["n"], p["k"], geo["MP"], geo["NP"]
        a_at = f"a0[(long)k * {M} + r]" if p["ta"] else f"a0[(long)r * {Kd} + k]"
        b_at = f"b0[(long)c * {Kd} + k]" if p["tb"] else f"b0[(long)k * {N} + c]"
        if p["b_const"]:
            bpack = "const xm_h* bp = b;"
        else:
            bpack = f"""xm_h* bp = ap + {self._a_floats(p)};
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int j = 0; j < {NP}; ++j)
      for (int k = 0; k < {Kd}; ++k)
        for (int q = 0; q < {nr}; ++q) {{
          const int c = j * {nr} + q;
          bp[((long)j * {Kd} + k) * {nr} + q] = c < {N} ? {b_at} : (xm_h)0;
        }}"""
        if p["b_const"] and M == 1:
            return self._render_row(sym, p)
        cbias = "(const xm_h*)bias_ + col0" if p["bias"] else "0"
        res = f"(const xm_h*)res_ + (long)bt * {M * N} + (long)m0 * {N} + col0" if p["residual"] else "0"
        call = f"""const xm_hepi epi = {{0, {cbias}, {res}, {N}, {ACT_CODES[p["act"]]}}};
          xm_hukr_{mr}x{nr}(kl, ap + (long)mp * {Kd * mr} + (long)k0 * {mr}, B, yb + (long)m0 * {N} + col0,
                            {N}, k0 == 0, mv, nv, k0 + kl >= {Kd} ? &epi : 0, 0);"""
        cols = f"const int col0 = j * {nr}; const int nv0 = {N} - col0;"
        sweep = gemm_sweep("n", {**geo, "K": Kd}, p, M, cols, call)
        return f"""
{f16_head(sym, p, "a", "b")}
  xm_h* ap = (xm_h*)ws;
{THREAD_SPLIT.format(NP=NP, MP=MP)}
  for (int bt = 0; bt < {p["batch"]}; ++bt) {{
    const xm_h* a0 = a + (long)bt * {M * Kd};
    const xm_h* b0 = b + (long)bt * {0 if p["b_const"] else N * Kd};
    xm_h* yb = y + (long)bt * {M * N};
    (void)b0;
    for (int mp = 0; mp < {MP}; ++mp)
      for (int k = 0; k < {Kd}; ++k)
        for (int q = 0; q < {mr}; ++q) {{
          const int r = mp * {mr} + q;
          ap[((long)mp * {Kd} + k) * {mr} + q] = r < {M} ? {a_at} : (xm_h)0;
        }}
    {bpack}{sweep}
  }}
}}
"""

    def _render_row(self, sym: str, p: dict[str, Any]) -> str:
        """One row times a constant matrix (a classifier head): the micro-kernel would fill 1 of its 24
        rows, so each column panel is a dot product over K in 4 independent accumulators instead,
        streaming the packed ``b`` once."""
        nr, Kd, N, NP = p["nr"], p["k"], p["n"], self.geometry(p)["NP"]
        k4 = Kd - Kd % 4
        bias = "v = _mm512_add_ph(v, xm_h_loadn((const xm_h*)bias_ + col0, nv));" if p["bias"] else ""
        res = "v = _mm512_add_ph(v, xm_h_loadn((const xm_h*)res_ + col0, nv));" if p["residual"] else ""
        return f"""
{f16_head(sym, p, "a", "b")}
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
  for (int j = 0; j < {NP}; ++j) {{
    const xm_h* bp = b + (long)j * {Kd * nr};
    const int col0 = j * {nr};
    const long nv = {N} - col0 < {nr} ? {N} - col0 : {nr};
    __m512h s0 = _mm512_setzero_ph(), s1 = s0, s2 = s0, s3 = s0;
    for (int k = 0; k < {k4}; k += 4) {{
      s0 = _mm512_fmadd_ph(_mm512_set1_ph(a[k]), _mm512_loadu_ph(bp + (long)k * {nr}), s0);
      s1 = _mm512_fmadd_ph(_mm512_set1_ph(a[k + 1]), _mm512_loadu_ph(bp + (long)(k + 1) * {nr}), s1);
      s2 = _mm512_fmadd_ph(_mm512_set1_ph(a[k + 2]), _mm512_loadu_ph(bp + (long)(k + 2) * {nr}), s2);
      s3 = _mm512_fmadd_ph(_mm512_set1_ph(a[k + 3]), _mm512_loadu_ph(bp + (long)(k + 3) * {nr}), s3);
    }}
    for (int k = {k4}; k < {Kd}; ++k)
      s0 = _mm512_fmadd_ph(_mm512_set1_ph(a[k]), _mm512_loadu_ph(bp + (long)k * {nr}), s0);
    __m512h v = _mm512_add_ph(_mm512_add_ph(s0, s1), _mm512_add_ph(s2, s3));
    {bias}
    {res}
    xm_h_storen(y + col0, nv, xm_h_act(v, {ACT_CODES[p["act"]]}));
  }}
}}
"""


class ConvDepthwiseF16(ConvUnitF16):
    """``conv2d_dw_f16``: NCHW float16 depthwise convolution, 32 output columns per vector (module doc)."""
    examples = (
        E.conv2d((1, 16, 13, 11), 16, 3, pad=1, groups=16, act="relu"),
        E.conv2d((2, 40, 11, 14), 40, 3, stride=2, pad=1, groups=40),
        E.conv2d((1, 8, 9, 7), 8, 5, pad=2, groups=8, residual=True),
    )

    family = "conv2d_dw_f16"
    priority = 108  # ahead of conv2d_gemm_f16 (104) for the depthwise convolutions it accepts

    def match(self, op: Operation) -> Lowered | None:
        return depthwise_lowered(op, f16_conv(op))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, f"n{p['n']}", f"c{p['c']}", f"{p['ih']}x{p['iw']}", f"k{p['fh']}x{p['fw']}",
            f"s{p['sh']}x{p['sw']}", f"p{p['ph']}x{p['pw']}",
            f"d{p['dh']}x{p['dw']}" if (p["dh"], p["dw"]) != (1, 1) else "", *_epilogue_words(p),
        )  # fmt: skip

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        return np.ascontiguousarray(np.asarray(array, np.float16).reshape(p["c"], -1)), "dw_h"

    def support(self, em: CEmitter) -> str:
        return COMMON

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        c, ih, iw, oh, ow, fh, fw = (p[k] for k in ("c", "ih", "iw", "oh", "ow", "fh", "fw"))
        sh, sw, ph, pw, dh, dw = (p[k] for k in ("sh", "sw", "ph", "pw", "dh", "dw"))
        bias = "_mm512_set1_ph(((const xm_h*)bias_)[ch])" if p["bias"] else "_mm512_setzero_ph()"
        res = (
            "v = _mm512_add_ph(v, xm_h_loadn((const xm_h*)res_ + "
            f"(long)nc * {oh * ow} + (long)r * {ow} + q, nv));"
            if p["residual"]
            else ""
        )
        return f"""
{f16_head(sym, p)}
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
  for (int nc = 0; nc < {p["n"] * c}; ++nc) {{
    const int ch = nc % {c};
    const xm_h* xp = x + (long)nc * {ih * iw};
    const xm_h* wp = w + (long)ch * {fh * fw};
    xm_h* yp = y + (long)nc * {oh * ow};
    const __m512h b = {bias};
    const __m512i zero = _mm512_setzero_si512();
    for (int q = 0; q < {ow}; q += 32) {{
      const long nv = {ow} - q < 32 ? {ow} - q : 32;
      for (int r = 0; r < {oh}; ++r) {{
        __m512h v = b;
        for (int kh = 0; kh < {fh}; ++kh) {{
          const int ihh = r * {sh} - {ph} + kh * {dh};
          if ((unsigned)ihh >= {ih}u) continue;
          const xm_h* row = xp + (long)ihh * {iw};
          for (int kw = 0; kw < {fw}; ++kw)
            v = _mm512_fmadd_ph(_mm512_set1_ph(wp[kh * {fw} + kw]),
                                xm_h_row(row, (long)q * {sw} - {pw} + kw * {dw}, {sw}, nv, {iw}, zero), v);
        }}
        {res}
        xm_h_storen(yp + (long)r * {ow} + q, nv, xm_h_act(v, {ACT_CODES[p["act"]]}));
      }}
    }}
  }}
}}
"""


class PoolF16(Template):
    """``pool2d_f16``: NCHW float16 max / average pooling, 32 output columns per vector (module doc)."""
    examples = (
        E.pool2d((1, 13, 9, 11), "max", 3, 2, 1),
        E.pool2d((2, 5, 8, 7), "average", 2, 2),
        E.adaptive_pool2d((1, 9, 7, 7), "average", (1, 1)),
    )

    family = "pool2d_f16"
    ops = (T.PoolingOp, T.AdaptivePoolingOp)
    priority = 105  # float16 NCHW only (float32 NCHW pooling is 100)
    isa = ISA

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
        if op.params()["format"] != enums.Format.NCHW or not same_type(op) or code(op.operands[0]) != "f16":
            return None
        if L.layout_of(op.operands[0].type) is not None:  # type: ignore[arg-type]
            return None
        params = pool_geometry(op)
        return None if params is None else Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, p["mode"], f"n{p['n']}", f"c{p['c']}", f"{p['ih']}x{p['iw']}",
            f"k{p['fh']}x{p['fw']}", f"s{p['sh']}x{p['sw']}", f"p{p['ph']}x{p['pw']}",
        )  # fmt: skip

    def support(self, em: CEmitter) -> str:
        return COMMON

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        tap = f"xm_h_row(row, (long)q * {sw} - {pw} + s, {sw}, nv, {iw}, fill)"
        mode = p["mode"]
        if mode != "max" and ph == pw == 0 and (oh - 1) * sh + fh <= ih and (ow - 1) * sw + fw <= iw:
            mode = "average"  # no window reaches past the input: nothing to exclude, no per-lane counts
        if mode == "average" and oh == ow == 1:
            return self._global_pool(sym, p)
        if mode == "max":
            init = "__m512h a = _mm512_castsi512_ph(fill);"
            acc = f"a = xm_h_max(a, {tap});"  # a NaN tap wins and stays, as in the reference
            fin = "a"
            fill = "_mm512_set1_epi16((short)0xFC00)"  # -inf: padding never wins
        else:
            # summed in float32, as the reference; exclude_padding divides by each column's tap count
            init = "__m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps(), clo = lo, chi = lo;"
            acc = (
                f"const __m512h t = {tap}; "
                "lo = _mm512_add_ps(lo, _mm512_cvtxph_ps(_mm512_castph512_ph256(t))); "
                "hi = _mm512_add_ps(hi, _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_extracti64x4_epi64("
                "_mm512_castph_si512(t), 1)))); "
            )
            if mode != "average":  # per-lane tap counts only where a window can reach the padding
                acc += (
                    f"const long i0 = (long)q * {sw} - {pw} + s; "
                    f"for (int l = 0; l < 32; ++l) cnt[l] += (i0 + l * {sw} >= 0 && i0 + l * {sw} < {iw});"
                )
            div = (
                f"_mm512_set1_ps({float(fh * fw)}f)"
                if mode == "average"
                else "_mm512_max_ps(_mm512_loadu_ps(cnt + {h}), _mm512_set1_ps(1.f))"
            )
            fin = (
                f"_mm512_castsi512_ph(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_castph_si256("
                f"_mm512_cvtxps_ph(_mm512_div_ps(lo, {div.format(h=0)})))), _mm256_castph_si256("
                f"_mm512_cvtxps_ph(_mm512_div_ps(hi, {div.format(h=16)}))), 1))"
            )
            fill = "_mm512_setzero_si512()"
            init = init if mode == "average" else "float cnt[32] = {0}; " + init
        return self._plane_loop(
            sym,
            p,
            f"""
    const __m512i fill = {fill};
    for (int q = 0; q < {ow}; q += 32) {{
      const long nv = {ow} - q < 32 ? {ow} - q : 32;
      for (int r = 0; r < {oh}; ++r) {{
        {init}
        for (int kh = 0; kh < {fh}; ++kh) {{
          const int ihh = r * {sh} - {ph} + kh;
          if ((unsigned)ihh >= {ih}u) continue;
          const xm_h* row = xp + (long)ihh * {iw};
          for (int s = 0; s < {fw}; ++s) {{ {acc} }}
        }}
        xm_h_storen(yp + (long)r * {ow} + q, nv, {fin});
      }}
    }}""",
        )

    @staticmethod
    def _plane_loop(sym: str, p: dict[str, Any], body: str) -> str:
        """The pooling function: ``body`` once per (image, channel) plane ``xp``, output plane ``yp``."""
        return f"""
static void {sym}(const void* x_, void* y_, unsigned char* ws, int nt) {{
  const xm_h* x = (const xm_h*)x_;
  xm_h* y = (xm_h*)y_;
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
  for (int nc = 0; nc < {p["n"] * p["c"]}; ++nc) {{
    const xm_h* xp = x + (long)nc * {p["ih"] * p["iw"]};
    xm_h* yp = y + (long)nc * {p["oh"] * p["ow"]};{body}
  }}
}}
"""

    @staticmethod
    def _global_pool(sym: str, p: dict[str, Any]) -> str:
        """One unpadded average per plane (a global pool): the vector path would fill one lane of 32, so
        each plane is summed by scalars, in float32 and in the vector path's tap order (the same
        result), and divided once; :data:`GLOBAL_PLANES` planes at a time, as independent sums (one
        plane's chain of dependent adds ran at the add's latency: 2048 7x7 planes took 0.12 ms)."""
        fh, fw, planes, group = p["fh"], p["fw"], p["n"] * p["c"], GLOBAL_PLANES
        return f"""
static void {sym}(const void* x_, void* y_, unsigned char* ws, int nt) {{
  const xm_h* x = (const xm_h*)x_;
  xm_h* y = (xm_h*)y_;
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
  for (int b = 0; b < {-(-planes // group)}; ++b) {{
    const int c0 = b * {group}, cn = {planes} - c0 < {group} ? {planes} - c0 : {group};
    const xm_h* xp[{group}];
    float s[{group}];
    for (int j = 0; j < {group}; ++j) {{  /* past the last plane: the group's first again, not stored */
      xp[j] = x + (long)(c0 + (j < cn ? j : 0)) * {p["ih"] * p["iw"]};
      s[j] = 0.f;
    }}
    for (int kh = 0; kh < {fh}; ++kh)
      for (int kw = 0; kw < {fw}; ++kw)
        for (int j = 0; j < {group}; ++j) s[j] += (float)xp[j][kh * {p["iw"]} + kw];
    for (int j = 0; j < cn; ++j) y[(long)(c0 + j) * {p["oh"] * p["ow"]}] = (xm_h)(s[j] / {float(fh * fw)}f);
  }}
}}
"""


# mode -> expression over a, b, c (__m512h), each operation rounded to float16 as the reference's float16
# numpy; maxph / minph return their second operand on NaN, so the data go second (xm_h_max / xm_h_min
# keep a NaN of either operand)
_R = "_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC"
_Z, _S3, _S6 = "_mm512_setzero_ph()", "_mm512_set1_ph((xm_h)3)", "_mm512_set1_ph((xm_h)6)"


def _clamp6(x: str) -> str:
    return f"_mm512_min_ph({_S6}, _mm512_max_ph({_Z}, {x}))"


def _hswish(x: str) -> str:
    clamped = _clamp6(f"_mm512_add_ph({x}, {_S3})")
    return f"_mm512_div_round_ph(_mm512_mul_round_ph({x}, {clamped}, {_R}), {_S6}, {_R})"


ELEMWISE_X86: dict[str, str] = {
    "relu": f"_mm512_max_ph({_Z}, a)",
    "relu6": _clamp6("a"),
    "add": "_mm512_add_ph(a, b)",
    "sub": "_mm512_sub_ph(a, b)",
    "mul": f"_mm512_mul_round_ph(a, b, {_R})",
    "true_div": f"_mm512_div_round_ph(a, b, {_R})",
    "max": "xm_h_max(a, b)",
    "min": "xm_h_min(a, b)",
    "negate": (
        "_mm512_castsi512_ph(_mm512_xor_si512(_mm512_castph_si512(a), _mm512_set1_epi16((short)0x8000)))"
    ),
    "abs": "_mm512_abs_ph(a)",
    "square": f"_mm512_mul_round_ph(a, a, {_R})",
    "fuse_add_relu": f"_mm512_max_ph({_Z}, _mm512_add_ph(a, b))",
    "h_swish": _hswish("a"),
    "fuse_add_h_swish": _hswish("_mm512_add_round_ph(a, b, " + _R + ")"),
    "hsigmoid": f"_mm512_div_round_ph({_clamp6(f'_mm512_add_ph(a, {_S3})')}, {_S6}, {_R})",
    "fuse_mul_add3": f"_mm512_add_round_ph(_mm512_mul_round_ph(a, b, {_R}), c, {_R})",
    "clip": "xm_h_min(xm_h_max(a, b), c)",
}


class ElemwiseF16Avx512(ElemwiseF16):
    """``elemwise_f16`` on AVX512-FP16: the ARM unit's availability rule and parameters, 32 lanes per
    step with a masked tail; operands broadcast along the innermost dimension are one ``set1``."""

    def __init__(self) -> None:
        super().__init__(ISA)

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ElemwiseOp)
        out = op.results[0].type
        # every operand in the result's layout (a blocked tensor broadcasts along whole blocked dims)
        # or a single element
        layout = L.layout_of(out)  # type: ignore[arg-type]
        for v in op.operands:
            if L.layout_of(v.type) != layout and int(np.prod(shape(v))) != 1:  # type: ignore[arg-type]
                return None
        lowered = super().match(op)
        if lowered is None or lowered.params["mode"] not in ELEMWISE_X86:
            return None
        return lowered

    def support(self, em: CEmitter) -> str:
        return COMMON

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        dims, strides = p["shape"], p["strides"]
        names = "abc"[: len(strides)]
        inner, outer = dims[-1], dims[:-1]
        ins = [f"const void* in{i}_" for i in range(len(strides))]
        args = ", ".join([*ins, "void* out0_", "unsigned char* ws", "int nt"])
        out_strides = [int(np.prod(dims[i + 1 :])) for i in range(len(dims))]

        def offset(st: list[int] | tuple[int, ...]) -> str:
            return " + ".join(f"i{d} * {s}L" for d, s in enumerate(st[:-1]) if s) or "0"

        loads = []
        for i, st in enumerate(strides):
            ptr = f"in{i} + x{i}"
            load = f"xm_h_loadn({ptr} + j, {inner} - j)" if st[-1] else f"_mm512_set1_ph(*({ptr}))"
            loads.append(f"const __m512h {names[i]} = {load};")
        body = [
            *(f"const long x{i} = {offset(st)};" for i, st in enumerate(strides)),
            f"const long o = {offset(out_strides)};",
            f"for (long j = 0; j < {inner}; j += 32) {{",
            "  " + " ".join(loads),
            f"  xm_h_storen(out0 + o + j, {inner} - j, {ELEMWISE_X86[p['mode']]});",
            "}",
        ]
        lines = [f"static void {sym}({args}) {{", "  (void)ws; (void)nt;"]
        lines += [f"  const xm_h* in{i} = (const xm_h*)in{i}_;" for i in range(len(strides))]
        lines.append("  xm_h* out0 = (xm_h*)out0_;")
        for d, size in enumerate(outer):
            lines.append(f"{'  ' * (d + 1)}for (long i{d} = 0; i{d} < {size}; ++i{d}) {{")
        ind = "  " * (len(outer) + 1)
        lines += [ind + b for b in body]
        lines += ["  " * (d + 1) + "}" for d in range(len(outer) - 1, -1, -1)]
        lines.append("}")
        return "\n".join(lines) + "\n"


KERNEL_UNITS = (ConvGemmF16(), MatmulF16(), ConvDepthwiseF16(), PoolF16(), ElemwiseF16Avx512())
