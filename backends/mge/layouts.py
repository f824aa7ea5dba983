"""Layout-typed graphs in ``.mge`` files: how ``#layout.fmt<...>`` tensors and ``layout.relayout``
are written in MegEngine's form and read back (spec B.5, B.6).

Writing (hooks in :mod:`backends.mge.lowering`):

* ops in a blocked format carry MegEngine's ``format`` param, and constants in a packed layout are
  written with their physical shape and bytes (nothing to do here: the writer writes what the IR
  holds);
* ``layout.relayout`` becomes what MegEngine's ``ReformatManager`` emits. Between plain NCHW and
  an NCHWx layout that is the generic pair with *runtime* shapes, as in MegEngine's dumps::

      NCHW -> NCHWx: GetVarShape, Subtensor[0..3], FLOOR_DIV(C, x), Concat(N, C/x, x, H, W),
                     Reshape, Dimshuffle(0, 1, 3, 4, 2)
      NCHWx -> NCHW: Dimshuffle(0, 1, 4, 2, 3), GetVarShape, Subtensor[0..3], MUL(x, C/x),
                     Concat(N, C, H, W), Reshape

  and a ``RelayoutFormat`` operator where MegEngine uses one: NCHW_NHWCD4I / NHWCD4I_NCHW
  (NHWCD4), NCHW_NCHW4_IC_SMALL (an NCHW4 input with fewer than 4 channels), NCHW4_CHWN4 /
  CHWN4_NCHW4, and NCHW_NCHW64 / NCHW64_NCHW / NCHW_NHWC / NHWC_NCHW for 4-bit data;
* the channel slice that drops padded channels after such a conversion is written as MegEngine's
  PaddingChannelPass writes it: ``Subtensor`` with a step item for every other axis.

Small int32 constants of these shape sub-graphs are shared, as MegEngine shares equal constants.

Reading (hooks in :mod:`backends.mge.reader`): convs, pooling and elementwise ops in a blocked
format get operands typed with their layouts (:func:`dialects.layout.conv_operand_layouts`;
constants are retyped in place, their bytes are already packed), and the Reshape/Dimshuffle pairs
and ``RelayoutFormat`` operators above become ``layout.relayout`` again, so a file read back runs
in the reference interpreter and writes back to the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import SSAValue

from backends.mge.read_context import (
    ReadContext,
    ReadVar,
    define,
    emit,
    enum_of,
    fail,
    input_var,
    ssa_of,
    unsupported,
)
from backends.mge.records import WOpr
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.dtypes import QuantizedType
from dialects.errors import XmgeError

if TYPE_CHECKING:
    from backends.mge.container import RawOpr
    from backends.mge.lowering import Lowering

Layout = L.Layout
Format = enums.Format
RF = enums.RelayoutFormatMode
E = enums.ElemwiseMode

# NCHW-family layouts converted by the generic Reshape/Dimshuffle pair: layout -> block size
BLOCKED: dict[Layout, int] = {
    Layout.NCHW4: 4,
    Layout.NCHW44: 4,
    Layout.NCHW88: 8,
    Layout.NCHW32: 32,
    Layout.NCHW64: 64,
}
TO_BLOCKED = (0, 1, 3, 4, 2)  # (N, C/x, x, H, W) -> (N, C/x, H, W, x)
TO_PLAIN = (0, 1, 4, 2, 3)  # (N, C/x, H, W, x) -> (N, C/x, x, H, W)
FOUR_BIT = frozenset({"qint4", "quint4"})
# MegEngine stores NHWCD4 constants (weights relaid by RelayoutFormat, biases) as
# Image2DPack4-format tensors of one MultipleDeviceTensorWithFormatHolder: align_axis per layout
# (spec A.7, B.6.2; DENSEI 3 and NHWCD4 2 observed in MegEngine's enable_hwcd4 dumps)
IMAGE2D_ALIGN_AXIS: dict[Layout, int] = {
    Layout.NHWCD4: 2,
    Layout.DENSEI: 3,
    Layout.GROUPI: 4,
    Layout.CHANI: 1,
}


def image2d_axis(t: object) -> int | None:
    """The Image2D ``align_axis`` MegEngine gives a constant of type ``t``, or ``None``."""
    lay = L.layout_of(t) if isinstance(t, TensorType) else None
    return IMAGE2D_ALIGN_AXIS.get(lay) if lay is not None else None


class LayoutWriteError(XmgeError, ValueError):
    """A relayout with no MegEngine form (the message names it)."""


def _ttype(v: SSAValue) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def _is_4bit(t: TensorType) -> bool:
    e = t.element_type
    return isinstance(e, QuantizedType) and e.kind.data in FOUR_BIT


def _lay_name(lay: Layout | None) -> str:
    return lay.value if lay is not None else "plain NCHW"


# ----------------------------------------------------------------------------------------------
# Writing


def lower_layout_op(lw: Lowering, op: T.MgbOp) -> bool:
    """Write ``op`` if it is one of the layout forms (True), else leave it to the writer (False)."""
    if isinstance(op, L.RelayoutOp):
        _lower_relayout(lw, op)
        return True
    if isinstance(op, T.SubtensorOp):
        channels = padding_slice_channels(op)
        if channels is not None:
            x = lw.ids[op.operands[0]]
            vid = _padding_slice(lw, x, channels, lw.var_name(op, "Subtensor"), _opr_name(op))
            lw.ids[op.results[0]] = vid
            return True
    return False


def _opr_name(op: T.MgbOp) -> str | None:
    a = op.attributes.get("opr_name")
    return a.data if isinstance(a, StringAttr) else None


def padding_slice_channels(op: T.SubtensorOp) -> int | None:
    """``C`` when ``op`` is ``x[:, :C]`` of a 4-D tensor fresh out of a relayout from a blocked
    layout: the slice MegEngine's PaddingChannelPass writes after padded channels."""
    src = op.operands[0]
    if not isinstance(src.owner, L.RelayoutOp) or L.layout_of(src.owner.input.type) is None:
        return None
    shape = _ttype(src).get_shape()
    p = op.params()
    if len(shape) != 4 or any(p["drop"]):
        return None
    channels = None
    for axis, start, stop, step in zip(p["axes"], p["starts"], p["stops"], p["steps"], strict=True):
        s0, s1, st = slice(start, stop, step).indices(shape[axis])
        if (s0, st) != (0, 1):
            return None
        if axis == 1 and s1 < shape[1]:
            channels = s1
        elif s1 != shape[axis]:
            return None
    return channels


def _padding_slice(lw: Lowering, x: int, channels: int, name: str, opr_name: str | None = None) -> int:
    """MegEngine's ``Subtensor`` dropping padded channels: steps on axes 3, 2, 0, the end on 1."""
    items, inputs = [], [x]
    for axis in (3, 2, 1, 0):
        if axis == 1:
            items.append((1, False, True, False, False))
            inputs.append(lw.int_const([channels]))
        else:
            items.append((axis, False, False, True, False))
            inputs.append(lw.int_const([1]))
    wopr = WOpr("Subtensor", inputs, params=[("IndexDescMaskDump", {"items": tuple(items)})], name=opr_name)
    (vid,) = lw.add(wopr, [name])
    return vid


def _lower_relayout(lw: Lowering, op: L.RelayoutOp) -> None:
    p = op.params()
    src_t, dst_t = _ttype(op.input), _ttype(op.output)
    for lay in (p["src"], p["dst"]):
        if lay is not None and lay not in L.ACTIVATION_LAYOUTS:
            raise LayoutWriteError(
                f"layout.relayout into or out of the filter layout {lay.value} is not a runtime "
                "operator in MegEngine: fold it into the constant first (param-fuse)"
            )
    em = _Emitter(lw)
    vid = em.relayout(lw.ids[op.input], src_t, dst_t, p["channels"], lw.var_name(op, "Relayout"))
    lw.oprs[-1].name = _opr_name(op)
    lw.ids[op.output] = vid


@dataclass
class _Emitter:
    lw: Lowering

    # -- single operators ---------------------------------------------------------------------
    def opr(self, kind: str, inputs: list[int], params: list[tuple[str, dict[str, Any]]], name: str) -> int:
        (vid,) = self.lw.add(WOpr(kind, inputs, params=params), [name])
        return vid

    def dimshuffle(self, x: int, pattern: Sequence[int], name: str = "Dimshuffle") -> int:
        params = {"pattern": tuple(pattern), "ndim": len(pattern)}
        return self.opr("Dimshuffle", [x], [("Dimshuffle", params)], name)

    def relayout_format(self, x: int, mode: Any, name: str, oc: int = 0) -> int:
        params = {"mode": enums.number(mode), "oc": oc, "group": 1}
        return self.opr("RelayoutFormat", [x], [("RelayoutFormat", params)], name)

    def shape_items(self, x: int, ndim: int) -> tuple[int, list[Callable[[], int]]]:
        shape = self.opr("GetVarShape", [x], [("OptionalAxisV1", {"axis": 7})], "GetVarShape")
        item = {"items": ((0, False, False, False, True),)}

        def part(i: int) -> Callable[[], int]:
            return lambda: self.opr(
                "Subtensor", [shape, self.lw.int_const([i])], [("IndexDescMaskDump", item)], "Subtensor"
            )

        return shape, [part(i) for i in range(ndim)]

    def elem(self, mode: Any, inputs: list[int], name: str) -> int:
        return self.opr("Elemwise", inputs, [("Elemwise", {"mode": enums.number(mode)})], name)

    def reshape(self, x: int, parts: list[int], name: str) -> int:
        target = self.opr("Concat", parts, [("Axis", {"axis": 0})], "Concat")
        return self.opr("Reshape", [x, target], [("OptionalAxisV1", {"axis": 7})], name)

    # -- the generic pair -----------------------------------------------------------------------
    def block(self, x: int, block: int, name: str) -> int:
        """NCHW -> NCHWx: Reshape to (N, C/x, x, H, W) from x's runtime shape, then Dimshuffle."""
        _, item = self.shape_items(x, 4)
        n, c = item[0](), item[1]()
        b = self.lw.int_const([block])
        cb = self.elem(E.FLOOR_DIV, [c, b], "FLOOR_DIV")
        h, w = item[2](), item[3]()
        r = self.reshape(x, [n, cb, b, h, w], "Reshape")
        return self.dimshuffle(r, TO_BLOCKED, name)

    def unblock(self, x: int, block: int, name: str) -> int:
        """NCHWx -> NCHW: Dimshuffle to (N, C/x, x, H, W), then Reshape from x's runtime shape."""
        d = self.dimshuffle(x, TO_PLAIN)
        _, item = self.shape_items(x, 4)
        n, cb = item[0](), item[1]()
        c = self.elem(E.MUL, [self.lw.int_const([block]), cb], "MUL")
        h, w = item[2](), item[3]()
        return self.reshape(d, [n, c, h, w], name)

    # -- any relayout -------------------------------------------------------------------------
    def relayout(self, x: int, src_t: TensorType, dst_t: TensorType, channels: int | None, name: str) -> int:
        src, dst = L.layout_of(src_t), L.layout_of(dst_t)
        four_bit = _is_4bit(src_t)
        if (src, dst) == (Layout.NCHW4, Layout.CHWN4):
            return self.relayout_format(x, RF.NCHW4_CHWN4, name)
        if (src, dst) == (Layout.CHWN4, Layout.NCHW4):
            return self.relayout_format(x, RF.CHWN4_NCHW4, name)
        if src is not None and dst is not None:
            # between two blocked layouts: through plain NCHW (MegEngine emits one Reshape/
            # Dimshuffle/Reshape chain for NCHW4 <-> NCHW32; the result is the same)
            plain = L.to_logical(src_t)
            mid = self.relayout(x, src_t, plain, None, "Relayout")
            return self.relayout(mid, plain, dst_t, None, name)
        if src is None:
            assert dst is not None
            return self.from_plain(x, src_t, dst, channels, four_bit, name)
        return self.to_plain(x, src_t, channels, four_bit, name)

    def from_plain(
        self, x: int, t: TensorType, dst: Layout, channels: int | None, four_bit: bool, name: str
    ) -> int:
        shape = t.get_shape()
        c = shape[1] if len(shape) == 4 else None
        if dst == Layout.NHWCD4:
            return self.relayout_format(x, RF.NCHW_NHWCD4I, name)
        if dst == Layout.NCHW64 and four_bit:
            return self.relayout_format(x, RF.NCHW_NCHW64, name)
        if dst == Layout.NHWC:
            if four_bit:
                return self.relayout_format(x, RF.NCHW_NHWC, name)
            return self.dimshuffle(x, (0, 2, 3, 1), name)
        if dst == Layout.CHWN4:
            mid = self.from_plain(x, t, Layout.NCHW4, channels, four_bit, "Relayout")
            return self.relayout_format(mid, RF.NCHW4_CHWN4, name)
        block = BLOCKED.get(dst)
        if block is None or c is None:
            raise LayoutWriteError(f"no MegEngine form for a relayout from plain {t} to {dst.value}")
        if dst == Layout.NCHW4 and c < 4:
            return self.relayout_format(x, RF.NCHW_NCHW4_IC_SMALL, name)
        if c % block:
            raise LayoutWriteError(
                f"relayout of {c} channels into {dst.value} needs zero channels appended "
                f"(xmge writes that only for NCHW4 inputs with fewer than 4 channels)"
            )
        return self.block(x, block, name)

    def to_plain(self, x: int, t: TensorType, channels: int | None, four_bit: bool, name: str) -> int:
        src = L.layout_of(t)
        assert src is not None
        padded = L.to_logical(t).get_shape()[1]
        sliced = channels is not None and channels < padded
        inner = "Relayout" if sliced else name
        if src == Layout.NHWCD4:
            y = self.relayout_format(x, RF.NHWCD4I_NCHW, inner)
        elif src == Layout.NCHW64 and four_bit:
            y = self.relayout_format(x, RF.NCHW64_NCHW, name, oc=channels or 0)
            sliced = False
        elif src == Layout.NHWC:
            mode = RF.NHWC_NCHW
            y = self.relayout_format(x, mode, inner) if four_bit else self.dimshuffle(x, (0, 3, 1, 2), inner)
        elif src == Layout.CHWN4:
            mid = self.relayout_format(x, RF.CHWN4_NCHW4, "Relayout")
            y = self.unblock(mid, 4, inner)
        else:
            y = self.unblock(x, BLOCKED[src], inner)
        if sliced:
            assert channels is not None
            y = _padding_slice(self.lw, y, channels, name)
        return y


# ----------------------------------------------------------------------------------------------
# Reading


@dataclass
class Pending:
    """Half of a Reshape/Dimshuffle relayout pair, not emitted yet: ``src`` reshaped to
    (N, C/x, x, H, W) (``to_blocked``) or ``src`` (blocked) dimshuffled to it. If the other half
    follows, the pair becomes one ``layout.relayout``; any other reader gets ``materialize()``."""

    src: ReadVar
    block: int
    to_blocked: bool
    materialize: Callable[[], SSAValue]


def block_layout(ctx: ReadContext, block: int) -> Layout:
    """The NCHW-family layout of ``block``-channel blocks in this graph (4: NCHW44 if any operator
    has format NCHW44 or NCHW44_DOT, else NCHW4)."""
    if ctx.layouts is None:
        formats = set()
        for o in ctx.graph.oprs:
            for p in o.params:
                if p.kind in ("Convolution", "ConvBias", "Pooling", "AdaptivePooling"):
                    formats.add(p.values.get("format"))
        nchw44 = {enums.number(Format.NCHW44), enums.number(Format.NCHW44_DOT)}
        ctx.layouts = {4: Layout.NCHW44 if formats & nchw44 else Layout.NCHW4}
    if block == 4:
        return ctx.layouts[4]
    return {8: Layout.NCHW88, 32: Layout.NCHW32, 64: Layout.NCHW64}[block]


def retype(var: ReadVar, layout: Layout | None) -> ReadVar:
    """A constant ``var`` (packed bytes under a plain type, as in the file) typed with ``layout``."""
    t = var.type
    if layout is None or t is None or L.layout_of(t) == layout or var.value is None or var.shape_only:
        return var
    if L.layout_of(t) is not None:
        return var  # the op's own checks name the mismatch
    shape = t.get_shape()
    try:
        L.SPECS[layout].padded_logical_shape(shape)
    except ValueError:
        return var
    new_t = L.with_layout(t, layout, shape)
    if var.ssa is None:
        var.type = new_t  # not emitted yet: every reader sees the packed type
        return var
    return ReadVar(type=new_t, value=var.value, const_weight=var.const_weight, name=var.name)


def conv_operands(op: RawOpr, ins: list[ReadVar], params: dict[str, Any]) -> list[ReadVar]:
    """The operands of a conv in a blocked format, constants typed with their layouts."""
    fmt = params["format"]
    if fmt == Format.NCHW or len(ins) < 2 or ins[1].type is None:
        return ins
    try:
        lay = L.conv_operand_layouts(fmt, params["sparse"], len(ins[1].type.get_shape()))
    except ValueError as exc:
        raise fail(op, str(exc)) from exc
    out = [retype(ins[0], lay.src), retype(ins[1], lay.filter)]
    for v in ins[2:]:
        big = v.type is not None and math.prod(v.type.get_shape()) != 1
        out.append(retype(v, lay.dst) if big else v)
    return out


def elemwise_operands(ins: list[ReadVar]) -> list[ReadVar]:
    """Constants next to a blocked operand take its layout (MegEngine's (1, C/x, 1, 1, x) biases)."""
    found = {L.layout_of(v.type) for v in ins if v.type is not None and v.value is None}
    found.discard(None)
    if len(found) != 1:
        return ins
    (layout,) = found
    rank = L.SPECS[layout].rank
    return [
        retype(v, layout)
        if v.type is not None and len(v.type.get_shape()) == rank and math.prod(v.type.get_shape()) != 1
        else v
        for v in ins
    ]


def _relayout(ctx: ReadContext, value: SSAValue, dst: Layout | None, channels: int | None = None) -> SSAValue:
    new = L.RelayoutOp.build(value, dst, channels)
    ctx.block.add_op(new)
    return new.output


def _define_value(ctx: ReadContext, op: RawOpr, value: SSAValue) -> None:
    define(ctx, op, 0, ReadVar(type=value.type, ssa=value))


def read_reshape(ctx: ReadContext, op: RawOpr, x: ReadVar, target: Sequence[int]) -> bool:
    """The second half of NCHWx -> NCHW, or the first half of NCHW -> NCHWx (True: handled)."""
    pend = x.pending
    if isinstance(pend, Pending) and not pend.to_blocked:
        src_t = pend.src.type
        if src_t is not None and tuple(target) == tuple(L.to_logical(src_t).get_shape()):
            src = ssa_of(ctx, pend.src, "relayout input")
            _define_value(ctx, op, _relayout(ctx, src, None))
            return True
        return False
    t = x.type
    if t is None or L.layout_of(t) is not None or len(t.get_shape()) != 4 or len(target) != 5:
        return False
    n, c, h, w = t.get_shape()
    block = target[2]
    if block not in (4, 8, 32, 64) or tuple(target) != (n, c // block, block, h, w) or c % block:
        return False
    out_t = TensorType(t.element_type, list(target))

    def materialize() -> SSAValue:
        return emit(ctx, op, T.ReshapeOp, [x], [out_t]).results[0]

    define(ctx, op, 0, ReadVar(type=out_t, pending=Pending(x, block, True, materialize)))
    return True


def read_dimshuffle(ctx: ReadContext, op: RawOpr, x: ReadVar, pattern: Sequence[int]) -> bool:
    """The second half of NCHW -> NCHWx, or the first half of NCHWx -> NCHW (True: handled)."""
    pend = x.pending
    if isinstance(pend, Pending) and pend.to_blocked and tuple(pattern) == TO_BLOCKED:
        src = ssa_of(ctx, pend.src, "relayout input")
        _define_value(ctx, op, _relayout(ctx, src, block_layout(ctx, pend.block)))
        return True
    t = x.type
    lay = L.layout_of(t) if t is not None else None
    if lay not in BLOCKED or tuple(pattern) != TO_PLAIN:
        return False
    assert t is not None
    n, cb, h, w, b = t.get_shape()
    out_t = TensorType(t.element_type, [n, cb, b, h, w])

    def materialize() -> SSAValue:
        plain = _relayout(ctx, ssa_of(ctx, x, "relayout input"), None)
        reshape = T.ReshapeOp.make([plain], [out_t])
        ctx.block.add_op(reshape)
        return reshape.results[0]

    define(ctx, op, 0, ReadVar(type=out_t, pending=Pending(x, b, False, materialize)))
    return True


# RelayoutFormat modes read as relayouts: mode -> (source layout, result layout); "block4" is the
# graph's 4-channel layout (NCHW44 or NCHW4)
_RF_READ: dict[Any, tuple[Layout | str | None, Layout | str | None]] = {
    RF.NCHW_NHWCD4: (None, Layout.NHWCD4),
    RF.NCHW_NHWCD4I: (None, Layout.NHWCD4),
    RF.NHWCD4_NCHW: (Layout.NHWCD4, None),
    RF.NHWCD4I_NCHW: (Layout.NHWCD4, None),
    RF.NCHW4_CHWN4: ("block4", Layout.CHWN4),
    RF.CHWN4_NCHW4: (Layout.CHWN4, "block4"),
    RF.NCHW_NCHW88: (None, Layout.NCHW88),
    RF.NCHW88_NCHW: (Layout.NCHW88, None),
    RF.NCHW_NCHW4_IC_SMALL: (None, "block4"),
    RF.NCHW_NCHW4: (None, "block4"),
    RF.NCHW4_NCHW: ("block4", None),
    RF.NCHW_NCHW64: (None, Layout.NCHW64),
    RF.NCHW64_NCHW: (Layout.NCHW64, None),
    RF.NCHW_NHWC: (None, Layout.NHWC),
    RF.NHWC_NCHW: (Layout.NHWC, None),
    RF.INTER_WEIGHT_DENSEI: (None, Layout.DENSEI),
    RF.INTER_WEIGHT_GROUPI: (None, Layout.GROUPI),
    RF.INTER_WEIGHT_CHANI: (None, Layout.CHANI),
    RF.NCHW_NCHW88_CONV_DENSE_WEIGHT: (None, Layout.KCRSc8k8),
    RF.NCHW_NCHW88_CONV_CHAN_WEIGHT: (None, Layout.C11RSc8),
    RF.NCHW_NCHW88_CONV_GROUP_WEIGHT: (None, Layout.GKCRSc8k8),
    RF.NCHW_NCHW4_IC_SMALL_CONV_DENSE_WEIGHT: (None, Layout.KCRSc4),
}


def read_relayout_format(ctx: ReadContext, op: RawOpr) -> None:
    """``RelayoutFormat`` as ``layout.relayout`` (constants are relaid while reading)."""
    p = op.param("RelayoutFormat")
    mode = enum_of(op, RF, p["mode"], "mode")
    if mode not in _RF_READ:
        raise unsupported(op, f"RelayoutFormat mode {mode.name} is not supported by xmge's reader")
    x = input_var(ctx, op, 0)
    if x.type is None:
        raise fail(op, "input has no known type")
    src, dst = (
        block_layout(ctx, 4) if lay == "block4" else cast(Layout | None, lay) for lay in _RF_READ[mode]
    )
    if L.layout_of(x.type) != src:
        x = retype(x, src)
        if L.layout_of(x.type) != src:
            raise fail(op, f"{mode.name} needs a {_lay_name(src)} input, got {x.type}")
    t = x.type
    assert t is not None
    channels = None
    if src is None and dst in (Layout.NHWCD4, Layout.NCHW4, Layout.DENSEI, Layout.KCRSc4):
        channels = t.get_shape()[1]  # these modes zero-pad channels up to a multiple of 4
    elif dst is None and p["oc"]:
        channels = int(p["oc"])
    shape = L.to_logical(t, channels if src is not None else None).get_shape()
    if x.value is not None and not x.shape_only and x.ssa is None:  # a constant: relaid now
        try:
            value = L.relayout_array(x.value, src, dst, shape)
        except ValueError as exc:
            raise fail(op, f"{mode.name}: {exc}") from exc
        out_t = TensorType(t.element_type, list(value.shape))
        define(ctx, op, 0, ReadVar(type=L.with_layout(out_t, dst, value.shape), value=value))
        return
    new = L.RelayoutOp.build(ssa_of(ctx, x, "RelayoutFormat input"), dst, channels)
    try:
        new.verify()
    except Exception as exc:
        raise fail(op, f"{mode.name}: {exc}") from exc
    ctx.block.add_op(new)
    _define_value(ctx, op, new.output)


def read_blocked_resize(
    ctx: ReadContext, op: RawOpr, block: int, out_hw: tuple[int, int], imode: enums.InterpolationMode
) -> None:
    """A Resize in a ``block``-channel format (input and output blocked) as relayout to NCHW,
    the NCHW resize and relayout back."""
    lay = block_layout(ctx, block)
    x = retype(input_var(ctx, op, 0), lay)
    if x.type is None or L.layout_of(x.type) != lay:
        raise fail(op, f"Resize in {_lay_name(lay)} needs a {_lay_name(lay)} input, got {x.type}")
    channels = L.to_logical(x.type).get_shape()[1]
    plain = _relayout(ctx, ssa_of(ctx, x, "Resize input"), None)
    resized = emit(
        ctx, op, T.ResizeOp, [ReadVar(type=plain.type, ssa=plain)],
        out_shape=out_hw, imode=imode, format=enums.Format.NCHW,
    )  # fmt: skip
    _define_value(ctx, op, _relayout(ctx, resized.results[0], lay, channels))
