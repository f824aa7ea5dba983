"""Canonicalization of ``layout.relayout`` (MegEngine's ShuffleShuffleRemovePass and the
ParamFusePass folding of relayouted weights). Attached to the op through its trait, so xDSL's
``canonicalize`` applies them too."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from dialects import layout as L
from dialects import tensor as T
from dialects.dtypes import numpy_dtype
from dialects.weights import WeightAttr


def const_of_type(array: np.ndarray, t: TensorType) -> T.ConstOp:
    """An ``mgb.const`` of type ``t`` (layout included) holding ``array``."""
    data = np.ascontiguousarray(array, dtype=numpy_dtype(t.element_type)).reshape(t.get_shape())
    return T.ConstOp.create(result_types=[t], properties={"value": WeightAttr.from_numpy(data)})


class CancelInverseRelayouts(RewritePattern):
    """``relayout(relayout(x : A) -> B) -> A``  ==>  ``x``, when the first keeps every element"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: L.RelayoutOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if isinstance(inner, L.RelayoutOp) and inner.input.type == op.output.type and inner.is_lossless():
            rewriter.replace(op, [], [inner.input])


class MergeRelayoutChain(RewritePattern):
    """``relayout(relayout(x : A) -> B) -> C``  ==>  ``relayout(x : A) -> C`` (no padded channels)"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: L.RelayoutOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if (
            not isinstance(inner, L.RelayoutOp)
            or inner.channels is not None
            or op.channels is not None
            or L.layout_of(inner.input.type) == L.layout_of(op.output.type)
        ):
            return
        rewriter.replace(op, L.RelayoutOp.build(inner.input, L.layout_of(op.output.type)))


class FoldRelayoutOfConst(RewritePattern):
    """``relayout(const w)``  ==>  ``const pack(w)``: weights are packed at compile time"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: L.RelayoutOp, rewriter: PatternRewriter) -> None:
        const = op.input.owner
        if not isinstance(const, T.ConstOp) or const.value.is_elided:
            return
        p = op.params()
        out = op.output.type
        assert isinstance(out, TensorType)
        logical = op.logical_shapes()[0]
        packed = L.relayout_array(const.numpy(), p["src"], p["dst"], logical)
        new = const_of_type(packed, out)
        for key in ("name", "scope"):
            if key in const.attributes:
                new.attributes[key] = const.attributes[key]
        rewriter.replace(op, new)


RELAYOUT_PATTERNS: tuple[RewritePattern, ...] = (
    CancelInverseRelayouts(),
    MergeRelayoutChain(),
    FoldRelayoutOfConst(),
)
