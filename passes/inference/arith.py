"""Arithmetic passes of MegEngine's inference pipeline, over ``mgb.elemwise``.

* ``arith-simplify`` — identities: ``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``, ``-(-x)`` (part of
  NormalizeArithChainPass / FinalArithTransformPass).
* ``reorder-arith-chain`` — ReorderArithChainPass + ParamFusePass: in a chain of ADDs the constant
  terms move to the end and are summed into one constant, so a residual ``x + (conv + b)`` becomes
  ``(x + conv) + b`` and the bias can fuse with a following ReLU.
* ``arith-fuse`` — ArithFusePass: ``RELU(ADD(a, b))`` → ``FUSE_ADD_RELU(a, b)`` (likewise SIGMOID,
  TANH, H_SWISH) and ``ADD(MUL(a, b), c)`` → ``FUSE_MUL_ADD3(a, b, c)``.

Every rewrite keeps the results equal up to float rounding; the fused ops are only formed when the
inner result has no other reader.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from dialects import tensor as T
from dialects.dtypes import QuantizedType
from dialects.layout import Layout
from passes.inference.common import (
    E,
    const_value,
    element,
    elemwise,
    insert_const,
    is_float_value,
    layout_of,
    mode_of,
    only_user,
    replace_absorbing,
    replace_keeping_names,
    shape,
    single_use,
)
from passes.pattern_pass import PatternPass

# ----------------------------------------------------------------------------------------------
# arith-simplify


def _is_splat(v: SSAValue, value: float) -> bool:
    """A literal constant (not a named model parameter) equal to ``value`` everywhere. A parameter
    that happens to be zero or one (a freshly initialised bias) keeps its op, as in MegEngine."""
    if isinstance(v.owner, T.ConstOp) and "name" in v.owner.attributes:
        return False
    a = const_value(v)
    if a is None or a.size == 0:
        return False
    elem = element(v)
    if isinstance(elem, QuantizedType):  # stored integers: the real value is (q - zero_point) * scale
        a = (a.astype(np.float32) - np.float32(elem.zero_point_value)) * np.float32(elem.scale_value)
    return bool(np.all(a == value))


def _forward_if_same_type(op: T.ElemwiseOp, x: SSAValue, rewriter: PatternRewriter) -> None:
    if x.type == op.output.type:
        rewriter.replace(op, [], [x])


@dataclass(frozen=True)
class RemoveNeutralOperand(RewritePattern):
    """``x op e``, ``e op x`` and ``x inverse e``  ==>  ``x``, with ``e`` the neutral element of the
    commutative ``op`` (when the constant does not broadcast ``x``)."""

    op_mode: E
    inverse_mode: E
    neutral: float
    inverse_on_floats_only: bool = False

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        mode = mode_of(op)
        if mode == self.op_mode:
            for i in (0, 1):
                if _is_splat(op.inputs[1 - i], self.neutral):
                    _forward_if_same_type(op, op.inputs[i], rewriter)
                    return
        elif mode == self.inverse_mode and _is_splat(op.inputs[1], self.neutral):
            if is_float_value(op.output) or not self.inverse_on_floats_only:
                _forward_if_same_type(op, op.inputs[0], rewriter)


REMOVE_ADD_ZERO = RemoveNeutralOperand(E.ADD, E.SUB, 0)
"""``x + 0``, ``0 + x``, ``x - 0``  ==>  ``x``"""
REMOVE_MUL_ONE = RemoveNeutralOperand(E.MUL, E.TRUE_DIV, 1, inverse_on_floats_only=True)
"""``x * 1``, ``1 * x``, ``x / 1`` (floats)  ==>  ``x``"""


class RemoveDoubleNegate(RewritePattern):
    """``-(-x)``  ==>  ``x``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        inner = op.inputs[0].owner if op.inputs else None
        if mode_of(op) == E.NEGATE and mode_of(inner) == E.NEGATE:
            assert isinstance(inner, T.ElemwiseOp)
            _forward_if_same_type(op, inner.inputs[0], rewriter)


@dataclass(frozen=True)
class ArithSimplifyPass(PatternPass):
    """Removes arithmetic identities: x+0, x-0, x*1, x/1, -(-x)."""

    name = "arith-simplify"
    PATTERNS = (REMOVE_ADD_ZERO, REMOVE_MUL_ONE, RemoveDoubleNegate())


# ----------------------------------------------------------------------------------------------
# reorder-arith-chain


def _is_add(op: Operation | None) -> bool:
    return mode_of(op) == E.ADD


def _is_inner_add(v: SSAValue) -> bool:
    """A single-use ADD feeding another ADD: its terms can join the outer sum."""
    return _is_add(v.owner) and _is_add(only_user(v))


def add_chain_terms(root: T.ElemwiseOp, inner: Callable[[SSAValue], bool] = _is_inner_add) -> list[SSAValue]:
    """The summands of the ADD tree rooted at ``root``, left to right."""
    terms: list[SSAValue] = []
    stack: list[SSAValue] = list(reversed(root.inputs))
    while stack:
        v = stack.pop()
        if inner(v):
            stack.extend(reversed(v.owner.operands))  # type: ignore[union-attr]
        else:
            terms.append(v)
    return terms


class GroupAddConstants(RewritePattern):
    """``c1 + (x + (c2 + y))``  ==>  ``(x + y) + (c1 + c2)`` (constants summed at compile time)"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        if not _is_add(op) or _is_inner_add(op.output) or not is_float_value(op.output):
            return
        terms = add_chain_terms(op)
        consts = [t for t in terms if const_value(t) is not None]
        others = [t for t in terms if const_value(t) is None]
        if not consts or not others:
            return  # all constants: param-fuse's job
        if len(consts) == 1 and len(others) == 1:
            return  # one term and one constant (either order, as MegEngine orders them by var id)
        if len(consts) == 1 and op.inputs[1] is consts[0]:
            return  # already (non-constant sum) + constant
        layout = _constants_layout(consts)
        if layout is False:
            return
        total = np.zeros((), np.float32)
        for c in consts:
            total = total + np.asarray(const_value(c), np.float32)
        cur = others[0]
        for t in others[1:]:
            add = rewriter.insert(elemwise(E.ADD, [cur, t]), InsertPoint.before(op))
            cur = add.output
        cval = insert_const(rewriter, total, element(op.output), op, layout if total.size != 1 else None)
        replace_keeping_names(rewriter, op, elemwise(E.ADD, [cur, cval]))


def _constants_layout(consts: list[SSAValue]) -> Layout | None | Literal[False]:
    """The layout the sum of ``consts`` is stored in: the one layout of the blocked ones (an
    elementwise op on blocked operands works on their physical arrays, scalars broadcasting), None
    when all are plain, False when they mix layouts (the chain is left alone)."""
    blocked = {layout_of(c) for c in consts} - {None}
    if len(blocked) > 1 or (blocked and any(layout_of(c) is None and not _is_scalar(c) for c in consts)):
        return False
    return blocked.pop() if blocked else None


def _is_scalar(v: SSAValue) -> bool:
    return math.prod(shape(v)) == 1


@dataclass(frozen=True)
class ReorderArithChainPass(PatternPass):
    """Moves the constants of ADD chains to the end and sums them into one constant."""

    name = "reorder-arith-chain"
    PATTERNS = (GroupAddConstants(),)


# ----------------------------------------------------------------------------------------------
# arith-fuse

ADD_FUSED = {
    E.RELU: E.FUSE_ADD_RELU,
    E.SIGMOID: E.FUSE_ADD_SIGMOID,
    E.TANH: E.FUSE_ADD_TANH,
    E.H_SWISH: E.FUSE_ADD_H_SWISH,
}


class FuseAddNonlinearity(RewritePattern):
    """``relu(a + b)``  ==>  ``fuse_add_relu(a, b)`` (also sigmoid, tanh, h_swish), on floats:
    MegEngine's Elemwise on quantized values only takes ADD/SUB/NEGATE/RELU/MAX/MIN (it refuses to
    load anything else); fused quantized modes belong to ElemwiseMultiType."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        fused = ADD_FUSED.get(mode_of(op))
        if fused is None or not is_float_value(op.output):
            return
        src = op.inputs[0]
        add = src.owner
        if _is_add(add) and single_use(src) and src.type == op.output.type:
            assert isinstance(add, T.ElemwiseOp)
            replace_absorbing(rewriter, op, elemwise(fused, list(add.inputs)), add)


class FuseMulAdd3(RewritePattern):
    """``a * b + c``  ==>  ``fuse_mul_add3(a, b, c)`` (floats)"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ElemwiseOp, rewriter: PatternRewriter) -> None:
        if not _is_add(op) or not is_float_value(op.output):
            return
        for i in (0, 1):
            m = op.inputs[i]
            mul = m.owner
            if mode_of(mul) == E.MUL and single_use(m):
                assert isinstance(mul, T.ElemwiseOp)
                a, b = mul.inputs
                replace_absorbing(rewriter, op, elemwise(E.FUSE_MUL_ADD3, [a, b, op.inputs[1 - i]]), mul)
                return


@dataclass(frozen=True)
class ArithFusePass(PatternPass):
    """Fuses elemwise chains into MegEngine's fused modes (FUSE_ADD_RELU, FUSE_MUL_ADD3, ...)."""

    name = "arith-fuse"
    PATTERNS = (FuseAddNonlinearity(), FuseMulAdd3())
