"""Elementwise functions: each is one ``mgb.elemwise`` mode (MegEngine's ``functional.elemwise``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from compiler.core import apply, op_error
from compiler.tensor import Tensor, as_tensor
from dialects.enums import ElemwiseMode
from dialects.tensor import ElemwiseOp

# MegEngine computes these in float32 even for integer operands (``_elwise`` casts them).
_FLOAT_ONLY = frozenset(
    """TRUE_DIV POW EXP LOG LOG1P EXPM1 SQRT SIN COS TAN TANH SIGMOID H_SWISH HSIGMOID GELU SILU ACOS ASIN
    ATAN2 SINH COSH ASINH ACOSH ATANH ERF LOG_SUM_EXP LOGSIGMOID SOFTPLUS""".split()
)


def _category(dtype: np.dtype) -> str:
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(dtype.kind, dtype.kind)


def _promoted(a: np.dtype, b: np.dtype) -> np.dtype:
    """MegBrain's ``dtype_promotion`` of two operand dtypes: float16 counts as float32 beside another
    dtype, operands of different categories (bool, integer, float) meet in float32, integers of one
    signedness in the wider one; integers of different signedness have no common dtype."""
    if a == b:
        return a
    a = np.dtype(np.float32) if a == np.float16 else a
    b = np.dtype(np.float32) if b == np.float16 else b
    if _category(a) != _category(b):
        return np.dtype(np.float32)
    if a.kind != b.kind and {a.kind, b.kind} == {"i", "u"}:
        raise op_error("elemwise", f"dtype promotion between different signedness is undefined: {a} and {b}")
    return a if a.itemsize > b.itemsize else b


def _promote(tensors: list[Tensor]) -> list[Tensor]:
    """Cast operands to one common dtype by MegEngine's promotion rule (``_promoted``; float64/int64
    data already narrowed to float32/int32 when the tensors were made), so mixed-dtype operands
    reach the op as one dtype instead of failing its type check."""
    dtypes = [t.dtype for t in tensors]
    if len(set(dtypes)) <= 1:
        return tensors
    common = dtypes[0]
    for dtype in dtypes[1:]:
        common = _promoted(common, dtype)
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


def _logical(mode: str, *inputs: Any, label: str) -> Tensor:
    tensors = [as_tensor(x) for x in inputs]
    for t in tensors:
        if t.dtype.kind != "b":
            raise op_error(label, f"needs bool tensors, got {t.dtype}")
    return _elemwise(mode, *tensors, label=label)


_Apply = Callable[..., Tensor]


def _public(function: _Apply, name: str) -> _Apply:
    # traced modules and pickles find a function again by its module and qualified name
    function.__name__ = function.__qualname__ = name
    return function


def _unary(name: str, mode: str, apply_mode: _Apply = _elemwise) -> Callable[[Any], Tensor]:
    """The public function ``name(x)``: one ``mode`` elemwise op labelled ``name``."""

    def function(x: Any) -> Tensor:
        return apply_mode(mode, x, label=name)

    return _public(function, name)


def _binary(
    name: str, mode: str, apply_mode: _Apply = _elemwise, *, swapped: bool = False
) -> Callable[[Any, Any], Tensor]:
    """The public function ``name(x, y)``: one ``mode`` elemwise op labelled ``name`` (on ``y, x``
    when ``swapped``: ``greater`` is ``LT`` with its operands the other way round)."""

    def function(x: Any, y: Any) -> Tensor:
        return apply_mode(mode, *((y, x) if swapped else (x, y)), label=name)

    return _public(function, name)


add = _binary("add", "ADD")
sub = _binary("sub", "SUB")
mul = _binary("mul", "MUL")
div = _binary("div", "TRUE_DIV")
floor_div = _binary("floor_div", "FLOOR_DIV")
mod = _binary("mod", "MOD")
maximum = _binary("maximum", "MAX")
minimum = _binary("minimum", "MIN")
equal = _binary("equal", "EQ")
not_equal = _binary("not_equal", "NEQ")
less = _binary("less", "LT")
less_equal = _binary("less_equal", "LEQ")
greater = _binary("greater", "LT", swapped=True)
greater_equal = _binary("greater_equal", "LEQ", swapped=True)
logical_and = _binary("logical_and", "AND", _logical)
logical_or = _binary("logical_or", "OR", _logical)
logical_xor = _binary("logical_xor", "XOR", _logical)

neg = _unary("neg", "NEGATE")
exp = _unary("exp", "EXP")
log = _unary("log", "LOG")
log1p = _unary("log1p", "LOG1P")
expm1 = _unary("expm1", "EXPM1")
sqrt = _unary("sqrt", "SQRT")
square = _unary("square", "SQUARE")
sin = _unary("sin", "SIN")
cos = _unary("cos", "COS")
tanh = _unary("tanh", "TANH")
sigmoid = _unary("sigmoid", "SIGMOID")
floor = _unary("floor", "FLOOR")
ceil = _unary("ceil", "CEIL")
relu = _unary("relu", "RELU")
relu6 = _unary("relu6", "RELU6")
hswish = _unary("hswish", "H_SWISH")
hsigmoid = _unary("hsigmoid", "HSIGMOID")
gelu = _unary("gelu", "GELU")
silu = _unary("silu", "SILU")
logical_not = _unary("logical_not", "NOT", _logical)
acos = _unary("acos", "ACOS")
asin = _unary("asin", "ASIN")
tan = _unary("tan", "TAN")
sinh = _unary("sinh", "SINH")
cosh = _unary("cosh", "COSH")
asinh = _unary("asinh", "ASINH")
acosh = _unary("acosh", "ACOSH")
atanh = _unary("atanh", "ATANH")
erf = _unary("erf", "ERF")
atan2 = _binary("atan2", "ATAN2")
logaddexp = _binary("logaddexp", "LOG_SUM_EXP")


def atan(x: Any) -> Tensor:
    """arctan(x), as MegEngine computes it: ``atan2(x, 1)``."""
    return _elemwise("ATAN2", x, 1.0, label="atan")


def _shift(mode: str, name: str) -> Callable[[Any, Any], Tensor]:
    def function(x: Any, y: Any) -> Tensor:
        like = next((v for v in (x, y) if isinstance(v, Tensor)), None)
        a, b = as_tensor(x, like), as_tensor(y, like)
        for t in (a, b):
            if t.dtype.kind not in "iu":
                raise op_error(name, f"needs integer tensors, got {t.dtype}")
        return _elemwise(mode, a, b, label=name)

    return _public(function, name)


left_shift = _shift("SHL", "left_shift")
right_shift = _shift("SHR", "right_shift")

# MegEngine's names, shadowing Python's builtins within this module
pow = _binary("pow", "POW")  # noqa: A001
abs = _unary("abs", "ABS")  # noqa: A001
round = _unary("round", "ROUND")  # noqa: A001


def clip(x: Any, lower: Any = None, upper: Any = None) -> Tensor:
    if lower is None and upper is None:
        raise op_error("clip", "at least one of lower and upper must be given")
    x = as_tensor(x)
    if lower is None:
        return minimum(x, upper)
    if upper is None:
        return maximum(x, lower)
    return _elemwise("CLIP", x, lower, upper, label="clip")


__all__ = [
    "abs",
    "acos",
    "acosh",
    "add",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "ceil",
    "clip",
    "cos",
    "cosh",
    "div",
    "equal",
    "erf",
    "exp",
    "expm1",
    "floor",
    "floor_div",
    "gelu",
    "greater",
    "greater_equal",
    "hsigmoid",
    "hswish",
    "left_shift",
    "less",
    "less_equal",
    "log",
    "log1p",
    "logaddexp",
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
    "right_shift",
    "round",
    "sigmoid",
    "silu",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "sub",
    "tan",
    "tanh",
]
