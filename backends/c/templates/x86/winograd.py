"""Winograd convolutions for x86 NCHW88: ``F(m x m, 3 x 3)`` (``m`` = 4 or 2) for dense 3x3 stride-1
convolutions, registered on the ``avx2`` ISA (ymm, 16 output channels x 6 tiles per register tile)
and the ``avx512`` ISA (zmm, 32 output channels x 12 tiles). The tuner-only family
``conv2d_winograd_nchw88_other`` (:func:`other_tile`) runs the same kernel with the other tile, and
stride-2 3x3 convolutions through the stride-2 transforms (``(2m + 1)^2`` points over a
``(2m + 1)^2`` patch, :data:`winograd_transforms.STRIDE2_TRANSFORMS`).

``y = A^T [ (G g G^T) . (B^T d B) ] A`` per ``m x m`` output tile ``y`` and ``(m + 2)^2`` input patch
``d``, summed over input channels: the filter transform ``U = G g G^T`` is done ahead of time by
:meth:`ConvWinogradNchw88.pack` (stored as :func:`dialects.layout.winograd_filter_spec`); at run time,
per block of ``TB`` output tiles,

1. input transform: each tile's patch of 8-channel NCHW88 vectors becomes ``A x A`` vectors of
   ``V`` (:func:`dialects.layout.winograd_tile_spec`: per transform point a ``TB x C`` matrix);
2. one GEMM per transform point, ``M[t, k] = sum_c V[t, c] U[c, k]``: output channels in vector
   lanes, tiles broadcast (the NCHW88 direct kernels' register tile); each point's ``V`` and ``M``
   matrices :func:`spread_stride` apart (distinct L1 sets for the transforms' one access per point);
3. output transform, bias, residual and activation, stored straight into the NCHW88 output
   (partial tiles at the bottom / right border store only their valid pixels).

On ``x86-avx512-nchw88+bf16`` :class:`ConvWinogradNchw88Bf16` runs the same kernel on bfloat16
activations (input and residual widened while loaded, the result rounded as stored) where
``kernel-bf16-activations`` makes its neighbours' tensors bfloat16.

The input transform reads a tile's patch straight from the input where it lies inside the image;
a tile over the border (padding, or the last partial tiles) first copies its patch with the zeros
around it into a small buffer (no padded copy of the whole input: 56x56x64 -2%, 28x28x128 and
14x14x256 -3 to -4%). The transforms are straight-line code planned from the transform matrices by
:func:`winograd_transforms.plan_2d` (shared ``E +- O`` row pairs; F(4, 3)'s input transform 156
vector operations instead of 408 term by term: 28x28x128 and 56x56x64 -2 to -5%).

Numerics: ``F(4, 3)`` (points 0, +-1, +-2, 1/2 ... 1/24 in G) loses about two decimal digits against
direct summation; outputs stay within ~1e-5 of their scale (tests: rtol 1e-4, atol 1e-4 x the
output's magnitude); ``F(2, 3)`` is within ~1e-6.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import sym_join
from backends.c.templates.portable.generic import omp_for, omp_parallel
from backends.c.templates.x86.gemm import broadcast_fma
from backends.c.templates.x86.nchw88 import (
    ACT_CODES,
    COMMON,
    VEC,
    _guarded,
    _Nchw88Base,
    _signature,
    conv_nchw88,
    offset,
)
from backends.c.templates.x86.winograd_transforms import TRANSFORMS as TRANSFORMS  # x86_fp16_winograd's
from backends.c.templates.x86.winograd_transforms import VectorOps, plan_2d, transform_filter, transforms
from dialects.layout import SPECS, Layout, winograd_filter_spec, winograd_tile_spec
from passes.lowering.kernels import FULL_EPILOGUE, Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


def _lin(row: Sequence[Fraction], terms: Sequence[str], add: str, sub: str, fma: str, set1: str) -> str:
    """C expression of ``sum row[k] * terms[k]`` with vector intrinsics (zeros dropped)."""
    expr = ""
    for c, t in zip(row, terms, strict=True):
        if c == 0:
            continue
        if not expr:
            expr = t if c == 1 else f"_MUL_({set1}({float(c)!r}f), {t})"
        elif c == 1:
            expr = f"{add}({expr}, {t})"
        elif c == -1:
            expr = f"{sub}({expr}, {t})"
        else:
            expr = f"{fma}({set1}({float(c)!r}f), {t}, {expr})"
    return expr or f"{set1}(0.f)"


# the transforms' vector operations on ymm: one NCHW88 block of 8 channels
TRANSFORM_OPS = VectorOps(
    "__m256", "_mm256_add_ps({a}, {b})", "_mm256_sub_ps({a}, {b})", "_mm256_mul_ps({a}, _mm256_set1_ps({c}))",
    "_mm256_fmadd_ps({b}, _mm256_set1_ps({c}), {a})", "_mm256_setzero_ps()",
)  # fmt: skip


def gemm_ukr(isa: str, vw: int, j: int, i: int, hint: str = "") -> str:
    """``M[i tiles x j vectors] = V[i x K] . U[K x j vectors]``: ``j`` filter vectors of ``vw``
    output channels, ``i`` broadcast tile values per input channel.

    With a ``hint``, step ``k`` prefetches row ``(k * pstep) >> 16`` of ``pf`` (rows ``ldu`` apart):
    the caller's share of the next panel's ``U``, streamed from L3 or memory once per conv, which
    the first register tile of each panel otherwise waits on (ResNet-50's 14x14 F(2, 3) convs 0.90
    -> 0.79 ms, 28x28 F(4, 3) 0.85 -> 0.71 ms, 56x56 0.69 -> 0.62 ms in thread-CPU time; ResNet-18
    -7%). Each of a panel's passes prefetches its share at an even rate over all its ``K`` steps
    rather than the whole next panel during the first pass, which asks for two lines every ten-odd
    cycles, faster than one core's misses return from L3, and stalls that pass (measured with U
    and the scratch cold, as in the model: 14x14x256 -6 to -15%, 28x28x128 -5 to -7%)."""
    vt, ld, st, fma = {
        8: ("__m256", "_mm256_loadu_ps", "_mm256_storeu_ps", "_mm256_fmadd_ps"),
        16: ("__m512", "_mm512_loadu_ps", "_mm512_storeu_ps", "_mm512_fmadd_ps"),
    }[vw]
    bcast = "_mm256_broadcast_ss(v + {o} + k)" if vw == 8 else "_mm512_set1_ps(v[{o} + k])"
    zero = "_mm256_setzero_ps()" if vw == 8 else "_mm512_setzero_ps()"
    name = f"xm_wino_{isa}_gemm{hint.lower().replace('_mm_hint', '')}_{j}x{i}"
    lines = [
        f"static void {name}(const float* restrict v, const float* restrict u, float* restrict mo,",
        "                    long K, long ldv, long ldu, long ldm, const float* pf, long pstep) {",
    ]
    prefetch = [f"    _mm_prefetch((const char*)(pr + {o}), {hint});" for o in range(0, j * vw, 16) if hint]
    lines += [f"  {vt} c{a}_{b} = {zero};" for a in range(j) for b in range(i)]
    lines += ["  for (long k = 0; k < K; ++k) {", "    const float* up = u + k * ldu;"]
    if prefetch:
        lines += ["    const float* pr = pf + ((k * pstep) >> 16) * ldu;", *prefetch]
    else:
        lines.append("    (void)pf; (void)pstep;")
    lines += broadcast_fma(
        vt,
        [f"{ld}(up + {a * vw})" for a in range(j)],
        [bcast.format(o=f"{b} * ldv") for b in range(i)],
        lambda b, a: f"c{a}_{b}",
        lambda x, w, acc: f"{fma}({w}, {x}, {acc})",
        vec="w",
        scalar="x",
    )
    lines.append("  }")
    lines += [f"  {st}(mo + {b} * ldm + {a * vw}, c{a}_{b});" for a in range(j) for b in range(i)]
    lines.append("}")
    return "\n".join(lines) + "\n"


# Winograd F(m x m, 3 x 3) where it beats the direct kernels (measured per layer with
# bench/bench_x86.py's profiles on AVX2 and AVX-512: F(4, 3) 1.7-5x faster from 8x8 outputs and 16
# channels up). Below 16x16 outputs F(4, 3)'s tiles waste a quarter of the work or more (14x14 is
# 16x16 of tiles) and its U is 4x the filter, against F(2, 3)'s 16/9: F(2, 3) wins there (AVX-512,
# ResNet-50's 14x14 256-channel conv: 0.85 ms F(4, 3), 0.77 ms F(2, 3)), except with very many
# channels: ResNet's 7x7x512 F(2, 3) U (16 MiB) streams from memory, slower than the direct kernel's
# 9 MiB of filters (1.5 ms direct, 2.3 ms F(2, 3)); from 10x10 (9 tiles) up F(4, 3) is still
# ahead of direct while its U (36 x IC x OC floats) stays within 32 MiB (384 channels, 21 MiB: 10x10
# 1.03 ms F(4, 3), 1.27 ms direct; 14x14 2.20 / 2.46 ms; 8x8 0.91 / 0.84 ms), not with 512 channels'
# 38 MiB (8x8 2.09 / 1.46 ms, 10x10 2.90 / 2.26 ms, 14x14 6.39 / 4.35 ms; thread-CPU, AVX-512)
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_F2_MAX_MACS = 256 * 256  # IC x OC of an F(2, 3) conv
WINOGRAD_F4_MIN_SPATIAL = 16  # F(4, 3) from here; F(2, 3) below where the channels allow
WINOGRAD_F4_FALLBACK_SPATIAL = 10  # F(4, 3) from here where F(2, 3)'s U is too large ...
WINOGRAD_F4_FALLBACK_MAX_MACS = 8 * 1024 * 1024 // 36  # ... and F(4, 3)'s U within 32 MiB
WINOGRAD_F2_MIN_SPATIAL = 4
# the stride-2 F(2, 3) from here: a 7x7 output's 4x4 tiles (8x8) do 400 products per channel pair
# where direct does 441 (ResNet-50's 14 -> 7 x 512: 2.42 ms against direct 2.37, thread-CPU, EPYC);
# the stride-2 F(4, 3) from 16x16 (56 -> 28 x 128: 1.78 ms, F(2, 3) 1.97, direct 2.52; 28 -> 14 x
# 256, whose 4x4 tiles cover 16x16: F(4, 3) 2.77, F(2, 3) 1.71, direct 2.31)
STRIDE2_MIN_SPATIAL = 8
STRIDE2_F4_MIN_SPATIAL = 16
L1_SETS, LINE_FLOATS = 64, 16  # the L1D's sets (48 KB, 12 ways) and floats per 64-byte line


def spread_stride(floats: int, count: int) -> int:
    """``floats`` rounded up to whole cache lines, plus the fewest lines that put ``count`` points
    ``stride`` apart into distinct L1 sets: the input transform stores one vector into each of the
    ``(m + 2)^2`` points' ``V`` at once and the output transform loads one from each point's ``M``;
    with a packed stride that is a multiple of 4 KiB (F(4, 3) at 14x14x256: 16 KiB, all 36 in one
    12-way set) they evict each other: its transforms 0.087 -> 0.051 ms, 12x12x512's 0.099 -> 0.071
    ms; ResNet's packed strides (4, 8, 16 lines mod 64) spread over 16, 8, 4 sets: -2 to -3%)."""
    lines = -(-floats // LINE_FLOATS)
    spread = min(count, L1_SETS)
    for pad in range(L1_SETS):
        if len({(k * (lines + pad)) % L1_SETS for k in range(spread)}) == spread:
            return (lines + pad) * LINE_FLOATS
    return lines * LINE_FLOATS


def _res_arg(p: dict[str, Any]) -> int:
    """The residual's argument index (after the input, the filters and a bias)."""
    return 3 if p["bias"] else 2


def winograd_tile(p: dict[str, Any]) -> int | None:
    """The Winograd output tile ``m`` for a dense NCHW88 conv's parameters (None: direct)."""
    if p.get("mode") != "dense" or p["dtype"] != "f32":
        return None
    if (p["fh"], p["fw"], p["sh"], p["sw"], p["dh"], p["dw"]) != (3, 3, 1, 1, 1, 1):
        return None
    if min(p["ic"], p["oc"]) < WINOGRAD_MIN_CHANNELS:
        return None
    spatial = min(p["oh"], p["ow"])
    if spatial >= WINOGRAD_F4_MIN_SPATIAL:
        return 4
    if spatial >= WINOGRAD_F2_MIN_SPATIAL and p["ic"] * p["oc"] <= WINOGRAD_F2_MAX_MACS:
        return 2
    fallback = spatial >= WINOGRAD_F4_FALLBACK_SPATIAL and p["ic"] * p["oc"] <= WINOGRAD_F4_FALLBACK_MAX_MACS
    return 4 if fallback else None


def other_tile(p: dict[str, Any]) -> int | None:
    """The Winograd tile :func:`winograd_tile` does not pick, for the tuner to time against it (None:
    no other one): F(4, 3) where it picks F(2, 3), F(2, 3) where F(4, 3) is its fallback below 16x16
    outputs, F(2, 3) where it keeps a conv direct for its channel count, and for stride-2 3x3 convs
    the stride-2 F(2, 3) from :data:`STRIDE2_MIN_SPATIAL` outputs, F(4, 3) from
    :data:`STRIDE2_F4_MIN_SPATIAL` (:data:`winograd_transforms.STRIDE2_TRANSFORMS`: 25 products per
    2x2 outputs instead of 36, 81 per 4x4 instead of 144). Its thresholds were set
    on a CPU with two 512-bit FMA pipes; on one with a single one (Zen 4) Winograd's saved
    multiplications weigh more against its transforms and U's traffic: ResNet-50's 14x14x256 convs
    ran F(4, 3) 0.76-0.83 ms against F(2, 3)'s 0.97-1.01, its 7x7x512 ones F(2, 3) 1.33-1.53 against
    direct 2.1 (EPYC, 1 thread, each layer's fastest of 30 model runs)."""
    if p.get("mode") != "dense" or p["dtype"] != "f32" or min(p["ic"], p["oc"]) < WINOGRAD_MIN_CHANNELS:
        return None
    spatial = min(p["oh"], p["ow"])
    if (p["fh"], p["fw"], p["sh"], p["sw"], p["dh"], p["dw"]) == (3, 3, 2, 2, 1, 1):
        return None if spatial < STRIDE2_MIN_SPATIAL else 4 if spatial >= STRIDE2_F4_MIN_SPATIAL else 2
    if (p["fh"], p["fw"], p["sh"], p["sw"], p["dh"], p["dw"]) != (3, 3, 1, 1, 1, 1):
        return None
    m = winograd_tile(p)
    if m == 2:
        return 4
    if m is None:
        return 2 if spatial >= WINOGRAD_F2_MIN_SPATIAL else None
    return 2 if spatial < WINOGRAD_F4_MIN_SPATIAL else None


class ConvWinogradNchw88(_Nchw88Base):
    """``conv2d_winograd_nchw88``: dense 3x3 stride-1 NCHW88 convolution by ``F(m x m, 3 x 3)`` (stride
    2 as well with the parameter ``s``, which only :class:`ConvWinogradNchw88Other` sets)."""
    # F(2, 3) below 16x16 outputs, F(4, 3) above
    examples = (
        E.conv_case((2, 40, 14, 13, 56, 3, 1, 1, 1, 1, "residual")),
        E.conv_case((1, 64, 20, 20, 80, 3, 1, 1, 1, 1, "relu")),
    )

    family = "conv2d_winograd_nchw88"
    isa = "avx2"
    priority = 290  # ahead of the direct conv2d_nchw88 where winograd_tile says it wins
    epilogues = {"float32": FULL_EPILOGUE}  # float32 only (winograd_tile); xm_n88_act per output vector
    vw: ClassVar[int] = 8  # output channels per filter vector
    gemm_isa: ClassVar[str] = "avx2"  # names the register tiles (gemm_ukr)
    jmax: ClassVar[int] = 2  # filter vectors per register tile (U's panel: jmax * vw output channels)
    imax: ClassVar[int] = 6  # tiles per register tile at most
    budget: ClassVar[int] = 768 * 1024  # bytes of V + M per tile block (L2-resident)
    l2: ClassVar[int] = 2 * 1024 * 1024  # V + M of every tile up to this: one block

    def tile_of(self, p: dict[str, Any]) -> int | None:
        """The output tile ``m`` of this family for a dense conv's parameters (None: no match)."""
        return winograd_tile(p)

    def match(self, op: Operation) -> Lowered | None:
        lowered = conv_nchw88(op, chan=False)
        if lowered is None:
            return None
        m = self.tile_of(lowered.params)
        if m is None:
            return None
        drop = ("fh", "fw", "sh", "sw", "dh", "dw", "mode", "groups")
        params = {k: v for k, v in lowered.params.items() if k not in drop}
        params["m"] = m
        if lowered.params["sh"] != 1:  # the stride-2 transforms (other_tile)
            params["s"] = lowered.params["sh"]
        return Lowered(params, lowered.operands)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, f"f{p['m']}", f"s{p['s']}" if p.get("s", 1) != 1 else "",
            f"n{p['n']}", f"ic{p['ic']}", f"{p['ih']}x{p['iw']}",
            f"oc{p['oc']}", f"p{p['ph']}x{p['pw']}", p["dtype"], "bias" if p["bias"] else "",
            "res" if p["residual"] else "", p["act"].upper() if p["act"] != "identity" else "",
        )  # fmt: skip

    def geometry(self, p: dict[str, Any]) -> dict[str, int]:
        m = p["m"]
        a = len(transforms(m, p.get("s", 1))[0])  # points per axis (= the patch's inputs)
        th, tw = -(-p["oh"] // m), -(-p["ow"] // m)
        panel = self.jmax * self.vw
        icp, ocp = -(-p["ic"] // VEC) * VEC, -(-p["oc"] // panel) * panel
        per_tile = a * a * (icp + ocp) * 4
        # every block streams all of U once: one block when V and M of all tiles fit in L2,
        # otherwise blocks of ``budget`` bytes
        budget = self.l2 if th * tw * per_tile <= self.l2 else self.budget
        groups = max(1, min(-(-th * tw // self.imax), budget // (per_tile * self.imax)))
        tb = groups * self.imax
        nblk = -(-th * tw // tb)
        tb = -(-th * tw // nblk)  # balance the blocks
        # tiles per register tile: the block's tiles shared evenly by as few register tiles as
        # imax allows (49 tiles: 5 x 10, not 4 x 12 + 1, whose last tile is one broadcast per
        # 2 FMAs; ResNet-50's 14x14 256-channel conv 0.95 -> 0.78 ms)
        ib = -(-tb // -(-tb // self.imax))
        return {
            "A": a, "TH": th, "TW": tw, "T": th * tw, "TB": tb, "IB": ib, "NBLK": nblk, "ICP": icp,
            "OCP": ocp,
            "VPS": spread_stride(tb * icp, a * a), "MPS": spread_stride(tb * ocp, a * a),
        }  # fmt: skip

    def _sizes(self, p: dict[str, Any]) -> tuple[int, int]:
        geo = self.geometry(p)
        v = geo["A"] ** 2 * geo["VPS"]
        mm = geo["A"] ** 2 * geo["MPS"]
        return (-(-v // 16) * 16, -(-mm // 16) * 16)

    def workspace(self, p: dict[str, Any]) -> int:
        return sum(self._sizes(p)) * 4

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return super().pack(operand, array, p)
        logical = SPECS[Layout.KCRSc8k8].unpack(np.asarray(array, np.float32))
        u = transform_filter(logical[: p["oc"], : p["ic"]], p["m"], stride=p.get("s", 1))
        panel = self.jmax * self.vw
        stride = f"_s{p['s']}" if p.get("s", 1) != 1 else ""  # another transform: another packing
        packed = np.ascontiguousarray(winograd_filter_spec(panel).pack(u))
        return packed, f"winograd_f{p['m']}{stride}_k{panel}"

    def prefetch_hint(self, icp: int) -> str:
        """Where the GEMM prefetches the next panel's ``U``: L1 while two panels fit beside the
        tiles' ``V`` rows, else L2 (a 256-channel panel is 32 KiB: two evicted each other)."""
        return "_MM_HINT_T0" if 2 * icp * self.jmax * self.vw * 4 <= 32 * 1024 else "_MM_HINT_T1"

    def support(self, em: CEmitter) -> str:
        return COMMON

    @staticmethod
    def _b16(p: dict[str, Any]) -> tuple[bool, bool, bool]:
        """Whether the input, the residual and the result are bfloat16 tensors (only
        :class:`ConvWinogradNchw88Bf16`'s definitions have ``bf16_args`` / ``bf16_outs``)."""
        args = p.get("bf16_args", ())
        return 0 in args, bool(p["residual"]) and _res_arg(p) in args, 0 in p.get("bf16_outs", ())

    @staticmethod
    def _bf16_support(reads_b16: bool) -> str:
        """The bfloat16 load helper (guarded: conv2d_nchw88_bf16 emits it too); nothing for float32."""
        if not reads_b16:
            return ""
        from backends.c.templates.x86.x86_avx512_bf16 import N88_SUPPORT  # imports this module

        return N88_SUPPORT

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        m, n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("m", "n", "ic", "ih", "iw", "oc", "oh", "ow"))
        ph, pw = p["ph"], p["pw"]
        geo = self.geometry(p)
        a, tw, nt_tiles, tb, icp, ocp = geo["A"], geo["TW"], geo["T"], geo["TB"], geo["ICP"], geo["OCP"]
        ib = geo["IB"]
        stride = p.get("s", 1)
        bt, _, at = transforms(m, stride)
        v_n, _ = self._sizes(p)
        args, casts = _signature("float", p)
        # every activation / filter / scratch offset from layout.py
        xshape, yshape = (n, icp, ih, iw), (n, -(-oc // VEC) * VEC, oh, ow)
        x_img = offset(Layout.NCHW88, xshape, {"N": "n"})
        y_img = offset(Layout.NCHW88, yshape, {"N": "n"})
        x_at = offset(Layout.NCHW88, xshape, {"C/8": "cb", "H": "r0", "W": "c0"})
        px_at = offset(Layout.NCHW88, xshape, {"C/8": "cb", "H": "r0 + i", "W": "c0 + j"})
        x_h = SPECS[Layout.NCHW88].dim_strides(xshape)["H"]
        d_w = SPECS[Layout.NCHW88].dim_strides(xshape)["W"]
        panel = self.jmax * self.vw
        vspec, uspec = winograd_tile_spec(), winograd_filter_spec(panel)
        # the points' T x C matrices a spread stride apart (distinct L1 sets), not packed
        vps, mps = geo["VPS"], geo["MPS"]
        vst = {**vspec.dim_strides((a, a, tb, icp)), "R": a * vps, "S": vps}
        mst = {**vspec.dim_strides((a, a, tb, ocp)), "R": a * mps, "S": mps}
        ust = uspec.dim_strides((oc, ic, a, a))
        y_at = offset(Layout.NCHW88, yshape, {"C/8": "ob", "H": "r", "W": "q"})
        ysw = SPECS[Layout.NCHW88].dim_strides(yshape)["W"]
        ysh = SPECS[Layout.NCHW88].dim_strides(yshape)["H"]
        x_b16, r_b16, y_b16 = self._b16(p)
        load = "xm_n88_bf16_ld8" if x_b16 else "_mm256_loadu_ps"  # bfloat16 widened exactly
        rload = "xm_n88_bf16_ld8" if r_b16 else "_mm256_loadu_ps"
        # input transform: d (A x A vectors) -> v
        in_t = [
            f"const __m256 d{i}_{j} = {load}(dp + {i} * dh + {j * d_w});" for i in range(a) for j in range(a)
        ]
        in_t += TRANSFORM_OPS.statements(plan_2d(bt, "d", "v"))
        in_t += [
            f"_mm256_storeu_ps(vp + {i * vst['R'] + j * vst['S']}, v{i}_{j});"
            for i in range(a)
            for j in range(a)
        ]
        # output transform: mm (A x A vectors) -> o (m x m), epilogue, store
        out_t = [
            f"const __m256 mm{i}_{j} = _mm256_loadu_ps(mp + {i * mst['R'] + j * mst['S']});"
            for i in range(a)
            for j in range(a)
        ]
        out_t += TRANSFORM_OPS.statements(plan_2d(at, "mm", "o"))
        for i in range(m):
            for j in range(m):
                guard = f"if ({i} < rv && {j} < qv) "
                res = (
                    f"v = _mm256_add_ps(v, {rload}(rp + {i * ysh + j * ysw}));"
                    if p["residual"]
                    else ""
                )
                bias = "v = _mm256_add_ps(v, bv);" if p["bias"] else ""
                at = f"yp + {i * ysh + j * ysw}"
                # a bfloat16 result rounded once, to nearest even (conv2d_nchw88_bf16's rounding)
                store = f"_mm_storeu_si128((__m128i*)({at}), (__m128i)_mm256_cvtneps_pbh(v));"
                out_t.append(
                    f"{guard}{{ __m256 v = o{i}_{j}; {bias} {res} v = xm_n88_act(v, {ACT_CODES[p['act']]}); "
                    + (store if y_b16 else f"_mm256_storeu_ps({at}, v);")
                    + " }"
                )
        hint = self.prefetch_hint(icp)
        gname = f"xm_wino_{self.gemm_isa}_gemm{hint.lower().replace('_mm_hint', '')}"
        gemm_calls = []
        for j in range(1, self.jmax + 1):
            call = f"(vb, ub, mb, {icp}, {vst['N']}, {ust['C']}, {mst['N']}, pf, pstep); break;"
            variants = " ".join(f"case {i}: {gname}_{j}x{i}{call}" for i in range(1, ib + 1))
            gemm_calls.append(f"if (jv == {j}) switch (iv) {{ {variants} default: break; }}")
        kt = ocp // panel  # output-channel panels per point
        ocv = -(-oc // self.vw) * self.vw  # output channels in whole filter vectors
        ind = "\n          "
        # a bfloat16 input / result: the same element offsets in uint16_t (x_ / y_ untyped)
        xt, yt = ("uint16_t" if x_b16 else "float"), ("uint16_t" if y_b16 else "float")
        rt = "uint16_t" if r_b16 else "float"
        rn = "res + " + y_img if p["residual"] else "0"
        if r_b16:
            rn = f"(const uint16_t*)res_ + {y_img}; (void)res"
        xn = f"(const uint16_t*)x_ + {x_img}; (void)x" if x_b16 else f"x + {x_img}"
        yn = f"(uint16_t*)y_ + {y_img}; (void)y" if y_b16 else f"y + {y_img}"
        if x_b16:
            border = (
                "__m128i d = _mm_setzero_si128();",
                f"d = _mm_loadu_si128((const __m128i*)(xn + {px_at}));",
                f"_mm_storeu_si128((__m128i*)(pt + (i * {a} + j) * {VEC}), d);",
            )
        else:
            border = (
                "__m256 d = _mm256_setzero_ps();",
                f"d = _mm256_loadu_ps(xn + {px_at});",
                f"_mm256_storeu_ps(pt + (i * {a} + j) * {VEC}, d);",
            )
        # one region for every tile batch's three steps (a barrier between steps; none after the
        # output transform: the next batch's GEMM, which rewrites M, waits behind the input
        # transform's barrier, and that transform writes only V)
        region = omp_parallel(n * oc * oh * ow * ic * 9, "parallel")
        par2 = omp_for(region, 2)
        # the register tiles this conv calls, emitted once per translation unit
        ukrs = "".join(
            _guarded(f"{gname}_{j}x{i}".upper(), gemm_ukr(self.gemm_isa, self.vw, j, i, hint))
            for j in range(1, self.jmax + 1)
            for i in range(1, ib + 1)
        )
        return f"""{self._bf16_support(x_b16 or r_b16)}{ukrs}
static void {sym}({args}) {{
  {casts}
  float* V = (float*)ws;
  float* Mb = V + {v_n};
  {region}
  for (int n = 0; n < {n}; ++n) {{
    const {xt}* xn = {xn};
    {yt}* yn = {yn};
    const {rt}* rn = {rn};
    (void)rn;
    for (int t0 = 0; t0 < {nt_tiles}; t0 += {tb}) {{
      const int tn = {nt_tiles} - t0 < {tb} ? {nt_tiles} - t0 : {tb};
      {par2}
      for (int tl = 0; tl < {tb}; ++tl)
        for (int cb = 0; cb < {icp // VEC}; ++cb) {{
          float* vp = V + (long)tl * {vst["N"]} + cb * {VEC};
          if (tl >= tn) {{
            for (int e = 0; e < {a * a}; ++e)
              _mm256_storeu_ps(vp + (long)e * {vst["S"]}, _mm256_setzero_ps());
            continue;
          }}
          const int th = (t0 + tl) / {tw}, tw = (t0 + tl) % {tw};
          const int r0 = th * {m * stride} - {ph}, c0 = tw * {m * stride} - {pw};
          /* the patch straight from x inside the image; tiles over its border copy it with the
             padding's zeros into pt first */
          {xt} pt[{a * a * VEC}];
          const {xt}* dp = pt;
          long dh = {a * VEC};
          if (r0 >= 0 && r0 + {a} <= {ih} && c0 >= 0 && c0 + {a} <= {iw}) {{
            dp = xn + {x_at};
            dh = {x_h};
          }} else {{
            for (int i = 0; i < {a}; ++i)
              for (int j = 0; j < {a}; ++j) {{
                {border[0]}
                if (r0 + i >= 0 && r0 + i < {ih} && c0 + j >= 0 && c0 + j < {iw})
                  {border[1]}
                {border[2]}
              }}
          }}
          {ind.join(in_t)}
        }}
      {par2}
      for (int e = 0; e < {a * a}; ++e)
        for (int kt = 0; kt < {kt}; ++kt) {{
          const int k0 = kt * {self.jmax * self.vw};
          const int jv = ({ocv} - k0) / {self.vw} < {self.jmax} ? ({ocv} - k0) / {self.vw} : {self.jmax};
          const float* ub = w + (long)e * {ust["S"]} + (long)kt * {ust[f"K/{panel}"]};
          /* the next panel's U (next in memory: the next point's first after the last panel), a
             share of its rows per pass over this panel's tiles (gemm_ukr) */
          const long passes = (tn + {ib} - 1) / {ib}, pf_rows = ({icp} + passes - 1) / passes;
          const long pstep = (pf_rows << 16) / {icp};
          for (int i0 = 0; i0 < tn; i0 += {ib}) {{
            const int iv = tn - i0 < {ib} ? tn - i0 : {ib};
            const float* vb = V + (long)e * {vst["S"]} + (long)i0 * {vst["N"]};
            const float* pf = ub + {ust[f"K/{panel}"]} + (i0 / {ib}) * pf_rows * {ust["C"]};
            float* mb = Mb + (long)e * {mst["S"]} + (long)i0 * {mst["N"]} + k0;
            {ind.join(gemm_calls)}
          }}
        }}
      {omp_for(region, 2, nowait=True)}
      for (int tl = 0; tl < tn; ++tl)
        for (int ob = 0; ob < {-(-oc // VEC)}; ++ob) {{
          const int th = (t0 + tl) / {tw}, tw = (t0 + tl) % {tw};
          const int r = th * {m}, q = tw * {m};
          const int rv = {oh} - r, qv = {ow} - q;
          const float* mp = Mb + (long)tl * {mst["N"]} + ob * {VEC};
          {yt}* yp = yn + {y_at};
          const {rt}* rp = {"rn + " + y_at if p["residual"] else "0"};
          (void)rp; (void)rv; (void)qv;
          {"const __m256 bv = _mm256_loadu_ps(bias + ob * 8);" if p["bias"] else ""}
          {ind.join(out_t)}
        }}
    }}
  }}
}}
"""


class ConvWinogradNchw88Avx512(ConvWinogradNchw88):
    """The AVX-512 variant: zmm filter vectors of 16 output channels, 2 x 12 register tiles."""

    isa = "avx512"
    gemm_isa = "avx512"
    vw = 16
    jmax, imax = 2, 12


class ConvWinogradNchw88Bf16(ConvWinogradNchw88Avx512):
    """:class:`ConvWinogradNchw88Avx512` on ``x86-avx512-nchw88+bf16`` (ISA ``avx512bf16``, searched
    first there), which can also read its input and store its result as bfloat16 NCHW88 tensors
    (a :class:`~passes.lowering.bf16_activations.Bf16ActivationUnit`): ``kernel-bf16-activations``
    then keeps the bfloat16 tensors of the direct bfloat16 layers around it instead of converting
    to float32 and back (ResNet-50's 56x56 and 28x28 3x3 layers between 1x1 ones; ResNet-18's
    Winograd-to-Winograd tensors and block outputs, read as input and residual). The input
    transform widens the bfloat16 patch exactly while loading it (no copy), the epilogue reads a
    bfloat16 residual the same way and rounds the result once to nearest even; filters,
    transforms, GEMM and epilogue stay float32, so the one change to the float32 kernel's numerics
    is the rounding of its input, residual and result, as a direct bfloat16 convolution's input is
    rounded. Without ``bf16_args`` / ``bf16_outs`` its code is the float32 kernel's."""

    isa = "avx512bf16"  # x86_avx512_bf16.ISA (that module imports this one)

    def symbol(self, p: dict[str, Any]) -> str:
        tags = zip(("xb", "rb", "yb"), self._b16(p), strict=True)
        return sym_join(super().symbol(p), *(t for t, on in tags if on))

    def bf16_reads(self, p: dict[str, Any]) -> tuple[int, ...]:
        """The input (always NCHW88 blocks) and the residual (read by the epilogue)."""
        return (0, *((_res_arg(p),) if p["residual"] else ()))

    def bf16_writes(self, p: dict[str, Any]) -> tuple[int, ...]:
        """The result, in whole 8-channel blocks (as conv2d_nchw88_bf16)."""
        return (0,) if p["oc"] % VEC == 0 else ()


class ConvWinogradNchw88Other(ConvWinogradNchw88):
    """``conv2d_winograd_nchw88_other``: the same kernel with the tile :func:`other_tile` gives, ranked
    after the direct kernel so that only tuning (``compile(tune=True)``) picks it."""

    examples = ()
    examples_reason = (
        "ranked after conv2d_nchw88, which accepts every conv this family does: only a tuning choice "
        "picks it (tests/test_codegen_winograd.py: test_other_tile_through_a_tuning_choice)"
    )
    family = "conv2d_winograd_nchw88_other"
    priority = 275

    def tile_of(self, p: dict[str, Any]) -> int | None:
        return other_tile(p)


class ConvWinogradNchw88OtherAvx512(ConvWinogradNchw88Other):
    """:class:`ConvWinogradNchw88Other` with :class:`ConvWinogradNchw88Avx512`'s register tiles."""

    isa = "avx512"
    gemm_isa = "avx512"
    vw = 16
    jmax, imax = 2, 12


KERNEL_UNITS = (
    ConvWinogradNchw88(),
    ConvWinogradNchw88Avx512(),
    ConvWinogradNchw88Other(),
    ConvWinogradNchw88OtherAvx512(),
    ConvWinogradNchw88Bf16(),
)
