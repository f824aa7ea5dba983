"""``+bf16`` on a CPU with AVX512-BF16 but no AMX tiles (ISA ``avx512bf16``, target
``x86-avx512[-vnni]+bf16``): the AMX-BF16 kernels' operands and numeric contract
(:mod:`backends.c.templates.x86.x86_amx_bf16`: inputs rounded to bfloat16 to nearest even, exact
products, float32 sums and epilogue), multiplied by ``vdpbf16ps`` alone. The filters are packed at
compile time into the same ``[OC/16][K/32][16][32]`` bfloat16 blocks, the activations converted
(``vcvtne2ps2bf16``) into interleaved k pairs while they are packed; no tile instruction is
compiled, so the library runs on an AMD EPYC (Zen 4) as on a Xeon. Depthwise convolutions stay
float32 (no GEMM to feed).

The plain-NCHW units are the ``conv2d_bf16_amx`` / ``matmul_bf16_amx`` families on another ISA (the
registry's one family per rule and priority: the AMX-tile operand layout is what the family names;
the target's ISA order picks the instructions).

``x86-avx512-nchw88+bf16`` adds ``conv2d_nchw88_bf16`` (:class:`ConvNchw88Bf16`): dense, grouped and
first-layer convolutions of the NCHW88 graph on the same contract, so that its depthwise, pooling,
elementwise and F(4x4, 3x3) Winograd layers stay the float32 NCHW88 kernels (the plain-NCHW ones
are slower; the Winograd ones compute in float32 but read and write bfloat16 activations where
``kernel-bf16-activations`` chooses, :class:`winograd.ConvWinogradNchw88Bf16`) and no relayout
separates the bfloat16 layers from them. An NCHW88 pixel's 8 channels
are 4 bfloat16 pairs, each pair one 32-bit broadcast: the input is converted once per image into a
bfloat16 NCHW88 copy (the padded copy the float32 kernel makes anyway, at half the bytes), the
filters at compile time into ``vdpbf16ps``'s pair layout, and the float32 epilogue stores float32
NCHW88, or bfloat16 NCHW88 where ``kernel-bf16-activations`` (:mod:`passes.lowering.bf16_activations`)
made the result a bfloat16 tensor; it reads such tensors as its input (no conversion) and residual.
:class:`MatvecBf16` is the classifier head's one-row product on bfloat16 weights."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import Template, conv_sym, epilogue_sym, sym_join
from backends.c.templates.portable.generic import omp_for, omp_parallel
from backends.c.templates.x86.gemm import constant_b, matmul_sym
from backends.c.templates.x86.nchw88 import (
    ACT_CODES,
    COMMON,
    COMMON512,
    DENSE_FILTERS,
    VEC,
    _fma_loop,
    _signature,
    balanced_block,
    conv_nchw88,
    offset,
    strides,
    tile_calls,
    zmm_accumulators,
    zmm_epilogue,
    zmm_partial_sums,
)
from backends.c.templates.x86.winograd import winograd_tile
from backends.c.templates.x86.x86_amx_bf16 import Conv2dBf16Amx, MatmulBf16Amx, to_bfloat16
from backends.c.templates.x86.x86_f32_matvec import MatvecX86
from dialects import tensor as T
from dialects.layout import SPECS, Layout, LayoutSpec
from passes.lowering.kernels import FULL_EPILOGUE, Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "avx512bf16"


class Conv2dBf16(Conv2dBf16Amx):
    """Dense and grouped float32 NCHW convolution on bfloat16 operands with ``vdpbf16ps``."""

    isa = ISA
    tiles = False


class MatmulBf16(MatmulBf16Amx):
    """float32 matrix products (batched too) on bfloat16 operands with ``vdpbf16ps``. A one-row
    product is left to the float32 matrix-vector kernel (``matmul_matvec``): the 16-row blocks would
    compute 15 rows of zeros (MobileNetV2's classifier, 1x1280 by 1280x1000: 0.33 ms here against
    0.23 for the float32 matvec, AMD EPYC, one thread)."""

    isa = ISA
    tiles = False

    def match(self, op: Operation) -> Lowered | None:
        got = super().match(op)
        if got is None or got.params["m"] == 1:
            return None
        return got


class MatvecBf16(MatvecX86):
    """``matmul_matvec_bf16``: the one-row product with constant weights (a classifier head,
    :class:`~backends.c.templates.x86.x86_f32_matvec.MatvecX86`'s loops) on bfloat16 weights, the
    ``+bf16`` contract: weights rounded at compile time, the row once per call (into the workspace),
    exact products by ``vdpbf16ps`` (a k pair per step), float32 sums and epilogue. The weights are
    all the product reads, so half their bytes is the gain (ResNet-50's 2048 x 1000 head: 8 MB of
    float32 from memory every run)."""

    examples = (
        E.matmul(1, 1280, 1000, tb=True, bias=True),
        E.matmul(1, 37, 128, tb=True, bias=True, residual=True),
        E.matmul(1, 5, 3, tb=True, bias=True, act="h_swish"),
        E.matmul(1, 33, 130, act="relu"),
    )

    family = "matmul_matvec_bf16"
    priority = 107  # ahead of the float32 matmul_matvec (105); matmul_bf16_amx leaves one row

    def __init__(self) -> None:
        super().__init__("avx512")
        self.isa = ISA

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(self.family, *matmul_sym(p), epilogue_sym(p))

    def workspace(self, p: dict[str, Any]) -> int:
        return -(-p["k"] // 2) * 4  # the row as bfloat16 pairs

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        b = constant_b(operand, array, p)
        if b is None:
            return None
        vl, kp = self.lanes, -(-p["k"] // 2)
        panels = -(-p["n"] // vl)
        padded = np.zeros((2 * kp, panels * vl), np.float32)
        padded[: p["k"], : p["n"]] = b
        # (K/2, 2, panels, VL) -> (panels, K/2, VL, 2): a panel is one stream of vdpbf16ps operands
        pairs = padded.reshape(kp, 2, panels, vl).transpose(2, 0, 3, 1)
        return to_bfloat16(np.ascontiguousarray(pairs)), f"matvec_bf16_b{vl}"

    def prologue(self, p: dict[str, Any]) -> str:
        k = p["k"]
        odd = f" ((uint16_t*)ws)[{k}] = 0;" if k % 2 else ""
        return f"\n  xm_n88_bf16_run((uint16_t*)ws, a, {k});{odd}\n  const float* ap = (const float*)ws;"

    def _steps(self, k: int) -> int:
        return -(-k // 2)  # channel pairs

    def _row_vector(self) -> str:
        return "xm_n88_bf16_pair(ap + kk)"

    def _product(self, s: int) -> str:
        return f"xm_n88_bf16_dot(_mm512_loadu_ps(w{s} + (long)kk * {self.lanes}), av, c{s})"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        return COMMON + N88_SUPPORT + super().render(em, sym, p)


# ----------------------------------------------------------------------------------------------
# NCHW88: the blocked float32 graph of ``x86-avx512-nchw88+bf16``

PAIRS = VEC // 2  # bfloat16 channel pairs of one NCHW88 block: the k steps of one vdpbf16ps each
TILE = (2, 12)  # 2 x 16 output channels x 12 columns: 24 zmm accumulators, 2 filters, 1 broadcast
# a 1x1 convolution's plane is one long row: 3 x 16 output channels x 8 columns (24 accumulators)
# load 11 operands per 24 vdpbf16ps instead of 14; 8-14% faster on ResNet-50's 1x1 convs here
# (28x28 512 -> 512, 14x14 256 -> 1024), where 6 or more filter vectors keep the last tile full enough
TILE_POINTWISE, POINTWISE_MIN_VECTORS = (3, 8), 6
WCHUNK_BYTES_BF16 = 24576  # one tile's filters per input-channel chunk, L1 resident (as the float32 kernel)
UNITS_BF16 = 64  # register tiles one filter chunk sweeps while it sits in L1
# bfloat16 filters from this size on have their next chunk requested into L2 while a chunk runs (the
# float32 kernel's threshold, nchw88.PREFETCH_MIN_BYTES): they come from L3 or memory, and a small
# plane has too few units to hide that (ResNet-50's 7x7 and strided 1x1 convs ran at half the rate of
# its other layers without)
PREFETCH_MIN_BYTES = 512 << 10


def column_pairs(w: np.ndarray) -> np.ndarray:
    """Logical ``(OC, IC, R, S)`` float32 filters of a first layer as ``[OC/16][IC][R][S/2][16][2]``
    bfloat16 (rounded to nearest even): per channel and window row, a 64-byte vector per pair of
    window columns ``(2s, 2s + 1)`` (the last one's partner zero where ``S`` is odd)."""
    oc, ic, fh, fw = w.shape
    ocp, fwp = -(-oc // 16) * 16, -(-fw // 2) * 2
    full = np.zeros((ocp, ic, fh, fwp), np.float32)
    full[:oc, :, :, :fw] = np.asarray(w, np.float32)
    blocks = full.reshape(ocp // 16, 16, ic, fh, fwp // 2, 2)
    return to_bfloat16(np.ascontiguousarray(blocks.transpose(0, 2, 3, 4, 1, 5)))


def pair_filters(w: np.ndarray, groups: int, block: int = VEC) -> np.ndarray:
    """Logical ``(OC, IC/G, R, S)`` float32 filters as ``[G][OC/G/16][IC/G/block][R][S][block/2][16][2]``
    bfloat16 (rounded to nearest even, :func:`to_bfloat16`): per input block and tap, ``block / 2``
    64-byte vectors, each 16 output channels x one input channel pair with the pair adjacent, the
    operand order of ``vdpbf16ps``. Output channels are zero-padded per group to 16, input channels
    (a first layer's) to the block."""
    oc, icg, fh, fw = w.shape
    ocg = oc // groups
    ocp, icp = -(-ocg // 16) * 16, -(-icg // block) * block
    full = np.zeros((groups, ocp, icp, fh, fw), np.float32)
    full[:, :ocg, :icg] = np.asarray(w, np.float32).reshape(groups, ocg, icg, fh, fw)
    blocks = full.reshape(groups, ocp // 16, 16, icp // block, block // 2, 2, fh, fw)
    return to_bfloat16(np.ascontiguousarray(blocks.transpose(0, 1, 3, 6, 7, 4, 2, 5)))


N88_SUPPORT = r"""
#ifndef XM_N88_BF16
#define XM_N88_BF16
/* n floats as n bfloat16 (round to nearest even, denormals to zero: the filters' to_bfloat16) */
static inline void xm_n88_bf16_run(uint16_t* d, const float* s, long n) {
  for (long i = 0; i < n; i += 16) {
    const __mmask16 m = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s + i));
    _mm256_mask_storeu_epi16(d + i, m, (__m256i)v);
  }
}
/* n pixels of np planes of floats (plane stride ps; np <= 8) as n x ceil(np / 2) bfloat16 pairs,
   a pixel's pairs adjacent and the odd plane's partner zero: a first layer's plain input */
static inline void xm_n88_bf16_pixels(uint32_t* d, const float* s, long ps, int np, long n) {
  const int pairs = (np + 1) / 2;
  for (long i = 0; i < n; i += 16) {
    const __mmask16 m = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    uint32_t t[4][16];
    for (int c = 0; c < pairs; ++c) {
      const __m512 a = _mm512_maskz_loadu_ps(m, s + 2 * c * ps + i);
      const __m512 b =
          2 * c + 1 < np ? _mm512_maskz_loadu_ps(m, s + (2 * c + 1) * ps + i) : _mm512_setzero_ps();
      const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a); /* a in the low 16 words */
      const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(ab));
      const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(ab, 1));
      _mm512_storeu_si512((void*)t[c], _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    const long k = n - i < 16 ? n - i : 16;
    for (long q = 0; q < k; ++q)
      for (int c = 0; c < pairs; ++c) d[(i + q) * pairs + c] = t[c][q];
  }
}
/* one channel pair of one pixel (32 bits) broadcast to every lane: the B operand of a step */
static inline __m512 xm_n88_bf16_pair(const float* p) {
  int v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_castsi512_ps(_mm512_set1_epi32(v));
}
/* 8 bfloat16 as 8 floats (exact: a bfloat16 is a float32's high half) */
static inline __m256 xm_n88_bf16_ld8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline __m512 xm_n88_bf16_dot(__m512 w, __m512 x, __m512 acc) {
  return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
}
#endif
"""


def n88_ukr(j: int, i: int, x_ow: int, pairs: int = PAIRS, res_b16: bool = False, y_b16: bool = False) -> str:
    """``J x I`` tile (16 output channels per zmm accumulator: block ``2a`` low, ``2a + 1`` high,
    stored only when ``2a + 1 < nb``) over ``nk`` input blocks of ``pairs`` bfloat16 channel pairs and every
    tap of an ``fh x fw`` window. ``x`` and ``w`` point at bfloat16 pairs: every stride counts
    32-bit pairs, so a pair is one broadcast and 16 output channels of it one zmm load. A later
    input-channel chunk (``acc & 1``) continues from the float32 partial sums in ``y``; all but the
    last (``acc & 2``) store them without the epilogue. With ``res_b16`` the residual is read as
    bfloat16, with ``y_b16`` the result is stored as bfloat16 into ``yo`` (same element offsets as
    ``y``, which then only holds the partial sums)."""
    suffix = f"_r{int(res_b16)}y{int(y_b16)}" if res_b16 or y_b16 else ""
    name = f"xm_n88_bf16_conv_c{pairs}_o{x_ow}{suffix}_{j}x{i}"
    rt = "uint16_t" if res_b16 else "float"
    lines = [
        f"static void {name}(const float* restrict x, const float* restrict w, int nk, int fh, int fw,",
        "    long x_k, long x_kh, long x_kw, long w_k, long w_kh, long w_kw, long w_j,",
        f"    const float* bias, const {rt}* res, float* y, long y_j, long y_i, int act, int nb, int acc"
        + (", uint16_t* yo) {" if y_b16 else ") {"),
    ]
    lines += zmm_accumulators(j, i)
    lines += _fma_loop(
        j, i, pairs, "float", x_ow, "__m512", 16,
        lambda q: f"_mm512_loadu_ps({q})", lambda q: f"xm_n88_bf16_pair({q})", "xm_n88_bf16_dot",
    )  # fmt: skip
    lines += zmm_partial_sums(j, i)
    if res_b16 or y_b16:
        lines += b16_epilogue(j, i, res_b16, y_b16)
    else:
        lines += zmm_epilogue(j, i, "f32")
    lines.append("}")
    return "\n".join(lines) + "\n"


def b16_epilogue(j: int, i: int, res_b16: bool, y_b16: bool) -> list[str]:
    """Bias, residual and activation on a ``J x I`` zmm tile in float32, as ``zmm_epilogue``; the
    residual read as bfloat16 (``res_b16``: exact in float32), the result stored as bfloat16 into
    ``yo`` (``y_b16``: rounded to nearest even, the rounding the next bfloat16 convolution's input
    conversion would make)."""

    def load(at: str) -> str:
        return f"xm_n88_bf16_ld8(res + {at})"

    def store(lo_at: str, hi_at: str) -> list[str]:
        return [
            "    const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);",
            f"    _mm_storeu_si128((__m128i*)(yo + {lo_at}), _mm256_castsi256_si128(h));",
            f"    if (two) _mm_storeu_si128((__m128i*)(yo + {hi_at}), _mm256_extracti128_si256(h, 1));",
        ]

    return zmm_epilogue(j, i, "f32", load if res_b16 else None, store if y_b16 else None)


class ConvNchw88Bf16(Template):
    """``conv2d_nchw88_bf16``: dense and grouped NCHW88 float32 convolutions (``x86-avx512-nchw88+bf16``)
    on bfloat16 operands with ``vdpbf16ps``, the ``+bf16`` contract (inputs rounded to bfloat16,
    exact products, float32 sums and epilogue). Filters are packed at compile time by
    :func:`pair_filters`; the input is converted once per image into a bfloat16 NCHW88 copy in the
    workspace (zero-padded; a strided 1x1 convolution's subsampled pixels), so every later read is
    half the bytes of float32 and every 32-bit word is one pixel's channel pair. The loops are the
    float32 ``conv2d_nchw88``'s on AVX-512 (2 x 16 output channels x 12 columns, input-channel
    chunks whose filters stay in L1, a 1x1 stride-1 plane seen as one row); the first layer (fewer
    than 8 input channels) and channel-wise convolutions keep their float32 families. Input,
    residual and result may be bfloat16 tensors (params ``bf16_args`` / ``bf16_outs``: a
    :class:`~passes.lowering.bf16_activations.Bf16ActivationUnit`)."""

    examples = (
        E.conv2d((1, 16, 9, 11), 40, 3, pad=1, act="relu"),
        E.conv2d((2, 24, 13, 11), 32, 1, residual=True),
        E.conv2d((1, 32, 15, 15), 24, 1, stride=2, act="relu6"),
        E.conv2d((1, 16, 11, 9), 48, 3, stride=2, pad=1, residual=True, act="relu"),
        E.conv2d((1, 32, 9, 9), 32, 3, pad=1, groups=2, act="h_swish"),
        E.conv2d((1, 24, 9, 9), 16, 3, pad=2, dil=2),
        E.conv2d((1, 3, 23, 21), 32, 7, stride=2, pad=3, act="relu"),  # a first layer in column pairs
    )

    family = "conv2d_nchw88_bf16"
    isa = ISA
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 295  # ahead of the float32 conv2d_nchw88 (280) and its Winograd (290)
    epilogues = {"float32": FULL_EPILOGUE}

    def match(self, op: Operation) -> Lowered | None:
        got = conv_nchw88(op, chan=False)
        if got is None or got.params["dtype"] != "f32":
            return None
        # F(4x4, 3x3) Winograd computes a quarter of the direct products, in float32; vdpbf16ps only
        # doubles the products per instruction: the float32 Winograd keeps those layers (ResNet-18's
        # 56x56 and 28x28 3x3 convs: 0.55-0.9x the bfloat16 direct time on this EPYC). F(2x2, 3x3)
        # (a 2.25x saving less its transforms) loses to bfloat16 (14x14, 256 channels).
        if winograd_tile(got.params) == 4:
            return None
        return got

    def symbol(self, p: dict[str, Any]) -> str:
        x_b16, res_b16, y_b16 = self._b16(p)
        tags = ("xb" if x_b16 else "", "rb" if res_b16 else "", "yb" if y_b16 else "")
        return sym_join(self.family, *conv_sym(p), epilogue_sym(p), *tags)

    # bfloat16 activations (passes/lowering/bf16_activations.py): which operands this convolution
    # can take, and its result give, as bfloat16 NCHW88 tensors (params ``bf16_args`` /
    # ``bf16_outs``: those chosen, checked against the tensors' element types by kernel.call)

    @staticmethod
    def _res_arg(p: dict[str, Any]) -> int:
        return 3 if p["bias"] else 2

    def bf16_reads(self, p: dict[str, Any]) -> tuple[int, ...]:
        """The arguments the kernel can read as bfloat16: the input (not a first layer's plain
        planes) and the residual."""
        return (*(() if p["mode"] == "hybrid" else (0,)), *((self._res_arg(p),) if p["residual"] else ()))

    def bf16_writes(self, p: dict[str, Any]) -> tuple[int, ...]:
        """The results the kernel can store as bfloat16: its one output (whole NCHW88 blocks)."""
        return (0,) if p["oc"] % VEC == 0 else ()

    def _b16(self, p: dict[str, Any]) -> tuple[bool, bool, bool]:
        """Whether the input, the residual and the result are bfloat16."""
        args = p.get("bf16_args", ())
        return 0 in args, bool(p["residual"]) and self._res_arg(p) in args, 0 in p.get("bf16_outs", ())

    def _direct(self, p: dict[str, Any]) -> bool:
        """Whether the kernel multiplies its bfloat16 input in place (no copy: unpadded, not subsampled)."""
        return self._b16(p)[0] and (p["ph"], p["pw"]) == (0, 0) and not self._source(p)[2]

    def _copy_bytes(self, p: dict[str, Any]) -> int:
        if self._direct(p):
            return 0
        rows, cols, _ = self._source(p)
        planes = p["ic"] if self._colpairs(p) else max(p["ic"], self._block(p)[1])
        return -(-planes * rows * cols * 2 // 64) * 64

    def _scratch_bytes(self, p: dict[str, Any]) -> int:
        """A bfloat16 result's float32 partial sums (one image), after the copy in the workspace."""
        return p["oc"] * p["oh"] * p["ow"] * 4 if self._b16(p)[2] else 0

    @staticmethod
    def _colpairs(p: dict[str, Any]) -> bool:
        """Whether a first layer pairs neighbouring columns of one channel instead of channels of
        one pixel: at an even column stride a pair of window columns ``(2s, 2s + 1)`` is one aligned
        32-bit word of a plain bfloat16 row, so the products are ``ceil(fw / 2) * ic`` pair steps per
        window row instead of ``ceil(ic / 2) * fw`` (ResNet's 7x7 stem: 12, not 14 with a zero
        4th channel), and the copy is a plain conversion of each row."""
        return (
            p["mode"] == "hybrid"
            and p["groups"] == 1
            and p["sw"] % 2 == 0
            and p["dw"] == 1
            and -(-p["fw"] // 2) * p["ic"] < -(-p["ic"] // 2) * p["fw"]
        )

    @classmethod
    def _block(cls, p: dict[str, Any]) -> tuple[LayoutSpec, int, str]:
        """The bfloat16 copy's layout, its input channels per reduction block and that block's dim
        name: NCHW88 (8), or a first layer's (fewer than 8 plain NCHW channels) pixels with their
        channels rounded up to pairs, ``N H W C^block``, or (:meth:`_colpairs`) plain bfloat16
        planes whose blocks are the window's columns rounded up to pairs."""
        if p["mode"] != "hybrid":
            return SPECS[Layout.NCHW88], VEC, "C/8"
        if cls._colpairs(p):
            return LayoutSpec("NCHW", "N C H W"), -(-p["fw"] // 2) * 2, "C"
        block = -(-p["ic"] // 2) * 2
        return LayoutSpec("NCHW", f"N H W C^{block}"), block, f"C^{block}"

    @classmethod
    def _source(cls, p: dict[str, Any]) -> tuple[int, int, bool]:
        """The bfloat16 copy's rows and columns, and whether it is a strided 1x1 conv's subsample."""
        sub = (p["fh"], p["fw"], p["ph"], p["pw"]) == (1, 1, 0, 0) and (p["sh"], p["sw"]) != (1, 1)
        sub = sub and p["mode"] != "hybrid"  # a first layer's planes are copied whole
        if sub:
            return p["oh"], p["ow"], True
        if cls._colpairs(p):  # even, and wide enough for the last window's zero-weight column
            cols = max(p["iw"] + 2 * p["pw"], p["sw"] * (p["ow"] - 1) + -(-p["fw"] // 2) * 2)
            return p["ih"] + 2 * p["ph"], -(-cols // 2) * 2, False
        return p["ih"] + 2 * p["ph"], p["iw"] + 2 * p["pw"], False

    def workspace(self, p: dict[str, Any]) -> int:
        return self._copy_bytes(p) + self._scratch_bytes(p)

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand == 2 and p["bias"]:  # float32, padded to whole zmm vectors
            b = np.asarray(array, np.float32).reshape(-1)
            return np.ascontiguousarray(np.pad(b, (0, -len(b) % 16))), "bias_f32x16"
        if operand != 1:
            return None
        mode = p["mode"]
        logical = SPECS[DENSE_FILTERS[mode]].unpack(np.asarray(array))
        if mode == "group":  # (G, OC/G, IC/G, R, S) -> (OC, IC/G, R, S)
            logical = logical.reshape(-1, *logical.shape[2:])
        if self._colpairs(p):
            return column_pairs(logical), "bf16_column_pairs"
        return pair_filters(logical, p["groups"], self._block(p)[1]), "bf16_pairs"

    def _copy(self, p: dict[str, Any], region: str) -> str:
        """C statements converting image ``n`` of ``x`` (float32 NCHW88) into ``xs`` (bfloat16
        NCHW88: zero-padded rows, or every ``sh``-th row and ``sw``-th column)."""
        rows, cols, sub = self._source(p)
        cb, ih, iw, ph, pw = p["ic"] // VEC, p["ih"], p["iw"], p["ph"], p["pw"]
        if self._colpairs(p):
            return self._copy_rows(p, omp_for(region, 2))
        if p["mode"] == "hybrid":
            return self._copy_planes(p, omp_for(region))
        if self._direct(p):
            return ""
        x_b16 = self._b16(p)[0]
        omp = omp_for(region, 2)
        src, dst = (1, p["ic"], ih, iw), (1, p["ic"], rows, cols)
        ss, ds = strides(Layout.NCHW88, src), strides(Layout.NCHW88, dst)
        assert ss["C%8"] == ds["C%8"] == 1 and ss["W"] == ds["W"] == VEC  # a row is W x 8 contiguous
        d_row = offset(Layout.NCHW88, dst, {"C/8": "cb", "H": "r"})
        if sub:
            x_at = offset(Layout.NCHW88, src, {"C/8": "cb", "H": f"r * {p['sh']}", "W": f"q * {p['sw']}"})
            pixel = (
                f"_mm_loadu_si128((const __m128i*)(xn16 + {x_at}))"
                if x_b16
                else f"(__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(xn + {x_at}))"
            )
            return f"""
    {omp}
    for (int cb = 0; cb < {cb}; ++cb)
      for (int r = 0; r < {rows}; ++r) {{
        uint16_t* d = xs + {d_row};
        for (int q = 0; q < {cols}; ++q)
          _mm_storeu_si128((__m128i*)(d + q * {VEC}), {pixel});
      }}"""
        x_row = offset(Layout.NCHW88, src, {"C/8": "cb", "H": f"r - {ph}"})
        right = cols - pw - iw
        tail = f"__builtin_memset(d + {(pw + iw) * VEC}, 0, {right * VEC * 2});" if right else ""
        run = (
            f"__builtin_memcpy(d + {pw * VEC}, xn16 + {x_row}, {iw * VEC * 2});"
            if x_b16
            else f"xm_n88_bf16_run(d + {pw * VEC}, xn + {x_row}, {iw * VEC});"
        )
        return f"""
    {omp}
    for (int cb = 0; cb < {cb}; ++cb)
      for (int r = 0; r < {rows}; ++r) {{
        uint16_t* d = xs + {d_row};
        if (r < {ph} || r >= {ph + ih}) {{ __builtin_memset(d, 0, {cols * VEC * 2}); continue; }}
        {f"__builtin_memset(d, 0, {pw * VEC * 2});" if pw else ""}
        {run}
        {tail}
      }}"""

    def _copy_rows(self, p: dict[str, Any], omp: str) -> str:
        """A first layer's copy in column pairs: each plain float32 row as a zero-padded bfloat16 row."""
        rows, cols, _ = self._source(p)
        ic, ih, iw, ph, pw = p["ic"], p["ih"], p["iw"], p["ph"], p["pw"]
        x_row = offset(None, (1, ic, ih, iw), {"C": "c", "H": f"r - {ph}"})
        right = cols - pw - iw
        tail = f"__builtin_memset(d + {pw + iw}, 0, {right * 2});" if right else ""
        return f"""
    {omp}
    for (int c = 0; c < {ic}; ++c)
      for (int r = 0; r < {rows}; ++r) {{
        uint16_t* d = xs + (long)c * {rows * cols}L + (long)r * {cols}L;
        if (r < {ph} || r >= {ph + ih}) {{ __builtin_memset(d, 0, {cols * 2}); continue; }}
        {f"__builtin_memset(d, 0, {pw * 2});" if pw else ""}
        xm_n88_bf16_run(d + {pw}, xn + {x_row}, {iw});
        {tail}
      }}"""

    def _copy_planes(self, p: dict[str, Any], omp: str) -> str:
        """A first layer's copy: plain NCHW float32 planes into padded bfloat16 pixels (channel
        pairs adjacent, the odd channel's partner zero)."""
        spec, block, _ = self._block(p)
        rows, cols, _ = self._source(p)
        ic, ih, iw, ph, pw = p["ic"], p["ih"], p["iw"], p["ph"], p["pw"]
        src, dst = (1, ic, ih, iw), (1, ic, rows, cols)
        ss, ds = strides(None, src), spec.dim_strides(dst)
        d_row = offset(spec, dst, {"H": "r"})
        x_row = offset(None, src, {"H": f"r - {ph}"})
        right = cols - pw - iw
        tail = f"__builtin_memset(d + {(pw + iw) * ds['W']}, 0, {right * ds['W'] * 2});" if right else ""
        return f"""
    {omp}
    for (int r = 0; r < {rows}; ++r) {{
      uint16_t* d = xs + {d_row};
      if (r < {ph} || r >= {ph + ih}) {{ __builtin_memset(d, 0, {cols * ds["W"] * 2}); continue; }}
      {f"__builtin_memset(d, 0, {pw * ds['W'] * 2});" if pw else ""}
      xm_n88_bf16_pixels((uint32_t*)(d + {pw * ds["W"]}), xn + {x_row}, {ss["C"]}L, {ic}, {iw});
      {tail}
    }}"""

    @staticmethod
    def _prefetch(b: dict[str, int]) -> tuple[str, str]:
        """C statements before a chunk's units and per unit: the filters the next chunk reads (this
        tile's next input channels; after its last chunk of its last unit block, the next tile's
        first ones), requested into L2 a slice per unit so that the requests spread over the chunk.
        ``b``: the loop bounds and filter strides (pairs) of :meth:`render`."""
        before = f"""
        const char* pf = 0;
        int pf_nv = 0, pf_lines = 0, pf_at = 0;
        if (k0 + {b["kc"]} < {b["nk"]}) {{
          const int pk = {b["nk"]} - k0 - {b["kc"]} < {b["kc"]} ? {b["nk"]} - k0 - {b["kc"]} : {b["kc"]};
          pf = (const char*)(w + (long)gg * {b["w_g"]}L + (long)(j0 / 2) * {b["w_j"]}L
                             + (long)(k0 + {b["kc"]}) * {b["w_k"]}L);
          pf_nv = jv, pf_lines = (int)(((long)pk * {b["w_k"]}L * 4 + 63) / 64);
        }} else if (ub + 1 == {b["nub"]} && t + 1 < {b["all"]}) {{
          const int g2 = (t + 1) / {b["tiles"]}, j2 = ((t + 1) % {b["tiles"]}) * {b["tile_blocks"]};
          const int nb2 = {b["njb"]} - j2 < {b["tile_blocks"]} ? {b["njb"]} - j2 : {b["tile_blocks"]};
          const int pk = {b["nk"]} < {b["kc"]} ? {b["nk"]} : {b["kc"]};
          pf = (const char*)(w + (long)g2 * {b["w_g"]}L + (long)(j2 / 2) * {b["w_j"]}L);
          pf_nv = (nb2 + 1) / 2, pf_lines = (int)(((long)pk * {b["w_k"]}L * 4 + 63) / 64);
        }}
        const int pf_total = pf_nv * pf_lines, pf_units = u1 - ub * {b["ublk"]};
        const int pf_per = (pf_total + pf_units - 1) / pf_units;"""
        unit = f"""
          for (int q = 0; q < pf_per && pf_at < pf_total; ++q, ++pf_at)
            _mm_prefetch(pf + (long)(pf_at / pf_lines) * {b["w_j"] * 4}L + (long)(pf_at % pf_lines) * 64,
                         _MM_HINT_T1);"""
        return before, unit

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        rows, cols, sub = self._source(p)
        n, ic, oc, g = p["n"], p["ic"], p["oc"], p["groups"]
        fh, fw, dh, dw = p["fh"], p["fw"], p["dh"], p["dw"]
        sh, sw = (1, 1) if sub else (p["sh"], p["sw"])
        oh, ow = p["oh"], p["ow"]
        icg, ocg = ic // g, oc // g
        spec, block, outer = self._block(p)
        pairs = block // 2
        colpairs = self._colpairs(p)
        if colpairs:
            fw = 1  # the window's columns are the pairs of one block, a block per channel
        xs = spec.dim_strides((1, ic, rows, cols))  # bfloat16 elements
        pointwise = (fh, fw, sh, sw) == (1, 1, 1, 1) and (p["ph"], p["pw"]) == (0, 0)
        if pointwise:
            # pixel to pixel: the plane is one row of H * W columns (W is contiguous in H)
            oh, ow, cols = 1, oh * ow, rows * cols
            xs = spec.dim_strides((1, ic, 1, cols))
        x_k, x_kh, x_kw = xs[outer] // 2, xs["H"] * dh // 2, xs["W"] * dw // 2  # in bfloat16 pairs
        x_ow, x_row = xs["W"] * sw // 2, xs["H"] * sh // 2
        out_shape = (n, oc, oh, ow)
        ys = strides(Layout.NCHW88, out_shape)
        njb, nk = ocg // VEC, icg if colpairs else -(-icg // block)
        ocp = -(-ocg // 16) * 16
        # pair_filters' [G][OCp/16][IC/G/block][R][S][block/2][16][2], in pairs
        w_kw, w_kh = pairs * 16, fw * pairs * 16
        w_k = fh * w_kh
        w_j, w_g = nk * w_k, ocp // 16 * nk * w_k
        nvec = ocp // 16
        jmax, imax = TILE_POINTWISE if pointwise and nvec >= POINTWISE_MIN_VECTORS else TILE
        jmax = min(jmax, nvec)
        tile_blocks = 2 * jmax
        tiles = -(-njb // tile_blocks)
        tpr = -(-ow // imax)
        narrow, wide = divmod(ow, tpr)
        widths = [narrow + 1, narrow] if wide else [narrow]
        step_bytes = tile_blocks * VEC * block * fh * fw * 2
        kc = max(1, min(nk, WCHUNK_BYTES_BF16 // step_bytes))
        kc = -(-nk // -(-nk // kc))
        units = oh * tpr
        region = omp_parallel(n * oc * oh * ow * icg * fh * fw, "parallel")
        ublk = -(-units // -(-units // UNITS_BF16))
        if region:
            ublk = balanced_block(g * tiles, units, ublk)
        nub = -(-units // ublk)
        args, casts = _signature("float", p)
        x_layout = None if p["mode"] == "hybrid" else Layout.NCHW88
        x_img = offset(x_layout, (n, ic, p["ih"], p["iw"]), {"N": "n"})
        y_img = offset(Layout.NCHW88, out_shape, {"N": "n"})
        y_at = offset(Layout.NCHW88, out_shape, {"C/8": "jb", "H": "r", "W": "q0"})
        x_at = f"(long)gg * {x_k * nk}L + (long)r * {x_row}L + (long)q0 * {x_ow}L"
        w_at = f"(long)gg * {w_g}L + (long)(j0 / 2) * {w_j}L"
        x_b16, res_b16, y_b16 = self._b16(p)
        suffix = f"_r{int(res_b16)}y{int(y_b16)}" if res_b16 or y_b16 else ""
        ukr = f"xm_n88_bf16_conv_c{pairs}_o{x_ow}{suffix}"
        call_args = (
            f"xb + {x_at} + (long)k0 * {x_k}L, w + {w_at} + (long)k0 * {w_k}L, nkc, {fh}, {fw}, {x_k}L, "
            f"{x_kh}L, {x_kw}L, {w_k}L, {w_kh}L, {w_kw}L, {w_j}L, "
            f"{'bias + jb * 8' if p['bias'] else '0'}, "
            f"{f'rn + {y_at}' if p['residual'] else '0'}, yn + {y_at}, {ys['C/8']}L, {ys['W']}L, "
            f"{ACT_CODES[p['act']]}, nb, acc{f', yo + {y_at}' if y_b16 else ''}"
        )
        inner, shared = tile_calls(
            ukr, jmax, widths, call_args, lambda j, i: n88_ukr(j, i, x_ow, pairs, res_b16, y_b16)
        )
        copy = self._copy(p, region)
        prefetch, prefetch_unit = "", ""
        if oc * icg * fh * fw * 2 >= PREFETCH_MIN_BYTES:
            prefetch, prefetch_unit = self._prefetch(
                dict(nk=nk, kc=kc, w_k=w_k, w_j=w_j, w_g=w_g, tiles=tiles, all=g * tiles, njb=njb,
                     tile_blocks=tile_blocks, nub=nub, ublk=ublk)
            )  # fmt: skip
        if x_b16:
            x_decl = f"const uint16_t* xn16 = (const uint16_t*)x_ + {x_img}; (void)x;"
        else:
            x_decl = f"const float* xn = x + {x_img};"
        if y_b16:
            y_decl = (
                f"float* yn = (float*)(ws + {self._copy_bytes(p)}L); "
                f"uint16_t* yo = (uint16_t*)y_ + {y_img}; (void)y;"
            )
        else:
            y_decl = f"float* yn = y + {y_img};"
        if not p["residual"]:
            r_decl = "const float* rn = 0;"
        elif res_b16:
            r_decl = f"const uint16_t* rn = (const uint16_t*)res_ + {y_img}; (void)res;"
        else:
            r_decl = f"const float* rn = res + {y_img};"
        return f"""{COMMON}{COMMON512}{N88_SUPPORT}{shared}
static void {sym}({args}) {{
  {casts}
  uint16_t* xs = (uint16_t*)ws;
  (void)xs;
  {region}
  for (int n = 0; n < {n}; ++n) {{
    {x_decl}
    {y_decl}
    {r_decl}
    (void)rn;
    {copy}
    const float* xb = (const float*)({"xn16" if self._direct(p) else "xs"});
    {omp_for(region, 2, nowait=n == 1)}
    for (int t = 0; t < {g * tiles}; ++t)
    for (int ub = 0; ub < {nub}; ++ub) {{
      const int gg = t / {tiles}, j0 = (t % {tiles}) * {tile_blocks};
      const int jb = gg * {njb} + j0;
      const int nb = {njb} - j0 < {tile_blocks} ? {njb} - j0 : {tile_blocks};
      const int jv = (nb + 1) / 2;
      const int u1 = ub * {ublk} + {ublk} < {units} ? ub * {ublk} + {ublk} : {units};
      for (int k0 = 0; k0 < {nk}; k0 += {kc}) {{
        const int nkc = {nk} - k0 < {kc} ? {nk} - k0 : {kc};
        const int acc = (k0 > 0) | (k0 + {kc} >= {nk}) << 1;{prefetch}
        for (int u = ub * {ublk}; u < u1; ++u) {{
          const int r = u / {tpr}, ut = u % {tpr};{prefetch_unit}
          const int q0 = ut * {narrow} + (ut < {wide} ? ut : {wide}), iv = {narrow} + (ut < {wide});
          {chr(10).join("          " + s for s in inner).lstrip()}
        }}
      }}
    }}
  }}
}}
"""


KERNEL_UNITS = (Conv2dBf16(), MatmulBf16(), MatvecBf16(), ConvNchw88Bf16())

__all__ = ["ISA", "KERNEL_UNITS"]
