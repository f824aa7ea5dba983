"""``fold-batch-norm``: inference BatchNorm with constant statistics becomes a per-channel affine map.

MegEngine's ConvertBatchNormToElemwisePass + ParamRedistributePass + ParamFusePass: with
``k = weight / sqrt(var + eps)`` and ``c = bias - mean * k``,

* after a convolution whose output has no other reader, ``k`` scales the convolution's output
  channels (its weights) and ``c`` is left as a channel-broadcast ``ADD`` (which the arithmetic
  passes later fuse with a following ReLU, and ``fuse-conv-bias-nonlinearity`` into a ConvBias);
* anywhere else it becomes ``FUSE_MUL_ADD3(x, k, c)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from dialects import enums
from dialects import tensor as T
from passes.inference.common import (
    E,
    const_value,
    copy_naming,
    elemwise,
    insert_const,
    is_float_value,
    replace_keeping_names,
    shape,
    single_use,
)
from passes.pattern_pass import PatternPass


def _affine(bn: T.BatchNormOp) -> tuple[np.ndarray, np.ndarray] | None:
    """(k, c) of an inference BatchNorm whose parameters are constants, else None."""
    values = [const_value(v) for v in (bn.scale, bn.bias, bn.mean, bn.variance)]
    if any(v is None for v in values) or not is_float_value(bn.src):
        return None
    if bn.params()["fwd_mode"] != enums.BNFwdMode.INFERENCE:
        return None
    s, b, m, v = (np.asarray(a, np.float32).reshape(-1) for a in values)  # type: ignore[arg-type]
    k = s / np.sqrt(v + np.float32(bn.params()["epsilon"]))
    return k, b - m * k


def _channel_shape(bn: T.BatchNormOp, k: np.ndarray) -> tuple[int, ...]:
    return (1, k.size) + (1,) * (len(shape(bn.src)) - 2)


class FoldBatchNormIntoConv(RewritePattern):
    """``batch_norm(conv(x, w))``  ==>  ``add(conv(x, w * k), c)`` (k, c per output channel)"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.BatchNormOp, rewriter: PatternRewriter) -> None:
        conv = op.src.owner
        if not isinstance(conv, T.ConvolutionOp) or not single_use(op.src):
            return
        w = const_value(conv.filter)
        affine = _affine(op)
        if w is None or affine is None or conv.params()["format"] != enums.Format.NCHW:
            return
        k, c = affine
        if conv.params()["sparse"] == enums.ConvSparse.GROUP:  # (G, OC/G, IC/G, FH, FW)
            kw = k.reshape(w.shape[0], w.shape[1], *([1] * (w.ndim - 2)))
        else:  # (OC, IC, FH, FW)
            kw = k.reshape(w.shape[0], *([1] * (w.ndim - 1)))
        new_w = insert_const(rewriter, w.astype(np.float32) * kw, conv.filter.type.element_type, conv)  # type: ignore[attr-defined]
        new_conv = T.ConvolutionOp.make([conv.src, new_w], [conv.output.type], **dict(conv.properties))
        copy_naming(conv, new_conv)
        rewriter.replace(conv, new_conv)
        bias = insert_const(rewriter, c.reshape(_channel_shape(op, k)), op.src.type.element_type, op)  # type: ignore[attr-defined]
        replace_keeping_names(rewriter, op, elemwise(E.ADD, [op.src, bias]))


class BatchNormToMulAdd(RewritePattern):
    """``batch_norm(x)``  ==>  ``fuse_mul_add3(x, k, c)``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.BatchNormOp, rewriter: PatternRewriter) -> None:
        affine = _affine(op)
        if affine is None:
            return
        k, c = affine
        elem = op.src.type.element_type  # type: ignore[attr-defined]
        kv = insert_const(rewriter, k.reshape(_channel_shape(op, k)), elem, op)
        cv = insert_const(rewriter, c.reshape(_channel_shape(op, k)), elem, op)
        replace_keeping_names(rewriter, op, elemwise(E.FUSE_MUL_ADD3, [op.src, kv, cv]))


@dataclass(frozen=True)
class FoldBatchNormPass(PatternPass):
    """Folds inference BatchNorm into the preceding conv's weights, or into FUSE_MUL_ADD3."""

    name = "fold-batch-norm"
    PATTERNS = (FoldBatchNormIntoConv(), BatchNormToMulAdd())
