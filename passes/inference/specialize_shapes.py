"""``specialize-shapes``: fix the shapes a graph computes (symbolic shapes) to the traced ones.

A trace with symbolic shapes (or a ``.mge`` read by the reader, which folds its shape computations
while reading) holds ``mgb.get_var_shape`` and reshapes/broadcasts whose target shape is an operand
computed in the graph. Every type in the IR is static, so each of those computations has one value:
the shape of the operand's type. This pass replaces ``get_var_shape`` by that constant and the
shape-operand ops by their static forms; the shape arithmetic left without uses is erased (what a
graph still returns is folded by ``param-fuse``). ``compile`` runs it first, so kernels only ever see
static shapes; ``dump`` does not, so dumped files keep their shape computations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from dialects import tensor as T
from passes.pattern_pass import PatternPass


class FoldGetVarShape(RewritePattern):
    """``get_var_shape(x : tensor<d0 x .. x dn>)``  ==>  ``const [d0, .., dn] : i32``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.GetVarShapeOp, rewriter: PatternRewriter) -> None:
        src = op.src.type
        assert isinstance(src, TensorType)
        const = T.ConstOp.from_numpy(np.array(src.get_shape(), np.int32))
        rewriter.replace_op(op, const)


class StaticReshapeTo(RewritePattern):
    """``reshape_to(x, shape) : T``  ==>  ``reshape(x) : T``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ReshapeToOp, rewriter: PatternRewriter) -> None:
        new = T.ReshapeOp.make([op.src], [op.output.type])
        new.attributes.update(op.attributes)
        rewriter.replace_op(op, new)


class StaticBroadcastTo(RewritePattern):
    """``broadcast_to(x, shape) : T``  ==>  ``broadcast(x) : T``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.BroadcastToOp, rewriter: PatternRewriter) -> None:
        new = T.BroadcastOp.make([op.src], [op.output.type])
        new.attributes.update(op.attributes)
        rewriter.replace_op(op, new)


@dataclass(frozen=True)
class SpecializeShapesPass(PatternPass):
    """Fixes shapes computed in the graph (get_var_shape, reshape_to, broadcast_to) to their static values."""

    name = "specialize-shapes"
    PATTERNS = (FoldGetVarShape(), StaticReshapeTo(), StaticBroadcastTo())
