"""int8 convolutions on AMX tiles (ISA ``amx``, the ``amx`` feature of x86 targets), exact against
:mod:`semantics.quant_kernels` like the AVX512-VNNI kernels they sit in front of.

Dense, 1x1 and grouped NCHW convolutions are a GEMM ``acc[oc][pixel] = sum_k w[oc][k] * x[k][pixel]``
on 16x16 int32 accumulator tiles. The activations are packed as ``x + 128`` in quads of four k per
pixel, which is AMX's B-tile layout (a tile row holds four consecutive k of 16 pixels): the phase
planes of ``x86_int8_gemm`` (32 or more channels per group, any stride), column-expanded input rows
(few channels) or the VNNI kernel's im2col (``x86_int8``; a 1x1 stride-1 convolution's is its
input); see :class:`Conv2dQ8Amx`. ``tdpbsud``
multiplies signed filter bytes (A) by those unsigned bytes (B), and the epilogue adds each channel's
``-128 * sum(w)`` as the VNNI one does. Filters are packed at compile time as A tiles,
``[G][OC/16][K/KS][16 channels][KS k]`` (zero-padded), so one tile load is contiguous bytes; the K
step ``KS`` is 64 bytes, or in the im2col mode the least multiple of 4 that covers K in as many tile
products (:func:`k_step`: K 96 in two steps of 48, not 128 in two of 64), set in the kernel's tile
configuration. A work item is up to 32 channels x 32 pixels: four accumulator tiles (16 rows of 64
bytes), two A and two B tiles (16 rows of KS bytes, KS / 4 rows of 64), stored to a 4 KiB block the
requantization epilogue
(``x86_int8``'s ``_epilogue``: ``requant.py``'s definition on 16 lanes) reads row by row, so the
output stays NCHW. A pointwise convolution with an int8 result (1x1, stride 1, unpadded) takes
64-pixel work items instead (``wide``): its input packed by ``x86_int8_gemm.xm_q8_quad64`` in that
unit's *pack order*, the products in two passes of the same four tiles, so that a channel's row of
the block holds four vectors that ``x86_int8_gemm``'s pointwise epilogue requantizes, narrows
together back into pixel order (two ``vpackssdw``, one ``vpacksswb``), looks up in the island's
table once (``vpermi2b``) and stores as one 64-byte line. Work items are software-pipelined: a
thread requantizes item ``t - 1`` in slices between the tile products of item ``t``, so that the
vector units work while the tile unit does.

Linux hands out AMX tile data only on request: ``xm_amx_ready`` asks once per model
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``) and caches the answer; where it is refused
(or ``XMGE_AMX=0``) every kernel computes the same integer block with ``vpdpbusd`` on the same packed
operands, so both paths give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import Template
from backends.c.templates.portable.requant import REQUANT_C, exact
from backends.c.templates.portable.typed import Conv2dQ8
from backends.c.templates.x86.x86_amx_os import AMX_ENV
from backends.c.templates.x86.x86_int8 import (
    PARALLEL_WORK,
    SUPPORT,
    _affine_tag,
    _bias_decls,
    _channel_vectors,
    _dense_conv_q8,
    _epilogue,
    _has_fbias,
    _island_lut_decls,
    _kernel_args,
    _out_ctype,
    _requant_operands,
)
from backends.c.templates.x86.x86_int8_gemm import GEMM_SUPPORT, Conv2dQ8Vnni, _geometry, _pointwise
from dialects import tensor as T
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "amx"
TILE_ROWS = 16  # rows of every tile: channels (A, accumulators) or groups of four k (B)
TILE_K = 64  # bytes of a tile row: k per A row, 16 pixels x 4 k per B row
TILE_BYTES = TILE_ROWS * TILE_K
WIDE_TILES = 4  # accumulator tiles along the pixels of a pointwise work item: 64 pixels, one 64-byte store

AMX_SUPPORT = rf"""
#ifndef XM_AMX_SUPPORT
#define XM_AMX_SUPPORT
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
/* Linux grants AMX tile data (XFEATURE_XTILEDATA, 18) only to a process that asks with
   arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023); a tile instruction before that is SIGILL. Asked once
   (the answer is cached; asking twice is harmless, so a race costs nothing); {AMX_ENV}=0 refuses. */
static int xm_amx_state; /* 0: not asked yet, 1: granted, -1: refused */
static int xm_amx_ready(void) {{
  int state = __atomic_load_n(&xm_amx_state, __ATOMIC_ACQUIRE);
  if (state == 0) {{
    const char* env = getenv("{AMX_ENV}");
    const int off = env && (!strcmp(env, "0") || !strcmp(env, "off") || !strcmp(env, "no") ||
                            !strcmp(env, "false"));
    state = !off && syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
    __atomic_store_n(&xm_amx_state, state, __ATOMIC_RELEASE);
  }}
  return state > 0;
}}
/* palette 1 (tile state is per thread): the accumulators 0-3 {TILE_ROWS} rows of {TILE_K} bytes, the A tiles
   4-5 {TILE_ROWS} rows of a K step of k bytes (a multiple of 4, at most {TILE_K}), the B tiles 6-7 k / 4 rows
   of {TILE_K} bytes */
typedef struct {{
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
}} xm_amx_config_t;
static inline void xm_amx_configure_k(int k) {{
  xm_amx_config_t c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 8; ++i) {{ c.colsb[i] = {TILE_K}; c.rows[i] = {TILE_ROWS}; }}
  for (int i = 4; i < 6; ++i) c.colsb[i] = (uint16_t)k;
  for (int i = 6; i < 8; ++i) c.rows[i] = (uint8_t)(k / 4);
  /* GCC's _tile_loadconfig tells the compiler it reads 8 bytes of c: without this barrier the stores
     to colsb and rows may be dropped, and ldtilecfg faults on stack garbage */
  __asm__ volatile("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}}
/* all eight tiles {TILE_ROWS} rows of {TILE_K} bytes */
static inline void xm_amx_configure(void) {{ xm_amx_configure_k({TILE_K}); }}
#endif
"""


# 1x1 convolutions outside x86_int8_gemm's pointwise mode (strided, grouped, a float result) on this
# few channels per group stay on the VNNI GEMM: a tile's K (64) is at most half used, the products
# cost less than the requantization, and the VNNI register tile skips the accumulators' round trip
# through memory
VNNI_POINTWISE_K = 32


# Those of the pointwise mode (1x1, stride 1, unpadded, ungrouped, an int8 result) stay on it with few
# input and few output channels together: the mode is bound by its vpdpbusd (K * OC per pixel), the
# AMX one (64-pixel items, the K step fitted) by its packing (K per pixel, whatever OC), its 16-row
# tiles (24 channels compute 32) and a tile product that costs the same at any K. Conv thread-CPU
# medians (us, one thread, 31 interleaved rounds), pointwise -> AMX, at 56x56 unless named. It stays:
# K 32 -> 16 at 112x112 28.1 -> 37.3, K 32 -> 16 7.5 -> 8.1, 32 -> 24 11.1 -> 12.1, 40 -> 16
# 8.9 -> 9.5, 24 -> 24 8.9 -> 11.4, 16 -> 24 8.1 -> 11.3, 16 -> 32 10.1 -> 11.6, 16 -> 48 13.9 -> 17.0,
# 24 -> 48 17.4 -> 19.1, 16 -> 96 26.9 -> 27.8 (alone at 112x112 124.7 -> 117.7, but inside
# MobileNetV2, its input fresh from the previous layer, 105.3 -> 128.2 over 41 rounds). Past these
# pairs AMX wins or ties: K 48 -> 16 10.3 -> 10.5, 48 -> 24 14.2 -> 13.0, 64 -> 16 12.1 -> 12.0,
# 96 -> 16 18.3 -> 18.0, 32 -> 32 13.6 -> 11.5, 32 -> 48 20.4 -> 19.4, 24 -> 96 32.3 -> 29.5,
# 24 -> 144 50.8 -> 50.0, 32 -> 64 25.7 -> 21.4, 32 -> 192 at 28x28 21.8 -> 16.9, 40 -> 48
# 23.2 -> 22.0, 96 -> 24 23.9 -> 21.0, 144 -> 24 39.4 -> 34.4, at 28x28 11.1 -> 8.5, 144 -> 48
# 69.3 -> 49.8; ResNet-50's 64 -> 64 43.2 -> 26.8, 256 -> 64 151.8 -> 87.9, 64 -> 256 165.5 -> 86.3,
# 512 -> 128 at 28x28 173.3 -> 57.4, 128 -> 512 138.8 -> 59.9
VNNI_POINTWISE_OVER_AMX = ((40, 24), (24, 48), (16, 96))  # (most input, most output channels) pairs


def vnni_pointwise_wins(p: dict[str, Any]) -> bool:
    """Whether a 1x1 convolution stays on the VNNI GEMM (see ``VNNI_POINTWISE_OVER_AMX`` where it
    takes x86_int8_gemm's pointwise mode, else ``VNNI_POINTWISE_K``)."""
    kk, oc = p["ic"] // p["groups"], p["oc"] // p["groups"]
    if _pointwise(p, _geometry(p)):
        return any(kk <= k_most and oc <= oc_most for k_most, oc_most in VNNI_POINTWISE_OVER_AMX)
    return kk <= VNNI_POINTWISE_K


def k_step(k: int) -> int:
    """Bytes of K per tile product in the im2col mode: as few steps as 64-byte rows take (the tile
    product costs the same at any K, so no more of them), each the least multiple of 4 that covers
    ``k`` in that many. Padding to whole 64-byte rows wasted a fifth to a third of the products and
    of the packed input (MobileNetV2's K 96: 128; K 160: 192); here K 96 steps 48, 160 steps 56
    (168), 150 steps 52 (156), and a multiple of 64 steps 64."""
    quads = -(-k // 4)
    steps = -(-quads // (TILE_K // 4))
    return 4 * -(-quads // steps)


def amx_tile_block(
    mt: int, ntl: int, kb: int, b_loads: list[str], instruction: str, indent: str, prologue: str = ""
) -> str:
    """One work item's tile products: accumulators ``i * ntl + j`` (0-3) zeroed, per K tile ``kt``
    (``prologue`` first) the A tiles 4-5 (``wa``, 64-byte rows), the B tiles 6-7 (``b_loads``, one
    load statement each), ``instruction`` on every pair, then the accumulators stored to ``acc``;
    the statements joined by ``indent``."""
    return indent.join(
        [f"_tile_zero({i * ntl + j});" for i in range(mt) for j in range(ntl)]
        + [f"for (int kt = 0; kt < {kb}; ++kt) {{"]
        + ([f"  {prologue}"] if prologue else [])
        + [f"  _tile_loadd({4 + i}, wa + ({i}L * {kb} + kt) * {TILE_BYTES}, {TILE_K});" for i in range(mt)]
        + [f"  {load}" for load in b_loads]
        + [f"  {instruction}({i * ntl + j}, {4 + i}, {6 + j});" for i in range(mt) for j in range(ntl)]
        + ["}"]
        + [f"_tile_stored({i * ntl + j}, &acc[{TILE_ROWS * i}][{16 * j}], {ntl * 64});"
           for i in range(mt) for j in range(ntl)]
    )  # fmt: skip


@dataclass(frozen=True)
class VectorDot:
    """The AVX-512 form of a tile product (where Linux refuses tile data): the accumulator vector and
    its zero, the A bytes' C type, a B row's vector type and the cast of its load, the step adding
    ``{b}`` times the broadcast A dword ``{a}`` to accumulator ``{c}``, and the store of ``{c}`` at
    ``{at}``."""

    acc: str
    zero: str
    a_type: str
    b_type: str
    b_cast: str
    step: str
    store: str


INT8_DOT = VectorDot(
    "__m512i", "_mm512_setzero_si512()", "int8_t", "__m512i", "",
    step="{c} = _mm512_dpbusd_epi32({c}, b, {a});", store="_mm512_store_si512((void*){at}, {c});",
)  # fmt: skip


def vector_tile_block(
    dot: VectorDot,
    mt: int,
    ntl: int,
    kb: int,
    b_offset: str,
    b_stride: int | str,
    indent: str,
    kstep: int = TILE_K,
) -> str:
    """:func:`amx_tile_block`'s products with ``dot`` instead of tiles: per channel block ``i`` and
    pixel block ``j``, 16 accumulators (one per A row: a channel) of 16 lanes (the B rows' pixels),
    each B row at ``xb<j> + <b_offset of kt>`` (rows ``b_stride`` bytes apart) times the channel's
    broadcast dword; then stored to ``acc``. ``kstep``: the bytes of an A row (K per tile product),
    ``kstep / 4`` B rows. Each block opens a line; lines start with ``indent``."""
    lanes = [f"c{r}" for r in range(TILE_ROWS)]
    steps = " ".join(
        dot.step.format(c=c, a=f"_mm512_set1_epi32(ak[{kstep // 4 * r}])") for r, c in enumerate(lanes)
    )
    b_row = f"{dot.b_cast}_mm512_loadu_si512((const void*)(bt + (long)q * {b_stride}))"
    blocks = []
    for j in range(ntl):
        stores = " ".join(
            dot.store.format(at=f"&acc[{TILE_ROWS} * i + {r}][{16 * j}]", c=c) for r, c in enumerate(lanes)
        )
        lines = [
            f"for (int i = 0; i < {mt}; ++i) {{",
            "  " + " ".join(f"{dot.acc} {c} = {dot.zero};" for c in lanes),
            f"  const {dot.a_type}* a = wa + (long)i * {kb * TILE_ROWS * kstep};",
            f"  for (int kt = 0; kt < {kb}; ++kt) {{",
            f"    const uint8_t* bt = xb{j} + {b_offset};",
            f"    const {dot.a_type}* at = a + (long)kt * {TILE_ROWS * kstep};",
            f"    for (int q = 0; q < {kstep // 4}; ++q) {{",
            f"      const {dot.b_type} b = {b_row};",
            "      const int32_t* ak = (const int32_t*)(at + q * 4);",
            f"      {steps}",
            "    }",
            "  }",
            f"  {stores}",
            "}",
        ]
        blocks.append("".join(f"\n{indent}{line}" for line in lines))
    return "\n".join(blocks)


def _wide_row(p: dict[str, Any]) -> int:
    """Bytes between two k-quads of a pointwise item's packed input (a B tile's row stride): the
    pixels padded to whole items (a multiple of 256 bytes) and one cache line more, so that a tile's
    16 rows fall in 16 L1 sets, not 4 (14x14: 1024-byte rows were 10% slower than 1088)."""
    return p["ppad"] * 4 + 64


def _ceil(a: int, b: int) -> int:
    return -(-a // b) * b


class Conv2dQ8Amx(Template):
    """Dense and grouped int8 NCHW convolution on AMX-INT8 tiles, requantized in the work item's
    epilogue; the same integers by VNNI where the process has no tile data.

    Three ways to form the B tiles (``mode``, chosen by ``_mode``). ``im2col``, the VNNI kernel's
    ``[K/4][P][4]`` matrix. ``rows``, for few channels (a stem's 7x7 stride-2 convolution on 3):
    the input rows packed once with the columns already expanded by the column taps,
    ``[R][CQ][OW][4]`` with a quad holding four (channel, filter column) pairs, so that an output
    row's K is ``FH * CQ`` consecutive quads (B tiles at the quad stride, 16 columns of one output
    row), a fraction ``sh / fh`` of the im2col's packing. ``direct``, any stride: the input is
    packed once into ``x86_int8_gemm``'s phase planes, ``[Cp/4][phase][Hq][Wq][4]`` (channel quads
    interleaved, ``x + 128``, channels padded to 64; a stride ``s`` splits the padded input into its ``s x s``
    phases, which makes every tap a stride-1 shift), and a B tile for one filter tap and 64 channels
    is read straight from it: 16 quads at the quad stride, 16 consecutive pixels ``q = oy * Wq + ox``
    of the tap's phase shifted by the tap. No im2col: the packing is the size of the input. K runs
    tap-major (``k = tap * Cp + c``); a pixel block is 16 pixels of that one long run over the rows,
    whose ``Wq - OW`` columns past each row are computed and dropped by compressing the real lanes
    (consecutive in the output) before the epilogue: a 7-pixel-wide 3x3 layer computes 9 columns
    per row, not 16."""
    examples = (
        E.conv2d_q8((1, 64, 9, 11), 80, 3, pad=1, act="relu"),
        E.conv2d_q8((2, 64, 11, 9), 64, 3, stride=2, pad=1),
        E.conv2d_q8((1, 128, 7, 7), 96, 3, pad=1, groups=2),
    )

    family = "conv2d_q8_amx"
    isa = ISA
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 97  # ahead of the VNNI conv2d_q8_x86 (95) and its depthwise (96, which this declines)

    def match(self, op: Operation) -> Lowered | None:
        got = _dense_conv_q8(op)  # a depthwise convolution is conv2d_dw_q8_x86's
        if got is None:
            return None
        p, operands, wv = got
        g = p["groups"]
        icg, ocg, taps = p["ic"] // g, p["oc"] // g, p["fh"] * p["fw"]
        kk = icg * taps
        if taps == 1 and vnni_pointwise_wins(p):
            return None  # conv2d_q8_x86
        mode = self._mode(p)
        if mode == "direct":
            kp = taps * _ceil(icg, TILE_K)
        elif mode == "rows":
            kp = _ceil(p["fh"] * self._row_quads(p) * 4, TILE_K)
        else:
            kp = _ceil(kk, k_step(kk))
        if kp * 255 * 128 >= 2**30:
            return None  # the unsigned-offset accumulator could leave int32
        biases = _requant_operands(p, operands, wv, -128 * wv.reshape(p["oc"], -1).sum(axis=1))
        if biases is None:
            return None
        # a pointwise convolution's work item is 64 pixels (see _wide_store)
        shape = tuple(p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        wide = mode == "im2col" and shape == (1, 1, 1, 1, 0, 0) and p["out"] == "q8"
        mt = 2 if ocg > TILE_ROWS else 1  # accumulator tiles along channels / pixels per work item
        geo: dict[str, Any] = {}
        if mode == "direct":
            # the phase planes of x86_int8_gemm: output pixel q = oy * wq + ox, one long run over
            # the rows (the wq - ow columns past each row are computed and dropped)
            geo = _geometry(p)
            pixels = p["oh"] * geo["wq"]
            blocks = -(-pixels // 16)
        elif mode == "rows":  # 16 columns of one output row a block
            pixels = p["oh"] * p["ow"]
            blocks = p["oh"] * -(-p["ow"] // 16)
        else:
            pixels = p["oh"] * p["ow"]
            blocks = -(-pixels // 16)
        ntile = WIDE_TILES if wide else 2 if blocks > 1 else 1
        ppad = _ceil(pixels, 16 * ntile)
        kstep = k_step(kk) if mode == "im2col" else TILE_K  # bytes of K per tile product
        p.update(mode=mode, k=kk, kp=kp, kstep=kstep, pixels=pixels, mt=mt, ntile=ntile, wide=wide)
        p.update(ocp=_ceil(ocg, TILE_ROWS * mt), blocks=blocks, ppad=ppad)
        if mode == "direct":
            # a plane holds every dword a B tile reads: the last block plus the farthest tap
            reach = (p["fh"] - 1) * p["dh"] // p["sh"] * geo["wq"] + (p["fw"] - 1) * p["dw"] // p["sw"]
            p.update(geo, cp=_ceil(icg, TILE_K), plane=_ceil(ppad + reach, 16))
        elif mode == "rows":
            p.update(cq=self._row_quads(p), rows=(p["oh"] - 1) * p["sh"] + p["fh"])
        return Lowered(p, [operands[0], operands[1], *biases])

    @staticmethod
    def _row_quads(p: dict[str, Any]) -> int:
        """Quads of (channel, filter column) pairs in one row of the ``rows`` mode's input."""
        return -(-(p["ic"] // p["groups"]) * p["fw"] // 4)

    def _mode(self, p: dict[str, Any]) -> str:
        """``im2col`` for unpadded 1x1 stride-1 convolutions (their im2col is the input, quads
        interleaved, in one pass per channel quad: faster to pack than the planes); else ``direct``
        for 32 or more channels per group; for fewer, ``rows`` where its padded products are within
        an eighth of the im2col's (the packing is then a fraction ``sh / fh`` of the im2col's), else
        ``im2col``."""
        icg, oh, ow, fh = p["ic"] // p["groups"], p["oh"], p["ow"], p["fh"]
        if (fh, p["fw"], p["sh"], p["sw"], p["ph"], p["pw"]) == (1, 1, 1, 1, 0, 0):
            return "im2col"
        if icg >= 32:
            return "direct"
        if p["dh"] == 1 and fh > p["sh"]:
            rows_cost = _ceil(fh * self._row_quads(p) * 4, TILE_K) * oh * _ceil(ow, 16)
            im2col_cost = _ceil(icg * fh * p["fw"], TILE_K) * _ceil(oh * ow, 16)
            if 8 * rows_cost <= 9 * im2col_cost:
                return "rows"
        return "im2col"

    def symbol(self, p: dict[str, Any]) -> str:
        return "amx_" + Conv2dQ8.symbol(Conv2dQ8(), p) + _affine_tag(p)

    def workspace(self, p: dict[str, Any]) -> int:
        if p.get("wide"):  # + 64: the planes start on a cache line
            return p["kp"] // 4 * _wide_row(p) + 64
        if p["mode"] == "direct":  # + 64: the planes start on a cache line
            return p["cp"] * len(p["row_phases"]) * len(p["col_phases"]) * p["plane"] + 64
        if p["mode"] == "rows":  # + 16 quads: the last K tile's zero-filter rows; + 16: the last block
            return ((p["rows"] * p["cq"] + TILE_ROWS) * p["ow"] + 16) * 4
        return p["kp"] * p["ppad"]

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        g, ocp, kp = p["groups"], p["ocp"], p["kp"]
        ocg, icg, taps = p["oc"] // g, p["ic"] // g, p["fh"] * p["fw"]
        w = np.asarray(array).view(np.int8).reshape(g, ocg, icg, taps)
        full = np.zeros((g, ocp, kp), np.int8)
        if p["mode"] == "direct":  # k = tap * Cp + c
            full.reshape(g, ocp, taps, p["cp"])[:, :ocg, :, :icg] = w.transpose(0, 1, 3, 2)
        elif p["mode"] == "rows":  # k = r * 4CQ + c * FW + s
            fh, fw, cq4 = p["fh"], p["fw"], 4 * p["cq"]
            rows = w.reshape(g, ocg, icg, fh, fw).transpose(0, 1, 3, 2, 4).reshape(g, ocg, fh, icg * fw)
            full[:, :ocg, : fh * cq4].reshape(g, ocg, fh, cq4)[..., : icg * fw] = rows
        else:  # k = (c * FH + r) * FW + s
            full[:, :ocg, : p["k"]] = w.reshape(g, ocg, -1)
        # [G][OC/16][K/KS][16][KS] (KS: the K step): one A tile is 16 * KS contiguous bytes
        ks = p["kstep"]
        tiles = full.reshape(g, ocp // TILE_ROWS, TILE_ROWS, kp // ks, ks).transpose(0, 1, 3, 2, 4)
        return np.ascontiguousarray(tiles), f"amx_{p['mode']}_a16x{ks}"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        g, icg, ocg = p["groups"], ic // p["groups"], oc // p["groups"]
        kp, mt, ntl, ocp = p["kp"], p["mt"], p["ntile"], p["ocp"]
        kstep = p["kstep"]  # bytes of K per tile product: an A tile's row, 4 x a B tile's rows
        kb = kp // kstep
        ocb, pb = ocp // (TILE_ROWS * mt), -(-p["blocks"] // ntl)
        bw, bh = 16 * ntl, TILE_ROWS * mt  # a work item's pixels and channels
        otype = _out_ctype(p["out"])
        plan = {"direct": self._direct_plan, "rows": self._rows_plan, "im2col": self._im2col_plan}
        stride, pack, inputs_c, outputs_c, koff, tables, compress = plan[p["mode"]](p, pb)
        # tiles: accumulators 0-3 (channel block i, pixel block jj of the pass at i * 2 + jj), A 4-5,
        # B 6-7. A pointwise item's four pixel blocks take two passes of two. The previous work
        # item's epilogue runs in slices between this one's tile products, so that the vector units
        # requantize while the tile unit multiplies
        passes = [[0, 1], [2, 3]] if p.get("wide") else [list(range(ntl))]
        slices = len(passes) * kb
        amx_lines: list[str] = []
        # the last item's second pass where it holds no pixel is skipped, but not the previous item's
        # epilogue slices that run in it: in pack order the pass's blocks (2, 3) hold the pixels from 8
        # of each 16, so it is empty where the item has at most 8 (14x14: 196 = 3 * 64 + 4)
        skip_empty_pass = 0 < p["pixels"] % (16 * ntl) <= 8 and len(passes) == 2
        for h, blocks in enumerate(passes):
            tiles = [(i, jj, j) for i in range(mt) for jj, j in enumerate(blocks)]  # (A, B, pixel block)
            nb = len(blocks)
            if h == 1 and skip_empty_pass:
                amx_lines += [
                    f"if (t % {pb} == {pb - 1}) {{",
                    f"  if (t > t0) {sym}_store(accs[(t - 1) & 1], t - 1, {bh // 2}, {bh}, nn, g, y, bias,"
                    " fbias, afc);",
                    # defined zeros where the tiles would have stored (the epilogue reads, then masks them)
                    f"  for (int r = 0; r < {bh}; ++r) memset(&acc[r][{16 * blocks[0]}], 0, {16 * 4 * nb});",
                    "} else {",
                ]
            amx_lines += [f"_tile_zero({i * nb + jj});" for i, jj, _ in tiles]
            amx_lines += [f"for (int kt = 0; kt < {kb}; ++kt) {{", f"  const long ko = {koff};"]
            amx_lines += [f"  _tile_loadd({4 + i}, wa + ({i}L * {kb} + kt) * {TILE_ROWS * kstep}, {kstep});"
                          for i in range(mt)]  # fmt: skip
            amx_lines += [f"  _tile_loadd({6 + jj}, xb{j} + ko, {stride});" for jj, j in enumerate(blocks)]
            amx_lines += [f"  _tile_dpbsud({i * nb + jj}, {4 + i}, {6 + jj});" for i, jj, _ in tiles]
            slice_at = f"({h * kb} + kt)"
            amx_lines += [
                f"  if (t > t0) {sym}_store(accs[(t - 1) & 1], t - 1, {slice_at} * {bh} / {slices},"
                f" ({slice_at} + 1) * {bh} / {slices}, nn, g, y, bias, fbias, afc);",
                "}",
            ]
            amx_lines += [f"_tile_stored({i * nb + jj}, &acc[{TILE_ROWS * i}][{16 * j}], {bw * 4});"
                          for i, jj, j in tiles]  # fmt: skip
            if h == 1 and skip_empty_pass:
                amx_lines.append("}")
        amx = "\n              ".join(amx_lines)
        vnni_blocks = vector_tile_block(INT8_DOT, mt, ntl, kb, koff, stride, " " * 14, kstep)
        has_fbias = _has_fbias(p)
        stores = " ".join(
            f"{{ __m512i v = _mm512_add_epi32(_mm512_load_si512((const void*)&acc[r][{16 * j}]), bv); "
            + (f"v = _mm512_maskz_compress_epi32(m{j}, v); " if compress else "")
            + f"{_epilogue(p, 'v', 'fb', f'yo + out{j}', f'n{j}')} }}"
            for j in range(ntl)
        )
        work = n * oc * oh * ow * p["k"]
        # a row of zero channels: the padding of the last channel quad (the wide mode packs NULL rows)
        pointwise = p["mode"] == "im2col" and (fh, fw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0)
        pointwise = pointwise and not p.get("wide")
        if p.get("wide"):
            store_fn = self._wide_store(sym, p, pb)
        else:
            store_fn = f"""
/* requantize and store rows [r0, r1) of work item t's accumulator block */
static inline __attribute__((always_inline)) void {sym}_store(const int32_t (*acc)[{bw}], int t, int r0,
    int r1, int nn, int g, {otype}* y, const int32_t* bias, const float* fbias, const float* afc) {{
  {tables}{_island_lut_decls(p)}
  const int o0 = t / {pb} * {bh};
  {outputs_c}
  (void)fbias; (void)afc;
  for (int r = r0; r < r1 && o0 + r < {ocg}; ++r) {{
    const int o = g * {ocg} + o0 + r;
    {_channel_vectors(p, "o")}
    const float fb = {"fbias[o]" if has_fbias else "0.f"}; (void)fb;
    {otype}* yo = y + ((long)nn * {oc} + o) * {oh * ow};
    {stores}
  }}
}}"""
        return exact(f"""{store_fn}
static void {sym}({_kernel_args(p)}) {{
  const int8_t* x = (const int8_t*)x_;
  const int8_t* wpk = (const int8_t*)w_;
  {_bias_decls(p)}
  {"" if has_fbias else "const float* fbias = NULL;"}{"" if p.get("affine") else " const float* afc = NULL;"}
  {otype}* y = ({otype}*)y_;
  uint8_t* xp = (uint8_t*)ws;
  uint8_t* planes = (uint8_t*)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  (void)planes;
  static const int8_t zero[{p["pixels"] if pointwise else 1}];
  (void)zero;
  const int use_amx = xm_amx_ready();
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  {{
    if (use_amx) xm_amx_configure_k({kstep});
    for (int nn = 0; nn < {n}; ++nn)
      for (int g = 0; g < {g}; ++g) {{
        const int8_t* xg = x + ((long)nn * {ic} + (long)g * {icg}) * {ih * iw};
        (void)xg;{pack}
        /* one chunk of consecutive work items a thread, software-pipelined: item t's products,
           then item t - 1's epilogue (two accumulator blocks) */
        #pragma omp for schedule(static)
        for (int chunk = 0; chunk < nt; ++chunk) {{
          const int t0 = (int)({pb * ocb}L * chunk / nt), t1 = (int)({pb * ocb}L * (chunk + 1) / nt);
          int32_t accs[2][{bh}][{bw}] __attribute__((aligned(64)));
          for (int t = t0; t < t1; ++t) {{
            // channel blocks outer: a block's filters stay in cache
            const int o0 = t / {pb} * {bh};
            {inputs_c}
            const int8_t* wa = wpk + ((long)g * {ocp // TILE_ROWS} + o0 / {TILE_ROWS}) * {kp * TILE_ROWS};
            int32_t (*acc)[{bw}] = accs[t & 1];
            if (use_amx) {{
              {amx}
            }} else {{{vnni_blocks}
              if (t > t0) {sym}_store(accs[(t - 1) & 1], t - 1, 0, {bh}, nn, g, y, bias, fbias, afc);
            }}
          }}
          if (t1 > t0) {sym}_store(accs[(t1 - 1) & 1], t1 - 1, 0, {bh}, nn, g, y, bias, fbias, afc);
        }}
      }}
    if (use_amx) _tile_release();
  }}
}}
""")

    @staticmethod
    def _wide_store(sym: str, p: dict[str, Any], pb: int) -> str:
        """The pointwise work item's epilogue (16 or 32 channels x 64 pixels, ``p["wide"]``): accumulator
        row ``r`` is one channel's 64 pixels, four tiles' rows, in ``xm_q8_quad64``'s pack order
        (the order ``_pack_im2col`` packs them in), so ``x86_int8_gemm``'s pointwise epilogue
        requantizes the four vectors, narrows them together back into pixel order, looks a table
        island up once and stores the channel's 64 bytes at once."""
        ocg, oc, pixels = p["oc"] // p["groups"], p["oc"], p["pixels"]
        loads = " ".join(
            f"const __m512i c0_{v} = _mm512_load_si512((const void*)(acc[r] + {16 * v}));"
            for v in range(WIDE_TILES)
        )
        epilogue = Conv2dQ8Vnni._pointwise_epilogue(Conv2dQ8Vnni(), p, 0)
        return f"""
/* requantize and store rows [r0, r1) of work item t's accumulator block (64 pixels a channel) */
static inline __attribute__((always_inline)) void {sym}_store(const int32_t (*acc)[{16 * WIDE_TILES}],
    int t, int r0, int r1, int nn, int g, int8_t* y, const int32_t* bias, const float* fbias,
    const float* afc) {{
  {_island_lut_decls(p)}
  const int o0 = t / {pb} * {TILE_ROWS * p["mt"]};
  const long p0 = (long)(t % {pb}) * {16 * WIDE_TILES};
  const __mmask64 out_mask = xm_q8_lanes64({pixels} - p0);
  (void)fbias; (void)afc;
  for (int r = r0; r < r1 && o0 + r < {ocg}; ++r) {{
    const int o = g * {ocg} + o0 + r;
    {_channel_vectors(p, "o")}
    const float fb = {"fbias[o]" if _has_fbias(p) else "0.f"}; (void)fb;
    int8_t* yo = y + ((long)nn * {oc} + o) * {pixels};
    {loads}
    {epilogue}
  }}
}}"""

    def _direct_plan(self, p: dict[str, Any], pb: int) -> tuple[int, str, str, str, str, str, bool]:
        """The direct mode's B-tile row stride, packing, per-item input and output code (of ``t``),
        K-tile offset, tables and whether lanes are compressed (see the class docstring)."""
        fh, fw, sh, sw, dh, dw, ow = (p[k] for k in ("fh", "fw", "sh", "sw", "dh", "dw", "ow"))
        rows, cols, wq, plane, ntl = p["row_phases"], p["col_phases"], p["wq"], p["plane"], p["ntile"]
        nph, cbn = len(rows) * len(cols), p["cp"] // TILE_K
        stride = nph * plane * 4  # bytes between two channel quads: a B tile's row stride
        pack = "\n" + Conv2dQ8Vnni._pack_code(Conv2dQ8Vnni(), {**p, "c4": p["cp"] // 4})
        # each tap's dwords: its phase's plane, shifted by the tap's whole strides
        tap_offsets = ", ".join(
            str(((rows.index(r * dh % sh) * len(cols) + cols.index(s * dw % sw)) * plane
                 + r * dh // sh * wq + s * dw // sw) * 4)
            for r in range(fh)
            for s in range(fw)
        )  # fmt: skip
        inputs_c = f"static const long tap_off[{fh * fw}] = {{{tap_offsets}}};" + "".join(
            f" const uint8_t* xb{j} = planes + (long)(t % {pb} * {ntl} + {j}) * 64;" for j in range(ntl)
        )
        # lane l of a block at q holds a real pixel iff (q + l) % wq < ow; those pixels are
        # consecutive in the output, from q / wq * ow + min(q % wq, ow)
        compress = wq != ow
        real = [sum(1 << lane for lane in range(16) if (q + lane) % wq < ow) for q in range(wq)]
        tables = f"static const __mmask16 real[{wq}] = {{{', '.join(map(str, real))}}};" if compress else ""
        real_c = f" & real[q{{j}} % {wq}]" if compress else ""
        outputs_c = " ".join(
            f"const long q{j} = (long)(t % {pb} * {ntl} + {j}) * 16;"
            f" const __mmask16 m{j} = xm_q8_lanes({p['pixels']} - q{j}){real_c.format(j=j)};"
            f" const long out{j} = q{j} / {wq} * {ow} + (q{j} % {wq} < {ow} ? q{j} % {wq} : {ow});"
            f" const __mmask16 n{j} = xm_q8_lanes(__builtin_popcount(m{j}));"
            for j in range(ntl)
        )
        koff = f"(tap_off[kt / {cbn}] + (long)(kt % {cbn}) * {TILE_ROWS * stride})"
        return stride, pack, inputs_c, outputs_c, koff, tables, compress

    def _rows_plan(self, p: dict[str, Any], pb: int) -> tuple[int, str, str, str, str, str, bool]:
        """The rows mode's (see :meth:`_direct_plan`): a block is 16 columns of one output row, its K
        the quads from input row ``oy * sh`` on; a block past the last (an odd count) reads block 0
        and stores nothing."""
        ow, sh, cq, ntl, blocks = p["ow"], p["sh"], p["cq"], p["ntile"], p["blocks"]
        line = ow * 4  # bytes between two quads: a B tile's row stride
        xblocks = -(-ow // 16)

        def block(j: int) -> str:
            b = f"t % {pb} * {ntl} + {j}"
            return (
                f"const int b{j} = {b} < {blocks} ? {b} : 0;"
                f" const int oy{j} = b{j} / {xblocks}, ox{j} = b{j} % {xblocks} * 16;"
            )

        inputs_c = " ".join(
            f"{block(j)} const uint8_t* xb{j} = xp + ((long)oy{j} * {sh * cq * ow} + ox{j}) * 4;"
            for j in range(ntl)
        )
        outputs_c = " ".join(
            f"{block(j)} const long out{j} = (long)oy{j} * {ow} + ox{j};"
            f" const __mmask16 m{j} = t % {pb} * {ntl} + {j} < {blocks} ? xm_q8_lanes({ow} - ox{j}) : 0,"
            f" n{j} = m{j};"
            for j in range(ntl)
        )
        return line, self._pack_rows(p), inputs_c, outputs_c, f"(long)kt * {TILE_ROWS * line}", "", False

    def _im2col_plan(self, p: dict[str, Any], pb: int) -> tuple[int, str, str, str, str, str, bool]:
        """The im2col mode's (see :meth:`_direct_plan`): a block is 16 pixels of the flat output."""
        row, ntl = _wide_row(p) if p.get("wide") else p["ppad"] * 4, p["ntile"]
        bw = 16 * ntl
        base = "planes" if p.get("wide") else "xp"
        inputs_c = " ".join(
            f"const uint8_t* xb{j} = {base} + (long)(t % {pb} * {bw} + {16 * j}) * 4;" for j in range(ntl)
        )
        outputs_c = " ".join(
            f"const long out{j} = t % {pb} * {bw} + {16 * j};"
            f" const __mmask16 m{j} = xm_q8_lanes({p['pixels']} - out{j}), n{j} = m{j};"
            for j in range(ntl)
        )
        pack = self._pack_im2col(p, p["kp"] // 4, row)
        # row: bytes between two k-quads of the im2col matrix, a B tile's row stride
        return row, pack, inputs_c, outputs_c, f"(long)kt * {p['kstep'] // 4 * row}", "", False

    @staticmethod
    def _pack_rows(p: dict[str, Any]) -> str:
        """The ``rows`` mode's input: ``[R][CQ][OW][4]`` bytes ``x + 128`` for the R padded input rows
        the output reads, a quad holding four (channel, filter column) pairs, each already shifted
        by its column tap and strided (an im2col along the columns only): the K of an output row is
        then the ``FH * CQ`` consecutive quads from its first input row on. The padding (rows,
        columns, pairs past ``ICg * FW``, 16 quads past the end for the last K tile) is 128."""
        ih, iw, ow, fw, sw, ph, pw, dw = (p[k] for k in ("ih", "iw", "ow", "fw", "sw", "ph", "pw", "dw"))
        cq, rows, pairs = p["cq"], p["rows"], p["ic"] // p["groups"] * p["fw"]
        return f"""
        #pragma omp for schedule(static)
        for (int item = 0; item < {rows * cq}; ++item) {{
          const int iy = item / {cq} - {ph}, j = item % {cq};
          int8_t rows[4][{ow}];
          for (int e = 0; e < 4; ++e) {{
            const int k = 4 * j + e, c = k / {fw}, s = k % {fw};
            if (k >= {pairs} || (unsigned)iy >= {ih}u) memset(rows[e], 0, {ow});
            else xm_q8_row(rows[e], xg + ((long)c * {ih} + iy) * {iw}, {ow}, s * {dw} - {pw}, {sw}, {iw});
          }}
          uint8_t* dst = xp + (long)item * {ow * 4};
          xm_q8_quad(dst, rows[0], rows[1], rows[2], rows[3], {ow});
          if (item == {rows * cq - 1}) memset(dst + {ow * 4}, 0x80, {(TILE_ROWS * ow + 16) * 4});
        }}"""

    @staticmethod
    def _pack_im2col(p: dict[str, Any], k4p: int, row: int) -> str:
        """The VNNI kernel's im2col (``[K/4][P][4]`` bytes ``x + 128``), over K padded to whole B tiles:
        the padding quads (zero filters) and pixels are 128, a zero activation."""
        ih, iw, oh, ow = p["ih"], p["iw"], p["oh"], p["ow"]
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        kk, pixels, ppad = p["k"], p["pixels"], p["ppad"]
        if p.get("wide"):  # 64 pixels of a channel quad at a time, in pack order (see _wide_store)
            pb = ppad // (16 * WIDE_TILES)
            return f"""
        #pragma omp for schedule(static)
        for (int item = 0; item < {k4p * pb}; ++item) {{
          const int kq = item / {pb}, b = item % {pb};
          const int8_t* r[4];
          for (int j = 0; j < 4; ++j)
            r[j] = 4 * kq + j < {kk} ? xg + (long)(4 * kq + j) * {pixels} + b * {16 * WIDE_TILES} : NULL;
          xm_q8_quad64(planes + (long)kq * {row} + b * {64 * WIDE_TILES}, r[0], r[1], r[2], r[3],
                       xm_q8_lanes64({pixels} - b * {16 * WIDE_TILES}));
        }}"""
        if (fh, fw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0):
            return f"""
        #pragma omp for schedule(static)
        for (int kq = 0; kq < {k4p}; ++kq) {{
          const int8_t* r[4];
          for (int j = 0; j < 4; ++j) r[j] = 4 * kq + j < {kk} ? xg + (long)(4 * kq + j) * {pixels} : zero;
          xm_q8_quad(xp + (long)kq * {row}, r[0], r[1], r[2], r[3], {pixels});
          memset(xp + (long)kq * {row} + {pixels * 4}, 0x80, {(ppad - pixels) * 4});
        }}"""
        return f"""
        #pragma omp for schedule(static)
        for (int item = 0; item < {k4p * oh}; ++item) {{
          const int kq = item / {oh}, oy = item % {oh};
          int8_t rows[4][{ow}];
          for (int j = 0; j < 4; ++j) {{
            const int k = 4 * kq + j;
            const int c = k / {fh * fw}, r = k / {fw} % {fh}, s = k % {fw};
            const int iy = oy * {sh} - {ph} + r * {dh};
            if (k >= {kk} || (unsigned)iy >= {ih}u) memset(rows[j], 0, {ow});
            else xm_q8_row(rows[j], xg + ((long)c * {ih} + iy) * {iw}, {ow}, s * {dw} - {pw}, {sw}, {iw});
          }}
          uint8_t* dst = xp + (long)kq * {row} + (long)oy * {ow * 4};
          xm_q8_quad(dst, rows[0], rows[1], rows[2], rows[3], {ow});
          if (oy == {oh - 1}) memset(dst + {ow * 4}, 0x80, {(ppad - pixels) * 4});
        }}"""

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT + GEMM_SUPPORT + AMX_SUPPORT


KERNEL_UNITS = (Conv2dQ8Amx(),)

__all__ = ["ISA", "KERNEL_UNITS"]
