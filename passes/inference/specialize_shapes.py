"""``specialize-shapes``: fix the shapes a graph computes (symbolic shapes) to the traced ones.

A trace with symbolic shapes (or a ``.mge`` read by the reader, which folds its shape computations
while reading) holds ``mgb.get_var_shape`` and reshapes/broadcasts whose target shape is an operand
computed in the graph. Every type in the IR is static, so each of those computations has one value:
the shape of the operand's type. This pass replaces ``get_var_shape`` by that constant and the
shape-operand ops by their static forms; the shape arithmetic left without uses is erased (what a
graph still returns is folded by ``param-fuse``). ``compile`` runs it first, so kernels only ever see
static shapes; ``dump`` does not, so dumped files keep their shape computations.

Sizes that depend on tensor values (``mgb.cond_take``'s count, and what a file's graph computes
from it: ``?`` in a type) have no static value: the pass refuses them with
:class:`DataDependentShapeError`, naming the op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from dialects import tensor as T
from dialects.errors import XmgeError
from passes.pattern_pass import PatternPass


class FoldGetVarShape(RewritePattern):
    """``get_var_shape(x : tensor<d0 x .. x dn>)``  ==>  ``const [d0, .., dn] : i32``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.GetVarShapeOp, rewriter: PatternRewriter) -> None:
        src = op.src.type
        assert isinstance(src, TensorType)
        const = T.ConstOp.from_numpy(np.array(src.get_shape(), np.int32))
        rewriter.replace(op, const)


class StaticReshapeTo(RewritePattern):
    """``reshape_to(x, shape) : T``  ==>  ``reshape(x) : T``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ReshapeToOp, rewriter: PatternRewriter) -> None:
        new = T.ReshapeOp.make([op.src], [op.output.type])
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)


class StaticBroadcastTo(RewritePattern):
    """``broadcast_to(x, shape) : T``  ==>  ``broadcast(x) : T``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.BroadcastToOp, rewriter: PatternRewriter) -> None:
        new = T.BroadcastOp.make([op.src], [op.output.type])
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)


class DataDependentShapeError(XmgeError, ValueError):
    """An op's output size depends on tensor values, which compiled (static-shape) kernels cannot have."""


def check_static_sizes(module: ModuleOp) -> None:
    """Refuse the first op whose result size depends on data (one line naming the op and why)."""
    for op in module.walk():
        name = op.attributes.get("name")
        where = f" ({name.data})" if name is not None and hasattr(name, "data") else ""
        if isinstance(op, T.CondTakeOp):
            raise DataDependentShapeError(
                f"{op.name}{where}: how many elements it takes depends on the mask's values, and compiled "
                "kernels need static sizes; run this graph on the reference interpreter (compiler.lite)"
            )
        dynamic = [r.type for r in op.results if isinstance(r.type, TensorType) and -1 in r.type.get_shape()]
        if dynamic:
            raise DataDependentShapeError(
                f"{op.name}{where}: its result {dynamic[0]} has a size known only at run time (it depends "
                "on tensor values), and compiled kernels need static sizes"
            )


@dataclass(frozen=True)
class SpecializeShapesPass(PatternPass):
    """Fixes shapes computed in the graph (get_var_shape, reshape_to, broadcast_to) to their static values."""

    name = "specialize-shapes"
    PATTERNS = (FoldGetVarShape(), StaticReshapeTo(), StaticBroadcastTo())

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_static_sizes(op)
        super().apply(ctx, op)
