"""int8 NCHW44 convolutions with the ARMv8.6 int8 matrix multiply (``arm-nchw44-dot-i8mm``):
``smmla`` (``vmmlaq_s32``) multiplies a 2x8 int8 matrix by an 8x2 one into a 2x2 int32 block, 32
multiply-adds per instruction (``sdot``: 16).

The convolution is a GEMM ``Y[k, p] = sum_K W[k, K] * X[K, p]`` over ``K`` in steps of 8:

* dense layers (NCHW44_DOT, ``KCRSk4c4`` filters): ``K = (channel group of 8, r, s, channel)``, a
  step being one tap of two neighbouring NCHW44 blocks (a channel count of 4 mod 8 leaves the last
  step's upper half zero);
* first layers (plain NCHW input, ``KRSCk4`` filters, any channel count): ``K = (c, r, s)`` with the
  filter row padded to 8 taps by zero weights, so one step is 8 neighbouring bytes of an input row
  (ResNet's 7x7 stride-2 layer: 3 x 7 steps of one 8-byte load per pixel).

The filter is packed ahead of time into panels of 8 output channels, per step 4 pairs of channels of
16 bytes (``W[k, K:K+8]``, ``W[k+1, K:K+8]``). At run time each image's input is packed once (the
padded copy first, where there is padding) into tiles of :data:`NB` output pixels, per step
:data:`NB` / 2 pairs of pixels of 16 bytes; stride-1 rows take 4 pixels per two loads and two
``zip``, the rest one 32-bit lane at a time. A register tile is 8 output channels x 12 pixels: 24
``int32x4`` accumulators, 4 weight and 6 input vectors per step, 24 ``smmla`` (768 multiply-adds).

An accumulator holds ``[k p, k p', k' p, k' p']``; ``uzp1``/``uzp2`` of two channel pairs give each
pixel's 4 channels, which the epilogue of :mod:`backends.c.templates.arm.neon_int8` requantizes exactly
(requant.py's one definition on 4 lanes; the kernel is compiled without contraction).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates.arm.neon_int8 import NEON_REQUANT_C, ConvDotGemmNchw44, requant_store
from backends.c.templates.portable.requant import bias_ctype, exact, post_processed
from dialects.layout import SPECS, Layout
from passes.lowering.kernels import Lowered

NB = 10  # output pixels per register tile (5 pairs)
MB = 2  # blocks of 4 output channels per register tile (4 pairs)
DOT_NB, DOT_MB = 8, 3  # the sdot first layer's tile: 3 blocks x 8 pixels (24 accumulators)
STEP = 8  # bytes of K per smmla operand row
MARGIN = 64  # bytes past the padded copy that the 8-byte row loads of a first layer may touch


def steps(p: dict[str, Any]) -> int:
    """K-steps of 8 bytes."""
    if p["mode"] == "hybrid":
        return p["ic"] * p["fh"] * -(-p["fw"] // STEP)
    return -(-p["ic"] // 8) * p["fh"] * p["fw"]


def filter_rows(logical: np.ndarray, p: dict[str, Any], panel: int) -> np.ndarray:
    """The logical ``(K, C, R, S)`` int8 filter as ``(K rounded up to panel, steps, 8)``: each output
    channel's K in steps of 8 bytes, zero where K is padded."""
    oc, ic, fh, fw = logical.shape
    oc8 = -(-oc // panel) * panel
    if p["mode"] == "hybrid":
        sw8 = -(-fw // STEP) * STEP
        w = np.zeros((oc8, ic, fh, sw8), np.int8)
        w[:oc, :, :, :fw] = logical
        rows = w.reshape(oc8, -1, STEP)  # K = (c, r, s), the filter row padded with zero taps
    else:
        ic8 = -(-ic // 8) * 8
        w = np.zeros((oc8, ic8, fh, fw), np.int8)
        w[:oc, :ic] = logical
        rows = w.reshape(oc8, ic8 // 8, 8, fh, fw).transpose(0, 1, 3, 4, 2).reshape(oc8, -1, STEP)
    return rows


def gemm_filter(logical: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    """The filter as ``smmla`` panels: ``[K/8 panels][steps][4 pairs][2 channels][8]``."""
    rows = filter_rows(logical, p, 4 * MB)
    ks = rows.shape[1]
    return np.ascontiguousarray(rows.reshape(-1, 2 * MB, 2, ks, STEP).transpose(0, 3, 1, 2, 4))


def dot_filter(logical: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    """The filter as ``sdot`` panels: ``[K/12 panels][steps][2 halves][3 blocks][4 channels][4]``."""
    rows = filter_rows(logical, p, 4 * DOT_MB)
    ks = rows.shape[1]
    return np.ascontiguousarray(rows.reshape(-1, DOT_MB, 4, ks, 2, 4).transpose(0, 3, 4, 1, 2, 5))


class ConvMmlaNchw44(ConvDotGemmNchw44):
    """``conv2d_nchw44_mmla``: int8 NCHW44 dense and first-layer convolutions, packed-input GEMM on
    ``smmla`` register tiles (the module doc)."""
    # dense: channels 4 mod 8, pixel counts leaving partial tiles and pairs, rows of 2, stride 2 with
    # and without the padded copy, dilation, one 4-channel panel; first layers of 1-3 channels; every
    # input on the grid of the input scale, so the requantized sums land on ties
    examples = (
        E.conv2d_q8((1, 8, 6, 6), 8, 1, sy=1 / 4, ties=True),
        E.conv2d_q8((1, 12, 5, 7), 20, 3, pad=1, act="relu", sy=1 / 4, ties=True),
        E.conv2d_q8((2, 16, 9, 11), 8, 3, stride=2, pad=1, sy=1 / 4, ties=True),
        E.conv2d_q8((1, 4, 7, 9), 12, 1, stride=2, act="relu", sy=1 / 4, ties=True),
        E.conv2d_q8((1, 8, 2, 2), 16, 3, pad=1, act="relu", sy=1 / 4, ties=True),
        E.conv2d_q8((1, 8, 9, 9), 8, 3, pad=2, dil=2, sy=1 / 4, ties=True),
        E.conv2d_q8((1, 20, 3, 13), 4, 5, pad=2, act="relu", sy=1 / 4, ties=True),
        E.conv2d_q8((1, 3, 19, 17), 16, 7, stride=2, pad=3, act="relu", sy=1 / 4, ties=True),
        E.conv2d_q8((2, 3, 9, 10), 8, 3, stride=2, pad=1, act="relu", sy=1 / 4, ties=True),
        E.conv2d_q8((1, 1, 7, 5), 12, 5, pad=2, act="relu", sy=1 / 4, ties=True),
        E.conv2d_q8((1, 2, 6, 6), 8, 3, sy=1 / 4, ties=True),
    )

    family = "conv2d_nchw44_mmla"
    priority = 210  # ahead of the sdot GEMM (205) on targets with i8mm
    modes = ("dense", "hybrid")
    nb, mb = NB, MB  # register tile: pixels, blocks of 4 output channels
    group = 2  # pixels packed together (a pair: one smmla operand)

    def __init__(self, isa: str = "i8mm"):
        super().__init__(isa)

    def match(self, op: Operation) -> Lowered | None:
        lowered = super().match(op)
        if lowered is None:
            return None
        if lowered.params["mode"] == "hybrid" and lowered.params["dw"] != 1:
            return None  # a first layer's step is 8 neighbouring bytes of a row
        return lowered

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        source = Layout.KRSCk4 if p["mode"] == "hybrid" else self.source_layout
        logical = SPECS[source].unpack(np.asarray(array), (p["oc"], p["ic"], p["fh"], p["fw"]))
        return self.pack_filter(np.asarray(logical, np.int8), p), f"{self.family}_{p['mode']}"

    def pack_filter(self, logical: np.ndarray, p: dict[str, Any]) -> np.ndarray:
        return gemm_filter(logical, p)

    # -- geometry --------------------------------------------------------------------------------
    def _copies(self, p: dict[str, Any]) -> bool:
        """Whether the input goes through a padded copy: padding, and every first layer (its
        8-byte row loads may read past the input's last row)."""
        return self._needs_pad(p) or p["mode"] == "hybrid"

    def _copy_bytes(self, p: dict[str, Any]) -> int:
        if not self._copies(p):
            return 0
        ihp, iwp = self._padded(p)
        return -(-(p["ic"] * ihp * iwp + MARGIN) // 64) * 64  # NCHW44 or plain: ic planes

    def _tiles(self, p: dict[str, Any]) -> int:
        return -(-(p["oh"] * p["ow"]) // self.nb)

    def workspace(self, p: dict[str, Any]) -> int:
        return self._copy_bytes(p) + self._tiles(p) * steps(p) * self.nb * STEP

    # -- code ------------------------------------------------------------------------------------
    def render(self, em: Any, sym: str, p: dict[str, Any]) -> str:
        return NEON_REQUANT_C + exact(self._render(sym, p))

    def _tile(self, name: str, p: dict[str, Any], mb: int, nb: int, geo: dict[str, int]) -> str:
        """``name(wa, xb, yb, bb)``: ``mb`` output blocks x ``nb`` pixels (``nb`` <= NB; the packed
        input always holds NB pixels per tile)."""
        pairs, pix_pairs = 2 * mb, -(-nb // 2)
        lines = [
            f"static inline __attribute__((always_inline)) void {name}(const int8_t* restrict wa, "
            f"const int8_t* restrict xb, int8_t* restrict yb, const {bias_ctype(p)}* restrict bb) {{",
            "  (void)bb;",
        ]
        lines += [f"  int32x4_t c{i}_{j} = vdupq_n_s32(0);" for i in range(pairs) for j in range(pix_pairs)]
        lines.append(f"  for (int k = 0; k < {geo['steps']}; ++k) {{")
        # the weights in one multi-register load (ld1 {v0-v3}); the pixel pairs one at a time (24
        # accumulators, 4 weights: a wider load of pixels spills)
        lines.append(f"    const int8x16x{pairs}_t w = vld1q_s8_x{pairs}(wa);")
        for j in range(pix_pairs):
            lines.append(f"    {{ const int8x16_t xv = vld1q_s8(xb + {16 * j});")
            lines += [f"      c{i}_{j} = vmmlaq_s32(c{i}_{j}, w.val[{i}], xv);" for i in range(pairs)]
            lines.append("    }")
        lines.append(f"    wa += {4 * 16}; xb += {NB * STEP};")
        lines.append("  }")
        # [k p, k p', k' p, k' p'] of channel pairs (4b, 4b+1) and (4b+2, 4b+3): even lanes are
        # pixel p's 4 channels, odd lanes pixel p''s
        int_bias = p["bias"] and not post_processed(p)
        for b in range(mb):
            for j in range(nb):
                uzp = "vuzp1q_s32" if j % 2 == 0 else "vuzp2q_s32"
                value = f"{uzp}(c{2 * b}_{j // 2}, c{2 * b + 1}_{j // 2})"
                if int_bias:
                    value = f"vaddq_s32({value}, vld1q_s32(bb + {4 * b}))"
                lines.append(f"  const int32x4_t a{b}_{j} = {value};")
        lines += requant_store(p, mb, nb, geo["y_c"])
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _row_quads(self, p: dict[str, Any]) -> bool:
        """Whether 4 pixels of one row take one load per block: stride 1, or stride 2 from the padded
        copy (the even pixels of a de-interleaving load, which may read past the row)."""
        return p["mode"] != "hybrid" and (p["sw"] == 1 or (p["sw"] == 2 and self._copies(p)))

    def _pack_body(self, p: dict[str, Any], geo: dict[str, int], quad: bool) -> str:
        """C statements packing the steps of pixels ``pa``, ``pb`` (pairs ``d``, and with ``quad``
        the next two pixels into ``d + e``: the next pair, maybe in the next tile) from ``xp``."""
        if p["mode"] == "hybrid":
            return f"""
    for (int c = 0; c < {p["ic"]}; ++c) for (int r = 0; r < {p["fh"]}; ++r)
      for (int g = 0; g < {-(-p["fw"] // STEP)}; ++g, d += {self.nb * STEP}) {{
        const long o = (long)c * {geo["x_c"]} + (long)r * {p["dh"] * geo["x_h"]} + g * {STEP};
        vst1q_s8(d, vcombine_s8(vld1_s8(pa + o), vld1_s8(pb + o)));
      }}"""
        blocks = p["ic"] // 4
        lane = f"(long)s * {p['dw'] * 4}"

        def step(hi: bool) -> str:
            if quad:
                if p["sw"] == 1:
                    ld = "vreinterpretq_s32_s8(vld1q_s8(pa + {o}))"
                else:  # the even pixels of 8 (the padded copy has a margin)
                    ld = "vld2q_s32((const int32_t*)(pa + {o})).val[0]"
                lo_v = ld.format(o="o")
                hi_v = ld.format(o=f"o + {geo['x_c']}") if hi else "vdupq_n_s32(0)"
                return (
                    f"const int32x4_t lo = {lo_v}, hi = {hi_v};\n"
                    "        vst1q_s8(d, vreinterpretq_s8_s32(vzip1q_s32(lo, hi)));\n"
                    "        vst1q_s8(d + e, vreinterpretq_s8_s32(vzip2q_s32(lo, hi)));"
                )
            hi_o = f"o + {geo['x_c']}"
            code = "int32x4_t v = vdupq_n_s32(0);"
            for ptr, off, i in (("pa", "o", 0), ("pa", hi_o, 1), ("pb", "o", 2), ("pb", hi_o, 3)):
                if i % 2 == 0 or hi:
                    code += f"\n        v = vld1q_lane_s32((const int32_t*)({ptr} + {off}), v, {i});"
            return code + "\n        vst1q_s8(d, vreinterpretq_s8_s32(v));"

        def loop(first: int, last: int, hi: bool) -> str:
            if first >= last:
                return ""
            return f"""
    for (int g = {first}; g < {last}; ++g) for (int r = 0; r < {p["fh"]}; ++r)
      for (int s = 0; s < {p["fw"]}; ++s, d += {NB * STEP}) {{
        const long o = (long)g * {2 * geo["x_c"]} + (long)r * {p["dh"] * geo["x_h"]} + {lane};
        {step(hi)}
      }}"""

        return loop(0, blocks // 2, True) + loop(blocks // 2, -(-blocks // 2), False)

    def _render(self, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        sh, sw = p["sh"], p["sw"]
        hybrid = p["mode"] == "hybrid"
        lane = 1 if hybrid else 4  # bytes per pixel and channel step of the input
        ihp, iwp = self._padded(p)
        copies = self._copies(p)
        _, xs, ys = self._strides(p, copies)
        ks = steps(p)
        geo = {"steps": ks, "x_c": xs["C/4"], "x_h": xs["H"], "y_c": ys["C/4"]}
        pixels = oh * ow
        tiles = self._tiles(p)
        NB, MB, G = self.nb, self.mb, self.group  # noqa: N806 - the tile's constants
        panels = -(-oc // (4 * MB))
        mb_tail = (oc // 4) - (panels - 1) * MB
        nb_tail = pixels - (tiles - 1) * NB
        variants = sorted({(mb, nb) for mb in {MB, mb_tail} for nb in {NB, nb_tail}})
        code = "".join(self._tile(f"{sym}_t{mb}x{nb}", p, mb, nb, geo) for mb, nb in variants)

        def call(mb: int, nb: int) -> str:
            return f"{sym}_t{mb}x{nb}(wa, xb, yb, bb);"

        def by_pixels(mb: int) -> str:
            if nb_tail == NB:
                return call(mb, NB)
            return f"if (t == {tiles - 1}) {call(mb, nb_tail)} else {call(mb, NB)}"

        dispatch = by_pixels(MB)
        if mb_tail != MB:
            dispatch = f"if (kp == {panels - 1}) {by_pixels(mb_tail)} else {dispatch}"
        copy_bytes = self._copy_bytes(p)
        copy = self._input_of_image(p, "int8_t", copies, ic if hybrid else ic // 4, copy_bytes)
        # four pixels of one row, two loads per block: stride 1, or stride 2 from the padded copy
        quads = G == 2 and self._row_quads(p)
        quad_loop = ""
        if quads:
            quad_loop = f"""
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int q = 0; q < {tiles * NB // 4}; ++q) {{
      const int p0 = 4 * q, oy = p0 / {ow}, ox = p0 % {ow};
      if (p0 + 3 >= {pixels} || ox + 3 >= {ow}) continue;
      const int8_t* pa = xp + (long)oy * {sh * xs["H"]} + (long)ox * {sw * lane};
      int8_t* d = packed + (long)(p0 / {NB}) * {ks * NB * STEP} + (p0 % {NB}) * {STEP};
      const long e = (long)((p0 + 2) / {NB}) * {ks * NB * STEP} + ((p0 + 2) % {NB}) * {STEP} - (d - packed);
      {self._pack_body(p, geo, quad=True)}
    }}"""
        pixel_pointers = "\n      ".join(
            f"const int q{i} = p0 + {i} < {pixels} ? p0 + {i} : {pixels - 1}; const int8_t* p{'abcd'[i]} = "
            f"xp + (long)(q{i} / {ow}) * {sh * xs['H']} + (long)(q{i} % {ow}) * {sw * lane};"
            for i in range(G)
        )
        pair_skip = ""
        if quads:  # the pairs of a packed quad
            pair_skip = f"if ((p0 | 3) < {pixels} && (p0 & ~3) % {ow} + 3 < {ow}) continue;"
        return f"""{code}
static void {sym}(const void* x_, const void* w_, {"const void* bias_, " if p["bias"] else ""}void* y_,
                  unsigned char* ws, int nt) {{
  const int8_t* x = (const int8_t*)x_;
  const int8_t* w = (const int8_t*)w_;
  int8_t* y = (int8_t*)y_;
  const {bias_ctype(p)}* bias = {"(const " + bias_ctype(p) + "*)bias_" if p["bias"] else "0"};
  int8_t* packed = (int8_t*)ws + {copy_bytes};
  (void)bias;
  for (int nn = 0; nn < {n}; ++nn) {{{copy}
    {quad_loop}
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int pp = 0; pp < {tiles * NB // G}; ++pp) {{
      const int p0 = {G} * pp;
      {pair_skip}
      /* pixels past the last one repeat it: their results are never stored */
      {pixel_pointers}
      int8_t* d = packed + (long)(p0 / {NB}) * {ks * NB * STEP} + (p0 % {NB}) * {STEP * 2 // G};
      {self._pack_body(p, geo, quad=False)}
    }}
    #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
    for (int kp = 0; kp < {panels}; ++kp)
      for (int t = 0; t < {tiles}; ++t) {{
        const int8_t* wa = w + (long)kp * {ks * MB * 32};
        const int8_t* xb = packed + (long)t * {ks * NB * STEP};
        int8_t* yb = y + (long)nn * {ys["N"]} + (long)kp * {MB * ys["C/4"]} + (long)t * {NB * 4};
        const {bias_ctype(p)}* bb = bias ? bias + (long)kp * {4 * MB} : 0;
        {dispatch}
      }}
  }}
}}
"""


class ConvDotIm2colNchw44(ConvMmlaNchw44):
    """``conv2d_nchw44_dot_im2col``: the packed-input GEMM on targets with ``sdot`` but no ``smmla``:
    each 8-byte step as two 4-byte halves of 8 pixels (first layers: ``uzp`` of two pairs), register
    tiles of 3 blocks of 4 output channels x 8 pixels, ``sdot`` by lane (24 per half-step).

    Against the sdot GEMM reading NCHW44 rows (``conv2d_nchw44_dot_gemm``): a first layer there is
    one input channel and tap at a time (16-bit ``smlal``), rows shorter than 8 pixels leave its tiles
    part empty and strided pixels take one broadcast load each. ResNet-18 int8 at 64x64: the 7x7/2
    layer 3.67M -> 1.23M instructions, the 2x2 512-channel 3x3 layers 1.62M -> 0.92M, the stride-2
    3x3 layers ~0.95M -> ~0.42M, the 16x16 64-channel ones 0.92M -> 0.88M. 1x1 stride-1 layers
    without padding stay with it (no packing needed)."""

    family = "conv2d_nchw44_dot_im2col"
    priority = 207  # ahead of the sdot GEMM (205); behind smmla (210)
    nb, mb = DOT_NB, DOT_MB
    group = 4

    def __init__(self, isa: str = "dot"):
        super().__init__(isa)

    def match(self, op: Operation) -> Lowered | None:
        lowered = super().match(op)
        if lowered is None or self.flat(lowered.params):
            return None  # a 1x1 stride-1 layer is a GEMM over the NCHW44 rows already (priority 205)
        return lowered

    def pack_filter(self, logical: np.ndarray, p: dict[str, Any]) -> np.ndarray:
        return dot_filter(logical, p)

    def _pack_body(self, p: dict[str, Any], geo: dict[str, int], quad: bool) -> str:
        half = self.nb * 4  # the second 4 bytes of a step: after the first of every pixel
        if p["mode"] != "hybrid":
            return self._dense_body(p, geo, half)
        return f"""
    for (int c = 0; c < {p["ic"]}; ++c) for (int r = 0; r < {p["fh"]}; ++r)
      for (int g = 0; g < {-(-p["fw"] // STEP)}; ++g, d += {self.nb * STEP}) {{
        const long o = (long)c * {geo["x_c"]} + (long)r * {p["dh"] * geo["x_h"]} + g * {STEP};
        const int32x4_t ab = vreinterpretq_s32_s8(vcombine_s8(vld1_s8(pa + o), vld1_s8(pb + o)));
        const int32x4_t cd = vreinterpretq_s32_s8(vcombine_s8(vld1_s8(pc + o), vld1_s8(pd + o)));
        vst1q_s8(d, vreinterpretq_s8_s32(vuzp1q_s32(ab, cd)));
        vst1q_s8(d + {half}, vreinterpretq_s8_s32(vuzp2q_s32(ab, cd)));
      }}"""

    def _dense_body(self, p: dict[str, Any], geo: dict[str, int], half: int) -> str:
        """A dense layer's step for pixels ``pa``..``pd``: block ``2g`` (4 pixels x 4 channels) at
        ``d``, block ``2g + 1`` at ``d + half`` (zero past the last block); 4 pixels of one row by one
        load per block, other groups one 32-bit lane at a time."""
        blocks = p["ic"] // 4
        x_c = geo["x_c"]

        def nest(fast: bool) -> str:
            if fast and p["sw"] == 1:
                ld = "vreinterpretq_s32_s8(vld1q_s8(pa + {o}))"
            elif fast:
                ld = "vld2q_s32((const int32_t*)(pa + {o})).val[0]"
            else:
                ld = "vld1q_dup_s32((const int32_t*)(pa + {o}))"
                for lane, ptr in enumerate(("pb", "pc", "pd"), 1):
                    ld = f"vld1q_lane_s32((const int32_t*)({ptr} + {{o}}), {ld}, {lane})"
            hi = f"(2 * g + 1 < {blocks} ? {ld.format(o=f'o + {x_c}')} : vdupq_n_s32(0))"
            return f"""
      for (int g = 0; g < {-(-blocks // 2)}; ++g) for (int r = 0; r < {p["fh"]}; ++r)
        for (int s = 0; s < {p["fw"]}; ++s, d += {self.nb * STEP}) {{
          const long o = (long)g * {2 * x_c} + (long)r * {p["dh"] * geo["x_h"]} + (long)s * {p["dw"] * 4};
          vst1q_s8(d, vreinterpretq_s8_s32({ld.format(o="o")}));
          vst1q_s8(d + {half}, vreinterpretq_s8_s32({hi}));
        }}"""

        if not self._row_quads(p):
            return nest(False)
        return f"""
    if (p0 + 3 < {p["oh"] * p["ow"]} && p0 % {p["ow"]} + 3 < {p["ow"]}) {{{nest(True)}
    }} else {{{nest(False)}
    }}"""

    def _tile(self, name: str, p: dict[str, Any], mb: int, nb: int, geo: dict[str, int]) -> str:
        quads = -(-nb // 4)
        lines = [
            f"static inline __attribute__((always_inline)) void {name}(const int8_t* restrict wa, "
            f"const int8_t* restrict xb, int8_t* restrict yb, const {bias_ctype(p)}* restrict bb) {{",
            "  (void)bb;",
        ]
        int_bias = p["bias"] and not post_processed(p)
        init = "vld1q_s32(bb + {o})" if int_bias else "vdupq_n_s32(0)"
        lines += [f"  int32x4_t a{b}_{j} = {init.format(o=4 * b)};" for b in range(mb) for j in range(nb)]
        # one 4-byte half-step per iteration (the halves are consecutive in both packings): the
        # loop body of two halves made gcc keep 6 weights live and spill accumulators
        lines.append(f"  for (int k = 0; k < {2 * geo['steps']}; ++k) {{")
        lines += [f"    const int8x16_t w{b} = vld1q_s8(wa + {16 * b});" for b in range(mb)]
        for g in range(quads):
            lines.append(f"    {{ const int8x16_t xv = vld1q_s8(xb + {16 * g});")
            for j in range(4 * g, min(nb, 4 * g + 4)):
                dots = [f"a{b}_{j} = vdotq_laneq_s32(a{b}_{j}, w{b}, xv, {j - 4 * g});" for b in range(mb)]
                lines += ["      " + d for d in dots]
            lines.append("    }")
        lines.append(f"    wa += {self.mb * 16}; xb += {self.nb * 4};")
        lines.append("  }")
        lines += requant_store(p, mb, nb, geo["y_c"])
        lines.append("}")
        return "\n".join(lines) + "\n"


KERNEL_UNITS = (ConvMmlaNchw44(), ConvDotIm2colNchw44())
