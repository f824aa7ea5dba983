"""``enable-hwcd4``: MegEngine's ConvertFormatPass to NHWCD4 (spec B.6.5), after conv-bias fusion
(channel padding to 4 only with ``padding=true``: MegEngine 1.13's PaddingChannelPass pads no conv
for NHWCD4, whatever spec B.6.5 says).

A conv converts when its output channels per group are a multiple of 4 and, for a dense conv,
its input is NHWCD4 already or any plain NCHW tensor (input channels are zero-padded to 4 by the
relayout, ``{channels = C}``, and the DENSEI filter pads them too); group convs need Cg and Kg
multiples of 4 (GROUPI filter), channel-wise convs G a multiple of 4 (CHANI filter). Pooling,
adaptive pooling, elementwise ops and typecvt follow; everything else reads NCHW again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from dialects import enums
from dialects import layout as L
from passes.layout.common import (
    ConvPlan,
    FollowElemwise,
    FollowPooling,
    as_layout,
    bias_kind,
    blocked_result_type,
    conv_parts,
    fuse_conv_bias_nonlinearity,
    is_float_value,
    is_qint8,
    replace_with_blocked,
    rewrite,
    shape,
)
from passes.layout.padding import pad_channels

Format = enums.Format
Layout = L.Layout


def plan_hwcd4(
    op: Operation, src: SSAValue, filt: SSAValue, rest: list[SSAValue], p: dict[str, Any]
) -> ConvPlan | None:
    if not (is_float_value(src) or is_qint8(src)) or len(rest) > 1 or L.layout_of(filt.type) is not None:
        return None
    if rest and bias_kind(rest[0], op.results[0]) is None:
        return None
    fs = shape(filt)
    if p["sparse"] == enums.ConvSparse.DENSE:
        return ConvPlan(Format.NHWCD4, Layout.DENSEI) if fs[0] % 4 == 0 else None
    g, kg, cg = fs[:3]
    if kg == 1 and cg == 1:
        return ConvPlan(Format.NHWCD4, Layout.CHANI) if g % 4 == 0 else None
    if kg % 4 == 0 and cg % 4 == 0:
        return ConvPlan(Format.NHWCD4, Layout.GROUPI)
    return None


@dataclass
class ConvertConvToHwcd4(RewritePattern):
    """``conv{format = NCHW}``  ==>  ``conv{format = NHWCD4}`` with NHWCD4 input (channels padded
    to 4) and image-packed filter."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        parts = conv_parts(op)
        if parts is None:
            return
        src, filt, rest, p = parts
        plan = plan_hwcd4(op, src, filt, rest, p)
        if plan is None:
            return
        c = shape(src)[1]
        pad = c % 4 != 0
        if pad:
            x_op = L.RelayoutOp.build(src, Layout.NHWCD4, channels=c)
            w_op = L.RelayoutOp.build(filt, plan.filter, channels=c)
            rewriter.insert([x_op, w_op], InsertPoint.before(op))
            x, w = x_op.output, w_op.output
        else:
            x = as_layout(src, Layout.NHWCD4, rewriter, op)
            w = as_layout(filt, plan.filter, rewriter, op)
        operands = [x, w, *(as_layout(v, Layout.NHWCD4, rewriter, op) for v in rest)]
        result = blocked_result_type(op.results[0], Layout.NHWCD4)
        new = type(op).make(operands, [result], **{**p, "format": Format.NHWCD4})
        replace_with_blocked(op, new, rewriter)


@dataclass(frozen=True)
class EnableHwcd4Pass(ModulePass):
    """enable_hwcd4: convs, pooling and elementwise ops in NHWCD4 (image layout for mobile GPUs)."""

    name = "enable-hwcd4"

    fuse: bool = True
    """Fuse conv + bias + nonlinearity first (MegEngine always does with a layout option)."""

    padding: bool = False
    """Pad output channels to a multiple of 4 first (``padding-channel``). Off by default as in
    MegEngine 1.13: its PaddingChannelPass registers no conv rewrite for NHWCD4, so a conv whose
    output channels are not a multiple of 4 stays NCHW (observed: a 1->10 first conv)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.fuse:
            fuse_conv_bias_nonlinearity(op, ctx)
        if self.padding:
            pad_channels(op, "nhwcd4", ctx)
        layouts = frozenset({Layout.NHWCD4})
        rewrite(
            op,
            [ConvertConvToHwcd4(), FollowPooling({Layout.NHWCD4: Format.NHWCD4}), FollowElemwise(layouts)],
            ctx,
        )
