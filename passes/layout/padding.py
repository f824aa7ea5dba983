"""``padding-channel``: MegEngine's PaddingChannelPass with ``only_padding_weights`` (spec B.6.4).

Dense convs whose output channels are not a multiple of the alignment (4; 8 for NCHW88) get
zero output channels appended to their filter and bias, and hand the original channels on
through a channel slice (``mgb.subtensor [:, :K]``). The slice then moves as far as MegEngine's
padding propagates: a dense conv reading it takes the padded tensor with zero input channels
added to its filter, a channel-wise conv pads its groups, pooling, elementwise ops whose inputs
are all padded alike, typecvt and reduce (not over channels) run on the padded tensor. Wherever
it stops — group convs, reshapes, concat, graph outputs — the slice stays, which is MegEngine's
``Subtensor [:, :C]``. Network inputs are never padded. Every step keeps the results exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from dialects import enums
from dialects import tensor as T
from dialects.dtypes import QuantizedType, dtype_name
from passes.layout.canonicalize import const_of_type
from passes.layout.common import bias_kind, conv_parts, rewrite, shape, tensor_type

SLICE_MARK = "layout.channel_padding"
"""Marks the channel slices this pass creates (and only those move); removed when it is done."""

ALIGNMENT: dict[str, int] = {"nchw44": 4, "nchw44_dot": 4, "nhwcd4": 4, "nchw88": 8}
PADDED_DTYPES = frozenset({"float32", "float16", "qint8", "quint8"})


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def channel_slice(v: SSAValue, channels: int, rewriter: PatternRewriter, before: Operation) -> SSAValue:
    """``v[:, :channels]``, marked as this pass's."""
    op = T.SubtensorOp.make([v], axes=(1,), starts=(0,), stops=(channels,), steps=(1,), drop=(0,))
    op.attributes[SLICE_MARK] = UnitAttr()
    rewriter.insert(op, InsertPoint.before(before))
    return op.results[0]


def padded_source(v: SSAValue) -> SSAValue | None:
    """The padded tensor ``v`` is a channel slice of (a slice made by this pass), else ``None``."""
    op = v.owner
    if isinstance(op, T.SubtensorOp) and SLICE_MARK in op.attributes:
        return op.src
    return None


def pad_axis(v: SSAValue, axis: int, to: int, rewriter: PatternRewriter, before: Operation) -> SSAValue:
    """``v`` with zeros appended along ``axis`` up to size ``to``: a new constant if ``v`` is one,
    else MegEngine's ``Concat(v, zeros)``."""
    t = tensor_type(v)
    s = list(t.get_shape())
    if s[axis] == to:
        return v
    padded = TensorType(t.element_type, [*s[:axis], to, *s[axis + 1 :]])
    const = v.owner
    if isinstance(const, T.ConstOp) and not const.value.is_elided:
        widths = [(0, 0)] * len(s)
        widths[axis] = (0, to - s[axis])
        new = const_of_type(np.pad(const.numpy(), widths), padded)
        new.attributes.update(const.attributes)
        rewriter.insert(new, InsertPoint.before(before))
        return new.output
    zeros_shape = [*s[:axis], to - s[axis], *s[axis + 1 :]]
    zeros = const_of_type(np.zeros(zeros_shape), TensorType(t.element_type, zeros_shape))
    cat = T.ConcatOp.make([v, zeros.output], [padded], axis=axis)
    rewriter.insert([zeros, cat], InsertPoint.before(before))
    return cat.results[0]


def _aligned_dtype(v: SSAValue) -> bool:
    e = tensor_type(v).element_type
    return (e.kind.data if isinstance(e, QuantizedType) else dtype_name(e)) in PADDED_DTYPES


def _with_channels(v: SSAValue, channels: int) -> TensorType:
    t = tensor_type(v)
    s = list(t.get_shape())
    return TensorType(t.element_type, [s[0], channels, *s[2:]])


@dataclass
class AbsorbPaddedInput(RewritePattern):
    """``conv(x[:, :C], w)``  ==>  ``conv(x, w ++ zero input channels)`` (dense convs)"""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        parts = conv_parts(op)
        if parts is None or len(shape(parts[1])) != 4:
            return
        src, filt, rest, p = parts
        x = padded_source(src)
        if x is None:
            return
        w = pad_axis(filt, 1, shape(x)[1], rewriter, op)
        new = type(op).make([x, w, *rest], [op.results[0].type], **p)
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)


@dataclass
class PadConvOutputChannels(RewritePattern):
    """``conv(x, w : K x C x R x S)``  ==>  ``conv(x, w ++ zero filters)[:, :K]`` when K is not
    a multiple of the alignment (the bias gets zeros too)."""

    align: int

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        parts = conv_parts(op)
        if parts is None or len(shape(parts[1])) != 4 or len(parts[2]) > 2 or not _aligned_dtype(parts[0]):
            return
        src, filt, rest, p = parts
        k = shape(filt)[0]
        k_padded = _round_up(k, self.align)
        if k_padded == k or (rest and bias_kind(rest[0], op.results[0]) is None):
            return
        w = pad_axis(filt, 0, k_padded, rewriter, op)
        operands = [src, w]
        if rest:
            bias = padded_source(rest[0])
            if bias is None or shape(bias)[1] != k_padded:
                bias = pad_axis(rest[0], 1, k_padded, rewriter, op)
            operands.append(bias)
        new = type(op).make(operands, [_with_channels(op.results[0], k_padded)], **p)
        new.attributes.update(op.attributes)
        rewriter.insert(new, InsertPoint.before(op))
        rewriter.replace(op, [], [channel_slice(new.results[0], k, rewriter, op)])


@dataclass
class PadChannelwiseConv(RewritePattern):
    """``cw_conv(x[:, :G], w : G x 1 x 1 x R x S)``  ==>  ``cw_conv(x, w ++ zero groups)[:, :G]``"""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        parts = conv_parts(op)
        if parts is None or len(parts[2]) > 1:
            return
        src, filt, rest, p = parts
        x = padded_source(src)
        fs = shape(filt)
        if x is None or p["sparse"] != enums.ConvSparse.GROUP or fs[1:3] != (1, 1):
            return
        if rest and bias_kind(rest[0], op.results[0]) != "channel":
            return
        g = shape(x)[1]
        operands = [x, pad_axis(filt, 0, g, rewriter, op), *(pad_axis(b, 1, g, rewriter, op) for b in rest)]
        new = type(op).make(operands, [_with_channels(op.results[0], g)], **p)
        new.attributes.update(op.attributes)
        rewriter.insert(new, InsertPoint.before(op))
        rewriter.replace(op, [], [channel_slice(new.results[0], fs[0], rewriter, op)])


@dataclass
class PushSliceForward(RewritePattern):
    """``f(x[:, :C])``  ==>  ``f(x)[:, :C]`` for ops that work per channel: pooling, adaptive
    pooling, reduce (not over channels), and elementwise ops / typecvt whose non-scalar inputs
    are all slices of equally padded tensors."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, T.PoolingOp | T.AdaptivePoolingOp):
            ok = op.params()["format"] == enums.Format.NCHW
        elif isinstance(op, T.ReduceOp):
            ok = op.params()["axis"] != 1
        elif isinstance(op, T.ElemwiseOp | T.TypeCvtOp):
            ok = len(shape(op.results[0])) == 4
        else:
            return
        sources = [padded_source(v) for v in op.operands]
        padded = [s for s in sources if s is not None]
        if not ok or not padded:
            return
        channels = {shape(s)[1] for s in padded}
        scalars_only = all(
            s is not None or np.prod(shape(v)) == 1 for s, v in zip(sources, op.operands, strict=True)
        )
        if len(channels) != 1 or not scalars_only:
            return
        operands = [s if s is not None else v for s, v in zip(sources, op.operands, strict=True)]
        (c_padded,) = channels
        new = type(op).make(operands, [_with_channels(op.results[0], c_padded)], **op.params())
        new.attributes.update(op.attributes)
        rewriter.insert(new, InsertPoint.before(op))
        rewriter.replace(op, [], [channel_slice(new.results[0], shape(op.results[0])[1], rewriter, op)])


def padding_patterns(align: int) -> list[RewritePattern]:
    return [AbsorbPaddedInput(), PadConvOutputChannels(align), PadChannelwiseConv(), PushSliceForward()]


def pad_channels(module: ModuleOp, fmt: str, ctx: Context | None = None) -> None:
    """Run the padding patterns for layout ``fmt`` and drop this pass's slice marks."""
    if fmt not in ALIGNMENT:
        raise ValueError(f"padding-channel: unknown format {fmt!r}; expected one of {', '.join(ALIGNMENT)}")
    rewrite(module, padding_patterns(ALIGNMENT[fmt]), ctx)
    for op in module.walk():
        op.attributes.pop(SLICE_MARK, None)


@dataclass(frozen=True)
class PaddingChannelPass(ModulePass):
    """Pads conv output channels to the layout's alignment with zero weights (PaddingChannelPass)."""

    name = "padding-channel"

    format: str = "nchw44"
    """The layout to pad for: nchw44, nchw44_dot and nhwcd4 align to 4, nchw88 to 8."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pad_channels(op, self.format, ctx)
