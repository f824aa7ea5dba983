"""ConvBias fusion passes (spec B.4.1, B.4.2).

* ``fuse-conv-bias-nonlinearity`` (FuseConvBiasNonlinPass, ``enable_fuse_conv_bias_nonlinearity``):
  ``ADD | FUSE_ADD_RELU | FUSE_ADD_SIGMOID | FUSE_ADD_H_SWISH`` of a convolution and a valid bias
  (channel-broadcast ``(1, OC, 1, 1)``, or a non-constant of the output's shape: a "residual" bias)
  becomes one ``mgb.conv_bias``; a unary RELU/SIGMOID/H_SWISH of a convolution, or of an
  IDENTITY ConvBias with a bias, becomes that ConvBias's nonlinearity.
* ``fuse-conv-bias-with-z`` (FuseConvBiasZPass, ``enable_fuse_conv_bias_with_z``):
  ``ADD | FUSE_ADD_RELU`` of an IDENTITY ConvBias with a channel bias and a ``z`` of the output's
  shape and dtype becomes ``conv_bias(x, w, b, z)``.

Only NCHW convolutions whose result has no other reader are fused (MegEngine also fuses NHWC,
NCHW4 and NHWCD4 ones; xmge's convolutions are NCHW until a layout pass runs, and layout passes run
conv fusion first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from dialects import enums
from dialects import tensor as T
from passes.inference.common import (
    E,
    copy_naming,
    element,
    is_const,
    mode_of,
    replace_absorbing,
    shape,
    single_use,
)
from passes.pattern_pass import PatternPass

N = enums.NonlineMode

BINARY_NONLINE: dict[Any, Any] = {
    E.ADD: N.IDENTITY,
    E.FUSE_ADD_RELU: N.RELU,
    E.FUSE_ADD_SIGMOID: N.SIGMOID,
    E.FUSE_ADD_H_SWISH: N.H_SWISH,
}
UNARY_NONLINE: dict[Any, Any] = {E.RELU: N.RELU, E.SIGMOID: N.SIGMOID, E.H_SWISH: N.H_SWISH}
Z_NONLINE: dict[Any, Any] = {E.ADD: N.IDENTITY, E.FUSE_ADD_RELU: N.RELU}


def fusable_conv(v: SSAValue) -> T.ConvolutionOp | None:
    """The NCHW convolution producing ``v`` when ``v`` has no other reader."""
    op = v.owner
    if isinstance(op, T.ConvolutionOp) and single_use(v) and op.params()["format"] == enums.Format.NCHW:
        return op
    return None


def is_channel_bias(bias: SSAValue, out: SSAValue) -> bool:
    return shape(bias) == (1, shape(out)[1], 1, 1)


def conv_bias(
    conv: T.ConvolutionOp | T.ConvBiasOp, operands: list[SSAValue], result: SSAValue, nonline: Any
) -> T.ConvBiasOp:
    """A ConvBias with ``conv``'s parameters (mode, sparse, format, padding, stride, dilation,
    compute mode) over ``operands``, producing ``result``'s type."""
    params = {k: v for k, v in conv.params().items() if k != "nonline_mode"}
    op = T.ConvBiasOp.make(operands, [result.type], nonline_mode=nonline, **params)
    assert isinstance(op, T.ConvBiasOp)
    copy_naming(conv, op)
    return op


class FuseConvAddBias(RewritePattern):
    """``add(conv(x, w), b)`` (or fuse_add_relu/sigmoid/h_swish)  ==>  ``conv_bias(x, w, b)``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        nonline = BINARY_NONLINE.get(mode_of(op))
        if nonline is None or len(op.inputs) != 2:
            return
        for i in (0, 1):
            conv = fusable_conv(op.inputs[i])
            if conv is None:
                continue
            bias = op.inputs[1 - i]
            valid = is_channel_bias(bias, conv.output) or (
                shape(bias) == shape(op.output) and not is_const(bias)
            )
            if not valid or element(bias) != element(op.output) or op.output.type != conv.output.type:
                continue
            new = conv_bias(conv, [conv.src, conv.filter, bias], op.output, nonline)
            replace_absorbing(rewriter, op, new, conv)
            return


def _activation_host(v: SSAValue) -> tuple[T.ConvolutionOp | T.ConvBiasOp, list[SSAValue]] | None:
    """The conv producing ``v`` that can take an activation applied to ``v``, with the operands of
    the ConvBias it becomes: an NCHW convolution (x, w), or an NCHW ConvBias with its bias and
    neither z nor an activation yet (x, w, b); ``v`` has no other reader."""
    conv = fusable_conv(v)
    if conv is not None:
        return conv, [conv.src, conv.filter]
    cb = v.owner
    if not isinstance(cb, T.ConvBiasOp) or not single_use(v) or len(cb.operands) != 3:
        return None
    p = cb.params()
    if p["nonline_mode"] != N.IDENTITY or p["format"] != enums.Format.NCHW:
        return None
    return cb, list(cb.operands)


class FuseConvNonlinearity(RewritePattern):
    """``relu(conv(x, w))``  ==>  ``conv_bias(x, w) {nonline_mode = relu}`` and
    ``relu(conv_bias(x, w, b))`` (identity, no z)  ==>  ``conv_bias(x, w, b) {nonline_mode = relu}``
    (or sigmoid/h_swish)"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        nonline = UNARY_NONLINE.get(mode_of(op))
        host = _activation_host(op.inputs[0]) if nonline is not None and op.inputs else None
        if host is None or op.output.type != host[0].output.type:
            return
        conv, operands = host
        replace_absorbing(rewriter, op, conv_bias(conv, operands, op.output, nonline), conv)


class FuseConvBiasZ(RewritePattern):
    """``add(conv_bias(x, w, b), z)`` (or fuse_add_relu)  ==>  ``conv_bias(x, w, b, z)``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        nonline = Z_NONLINE.get(mode_of(op))
        if nonline is None:
            return
        for i in (0, 1):
            v = op.inputs[i]
            cb = v.owner
            if not isinstance(cb, T.ConvBiasOp) or not single_use(v) or len(cb.operands) != 3:
                continue
            p = cb.params()
            if p["nonline_mode"] != N.IDENTITY or p["format"] != enums.Format.NCHW:
                continue
            if not is_channel_bias(cb.operands[2], cb.output):
                continue  # a full-shaped ("residual") bias already plays z's part
            z = op.inputs[1 - i]
            if z.type != cb.output.type or op.output.type != cb.output.type:
                continue
            replace_absorbing(rewriter, op, conv_bias(cb, [*cb.operands, z], op.output, nonline), cb)
            return


@dataclass(frozen=True)
class FuseConvBiasNonlinearityPass(PatternPass):
    """Fuses conv + bias + RELU/SIGMOID/H_SWISH into ConvBias (enable_fuse_conv_bias_nonlinearity)."""

    name = "fuse-conv-bias-nonlinearity"
    PATTERNS = (FuseConvAddBias(), FuseConvNonlinearity())


@dataclass(frozen=True)
class FuseConvBiasWithZPass(PatternPass):
    """Fuses ConvBias + a same-shaped z (+ RELU) into ConvBias(x, w, b, z) (enable_fuse_conv_bias_with_z)."""

    name = "fuse-conv-bias-with-z"
    PATTERNS = (FuseConvBiasZ(),)
