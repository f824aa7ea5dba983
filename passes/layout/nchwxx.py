"""``enable-nchw44``, ``enable-nchw88`` and ``enable-nchw44-dot``: MegEngine's EnableNchwxxPass and
EnableNchw44DotPass (spec B.6.3), after conv-bias fusion and channel padding (spec B.4).

Per NCHW conv (``mgb.convolution`` / ``mgb.conv_bias`` without z), P = 4 or 8:

* dense, IC % P == 0 and OC % P == 0: input NCHWP, filter KCRScPkP (DOT and int8: KCRSk4c4 with
  format NCHW44_DOT), bias (1, K/P, 1, 1, P);
* dense with IC < P (the first layer): the *hybrid* conv, input left NCHW, filter KRSCkP, when
  MegEngine has that kernel (``nchw_nchwxx_valid.h``);
* channel-wise with G % P == 0: filter C11RScP (format NCHW44 also in the DOT pass);
* group with Kg % P == 0 and Cg % P == 0: filter GKCRScPkP (DOT and int8: GKCRSk4c4);
* anything else stays NCHW.

Pooling, adaptive pooling, elementwise ops (ElemwiseMultiType too), typecvt, concat (axis 1) and
reduce (H or W) follow a blocked input; everything else, graph outputs included, reads NCHW again.
Afterwards, as MegEngine's ShuffleShuffleRemovePass does, a relayout that reads a typecvt (its only
user) moves above it, so a dequantizing or float16 TypeCvt before an output runs in NCHW on the
relaid-out tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import RewritePattern

from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.layout.common import (
    ConvPlan,
    ConvRule,
    FollowConcat,
    FollowElemwise,
    FollowPooling,
    FollowReduce,
    bias_kind,
    fuse_conv_bias_nonlinearity,
    hoist_relayouts_over_typecvt,
    is_float_value,
    is_qint8,
    rewrite,
    shape,
)
from passes.layout.padding import pad_channels

Format = enums.Format
Layout = L.Layout
N = enums.NonlineMode


@dataclass(frozen=True)
class NchwxxTarget:
    """What one of the three passes converts to."""

    pack: int  # P
    dot: bool
    format: Any  # the conv format of float (and, without dot, int8) convs
    activation: Layout
    dense: Layout
    dense_dot: Layout | None
    hybrid: Layout
    group: Layout
    group_dot: Layout | None
    channelwise: Layout


NCHW44 = NchwxxTarget(4, False, Format.NCHW44, Layout.NCHW44, Layout.KCRSc4k4, None, Layout.KRSCk4,
                      Layout.GKCRSc4k4, None, Layout.C11RSc4)  # fmt: skip
NCHW88 = NchwxxTarget(8, False, Format.NCHW88, Layout.NCHW88, Layout.KCRSc8k8, None, Layout.KRSCk8,
                      Layout.GKCRSc8k8, None, Layout.C11RSc8)  # fmt: skip
NCHW44_DOT = NchwxxTarget(4, True, Format.NCHW44, Layout.NCHW44, Layout.KCRSc4k4, Layout.KCRSk4c4,
                          Layout.KRSCk4, Layout.GKCRSc4k4, Layout.GKCRSk4c4, Layout.C11RSc4)  # fmt: skip


def _convertible_dtype(target: NchwxxTarget, src: SSAValue) -> bool:
    if target.pack == 8:
        return is_float_value(src)
    return is_float_value(src) or is_qint8(src)


def hybrid_ok(
    target: NchwxxTarget, op: Operation, src: SSAValue, rest: list[SSAValue], p: dict[str, Any]
) -> bool:
    """MegEngine's ``is_nchw_nchwxx_optimized``: is there a kernel for this first-layer conv?"""
    fh, fw = shape(op.operands[1])[2:]
    nonline = p.get("nonline_mode", N.IDENTITY)
    if p["mode"] != enums.ConvMode.CROSS_CORRELATION or p["dilation"] != (1, 1):
        return False
    if rest and bias_kind(rest[0], op.results[0]) != "channel":
        return False
    if target.pack == 8:
        return is_float_value(src)
    if p["stride"][0] != p["stride"][1] or p["stride"][0] not in (1, 2):
        return False
    if nonline not in (N.IDENTITY, N.RELU, N.H_SWISH):
        return False
    square = fh == fw and fh in (2, 3, 5, 7)
    if is_qint8(src):
        return square or (fh == fw == 1 and p["stride"] == (1, 1))
    return is_float_value(src) and square


def plan_nchwxx(
    target: NchwxxTarget,
    op: Operation,
    src: SSAValue,
    filt: SSAValue,
    rest: list[SSAValue],
    p: dict[str, Any],
) -> ConvPlan | None:
    """How an NCHW conv converts for ``target`` (``None``: it stays NCHW)."""
    P = target.pack
    if len(rest) > 1 or not _convertible_dtype(target, src) or L.layout_of(filt.type) is not None:
        return None
    if rest and bias_kind(rest[0], op.results[0]) is None:
        return None
    dot = target.dot and is_qint8(src)
    fs = shape(filt)
    if p["sparse"] == enums.ConvSparse.DENSE:
        oc, ic = fs[0], fs[1]
        if oc % P:
            return None
        if ic % P == 0:
            if dot:
                assert target.dense_dot is not None
                return ConvPlan(Format.NCHW44_DOT, target.dense_dot)
            return ConvPlan(target.format, target.dense)
        if ic < P and hybrid_ok(target, op, src, rest, p):
            return ConvPlan(Format.NCHW44_DOT if dot else target.format, target.hybrid)
        return None
    g, kg, cg = fs[0], fs[1], fs[2]
    if kg == 1 and cg == 1:
        return ConvPlan(target.format, target.channelwise) if g % P == 0 else None
    if kg % P == 0 and cg % P == 0:
        if dot:
            assert target.group_dot is not None
            return ConvPlan(Format.NCHW44_DOT, target.group_dot)
        return ConvPlan(target.format, target.group)
    return None


def nchwxx_patterns(target: NchwxxTarget) -> list[RewritePattern]:
    layouts = frozenset({target.activation})
    return [
        ConvRule(lambda op, src, filt, rest, p: plan_nchwxx(target, op, src, filt, rest, p)),
        FollowPooling({target.activation: target.format}),
        # MegEngine converts ElemwiseMultiType (int8 residual adds: QFUSE_ADD_RELU) like Elemwise
        FollowElemwise(layouts, kinds=(T.ElemwiseOp, T.TypeCvtOp, T.ElemwiseMultiTypeOp)),
        FollowConcat(layouts),
        FollowReduce(layouts),
    ]


def convert_nchwxx(
    module: ModuleOp, target: NchwxxTarget, padding: str, *, fuse: bool, pad: bool, ctx: Context | None
) -> None:
    if fuse:
        fuse_conv_bias_nonlinearity(module, ctx)
    if pad:
        pad_channels(module, padding, ctx)
    rewrite(module, nchwxx_patterns(target), ctx)
    hoist_relayouts_over_typecvt(module, ctx)


@dataclass(frozen=True)
class _EnableNchwxxPass(ModulePass):
    """The enable_nchwXX passes: one target and padding mode each, the same options and steps."""

    TARGET: ClassVar[NchwxxTarget]
    PADDING: ClassVar[str]  # pad_channels' mode: pads output channels to the target's block size

    fuse: bool = True
    """Fuse conv + bias + nonlinearity first (MegEngine always does with a layout option)."""

    padding: bool = True
    """Pad output channels to a multiple of the block size first (``padding-channel``)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        convert_nchwxx(op, self.TARGET, self.PADDING, fuse=self.fuse, pad=self.padding, ctx=ctx)


@dataclass(frozen=True)
class EnableNchw44Pass(_EnableNchwxxPass):
    """enable_nchw44: float and int8 convs in NCHW44 (4-channel blocks), hybrid first layer, padding to 4."""

    name = "enable-nchw44"
    TARGET = NCHW44
    PADDING = "nchw44"


@dataclass(frozen=True)
class EnableNchw88Pass(_EnableNchwxxPass):
    """enable_nchw88: float convs in NCHW88 (8-channel blocks), hybrid first layer, padding to 8."""

    name = "enable-nchw88"
    TARGET = NCHW88
    PADDING = "nchw88"


@dataclass(frozen=True)
class EnableNchw44DotPass(_EnableNchwxxPass):
    """enable_nchw44_dot: int8 convs in NCHW44_DOT (dot-product filters), float convs in NCHW44."""

    name = "enable-nchw44-dot"
    TARGET = NCHW44_DOT
    PADDING = "nchw44_dot"
