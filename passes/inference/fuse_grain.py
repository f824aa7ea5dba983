"""``fuse-grain`` (on by default in MegEngine, spec B.4.4): coarser ops for reductions.

* FoldingReduceMeanPass: ``true_div(reduce sum(x, axis), n)`` with ``n`` the constant size of that
  axis  ==>  ``reduce mean(x, axis)``.
* FoldingGlobalPoolingPass: ``reduce mean|max(reshape(x : NxCxHxW -> NxCx(HW)), axis = 2)`` then
  axis additions back to ``NxCx1x1``  ==>  ``adaptive_pooling average|max(x) {out_shape = [1, 1]}``.

xmge's frontend already emits MEAN reductions and pooling ops, so on traced models these rarely
fire; they matter for IR from other frontends (``.mge`` files written without fuse_grain).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    is_float_value,
    mode_of,
    replace_absorbing,
    shape,
    single_use,
)
from passes.pattern_pass import PatternPass

R = enums.ReduceMode


class FoldReduceMean(RewritePattern):
    """``reduce sum(x, a) / x.shape[a]``  ==>  ``reduce mean(x, a)``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        if mode_of(op) != E.TRUE_DIV or not is_float_value(op.output):
            return
        num, den = op.inputs
        red = num.owner
        n = const_value(den)
        if not isinstance(red, T.ReduceOp) or not single_use(num) or n is None or n.size != 1:
            return
        p = red.params()
        if p["mode"] != R.SUM or float(n.reshape(-1)[0]) != shape(red.src)[p["axis"]]:
            return
        if op.output.type != red.output.type:
            return
        mean = T.ReduceOp.make([red.src], [red.output.type], **{**p, "mode": R.MEAN})
        replace_absorbing(rewriter, op, mean, red)


class FoldGlobalPooling(RewritePattern):
    """``axis_add(reduce mean|max(reshape(x -> NxCx(HW)), 2))`` giving ``NxCx1x1``  ==>
    ``adaptive_pooling(x) {out_shape = [1, 1]}``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.AxisAddRemoveOp, rewriter: PatternRewriter) -> None:
        red = op.src.owner
        if not isinstance(red, T.ReduceOp) or not single_use(op.src):
            return
        p = red.params()
        mode = {R.MEAN: enums.PoolingMode.AVERAGE, R.MAX: enums.PoolingMode.MAX}.get(p["mode"])
        reshape = red.src.owner
        if mode is None or p["axis"] != 2 or not isinstance(reshape, T.ReshapeOp) or not single_use(red.src):
            return
        x = reshape.src
        xs = shape(x)
        if len(xs) != 4 or shape(reshape.output) != (xs[0], xs[1], xs[2] * xs[3]):
            return
        if shape(op.output) != (xs[0], xs[1], 1, 1) or not is_float_value(x):
            return
        pool = T.AdaptivePoolingOp.make([x], [op.output.type], mode=mode, out_shape=(1, 1))
        replace_absorbing(rewriter, op, pool, red, reshape)


@dataclass(frozen=True)
class FuseGrainPass(PatternPass):
    """Folds sum/size into MEAN and reshape+reduce global pooling into AdaptivePooling."""

    name = "fuse-grain"
    PATTERNS = (FoldReduceMean(), FoldGlobalPooling())
