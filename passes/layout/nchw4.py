"""The NVIDIA int8 layouts (spec B.6.6): ``enable-nchw4``, ``enable-nchw32``, ``enable-chwn4`` and
``enable-nchw64``. Only quantized convs convert; a float graph keeps NCHW (MegEngine leaves float
convs alone, "FIXME" in its source), so it is changed by the conv-bias fusion alone.

* NCHW4: qint8 dense convs with OC % 4 == 0 and IC % 4 == 0 (filter KCRSc4), or IC < 4 (the
  small-input path: input and filter channels zero-padded to 4, MegEngine's
  ``RelayoutFormat(NCHW_NCHW4_IC_SMALL)``); group convs with Kg % 4 == Cg % 4 == 0 (GKCRSc4).
  A float result makes the format NCHW4_NCHW (output NCHW). Pooling, elementwise ops and typecvt
  follow NCHW4 inputs; concat, reduce, adaptive pooling and the rest read NCHW.
* NCHW32 (after NCHW4): a qint8 conv in NCHW4 with group 1, IC and OC multiples of 32 and an input
  of at least 3x3 runs in NCHW32 (filter KCRSc32); pooling and elementwise ops follow.
* CHWN4 (after NCHW4): qint8 dense convs in NCHW4 run in CHWN4 (filter CRSKc4); pooling and
  elementwise ops follow.
* NCHW64: per dense qint8 conv NCHW32 (channels % 32), else NCHW4 (% 4); per qint4/quint4 conv
  NCHW64 (% 64); group convs stay NCHW.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
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
from dialects import tensor as T
from dialects.dtypes import QuantizedType
from passes.layout.common import (
    ConvPlan,
    ConvRule,
    FollowElemwise,
    FollowPooling,
    as_layout,
    bias_kind,
    blocked_result_type,
    fuse_conv_bias_nonlinearity,
    hoist_relayouts_over_typecvt,
    is_float_value,
    is_qint8,
    replace_with_blocked,
    rewrite,
    rewrite_conv,
    shape,
    tensor_type,
)

Format = enums.Format
Layout = L.Layout


def _quant_kind(v: SSAValue) -> str | None:
    e = tensor_type(v).element_type
    return e.kind.data if isinstance(e, QuantizedType) else None


def plan_nchw4(
    op: Operation, src: SSAValue, filt: SSAValue, rest: list[SSAValue], p: dict[str, Any], small: bool = False
) -> ConvPlan | None:
    """NCHW4's rule for a conv; ``small``: the IC < 4 path (``SmallInputToNchw4``), else IC % 4 == 0."""
    if not is_qint8(src) or len(rest) > 2 or L.layout_of(filt.type) is not None:
        return None
    if rest and bias_kind(rest[0], op.results[0]) is None:
        return None
    fmt = Format.NCHW4_NCHW if is_float_value(op.results[0]) else Format.NCHW4
    fs = shape(filt)
    if p["sparse"] == enums.ConvSparse.DENSE:
        oc, ic = fs[0], fs[1]
        if oc % 4 == 0 and (ic < 4 if small else ic % 4 == 0):
            return ConvPlan(fmt, Layout.KCRSc4)
        return None
    if not small and fs[1] % 4 == 0 and fs[2] % 4 == 0:
        return ConvPlan(fmt, Layout.GKCRSc4)
    return None


@dataclass
class SmallInputToNchw4(RewritePattern):
    """A qint8 dense conv with fewer than 4 input channels: the input is padded into NCHW4
    (``relayout {channels = C}``, MegEngine's NCHW_NCHW4_IC_SMALL) so the NCHW4 rule applies."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
            return
        p = op.params()
        src, filt = op.operands[0], op.operands[1]
        if (
            p["format"] != Format.NCHW
            or p["sparse"] != enums.ConvSparse.DENSE
            or L.layout_of(src.type) is not None
        ):
            return
        ic = shape(src)[1]
        plan = plan_nchw4(op, src, filt, list(op.operands[2:]), p, small=True)
        if plan is None:
            return
        dst = L.conv_operand_layouts(plan.format, p["sparse"], L.SPECS[plan.filter].rank).dst
        x = L.RelayoutOp.build(src, Layout.NCHW4, channels=ic)
        w = L.RelayoutOp.build(filt, Layout.KCRSc4, channels=ic)
        rewriter.insert([x, w], InsertPoint.before(op))
        rest = [as_layout(v, dst, rewriter, op) for v in op.operands[2:]]
        result = blocked_result_type(op.results[0], dst)
        new = type(op).make([x.output, w.output, *rest], [result], **{**p, "format": plan.format})
        replace_with_blocked(op, new, rewriter)


@dataclass
class ReblockConv(RewritePattern):
    """A conv in format ``base`` that ``plan`` accepts moves to another blocked format (NCHW4 ->
    NCHW32 or CHWN4); its operands are relaid (weights fold), its result goes back to ``base``."""

    base: Any
    plan: Any  # (op, params) -> ConvPlan | None

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
            return
        p = op.params()
        if p["format"] != self.base:
            return
        plan = self.plan(op, p)
        if plan is None:
            return
        src, filt, *rest = op.operands
        rewrite_conv(op, plan, src, filt, rest, p, rewriter)


def plan_nchw32(op: Operation, p: dict[str, Any]) -> ConvPlan | None:
    if not isinstance(op, T.ConvBiasOp) or _quant_kind(op.results[0]) != "qint8":
        return None
    if p["sparse"] != enums.ConvSparse.DENSE:
        return None
    oc, ic = L.to_logical(tensor_type(op.operands[1])).get_shape()[:2]
    h, w = L.to_logical(tensor_type(op.operands[0])).get_shape()[2:]
    if oc % 32 or ic % 32 or h < 3 or w < 3:
        return None
    return ConvPlan(Format.NCHW32, Layout.KCRSc32)


def plan_chwn4(op: Operation, p: dict[str, Any]) -> ConvPlan | None:
    if not isinstance(op, T.ConvBiasOp) or _quant_kind(op.results[0]) != "qint8":
        return None
    if p["sparse"] != enums.ConvSparse.DENSE:
        return None
    return ConvPlan(Format.CHWN4, Layout.CRSKc4)


def plan_nchw64(
    op: Operation, src: SSAValue, filt: SSAValue, rest: list[SSAValue], p: dict[str, Any]
) -> ConvPlan | None:
    kind = _quant_kind(src)
    if (
        kind is None
        or p["sparse"] != enums.ConvSparse.DENSE
        or len(rest) > 2
        or L.layout_of(filt.type) is not None
    ):
        return None
    if rest and bias_kind(rest[0], op.results[0]) is None:
        return None
    oc, ic = shape(filt)[:2]
    if kind == "qint8":
        if oc % 32 == 0 and ic % 32 == 0:
            return ConvPlan(Format.NCHW32, Layout.KCRSc32)
        if oc % 4 == 0 and ic % 4 == 0:
            return ConvPlan(
                Format.NCHW4_NCHW if is_float_value(op.results[0]) else Format.NCHW4, Layout.KCRSc4
            )
    if kind in ("qint4", "quint4") and oc % 64 == 0 and ic % 64 == 0:
        return ConvPlan(Format.NCHW64, Layout.KCRSc64)
    return None


def nchw4_patterns() -> list[RewritePattern]:
    return [
        SmallInputToNchw4(),
        ConvRule(plan_nchw4),
        FollowPooling({Layout.NCHW4: Format.NCHW4}, adaptive=False),
        FollowElemwise(frozenset({Layout.NCHW4})),
    ]


@dataclass(frozen=True)
class _NvidiaLayoutPass(ModulePass, ABC):
    """A pass of this family: optionally the conv-bias fusion, its rewrite stages in order, then
    the relayouts hoisted over type conversions."""

    fuse: bool = True
    """Fuse conv + bias + nonlinearity first (MegEngine always does with a layout option)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.fuse:
            fuse_conv_bias_nonlinearity(op, ctx)
        for patterns in self.stages():
            rewrite(op, patterns, ctx)
        hoist_relayouts_over_typecvt(op, ctx)

    @abstractmethod
    def stages(self) -> list[list[RewritePattern]]:
        """The pattern sets applied one after another (each to a fixed point)."""


@dataclass(frozen=True)
class EnableNchw4Pass(_NvidiaLayoutPass):
    """enable_nchw4: quantized int8 convs in NCHW4 (float graphs only get conv-bias fusion)."""

    name = "enable-nchw4"

    def stages(self) -> list[list[RewritePattern]]:
        return [nchw4_patterns()]


@dataclass(frozen=True)
class EnableNchw32Pass(_NvidiaLayoutPass):
    """enable_nchw32: NCHW4 first, then qint8 convs with 32-multiple channels in NCHW32 (tensor cores)."""

    name = "enable-nchw32"

    def stages(self) -> list[list[RewritePattern]]:
        return [nchw4_patterns(), _reblock_nchw4(Layout.NCHW32, Format.NCHW32, plan_nchw32)]


@dataclass(frozen=True)
class EnableChwn4Pass(_NvidiaLayoutPass):
    """enable_chwn4: NCHW4 first, then qint8 dense conv-bias ops in CHWN4."""

    name = "enable-chwn4"

    def stages(self) -> list[list[RewritePattern]]:
        return [nchw4_patterns(), _reblock_nchw4(Layout.CHWN4, Format.CHWN4, plan_chwn4)]


def _reblock_nchw4(
    layout: Layout, fmt: Format, plan: Callable[[Operation, dict[str, Any]], ConvPlan | None]
) -> list[RewritePattern]:
    """Convs already in NCHW4 that ``plan`` accepts move on to ``layout``; pooling and elementwise
    ops follow them (anything else reads NCHW4)."""
    return [
        ReblockConv(Format.NCHW4, plan),
        FollowPooling({layout: fmt}, False, Layout.NCHW4, Format.NCHW4),
        FollowElemwise(frozenset({layout}), Layout.NCHW4),
    ]


@dataclass(frozen=True)
class EnableNchw64Pass(_NvidiaLayoutPass):
    """enable_nchw64: per quantized dense conv NCHW32 / NCHW4 (int8) or NCHW64 (int4)."""

    name = "enable-nchw64"

    def stages(self) -> list[list[RewritePattern]]:
        layouts = {Layout.NCHW4: Format.NCHW4, Layout.NCHW32: Format.NCHW32, Layout.NCHW64: Format.NCHW64}
        return [
            [
                ConvRule(plan_nchw64),
                FollowPooling(layouts, adaptive=False),
                FollowElemwise(frozenset(layouts)),
            ]
        ]
