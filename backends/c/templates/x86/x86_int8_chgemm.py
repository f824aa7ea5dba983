"""The channel-lane mode of the AVX512-VNNI int8 GEMM (family ``conv2d_q8_x86``,
:mod:`backends.c.templates.x86.x86_int8_gemm`): output channels are the vector lanes.

The GEMM's general mode makes pixels the lanes: its vectors are 16 consecutive pixels of the planes'
pixel space ``q = oy * Wq + ox``, whose ``Wq - OW`` columns past each output row are computed and
dropped, and whose last tile is padded to ``16 * NV`` pixels. On the small planes of the deep layers
that is much of the work: a 7x7 output of a 3x3 convolution has ``Wq = 9``, 63 pixels in 64 lanes for
49 real ones (23% of the products dropped; 12% at 14x14). Here a register tile is NV vectors of 16
output channels (the filter's bytes, ``[G][OC/16NV][IC/4][tap][16NV][4]``, packed at compile time)
times MR pixels of one output row, whose dwords are broadcast from the same ``x + 128`` phase planes
(:meth:`Conv2dQ8Gemm._pack_code`): pixel ``i`` of a tile at ``q`` reads the dword at ``q + i`` for each
tap, so only the real pixels are computed (a row of ``OW`` pixels in ``ceil(OW / MR)`` tiles) and the
channel count is padded to ``16 * NV`` instead.

The epilogue is x86_int8's on channel lanes: each per-channel scalar of
``x86_int8._epilogue_value`` / ``_affine_value`` (the integer bias, the affine slope ``fa`` and
offset ``fo``, the float bias ``fb``) is a vector of 16 channels' values loaded once per tile
(:class:`ChannelLanes`), the kernel-wide constants broadcast as before, so every lane computes what
the pixel-lane epilogue computes for its channel: bit-identical results. Where only some channels
have the affine form, both forms run and a lane mask picks each channel's. The 16-byte results of MR
pixels are transposed (three rounds of byte, word and dword unpacks) into each channel's MR
consecutive output bytes, one masked store per channel. Only int8 results take this mode.

:func:`channel_mode` decides, per convolution, from the products either mode computes (each mode's
padding) and its per-tile overheads; the figures are kernel thread-CPU times on an AMD EPYC with
AVX512-VNNI (no AMX), see ``CHANNEL_*`` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.c.templates.portable.requant import exact
from backends.c.templates.x86.x86_int8 import (
    PARALLEL_WORK,
    W16,
    VectorWidth,
    _affine_value,
    _bias_decls,
    _epilogue_value,
    _has_fbias,
    _kernel_args,
    _vec_int_activation,
)

CHANNEL_MAX_MR = 8  # pixels of a tile: the byte transpose takes up to 8 rows
CHANNEL_REGS = 32  # zmm registers: MR * NV accumulators, NV filter vectors and one broadcast
CHANNEL_MAX_NV = 4
# per-tile cycles beside the products: the epilogue and the transpose of each 16-channel vector
# (MR results, three unpack rounds, 16 masked stores) and the call
CHANNEL_TILE_CYCLES, CHANNEL_VECTOR_CYCLES = 40, 60
# the general mode's per-tile cycles beside its products: its call, the epilogue of each vector
PIXEL_TILE_CYCLES, PIXEL_VECTOR_CYCLES = 40, 8


@dataclass(frozen=True)
class ChannelLanes(VectorWidth):
    """x86_int8's 16-lane width whose per-channel scalars are vectors of 16 channels: ``set1`` of one
    of ``lane_values``' names is that vector's name (``fa`` -> ``fav``)."""

    lane_values: tuple[tuple[str, str], ...] = ()

    def set1(self, value: str, kind: str = "ps") -> str:
        return dict(self.lane_values).get(value) or super().set1(value, kind)


CHANNELS = ChannelLanes(
    **{f: getattr(W16, f) for f in W16.__dataclass_fields__},
    lane_values=(("fa", "fav"), ("fo", "fov"), ("fb", "fbv")),
)


def channel_tile(ow: int, ocg: int, steps: int) -> tuple[int, int, float]:
    """(NV, MR, estimated cycles of one output row) of the channel-lane tile: MR pixels of a row of
    ``ow`` times NV vectors of 16 of ``ocg`` channels, ``steps`` dot-product steps each."""
    best: tuple[float, int, int] | None = None
    for nv in range(1, CHANNEL_MAX_NV + 1):
        for mr in range(1, CHANNEL_MAX_MR + 1):
            if mr * nv + nv + 1 > CHANNEL_REGS:
                continue
            # one vpdpbusd a cycle; the broadcasts and filter loads issue beside them (two a cycle),
            # and a short tile waits on the dot product's latency (4 cycles)
            step = max(nv * mr, (nv + mr) / 2, 4)
            tiles = -(-ow // mr) * -(-ocg // (16 * nv))
            cycles = tiles * (steps * step + CHANNEL_TILE_CYCLES + CHANNEL_VECTOR_CYCLES * nv)
            if best is None or cycles < best[0]:
                best = (cycles, nv, mr)
    assert best is not None
    return best[1], best[2], best[0]


def channel_mode(
    p: dict[str, Any], geo: dict[str, Any], nv: int, mr: int, lanes: int, force: bool = False
) -> tuple[int, int] | None:
    """(NV, MR) of the channel-lane tile where it costs less than the pixel-lane tile (``nv`` x
    ``mr``) of the general mode (or ``force``: :func:`channel_over_pointwise`), else None. Both
    estimates count one dot-product step a cycle."""
    if p["out"] != "q8":
        return None
    ocg, steps = p["oc"] // p["groups"], geo["c4"] * p["fh"] * p["fw"]
    cnv, cmr, row_cycles = channel_tile(p["ow"], ocg, window_steps(p) or steps)
    pixels = p["oh"] * geo["wq"]
    ptiles = -(-pixels // (lanes * nv)) * -(-ocg // mr)
    pixel_cycles = ptiles * (steps * max(nv * mr, 4) + PIXEL_TILE_CYCLES + PIXEL_VECTOR_CYCLES * nv * mr)
    if row_cycles * p["oh"] >= pixel_cycles and not force:
        return None
    return cnv, cmr


# where the channel-lane mode takes a convolution that x86_int8_gemm's pointwise mode serves: that
# mode pads the pixels to blocks of 64 (a 7x7 plane: 64 for 49, 14x14: 256 for 196). Kernel
# thread-CPU medians, pointwise -> channel-lane mode (ms, AVX512-VNNI, no AMX): 160 -> 960 at 7x7
# 0.046 -> 0.039; 960 -> 160 at 7x7 0.046 -> 0.037; 320 -> 1280 at 7x7 0.128 -> 0.101; at 14x14,
# 576 -> 96 0.061 -> 0.055, 256 -> 1024 0.304 -> 0.258, 192 -> 64 0.017 -> 0.018, 96 -> 576
# 0.068 -> 0.071; at 56x56, 256 -> 64 0.254 -> 0.306, 24 -> 144 0.067 -> 0.106
CHANNEL_OVER_POINTWISE_PIXELS = 64  # always at most this many output pixels
CHANNEL_OVER_POINTWISE_C4 = (256, 48)  # up to that many pixels, from that many channel quadruples


def channel_over_pointwise(p: dict[str, Any], geo: dict[str, Any]) -> bool:
    """Whether a convolution the pointwise mode serves takes the channel-lane mode instead (the
    measured rule above)."""
    if p["out"] != "q8":
        return False
    pixels, (most, c4) = p["oh"] * p["ow"], CHANNEL_OVER_POINTWISE_C4
    return pixels <= CHANNEL_OVER_POINTWISE_PIXELS or (pixels <= most and geo["c4"] >= c4)


def window_steps(p: dict[str, Any]) -> int | None:
    """The dot-product steps of the window form (see :func:`window_geometry`) where it takes fewer
    than the channel quadruples' (a first layer: 3 channels of a 7x7 filter are 42 steps, not 49),
    else None."""
    if p["groups"] != 1 or p["dw"] != 1:
        return None
    steps = p["ic"] * p["fh"] * -(-p["fw"] // 4)
    return steps if steps < -(-p["ic"] // 4) * p["fh"] * p["fw"] else None


def window_geometry(p: dict[str, Any], mr: int) -> dict[str, int]:
    """The window form of the channel-lane mode, for convolutions of few input channels: a step's dword
    is four consecutive columns of one channel's input row (filter row ``r``, columns ``4j .. 4j + 3``
    of the filter: zero weights past its width), so the activations are the input itself, ``x + 128``,
    padded (``[C][HP][WP]`` bytes, padding 128), and pixel ``i`` of a tile reads ``sw`` bytes after
    pixel ``i - 1``. Returns the padded rows and row length (every column a row's last tile reads)."""
    hp = max(p["ih"] + 2 * p["ph"], (p["oh"] - 1) * p["sh"] + (p["fh"] - 1) * p["dh"] + 1)
    last = (-(-p["ow"] // mr) * mr - 1) * p["sw"] + 4 * -(-p["fw"] // 4)
    wp = -(-max(p["iw"] + 2 * p["pw"], last) // 64) * 64
    return {"hp": hp, "wp": wp}


def window_offsets(p: dict[str, Any]) -> list[int]:
    """Each step's byte offset from a pixel's first byte: (channel, filter row, column quad)."""
    hp, wp = p["hp"], p["wp"]
    return [
        (c * hp + r * p["dh"]) * wp + 4 * j
        for c in range(p["ic"])
        for r in range(p["fh"])
        for j in range(-(-p["fw"] // 4))
    ]


def window_pack_code(p: dict[str, Any]) -> str:
    """The parallel loop copying one image's input rows as ``x + 128`` into the padded rows."""
    ic, ih, iw, ph, pw, hp, wp = (p[k] for k in ("ic", "ih", "iw", "ph", "pw", "hp", "wp"))
    return f"""
      #pragma omp for schedule(static)
      for (int item = 0; item < {ic * hp}; ++item) {{
        uint8_t* dst = planes + (long)item * {wp};
        const int iy = item % {hp} - {ph};
        if ((unsigned)iy >= {ih}u) {{ memset(dst, 0x80, {wp}); continue; }}
        const int8_t* src = xg + ((long)(item / {hp}) * {ih} + iy) * {iw};
        memset(dst, 0x80, {wp});
        for (int c0 = 0; c0 < {iw}; c0 += 64) {{
          const __mmask64 m = xm_q8_lanes64({iw} - c0);
          const __m512i v = _mm512_maskz_loadu_epi8(m, src + c0);
          _mm512_mask_storeu_epi8(dst + {pw} + c0, m, _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80)));
        }}
      }}"""


def pack_channels(array: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    """The filter as ``[G][OC/16NV][IC/4][tap][16NV][4]`` int8 (zero past the channels), or in the
    window form ``[OC/16NV][IC][FH][FW/4][16NV][4]`` (zero past the filter's width)."""
    if p.get("window"):
        nv, oc, ic, fh, fw = p["nv"], p["oc"], p["ic"], p["fh"], p["fw"]
        width, quads = 16 * nv, -(-fw // 4)
        ocb = -(-oc // width)
        w = np.asarray(array).view(np.int8).reshape(oc, ic, fh, fw)
        full = np.zeros((ocb * width, ic, fh, quads * 4), np.int8)
        full[:oc, :, :, :fw] = w
        packed = full.reshape(ocb, width, ic, fh, quads, 4).transpose(0, 2, 3, 4, 1, 5)
        return np.ascontiguousarray(packed)
    g, nv, c4 = p["groups"], p["nv"], p["c4"]
    ocg, icg, taps = p["oc"] // g, p["ic"] // g, p["fh"] * p["fw"]
    width = 16 * nv
    ocb = -(-ocg // width)
    w = np.asarray(array).view(np.int8).reshape(g, ocg, icg, taps)
    full = np.zeros((g, ocb * width, c4 * 4, taps), np.int8)
    full[:, :ocg, :icg] = w
    packed = full.reshape(g, ocb, width, c4, 4, taps).transpose(0, 1, 3, 5, 2, 4)
    return np.ascontiguousarray(packed)


def channel_plane(p: dict[str, Any], geo: dict[str, Any], mr: int, lanes: int) -> int:
    """Dwords of one phase plane: every pixel a tile reads (a row's last tile reads up to MR - 1
    pixels past it), in whole vectors."""
    return -(-(geo["hq"] * geo["wq"] + mr) // lanes) * lanes


def _tile_code(sym: str, p: dict[str, Any], offsets: list[int]) -> str:
    """The micro-kernel: MR x NV accumulators (pixel ``i``, channel vector ``v``) over every channel
    quadruple and tap (the window form: every step of ``offsets``), spilled to ``acc`` as
    ``[MR][NV][16]``."""
    nv, mr, c4, plane = (p[k] for k in ("nv", "mr", "c4", "plane"))
    nph = len(p["row_phases"]) * len(p["col_phases"])
    stride = 4  # bytes from one pixel's dword to the next's: the planes' dwords
    if p.get("window"):  # one pass over every (channel, filter row, column quad) step
        c4, nph, plane, stride = 1, 1, 0, p["sw"]
    acc = [[f"c{i}_{v}" for v in range(nv)] for i in range(mr)]
    decl = " ".join(f"__m512i {a} = _mm512_setzero_si512();" for row in acc for a in row)
    spill = " ".join(
        f"_mm512_store_si512(acc + {16 * (i * nv + v)}, {name});"
        for i, row in enumerate(acc)
        for v, name in enumerate(row)
    )
    loads = " ".join(
        f"const __m512i w{v} = _mm512_loadu_si512((const void*)(wk + {64 * v}));" for v in range(nv)
    )
    rows = " ".join(
        f"{{ const __m512i a = _mm512_set1_epi32(xm_q8_dword(bk + {stride * i}));"
        + "".join(f" XM_DPBUSD({acc[i][v]}, a, w{v});" for v in range(nv))
        + " }"
        for i in range(mr)
    )
    step = f"{{ {loads}\n        {rows} }}"
    taps = len(offsets)
    if taps <= 9:  # every tap unrolled: constant offsets
        body = "\n      ".join(
            f"{{ const uint8_t* bk = bp + {off}; const int8_t* wk = wp + {t * nv * 64}; {step} }}"
            for t, off in enumerate(offsets)
        )
        loop = f"""for (int cq = 0; cq < {c4}; ++cq, bp += {nph * plane * 4}, wp += {taps * nv * 64}) {{
      {body}
    }}"""
    else:
        loop = f"""for (int cq = 0; cq < {c4}; ++cq, bp += {nph * plane * 4})
    for (int tap = 0; tap < {taps}; ++tap, wp += {nv * 64}) {{
      const uint8_t* bk = bp + tap_offset[tap]; const int8_t* wk = wp;
      {step}
    }}"""
    table = f"static const int tap_offset[{taps}] = {{{', '.join(map(str, offsets))}}};" if taps > 9 else ""
    return f"""
static __attribute__((noinline)) void {sym}_ctile(const uint8_t* bp, const int8_t* wp, int32_t* acc) {{
  {table}
  {decl}
  {loop}
  {spill}
}}"""


def _vector_epilogue(p: dict[str, Any], i: int) -> str:
    """Result ``r{i}`` (16 channels of pixel ``i``, int8) of accumulator ``t`` (integer bias added):
    the exact epilogue, the affine one, or both and the channel mask ``affm`` choosing."""
    exact_p = {k: v for k, v in p.items() if k != "affine"}
    vtype, value, _ = _epilogue_value(exact_p, "t", "fb", CHANNELS)
    assert vtype == "__m128i", vtype
    exact_code = f"{_vec_int_activation(exact_p, 't', CHANNELS)} r{i} = {value};".strip()
    if not p.get("affine"):
        return exact_code
    _, fast, _ = _affine_value(p, "t", CHANNELS)
    if p["affine"][1]:  # every channel
        return f"r{i} = {fast};"
    return f"const __m128i rf = {fast}; {exact_code} r{i} = _mm_mask_blend_epi8(affm, r{i}, rf);"


def _store_code(p: dict[str, Any]) -> str:
    """The epilogue of a tile: per vector of 16 channels, its channel operands, the MR results, their
    transpose and each channel's masked store of the tile's pixels."""
    nv, mr, oc, oh, ow = (p[k] for k in ("nv", "mr", "oc", "oh", "ow"))
    ocg = oc // p["groups"]
    ragged = ocg % (16 * nv) != 0
    parts = []
    for v in range(nv):
        decls = [f"const int o = g * {ocg} + o0 + {16 * v};"]
        mask = "0xFFFF"
        if ragged:
            decls.append(f"const __mmask16 cm = xm_q8_lanes({ocg} - (o0 + {16 * v}));")
            mask = "cm"
        if p.get("affine") and p["affine"][1]:
            decls.append("const __m512i bv = _mm512_setzero_si512();")
        else:
            decls.append(f"const __m512i bv = _mm512_maskz_loadu_epi32({mask}, bias + o);")
        if p.get("affine"):
            decls.append(
                f"const __m512 fav = _mm512_maskz_loadu_ps({mask}, afc + o),"
                f" fov = _mm512_maskz_loadu_ps({mask}, afc + {oc} + o); (void)fov;"
            )
            if not p["affine"][1]:
                decls.append(
                    "const __mmask16 affm = _mm512_cmp_ps_mask(fav, _mm512_setzero_ps(), _CMP_NEQ_UQ);"
                )
        if _has_fbias(p):
            decls.append(f"const __m512 fbv = _mm512_maskz_loadu_ps({mask}, fbias + o);")
        results = " ".join(
            f"{{ __m512i t = _mm512_add_epi32(_mm512_load_si512(acc + {16 * (i * nv + v)}), bv); "
            f"{_vector_epilogue(p, i)} }}"
            for i in range(mr)
        )
        stores = []
        for j in range(16):
            half = f"g{j // 2}" if j % 2 == 0 else f"_mm_unpackhi_epi64(g{j // 2}, g{j // 2})"
            store = f"_mm_mask_storeu_epi8(yo + {j} * {oh * ow}L, pm, {half});"
            stores.append(f"if ({j} < nch) {store}" if ragged else store)
        nch = f"const int nch = {ocg} - (o0 + {16 * v}); (void)nch;" if ragged else ""
        parts.append(
            f"""{{ {" ".join(decls)}
          __m128i {", ".join(f"r{i} = _mm_setzero_si128()" for i in range(8))};
          {results}
          XM_Q8_TRANSPOSE8x16(r0, r1, r2, r3, r4, r5, r6, r7);
          int8_t* yo = y + ((long)nn * {oc} + o) * {oh * ow} + (long)oy * {ow} + ox0; {nch}
          {" ".join(stores)} }}"""
        )
    return "\n        ".join(parts)


CHANNEL_SUPPORT = r"""
#ifndef XM_X86_INT8_CHGEMM
#define XM_X86_INT8_CHGEMM
/* the dword at p (4-byte aligned in the planes) as a broadcast's operand */
static inline int32_t xm_q8_dword(const uint8_t* p) { int32_t v; memcpy(&v, p, 4); return v; }
/* eight 16-byte rows r_i (pixel i, 16 channels) to g0..g7: qword h of g_k is channel 2k + h, its
   byte i pixel i (byte, word and dword unpacks) */
#define XM_Q8_TRANSPOSE8x16(r0, r1, r2, r3, r4, r5, r6, r7)                                   \
  const __m128i a0 = _mm_unpacklo_epi8(r0, r1), a1 = _mm_unpackhi_epi8(r0, r1);              \
  const __m128i b0 = _mm_unpacklo_epi8(r2, r3), b1 = _mm_unpackhi_epi8(r2, r3);              \
  const __m128i c0 = _mm_unpacklo_epi8(r4, r5), c1 = _mm_unpackhi_epi8(r4, r5);              \
  const __m128i d0 = _mm_unpacklo_epi8(r6, r7), d1 = _mm_unpackhi_epi8(r6, r7);              \
  const __m128i e0 = _mm_unpacklo_epi16(a0, b0), e1 = _mm_unpackhi_epi16(a0, b0);            \
  const __m128i e2 = _mm_unpacklo_epi16(a1, b1), e3 = _mm_unpackhi_epi16(a1, b1);            \
  const __m128i f0 = _mm_unpacklo_epi16(c0, d0), f1 = _mm_unpackhi_epi16(c0, d0);            \
  const __m128i f2 = _mm_unpacklo_epi16(c1, d1), f3 = _mm_unpackhi_epi16(c1, d1);            \
  const __m128i g0 = _mm_unpacklo_epi32(e0, f0), g1 = _mm_unpackhi_epi32(e0, f0);            \
  const __m128i g2 = _mm_unpacklo_epi32(e1, f1), g3 = _mm_unpackhi_epi32(e1, f1);            \
  const __m128i g4 = _mm_unpacklo_epi32(e2, f2), g5 = _mm_unpackhi_epi32(e2, f2);            \
  const __m128i g6 = _mm_unpacklo_epi32(e3, f3), g7 = _mm_unpackhi_epi32(e3, f3);
#endif
"""


def render_channels(sym: str, p: dict[str, Any], pack_code: str, offsets: list[int]) -> str:
    """The kernel of a convolution in the channel-lane mode: the planes packed as the general mode
    packs them (``pack_code``), then the tiles (``offsets``: each tap's byte offset from a pixel's
    dword in its channel quadruple's planes)."""
    n, ic, oc, oh, ow = (p[k] for k in ("n", "ic", "oc", "oh", "ow"))
    g, nv, mr, wq, c4 = (p[k] for k in ("groups", "nv", "mr", "wq", "c4"))
    taps = p["fh"] * p["fw"]
    if p.get("window"):  # one pass over the window steps; a tile starts at its first pixel's byte
        c4, taps = 1, len(offsets)
        base = f"(long)oy * {p['sh'] * p['wp']} + ox0 * {p['sw']}"
    else:
        base = f"(long)(oy * {wq} + ox0) * 4"
    ocg = oc // g
    width = 16 * nv
    ocb = -(-ocg // width)
    rowb = -(-ow // mr)
    ptiles = oh * rowb
    tiles = ptiles * ocb
    nph = len(p["row_phases"]) * len(p["col_phases"])
    # the inner tile loop walks the smaller operand (as the general mode's): the filter of a block
    # of channels, or the planes
    weights_first = ocg * c4 * 4 * taps > nph * p["plane"] * 4 * c4 and not p.get("window")
    tile_of = (
        f"const int ob = t / {ptiles}, pt = t % {ptiles};"
        if weights_first
        else f"const int pt = t / {ocb}, ob = t % {ocb};"
    )
    work = n * oc * oh * ow * (ic // g) * taps
    return exact(f"""{_tile_code(sym, p, offsets)}
static void {sym}({_kernel_args(p)}) {{
  const int8_t* x = (const int8_t*)x_;
  const int8_t* wpk = (const int8_t*)w_;
  {_bias_decls(p)}
  int8_t* y = (int8_t*)y_;
  uint8_t* planes = (uint8_t*)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  for (int nn = 0; nn < {n}; ++nn)
    for (int g = 0; g < {g}; ++g) {{
      const int8_t* xg = x + ((long)nn * {ic} + (long)g * {ic // g}) * {p["ih"] * p["iw"]};
      {pack_code}
      #pragma omp for schedule(static)
      for (int t = 0; t < {tiles}; ++t) {{
        {tile_of}
        const int oy = pt / {rowb}, ox0 = pt % {rowb} * {mr}, o0 = ob * {width};
        const __mmask16 pm = xm_q8_lanes({ow} - ox0 < {mr} ? {ow} - ox0 : {mr});
        int32_t acc[{mr * nv * 16}] __attribute__((aligned(64)));
        {sym}_ctile(planes + {base},
                    wpk + ((long)g * {ocb} + ob) * {c4 * taps * width * 4}, acc);
        {_store_code(p)}
      }}
    }}
}}
""")


__all__ = [
    "CHANNELS",
    "CHANNEL_SUPPORT",
    "ChannelLanes",
    "channel_mode",
    "channel_over_pointwise",
    "channel_plane",
    "channel_tile",
    "pack_channels",
    "window_geometry",
    "window_offsets",
    "window_pack_code",
    "window_steps",
    "render_channels",
]
