"""A float32 1x1 "expand" convolution and the depthwise 3x3 after it as one AVX-512 NCHW88 kernel
(``conv2d_nchw88_expand_dw3x3``): MobileNetV2's inverted-residual blocks, whose expanded tensor
(16 -> 96 channels at 112x112: 4.8 MB) otherwise goes to L3 and comes straight back.

Here the expanded tensor never reaches memory: each thread keeps a ring of ``W`` rows (one slot per
input row of a depthwise window: 3 at stride 2, 4 at stride 1, whose register blocks are two output
rows), laid out ``[slot][C/8][W][8]``, fills it a row at a time with the expand's own register tiles
(:func:`backends.c.templates.nchw88.dense_ukr512`, the same function the plain 1x1 convolution
calls, writing into the slot through its output strides) as soon as the depthwise's next output rows
need them, and runs the depthwise's row code (:func:`backends.c.templates.x86_f32_dw.row_group`)
with its input-row pointers into the ring.

Every expanded value is computed by the same micro-kernel over the same input channels in the same
order as the plain 1x1 convolution (whose input-channel chunks only round-trip float32 partial sums
through memory), then the same bias and activation; every depthwise output by the same row code:
the fused kernel is bit-identical to the two kernels it replaces. Threads take contiguous ranges of
output row groups, each with its own ring (the rows at a range's top edge are computed by both
neighbours), so results are bit-identical on any thread count.

The unit serves the depthwise convolution (kernel-select lowers ops in program order, so its input's
producers are calls already): a ``conv2d_nchw88`` AVX-512 call of a dense float32 1x1 stride-1
convolution without residual, read only here, optionally through a ReLU / ReLU6 elementwise call
(kernel-fuse-epilogue folds it later for the plain convolution; here it becomes the expand's
activation). Kernel-select drops the calls it absorbs. The depthwise's own epilogue (bias, residual,
activation) stays fusable as for ``conv2d_nchw88_dw3x3``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from xdsl.ir import Operation, SSAValue

from backends.c.templates import epilogue_sym, plane_sym, sym_join
from backends.c.templates.generic import parallel_threads
from backends.c.templates.nchw88 import (
    ACT_CODES,
    COMMON,
    COMMON512,
    EPILOGUES,
    VEC,
    ConvNchw88Avx512,
    _guarded,
    dense_ukr512,
    offset,
    strides,
)
from backends.c.templates.x86_f32_dw import (
    ACT512,
    ConvNchw88Dw3x3Avx512,
    bias_registers,
    filter_registers,
    in_place_3x3,
    row_group,
)
from backends.c.templates.x86_f32_dw import K as TAPS  # the depthwise window's side
from dialects import kernel as K
from dialects.layout import Layout
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

EXPAND_FAMILY = "conv2d_nchw88"  # the producer this unit absorbs (its AVX-512 unit)
EXPAND_ACTIVATIONS = ("identity", "relu", "relu6")
# the expand's register tile: 2 zmm filter vectors (32 output channels) x up to 12 columns, as
# ConvNchw88Avx512.tiles
TILE_BLOCKS, TILE_COLS = 4, 12
MAX_THREADS = 16  # rings in the workspace: a thread count above it runs on this many


def expand_producer(value: SSAValue) -> tuple[K.CallOp, str] | None:
    """The 1x1 expand call computing ``value`` (a dense float32 stride-1 AVX-512 ``conv2d_nchw88``
    without residual, possibly through a ReLU / ReLU6 elementwise call), each value read once, and
    the activation the two apply; None for anything else."""
    act = None
    call = value.owner
    if isinstance(call, K.CallOp) and call.definition().family.data == "elemwise":
        mode = call.definition().param_values().get("mode")
        if (
            not value.has_one_use()
            or len(call.args) != 1
            or len(call.outputs) != 1
            or mode not in ("relu", "relu6")
            or call.args[0].type != value.type
        ):
            return None
        act, value = str(mode), call.args[0]
        call = value.owner
    if not isinstance(call, K.CallOp) or not value.has_one_use() or len(call.outputs) != 1:
        return None
    d = call.definition()
    if d.family.data != EXPAND_FAMILY or d.isa.data != "avx512":
        return None
    p = d.param_values()
    geometry = tuple(p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
    if (
        (p["mode"], p["groups"], p["dtype"], p["residual"]) != ("dense", 1, "f32", 0)
        or geometry != (1, 1, 1, 1, 0, 0, 1, 1)
        or p["act"] not in EXPAND_ACTIVATIONS
        or (act is not None and p["act"] != "identity")
    ):
        return None
    return call, act or p["act"]


def operand_slots(p: dict[str, Any]) -> dict[str, int]:
    """Operand name -> index: the expand's input, the depthwise's filters and bias (index 2, where
    kernel-fuse-epilogue inserts a bias), the expand's filters and bias, the residual last (where it
    appends one)."""
    names = ["x", "w", *(["bias"] if p["bias"] else []), "we", *(["be"] if p["e_bias"] else [])]
    names += ["res"] if p["residual"] else []
    return {name: i for i, name in enumerate(names)}


class ConvNchw88ExpandDw3x3(ConvNchw88Dw3x3Avx512):
    """``conv2d_nchw88_expand_dw3x3``: a float32 1x1 expand convolution (+ bias, ReLU / ReLU6) and
    the stride 1 or 2, padding 0 or 1 depthwise 3x3 after it, on AVX-512, through a per-thread ring
    of expanded rows."""

    family = "conv2d_nchw88_expand_dw3x3"
    priority = 306  # ahead of conv2d_nchw88_dw3x3 (305), which runs the depthwise alone
    epilogues = EPILOGUES
    # expanded floats per image (the tensor kept out of memory) below which the two plain kernels are
    # as fast: MobileNetV2's pairs at 1 thread, kernel times fused / plain: 112x112x96 (stride 2)
    # 0.68-0.78, 56x56x144 0.90-0.94 (stride 1 and 2), 28x28x192 0.95-1.05, 14x14 and 7x7 1.0-1.1
    min_expanded: ClassVar[int] = 1 << 18

    def match(self, op: Operation) -> Lowered | None:
        lowered = in_place_3x3(op, chan=True, strides=(1, 2))
        if lowered is None:
            return None
        x = lowered.operands[0]
        got = expand_producer(x) if isinstance(x, SSAValue) else None
        if got is None:
            return None
        expand, act = got
        pe, p = expand.definition().param_values(), lowered.params
        if (pe["n"], pe["ih"], pe["iw"], pe["oc"]) != (p["n"], p["ih"], p["iw"], p["c"]):
            return None
        if p["ih"] * p["iw"] * -(-p["c"] // VEC) * VEC < self.min_expanded:
            return None
        params = {**p, "ic": pe["ic"], "e_bias": pe["bias"], "e_act": act}
        x_e, w_e, *rest_e = expand.args
        own = lowered.operands
        residual = own[-1:] if p["residual"] else []
        dw_rest = own[2 : len(own) - len(residual)]
        return Lowered(params, [x_e, own[1], *dw_rest, w_e, *rest_e[: pe["bias"]], *residual])

    def symbol(self, p: dict[str, Any]) -> str:
        expand = epilogue_sym({"bias": p["e_bias"], "act": p["e_act"]})
        return sym_join(self.family, f"ic{p['ic']}", *plane_sym(p), self.isa, "e" + expand, epilogue_sym(p))

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        slots = operand_slots(p)
        expand = {"mode": "dense", "dtype": "f32", "bias": 1}
        if operand == slots["we"]:  # the expand's filters and bias as the 1x1 convolution packs them
            return ConvNchw88Avx512().pack(1, array, expand)
        if operand == slots.get("be"):
            return ConvNchw88Avx512().pack(2, array, expand)
        if operand == slots.get("bias"):
            return super().pack(2, array, p)
        return None

    def ring(self, p: dict[str, Any]) -> tuple[int, int]:
        """Slots of one thread's ring (the input rows of one register block of output rows) and
        floats per slot."""
        rows = self.vector(p["sh"])[2]
        return (rows - 1) * p["sh"] + TAPS, -(-p["c"] // VEC) * VEC * p["iw"]

    def threads(self, p: dict[str, Any]) -> int:
        """The most threads the kernel runs on (each with its own ring)."""
        work = (
            p["n"] * -(-p["c"] // VEC) * VEC * (p["ih"] * p["iw"] * p["ic"] + p["oh"] * p["ow"] * TAPS * TAPS)
        )
        groups = -(-p["oh"] // self.vector(p["sh"])[2])
        return max(1, min(parallel_threads(work), MAX_THREADS, groups))

    def workspace(self, p: dict[str, Any]) -> int:
        slots, floats = self.ring(p)
        return self.threads(p) * slots * floats * 4

    def _expand_rows(self, p: dict[str, Any]) -> tuple[str, str]:
        """The shared micro-kernels and the C statements computing expanded rows ``hn`` up to
        ``hend`` (exclusive) of image ``n`` into their ring slots."""
        ic, c, h, w = p["ic"], p["c"], p["ih"], p["iw"]
        icp, cbp = -(-ic // VEC) * VEC, -(-c // VEC)
        slots, per_slot = self.ring(p)
        xs = strides(Layout.NCHW88, (p["n"], icp, h, w))
        wst = strides(ConvNchw88Avx512().filter_spec("dense"), (c, ic, 1, 1))
        tiles = -(-cbp // TILE_BLOCKS)
        spans = -(-w // TILE_COLS)  # column tiles per row, as even as they come (112: 11 or 12)
        widths = sorted({(k + 1) * w // spans - k * w // spans for k in range(spans)})
        tile_vectors = sorted({-(-min(TILE_BLOCKS, cbp - t * TILE_BLOCKS) // 2) for t in range(tiles)})
        ukr = "xm_n88_avx512_conv_f32_c8_o8"  # dense_ukr512's name for 8-channel input steps
        # nchw88's include-guard key of the same micro-kernel: one definition per translation unit
        shared = "".join(
            _guarded(f"N88_avx512_CONV_f32_C8_O8_{j}x{i}".upper(), dense_ukr512(j, i, VEC, "f32", VEC))
            for j in tile_vectors
            for i in widths
        )
        be = "be + t * 32" if p["e_bias"] else "0"
        call_args = (
            f"xr + (long)q0 * {xs['W']}L, we + (long)t * {2 * wst['K/16']}L, {icp // VEC}, 1, 1, "
            f"{xs['C/8']}L, 0L, 0L, {wst['C/8']}L, 0L, 0L, {wst['K/16']}L, {be}, 0, "
            f"slot + (long)t * {TILE_BLOCKS * w * VEC}L + (long)q0 * {VEC}L, {w * VEC}L, {VEC}L, "
            f"{ACT_CODES[p['e_act']]}, nb, 2"
        )
        dispatch = " else ".join(
            f"if (jv == {j} && iv == {i}) {ukr}_{j}x{i}({call_args});" for j in tile_vectors for i in widths
        )
        x_row = offset(Layout.NCHW88, (p["n"], icp, h, w), {"N": "n", "H": "hn"})
        code = f"""    for (; hn < hend; ++hn) {{
      const float* xr = x + {x_row};
      float* slot = ring + (long)(hn % {slots}) * {per_slot}L;
      for (int t = 0; t < {tiles}; ++t) {{
        const int nb = {cbp} - t * {TILE_BLOCKS} < {TILE_BLOCKS} ? {cbp} - t * {TILE_BLOCKS} : {TILE_BLOCKS};
        const int jv = (nb + 1) / 2;
        for (int k = 0; k < {spans}; ++k) {{
          const int q0 = k * {w} / {spans}, iv = (k + 1) * {w} / {spans} - q0;
          {dispatch}
        }}
      }}
    }}"""
        return shared, code

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        s, ph = p["sh"], p["ph"]
        cb = -(-c // VEC)
        out_shape = (n, cb * VEC, oh, ow)
        slots, per_slot = self.ring(p)
        vec, regs, rows = self.vector(s)
        window = (rows - 1) * s + TAPS  # input rows of one block of output rows

        def ring_row(h: str) -> str:  # channel block b of expanded row h, in its slot
            return f"ring + (long)({h} % {slots}) * {per_slot}L + (long)b * {iw * VEC}L"

        def y_row(h: str) -> str:
            return offset(Layout.NCHW88, out_shape, {"N": "n", "C/8": "b", "H": h})

        shared, expand = self._expand_rows(p)
        body = row_group(p, vec, regs, rows, ring_row, y_row)
        slots_of = operand_slots(p)
        names = sorted(slots_of, key=slots_of.__getitem__)
        args = ", ".join([*(f"const void* {a}_" for a in names), "void* y_", "unsigned char* ws", "int nt"])
        casts = " ".join(f"const float* {a} = (const float*){a}_;" for a in names)
        groups, cap = -(-oh // rows), self.threads(p)
        threads = f"nt < {cap} ? nt : {cap}" if cap > 1 else "1"
        return f"""{COMMON}{COMMON512}{ACT512}{shared}
static void {sym}({args}) {{
  {casts}
  float* y = (float*)y_;
  (void)nt;
  /* the row above / below the image: zeros, read by the border rows' out-of-range taps */
  static const float zrow[{iw * VEC}];
  const int nth = {threads};
  #pragma omp parallel for schedule(static) num_threads(nth) if(nth > 1)
  for (int th = 0; th < nth; ++th) {{
  /* this thread's output row groups, and its ring of expanded rows */
  const int g0 = th * {groups} / nth, g1 = (th + 1) * {groups} / nth;
  float* ring = (float*)ws + (long)th * {slots * per_slot}L;
  for (int n = 0; n < {n}; ++n) {{
  int hn = g0 * {rows * s} - {ph} > 0 ? g0 * {rows * s} - {ph} : 0;  /* the next row to expand */
  for (int rg = g0; rg < g1; ++rg) {{
    const int r = rg * {rows};
    const int hend = r * {s} - {ph} + {window} < {ih} ? r * {s} - {ph} + {window} : {ih};
{expand}
  for (int b = 0; b < {cb}; ++b) {{
    const float* wb = w + {offset(Layout.C11RSc8, (c, 1, 1, TAPS, TAPS), {"G/8": "b"})};
{filter_registers(vec, c)}
    const __m256 bv = {bias_registers(vec, bool(p["bias"]))};
{body}
  }}
  }}
  }}
  }}
}}
"""


KERNEL_UNITS = (ConvNchw88ExpandDw3x3(),)
