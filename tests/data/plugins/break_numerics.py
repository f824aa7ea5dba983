"""A plugin with passes that break numerics on purpose, for ``compiler.driver.numerics`` (the per-pass
numeric bisect) to catch: ``xmge-opt --load-plugin tests/data/plugins/break_numerics.py``.

* ``test-flip-conv-bias``: negates the bias of every ``mgb.conv_bias`` (or only those whose
  ``scope`` contains ``scope``) by inserting an ``elemwise negate`` on the bias operand;
* ``test-max-to-average-pool``: turns every max pooling into an average pooling.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from dialects import enums
from dialects import tensor as T


@dataclass(frozen=True)
class FlipConvBias(RewritePattern):
    scope: str

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ConvBiasOp, rewriter: PatternRewriter) -> None:
        bias = op.bias
        if bias is None or isinstance(bias.owner, T.ElemwiseOp):  # flipped already
            return
        where = op.attributes.get("scope")
        if self.scope and not (isinstance(where, StringAttr) and self.scope in where.data):
            return
        negate = T.ElemwiseOp.make([bias], mode=enums.ElemwiseMode.NEGATE)
        rewriter.insert(negate, InsertPoint.before(op))
        op.operands[2] = negate.results[0]
        rewriter.has_done_action = True


@dataclass(frozen=True)
class FlipConvBiasPass(ModulePass):
    """Negate conv_bias biases (a deliberately wrong pass, for numeric bisect tests)."""

    name = "test-flip-conv-bias"
    scope: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FlipConvBias(self.scope), apply_recursively=False).rewrite_module(op)


class MaxToAveragePool(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.PoolingOp, rewriter: PatternRewriter) -> None:
        params = op.params()
        if params["mode"] != enums.PoolingMode.MAX:
            return
        params["mode"] = enums.PoolingMode.AVERAGE
        rewriter.replace(op, T.PoolingOp.make([op.src], [op.output.type], **params))


@dataclass(frozen=True)
class MaxToAveragePoolPass(ModulePass):
    """Replace max pooling by average pooling (a deliberately wrong pass, for numeric bisect tests)."""

    name = "test-max-to-average-pool"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(MaxToAveragePool(), apply_recursively=False).rewrite_module(op)


PASSES = [FlipConvBiasPass, MaxToAveragePoolPass]
