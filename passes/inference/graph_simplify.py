"""``elemwise-simplify``: the elementwise simplifications MegEngine's graph applies when a trace is
compiled with ``opt_level >= 1`` (its default is 2), so they are in every dump of such a trace,
with or without ``optimize_for_inference``:

* ``log(exp(x))``  ==>  ``x``
* ``log(exp(a) + exp(b))``  ==>  ``log_sum_exp(a, b)`` (finite where the unfused form overflows)
* ``y / y``  ==>  ``1`` (the same value on both sides; as in MegEngine, also where ``y`` is 0)

They apply to floating-point values only; the replaced ops stay where something else reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from dialects import tensor as T
from dialects.dtypes import numpy_dtype
from passes.inference.common import (
    E,
    element,
    elemwise,
    insert_const,
    is_float_value,
    mode_of,
    replace_keeping_names,
    shape,
)
from passes.pattern_pass import PatternPass


def _exp_operand(v: SSAValue) -> SSAValue | None:
    owner = v.owner
    return owner.inputs[0] if mode_of(owner) == E.EXP else None  # type: ignore[union-attr]


class LogOfExp(RewritePattern):
    """``log(exp(x))``  ==>  ``x``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        if mode_of(op) != E.LOG or not is_float_value(op.output):
            return
        x = _exp_operand(op.inputs[0])
        if x is not None and x.type == op.output.type:
            rewriter.replace(op, [], [x])


class LogOfSumOfExps(RewritePattern):
    """``log(exp(a) + exp(b))``  ==>  ``log_sum_exp(a, b)``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        if mode_of(op) != E.LOG or not is_float_value(op.output):
            return
        add = op.inputs[0].owner
        if mode_of(add) != E.ADD:
            return
        a, b = (_exp_operand(v) for v in add.inputs)  # type: ignore[union-attr]
        if a is None or b is None:
            return
        fused = elemwise(E.LOG_SUM_EXP, [a, b])
        if fused.output.type != op.output.type:
            return
        replace_keeping_names(rewriter, op, fused)


class DivideBySelf(RewritePattern):
    """``y / y``  ==>  ``1``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        if mode_of(op) != E.TRUE_DIV or op.inputs[0] is not op.inputs[1] or not is_float_value(op.output):
            return
        elem = element(op.output)
        ones = insert_const(rewriter, np.ones(shape(op.output), numpy_dtype(elem)), elem, op)
        rewriter.replace(op, [], [ones])


@dataclass(frozen=True)
class ElemwiseSimplifyPass(PatternPass):
    """MegEngine's opt_level-1 elementwise simplifications: log(exp(x)), log(exp(a)+exp(b)), y/y."""

    name = "elemwise-simplify"
    PATTERNS = (LogOfExp(), LogOfSumOfExps(), DivideBySelf())
