"""Shared pieces of the layout passes: moving values between layouts, replacing an op by its
blocked form, and the patterns by which pooling, elementwise, concat and reduce ops follow a
blocked input (MegEngine's TensorReformatPass mechanics, spec B.5 and B.6.3).

Every conversion keeps the graph correct on its own: a converted op gets its inputs through
``layout.relayout`` (folded when they are constants) and hands its result back through a relayout
to plain NCHW. An op that can run blocked takes the blocked value from under such a relayout; the
canonicalization patterns cancel what is left between two blocked ops. Ops that cannot run blocked
are never touched, so they keep reading NCHW: that is MegEngine's "convert back to NCHW" rule,
graph outputs included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
)
from xdsl.rewriter import InsertPoint

from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.dtypes import QuantizedType, is_float
from passes.layout.canonicalize import RELAYOUT_PATTERNS
from passes.pattern_pass import apply_patterns
from passes.values import shape as shape
from passes.values import tensor_type as tensor_type

Format = enums.Format
Layout = L.Layout


def is_qint8(v: SSAValue) -> bool:
    e = tensor_type(v).element_type
    return isinstance(e, QuantizedType) and e.kind.data == "qint8"


def is_float_value(v: SSAValue) -> bool:
    return is_float(tensor_type(v).element_type)


def blocked_source(v: SSAValue, via: Layout | None = None) -> tuple[SSAValue, Layout] | None:
    """``(x, A)`` when ``v`` is ``relayout(x : A) -> via`` (default plain) and keeps every element
    of ``x``."""
    op = v.owner
    if isinstance(op, L.RelayoutOp) and L.layout_of(v.type) == via and op.is_lossless():
        src = L.layout_of(op.input.type)
        if src is not None:
            return op.input, src
    return None


def as_layout(v: SSAValue, layout: Layout | None, rewriter: PatternRewriter, before: Operation) -> SSAValue:
    """``v`` in ``layout``: the blocked value under a relayout back to plain if there is one,
    otherwise a new relayout (of a constant: folded by ``FoldRelayoutOfConst``)."""
    if L.layout_of(v.type) == layout:
        return v
    found = blocked_source(v, L.layout_of(v.type))
    if found is not None and found[1] == layout:
        return found[0]
    op = L.RelayoutOp.build(v, layout)
    rewriter.insert(op, InsertPoint.before(before))
    return op.output


def replace_with_blocked(op: Operation, new: Operation, rewriter: PatternRewriter) -> None:
    """Replace ``op`` by ``new`` (same attributes) whose result is blocked, handing a value in the
    old result's layout back to ``op``'s users through a relayout."""
    new.attributes.update(op.attributes)
    old_layout = L.layout_of(op.results[0].type)
    if L.layout_of(new.results[0].type) == old_layout:  # e.g. NCHW4_NCHW convs
        rewriter.replace(op, new)
        return
    back = L.RelayoutOp.build(new.results[0], old_layout)
    rewriter.replace(op, [new, back], [back.output])


def blocked_result_type(v: SSAValue, layout: Layout | None) -> TensorType:
    """The type of ``v``'s (logical) value in ``layout``."""
    return L.to_layout(L.to_logical(tensor_type(v)), layout)


def channels_fit(v: SSAValue, layout: Layout, base: Layout | None = None) -> bool:
    """``v`` is a 4-D tensor in ``base`` whose channels fill whole blocks of ``layout``."""
    if L.layout_of(v.type) != base:
        return False
    s = L.to_logical(tensor_type(v)).get_shape()
    return len(s) == 4 and s[1] % L.SPECS[layout].align(1) == 0


def is_scalar(v: SSAValue) -> bool:
    return L.layout_of(v.type) is None and math.prod(shape(v)) == 1


# ----------------------------------------------------------------------------------------------
# Ops that follow a blocked input


@dataclass
class FollowPooling(RewritePattern):
    """``pooling(relayout(x : A) -> nchw)``  ==>  ``relayout(pooling{format = A}(x)) -> nchw``"""

    formats: Mapping[Layout, Any]
    adaptive: bool = True
    base: Layout | None = None  # the layout the pooling runs in now (and its format)
    base_format: Any = Format.NCHW

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        kinds = (T.PoolingOp, T.AdaptivePoolingOp) if self.adaptive else (T.PoolingOp,)
        if not isinstance(op, kinds):
            return
        p = op.params()
        found = blocked_source(op.operands[0], self.base)
        if p["format"] != self.base_format or found is None or found[1] not in self.formats:
            return
        x, layout = found
        new = type(op).make(
            [x], [blocked_result_type(op.results[0], layout)], **{**p, "format": self.formats[layout]}
        )
        replace_with_blocked(op, new, rewriter)


@dataclass
class FollowElemwise(RewritePattern):
    """An elementwise op or typecvt with a blocked input runs blocked when every other non-scalar
    input is 4-D with whole blocks of channels (those are relaid; constants fold)."""

    layouts: frozenset[Layout]
    base: Layout | None = None  # the layout the op runs in now
    kinds: tuple[type[T.MgbOp], ...] = (T.ElemwiseOp, T.TypeCvtOp)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, self.kinds) or L.layout_of(op.results[0].type) != self.base:
            return
        found = {f[1] for v in op.operands if (f := blocked_source(v, self.base)) is not None}
        if len(found) != 1 or not found <= self.layouts:
            return
        (layout,) = found
        if not all(
            is_scalar(v) or blocked_source(v, self.base) is not None or channels_fit(v, layout, self.base)
            for v in op.operands
        ):
            return
        if len(L.to_logical(tensor_type(op.results[0])).get_shape()) != 4:
            return
        operands = [v if is_scalar(v) else as_layout(v, layout, rewriter, op) for v in op.operands]
        new = type(op).make(operands, [blocked_result_type(op.results[0], layout)], **op.params())
        replace_with_blocked(op, new, rewriter)


@dataclass
class FollowConcat(RewritePattern):
    """``concat(axis = 1)`` of 4-D inputs with whole channel blocks, one of them blocked, runs
    blocked along the block axis (axis 1 of the NCHWx layouts)."""

    layouts: frozenset[Layout]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, T.ConcatOp) or op.params()["axis"] != 1:
            return
        found = {f[1] for v in op.operands if (f := blocked_source(v)) is not None}
        if len(found) != 1 or not found <= self.layouts:
            return
        (layout,) = found
        if not all(blocked_source(v) is not None or channels_fit(v, layout) for v in op.operands):
            return
        operands = [as_layout(v, layout, rewriter, op) for v in op.operands]
        new = T.ConcatOp.make(operands, [blocked_result_type(op.results[0], layout)], axis=1)
        replace_with_blocked(op, new, rewriter)


@dataclass
class FollowReduce(RewritePattern):
    """``reduce`` over H or W of a blocked input runs blocked (NCHWx layouts keep H, W at 2, 3)."""

    layouts: frozenset[Layout]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, T.ReduceOp):
            return
        p = op.params()
        found = blocked_source(op.src)
        if found is None or found[1] not in self.layouts or p["axis"] not in (2, 3):
            return
        x, layout = found
        new = T.ReduceOp.make([x], [blocked_result_type(op.output, layout)], **p)
        replace_with_blocked(op, new, rewriter)


@dataclass
class HoistRelayoutOverTypeCvt(RewritePattern):
    """``relayout(typecvt(x))``  ==>  ``typecvt(relayout(x))`` when the typecvt's result has no
    other user: MegEngine's ShuffleShuffleRemovePass rebuilds every chain of TypeCvts and layout
    shuffles (single-reader links) as the net relayout of the chain's input followed by its
    TypeCvts. So an int8 NCHW44 result is relaid out as int8 and only then dequantized (golden
    int8/nchw44.mge), float TypeCvts alike. Relayouts that pad or slice channels are left alone
    (MegEngine's Subtensor slices are no shuffles)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, L.RelayoutOp) or op.channels is not None:
            return
        cvt = op.input.owner
        if not isinstance(cvt, T.TypeCvtOp) or not cvt.output.has_one_use():
            return
        moved = L.RelayoutOp.build(cvt.src, L.layout_of(op.output.type))
        out = tensor_type(op.output)
        result = TensorType(tensor_type(cvt.output).element_type, out.get_shape(), out.encoding)
        new = T.TypeCvtOp.make([moved.output], [result], **cvt.params())
        new.attributes.update(cvt.attributes)  # MegEngine's rebuilt TypeCvt gets a generated name
        rewriter.replace(op, [moved, new], [new.output])
        rewriter.erase(cvt)


def hoist_relayouts_over_typecvt(module: ModuleOp, ctx: Context | None = None) -> None:
    """The TypeCvt part of MegEngine's ShuffleShuffleRemovePass, which the NCHW4, NCHW32, CHWN4,
    NCHW64, NCHW88, NCHW44 and NCHW44_DOT options run right after their layout pass (not NHWCD4).
    A separate walk: during the layout pass a typecvt follows its blocked input."""
    rewrite(module, [HoistRelayoutOverTypeCvt()], ctx)


# ----------------------------------------------------------------------------------------------
# Running the patterns


@dataclass(frozen=True)
class ConvPlan:
    """How a conv converts: its new ``format`` and filter layout."""

    format: Any
    filter: Layout


def conv_parts(op: Operation) -> tuple[SSAValue, SSAValue, list[SSAValue], dict[str, Any]] | None:
    """``(src, filter, [bias, z], params)`` of an NCHW conv or conv_bias, else ``None``."""
    if not isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
        return None
    p = op.params()
    if p["format"] != Format.NCHW:
        return None
    src, filt, *rest = op.operands
    return src, filt, list(rest), p


def bias_kind(bias: SSAValue, out: SSAValue) -> str | None:
    """``"channel"`` for a (1, K, 1, 1) bias, ``"full"`` for an output-shaped one, else ``None``."""
    b, o = shape(bias), shape(out)
    if b == (1, o[1], 1, 1):
        return "channel"
    if b == o:
        return "full"
    return None


def rewrite(module: ModuleOp, patterns: list[RewritePattern], ctx: Context | None = None) -> None:
    """Apply ``patterns`` with the relayout canonicalizations to a fixed point."""
    apply_patterns(module, [*patterns, *RELAYOUT_PATTERNS], ctx)


def fuse_conv_bias_nonlinearity(module: ModuleOp, ctx: Context | None = None) -> None:
    """MegEngine's FuseConvBiasNonlinPass, which every layout option runs first (spec B.4)."""
    from passes.inference.conv_bias import FuseConvBiasNonlinearityPass

    FuseConvBiasNonlinearityPass().apply(ctx or Context(), module)


@dataclass
class ConvRule(RewritePattern):
    """A conv conversion: ``convert(op, src, filter, rest, params)`` returns the new operands'
    layouts and format, or ``None`` if the op stays."""

    convert: Callable[[Operation, SSAValue, SSAValue, list[SSAValue], dict[str, Any]], ConvPlan | None]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        parts = conv_parts(op)
        if parts is None:
            return
        plan = self.convert(op, *parts)
        if plan is None:
            return
        src, filt, rest, p = parts
        rewrite_conv(op, plan, src, filt, rest, p, rewriter)


def rewrite_conv(
    op: Operation,
    plan: ConvPlan,
    src: SSAValue,
    filt: SSAValue,
    rest: Sequence[SSAValue],
    p: dict[str, Any],
    rewriter: PatternRewriter,
) -> None:
    """Replace the convolution ``op`` by its form in ``plan``'s format: each operand converted to
    the layout that format gives it, the result converted back for the ops that read it."""
    lay = L.conv_operand_layouts(plan.format, p["sparse"], L.SPECS[plan.filter].rank)
    assert lay.filter == plan.filter
    operands = [
        as_layout(src, lay.src, rewriter, op),
        as_layout(filt, lay.filter, rewriter, op),
        *(as_layout(v, lay.dst, rewriter, op) for v in rest),
    ]
    new = type(op).make(
        operands, [blocked_result_type(op.results[0], lay.dst)], **{**p, "format": plan.format}
    )
    replace_with_blocked(op, new, rewriter)
