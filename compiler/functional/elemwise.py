"""Elementwise functions: each is one ``mgb.elemwise`` mode (MegEngine's ``functional.elemwise``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.core import apply, op_error
from compiler.tensor import Tensor, as_tensor
from dialects.enums import ElemwiseMode
from dialects.tensor import ElemwiseOp

# MegEngine computes these in float32 even for integer operands (``_elwise`` casts them).
_FLOAT_ONLY = frozenset({"TRUE_DIV", "POW"})


def _promote(tensors: list[Tensor]) -> list[Tensor]:
    """Cast operands to one common dtype (numpy's rules, float64/int64 narrowed as MegEngine does),
    so mixed-dtype operands reach the op as one dtype instead of failing its type check."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) <= 1:
        return tensors
    common = np.result_type(*dtypes)
    if common == np.float64:
        common = np.dtype(np.float32)
    elif common.kind in "iu" and common.itemsize == 8:
        common = np.dtype(np.int32)
    return [t if t.dtype == common else t.astype(common) for t in tensors]


def _elemwise(mode: str, *inputs: Any, label: str | None = None) -> Tensor:
    like = next((x for x in inputs if isinstance(x, Tensor)), None)
    tensors = _promote([as_tensor(x, like) for x in inputs])
    if mode in _FLOAT_ONLY:
        tensors = [t if t.dtype.kind == "f" else t.astype("float32") for t in tensors]
    (out,) = apply(ElemwiseOp, tensors, label=label or mode.lower(), mode=ElemwiseMode[mode])
    return out


def _elemwise_binary(mode: str, a: Any, b: Any) -> Tensor:
    return _elemwise(mode, a, b)


def _float_unary(mode: str, x: Any, label: str) -> Tensor:
    x = as_tensor(x)
    if x.dtype.kind != "f":
        x = x.astype("float32")
    return _elemwise(mode, x, label=label)


def add(x: Any, y: Any) -> Tensor:
    return _elemwise("ADD", x, y, label="add")


def sub(x: Any, y: Any) -> Tensor:
    return _elemwise("SUB", x, y, label="sub")


def mul(x: Any, y: Any) -> Tensor:
    return _elemwise("MUL", x, y, label="mul")


def div(x: Any, y: Any) -> Tensor:
    return _elemwise("TRUE_DIV", x, y, label="div")


def floor_div(x: Any, y: Any) -> Tensor:
    return _elemwise("FLOOR_DIV", x, y, label="floor_div")


def mod(x: Any, y: Any) -> Tensor:
    return _elemwise("MOD", x, y, label="mod")


def pow(x: Any, y: Any) -> Tensor:  # noqa: A001 - MegEngine's name
    return _elemwise("POW", x, y, label="pow")


def maximum(x: Any, y: Any) -> Tensor:
    return _elemwise("MAX", x, y, label="maximum")


def minimum(x: Any, y: Any) -> Tensor:
    return _elemwise("MIN", x, y, label="minimum")


def neg(x: Any) -> Tensor:
    return _elemwise("NEGATE", x, label="neg")


def abs(x: Any) -> Tensor:  # noqa: A001
    return _elemwise("ABS", x, label="abs")


def exp(x: Any) -> Tensor:
    return _float_unary("EXP", x, "exp")


def log(x: Any) -> Tensor:
    return _float_unary("LOG", x, "log")


def log1p(x: Any) -> Tensor:
    return _float_unary("LOG1P", x, "log1p")


def expm1(x: Any) -> Tensor:
    return _float_unary("EXPM1", x, "expm1")


def sqrt(x: Any) -> Tensor:
    return _float_unary("SQRT", x, "sqrt")


def square(x: Any) -> Tensor:
    return _elemwise("SQUARE", x, label="square")


def sin(x: Any) -> Tensor:
    return _float_unary("SIN", x, "sin")


def cos(x: Any) -> Tensor:
    return _float_unary("COS", x, "cos")


def tanh(x: Any) -> Tensor:
    return _float_unary("TANH", x, "tanh")


def sigmoid(x: Any) -> Tensor:
    return _float_unary("SIGMOID", x, "sigmoid")


def floor(x: Any) -> Tensor:
    return _elemwise("FLOOR", x, label="floor")


def ceil(x: Any) -> Tensor:
    return _elemwise("CEIL", x, label="ceil")


def round(x: Any) -> Tensor:  # noqa: A001
    return _elemwise("ROUND", x, label="round")


def relu(x: Any) -> Tensor:
    return _elemwise("RELU", x, label="relu")


def relu6(x: Any) -> Tensor:
    return _elemwise("RELU6", x, label="relu6")


def hswish(x: Any) -> Tensor:
    return _float_unary("H_SWISH", x, "hswish")


def hsigmoid(x: Any) -> Tensor:
    return _float_unary("HSIGMOID", x, "hsigmoid")


def gelu(x: Any) -> Tensor:
    return _float_unary("GELU", x, "gelu")


def silu(x: Any) -> Tensor:
    return _float_unary("SILU", x, "silu")


def clip(x: Any, lower: Any = None, upper: Any = None) -> Tensor:
    if lower is None and upper is None:
        raise op_error("clip", "at least one of lower and upper must be given")
    x = as_tensor(x)
    if lower is None:
        return minimum(x, upper)
    if upper is None:
        return maximum(x, lower)
    return _elemwise("CLIP", x, lower, upper, label="clip")


def equal(x: Any, y: Any) -> Tensor:
    return _elemwise("EQ", x, y, label="equal")


def not_equal(x: Any, y: Any) -> Tensor:
    return _elemwise("NEQ", x, y, label="not_equal")


def less(x: Any, y: Any) -> Tensor:
    return _elemwise("LT", x, y, label="less")


def less_equal(x: Any, y: Any) -> Tensor:
    return _elemwise("LEQ", x, y, label="less_equal")


def greater(x: Any, y: Any) -> Tensor:
    return _elemwise("LT", y, x, label="greater")


def greater_equal(x: Any, y: Any) -> Tensor:
    return _elemwise("LEQ", y, x, label="greater_equal")


def _logical(mode: str, label: str, *inputs: Any) -> Tensor:
    tensors = [as_tensor(x) for x in inputs]
    for t in tensors:
        if t.dtype.kind != "b":
            raise op_error(label, f"needs bool tensors, got {t.dtype}")
    return _elemwise(mode, *tensors, label=label)


def logical_and(x: Any, y: Any) -> Tensor:
    return _logical("AND", "logical_and", x, y)


def logical_or(x: Any, y: Any) -> Tensor:
    return _logical("OR", "logical_or", x, y)


def logical_xor(x: Any, y: Any) -> Tensor:
    return _logical("XOR", "logical_xor", x, y)


def logical_not(x: Any) -> Tensor:
    return _logical("NOT", "logical_not", x)


__all__ = [
    "abs",
    "add",
    "ceil",
    "clip",
    "cos",
    "div",
    "equal",
    "exp",
    "expm1",
    "floor",
    "floor_div",
    "gelu",
    "greater",
    "greater_equal",
    "hsigmoid",
    "hswish",
    "less",
    "less_equal",
    "log",
    "log1p",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "mod",
    "mul",
    "neg",
    "not_equal",
    "pow",
    "relu",
    "relu6",
    "round",
    "sigmoid",
    "silu",
    "sin",
    "sqrt",
    "square",
    "sub",
    "tanh",
]
