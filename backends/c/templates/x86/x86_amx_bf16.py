"""float32 convolutions and matrix products on AMX-BF16 tiles: the ``+bf16`` option of an x86 target
with ``amx`` (ISA ``amxbf16``). A different numeric contract from float32, chosen explicitly:

* every input of a product (activations and weights) is rounded to bfloat16 (8 significant bits),
  round to nearest even, denormals flushed to zero (``vcvtne2ps2bf16``; :func:`to_bfloat16` is the
  same rounding in numpy for the filters, packed at compile time);
* products are exact and accumulate in float32 (``tdpbf16ps``, 32 k per tile step);
* the epilogue (bias, residual, activation) is float32 on the float32 accumulator.

Convolutions (dense, 1x1, grouped; depthwise stays float32) are the GEMM ``acc[oc][pixel] =
sum_k w[oc][k] * x[k][pixel]`` on 16x16 float32 accumulator tiles. An A tile is 16 output channels x
32 k (filters ``[G][OC/16][K/32][16][32]`` bfloat16, one tile 1 KiB contiguous); a B tile is 16 rows
of k pairs x 16 pixels, a pixel's pair adjacent (``[K/2][P][2]``), so the activations are converted
while they are packed: two float rows in, one row of interleaved bfloat16 pairs out. Two ways to form
B (``mode``), as the int8 AMX kernel: ``im2col`` and, for stride-1 convolutions with at least 32
channels per group, ``direct``: the input is packed once, padded, as ``[C/2][plane][2]`` and a B tile
for one filter tap and 32 channels is read straight from it. There the output is one long run over
the padded rows (pixel ``q = oy * Wp + ox``, ``Wp`` the padded width): a 16-pixel block may span
rows, and its columns past the output width (``Wp - OW`` of every ``Wp``) are computed and dropped,
so a 7-pixel-wide layer wastes 2 of 9 columns, not 9 of 16.

Matrix products (``matmul``/``batched_matmul``, float32): A is the left operand converted per call
into ``[M/16][K/32][16][32]`` tiles, B the right one as ``[N/16][K/32][16][16][2]`` (packed at compile
time when constant: the Linear layer's weight), bias along the columns.

Where Linux refuses this process tile data (or ``XMGE_AMX=0``) the same packed operands go through
``vdpbf16ps`` (AVX512-BF16): the same bfloat16 products, float32 sums in another order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import conv_common
from backends.c.templates import Template, sym_join
from backends.c.templates.x86.gemm import (
    MATMUL_EPILOGUE,
    _epilogue_args,
    constant_b,
    matmul_common,
    matmul_sym,
)
from backends.c.templates.x86.x86_amx import (
    AMX_SUPPORT,
    TILE_BYTES,
    TILE_ROWS,
    VectorDot,
    amx_tile_block,
    vector_tile_block,
)
from dialects import tensor as T
from passes.lowering.kernels import FULL_EPILOGUE, Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "amxbf16"
TILE_BF16 = 32  # bfloat16 per tile row: k of one A row, 16 pixels x 2 k of one B row
PARALLEL_WORK = 1 << 20  # multiply-adds below which a kernel runs on one thread


def to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16) as ``vcvtne2ps2bf16`` rounds: to nearest even, denormals to
    a signed zero, NaN quiet."""
    f = np.ascontiguousarray(values, np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    denormal = (u & 0x7F800000) == 0
    rounded = np.where(denormal, (u >> 16) & 0x8000, rounded)
    rounded = np.where(np.isnan(f), (u >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16)


def from_bfloat16(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bfloat16(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to bfloat16 and back: what the kernels multiply."""
    return from_bfloat16(to_bfloat16(values))


def _ceil(a: int, b: int) -> int:
    return -(-a // b) * b


BF16_SUPPORT = r"""
#ifndef XM_AMX_BF16
#define XM_AMX_BF16
static inline __mmask16 xm_bf16_lanes(long n) {
  return (__mmask16)(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
}
/* word i of (r0 as bf16 | r1 as bf16) to word 2i, word 16 + i to 2i + 1: pairs of one pixel */
static const uint16_t xm_bf16_pair_order[32] __attribute__((aligned(64))) = {
  0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
  8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
/* n pixels of two float rows (r1 NULL: zeros) as n interleaved bfloat16 pairs, rounded to nearest
   even; exactly 2n words written */
static inline void xm_bf16_pairs(uint16_t* dst, const float* r0, const float* r1, long n) {
  const __m512i order = _mm512_load_si512((const void*)xm_bf16_pair_order);
  for (long i = 0; i < n; i += 16) {
    const __mmask16 m = xm_bf16_lanes(n - i);
    const __m512 a = _mm512_maskz_loadu_ps(m, r0 + i);
    const __m512 b = r1 ? _mm512_maskz_loadu_ps(m, r1 + i) : _mm512_setzero_ps();
    const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a); /* a in the low 16 words */
    _mm512_mask_storeu_epi32(dst + 2 * i, m, _mm512_permutexvar_epi16(order, ab));
  }
}
/* n consecutive floats as n bfloat16 (the A tiles of a matrix product: k runs along a row) */
static inline void xm_bf16_run(uint16_t* dst, const float* src, long n) {
  for (long i = 0; i < n; i += 32) {
    const __m512 a = _mm512_maskz_loadu_ps(xm_bf16_lanes(n - i), src + i);
    const __m512 b = _mm512_maskz_loadu_ps(xm_bf16_lanes(n - i - 16), src + i + 16);
    const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a);
    const __mmask32 m = n - i >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1);
    _mm512_mask_storeu_epi16(dst + i, m, ab);
  }
}
#endif
"""


def tile_products(
    instruction: str,
    fallback: str,
    mt: int,
    ntl: int,
    kb: int,
    b_offset: str,
    b_stride: int | str,
    tiles: bool = True,
) -> str:
    """C computing ``acc[16 mt][16 ntl]`` (float or int32) = A tiles ``wa`` (``[mt][kb]`` tiles of
    1 KiB, rows of 64 bytes) x B tiles at ``xb<j> + <b_offset of kt>`` (rows ``b_stride`` bytes
    apart): on AMX tiles (accumulators 0-3, A 4-5, B 6-7) when ``use_amx``, else ``fallback``;
    ``fallback`` alone without ``tiles`` (a target without AMX: no tile instruction compiled)."""
    if not tiles:
        return f"""
          {{{fallback}
          }}"""
    b_loads = [f"_tile_loadd({6 + j}, xb{j} + ko, {b_stride});" for j in range(ntl)]
    amx = amx_tile_block(mt, ntl, kb, b_loads, instruction, "\n            ", f"const long ko = {b_offset};")
    return f"""
          if (use_amx) {{
            {amx}
          }} else {{{fallback}
          }}"""


# the tile product with ``vdpbf16ps``: a B row (16 pixels x a k pair) times each channel's pair
# broadcast
BF16_DOT = VectorDot(
    "__m512", "_mm512_setzero_ps()", "uint8_t", "__m512bh", "(__m512bh)",
    step="{c} = _mm512_dpbf16_ps({c}, (__m512bh){a}, b);", store="_mm512_store_ps({at}, {c});",
)  # fmt: skip


def _dpbf16_fallback(mt: int, ntl: int, kb: int, b_offset: str, b_stride: int | str) -> str:
    return vector_tile_block(BF16_DOT, mt, ntl, kb, b_offset, b_stride, " " * 12)


def vector_activation(act: str, v: str) -> str:
    """C statement applying ``act`` (``xm_act_<act>``'s definition) to the 16 float lanes ``v``."""
    if act == "identity":
        return ""
    if act == "relu":  # v <= 0 ? 0 : v
        return f"{v} = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask({v}, _mm512_setzero_ps(), _CMP_NLE_UQ), {v});"
    if act == "relu6":
        return f"{v} = _mm512_min_ps(_mm512_max_ps({v}, _mm512_setzero_ps()), _mm512_set1_ps(6.f));"
    return (
        f"{{ float t[16] __attribute__((aligned(64))); _mm512_store_ps(t, {v}); "
        f"for (int l = 0; l < 16; ++l) t[l] = xm_act_{act}(t[l]); {v} = _mm512_load_ps(t); }}"
    )


def _im2col_row_vector(sw: int, iw: int, ow: int) -> str:
    """C copying an im2col row's columns ``ox`` whose taps ``ix0 + ox * sw`` fall inside the input
    row 16 at a time (stride 1: one load; stride 2: the even lanes of two), leaving ``ox`` at the first
    column not copied: the scalar loop after it does the edges. A stem's im2col (3 channels, 7x7 taps,
    stride 2) element by element cost more than its products (ResNet-18: 3.3 ms vs 2.6 for float32)."""
    if sw not in (1, 2):
        return ""
    load = (
        "_mm512_loadu_ps(p)"
        if sw == 1
        else "_mm512_permutex2var_ps(_mm512_loadu_ps(p), even, _mm512_loadu_ps(p + 16))"
    )
    return f"""
            if (ix0 < 0) for (; ox < {ow} && ix0 + ox * {sw} < 0; ++ox) rows[j][ox] = 0.f;
            {{
              const __m512i even =
                  _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
              (void)even;
              for (; ox + 16 <= {ow} && ix0 + ox * {sw} + {16 * sw} <= {iw}; ox += 16) {{
                const float* p = src + ix0 + ox * {sw};
                _mm512_storeu_ps(rows[j] + ox, {load});
              }}
            }}"""


class _Tiles:
    """The AMX tile set-up around a kernel's products, or none without ``tiles``."""

    tiles: bool

    def _tiles_ready(self) -> str:
        return "const int use_amx = xm_amx_ready();" if self.tiles else ""

    def _tiles_begin(self) -> str:
        return "if (use_amx) xm_amx_configure();" if self.tiles else ""

    def _tiles_end(self) -> str:
        return "if (use_amx) _tile_release();" if self.tiles else ""


class Conv2dBf16Amx(_Tiles, Template):
    """Dense and grouped float32 NCHW convolution on AMX-BF16 tiles (see the module's contract), with
    the float32 epilogue fused; ``vdpbf16ps`` on the same operands where the process has no tile data."""
    examples = (
        E.conv2d((1, 13, 9, 11), 19, 3, pad=1, act="relu"),
        E.conv2d((2, 32, 7, 5), 48, 1, stride=2, residual=True),
        E.conv2d((1, 3, 23, 21), 16, 7, stride=2, pad=3),
    )

    family = "conv2d_bf16_amx"
    isa = ISA
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 107  # ahead of conv2d_gemm (100); the float32 depthwise (110) keeps its convolutions
    epilogues = {"float32": FULL_EPILOGUE}
    tiles = True  # AMX tiles where the process has tile data; False: vdpbf16ps only (no AMX compiled)

    def match(self, op: Operation) -> Lowered | None:
        got = conv_common(op)
        if got is None:
            return None
        p, operands = got
        g = p["groups"]
        if g == p["ic"] == p["oc"] and g > 1:
            return None  # depthwise: no GEMM to tile
        if p["n"] * p["ic"] * p["oc"] * p["oh"] * p["ow"] == 0:
            return None
        icg, ocg, taps = p["ic"] // g, p["oc"] // g, p["fh"] * p["fw"]
        direct = (p["sh"], p["sw"]) == (1, 1) and taps > 1 and icg >= TILE_BF16
        kk = icg * taps
        kp = taps * _ceil(icg, TILE_BF16) if direct else _ceil(kk, TILE_BF16)
        if direct:
            # one long run of pixels q = oy * Wp + ox over the padded rows
            wq, hp = p["iw"] + 2 * p["pw"], p["ih"] + 2 * p["ph"]
            qend = (p["oh"] - 1) * wq + p["ow"]
            blocks = -(-qend // 16)
            last_read = blocks * 16 + (p["fh"] - 1) * p["dh"] * wq + (p["fw"] - 1) * p["dw"]
            p.update(
                wq=wq, wv=p["ow"], hp=hp, cp=_ceil(icg, TILE_BF16), plane=_ceil(max(hp * wq, last_read), 16)
            )
        else:
            pixels = p["oh"] * p["ow"]
            qend = pixels
            blocks = -(-pixels // 16)
            # the flattened output is one row
            p.update(wq=pixels, wv=pixels, ppad=0)
        mt = 2 if ocg > TILE_ROWS else 1
        ntile = 2 if blocks > 1 else 1
        p.update(
            mode="direct" if direct else "im2col", k=kk, kp=kp, mt=mt, ntile=ntile, qend=qend, blocks=blocks
        )
        p.update(ocp=_ceil(ocg, TILE_ROWS * mt))
        if not direct:
            p["ppad"] = _ceil(blocks, ntile) * 16
        return Lowered(p, operands)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, p["mode"], f"n{p['n']}", f"ic{p['ic']}", f"{p['ih']}x{p['iw']}",
            f"oc{p['oc']}",
            f"k{p['fh']}x{p['fw']}", f"s{p['sh']}x{p['sw']}", f"p{p['ph']}x{p['pw']}",
            f"d{p['dh']}x{p['dw']}" if (p["dh"], p["dw"]) != (1, 1) else "",
            f"g{p['groups']}" if p["groups"] != 1 else "",
            "bias" if p["bias"] else "", "res" if p["residual"] else "",
            p["act"].upper() if p["act"] != "identity" else "",
        )  # fmt: skip

    def workspace(self, p: dict[str, Any]) -> int:
        if p["mode"] == "direct":
            return p["cp"] // 2 * p["plane"] * 4
        return p["kp"] // 2 * p["ppad"] * 4

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        g, ocp, kp = p["groups"], p["ocp"], p["kp"]
        ocg, icg, taps = p["oc"] // g, p["ic"] // g, p["fh"] * p["fw"]
        w = np.asarray(array, np.float32).reshape(g, ocg, icg, taps)
        full = np.zeros((g, ocp, kp), np.float32)
        if p["mode"] == "direct":  # k = tap * Cp + c
            full.reshape(g, ocp, taps, p["cp"])[:, :ocg, :, :icg] = w.transpose(0, 1, 3, 2)
        else:  # k = (c * FH + r) * FW + s
            full[:, :ocg, : p["k"]] = w.reshape(g, ocg, -1)
        tiles = full.reshape(g, ocp // TILE_ROWS, TILE_ROWS, kp // TILE_BF16, TILE_BF16).transpose(
            0, 1, 3, 2, 4
        )
        return to_bfloat16(np.ascontiguousarray(tiles)), f"amx_bf16_{p['mode']}_a16x32"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, dh, dw, g = (p[k] for k in ("fh", "fw", "dh", "dw", "groups"))
        icg, ocg = ic // g, oc // g
        kp, mt, ntl, ocp, blocks = p["kp"], p["mt"], p["ntile"], p["ocp"], p["blocks"]
        wq, wv, qend = p["wq"], p["wv"], p["qend"]
        kb = kp // TILE_BF16
        ocb, pb = ocp // (TILE_ROWS * mt), -(-blocks // ntl)
        bw, bh = 16 * ntl, TILE_ROWS * mt
        if p["mode"] == "direct":
            plane = p["plane"]
            stride = plane * 4  # bytes between two channel pairs: a B tile's row stride
            pack = self._pack_padded(p)
            cbn = p["cp"] // TILE_BF16
            taps = ", ".join(str((r * dh * wq + s * dw) * 4) for r in range(fh) for s in range(fw))
            tap_table = f"static const long tap_off[{fh * fw}] = {{{taps}}};"
            koff = f"(tap_off[kt / {cbn}] + (long)(kt % {cbn}) * {TILE_ROWS * stride})"
        else:
            stride = p["ppad"] * 4  # bytes between two k pairs of the im2col matrix
            pack = self._pack_im2col(p, stride)
            tap_table = ""
            koff = f"(long)kt * {TILE_ROWS * stride}"
        extra, _ = _epilogue_args(p)
        args = ", ".join(
            ["const float* x", "const void* w", *extra, "float* y", "unsigned char* ws", "int nt"]
        )
        blocks_c = " ".join(
            f"const int b{j} = t % {pb} * {ntl} + {j}; const int q{j} = b{j} * 16;"
            f" const uint8_t* xb{j} = xp + (long)(b{j} < {blocks} ? q{j} : 0) * 4;"
            f" const int ns{j} = b{j} < {blocks} ? xm_bf16_segments(q{j}, sm{j}, so{j}, sc{j}) : 0;"
            for j in range(ntl)
        )
        seg_decl = " ".join(f"__mmask16 sm{j}[16]; long so{j}[16]; int sc{j}[16];" for j in range(ntl))
        stores = "\n".join(self._store(p, j) for j in range(ntl))
        work = n * oc * oh * ow * p["k"]
        products = tile_products(
            "_tile_dpbf16ps",
            _dpbf16_fallback(mt, ntl, kb, koff, stride),
            mt,
            ntl,
            kb,
            koff,
            stride,
            self.tiles,
        )
        return f"""
/* the output pixels of the 16-pixel block from run position q0 (q = oy * {wq} + ox; columns
   ox >= {wv} and positions >= {qend} are computed and dropped): per segment of consecutive output
   pixels its lanes, its first output index and its length */
static inline int xm_bf16_segments_{sym}(int q0, __mmask16* sm, long* so, int* sc) {{
  int ns = 0;
  for (int q = q0; q < q0 + 16 && q < {qend};) {{
    const int oy = q / {wq}, ox = q % {wq};
    int run = {wq} - ox < q0 + 16 - q ? {wq} - ox : q0 + 16 - q;
    if (ox < {wv}) {{
      const int v = {wv} - ox < run ? {wv} - ox : run;
      const int lane = q - q0;
      sm[ns] = (__mmask16)(((1u << v) - 1) << lane); so[ns] = (long)oy * {ow} + ox; sc[ns] = v; ++ns;
    }}
    q += run;
  }}
  return ns;
}}
#define xm_bf16_segments xm_bf16_segments_{sym}
static void {sym}({args}) {{
  uint8_t* xp = ws;
  const uint8_t* wpk = (const uint8_t*)w;
  {tap_table}
  {self._tiles_ready()}
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  {{
    {self._tiles_begin()}
    for (int nn = 0; nn < {n}; ++nn)
      for (int g = 0; g < {g}; ++g) {{
        const float* xg = x + ((long)nn * {ic} + (long)g * {icg}) * {ih * iw};
        const long ybase = ((long)nn * {oc} + (long)g * {ocg}) * {oh * ow};
        (void)ybase;{pack}
        #pragma omp for schedule(static)
        for (int t = 0; t < {pb * ocb}; ++t) {{
          const int o0 = t / {pb} * {bh};  // channel blocks outer: a block's filters stay in cache
          {seg_decl}
          {blocks_c}
          const uint8_t* wa = wpk + ((long)g * {ocp // TILE_ROWS} + o0 / {TILE_ROWS}) * {kb * TILE_BYTES};
          float acc[{bh}][{bw}] __attribute__((aligned(64)));
          {products}
          for (int r = 0; r < {bh} && o0 + r < {ocg}; ++r) {{
            const int o = g * {ocg} + o0 + r;
            const long yrow = ybase + (long)(o0 + r) * {oh * ow};
            const __m512 bv = _mm512_set1_ps({"bias[o]" if p["bias"] else "0.f"});
            {stores}
          }}
        }}
      }}
    {self._tiles_end()}
  }}
}}
#undef xm_bf16_segments
"""

    @staticmethod
    def _store(p: dict[str, Any], j: int) -> str:
        """Pixel block ``j`` of accumulator row ``r``: bias, residual, activation, stored segment by
        segment (lanes compressed to the segment's first output pixel)."""
        res = (
            f"for (int s = 0; s < ns{j}; ++s) v = _mm512_add_ps(v, _mm512_maskz_expand_ps(sm{j}[s], "
            f"_mm512_maskz_loadu_ps(xm_bf16_lanes(sc{j}[s]), res + yrow + so{j}[s])));"
            if p["residual"]
            else ""
        )
        return f"""
            {{
              __m512 v = _mm512_add_ps(_mm512_load_ps(&acc[r][{16 * j}]), bv);
              {res}
              {vector_activation(p["act"], "v")}
              for (int s = 0; s < ns{j}; ++s)
                _mm512_mask_storeu_ps(y + yrow + so{j}[s], xm_bf16_lanes(sc{j}[s]),
                                      _mm512_maskz_compress_ps(sm{j}[s], v));
            }}"""

    @staticmethod
    def _pack_padded(p: dict[str, Any]) -> str:
        """The direct mode's input: ``[Cp/2][plane][2]`` bfloat16, the padding (rows, columns,
        channels up to Cp, the plane's tail past the padded rows) zero."""
        ih, iw, ph, pw, hp, wq, cp, plane = (
            p[k] for k in ("ih", "iw", "ph", "pw", "hp", "wq", "cp", "plane")
        )
        icg = p["ic"] // p["groups"]
        return f"""
        #pragma omp for schedule(static)
        for (int item = 0; item < {cp // 2 * hp}; ++item) {{
          const int cq = item / {hp}, yy = item % {hp}, iy = yy - {ph};
          uint16_t* dst = (uint16_t*)xp + ((long)cq * {plane} + (long)yy * {wq}) * 2;
          if (yy == {hp - 1}) memset(dst + {wq * 2}, 0, {(plane - hp * wq) * 4});
          if ((unsigned)iy >= {ih}u || 2 * cq >= {icg}) {{ memset(dst, 0, {wq * 4}); continue; }}
          const float* r0 = xg + ((long)(2 * cq) * {ih} + iy) * {iw};
          memset(dst, 0, {pw * 4});
          xm_bf16_pairs(dst + {pw * 2}, r0, 2 * cq + 1 < {icg} ? r0 + {ih * iw} : 0, {iw});
          memset(dst + {(pw + iw) * 2}, 0, {pw * 4});
        }}"""

    @staticmethod
    def _pack_im2col(p: dict[str, Any], row: int) -> str:
        """``[Kp/2][Ppad][2]`` bfloat16 im2col (the padding k and pixels zero)."""
        ih, iw, oh, ow = p["ih"], p["iw"], p["oh"], p["ow"]
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        kk, kp, ppad = p["k"], p["kp"], p["ppad"]
        pixels = oh * ow
        if (fh, fw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0):
            return f"""
        #pragma omp for schedule(static)
        for (int kq = 0; kq < {kp // 2}; ++kq) {{
          uint16_t* dst = (uint16_t*)(xp + (long)kq * {row});
          if (2 * kq >= {kk}) {{ memset(dst, 0, {row}); continue; }}
          const float* r0 = xg + (long)(2 * kq) * {pixels};
          xm_bf16_pairs(dst, r0, 2 * kq + 1 < {kk} ? r0 + {pixels} : 0, {pixels});
          memset(dst + {pixels * 2}, 0, {(ppad - pixels) * 4});
        }}"""
        return f"""
        #pragma omp for schedule(static)
        for (int item = 0; item < {kp // 2 * oh}; ++item) {{
          const int kq = item / {oh}, oy = item % {oh};
          float rows[2][{ow}];
          for (int j = 0; j < 2; ++j) {{
            const int k = 2 * kq + j;
            const int c = k / {fh * fw}, r = k / {fw} % {fh}, s = k % {fw};
            const int iy = oy * {sh} - {ph} + r * {dh};
            if (k >= {kk} || (unsigned)iy >= {ih}u) {{ memset(rows[j], 0, sizeof rows[j]); continue; }}
            const float* src = xg + ((long)c * {ih} + iy) * {iw};
            const int ix0 = s * {dw} - {pw};
            int ox = 0;{_im2col_row_vector(sw, iw, ow)}
            for (; ox < {ow}; ++ox) {{
              const int ix = ix0 + ox * {sw};
              rows[j][ox] = (unsigned)ix < {iw}u ? src[ix] : 0.f;
            }}
          }}
          uint16_t* dst = (uint16_t*)(xp + (long)kq * {row}) + (long)oy * {ow * 2};
          xm_bf16_pairs(dst, rows[0], rows[1], {ow});
          if (oy == {oh - 1}) memset(dst + {ow * 2}, 0, {(ppad - pixels) * 4});
        }}"""

    def support(self, em: CEmitter) -> str:
        return (AMX_SUPPORT if self.tiles else "#include <string.h>\n") + BF16_SUPPORT


class MatmulBf16Amx(_Tiles, Template):
    """float32 ``y = op(a) @ op(b)`` (batched too) on AMX-BF16 tiles, bias along the columns,
    residual and activation fused; a constant ``b`` is rounded and packed at compile time."""
    examples = (
        E.matmul(5, 67, 37, bias=True, act="relu"),
        E.matmul(33, 32, 19, tb=True),
        E.matmul(4, 40, 9, batch=2, const_b=False),
    )

    family = "matmul_bf16_amx"
    isa = ISA
    ops = (T.MatrixMulOp, T.BatchedMatrixMulOp)
    # ahead of matmul_matvec (105) and matmul_gemm (100): +bf16 keeps its one-row products too
    priority = 106
    epilogues = {"float32": MATMUL_EPILOGUE}
    tiles = True  # as Conv2dBf16Amx.tiles

    def match(self, op: Operation) -> Lowered | None:
        got = matmul_common(op)
        if got is None:
            return None
        params = got.params
        m, n, k = params["m"], params["n"], params["k"]
        if m * n * k == 0:
            return None
        mb, nb = -(-m // TILE_ROWS), -(-n // 16)
        params.update(kp=_ceil(k, TILE_BF16), mt=2 if mb > 1 else 1, ntile=2 if nb > 1 else 1)
        params["mbp"] = _ceil(mb, params["mt"])
        params["nbp"] = _ceil(nb, params["ntile"])
        return got

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, *matmul_sym(p), "bias" if p["bias"] else "", "res" if p["residual"] else "",
            p["act"].upper() if p["act"] != "identity" else "",
        )  # fmt: skip

    def _a_bytes(self, p: dict[str, Any]) -> int:
        return p["mbp"] * p["kp"] * TILE_ROWS * 2

    def workspace(self, p: dict[str, Any]) -> int:
        return self._a_bytes(p) + (0 if p["b_const"] else p["nbp"] * p["kp"] * 16 * 2)

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        b = constant_b(operand, array, p)
        if b is None:
            return None
        full = np.zeros((p["kp"], p["nbp"] * 16), np.float32)
        full[: p["k"], : p["n"]] = b
        # (K/32, 16 pairs, 2, NB, 16) -> (NB, K/32, 16 pairs, 16 columns, 2)
        tiles = full.reshape(p["kp"] // TILE_BF16, TILE_ROWS, 2, p["nbp"], 16).transpose(3, 0, 1, 4, 2)
        return to_bfloat16(np.ascontiguousarray(tiles)), "amx_bf16_b16x16x2"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        M, N, K, kp, mt, ntl = p["m"], p["n"], p["k"], p["kp"], p["mt"], p["ntile"]
        kb, mbp, nbp = kp // TILE_BF16, p["mbp"], p["nbp"]
        extra, _ = _epilogue_args(p)
        args = ", ".join(
            ["const float* a", "const void* b_", *extra, "float* y", "unsigned char* ws", "int nt"]
        )
        a_at = f"a0[(long)kk * {M} + r]" if p["ta"] else f"a0[(long)r * {K} + kk]"
        b_at = f"b0[(long)c * {K} + kk]" if p["tb"] else f"b0[(long)kk * {N} + c]"
        if p["ta"]:
            a_row = f"""
          float t[{TILE_BF16}];
          for (int kk0 = 0; kk0 < {TILE_BF16}; ++kk0) {{
            const int kk = kt * {TILE_BF16} + kk0;
            t[kk0] = r < {M} && kk < {K} ? {a_at} : 0.f;
          }}
          xm_bf16_run(dst, t, {TILE_BF16});"""
        else:
            a_row = f"""
          const long kv = {K} - kt * {TILE_BF16} < {TILE_BF16} ? {K} - kt * {TILE_BF16} : {TILE_BF16};
          if (r < {M}) {{
            xm_bf16_run(dst, a0 + (long)r * {K} + kt * {TILE_BF16}, kv);
            memset(dst + kv, 0, ({TILE_BF16} - kv) * 2);
          }}
          else memset(dst, 0, {TILE_BF16 * 2});"""
        if p["b_const"]:
            b_pack = "const uint8_t* bp = (const uint8_t*)b_;"
        else:
            b_pack = f"""
    uint8_t* bp = ws + {self._a_bytes(p)};
    const float* b0 = (const float*)b_ + (long)bt * {N * K};
    #pragma omp for schedule(static)
    for (int item = 0; item < {nbp * kp // 2}; ++item) {{
      const int nb = item / {kp // 2}, kq = item % {kp // 2};
      float t[2][16];
      for (int j = 0; j < 2; ++j)
        for (int cc = 0; cc < 16; ++cc) {{
          const int kk = 2 * kq + j, c = nb * 16 + cc;
          t[j][cc] = kk < {K} && c < {N} ? {b_at} : 0.f;
        }}
      uint8_t* tile = bp + ((long)nb * {kb} + kq / {TILE_ROWS}) * {TILE_BYTES};
      xm_bf16_pairs((uint16_t*)tile + kq % {TILE_ROWS} * 32, t[0], t[1], 16);
    }}"""
        blocks_c = " ".join(
            f"const int nb{j} = t % {nbp // ntl} * {ntl} + {j};"
            f" const uint8_t* xb{j} = bp + (long)nb{j} * {kb * TILE_BYTES};"
            for j in range(ntl)
        )
        koff = f"(long)kt * {TILE_BYTES}"
        products = tile_products(
            "_tile_dpbf16ps", _dpbf16_fallback(mt, ntl, kb, koff, 64), mt, ntl, kb, koff, 64, self.tiles
        )
        bias = "_mm512_maskz_loadu_ps(m, bias + c0)" if p["bias"] else "_mm512_setzero_ps()"
        res = (
            "v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, rb + (long)row * " + str(N) + " + c0));"
            if p["residual"]
            else ""
        )
        work = p["batch"] * M * N * K
        return f"""
static void {sym}({args}) {{
  {self._tiles_ready()}
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  {{
    {self._tiles_begin()}
    for (int bt = 0; bt < {p["batch"]}; ++bt) {{
      const float* a0 = a + (long)bt * {M * K};
      float* yb = y + (long)bt * {M * N};
      const float* rb = {"res + (long)bt * " + str(M * N) if p["residual"] else "0"};
      (void)rb;
      uint8_t* ap = ws;
      #pragma omp for schedule(static)
      for (int item = 0; item < {mbp * kb}; ++item) {{
        const int mb = item / {kb}, kt = item % {kb};
        for (int rr = 0; rr < {TILE_ROWS}; ++rr) {{
          const int r = mb * {TILE_ROWS} + rr;
          uint16_t* dst = (uint16_t*)(ap + ((long)mb * {kb} + kt) * {TILE_BYTES}) + rr * {TILE_BF16};{a_row}
        }}
      }}{b_pack}
      #pragma omp for schedule(static)
      for (int t = 0; t < {mbp // mt * (nbp // ntl)}; ++t) {{
        const int mb0 = t / {nbp // ntl} * {mt};
        {blocks_c}
        const uint8_t* wa = ap + (long)mb0 * {kb * TILE_BYTES};
        float acc[{TILE_ROWS * mt}][{16 * ntl}] __attribute__((aligned(64)));
        {products}
        for (int i = 0; i < {TILE_ROWS * mt}; ++i) {{
          const int row = mb0 * {TILE_ROWS} + i;
          if (row >= {M}) break;
          for (int j = 0; j < {ntl}; ++j) {{
            const int c0 = (t % {nbp // ntl} * {ntl} + j) * 16;
            if (c0 >= {N}) break;
            const __mmask16 m = xm_bf16_lanes({N} - c0);
            __m512 v = _mm512_add_ps(_mm512_load_ps(&acc[i][16 * j]), {bias});
            {res}
            {vector_activation(p["act"], "v")}
            _mm512_mask_storeu_ps(yb + (long)row * {N} + c0, m, v);
          }}
        }}
      }}
    }}
    {self._tiles_end()}
  }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return (AMX_SUPPORT if self.tiles else "#include <string.h>\n") + BF16_SUPPORT


KERNEL_UNITS = (Conv2dBf16Amx(), MatmulBf16Amx())

__all__ = ["ISA", "KERNEL_UNITS", "round_bfloat16", "to_bfloat16"]
