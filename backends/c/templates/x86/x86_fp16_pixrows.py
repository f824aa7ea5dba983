"""Float16 convolutions of small images on AVX512-FP16 (``x86-avx512-fp16+ioc16``): ``conv2d_pixrows_f16``,
dense NCHW convolutions whose output has few pixels (ResNet's 7x7 and 14x14 stages).

The GEMM kernel of :mod:`backends.c.templates.x86.x86_fp16` puts 32 pixels in a vector's lanes: a 7x7 output
(49 pixels) fills 49 of its 64 lanes, and its ``24 x 32`` tile issues one load per FMA. Here the roles
swap, ``out^T[p, oc] = sum_k col^T[p, k] W^T[k, oc]``: a vector holds 32 output channels, the register
tile is ``PR`` pixels x ``OV`` vectors (``7 x 4``, 28 accumulators, for 128-channel panels: 49 pixels are
7 rows exactly; ``14 x 2`` for 64-channel ones), so each ``k`` costs ``OV`` filter loads and ``PR``
embedded-broadcast FMAs of the im2col value (11 loads for 28 FMAs instead of 25 for 24).

* filters, packed ahead of time: ``OV * 32``-channel panels of ``K`` rows (``k = (ic, kh, kw)``), zero
  rows past the last channel;
* im2col, at run time, one masked strided row load per output row (or tile) and tap: where a tile is
  a whole number of output rows' segments (``OW % PR == 0``: 7x7 and 14x14 outputs), tile-major
  ``col[tile][k][PR]``, so that a tile's block of ``K`` rows is one contiguous run next to the L1-resident
  filter block (``[k][p]``, 196-byte rows at 7x7, spread a block over 57 KB: 8% slower at 7x7x512);
  else ``col[k][p]`` row-major; a tile's ``PR`` broadcasts read ``PR`` consecutive pixels of row ``k``;
* per channel panel (split between threads, with the pixel tiles too when panels are few), ``K`` in
  blocks whose filter rows stay in L1, every pixel tile accumulating in float16 into the transposed
  output ``t[p][oc]`` (the bias on the registers of the last block);
* the panel's channels written back to NCHW from ``t`` (two 32-bit gathers per 32 pixels) with the
  residual and the activation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates.x86.x86_fp16 import (
    ACT_CODES,
    COMMON,
    LANES,
    ConvUnitF16,
    f16_head,
)
from backends.c.templates.x86.x86_fp16_winograd import DEFAULT_TILES, winograd_tile
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# (pixel rows, channel vectors) of the register tile by a panel's channel count: PR * OV accumulators and
# OV filter vectors within the 32 zmm registers
TILES = {128: (7, 4), 64: (14, 2)}
KC = 128  # K rows per block: 128 rows x 4 vectors of 64 bytes = 32 KiB of filter, L1-resident
MAX_PIXELS = 196  # 14x14 and smaller outputs; larger ones fill the GEMM's 32-pixel lanes well


def tile_shape(oc: int) -> tuple[int, int] | None:
    """``(PR, OV)`` for a convolution with ``oc`` output channels, None for channel counts it does not
    tile (not a multiple of 64)."""
    for panel, shape in TILES.items():
        if oc % panel == 0:
            return shape
    return None


def _fma_step(pr: int, ov: int) -> list[str]:
    """One ``k`` of the tile: the filter vectors ``b0..`` in registers (the last one a memory operand
    where ``PR * OV + OV + 1`` registers would not fit), then per pixel an inline-assembly
    ``vpbroadcastd`` of its pair-duplicated value (a load-port uop, where ``vpbroadcastw`` takes an FMA
    port) into ``zmm31`` and its ``OV`` FMAs. gcc left to itself keeps the broadcast in a register, runs
    out of them by one at ``7 x 4`` and spills an accumulator through memory on every ``k``."""
    in_regs = ov if pr * ov + ov + 1 <= 32 else ov - 1
    lines = [f"    const __m512h b{v} = _mm512_loadu_ph(B + {v * LANES});" for v in range(in_regs)]
    srcs = [f"%[b{v}]" for v in range(in_regs)] + [f"{64 * v}(%[b])" for v in range(in_regs, ov)]
    ins = ", ".join(['[a] "r"(A)', '[b] "r"(B)', *(f'[b{v}] "v"(b{v})' for v in range(in_regs))])
    for i in range(pr):
        body = [f"vpbroadcastd {4 * i}(%[a]), %%zmm31"]
        body += [f"vfmadd231ph {srcs[v]}, %%zmm31, %{v}" for v in range(ov)]
        outs = ", ".join(f'"+v"(c{i}_{v})' for v in range(ov))
        asm = "\\n\\t".join(body)
        lines.append(f'    __asm__("{asm}" : {outs} : {ins} : "zmm31", "memory");')
    return lines


def micro_kernel(pr: int, ov: int) -> str:
    """``xm_hukt_<pr>x<ov>(K, A, lda, B, T, ldt, first, bias, nb)``: ``T[pr][ov * 32] (+)= A^T . B``
    in float16, ``A[k * lda + i]`` the pixels (each a pair-duplicated 32-bit word), ``B[k * ov * 32 +
    ...]`` a filter panel; ``bias`` (the last K block only; ``nb`` channels valid) is added before the
    store. The first ``npf`` steps also prefetch one 64-byte line each, ``pf + 32 k``, into L2."""
    assert pr * ov <= 28 and ov <= 3 + 1, "the accumulators, three filter registers and zmm31"
    w = ov * LANES
    c = [[f"c{i}_{v}" for v in range(ov)] for i in range(pr)]
    lines = [
        f"static inline void xm_hukt_{pr}x{ov}(long K, const uint32_t* restrict A, long lda,",
        "    const xm_h* restrict B, xm_h* restrict T, long ldt, int first, const xm_h* bias, long nb,",
        "    const xm_h* pf, long npf) {",
    ]
    for i in range(pr):
        for v in range(ov):
            src = f"_mm512_loadu_ph(T + {i} * ldt + {v * LANES})"
            lines.append(f"  __m512h {c[i][v]} = first ? _mm512_setzero_ph() : {src};")
    lines += ["  for (long k = 0; k < K; ++k, A += lda, B += " + str(w) + ") {"]
    lines += _fma_step(pr, ov)
    lines.append("    if (k < npf)")
    lines.append("      _mm_prefetch((const char*)(pf + k * 32), _MM_HINT_T1);")
    lines.append("  }")
    lines.append("  if (bias) {")
    for v in range(ov):
        lines.append(f"    const __m512h bv{v} = xm_h_loadn(bias + {v * LANES}, nb - {v * LANES});")
        lines += [f"    {c[i][v]} = _mm512_add_ph({c[i][v]}, bv{v});" for i in range(pr)]
    lines.append("  }")
    lines += [
        f"  _mm512_storeu_ph(T + {i} * ldt + {v * LANES}, {c[i][v]});" for i in range(pr) for v in range(ov)
    ]
    lines.append("}")
    guard = f"XM_HUKT_{pr}X{ov}"
    return f"#ifndef {guard}\n#define {guard}\n" + "\n".join(lines) + "\n#endif\n"


class ConvPixelRowsF16(ConvUnitF16):
    """``conv2d_pixrows_f16``: dense NCHW float16 convolution of a small output, pixels x channels tiles
    (module doc)."""
    examples = (
        E.conv2d((1, 64, 7, 7), 128, 3, pad=1, act="relu"),
        E.conv2d((1, 48, 14, 14), 64, 3, stride=2, pad=1, residual=True),
    )

    family = "conv2d_pixrows_f16"
    # tried before every other float16 conv family: it takes no grouped convolution (the depthwise 108's)
    # and leaves to Winograd (106) the layers winograd_tile gives it, to the GEMM (104) the rest
    priority = 109

    def match(self, op: Operation) -> Lowered | None:
        got = self.dense(op)
        if got is None:
            return None
        params, operands = got
        shape = tile_shape(params["oc"])
        if shape is None or params["oh"] * params["ow"] > MAX_PIXELS:
            return None
        # 1x1: no im2col to amortise, and the GEMM's copy panels were as fast or faster (measured)
        if params["fh"] * params["fw"] == 1 or winograd_tile(params, DEFAULT_TILES) is not None:
            return None
        params.update({"pr": shape[0], "ov": shape[1], "kc": KC})
        return Lowered(params, operands)

    @staticmethod
    def geometry(p: dict[str, Any]) -> dict[str, int]:
        width = p["ov"] * LANES
        pixels = p["oh"] * p["ow"]
        tiles = -(-pixels // p["pr"])
        panels = -(-p["oc"] // width)
        # col: K rows of the image's pixels, plus one tile's overrun past the last row (the last tile's
        # padding lanes read it; their results are never written back)
        col = -(-(p["ic"] * p["fh"] * p["fw"] * pixels + p["pr"]) // 16) * 16
        tile_major = int(p["ow"] % p["pr"] == 0)  # every tile within one output row (module doc)
        return {"K": p["ic"] * p["fh"] * p["fw"], "P": pixels, "TILES": tiles, "PANELS": panels,
                "W": width, "COL": col, "LDT": panels * width, "TM": tile_major}  # fmt: skip

    def workspace(self, p: dict[str, Any]) -> int:
        geo = self.geometry(p)
        return geo["COL"] * 4 + (geo["TILES"] * p["pr"] * geo["LDT"] + 32) * 2

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        geo = self.geometry(p)
        w = np.asarray(array, np.float16).reshape(p["oc"], geo["K"])
        padded = np.zeros((geo["PANELS"] * geo["W"], geo["K"]), np.float16)
        padded[: p["oc"]] = w
        # (PANELS, W, K) -> (PANELS, K, W)
        panels = padded.reshape(geo["PANELS"], geo["W"], geo["K"]).transpose(0, 2, 1)
        return np.ascontiguousarray(panels), f"pixrows_h{geo['W']}"

    def support(self, em: CEmitter) -> str:
        return COMMON + "".join(micro_kernel(pr, ov) for pr, ov in TILES.values())

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        geo = self.geometry(p)
        pr, ov, kc = p["pr"], p["ov"], p["kc"]
        K, P, TILES_, PANELS, W, LDT = (geo[k] for k in ("K", "P", "TILES", "PANELS", "W", "LDT"))
        ic, ih, iw, oc, oh, ow = (p[k] for k in ("ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        act = ACT_CODES[p["act"]]
        bias = f"(const xm_h*)bias_ + pn * {W}" if p["bias"] else "(const xm_h*)0"
        res = "v = _mm512_add_ph(v, xm_h_loadn((const xm_h*)res_ + yo, nv));" if p["residual"] else ""
        row_tap = (
            f"(unsigned)ihh < {ih}u ? _mm512_castph_si512(xm_h_row(plane + (long)ihh * {iw}, base, {sw},"
        )
        row_tap += " "
        if geo["TM"]:
            assert pr <= 16, "a tile's pixels are one 16-word store"
            # tile by tile, its K rows written in order (the input, at most 196 pixels a channel, stays
            # in cache; by rows of k, a tile's 28-byte pieces lay 129 KB apart at 7x7x512)
            im2col = f"""for (int tt = 0; tt < {TILES_}; ++tt) {{
      const int r = tt * {pr} / {ow}, q = tt * {pr} % {ow};
      const __m512i zero = _mm512_setzero_si512();
      uint32_t* d = col + (long)tt * {K * pr};
      for (int c = 0; c < {ic}; ++c)
        for (int kh = 0; kh < {fh}; ++kh) {{
          const int ihh = r * {sh} - {ph} + kh * {dh};
          const xm_h* plane = xn + (long)c * {ih * iw};
          for (int kw = 0; kw < {fw}; ++kw, d += {pr}) {{
            const long base = (long)q * {sw} - {pw} + kw * {dw};
            const __m512i v = {row_tap}{pr}, {iw}, zero)) : zero;
            /* each half twice in a 32-bit word: the micro-kernel's vpbroadcastd */
            const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
            _mm512_mask_storeu_epi32(d, (__mmask16)xm_h_mask({pr}),
                                     _mm512_or_si512(lo, _mm512_slli_epi32(lo, 16)));
          }}
        }}
    }}"""
            a_block, lda = f"col + ((long)tt * {K} + k0) * {pr}", pr
        else:
            im2col = f"""for (int k = 0; k < {K}; ++k) {{
      const int c = k / {fh * fw}, kh = k / {fw} % {fh}, kw = k % {fw};
      const xm_h* plane = xn + (long)c * {ih * iw};
      const __m512i zero = _mm512_setzero_si512();
      uint32_t* d = col + (long)k * {P};
      for (int r = 0; r < {oh}; ++r) {{
        const int ihh = r * {sh} - {ph} + kh * {dh};
        for (int q = 0; q < {ow}; q += 32) {{
          const long nv = {ow} - q < 32 ? {ow} - q : 32;
          const long base = (long)q * {sw} - {pw} + kw * {dw};
          const __m512i v = {row_tap}nv, {iw}, zero)) : zero;
          /* each half twice in a 32-bit word: the micro-kernel's vpbroadcastd */
          const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
          const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
          uint32_t* o = d + (long)r * {ow} + q;
          _mm512_mask_storeu_epi32(o, (__mmask16)xm_h_mask(nv),
                                   _mm512_or_si512(lo, _mm512_slli_epi32(lo, 16)));
          if (nv > 16)
            _mm512_mask_storeu_epi32(o + 16, (__mmask16)xm_h_mask(nv - 16),
                                     _mm512_or_si512(hi, _mm512_slli_epi32(hi, 16)));
        }}
      }}
    }}"""
            a_block, lda = f"col + (long)k0 * {P} + tt * {pr}", P
        return f"""
{f16_head(sym, p)}
  uint32_t* col = (uint32_t*)ws;   /* [TILES][K][PR] or [K][P], each half twice */
  xm_h* t = (xm_h*)(col + {geo["COL"]});  /* [TILES * PR][LDT]: the output transposed */
  /* few channel panels: split the pixel tiles between threads too */
  const int tch = (nt > 1 && {PANELS} < 2 * nt) ? ({TILES_} < nt ? {TILES_} : nt) : 1;
  const int tper = ({TILES_} + tch - 1) / tch;
  for (int n = 0; n < {p["n"]}; ++n) {{
    const xm_h* xn = x + (long)n * {ic * ih * iw};
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    {im2col}
    #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
    for (int pn = 0; pn < {PANELS}; ++pn)
      for (int tc = 0; tc < tch; ++tc) {{
        const int t0 = tc * tper, t1 = (tc + 1) * tper < {TILES_} ? (tc + 1) * tper : {TILES_};
        const xm_h* wp = w + (long)pn * {K * W};
        for (int k0 = 0; k0 < {K}; k0 += {kc}) {{
          const long kl = {K} - k0 < {kc} ? {K} - k0 : {kc};
          const int last = k0 + kl >= {K};
          /* the next block's filter rows (after the last block, the next panel's first) stream from
             memory (4.7 MB of filters at 7x7x512: the first tile of each block waited on its loads,
             ~40% of the kernel's perf samples); its lines are prefetched into L2 one per k step,
             shared out between this block's tiles (a burst of them was mostly dropped) */
          const long kn = last ? 0 : k0 + kl;
          const int pnext = last ? pn + 1 : pn;
          const xm_h* next = w + (long)(pnext < {PANELS} ? pnext : pn) * {K * W} + kn * {W};
          const long lines = pnext >= {PANELS} ? 0 : ({K} - kn < {kc} ? {K} - kn : {kc}) * {ov};
          const long share = (lines + (t1 - t0) - 1) / (t1 > t0 ? t1 - t0 : 1);
          for (int tt = t0; tt < t1; ++tt) {{
            const long lo = (tt - t0) * share < lines ? (tt - t0) * share : lines;
            const long np = lines - lo < share ? lines - lo : share;
            xm_hukt_{pr}x{ov}(kl, {a_block}, {lda}, wp + (long)k0 * {W},
                              t + (long)tt * {pr * LDT} + pn * {W}, {LDT}, k0 == 0,
                              last ? {bias} : 0, {oc} - pn * {W}, next + lo * 32, np);
          }}
        }}
        /* back to NCHW: 32 pixels of one channel are two gathers of the 32-bit words at t[p][o] (their
           low halves; t has a word of slack past its end), then the residual and the activation */
        const int p1 = t1 * {pr} < {P} ? t1 * {pr} : {P};
        const int c1 = (pn + 1) * {W} < {oc} ? (pn + 1) * {W} : {oc};
        const __m512i rows = _mm512_mullo_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32({2 * LDT}));
        for (int o = pn * {W}; o < c1; ++o)
          for (int q = t0 * {pr}; q < p1; q += 32) {{
            const long nv = p1 - q < 32 ? p1 - q : 32, yo = ((long)n * {oc} + o) * {P} + q;
            const xm_h* tp = t + (long)q * {LDT} + o;
            const __m512i g0 = _mm512_mask_i32gather_epi32(rows, (__mmask16)xm_h_mask(nv), rows, tp, 1);
            const __m512i g1 =
                _mm512_mask_i32gather_epi32(rows, (__mmask16)xm_h_mask(nv - 16), rows, tp + {16 * LDT}, 1);
            __m512h v = _mm512_castsi512_ph(_mm512_inserti64x4(
                _mm512_castsi256_si512(_mm512_cvtepi32_epi16(g0)), _mm512_cvtepi32_epi16(g1), 1));
            {res}
            xm_h_storen(y + yo, nv, xm_h_act(v, {act}));
          }}
      }}
  }}
}}
"""


KERNEL_UNITS = (ConvPixelRowsF16(),)
