"""The AVX512-VNNI int8 convolution GEMM (family ``conv2d_q8_x86``: dense, 1x1 and grouped NCHW
convolutions), register-blocked, without an im2col.

``vpdpbusd`` multiplies four *unsigned* bytes by four signed bytes per int32 lane, so the activations
are packed once per call as ``x + 128`` (``x ^ 0x80``; a padding zero becomes 128) into *planes* of
4-channel dwords: ``[IC/4][phase][Hq][Wq][4]`` bytes. A stride ``(sh, sw)`` splits the padded input
into ``sh x sw`` phases (rows ``sh*i + a``, columns ``sw*j + b``; only the phases some tap reads are
packed), which turns every convolution into a stride-1 one over the planes: output pixel
``q = oy*Wq + ox`` reads, for tap ``(r, s)``, the dword at ``q + (r*dh // sh)*Wq + (s*dw // sw)`` of
phase ``((r*dh) % sh, (s*dw) % sw)``. So a vector of 16 consecutive ``q`` is one unaligned 64-byte load
per tap and channel quadruple (no im2col: the packed input is the size of the input). The columns
``ox >= OW`` of that pixel space are computed and never stored (``Wq - OW`` of every ``Wq``: 2 of 58 for
a 3x3 convolution on 56 columns, none for a 1x1 one).

Filters are packed at compile time ``[G][OC/MR][IC/4][FH*FW][MR][4]`` (the dword a register tile row
broadcasts), and each output channel's offset correction ``-128 * sum(w)`` joins its int32 bias
operand. A register tile is MR output channels x NV vectors of 16 pixels (int32 accumulators, all taps
of a channel quadruple unrolled); MR and NV are chosen per convolution by a cycle estimate (padded
products, loads, the epilogue). The epilogue is ``x86_int8._epilogue_value``: requant.py's
definition on 16 lanes, bit-exact with the reference.

A 1x1, stride-1 convolution of few input channels (MobileNetV2's expansions and projections) has
so few products per output vector that the packing pass, the tile's call and its int32 round trip
through the stack cost more than they do; its *pointwise mode* (AVX512-VNNI only, up to
``4 * POINTWISE_MAX_C4`` input channels) packs blocks of 64 pixels of all input channels on each
thread's stack in the order the narrowing packs restore, inlines an MR x 4 vector tile accumulating
over every channel quadruple in registers, and narrows each output channel's 64 results at once from
registers into one 64-byte store (the epilogue's arithmetic unchanged:
``Conv2dQ8Gemm._render_pointwise``). Which of these the AMX kernels take instead is
``x86_amx.vnni_pointwise_wins``'s measured rule.

Where output channels as the vector lanes cost less (the deep layers' small planes, whose dropped
columns and padded last vector are much of the pixel-lane work; a first layer of few input channels),
a convolution takes :mod:`backends.c.templates.x86.x86_int8_chgemm`'s *channel-lane mode* instead,
on the same planes (``mode = "channels"``; its rule: ``channel_mode``, ``channel_over_pointwise``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import Template
from backends.c.templates.portable.requant import REQUANT_C, exact
from backends.c.templates.portable.typed import Conv2dQ8
from backends.c.templates.x86.x86_int8 import (
    ISA,
    PARALLEL_WORK,
    SUPPORT,
    W16,
    _affine_tag,
    _bias_decls,
    _bias_operands,
    _channel_vectors,
    _dense_conv_q8,
    _epilogue_stmt,
    _has_fbias,
    _kernel_args,
    _out_ctype,
    _Relu6Island,
    _requant_operands,
    island_lut_index,
)
from backends.c.templates.x86.x86_int8_chgemm import (
    CHANNEL_SUPPORT,
    channel_mode,
    channel_over_pointwise,
    channel_plane,
    pack_channels,
    render_channels,
    window_geometry,
    window_offsets,
    window_pack_code,
    window_steps,
)
from dialects import tensor as T
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

GEMM_SUPPORT = r"""
#ifndef XM_X86_INT8_GEMM
#define XM_X86_INT8_GEMM
/* 16 bytes row[c0 + t*sw] for the t whose column lies in [0, iw), else 0 (strides 1 and 2 load
   under a mask: the lanes outside the row read nothing, and never fault) */
static inline __m128i xm_q8_gather16(const int8_t* row, int c0, int sw, int iw) {
  if (!row) return _mm_setzero_si128();
  const uintptr_t at = (uintptr_t)row + (uintptr_t)(intptr_t)c0;
  if (sw == 1) return _mm_maskz_loadu_epi8((__mmask16)xm_q8_span(c0, 16, iw), (const void*)at);
  if (sw == 2)
    return _mm256_cvtepi16_epi8(_mm256_maskz_loadu_epi8((__mmask32)xm_q8_span(c0, 31, iw), (const void*)at));
  int8_t v[16];
  for (int t = 0; t < 16; ++t) {
    const int c = c0 + t * sw;
    v[t] = (unsigned)c < (unsigned)iw ? row[c] : 0;
  }
  return _mm_loadu_si128((const __m128i*)v);
}
/* n <= 16 pixels of four channel rows as n dwords (channel bytes in order), each byte plus 128 */
static inline void xm_q8_quad16(uint8_t* dst, __m128i a, __m128i b, __m128i c, __m128i d, int n) {
  const __m128i flip = _mm_set1_epi8((char)0x80);
  const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
  const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
  __m512i v = _mm512_castsi128_si512(_mm_unpacklo_epi16(ab0, cd0));
  v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(ab0, cd0), 1);
  v = _mm512_inserti32x4(v, _mm_unpacklo_epi16(ab1, cd1), 2);
  v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(ab1, cd1), 3);
  v = _mm512_xor_si512(v, _mm512_broadcast_i32x4(flip));
  const __mmask64 m = n >= 16 ? ~(__mmask64)0 : (((__mmask64)1 << (4 * n)) - 1);
  _mm512_mask_storeu_epi8(dst, m, v);
}
/* the pixels [0, n) of a 64-lane vector (n may be <= 0 or > 64) */
static inline __mmask64 xm_q8_lanes64(long n) {
  return n >= 64 ? ~(__mmask64)0 : n <= 0 ? 0 : (((__mmask64)1 << n) - 1);
}
/* 64 pixels of four channel rows (a NULL row: a zero channel) as the 64 dwords of a 1x1 convolution's
   plane block (channel bytes in order, each byte plus 128) in *pack order*: vector j holds, in
   128-bit lane k, the pixels 16k + 4j .. 16k + 4j + 3, as the byte and word unpacks leave them. That
   is the order vpackssdw / vpacksswb of the four result vectors undo: their 64 bytes come out in
   pixel order, so neither the planes nor the results need a lane shuffle */
static inline void xm_q8_quad64(uint8_t* dst, const int8_t* a_, const int8_t* b_, const int8_t* c_,
                                const int8_t* d_, __mmask64 m) {
  const __m512i a = a_ ? _mm512_maskz_loadu_epi8(m, a_) : _mm512_setzero_si512();
  const __m512i b = b_ ? _mm512_maskz_loadu_epi8(m, b_) : _mm512_setzero_si512();
  const __m512i c = c_ ? _mm512_maskz_loadu_epi8(m, c_) : _mm512_setzero_si512();
  const __m512i d = d_ ? _mm512_maskz_loadu_epi8(m, d_) : _mm512_setzero_si512();
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const __m512i ab0 = _mm512_unpacklo_epi8(a, b), ab1 = _mm512_unpackhi_epi8(a, b);
  const __m512i cd0 = _mm512_unpacklo_epi8(c, d), cd1 = _mm512_unpackhi_epi8(c, d);
  _mm512_store_si512(dst, _mm512_xor_si512(_mm512_unpacklo_epi16(ab0, cd0), flip));
  _mm512_store_si512(dst + 64, _mm512_xor_si512(_mm512_unpackhi_epi16(ab0, cd0), flip));
  _mm512_store_si512(dst + 128, _mm512_xor_si512(_mm512_unpacklo_epi16(ab1, cd1), flip));
  _mm512_store_si512(dst + 192, _mm512_xor_si512(_mm512_unpackhi_epi16(ab1, cd1), flip));
}
/* four vectors of int32 results in pack order (see xm_q8_quad64) as 64 int8 in pixel order,
   saturated: vpackssdw and vpacksswb saturate as vpmovsdb does */
static inline __m512i xm_q8_narrow64(__m512i r0, __m512i r1, __m512i r2, __m512i r3) {
  return _mm512_packs_epi16(_mm512_packs_epi32(r0, r1), _mm512_packs_epi32(r2, r3));
}
/* 64 bytes whose 128-bit lane L holds dword L of four 16-byte parts in turn, back in the parts'
   order: dword 4k + j of the result is dword k of part j */
static inline __m512i xm_q8_dword_transpose64(__m512i z) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}
/* four vectors of int8 results (the low 16 bytes of each) in pack order as 64 bytes in pixel order */
static inline __m512i xm_q8_join64(__m128i q0, __m128i q1, __m128i q2, __m128i q3) {
  __m512i z = _mm512_inserti32x4(_mm512_castsi128_si512(q0), q1, 1);
  return xm_q8_dword_transpose64(_mm512_inserti32x4(_mm512_inserti32x4(z, q2, 2), q3, 3));
}
#endif
"""


def _phases(f: int, d: int, s: int) -> list[int]:
    """The phases (input index mod stride) the taps of one axis read."""
    return sorted({(t * d) % s for t in range(f)})


def _geometry(p: dict[str, Any]) -> dict[str, Any]:
    """The plane layout of a convolution (see the module docstring)."""
    fh, fw, sh, sw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "dh", "dw"))
    rows, cols = _phases(fh, dh, sh), _phases(fw, dw, sw)
    hq, wq = p["oh"] + (fh - 1) * dh // sh, p["ow"] + (fw - 1) * dw // sw
    c4 = -(-(p["ic"] // p["groups"]) // 4)
    return {"row_phases": rows, "col_phases": cols, "hq": hq, "wq": wq, "c4": c4}


class GemmIsa:
    """What the int8 GEMM generator (:class:`Conv2dQ8Gemm`) takes from an instruction set: the vector
    width, the register tile's cost model, how activations are encoded in the planes, the dot-product
    step of the micro-kernel and the store of a lane range. This one is AVX512-VNNI (``vpdpbusd``);
    x86_int8_avx2 has the AVX2 one."""

    prefix = "vnni"  # of the kernel symbols
    width = W16
    # the cost model of choose_tile: zmm registers (accumulators, the NV activation vectors and the
    # spare ones: a broadcast weight), the tile's bounds, dot-product steps issued per cycle (their
    # latency: a tile needs twice as many accumulators to issue two a cycle), the cycles of one
    # activation vector's load (a weight broadcast: half a cycle) and of one vector's epilogue
    vregs, spare_regs, max_nv, max_mr, max_accumulators = 32, 1, 6, 14, 28
    steps_per_cycle, load_cycles, step_latency, epilogue_cycles = 2, 1.0, 6, 8
    # activations in the planes: x + 128 (vpdpbusd's unsigned operand; a padding zero is 128)
    x_offset, plane_type, pad_byte = 128, "uint8_t", "0x80"
    x_range = (0, 255)
    accumulator_limit = 2**30  # |sum of products| below it: the bias correction still fits int32
    affine = True  # x86_int8_requant's epilogue (16 lanes) where it is exact
    gather = "xm_q8_gather16"
    kernels = ("",)  # the micro-kernels' name suffixes

    def pack_chunk(self, gathers: list[str], length: int) -> str:
        """Packing 16 pixels of a channel quadruple from the four rows' ``gathers``."""
        args = (",\n" + " " * 23).join(gathers)  # one a line, under the first
        return f"xm_q8_quad16(dst + 4 * c0, {args}, {length} - c0);"

    def pack_prologue(self) -> str:
        return ""

    def pack_epilogue(self, p: dict[str, Any]) -> str:
        """Statements after the parallel packing loop (in every thread)."""
        return ""

    def segment_arrays(self, nv: int, segments: int) -> str:
        """The per-vector store runs of a tile whose vectors cross output rows (besides ``seg_at``)."""
        return f"__mmask16 seg_mask[{nv}][{segments}]; int segs[{nv}];"

    def segment_record(self, ow: int) -> str:
        """Recording run ``k`` of vector ``v``: lanes ``[q - q0, q - q0 + len)``, output ``oy, ox``."""
        return ("seg_mask[v][k] = (__mmask16)(((1u << len) - 1) << (q - q0));\n"
                f"              seg_at[v][k] = (long)oy * {ow} + ox - (q - q0);")  # fmt: skip

    def put(self, p: dict[str, Any], v: int, store: str) -> str:
        """The store of result vector ``r`` (vector ``v`` of a tile row): its real pixels."""
        if p["wq"] == p["ow"]:
            return f"{store}(yo + p0 + {16 * v}, xm_q8_lanes({p['pixels']} - p0 - {16 * v}), r);"
        return (
            f"for (int k = 0; k < segs[{v}]; ++k) {store}((void*)((uintptr_t)yo + "
            f"(uintptr_t)(seg_at[{v}][k] * (long)sizeof({_out_ctype(p['out'])}))), seg_mask[{v}][k], r);"
        )

    def tile_constants(self, kernel: str) -> str:
        return ""

    def tile_loads(self, nv: int, kernel: str) -> str:
        """The NV activation vectors ``b{v}`` of a step (``bk``: the step's first pixel)."""
        return " ".join(
            f"const __m512i b{v} = _mm512_loadu_si512((const void*)(bk + {64 * v}));" for v in range(nv)
        )

    def tile_row(self, i: int, accumulators: list[str], kernel: str) -> str:
        """Tile row ``i``'s dot-product step: its broadcast weight dword ``ak[i]`` times each ``b{v}``."""
        steps = " ".join(f"XM_DPBUSD({c}, b{v}, a);" for v, c in enumerate(accumulators))
        return f"{{ const __m512i a = _mm512_set1_epi32(ak[{i}]); {steps} }}"

    def call_decls(self, p: dict[str, Any]) -> str:
        """Declarations of the kernel function beside its operand pointers."""
        return ""

    def tile_call(self, sym: str, planes: str, weights: str) -> str:
        """The call of the micro-kernel(s) on a tile's first ``planes`` dword and ``weights``."""
        return f"{sym}_tile({planes}, {weights}, acc);"


VNNI = GemmIsa()


def choose_tile(pixels: int, ocg: int, steps: int, isa: GemmIsa = VNNI) -> tuple[int, int]:
    """(NV, MR) of the register tile with the fewest estimated cycles: ``steps`` dot-product steps per
    accumulator (``isa.steps_per_cycle``, at least ``isa.step_latency`` cycles apart) and loads (NV
    activation vectors, MR weight broadcasts) per tile, plus the epilogue of each vector."""
    best: tuple[float, int, int] | None = None
    lanes = isa.width.lanes
    for nv in range(1, isa.max_nv + 1):
        for mr in range(1, isa.max_mr + 1):
            if nv * mr > isa.max_accumulators or nv * mr + nv + isa.spare_regs > isa.vregs:
                continue
            step = max(nv * mr / isa.steps_per_cycle, nv * isa.load_cycles + mr / 2, isa.step_latency)
            tiles = -(-pixels // (lanes * nv)) * -(-ocg // mr)
            cycles = tiles * (steps * step + isa.epilogue_cycles * nv * mr)
            if best is None or cycles < best[0]:
                best = (cycles, nv, mr)
    assert best is not None
    return best[1], best[2]


# the pointwise mode's largest channel quadruple count (K <= 256; its block of planes: 16 KiB, in L1).
# Kernel thread-CPU medians on AVX512-VNNI without AMX, general GEMM -> pointwise mode (ms): K 144 ->
# 24 at 56x56 0.0765 -> 0.0425; K 256 -> 64 at 56x56 0.238 -> 0.183; K 64 -> 384 at 14x14 0.0281 ->
# 0.0282; but K 576 -> 96 at 14x14 0.043 -> 0.059, K 1024 -> 256 at 14x14 0.179 -> 0.219
POINTWISE_MAX_C4 = 64
POINTWISE_NV = 4  # its tile's vectors of 16 pixels: one 64-byte store per output channel
POINTWISE_MAX_MR = 6  # its tile's output channels: 24 accumulators, 4 activation vectors, a weight
# ... where the channel quadruple loop is fully unrolled (K <= 32); in a rolled loop, beside the
# epilogue's constants, 24 accumulators spill (GCC: 30 stack moves per 24 vpdpbusd at K 2048, a
# kernel twice as slow); 16 accumulators do not
POINTWISE_UNROLLED_C4, POINTWISE_ROLLED_MR = 8, 4
ACC = "@ACC@"  # an accumulator's name in an epilogue rendered once for the four vectors of a tile row


def _pointwise(p: dict[str, Any], geo: dict[str, Any]) -> bool:
    """Whether a convolution can take the pointwise mode (see :meth:`Conv2dQ8Gemm._render_pointwise`):
    a 1x1, stride 1, unpadded, ungrouped one of at most ``4 * POINTWISE_MAX_C4`` input channels and an
    int8 result (on AMX targets, ``x86_amx.vnni_pointwise_wins`` leaves it only some of them)."""
    shape = tuple(p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "groups"))
    return shape == (1, 1, 1, 1, 0, 0, 1) and geo["c4"] <= POINTWISE_MAX_C4 and p["out"] == "q8"


def pointwise_rows(oc: int, max_mr: int = POINTWISE_MAX_MR) -> int:
    """The pointwise tile's output channels (MR, at most ``max_mr``) for ``oc`` of them: the fewest
    tile rows, counting each tile's fixed cost (zeroing, loop, weight pointer) as two, then the fewest
    padded channels (their products are computed and dropped)."""
    return min(range(1, max_mr + 1), key=lambda m: (-(-oc // m) * (m + 2), -(-oc // m) * m))


class Conv2dQ8Gemm(Template):
    """Dense and grouped int8 NCHW convolution: activations packed into 4-channel planes, a
    register-tiled GEMM of ``gemm``'s dot-product step, bias, RELU and requantization fused in the
    tile's epilogue."""
    examples = (
        E.conv2d_q8((1, 13, 9, 11), 19, 3, pad=1, act="relu"),
        E.conv2d_q8((1, 3, 23, 21), 10, 7, stride=2, pad=3),
        E.conv2d_q8((2, 22, 5, 7), 7, 1),
        E.conv2d_q8((1, 12, 6, 7), 9, 3, pad=1, groups=3, act="relu"),
        E.conv2d_q8((2, 6, 17, 15), 11, 3, stride=2, pad=2, dil=2),
        E.conv2d_q8((1, 5, 16, 19), 17, 5, stride=3, pad=2, out="f32"),
    )

    family = "conv2d_q8_x86"
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 95  # ahead of the portable conv2d_q8 (90), which stays the fallback
    gemm: GemmIsa
    pointwise_mode = False  # small-K 1x1 convolutions by _render_pointwise (AVX-512 only)
    channel_lanes = False  # x86_int8_chgemm's mode where it costs less (AVX512-VNNI only)

    def match(self, op: Operation) -> Lowered | None:
        got = _dense_conv_q8(op)  # a depthwise convolution is conv2d_dw_q8_x86's
        if got is None:
            return None
        p, operands, wv = got
        g, isa = p["groups"], self.gemm
        kk = (p["ic"] // g) * p["fh"] * p["fw"]
        if kk * max(-isa.x_range[0], isa.x_range[1]) * 128 >= isa.accumulator_limit:
            return None  # the accumulator could leave int32
        correction = -isa.x_offset * wv.reshape(p["oc"], -1).sum(axis=1)
        if isa.affine:
            biases = _requant_operands(p, operands, wv, correction, isa.x_range)
        else:
            biases = _bias_operands(p, operands, correction)
        if biases is None:
            return None
        geo = _geometry(p)
        pointwise = self.pointwise_mode and _pointwise(p, geo)
        over = pointwise and self.channel_lanes and channel_over_pointwise(p, geo)
        if pointwise and not over:
            rolled = geo["c4"] > POINTWISE_UNROLLED_C4
            mr = pointwise_rows(p["oc"], POINTWISE_ROLLED_MR if rolled else POINTWISE_MAX_MR)
            p.update(geo, mode="pointwise", nv=POINTWISE_NV, mr=mr, pixels=p["oh"] * p["ow"])
            return Lowered(p, [operands[0], operands[1], *biases])
        pixels = p["oh"] * geo["wq"]
        nv, mr = choose_tile(pixels, p["oc"] // g, geo["c4"] * p["fh"] * p["fw"], isa)
        lanes = isa.width.lanes
        chosen = channel_mode(p, geo, nv, mr, lanes, force=over) if self.channel_lanes else None
        if chosen is not None:
            cnv, cmr = chosen
            p.update(geo, mode="channels", nv=cnv, mr=cmr)
            p["plane"] = channel_plane(p, geo, cmr, lanes)
            if window_steps(p) is not None:
                p.update(window_geometry(p, cmr), window=1)
            return Lowered(p, [operands[0], operands[1], *biases])
        ppad = -(-pixels // (lanes * nv)) * lanes * nv
        # a plane holds every dword a tile may read: ppad + the farthest tap's offset, in vectors
        plane = -(-(ppad + (geo["hq"] - p["oh"]) * geo["wq"] + geo["wq"]) // lanes) * lanes
        p.update(geo, nv=nv, mr=mr, pixels=pixels, ppad=ppad, plane=plane)
        return Lowered(p, [operands[0], operands[1], *biases])

    def symbol(self, p: dict[str, Any]) -> str:
        mode = "ch" if p.get("mode") == "channels" else ""
        return f"{self.gemm.prefix}{mode}_" + Conv2dQ8.symbol(Conv2dQ8(), p) + _affine_tag(p)

    def workspace(self, p: dict[str, Any]) -> int:
        if p.get("mode") == "pointwise":
            return 0  # a block's planes live on the thread's stack
        if p.get("window"):
            return p["ic"] * p["hp"] * p["wp"] + 64
        phases = len(p["row_phases"]) * len(p["col_phases"])
        return p["c4"] * phases * p["plane"] * 4 + 64  # + 64: the planes start on a cache line

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        if p.get("mode") == "channels":
            return pack_channels(array, p), f"vnni_channels_nv{p['nv']}"
        g, mr, c4 = p["groups"], p["mr"], p["c4"]
        ocg, icg, taps = p["oc"] // g, p["ic"] // g, p["fh"] * p["fw"]
        ocb = -(-ocg // mr)
        w = np.asarray(array).view(np.int8).reshape(g, ocg, icg, taps)
        full = np.zeros((g, ocb * mr, c4 * 4, taps), np.int8)
        full[:, :ocg, :icg] = w
        # [G][OC/MR][IC/4][tap][MR][4]: one tile row's four channel bytes are one broadcast dword
        packed = full.reshape(g, ocb, mr, c4, 4, taps).transpose(0, 1, 3, 5, 2, 4)
        return np.ascontiguousarray(packed), f"vnni_planes_mr{mr}"

    def _pack_code(self, p: dict[str, Any]) -> str:
        """The parallel loop packing one image and group into planes."""
        ih, iw = p["ih"], p["iw"]
        sh, sw, ph, pw = p["sh"], p["sw"], p["ph"], p["pw"]
        hq, wq, c4, plane = p["hq"], p["wq"], p["c4"], p["plane"]
        rows, cols = p["row_phases"], p["col_phases"]
        nph = len(rows) * len(cols)
        icg = p["ic"] // p["groups"]
        isa = self.gemm
        # a plane without padding or phases is the channel itself: one row of hq * wq pixels
        flat = (sh, sw, ph, pw, hq, wq) == (1, 1, 0, 0, ih, iw)
        lines, length = (1, hq * wq) if flat else (hq, wq)
        gathers = [f"{isa.gather}(src[{j}], col, {sw}, {length if flat else iw})" for j in range(4)]
        return f"""{isa.pack_prologue()}
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
        {isa.plane_type}* dst = planes + ((long)(cq * {nph} + phase) * {plane} + (long)i * {length}) * 4;
        for (int c0 = 0; c0 < {length}; c0 += 16) {{
          const int col = c0 * {sw} + b - {pw};
          {isa.pack_chunk(gathers, length)}
        }}
        if (i == {lines - 1}) memset(dst + {length * 4}, {isa.pad_byte}, {(plane - hq * wq) * 4});
      }}{isa.pack_epilogue(p)}"""

    def _tap_offsets(self, p: dict[str, Any]) -> list[int]:
        """The byte offset of each tap's dwords from a tile's first pixel in its channel quadruple."""
        fh, fw, sh, sw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "dh", "dw"))
        rows, cols, plane, wq = p["row_phases"], p["col_phases"], p["plane"], p["wq"]
        return [
            ((rows.index(r * dh % sh) * len(cols) + cols.index(s * dw % sw)) * plane + (r * dh // sh) * wq
             + s * dw // sw) * 4
            for r in range(fh)
            for s in range(fw)
        ]  # fmt: skip

    def _store_code(self, p: dict[str, Any]) -> str:
        """The tile's epilogue: requantize each accumulator (``acc``, MR x NV vectors) and store the
        lanes of real pixels."""
        oh, ow, wq, nv, mr, pixels = (p[k] for k in ("oh", "ow", "wq", "nv", "mr", "pixels"))
        oc, ocg = p["oc"], p["oc"] // p["groups"]
        otype = _out_ctype(p["out"])
        isa, w = self.gemm, self.gemm.width
        lanes = w.lanes
        contiguous = wq == ow
        segments = lanes // wq + 2
        prologue = ""
        if not contiguous:
            # the runs of one vector's lanes that are real pixels of one output row, the same for
            # every channel of the tile
            prologue = f"""
        long seg_at[{nv}][{segments}]; {isa.segment_arrays(nv, segments)}
        for (int v = 0; v < {nv}; ++v) {{
          const int q0 = p0 + {lanes} * v, end = q0 + {lanes} < {pixels} ? q0 + {lanes} : {pixels};
          int k = 0;
          for (int q = q0; q < end;) {{
            const int oy = q / {wq}, ox = q - oy * {wq};
            const int run = end - q < {wq} - ox ? end - q : {wq} - ox;
            if (ox < {ow}) {{
              const int len = run < {ow} - ox ? run : {ow} - ox;
              {isa.segment_record(ow)}
              ++k;
            }}
            q += run;
          }}
          segs[v] = k;
        }}"""
        fb = "fbias[o]" if _has_fbias(p) else "0.f"
        rows = []
        for i in range(mr):
            body = []
            for v in range(nv):

                def put(vtype: str, value: str, store: str, v: int = v) -> str:
                    return f"{{ const {vtype} r = {value}; {isa.put(p, v, store)} }}"

                acc = f"{w.mm}_load_si{w.bits}({w.aligned(f'acc + {(i * nv + v) * lanes}', const=True)})"
                body.append(
                    f"{{ {w.ivec} t = {w.mm}_add_epi32({acc}, bv); {_epilogue_stmt(p, 't', 'fb', put, w)} }}"
                )
            rows.append(
                f"if (o0 + {i} < {ocg}) {{ const int o = g * {ocg} + o0 + {i};"
                f" {_channel_vectors(p, 'o', w)} const float fb = {fb}; (void)fb;"
                f" {otype}* yo = y + ((long)nn * {oc} + o) * {oh * ow};\n          "
                + "\n          ".join(body)
                + " }"
            )
        return prologue + "\n        " + "\n        ".join(rows)

    def _tile_code(self, sym: str, p: dict[str, Any], offsets: list[int], kernel: str) -> str:
        """Micro-kernel ``kernel`` (of ``gemm.kernels``): MR x NV accumulators over every channel
        quadruple and tap, spilled to ``acc``."""
        nv, mr, c4, plane = (p[k] for k in ("nv", "mr", "c4", "plane"))
        nph = len(p["row_phases"]) * len(p["col_phases"])
        isa, w = self.gemm, self.gemm.width
        acc = [[f"c{i}_{v}" for v in range(nv)] for i in range(mr)]
        decl = " ".join(f"{w.ivec} {a} = {w.izero()};" for row in acc for a in row)
        spill = " ".join(
            f"{w.mm}_store_si{w.bits}({w.aligned(f'acc + {w.lanes * (i * nv + v)}')}, {name});"
            for i, row in enumerate(acc)
            for v, name in enumerate(row)
        )
        products = "\n            ".join(isa.tile_row(i, acc[i], kernel) for i in range(mr))
        constants = isa.tile_constants(kernel)
        constants = f"\n  {constants}" if constants else ""
        pt = isa.plane_type
        return f"""
static __attribute__((noinline)) void {sym}_tile{kernel}(const {pt}* bp, const int32_t* ak, int32_t* acc) {{
  static const int tap_offset[{len(offsets)}] = {{{", ".join(map(str, offsets))}}};{constants}
  {decl}
  for (int cq = 0; cq < {c4}; ++cq, bp += {nph * plane * 4})
    for (int tap = 0; tap < {len(offsets)}; ++tap, ak += {mr}) {{
      const {isa.plane_type}* bk = bp + tap_offset[tap];
      {isa.tile_loads(nv, kernel)}
      {products}
    }}
  {spill}
}}"""

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        if p.get("mode") == "pointwise":
            return self._render_pointwise(sym, p)
        if p.get("mode") == "channels" and p.get("window"):
            return render_channels(sym, p, window_pack_code(p), window_offsets(p))
        if p.get("mode") == "channels":
            return render_channels(sym, p, self._pack_code(p), self._tap_offsets(p))
        n, ic, ih, iw, oc = (p[k] for k in ("n", "ic", "ih", "iw", "oc"))
        fh, fw, sh, sw, dh, dw, g = (p[k] for k in ("fh", "fw", "sh", "sw", "dh", "dw", "groups"))
        nv, mr, ppad, wq, c4, plane = (p[k] for k in ("nv", "mr", "ppad", "wq", "c4", "plane"))
        rows, cols = p["row_phases"], p["col_phases"]
        isa, lanes = self.gemm, self.gemm.width.lanes
        nph = len(rows) * len(cols)
        ocg, taps = oc // g, fh * fw
        ocb = -(-ocg // mr)
        ptiles = ppad // (lanes * nv)
        tiles = ptiles * ocb
        # the inner tile loop walks the smaller operand, so that the larger one streams through the
        # caches once: the weights (deep layers with few pixels) or the planes
        weights_first = ocg * c4 * 4 * taps > nph * plane * 4 * c4
        tile_of = (
            f"const int o0 = t / {ptiles} * {mr}, p0 = t % {ptiles} * {lanes * nv};"
            if weights_first
            else f"const int p0 = t / {ocb} * {lanes * nv}, o0 = t % {ocb} * {mr};"
        )
        otype = _out_ctype(p["out"])
        offsets = self._tap_offsets(p)
        kernels = "".join(self._tile_code(sym, p, offsets, kernel) for kernel in isa.kernels)
        weights = f"wpk + ((long)g * {ocb} + o0 / {mr}) * {c4 * taps * mr}"
        work = n * oc * p["oh"] * p["ow"] * (ic // g) * taps
        # the micro-kernel is a function of its own: the epilogue's constants, which a compiler keeps
        # in registers across the tile loop, then cost no accumulator registers (spills otherwise)
        return exact(f"""{kernels}
static void {sym}({_kernel_args(p)}) {{
  const int8_t* x = (const int8_t*)x_;
  const int32_t* wpk = (const int32_t*)w_;
  {_bias_decls(p)}
  {otype}* y = ({otype}*)y_;
  {isa.plane_type}* planes = ({isa.plane_type}*)(((uintptr_t)ws + 63) & ~(uintptr_t)63);{isa.call_decls(p)}
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  for (int nn = 0; nn < {n}; ++nn)
    for (int g = 0; g < {g}; ++g) {{
      const int8_t* xg = x + ((long)nn * {ic} + (long)g * {ic // g}) * {ih * iw};
      {self._pack_code(p)}
      #pragma omp for schedule(static)
      for (int t = 0; t < {tiles}; ++t) {{
        {tile_of}
        int32_t acc[{mr * nv * lanes}] __attribute__((aligned({lanes * 4})));
        {isa.tile_call(sym, "planes + (long)p0 * 4", weights)}
        {self._store_code(p)}
      }}
    }}
}}
""")

    def _pointwise_epilogue(self, p: dict[str, Any], i: int) -> str:
        """Tile row ``i``'s epilogue in the pointwise mode: its four accumulator vectors ``c{i}_{v}``
        (integer bias ``bv`` added, pixels in pack order: ``xm_q8_quad64``) through the kernel's
        epilogue, as 64 int8 results in pixel order stored whole (``out_mask``: the block's real
        pixels). Where the epilogue ends in a saturating narrowing of int32 lanes, the four vectors
        narrow together (``xm_q8_narrow64``: the same saturation as ``vpmovsdb``), and a table
        island then looks up all 64 bytes at once (the table's index clamped at 0 as
        ``xm_qisland_lut16``'s callers do); any other epilogue keeps its 16-lane value, the four
        joined by ``xm_q8_join64``."""
        lanes = [f"t{v}" for v in range(POINTWISE_NV)]
        sums = " ".join(f"const __m512i t{v} = _mm512_add_epi32(c{i}_{v}, bv);" for v in range(POINTWISE_NV))
        store = "_mm512_mask_storeu_epi8(yo + p0, out_mask, z);"
        if island_lut_index(p, "t0", "fb") is not None:
            forms = [island_lut_index(p, t, "fb") or ("", "") for t in lanes]
            exact_lanes, affine_lanes = ([form[k] for form in forms] for k in (0, 1))
            branches = [
                "{ const __m512i z = _mm512_permutex2var_epi8(island_lo, _mm512_max_epi8("
                f"xm_q8_narrow64({', '.join(ls)}), _mm512_setzero_si512()), island_hi); {store} }}"
                for ls in (affine_lanes, exact_lanes)
                if ls[0]
            ]
            # a channel's affine form where it has one (fa != 0), else the exact epilogue
            body = branches[0] if len(branches) == 1 else f"if (fa != 0.f) {branches[0]} else {branches[1]}"
            return f"{sums} {body}"
        narrow = "_mm512_cvtsepi32_epi8("
        values: list[str] = []

        def record(_type: str, value: str, _store: str) -> str:
            values.append(value)
            return f"@{len(values) - 1}@"  # the placeholder of the epilogue branch's store

        # one vector's epilogue, the accumulator's name a token: each result a placeholder for the
        # four vectors' joined results. An int8 result has no integer activation on the accumulator
        # (requant.int_activation): no statement but the results names it
        code = _epilogue_stmt(p, ACC, "fb", record)
        assert ACC not in code, code
        for k, value in enumerate(values):
            if value.startswith(narrow) and value.endswith(")"):  # int32 lanes, narrowed
                z = f"xm_q8_narrow64({', '.join(value[len(narrow) : -1].replace(ACC, t) for t in lanes)})"
            else:
                z = f"xm_q8_join64({', '.join(value.replace(ACC, t) for t in lanes)})"
            code = code.replace(f"@{k}@", f"{{ const __m512i z = {z}; {store} }}")
        return f"{sums} {code}"

    def _render_pointwise(self, sym: str, p: dict[str, Any]) -> str:
        """A 1x1, stride-1 convolution of few input channels (``_pointwise``), where the packing, the
        call and the int32 round trip of the general tile cost more than the products: each thread
        packs a block of 64 pixels of all channel quadruples into planes on its stack
        (``xm_q8_quad64``: a byte interleave of four channel rows, in L1), then sweeps every output
        channel over it with an inlined MR x 4-vector tile whose accumulators go straight from
        registers through the epilogue to one 64-byte store per channel (the planes' pixel order is
        the one the narrowing packs put back in order: ``xm_q8_quad64``)."""
        n, ic, oc, c4, mr = (p[k] for k in ("n", "ic", "oc", "c4", "mr"))
        pixels, block = p["pixels"], 16 * POINTWISE_NV
        blocks = -(-pixels // block)
        ocb = -(-oc // mr)
        acc = [[f"c{i}_{v}" for v in range(POINTWISE_NV)] for i in range(mr)]
        decl = " ".join(f"__m512i {a} = _mm512_setzero_si512();" for row in acc for a in row)
        loads = " ".join(
            f"const __m512i b{v} = _mm512_load_si512((const void*)(bk + {64 * v}));"
            for v in range(POINTWISE_NV)
        )
        products = "\n            ".join(VNNI.tile_row(i, acc[i], "") for i in range(mr))
        fb = "fbias[o]" if _has_fbias(p) else "0.f"
        rows = "\n          ".join(
            f"if (o0 + {i} < {oc}) {{ const int o = o0 + {i}; {_channel_vectors(p, 'o')}"
            f" const float fb = {fb}; (void)fb; int8_t* yo = y + ((long)nn * {oc} + o) * {pixels};\n"
            f"            {self._pointwise_epilogue(p, i)} }}"
            for i in range(mr)
        )
        quads = []
        for j in range(c4):
            rows_of = ", ".join(
                f"xn + (long){4 * j + k} * {pixels} + p0" if 4 * j + k < ic else "NULL" for k in range(4)
            )
            quads.append(f"xm_q8_quad64(planes + {j * block * 4}, {rows_of}, in_mask);")
        pack = "\n        ".join(quads)
        work = n * oc * pixels * ic
        return exact(f"""
static void {sym}({_kernel_args(p)}) {{
  const int8_t* x = (const int8_t*)x_;
  const int32_t* wpk = (const int32_t*)w_;
  {_bias_decls(p)}
  int8_t* y = (int8_t*)y_;
  (void)ws;
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  {{
    uint8_t planes[{c4 * block * 4}] __attribute__((aligned(64)));
    #pragma omp for schedule(static)
    for (int item = 0; item < {n * blocks}; ++item) {{
      const int nn = item / {blocks}, p0 = item % {blocks} * {block};
      const int8_t* xn = x + (long)nn * {ic * pixels};
      const __mmask64 in_mask = xm_q8_lanes64({pixels} - p0), out_mask = in_mask;
      {pack}
      for (int ob = 0; ob < {ocb}; ++ob) {{
        const int o0 = ob * {mr};
        const int32_t* ak = wpk + (long)ob * {c4 * mr};
        {decl}
        for (int cq = 0; cq < {c4}; ++cq, ak += {mr}) {{
          const uint8_t* bk = planes + cq * {block * 4};
          {loads}
          {products}
        }}
        {rows}
      }}
    }}
  }}
}}
""")


class Conv2dQ8Vnni(Conv2dQ8Gemm):
    """The GEMM on AVX512-VNNI: ``vpdpbusd`` on ``x + 128`` planes."""

    isa = ISA
    gemm = VNNI
    pointwise_mode = True
    channel_lanes = True

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT + GEMM_SUPPORT + CHANNEL_SUPPORT


class Conv2dQ8Relu6Vnni(_Relu6Island, Conv2dQ8Vnni):
    family = "conv2d_q8_relu6_x86"
    conv_family = Conv2dQ8Vnni.family
    priority = 102  # ahead of the typecvt family (100), which takes every other typecvt


KERNEL_UNITS = (Conv2dQ8Vnni(), Conv2dQ8Relu6Vnni())

__all__ = ["KERNEL_UNITS", "VNNI", "Conv2dQ8Gemm", "GemmIsa", "choose_tile"]
