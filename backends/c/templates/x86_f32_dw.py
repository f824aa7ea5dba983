"""Float32 depthwise 3x3 NCHW88 convolutions on x86 (``conv2d_nchw88_dw3x3``, stride 1 or 2,
padding 0 or 1): MobileNetV2's and ShuffleNetV2's channel-wise layers, ahead of the general
``conv2d_nchw88_chan`` (:mod:`backends.c.templates.nchw88`), which stays for other windows, dilations
and float16 storage.

The general kernel copies each image into a zero-padded workspace and calls a micro-kernel per 8
output columns; at 112x112x96 that copy alone moves the layer's input three times through memory.
Here nothing is copied: a channel block's output row reads its three input rows in place (a row
above or below the image is a shared row of zeros), the border columns whose taps leave the row are
peeled with their out-of-range taps dropped at generation time, and the interior runs register
blocks of ``B`` output columns, one 8-channel ymm accumulator each (bias as its initial value),
with the nine filter vectors held in registers for the whole plane. Each input vector of a block's
row is loaded once and feeds every accumulator it touches (stride 2 skips the odd columns' vectors
by index: in NCHW88 a column is a whole vector, no shuffles). Every loop bound and offset is a
constant of the layer, offsets come from :mod:`dialects.layout` through ``nchw88.offset``.

``B`` is 8 columns on AVX-512 (32 ymm registers: 8 accumulators, 9 filters, loads) and 4 on AVX2
(16 registers). Threads share (image, channel block, output row) items statically: each output is
computed by one thread in the same order, so results are bit-identical on any thread count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation

from backends.c.templates import epilogue_sym, plane_sym, sym_join
from backends.c.templates.generic import omp_parallel
from backends.c.templates.nchw88 import (
    ACT_CODES,
    COMMON,
    EPILOGUES,
    VEC,
    _Nchw88Base,
    conv_nchw88,
    offset,
    strides,
)
from dialects.layout import Layout
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

K = 3  # the window these kernels serve


def interior_columns(iw: int, ow: int, sw: int, pw: int) -> tuple[int, int]:
    """``[lo, hi)``: the output columns whose three taps all lie inside the input row."""
    lo = -(-pw // sw)
    hi = min(ow, (iw - K + pw) // sw + 1)
    return lo, max(lo, hi)


def _column_block(cols: list[int], sw: int, pw: int, iw: int, q0: str) -> list[str]:
    """C statements computing output columns ``q0 + cols[i]`` (``q0`` a C expression of the block's
    first column) into ``a{i}``: per filter row, each input vector the block reads is loaded once and
    fed to every accumulator whose tap it is. ``iw`` > 0 drops taps outside ``[0, iw)`` (border
    columns, whose absolute column ``q0`` is then a constant)."""
    lines = [f"    __m256 a{i} = bv;" for i in range(len(cols))]
    for kh in range(K):
        uses: dict[int, list[tuple[int, int]]] = {}  # input column (from q0 * sw - pw) -> (acc, kw)
        for i, c in enumerate(cols):
            for kw in range(K):
                t = c * sw + kw
                if iw and not 0 <= int(q0) * sw - pw + t < iw:
                    continue
                uses.setdefault(t, []).append((i, kw))
        for t in sorted(uses):
            lines.append(
                f"    {{ const __m256 v = _mm256_loadu_ps(x{kh} + ({q0} * {sw} - {pw} + {t}) * {VEC});"
            )
            lines += [f"      a{i} = _mm256_fmadd_ps(v, w{kh}{kw}, a{i});" for i, kw in uses[t]]
            lines.append("    }")
    return lines


def _store_block(n: int, q0: str, residual: bool, act: int) -> list[str]:
    lines = []
    for i in range(n):
        col = f"({q0} + {i}) * {VEC}"
        if residual:
            lines.append(f"    a{i} = _mm256_add_ps(a{i}, _mm256_loadu_ps(rr + {col}));")
        lines.append(f"    _mm256_storeu_ps(yr + {col}, xm_n88_act(a{i}, {act}));")
    return lines


def row_code(iw: int, ow: int, sw: int, pw: int, block: int, residual: bool, act: int) -> str:
    """One output row of one channel block: peeled border columns, then the interior in register
    blocks of ``block`` columns and one narrower block for the remainder."""
    lo, hi = interior_columns(iw, ow, sw, pw)
    lines: list[str] = []
    for q in [*range(lo), *range(hi, ow)]:  # border columns: constant q, out-of-range taps dropped
        lines.append("  {")
        lines += _column_block([0], sw, pw, iw, str(q))
        lines += _store_block(1, str(q), residual, act)
        lines.append("  }")
    full, rest = divmod(hi - lo, block)
    if full:
        lines.append(f"  for (int q0 = {lo}; q0 < {lo + full * block}; q0 += {block}) {{")
        lines += _column_block(list(range(block)), sw, pw, 0, "q0")
        lines += _store_block(block, "q0", residual, act)
        lines.append("  }")
    if rest:
        q0 = str(lo + full * block)
        lines.append("  {")
        lines += _column_block(list(range(rest)), sw, pw, 0, q0)
        lines += _store_block(rest, q0, residual, act)
        lines.append("  }")
    return "\n".join(lines)


class ConvNchw88Dw3x3(_Nchw88Base):
    """``conv2d_nchw88_dw3x3``: float32 depthwise 3x3 NCHW88 convolutions, stride 1 or 2, padding
    0 or 1, in place (no padded copy), AVX2 register blocks of 4 columns."""

    family = "conv2d_nchw88_dw3x3"
    priority = 305  # ahead of conv2d_nchw88_chan (300), which serves every other channel-wise conv
    epilogues = EPILOGUES
    block = 4  # output columns per register block: 4 accumulators + 9 filters + loads in 16 ymm

    def match(self, op: Operation) -> Lowered | None:
        lowered = conv_nchw88(op, chan=True)
        if lowered is None:
            return None
        p = lowered.params
        if (
            p["dtype"] != "f32"
            or (p["fh"], p["fw"], p["dh"], p["dw"]) != (K, K, 1, 1)
            or p["sh"] != p["sw"]
            or p["sw"] not in (1, 2)
            or p["ph"] not in (0, 1)
            or p["pw"] not in (0, 1)
        ):
            return None
        return lowered

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(self.family, *plane_sym(p), self.isa, epilogue_sym(p))

    def workspace(self, p: dict[str, Any]) -> int:
        return 0

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        s, ph, pw = p["sh"], p["ph"], p["pw"]
        cb = -(-c // VEC)
        in_shape, out_shape = (n, cb * VEC, ih, iw), (n, cb * VEC, oh, ow)
        w_shape = (c, 1, 1, K, K)
        wst = strides(Layout.C11RSc8, w_shape)
        x_row = offset(Layout.NCHW88, in_shape, {"N": "n", "C/8": "b", "H": "ihh"})
        y_row = offset(Layout.NCHW88, out_shape, {"N": "n", "C/8": "b", "H": "r"})
        w_blk = offset(Layout.C11RSc8, w_shape, {"G/8": "b"})
        weights = "\n".join(
            f"    const __m256 w{kh}{kw} = _mm256_loadu_ps(wb + {kh * wst['R'] + kw * wst['S']});"
            for kh in range(K)
            for kw in range(K)
        )
        rows = "\n".join(
            f"    const int ih{kh} = r * {s} - {ph} + {kh};\n"
            f"    const float* x{kh} = (unsigned)ih{kh} < {ih}u ? x + {x_row.replace('ihh', f'ih{kh}')}"
            " : zrow;"
            for kh in range(K)
        )
        body = row_code(iw, ow, s, pw, self.block, bool(p["residual"]), ACT_CODES[p["act"]])
        names = ["x", "w", *(["bias"] if p["bias"] else []), *(["res"] if p["residual"] else [])]
        args = ", ".join([*(f"const void* {a}_" for a in names), "void* y_", "unsigned char* ws", "int nt"])
        casts = " ".join(f"const float* {a} = (const float*){a}_;" for a in names)
        region = omp_parallel(n * cb * VEC * oh * ow * K * K, "parallel for schedule(static) collapse(3)")
        return f"""{COMMON}
static void {sym}({args}) {{
  {casts}
  float* y = (float*)y_;
  (void)ws; (void)nt;
  /* the row above / below the image: zeros, read by the border rows' out-of-range taps */
  static const float zrow[{iw * VEC}];
  {region}
  for (int n = 0; n < {n}; ++n)
  for (int b = 0; b < {cb}; ++b)
  for (int r = 0; r < {oh}; ++r) {{
    const float* wb = w + {w_blk};
{weights}
    const __m256 bv = {"_mm256_loadu_ps(bias + b * 8)" if p["bias"] else "_mm256_setzero_ps()"};
{rows}
    float* yr = y + {y_row};
    const float* rr = {"res + " + y_row if p["residual"] else "0"};
    (void)rr;
{body}
  }}
}}
"""


class ConvNchw88Dw3x3Avx512(ConvNchw88Dw3x3):
    """The same kernel with AVX-512VL's 32 ymm registers: register blocks of 8 columns."""

    isa = "avx512"
    block = 8


KERNEL_UNITS = (ConvNchw88Dw3x3(), ConvNchw88Dw3x3Avx512())
