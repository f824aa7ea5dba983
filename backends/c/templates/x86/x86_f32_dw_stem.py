"""The float32 3x3 stride-2 first layer on AVX-512 (``conv2d_nchw88_stem3x3``): MobileNetV2's and
ShuffleNetV2's stem, a few plain NCHW input channels (RGB) to NCHW88 output channels, ahead of the
general ``hybrid`` mode of ``conv2d_nchw88`` (:mod:`backends.c.templates.x86.nchw88`), which stays for
other windows (ResNet's 7x7) and the AVX2 target.

The general kernel copies the image into a zero-padded workspace and runs its taps as run-time
loops in a shared micro-kernel. Here the input is read in place: a row above the image is a shared
row of zeros, border columns are peeled with their out-of-range taps dropped at generation time, and
every tap (``ic`` x 3 x 3, all constants) is unrolled. A register tile is all the output channels
(``ceil(oc / 16)`` zmm of 16, filters repacked as ``K/16 R S C K%16``) x up to 12 output columns:
per input row, its three taps' filter vectors stay in registers while each input column is
broadcast once for the two or three accumulators it feeds (24 accumulators for 32 channels). The
bias is the accumulators' initial value (no residual is fused: nothing adds to a stem's output);
stores split each zmm into its two NCHW88 blocks (the second dropped past the last block). Threads
share (image, output row) items statically: results are bit-identical on any thread count.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import conv_sym, epilogue_sym, sym_join
from backends.c.templates.portable.generic import omp_parallel
from backends.c.templates.x86.nchw88 import (
    ACT_CODES,
    COMMON,
    COMMON512,
    DENSE_FILTERS,
    EPILOGUES,
    K16_FILTERS,
    VEC,
    offset,
    strides,
)
from backends.c.templates.x86.x86_f32_dw import ACT512, InPlaceConv3x3, K, in_place_3x3, interior_columns
from dialects.layout import SPECS, Layout
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ZLANES = 16
REGISTERS = 32
MAX_COLUMNS = 12


def tile_columns(oc: int) -> int:
    """Output columns per register tile for ``oc`` channels: one accumulator per zmm of channels
    and column, plus a filter row's three taps per zmm and one broadcast input, in 32 registers."""
    nz = -(-oc // ZLANES)
    return max(1, min(MAX_COLUMNS, (REGISTERS - 1 - K * nz) // nz))


def _tile(nz: int, ic: int, cols: int, pw: int, iw: int, q0: str, wst: dict[str, int]) -> list[str]:
    """C statements computing ``cols`` output columns from ``q0`` (a C expression) into
    ``a{zmm}_{col}``: per input row (channel, filter row), its three taps' filter vectors are loaded
    and each input column the tile reads is broadcast once and fed to every accumulator whose tap it
    is (stride 2: an even column to two). ``iw`` > 0 drops the taps outside ``[0, iw)`` (border
    columns: ``q0`` a constant)."""
    lines = [f"    __m512 a{j}_{i} = bz{j};" for j in range(nz) for i in range(cols)]
    for c in range(ic):
        for kh in range(K):
            uses: dict[int, list[tuple[int, int]]] = {}  # input column (from q0 * 2 - pw) -> (col, kw)
            for i in range(cols):
                for kw in range(K):
                    if iw and not 0 <= (int(q0) + i) * 2 - pw + kw < iw:
                        continue
                    uses.setdefault(2 * i + kw, []).append((i, kw))
            if not uses:
                continue
            lines.append("    {")
            for kw in sorted({kw for u in uses.values() for _, kw in u}):
                tap = kh * wst["R"] + kw * wst["S"] + c * wst["C"]
                lines += [
                    f"      const __m512 f{j}_{kw} = _mm512_loadu_ps(w + {j * wst['K/16'] + tap});"
                    for j in range(nz)
                ]
            for t in sorted(uses):
                lines.append(f"      {{ const __m512 v = _mm512_set1_ps(x{c}_{kh}[{q0} * 2 - {pw} + {t}]);")
                lines += [
                    f"        a{j}_{i} = _mm512_fmadd_ps(f{j}_{kw}, v, a{j}_{i});"
                    for i, kw in uses[t]
                    for j in range(nz)
                ]
                lines.append("      }")
            lines.append("    }")
    return lines


def _store(nz: int, nblocks: int, cols: int, q0: str, act: int, ys: dict[str, int]) -> list[str]:
    """The epilogue of a tile: the activation, each zmm's two NCHW88 blocks stored."""
    lines = []
    for j in range(nz):
        halves = [h for h in (2 * j, 2 * j + 1) if h < nblocks]
        for i in range(cols):
            at = [f"{h * ys['C/8']} + ({q0} + {i}) * {ys['W']}" for h in halves]
            v = f"a{j}_{i}"
            lines.append(f"    {v} = xm_dw_act512({v}, {act});")
            lines.append(f"    _mm256_storeu_ps(yr + {at[0]}, _mm512_castps512_ps256({v}));")
            if len(at) > 1:
                lines.append(f"    _mm256_storeu_ps(yr + {at[1]}, _mm512_extractf32x8_ps({v}, 1));")
    return lines


class ConvNchw88Stem3x3Avx512(InPlaceConv3x3):
    """``conv2d_nchw88_stem3x3``: a float32 3x3 stride-2 NCHW88 convolution of a plain NCHW input
    (the ``hybrid`` first layer), padding 0 or 1, on AVX-512."""
    examples = (
        E.conv_case((1, 3, 13, 11, 16, 3, 2, 1, 1, 1, "relu")),  # odd sizes, one zmm of channels
        E.conv_case((2, 3, 17, 30, 24, 3, 2, 1, 1, 1, "relu")),  # the second zmm half used, batch 2
        E.conv_case((1, 1, 12, 12, 8, 3, 2, 0, 1, 1, "none")),  # one input channel, 8 outputs, no padding
        E.conv_case((1, 4, 21, 29, 32, 3, 2, 1, 1, 1, "hswish")),  # 4 input channels, 2 full tiles + rest
        E.conv_case((1, 3, 9, 40, 40, 3, 2, 1, 1, 1, "sigmoid")),  # 3 zmm of channels: 7-column tiles
        E.conv_case((1, 2, 5, 3, 16, 3, 2, 1, 1, 1, "relu")),  # 2 output columns: both border columns
        E.conv2d((1, 3, 17, 15), 16, 3, stride=2, pad=1, act="relu6"),
    )

    family = "conv2d_nchw88_stem3x3"
    isa = "avx512"
    priority = 285  # ahead of conv2d_nchw88 (280), whose hybrid mode serves every other first layer
    # a first layer's epilogue: bias and activation (no residual: nothing adds to a stem's output)
    epilogues = {"float32": replace(EPILOGUES["float32"], residual=False)}

    def match(self, op: Operation) -> Lowered | None:
        lowered = in_place_3x3(op, chan=False, strides=(2,))
        if lowered is None or lowered.params["mode"] != "hybrid" or lowered.params["residual"]:
            return None
        return lowered

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(self.family, *conv_sym(p), self.isa, epilogue_sym(p))

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand == 2 and p["bias"]:  # float32, padded to whole zmm vectors
            b = np.asarray(array, np.float32).reshape(-1)
            return np.ascontiguousarray(np.pad(b, (0, -len(b) % ZLANES))), "bias_f32x16"
        if operand != 1:
            return None
        logical = SPECS[DENSE_FILTERS["hybrid"]].unpack(np.asarray(array))
        return np.ascontiguousarray(K16_FILTERS["hybrid"].pack(logical).astype(np.float32)), "k16"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        ph, pw = p["ph"], p["pw"]
        act = ACT_CODES[p["act"]]
        nblocks = -(-oc // VEC)
        nz = -(-oc // ZLANES)
        cols = tile_columns(oc)
        wst = strides(K16_FILTERS["hybrid"], (oc, ic, K, K))
        out_shape = (n, nblocks * VEC, oh, ow)
        ys = strides(Layout.NCHW88, out_shape)
        y_row = offset(Layout.NCHW88, out_shape, {"N": "n", "H": "r"})
        rows = []
        for c in range(ic):
            for kh in range(K):
                ihh = f"r * 2 - {ph} + {kh}"
                x_at = offset(None, (n, ic, ih, iw), {"N": "n", "C": str(c), "H": ihh})
                rows.append(f"    const float* x{c}_{kh} = (unsigned)({ihh}) < {ih}u ? x + {x_at} : zrow;")
        lo, hi = interior_columns(iw, ow, 2, pw)
        body: list[str] = []
        for q in [*range(lo), *range(hi, ow)]:  # border columns: constant q, out-of-range taps dropped
            body += [
                "  {",
                *_tile(nz, ic, 1, pw, iw, str(q), wst),
                *_store(nz, nblocks, 1, str(q), act, ys),
                "  }",
            ]
        full, rest = divmod(hi - lo, cols)
        if full:
            body.append(f"  for (int q0 = {lo}; q0 < {lo + full * cols}; q0 += {cols}) {{")
            body += [
                *_tile(nz, ic, cols, pw, 0, "q0", wst),
                *_store(nz, nblocks, cols, "q0", act, ys),
            ]
            body.append("  }")
        if rest:
            q0 = str(lo + full * cols)
            body += [
                "  {",
                *_tile(nz, ic, rest, pw, 0, q0, wst),
                *_store(nz, nblocks, rest, q0, act, ys),
                "  }",
            ]
        names = ["x", "w", *(["bias"] if p["bias"] else [])]
        args = ", ".join([*(f"const void* {a}_" for a in names), "void* y_", "unsigned char* ws", "int nt"])
        casts = " ".join(f"const float* {a} = (const float*){a}_;" for a in names)
        bias_at = "_mm512_loadu_ps(bias + {})" if p["bias"] else "_mm512_setzero_ps()"
        biases = "\n".join(f"    const __m512 bz{j} = {bias_at.format(j * ZLANES)};" for j in range(nz))
        region = omp_parallel(n * oc * oh * ow * ic * K * K, "parallel for schedule(static) collapse(2)")
        nl = "\n"
        return f"""{COMMON}{COMMON512}{ACT512}
static void {sym}({args}) {{
  {casts}
  float* y = (float*)y_;
  (void)ws; (void)nt;
  /* the row above / below the image: zeros, read by the border rows' out-of-range taps */
  static const float zrow[{iw}];
  {region}
  for (int n = 0; n < {n}; ++n)
  for (int r = 0; r < {oh}; ++r) {{
{biases}
{nl.join(rows)}
    float* yr = y + {y_row};
{nl.join(body)}
  }}
}}
"""


KERNEL_UNITS = (ConvNchw88Stem3x3Avx512(),)
