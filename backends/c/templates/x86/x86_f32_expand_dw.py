"""A float32 1x1 "expand" convolution and the depthwise 3x3 after it as one AVX-512 NCHW88 kernel
(``conv2d_nchw88_expand_dw3x3``): MobileNetV2's inverted-residual blocks, whose expanded tensor
(16 -> 96 channels at 112x112: 4.8 MB) otherwise goes to L3 and comes straight back.

Here the expanded tensor never reaches memory: each thread keeps a ring of expanded rows (one slot per
input row of a depthwise window: 3 at stride 2, 4 at stride 1, whose register blocks are two output
rows), laid out ``[slot][C/8][W][8]``, fills it a row at a time with the expand's own register tiles
(:func:`backends.c.templates.x86.nchw88.dense_ukr512`, the same function the plain 1x1 convolution
calls, writing into the slot through its output strides) as soon as the depthwise's next output rows
need them, and runs the depthwise's row code (:func:`backends.c.templates.x86.x86_f32_dw.row_group`)
with its input-row pointers into the ring.

Every expanded value is computed by the same micro-kernel over the same input channels in the same
order as the plain 1x1 convolution (whose input-channel chunks only round-trip float32 partial sums
through memory), then the same bias and activation; every depthwise output by the same row code:
the fused kernel is bit-identical to the two kernels it replaces. Threads take contiguous, even
ranges of output rows (a range's last register block of rows may be a lone row, computed by the
same taps in the same order), each with its own ring (the rows at a range's top edge are expanded
by both neighbours), so results are bit-identical on any thread count.

The unit serves the depthwise convolution (kernel-select lowers ops in program order, so its input's
producers are calls already): a ``conv2d_nchw88`` AVX-512 call of a dense float32 1x1 stride-1
convolution without residual, read only here, optionally through a ReLU / ReLU6 elementwise call
(kernel-fuse-epilogue folds it later for the plain convolution; here it becomes the expand's
activation). Kernel-select drops the calls it absorbs. The depthwise's own epilogue (bias, residual,
activation) stays fusable as for ``conv2d_nchw88_dw3x3``.

``conv2d_nchw88_expand_dw3x3_project`` goes one step further the same way: it serves the 1x1
"project" convolution after such a fused call (again through an optional ReLU / ReLU6 call, the
depthwise's activation), writes each block of depthwise output rows into a per-thread buffer
(``[C/8][rows][OW][8]``) and runs the project's register tiles over it at once (the block's rows are
one run of columns in NCHW88), so the depthwise's output never reaches memory either; the project's
epilogue (bias, the block's residual, activation) is fusable as for ``conv2d_nchw88``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from xdsl.ir import Operation, SSAValue

import backends.c.examples as E
from backends.c.templates import epilogue_sym, plane_sym, sym_join
from backends.c.templates.portable.generic import parallel_threads
from backends.c.templates.x86.nchw88 import (
    ACT_CODES,
    COMMON,
    COMMON512,
    EPILOGUES,
    VEC,
    ConvNchw88Avx512,
    dense_ukr512,
    offset,
    shared_ukr,
    strides,
    ukr_name,
)
from backends.c.templates.x86.x86_f32_dw import (
    ACT512,
    ConvNchw88Dw3x3Avx512,
    RowAt,
    bias_registers,
    filter_registers,
    in_place_3x3,
    row_group,
)
from backends.c.templates.x86.x86_f32_dw import K as TAPS  # the depthwise window's side
from dialects import kernel as K
from dialects import tensor as T
from dialects.layout import Layout
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

EXPAND_FAMILY = "conv2d_nchw88"  # the 1x1 convolutions these units absorb (their AVX-512 unit)
ACTIVATIONS = ("identity", "relu", "relu6")  # between the fused convolutions
ELEMWISE_ACTIVATIONS = ("relu", "relu6")  # the elementwise calls of those that a fused call absorbs
# the 1x1 register tile: 2 zmm filter vectors (32 output channels) x up to 12 columns, as
# ConvNchw88Avx512.tiles
TILE_BLOCKS, TILE_COLS = 4, 12
MAX_THREADS = 16  # rings in the workspace: a thread count above it runs on this many
UKR = ukr_name("avx512", "f32", VEC, VEC)  # dense_ukr512's: 8-channel input steps, columns 8 apart


def activated(value: SSAValue) -> tuple[SSAValue, str | None]:
    """``value``'s operand and mode where ``value`` is a ReLU / ReLU6 elementwise call's only
    result, read once (kernel-fuse-epilogue has not folded it into its producer yet); else
    ``value`` and None."""
    call = value.owner
    if not isinstance(call, K.CallOp) or call.definition().family.data != "elemwise":
        return value, None
    mode = call.definition().param_values().get("mode")
    if (
        value.has_one_use()
        and len(call.args) == 1
        and len(call.outputs) == 1
        and mode in ELEMWISE_ACTIVATIONS
        and call.args[0].type == value.type
    ):
        return call.args[0], str(mode)
    return value, None


def producer(value: SSAValue, family: str) -> tuple[K.CallOp, dict[str, Any], str] | None:
    """The AVX-512 ``family`` call computing ``value`` (possibly through a ReLU / ReLU6 call), each
    value read once, without residual, its parameters and the activation applied to its result."""
    value, act = activated(value)
    call = value.owner
    if not isinstance(call, K.CallOp) or not value.has_one_use() or len(call.outputs) != 1:
        return None
    d = call.definition()
    p = d.param_values()
    if d.family.data != family or d.isa.data != "avx512" or p["dtype"] != "f32" or p["residual"]:
        return None
    if p["act"] not in ACTIVATIONS or (act is not None and p["act"] != "identity"):
        return None
    return call, p, act or p["act"]


def pointwise_1x1(p: dict[str, Any]) -> bool:
    """A dense stride-1 1x1 ``conv2d_nchw88`` without padding (the params of its call or match)."""
    geometry = tuple(p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
    return (p["mode"], p["groups"]) == ("dense", 1) and geometry == (1, 1, 1, 1, 0, 0, 1, 1)


def project_follows(op: Operation) -> bool:
    """Whether the depthwise convolution ``op``'s result goes, read once (through a ReLU / ReLU6
    read once), to a float32 1x1 ``conv2d_nchw88`` that :class:`ConvNchw88ExpandDw3x3Project` will
    fuse with it (kernel-select lowers it later: it is an ``mgb`` op still)."""
    value = op.results[0]
    if not value.has_one_use():
        return False
    user = value.get_user_of_unique_use()
    if isinstance(user, T.ElemwiseOp):
        if user.params()["mode"].value not in ELEMWISE_ACTIVATIONS or len(user.operands) != 1:
            return False
        value = user.results[0]
        if not value.has_one_use():
            return False
        user = value.get_user_of_unique_use()
    if not isinstance(user, T.ConvolutionOp | T.ConvBiasOp) or user.operands[0] != value:
        return False
    lowered = ConvNchw88Avx512().match(user)
    return lowered is not None and pointwise_1x1(lowered.params) and lowered.params["dtype"] == "f32"


def pointwise(
    cin: int, cout: int, cols: int, x: str, x_k: int, w: str, bias: str, res: str, y: str, y_j: int, act: str
) -> tuple[set[tuple[int, int]], str]:
    """The ``(J, I)`` register tiles used and the C statements of a 1x1 convolution of ``cin`` to
    ``cout`` channels over a run of ``cols`` NCHW88 columns (input ``x``, output ``y`` and residual
    ``res``: C pointers, channel blocks ``x_k`` / ``y_j`` floats apart; ``res`` and ``bias`` "0" for
    none; filters ``w`` packed as :class:`ConvNchw88Avx512` packs them), in tiles of
    :data:`TILE_BLOCKS` output blocks x column spans as even as they come (112 = 11 or 12 each)."""
    icp, cbp = -(-cin // VEC) * VEC, -(-cout // VEC)
    wst = strides(ConvNchw88Avx512().filter_spec("dense"), (cout, cin, 1, 1))
    tiles, spans = -(-cbp // TILE_BLOCKS), -(-cols // TILE_COLS)
    widths = sorted({(k + 1) * cols // spans - k * cols // spans for k in range(spans)})
    vectors = sorted({-(-min(TILE_BLOCKS, cbp - t * TILE_BLOCKS) // 2) for t in range(tiles)})
    at = f"(long)t * {TILE_BLOCKS * y_j}L + (long)q0 * {VEC}L"
    call_args = (
        f"{x} + (long)q0 * {VEC}L, {w} + (long)t * {2 * wst['K/16']}L, {icp // VEC}, 1, 1, {x_k}L, 0L, 0L, "
        f"{wst['C/8']}L, 0L, 0L, {wst['K/16']}L, {bias if bias == '0' else f'{bias} + t * 32'}, "
        f"{res if res == '0' else f'{res} + {at}'}, {y} + {at}, {y_j}L, {VEC}L, {ACT_CODES[act]}, nb, 2"
    )
    dispatch = " else ".join(
        f"if (jv == {j} && iv == {i}) {UKR}_{j}x{i}({call_args});" for j in vectors for i in widths
    )
    code = f"""      for (int t = 0; t < {tiles}; ++t) {{
        const int nb = {cbp} - t * {TILE_BLOCKS} < {TILE_BLOCKS} ? {cbp} - t * {TILE_BLOCKS} : {TILE_BLOCKS};
        const int jv = (nb + 1) / 2;
        for (int k = 0; k < {spans}; ++k) {{
          const int q0 = k * {cols} / {spans}, iv = (k + 1) * {cols} / {spans} - q0;
          {dispatch}
        }}
      }}"""
    return {(j, i) for j in vectors for i in widths}, code


def shared_ukrs(tiles: set[tuple[int, int]]) -> str:
    """The micro-kernels of these tiles under nchw88's include-guard keys: one definition per
    translation unit, shared with the plain 1x1 convolutions."""
    return "".join(
        shared_ukr(f"{UKR}_{j}x{i}", dense_ukr512(j, i, VEC, "f32", VEC)) for j, i in sorted(tiles)
    )


def pack_dense(array: np.ndarray, bias: bool) -> tuple[np.ndarray, str] | None:
    """A fused 1x1 convolution's filters (or bias) packed as its plain kernel packs them."""
    return ConvNchw88Avx512().pack(2 if bias else 1, array, {"mode": "dense", "dtype": "f32", "bias": 1})


class ConvNchw88ExpandDw3x3(ConvNchw88Dw3x3Avx512):
    """``conv2d_nchw88_expand_dw3x3``: a float32 1x1 expand convolution (+ bias, ReLU / ReLU6) and
    the stride 1 or 2, padding 0 or 1 depthwise 3x3 after it, on AVX-512, through a per-thread ring
    of expanded rows."""
    # the pair fuses where the expanded tensor reaches ``min_expanded`` floats
    examples = (E.conv_chain((1, 16, 32, 33), (256, 1, 1, 1, "relu6"), (256, 3, 2, -1, "relu6")),)

    family = "conv2d_nchw88_expand_dw3x3"
    priority = 306  # ahead of conv2d_nchw88_dw3x3 (305), which runs the depthwise alone
    epilogues = EPILOGUES
    # expanded floats per image (the tensor kept out of memory) from which the pair fuses: alone, and
    # where the project conv after it fuses too. MobileNetV2 at 1 thread, kernel times fused / plain:
    # the pair 112x112x96 (stride 2) 0.68-0.78, 56x56x144 0.90-0.96, 28x28x192 0.95-1.05, 14x14 and
    # 7x7 1.0-1.1; with the project 0.71, 0.85-0.91, 0.95-0.96, 14x14 0.95-0.96, 7x7x960 1.03
    min_expanded: ClassVar[int] = 1 << 18
    min_expanded_projected: ClassVar[int] = 1 << 16

    def match(self, op: Operation) -> Lowered | None:
        lowered = in_place_3x3(op, chan=True, strides=(1, 2))
        if lowered is None or not isinstance(lowered.operands[0], SSAValue):
            return None
        got = producer(lowered.operands[0], EXPAND_FAMILY)
        if got is None:
            return None
        expand, pe, act = got
        p = lowered.params
        same_tensor = (pe["n"], pe["ih"], pe["iw"], pe["oc"]) == (p["n"], p["ih"], p["iw"], p["c"])
        if not pointwise_1x1(pe) or not same_tensor:
            return None
        expanded = p["ih"] * p["iw"] * -(-p["c"] // VEC) * VEC
        if expanded < self.min_expanded and (
            expanded < self.min_expanded_projected or not project_follows(op)
        ):
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

    def operands(self, p: dict[str, Any]) -> list[str]:
        """The C names of the kernel's operands in order: the expand's input, the depthwise's filters
        and bias (index 2, where kernel-fuse-epilogue inserts a bias), the expand's filters and
        bias, the residual last (where it appends one)."""
        names = ["x", "w", *(["bias"] if p["bias"] else []), "we", *(["be"] if p["e_bias"] else [])]
        return names + (["res"] if p["residual"] else [])

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        name = self.operands(p)[operand]
        if name in ("we", "wp", "be", "bp"):
            return pack_dense(array, bias=name[0] == "b")
        if name == "bias":  # the depthwise's
            return ConvNchw88Dw3x3Avx512().pack(2, array, {"bias": 1, "dtype": "f32"})
        return None

    def depthwise(self, p: dict[str, Any]) -> dict[str, Any]:
        """The depthwise's own parameters (its epilogue under the usual keys)."""
        return p

    def ring(self, p: dict[str, Any]) -> tuple[int, int]:
        """Slots of one thread's ring (the input rows of one register block of output rows) and
        floats per slot."""
        rows = self.vector(p["sh"])[2]
        return (rows - 1) * p["sh"] + TAPS, -(-p["c"] // VEC) * VEC * p["iw"]

    def scratch(self, p: dict[str, Any]) -> int:
        """Floats of one thread's scratch: its ring."""
        slots, per_slot = self.ring(p)
        return slots * per_slot

    def work(self, p: dict[str, Any]) -> int:
        """Multiply-adds per run."""
        per_channel = p["ih"] * p["iw"] * p["ic"] + p["oh"] * p["ow"] * TAPS * TAPS
        return p["n"] * -(-p["c"] // VEC) * VEC * per_channel

    def threads(self, p: dict[str, Any]) -> int:
        """The most threads the kernel runs on (each with its own ring and at least two rows)."""
        return max(1, min(parallel_threads(self.work(p)), MAX_THREADS, p["oh"] // 2))

    def workspace(self, p: dict[str, Any]) -> int:
        return self.threads(p) * self.scratch(p) * 4

    def _expand_rows(self, p: dict[str, Any]) -> tuple[set[tuple[int, int]], str]:
        """The register tiles used and the C statements computing expanded rows ``hn`` up to
        ``hend`` (exclusive) of image ``n`` into their ring slots."""
        ic, c, h, w = p["ic"], p["c"], p["ih"], p["iw"]
        icp = -(-ic // VEC) * VEC
        slots, per_slot = self.ring(p)
        xs = strides(Layout.NCHW88, (p["n"], icp, h, w))
        be = "be" if p["e_bias"] else "0"
        tiles, run = pointwise(ic, c, w, "xr", xs["C/8"], "we", be, "0", "slot", w * VEC, p["e_act"])
        x_row = offset(Layout.NCHW88, (p["n"], icp, h, w), {"N": "n", "H": "hn"})
        code = f"""    for (; hn < hend; ++hn) {{
      const float* xr = x + {x_row};
      float* slot = ring + (long)(hn % {slots}) * {per_slot}L;
{run}
    }}"""
        return tiles, code

    def _after_rows(self, p: dict[str, Any]) -> tuple[set[tuple[int, int]], str, str, RowAt]:
        """What follows the depthwise rows of a block: the register tiles used and the C statements;
        and where the depthwise writes its rows: a C pointer and a row's offset from it."""
        out_shape = (p["n"], -(-p["c"] // VEC) * VEC, p["oh"], p["ow"])
        return set(), "", "y", lambda h: offset(Layout.NCHW88, out_shape, {"N": "n", "C/8": "b", "H": h})

    def _scratch_pointers(self, p: dict[str, Any]) -> str:
        """C declarations of the thread's scratch beyond its ring."""
        return ""

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        dw = self.depthwise(p)
        n, c, ih, iw, oh = (p[k] for k in ("n", "c", "ih", "iw", "oh"))
        s, ph = p["sh"], p["ph"]
        slots, per_slot = self.ring(p)
        vec, regs, rows = self.vector(s)
        window = (rows - 1) * s + TAPS  # input rows of one block of output rows

        def ring_row(h: str) -> str:  # channel block b of expanded row h, in its slot
            return f"ring + (long)({h} % {slots}) * {per_slot}L + (long)b * {iw * VEC}L"

        expand_tiles, expand = self._expand_rows(p)
        after_tiles, after, dw_y, dw_row = self._after_rows(p)
        body = row_group(dw, vec, regs, rows, ring_row, dw_row, dw_y, end="r1")
        names = self.operands(p)
        args = ", ".join([*(f"const void* {a}_" for a in names), "void* y_", "unsigned char* ws", "int nt"])
        casts = " ".join(f"const float* {a} = (const float*){a}_;" for a in names)
        cap = self.threads(p)
        threads = f"nt < {cap} ? nt : {cap}" if cap > 1 else "1"
        return f"""{COMMON}{COMMON512}{ACT512}{shared_ukrs(expand_tiles | after_tiles)}
static void {sym}({args}) {{
  {casts}
  float* y = (float*)y_;
  (void)nt;
  /* the row above / below the image: zeros, read by the border rows' out-of-range taps */
  static const float zrow[{iw * VEC}];
  const int nth = {threads};
  #pragma omp parallel for schedule(static) num_threads(nth) if(nth > 1)
  for (int th = 0; th < nth; ++th) {{
  /* this thread's output rows (in blocks of {rows} from r0, the last block maybe one row), and
     its ring of expanded rows */
  const int r0 = th * {oh} / nth, r1 = (th + 1) * {oh} / nth;
  float* ring = (float*)ws + (long)th * {self.scratch(p)}L;
{self._scratch_pointers(p)}
  for (int n = 0; n < {n}; ++n) {{
  int hn = r0 * {s} - {ph} > 0 ? r0 * {s} - {ph} : 0;  /* the next row to expand */
  for (int r = r0; r < r1; r += {rows}) {{
    const int hend = r * {s} - {ph} + {window} < {ih} ? r * {s} - {ph} + {window} : {ih};
{expand}
  for (int b = 0; b < {-(-c // VEC)}; ++b) {{
    const float* wb = w + {offset(Layout.C11RSc8, (c, 1, 1, TAPS, TAPS), {"G/8": "b"})};
{filter_registers(vec, c)}
    const __m256 bv = {bias_registers(vec, bool(dw["bias"]))};
{body}
  }}
{after}
  }}
  }}
  }}
}}
"""


class ConvNchw88ExpandDw3x3Project(ConvNchw88ExpandDw3x3):
    """``conv2d_nchw88_expand_dw3x3_project``: :class:`ConvNchw88ExpandDw3x3` and the 1x1 project
    convolution after it (+ bias, residual, activation), the depthwise's rows kept in a per-thread
    buffer of one register block of rows."""
    # the three fuse where the expanded tensor reaches ``min_expanded_projected`` floats
    examples = (
        E.conv_chain(
            (1, 24, 28, 29), (96, 1, 1, 1, "relu6"), (96, 3, 1, -1, "relu6"), (24, 1, 1, 1, "identity"),
            residual=True,
        ),
        E.conv_chain(
            (2, 16, 18, 16), (256, 1, 1, 1, "relu"), (256, 3, 2, -1, "identity"), (40, 1, 1, 1, "identity")
        ),
    )

    family = "conv2d_nchw88_expand_dw3x3_project"
    priority = 307  # ahead of the direct conv2d_nchw88 (280) that runs the project alone

    def match(self, op: Operation) -> Lowered | None:
        lowered = ConvNchw88Avx512().match(op)
        if lowered is None or not isinstance(lowered.operands[0], SSAValue):
            return None
        pp = lowered.params
        if not pointwise_1x1(pp) or pp["dtype"] != "f32":
            return None
        got = producer(lowered.operands[0], ConvNchw88ExpandDw3x3.family)
        if got is None:
            return None
        fused, p, act = got
        if (pp["n"], pp["ih"], pp["iw"], pp["ic"]) != (p["n"], p["oh"], p["ow"], p["c"]):
            return None
        params = {k: v for k, v in p.items() if k not in ("bias", "act", "residual")}
        params.update(d_bias=p["bias"], d_act=act, oc=pp["oc"])
        params.update({k: pp[k] for k in ("bias", "residual", "act")})
        x_e, *inner = fused.args  # the expand's input, the depthwise's and expand's filters and biases
        project, residual = lowered.operands[1 : 2 + pp["bias"]], lowered.operands[2 + pp["bias"] :]
        return Lowered(params, [x_e, *project, *inner, *residual])

    def symbol(self, p: dict[str, Any]) -> str:
        expand = epilogue_sym({"bias": p["e_bias"], "act": p["e_act"]})
        dw = epilogue_sym({"bias": p["d_bias"], "act": p["d_act"]})
        return sym_join(
            self.family, f"ic{p['ic']}", *plane_sym(p), f"oc{p['oc']}", self.isa,
            "e" + expand, "d" + dw, epilogue_sym(p),
        )  # fmt: skip

    def operands(self, p: dict[str, Any]) -> list[str]:
        """As :meth:`ConvNchw88ExpandDw3x3.operands` with the project's filters and bias first (the
        bias at index 2), the residual (the project's) last."""
        names = ["x", "wp", *(["bp"] if p["bias"] else []), "w", *(["bias"] if p["d_bias"] else [])]
        names += ["we", *(["be"] if p["e_bias"] else [])]
        return names + (["res"] if p["residual"] else [])

    def depthwise(self, p: dict[str, Any]) -> dict[str, Any]:
        return {**p, "bias": p["d_bias"], "act": p["d_act"], "residual": 0}

    def scratch(self, p: dict[str, Any]) -> int:
        """Floats of one thread's scratch: its ring, then one block of depthwise output rows."""
        rows = self.vector(p["sh"])[2]
        return super().scratch(p) + -(-p["c"] // VEC) * VEC * rows * p["ow"]

    def work(self, p: dict[str, Any]) -> int:
        return super().work(p) + p["n"] * p["oh"] * p["ow"] * -(-p["c"] // VEC) * VEC * p["oc"]

    def _after_rows(self, p: dict[str, Any]) -> tuple[set[tuple[int, int]], str, str, RowAt]:
        c, oh, ow, oc = p["c"], p["oh"], p["ow"], p["oc"]
        rows = self.vector(p["sh"])[2]
        out_shape = (p["n"], -(-oc // VEC) * VEC, oh, ow)
        y_j = strides(Layout.NCHW88, out_shape)["C/8"]
        at = offset(Layout.NCHW88, out_shape, {"N": "n", "H": "r"})
        bias, res = ("bp" if p["bias"] else "0"), ("ro" if p["residual"] else "0")
        # a block of rows, or a lone row at the end of a thread's rows: one run of columns each
        runs = [
            pointwise(c, oc, h * ow, "dwo", rows * ow * VEC, "wp", bias, res, "yo", y_j, p["act"])
            for h in sorted({rows, 1}, reverse=True)
        ]
        tiles = set().union(*(t for t, _ in runs))
        code = runs[0][1]
        if rows > 1:
            code = f"    if (r + {rows} <= r1) {{\n{code}\n    }} else {{\n{runs[1][1]}\n    }}"
        code = f"""    {{  /* the project over the block's rows: one run of columns in NCHW88 */
      float* yo = y + {at};
      const float* ro = {"res + " + at if p["residual"] else "0"};
      (void)ro;
{code}
    }}"""
        return tiles, code, "dwo", lambda h: f"(long)b * {rows * ow * VEC}L + (long)(({h}) - r) * {ow * VEC}L"

    def _scratch_pointers(self, p: dict[str, Any]) -> str:
        slots, per_slot = self.ring(p)
        return f"  float* dwo = ring + {slots * per_slot}L;  /* one block of depthwise output rows */"


KERNEL_UNITS = (ConvNchw88ExpandDw3x3(), ConvNchw88ExpandDw3x3Project())
