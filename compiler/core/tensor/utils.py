"""Part of MegEngine's ``core.tensor.utils``: value conversions that model and test code imports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.tensor import Tensor

__all__ = ["astensor1d", "isscalar", "make_shape_tuple", "result_type"]


def isscalar(x: Any) -> bool:
    """A 0-d tensor or a Python/numpy scalar."""
    if isinstance(x, Tensor):
        return x.ndim == 0
    return bool(np.isscalar(x))


def astensor1d(x: Any, *reference: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A 1-D tensor from a sequence of scalars and/or one-element tensors, or from an array; a
    tensor is returned as it is (whatever its dtype)."""
    import compiler.functional as F

    if isinstance(x, Tensor):
        return x
    if isinstance(x, Sequence) and not isinstance(x, str) and any(isinstance(v, Tensor) for v in x):
        parts = [v.reshape(1) if isinstance(v, Tensor) else Tensor([v], dtype=dtype) for v in x]
        if dtype is not None:
            parts = [p.astype(dtype) for p in parts]
        out = F.concat(parts)
        return out
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"astensor1d: expected a 1-D sequence, got shape {arr.shape}")
    out = Tensor(arr, dtype=dtype)
    from compiler.utils.network_node import ImmutableTensor, VarNode

    if any(isinstance(r, VarNode) for r in reference):
        # a graph var as reference: the values become a constant of that graph, as in MegEngine
        return ImmutableTensor(out._data).outputs[0]
    return out


def make_shape_tuple(shape: Any) -> tuple[int, ...]:
    """A shape (tuple, list, 1-D array or tensor) as a tuple of Python ints."""
    if isinstance(shape, Tensor):
        shape = shape.numpy()
    return tuple(int(s) for s in np.asarray(shape).reshape(-1))


def result_type(*args: Any) -> np.dtype:
    """The dtype MegEngine promotes these operands to (float64 and int64 narrowed as tensors do)."""
    dtypes = [a.dtype if isinstance(a, Tensor) else np.asarray(a).dtype for a in args]
    dt = np.result_type(*dtypes)
    if dt == np.float64:
        return np.dtype(np.float32)
    if dt.kind in "iu" and dt.itemsize == 8:
        return np.dtype(np.int32)
    return dt
