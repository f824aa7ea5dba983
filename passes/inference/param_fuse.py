"""``param-fuse``: constant folding of parameter sub-graphs (MegEngine's ParamFusePass).

An op whose operands are all constants is evaluated once with the reference kernels
(:mod:`semantics.kernels`, the single definition of every op's semantics) and replaced by
constants holding its results. Repeated to a fixed point, this folds whole parameter sub-graphs
(BatchNorm statistics, relayouted or converted weights, shape arithmetic) into plain weights.

MegEngine refuses to fold when it would grow the parameters too much; here the ``max-growth``
option bounds how many bytes a fold may add (a broadcast of a scalar to a large activation shape is
kept as a broadcast). ``-1`` folds everything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.ir import Operation
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
)

from dialects import tensor as T
from passes.inference.common import const_of_type, const_value, tensor_type
from passes.pattern_pass import PatternPass
from semantics.interpreter import result_specs
from semantics.kernels import KERNELS


@dataclass
class FoldConstantOp(RewritePattern):
    """``op(const, ..., const)``  ==>  ``const`` (evaluated with the op's reference kernel)"""

    max_growth: int = 1 << 20

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, T.MgbOp) or isinstance(op, T.ConstOp) or not op.operands or not op.results:
            return
        kernel = KERNELS.get(type(op))  # type: ignore[arg-type]
        if kernel is None:
            return
        args = [const_value(v) for v in op.operands]
        if any(a is None for a in args):
            return
        specs = result_specs(op)
        grown = sum(s.dtype.itemsize * math.prod(s.shape) for s in specs) - sum(a.nbytes for a in args)  # type: ignore[union-attr]
        if 0 <= self.max_growth < grown:
            return
        try:
            outs = kernel(args, specs, **op.params())
        except (NotImplementedError, ValueError, TypeError, ArithmeticError):
            return  # left to run time, where the error names the op
        consts = [const_of_type(a, tensor_type(r)) for a, r in zip(outs, op.results, strict=True)]
        if any(c is None for c in consts):
            return
        rewriter.replace(op, consts, [c.output for c in consts])  # type: ignore[union-attr]


@dataclass(frozen=True)
class ParamFusePass(PatternPass):
    """Constant folding: evaluates ops whose operands are all constants (reference kernels)."""

    name = "param-fuse"

    max_growth: int = 1 << 20
    """Most bytes one fold may add to the parameters (-1: no limit)."""

    def patterns(self) -> tuple[RewritePattern, ...]:
        return (FoldConstantOp(self.max_growth),)
