"""Canonicalization of the ``mgb`` dialect: drop no-op shape/type ops and merge chains of them.

The patterns are attached to their ops through :class:`dialects.tensor.MgbCanonicalization`, so
xDSL's generic ``canonicalize`` pass applies them too; ``mgb-canonicalize`` applies only these.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from dialects import tensor as T
from dialects.dtypes import dtype_name
from passes.pattern_pass import PatternPass


def _forward(op: Operation, value: SSAValue, rewriter: PatternRewriter) -> None:
    """Replace ``op`` (one result) by an existing value of the same type."""
    rewriter.replace(op, [], [value])


class RemoveIdentityCast(RewritePattern):
    """``reshape | broadcast | typecvt | axis_add_remove (x : T) -> T``  ==>  ``x`` (for
    ``axis_add_remove``: no axes, or adds undone by removes)"""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: T.ReshapeOp | T.BroadcastOp | T.TypeCvtOp | T.AxisAddRemoveOp, rewriter: PatternRewriter
    ) -> None:
        if op.src.type == op.output.type:
            _forward(op, op.src, rewriter)


class RemoveIdentityDimshuffle(RewritePattern):
    """``dimshuffle(x) {pattern = [0, 1, ..., n-1]}``  ==>  ``x``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.DimshuffleOp, rewriter: PatternRewriter) -> None:
        pattern = op.params()["pattern"]
        if pattern == tuple(range(len(pattern))) and op.src.type == op.output.type:
            _forward(op, op.src, rewriter)


class FoldReshapeOfReshape(RewritePattern):
    """``reshape(reshape(x))`` or ``reshape(axis_add_remove(x))``  ==>  ``reshape(x)``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ReshapeOp, rewriter: PatternRewriter) -> None:
        inner = op.src.owner
        if not isinstance(inner, T.ReshapeOp | T.AxisAddRemoveOp | T.ReshapeToOp):
            return  # a static reshape after one to a computed shape: the static shape decides
        new = T.ReshapeOp.make([inner.src], [op.output.type])
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)


def compose_dimshuffles(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    """The single pattern equal to applying ``inner`` and then ``outer`` (-1 = new axis)."""
    return tuple(-1 if o == -1 else inner[o] for o in outer)


class MergeDimshuffles(RewritePattern):
    """``dimshuffle(dimshuffle(x, p), q)``  ==>  ``dimshuffle(x, p∘q)``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.DimshuffleOp, rewriter: PatternRewriter) -> None:
        inner = op.src.owner
        if not isinstance(inner, T.DimshuffleOp):
            return
        pattern = compose_dimshuffles(inner.params()["pattern"], op.params()["pattern"])
        new = T.DimshuffleOp.make([inner.src], [op.output.type], pattern=pattern)
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)


# (from, via): converting from -> via -> from gives back every value exactly.
EXACT_WIDENINGS: frozenset[tuple[str, str]] = frozenset(
    {
        ("float16", "float32"),
        ("int8", "int16"),
        ("int8", "int32"),
        ("int8", "float32"),
        ("int8", "float16"),
        ("uint8", "int16"),
        ("uint8", "uint16"),
        ("uint8", "int32"),
        ("uint8", "float32"),
        ("uint8", "float16"),
        ("int16", "int32"),
        ("int16", "float32"),
        ("uint16", "int32"),
        ("uint16", "float32"),
        ("bool", "int8"),
        ("bool", "uint8"),
        ("bool", "int16"),
        ("bool", "int32"),
        ("bool", "float16"),
        ("bool", "float32"),
    }
)


class FoldTypeCvtRoundTrip(RewritePattern):
    """``typecvt(typecvt(x : A) -> B) -> A``  ==>  ``x``, when B holds every value of A exactly"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.TypeCvtOp, rewriter: PatternRewriter) -> None:
        inner = op.src.owner
        if not isinstance(inner, T.TypeCvtOp) or inner.src.type != op.output.type:
            return
        a, b = (t.element_type for t in (inner.src.type, inner.output.type) if isinstance(t, TensorType))
        if (dtype_name(a), dtype_name(b)) in EXACT_WIDENINGS:
            _forward(op, inner.src, rewriter)


_REMOVE_IDENTITY_CAST = RemoveIdentityCast()

PATTERNS_BY_OP: dict[type[T.MgbOp], tuple[RewritePattern, ...]] = {
    T.ReshapeOp: (_REMOVE_IDENTITY_CAST, FoldReshapeOfReshape()),
    T.BroadcastOp: (_REMOVE_IDENTITY_CAST,),
    T.TypeCvtOp: (_REMOVE_IDENTITY_CAST, FoldTypeCvtRoundTrip()),
    T.AxisAddRemoveOp: (_REMOVE_IDENTITY_CAST,),
    T.DimshuffleOp: (RemoveIdentityDimshuffle(), MergeDimshuffles()),
}

# each pattern once (several ops share one), in the order of the table
ALL_PATTERNS: tuple[RewritePattern, ...] = tuple(
    dict.fromkeys(p for ps in PATTERNS_BY_OP.values() for p in ps)
)


@dataclass(frozen=True)
class MgbCanonicalizePass(PatternPass):
    """Removes no-op reshape/broadcast/typecvt/dimshuffle ops and merges chains of them."""

    name = "mgb-canonicalize"
    PATTERNS = ALL_PATTERNS

    dce: bool = True
    """Also erase ops left without uses (xDSL's greedy driver does this by default)."""

    def erases_dead_ops(self) -> bool:
        return self.dce
