"""Float32 depthwise 3x3 NCHW88 convolutions on x86 (``conv2d_nchw88_dw3x3``, stride 1 or 2,
padding 0 or 1): MobileNetV2's and ShuffleNetV2's channel-wise layers, ahead of the general
``conv2d_nchw88_chan`` (:mod:`backends.c.templates.x86.nchw88`), which stays for other windows, dilations
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

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import epilogue_sym, plane_sym, sym_join
from backends.c.templates.portable.generic import omp_parallel
from backends.c.templates.x86.nchw88 import (
    ACT_CODES,
    COMMON,
    COMMON512,
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
RowAt = Callable[[str], str]  # a row index (C expression) -> where that row is (C expression)


def interior_columns(iw: int, ow: int, sw: int, pw: int) -> tuple[int, int]:
    """``[lo, hi)``: the output columns whose three taps all lie inside the input row."""
    lo = -(-pw // sw)
    hi = min(ow, (iw - K + pw) // sw + 1)
    return lo, max(lo, hi)


@dataclass(frozen=True)
class Vec:
    """A register form of an output block: ``cols`` adjacent NCHW88 columns (8 channels each) per
    register, its C type and intrinsics, and the names of the filter and bias registers."""

    cols: int
    ctype: str
    load: str
    store: str
    fma: str
    add: str
    act: str
    weight: str
    bias: str


YMM = Vec(1, "__m256", "_mm256_loadu_ps", "_mm256_storeu_ps", "_mm256_fmadd_ps", "_mm256_add_ps",
          "xm_n88_act", "w", "bv")  # fmt: skip
# two adjacent columns per zmm (stride 1 only: the 16 floats at input column t are columns t, t+1,
# exactly the taps of two neighbouring outputs); filters and bias broadcast to both halves
ZMM = Vec(2, "__m512", "_mm512_loadu_ps", "_mm512_storeu_ps", "_mm512_fmadd_ps", "_mm512_add_ps",
          "xm_dw_act512", "z", "bz")  # fmt: skip

ACT512 = """#ifndef XM_DW_ACT512
#define XM_DW_ACT512
static inline __m512 xm_dw_act512(__m512 v, int act) {
  switch (act) {
    /* maxps / minps return their second operand when either is NaN: v goes second, so NaN stays */
    case 0: return v;
    case 1: return _mm512_max_ps(_mm512_setzero_ps(), v);
    case 2: return _mm512_min_ps(_mm512_set1_ps(6.f), _mm512_max_ps(_mm512_setzero_ps(), v));
    default: return xm_n88_act512(v, act);
  }
}
#endif
"""


def _column_block(vec: Vec, n: int, rows: int, sw: int, pw: int, iw: int, q0: str) -> list[str]:
    """C statements computing ``rows`` output rows x ``n`` registers of output columns from ``q0``
    (a C expression) into ``a{row}_{i}``: each input vector the block reads (input row ``u`` at
    ``x{u}``) is loaded once and fed to every accumulator whose tap it is. ``iw`` > 0 drops taps
    outside ``[0, iw)`` (border columns, whose absolute column ``q0`` is then a constant)."""
    assert vec.cols == 1 or (sw == 1 and not iw)
    lines = [f"    {vec.ctype} a{j}_{i} = {vec.bias};" for j in range(rows) for i in range(n)]
    for u in range((rows - 1) * sw + K):
        uses: dict[int, list[tuple[int, int, int, int]]] = {}  # input column -> (row, acc, kh, kw)
        for j in range(rows):
            kh = u - j * sw
            if not 0 <= kh < K:
                continue
            for i in range(n):
                for kw in range(K):
                    t = i * vec.cols * sw + kw  # from input column q0 * sw - pw
                    if iw and not 0 <= int(q0) * sw - pw + t < iw:
                        continue
                    uses.setdefault(t, []).append((j, i, kh, kw))
        for t in sorted(uses):
            lines.append(
                f"    {{ const {vec.ctype} v = {vec.load}(x{u} + ({q0} * {sw} - {pw} + {t}) * {VEC});"
            )
            lines += [
                f"      a{j}_{i} = {vec.fma}(v, {vec.weight}{kh}{kw}, a{j}_{i});" for j, i, kh, kw in uses[t]
            ]
            lines.append("    }")
    return lines


def _store_block(vec: Vec, n: int, rows: int, q0: str, residual: bool, act: int) -> list[str]:
    lines = []
    for j in range(rows):
        for i in range(n):
            col = f"({q0} + {i * vec.cols}) * {VEC}"
            if residual:
                lines.append(f"    a{j}_{i} = {vec.add}(a{j}_{i}, {vec.load}(rr{j} + {col}));")
            lines.append(f"    {vec.store}(yr{j} + {col}, {vec.act}(a{j}_{i}, {act}));")
    return lines


def _block(
    vec: Vec, n: int, rows: int, sw: int, pw: int, iw: int, q0: str, residual: bool, act: int
) -> list[str]:
    return [
        "  {",
        *_column_block(vec, n, rows, sw, pw, iw, q0),
        *_store_block(vec, n, rows, q0, residual, act),
        "  }",
    ]


def row_code(
    iw: int, ow: int, sw: int, pw: int, vec: Vec, regs: int, rows: int, residual: bool, act: int
) -> str:
    """``rows`` output rows of one channel block: peeled border columns (ymm), the interior in
    register blocks of ``regs`` registers of ``vec`` per row, then one narrower block of ``vec``
    and a last ymm column for the remainder."""
    lo, hi = interior_columns(iw, ow, sw, pw)
    lines: list[str] = []
    for q in [*range(lo), *range(hi, ow)]:  # border columns: constant q, out-of-range taps dropped
        lines += _block(YMM, 1, rows, sw, pw, iw, str(q), residual, act)
    span = vec.cols * regs
    full, rest = divmod(hi - lo, span)
    if full:
        lines.append(f"  for (int q0 = {lo}; q0 < {lo + full * span}; q0 += {span})")
        lines += _block(vec, regs, rows, sw, pw, 0, "q0", residual, act)
    q = lo + full * span
    if rest >= vec.cols:
        lines += _block(vec, rest // vec.cols, rows, sw, pw, 0, str(q), residual, act)
        q += rest // vec.cols * vec.cols
    if q < hi:
        lines += _block(YMM, hi - q, rows, sw, pw, 0, str(q), residual, act)
    return "\n".join(lines)


def filter_registers(vec: Vec, c: int) -> str:
    """C declarations of the nine filter vectors of channel block ``b`` (``wb``: its filters), and
    their zmm broadcasts for :data:`ZMM` blocks."""
    wst = strides(Layout.C11RSc8, (c, 1, 1, K, K))
    return "\n".join(
        f"    const __m256 w{kh}{kw} = _mm256_loadu_ps(wb + {kh * wst['R'] + kw * wst['S']});"
        + (f" const __m512 z{kh}{kw} = _mm512_broadcast_f32x8(w{kh}{kw});" if vec is ZMM else "")
        for kh in range(K)
        for kw in range(K)
    )


def bias_registers(vec: Vec, bias: bool) -> str:
    """The C initialiser of ``bv`` (channel block ``b``'s bias, ``bias`` the pointer) and, for
    :data:`ZMM` blocks, the declaration of its broadcast ``bz`` after it."""
    init = "_mm256_loadu_ps(bias + b * 8)" if bias else "_mm256_setzero_ps()"
    if vec is ZMM:
        init += ";\n    const __m512 bz = _mm512_broadcast_f32x8(bv)"
    return init


def output_rows(
    p: dict[str, Any], vec: Vec, regs: int, rows: int, x_row: RowAt, y_row: RowAt, y: str = "y"
) -> str:
    """``rows`` output rows from ``r`` of one channel block: pointers to their input rows
    (``x_row``: the C pointer to input row ``h``, a C expression; ``zrow`` outside the image), to
    their output rows (``y + y_row(h)``, ``y`` a C pointer) and residual rows (``res + y_row(h)``),
    then their columns."""
    s, ph, ih = p["sh"], p["ph"], p["ih"]
    residual = bool(p["residual"])
    lines = []
    for u in range((rows - 1) * s + K):
        lines.append(f"    const int ih{u} = r * {s} - {ph} + {u};")
        lines.append(f"    const float* x{u} = (unsigned)ih{u} < {ih}u ? {x_row(f'ih{u}')} : zrow;")
    for j in range(rows):
        lines.append(f"    float* yr{j} = {y} + {y_row(f'r + {j}')};")
        if residual:
            lines.append(f"    const float* rr{j} = res + {y_row(f'r + {j}')};")
    lines.append(row_code(p["iw"], p["ow"], s, p["pw"], vec, regs, rows, residual, ACT_CODES[p["act"]]))
    return "\n".join(lines)


def row_group(
    p: dict[str, Any],
    vec: Vec,
    regs: int,
    rows: int,
    x_row: RowAt,
    y_row: RowAt,
    y: str = "y",
    end: str | None = None,
) -> str:
    """The ``rows`` output rows from ``r`` (:func:`output_rows`), or the last output row alone
    where ``rows`` does not divide the output's height and ``r`` is the last group's; ``end``: the
    C expression of the row where the caller's groups end instead (a lone row wherever it falls)."""
    body = output_rows(p, vec, regs, rows, x_row, y_row, y)
    if rows > 1 and (end is not None or p["oh"] % rows):
        lone = output_rows(p, vec, regs, 1, x_row, y_row, y)
        body = f"  if (r + {rows} <= {end or p['oh']}) {{\n{body}\n  }} else {{\n{lone}\n  }}"
    return body


def in_place_3x3(op: Operation, *, chan: bool, strides: tuple[int, ...]) -> Lowered | None:
    """A float32 3x3 NCHW88 convolution these in-place kernels serve: dilation 1, padding 0 or 1,
    the same stride along both axes, one of ``strides``."""
    lowered = conv_nchw88(op, chan=chan)
    if lowered is None:
        return None
    p = lowered.params
    if (
        p["dtype"] != "f32"
        or (p["fh"], p["fw"], p["dh"], p["dw"]) != (K, K, 1, 1)
        or p["sh"] != p["sw"]
        or p["sw"] not in strides
        or p["ph"] not in (0, 1)
        or p["pw"] not in (0, 1)
    ):
        return None
    return lowered


class InPlaceConv3x3(_Nchw88Base):
    """A 3x3 NCHW88 unit that reads its input in place (rows outside the image are a shared zero
    row, border columns peeled): no workspace."""

    def workspace(self, p: dict[str, Any]) -> int:
        return 0


class ConvNchw88Dw3x3(InPlaceConv3x3):
    """``conv2d_nchw88_dw3x3``: float32 depthwise 3x3 NCHW88 convolutions, stride 1 or 2, padding
    0 or 1, in place (no padded copy), AVX2 register blocks of 4 columns."""
    examples = (
        E.conv_case((1, 24, 15, 17, 24, 3, 1, 1, 1, 24, "relu")),  # odd sizes: 2 register blocks + rest
        E.conv_case((2, 16, 14, 13, 16, 3, 2, 1, 1, 16, "residual")),  # stride 2, batch 2, odd width
        E.conv_case((1, 16, 9, 11, 16, 3, 1, 0, 1, 16, "hswish")),  # no padding
        E.conv_case((1, 8, 10, 9, 8, 3, 2, 0, 1, 8, "sigmoid")),  # stride 2, no padding
        E.conv_case((2, 8, 3, 3, 8, 3, 1, 1, 1, 8, "none")),  # 3x3 image: every column a border column
        E.conv_case((1, 8, 4, 4, 8, 3, 2, 1, 1, 8, "relu")),  # stride 2 on an even size
        E.conv_case((1, 32, 23, 37, 32, 3, 1, 1, 1, 32, "residual")),  # 35 interior columns: 4 blocks + 3
        E.conv_case((1, 16, 21, 19, 16, 3, 2, 1, 1, 16, "none")),  # stride 2, odd: right border in range
        E.conv_case((1, 16, 6, 20, 16, 3, 1, 1, 1, 16, "residual")),  # even rows: pairs of rows
        E.conv2d((1, 8, 9, 7), 8, 3, groups=8, act="relu6"),
    )

    family = "conv2d_nchw88_dw3x3"
    priority = 305  # ahead of conv2d_nchw88_chan (300), which serves every other channel-wise conv
    epilogues = EPILOGUES
    block = 4  # output columns per register block: 4 accumulators + 9 filters + loads in 16 ymm

    def vector(self, stride: int) -> tuple[Vec, int, int]:
        """The register form of the interior blocks, the registers per row of a block and the
        output rows a block computes."""
        return YMM, self.block, 1

    def match(self, op: Operation) -> Lowered | None:
        return in_place_3x3(op, chan=True, strides=(1, 2))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(self.family, *plane_sym(p), self.isa, epilogue_sym(p))

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        s = p["sh"]
        cb = -(-c // VEC)
        in_shape, out_shape = (n, cb * VEC, ih, iw), (n, cb * VEC, oh, ow)

        def x_row(h: str) -> str:
            return "x + " + offset(Layout.NCHW88, in_shape, {"N": "n", "C/8": "b", "H": h})

        def y_row(h: str) -> str:
            return offset(Layout.NCHW88, out_shape, {"N": "n", "C/8": "b", "H": h})

        w_blk = offset(Layout.C11RSc8, (c, 1, 1, K, K), {"G/8": "b"})
        vec, regs, rows = self.vector(s)
        weights = filter_registers(vec, c)
        bias = bias_registers(vec, bool(p["bias"]))
        residual = bool(p["residual"])
        body = row_group(p, vec, regs, rows, x_row, y_row)
        names = ["x", "w", *(["bias"] if p["bias"] else []), *(["res"] if residual else [])]
        args = ", ".join([*(f"const void* {a}_" for a in names), "void* y_", "unsigned char* ws", "int nt"])
        casts = " ".join(f"const float* {a} = (const float*){a}_;" for a in names)
        region = omp_parallel(n * cb * VEC * oh * ow * K * K, "parallel for schedule(static) collapse(3)")
        return f"""{COMMON}{COMMON512 + ACT512 if vec is ZMM else ""}
static void {sym}({args}) {{
  {casts}
  float* y = (float*)y_;
  (void)ws; (void)nt;
  /* the row above / below the image: zeros, read by the border rows' out-of-range taps */
  static const float zrow[{iw * VEC}];
  {region}
  for (int n = 0; n < {n}; ++n)
  for (int b = 0; b < {cb}; ++b)
  for (int rg = 0; rg < {-(-oh // rows)}; ++rg) {{
    const int r = rg * {rows};
    const float* wb = w + {w_blk};
{weights}
    const __m256 bv = {bias};
{body}
  }}
}}
"""


class ConvNchw88Dw3x3Avx512(ConvNchw88Dw3x3):
    """The same kernel on AVX-512: stride 1 in zmm registers of two adjacent columns (half the FMAs
    of ymm), blocks of 2 rows x 8 registers (16 accumulators + 9 filters + loads in 32 registers:
    4 input rows loaded for 2 output rows, not 6); stride 2 (whose two outputs' taps are not
    adjacent) in blocks of 8 ymm columns."""

    isa = "avx512"
    block = 8

    def vector(self, stride: int) -> tuple[Vec, int, int]:
        if stride == 1:  # two output rows share their middle two input rows' loads
            return ZMM, self.block, 2
        return YMM, self.block, 1


KERNEL_UNITS = (ConvNchw88Dw3x3(), ConvNchw88Dw3x3Avx512())
