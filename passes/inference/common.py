"""Helpers shared by the inference passes: reading constants, making constants and elemwise ops,
keeping the frontend's naming attributes on rewritten ops."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.dtypes import is_float, numpy_dtype
from dialects.weights import WeightAttr
from passes.values import shape as shape
from passes.values import tensor_type as tensor_type

E = enums.ElemwiseMode

# attributes that name an op after its module/parameter; a rewrite keeps them on the new op
NAMING_ATTRS = ("scope", "name")


def element(v: SSAValue) -> Attribute:
    return tensor_type(v).element_type


def layout_of(v: SSAValue) -> L.Layout | None:
    """The blocked layout ``v`` is stored in (``None``: plain)."""
    return L.layout_of(v.type)


def is_float_value(v: SSAValue) -> bool:
    return is_float(element(v))


def const_value(v: SSAValue) -> np.ndarray | None:
    """The array of ``v`` when it is an ``mgb.const`` whose data is present, else None."""
    op = v.owner
    if isinstance(op, T.ConstOp) and not op.value.is_elided:
        return op.numpy()
    return None


def is_const(v: SSAValue) -> bool:
    return const_value(v) is not None


def make_const(array: np.ndarray, elem: Attribute, layout: L.Layout | None = None) -> T.ConstOp:
    """An anonymous ``mgb.const`` holding ``array`` converted to ``elem``; with ``layout``,
    ``array`` is the physical array of a tensor stored in that layout and the const's type says so
    (a blocked graph read from a ``.mge``, or one a layout pass produced, stays well-typed when an
    inference pass rebuilds one of its constants)."""
    data = np.asarray(array, dtype=numpy_dtype(elem))
    if layout is None:
        return T.ConstOp.from_numpy(data, elem)
    op = const_of_type(data, TensorType(elem, data.shape, L.LayoutAttr(layout)))
    assert op is not None
    return op


def const_of_type(array: np.ndarray, t: TensorType) -> T.ConstOp | None:
    """An ``mgb.const`` of exactly type ``t`` (its encoding kept) holding ``array``; None when the
    array does not fill ``t``."""
    data = np.ascontiguousarray(array, dtype=numpy_dtype(t.element_type))
    if data.size != math.prod(t.get_shape()):
        return None
    op = T.ConstOp.create(result_types=[t], properties={"value": WeightAttr.from_numpy(data)})
    assert isinstance(op, T.ConstOp)
    return op


def insert_const(
    rewriter: PatternRewriter,
    array: np.ndarray,
    elem: Attribute,
    before: Operation,
    layout: L.Layout | None = None,
) -> SSAValue:
    const = make_const(array, elem, layout)
    rewriter.insert(const, InsertPoint.before(before))
    return const.output


def copy_naming(src: Operation, dst: Operation) -> None:
    for key in NAMING_ATTRS:
        if key in src.attributes:
            dst.attributes[key] = src.attributes[key]


def replace_keeping_names(rewriter: PatternRewriter, old: Operation, new: Operation) -> None:
    """Replace ``old`` by ``new`` (inserted before it), carrying ``scope``/``name`` over."""
    copy_naming(old, new)
    rewriter.replace(old, new)


def replace_absorbing(
    rewriter: PatternRewriter, old: Operation, new: Operation, *absorbed: Operation
) -> None:
    """Replace ``old`` by ``new``, names kept, and erase the producers ``new`` computes in their
    place (``old`` was their only user)."""
    replace_keeping_names(rewriter, old, new)
    for producer in absorbed:
        rewriter.erase(producer)


def elemwise(mode: Any, operands: list[SSAValue]) -> T.ElemwiseOp:
    op = T.ElemwiseOp.make(operands, mode=mode)
    assert isinstance(op, T.ElemwiseOp)
    return op


def mode_of(op: Operation | None) -> Any:
    """The elemwise mode of ``op``, or None when it is not an ``mgb.elemwise``."""
    return op.params()["mode"] if isinstance(op, T.ElemwiseOp) else None


def single_use(v: SSAValue) -> bool:
    return v.has_one_use()


def only_user(v: SSAValue) -> Operation | None:
    if not v.has_one_use():
        return None
    return next(iter(v.uses)).operation
