"""``apply(opdef, *tensors)``: run a :mod:`compiler.core.ops.builtin` OpDef (MegEngine's
``core._imperative_rt.core2.apply``); returns the list of results."""

from __future__ import annotations

from typing import Any

from compiler.core import apply as _apply
from compiler.core.ops.builtin import OpDef, TypeCvt
from compiler.tensor import Tensor
from dialects.dtypes import tensor_type

__all__ = ["apply"]


def apply(op: OpDef, *args: Any) -> list[Tensor]:
    if not isinstance(op, OpDef):
        raise TypeError(f"apply: expected an OpDef from core.ops.builtin, got {type(op).__name__}")
    tensors = [a if isinstance(a, Tensor) else Tensor(a) for a in args]
    label = type(op).__name__
    if isinstance(op, TypeCvt):
        (x,) = tensors
        return _apply(op.op_cls, tensors, label=label, result_types=[tensor_type(x.shape, op.target_dtype)])
    return op.finish(_apply(op.op_cls, tensors, label=label, **op.params_for(tensors)))
