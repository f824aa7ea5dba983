"""Scalar parameter values <-> builtin attributes, the part the ``mgb`` ops' properties
(:func:`dialects.tensor.to_attr`) and the kernel parameters (:func:`dialects.kernel.params_attr`)
store alike; each adds its own sequences (int arrays and enum lists; nested arrays)."""

from __future__ import annotations

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, StringAttr, f64, i64
from xdsl.ir import Attribute


def scalar_attr(value: object, bool_type: IntegerType) -> Attribute | None:
    """The attribute of a bool (an integer of ``bool_type``), int, float or str; ``None`` for any
    other value."""
    if isinstance(value, bool):
        return IntegerAttr(int(value), bool_type)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    return None


def scalar_value(attr: Attribute) -> bool | int | float | str | None:
    """The value of an integer (``i1``: a bool), float or string attribute; ``None`` for any other
    attribute."""
    if isinstance(attr, IntegerAttr):
        value = attr.value.data
        return bool(value) if attr.type == IntegerType(1) else value
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    return None
