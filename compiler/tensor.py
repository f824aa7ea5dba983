"""``Tensor`` and ``Parameter``: MegEngine's tensor API over a numpy array."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from compiler.core import _trace_option
from compiler.device import CompNode, get_default_device
from compiler.device import device_name as _device_name
from dialects.dtypes import DTypeError, element_type, numpy_dtype


def _api_name() -> str:
    """The xmge function the user called (the outermost xmge frame below the user's code), so a
    conversion error deep inside names e.g. ``conv2d`` or ``add`` rather than a helper."""
    from compiler.core import _PACKAGE_ROOTS

    frame = sys._getframe(1)
    name = "tensor"
    while frame is not None:
        if not os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_ROOTS):
            break
        name = frame.f_code.co_name
        frame = frame.f_back  # type: ignore[assignment]
    name = name.strip("_")
    return "Tensor" if name == "init" else name


def conversion_error(detail: str) -> TypeError:
    """A TypeError naming the called op and the user's source line, like ``core.op_error``."""
    from compiler.core import user_location

    return TypeError(f"{_api_name()}: {detail} (at {user_location()})")


def _to_array(value: Any) -> np.ndarray:
    """``np.asarray`` with a user-facing error instead of numpy's (ragged lists, strings, objects)."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise conversion_error(f"cannot convert {type(value).__name__} to a tensor: {exc}") from None
    if arr.dtype == object:
        raise conversion_error(f"cannot convert {type(value).__name__} {value!r:.60} to a tensor")
    return arr


def _canonical_dtype(value: Any, dtype: Any) -> np.dtype:
    if dtype is not None and _is_bfloat16(dtype):
        return np.dtype(dtype)  # held and returned as MegEngine's bfloat16 (ml_dtypes); ops refuse it
    if dtype is not None:
        try:
            return numpy_dtype(element_type(dtype))
        except DTypeError as exc:
            raise conversion_error(str(exc)) from None
    arr = _to_array(value)
    if arr.dtype == np.float64:
        return np.dtype(np.float32)
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 8:
        return np.dtype(np.int32)
    try:
        return numpy_dtype(element_type(arr.dtype))
    except DTypeError as exc:
        raise conversion_error(str(exc)) from None


def _is_bfloat16(dtype: Any) -> bool:
    try:
        return np.dtype(dtype).name == "bfloat16"
    except TypeError:
        return False


def _quantized_array(data: Any, dtype: np.dtype) -> np.ndarray:
    """An array of quantized ``dtype``: integer data are the stored values, float data are quantized
    (as ``astype`` would: the reference TypeCvt, rounding half away from zero, saturating)."""
    from semantics.quant_kernels import conform, quantize

    arr = _to_array(data)
    if arr.dtype.metadata is not None or arr.dtype.kind in "iub":
        return conform(np.array(arr, dtype=dtype.base), dtype)
    return np.array(quantize(arr.astype(np.float32), dtype))


class Tensor:
    """An n-dimensional array with MegEngine 1.13's Tensor interface."""

    __array_priority__ = 1000  # numpy defers binary operators to Tensor

    format: str = "default"  # MegEngine's memory-format tag ("nhwc" after amp.convert_tensor_format)
    _device: str | None = None  # the device named at creation (``device=``, ``to()``); else the default
    _qparams: Any = None

    def __init__(
        self,
        data: Any = None,
        dtype: Any = None,
        device: str | None = None,
        is_const: bool = False,
        no_cache: bool = False,
        name: str | None = None,
        format: str = "default",  # noqa: A002 - MegEngine's keyword
    ):
        # is_const / no_cache tune MegEngine's device-memory caching: host arrays have none
        if format != "default":
            self.format = format
        if isinstance(data, Tensor):
            if format == "default" and data.format != "default":
                self.format = data.format  # a tensor made from a tensor keeps its format tag
            data = data._data
        if data is None:
            data = np.zeros((), np.float32)
        np_dtype = _canonical_dtype(data, dtype)
        try:
            if np_dtype.metadata is not None:
                self._data: np.ndarray = _quantized_array(data, np_dtype)
            else:
                self._data = np.array(data, dtype=np_dtype)
        except (ValueError, TypeError) as exc:
            raise conversion_error(f"cannot convert {type(data).__name__} to {np_dtype}: {exc}") from None
        self.name = "" if name is None else name  # MegEngine: an unnamed tensor's name is ""
        self.grad: Tensor | None = None
        if device is not None:
            self._device = _device_name(device)

    @classmethod
    def _from_array(cls, array: np.ndarray) -> Tensor:
        t = cls.__new__(cls)
        t._data = array
        t.name = ""
        t.grad = None
        return t

    # -- basic properties -------------------------------------------------------------------
    @property
    def shape(self) -> Any:
        """The shape as a tuple; with symbolic shapes on (``jit.tracing.set_symbolic_shape``, the
        default inside ``jit.trace``), an int32 Tensor computed in the graph when read by user
        code, as MegEngine's (xmge's own code reads tuples)."""
        shape = tuple(self._data.shape)
        if shape and _trace_option._use_symbolic_shape:
            from compiler.core import symbolic_shape

            if symbolic_shape.called_from_user_code():
                return symbolic_shape.shape_of(self)
        return shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return int(self._data.size)

    @property
    def device(self) -> CompNode:
        """The device the tensor was made on (MegEngine's CompNode: its ``str`` is the logical name,
        such as ``xpux:0``; it compares equal to that name, with or without ``:0``)."""
        return CompNode(self._device or get_default_device())

    def to(self, device: Any) -> Tensor:
        """A copy of the tensor on ``device`` (all of xmge's devices are the host's memory)."""
        out = Tensor._from_array(np.array(self._data))
        out._device = _device_name(device)
        return out

    @property
    def qparams(self) -> Any:
        """The tensor's quantization parameters (a QParams; a default one until quantization sets it)."""
        if self._qparams is None:
            from compiler.quantization.utils import create_qparams

            self._qparams = create_qparams()
        return self._qparams

    @qparams.setter
    def qparams(self, value: Any) -> None:
        self._qparams = value

    def reset_zero(self) -> None:
        self._data = np.zeros_like(self._data)

    @property
    def requires_grad(self) -> bool:
        raise AttributeError("requires_grad is reserved for future use")

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        raise AttributeError("requires_grad is reserved for future use")

    def numpy(self) -> np.ndarray:
        return np.array(self._data)

    def item(self) -> Any:
        if self.size != 1:
            raise ValueError(
                f"item(): the tensor has {self.size} elements (shape {self.shape}), not exactly one"
            )
        return self._data.item()

    def tolist(self) -> Any:
        return self._data.tolist()

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):  # type: ignore[no-untyped-def]
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        # MegEngine's form: numpy's str of the values, the dtype unless float32, the device
        with np.printoptions(precision=4, suppress=False):
            # str(), not format(): a 0-d array formats as a Python float, 0.1f32 as 0.10000000149...
            text = f"{type(self).__name__}({self._data!s}"
        if self.dtype != np.float32:
            text += f", dtype={np.dtype(self.dtype).name}"
        return text + f", device={self.device})"

    def _one(self) -> Any:
        """The value of a one-element tensor of any shape (MegEngine converts ``tensor([2])`` to
        2, which numpy 2 no longer does for 1-D arrays); several elements are refused by numpy."""
        return self._data.reshape(-1)[0] if self._data.size == 1 else self._data

    def __bool__(self) -> bool:
        return bool(self._one())

    def __float__(self) -> float:
        return float(self._one())

    def __int__(self) -> int:
        return int(self._one())

    def __index__(self) -> int:
        return int(self._one())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._data if dtype is None else self._data.astype(dtype)

    @property
    def _tuple_shape(self) -> tuple[int, ...]:
        """The shape as a tuple (MegEngine's name, which its own code and tests read)."""
        return tuple(self._data.shape)

    # DLPack exchange (MegEngine's Tensor.__dlpack__): xmge tensors live in host memory
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if stream is not None and stream != -1:
            raise ValueError(f"__dlpack__: xmge tensors are on the CPU, which has no stream {stream!r}")
        return np.ascontiguousarray(self._data).__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    # -- in-place data access (eager only, like MegEngine's _reset / set_value) -------------
    def _reset(self, value: Any) -> None:
        arr = value._data if isinstance(value, Tensor) else np.asarray(value)
        self._data = np.array(arr, dtype=self._data.dtype if arr.dtype.kind == "f" else arr.dtype)

    def set_value(self, value: Any) -> None:
        self._reset(value)

    def detach(self) -> Tensor:
        return Tensor._from_array(self._data)

    # -- methods mapping to functional --------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        import compiler.functional as F

        # one tuple, list or 1-D shape Tensor (MegEngine's symbolic-shape idiom) is the whole shape
        if len(shape) == 1 and isinstance(shape[0], Tensor) and shape[0].ndim == 1:
            return F.reshape(self, shape[0])
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return F.reshape(self, shape)

    def transpose(self, *pattern: Any) -> Tensor:
        import compiler.functional as F

        if len(pattern) == 1 and isinstance(pattern[0], tuple | list):
            pattern = tuple(pattern[0])
        if not pattern:
            pattern = tuple(reversed(range(self.ndim)))
        return F.transpose(self, pattern)

    @property
    def T(self) -> Tensor:
        return self.transpose()

    def _broadcast(self, *shape: Any) -> Tensor:
        """MegEngine's ``Tensor._broadcast`` (what ``F.broadcast_to`` calls): one shape, a tuple
        or an int Tensor, or the sizes as arguments."""
        import compiler.functional as F

        target = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list | Tensor) else shape
        return F.broadcast_to(self, target)

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        import compiler.functional as F

        return F.flatten(self, start_axis, end_axis)

    def astype(self, dtype: Any) -> Tensor:
        import compiler.functional as F

        return F.astype(self, dtype)

    def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        import compiler.functional as F

        return F.sum(self, axis, keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        import compiler.functional as F

        return F.mean(self, axis, keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        import compiler.functional as F

        return F.max(self, axis, keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        import compiler.functional as F

        return F.min(self, axis, keepdims)

    def prod(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        import compiler.functional as F

        return F.prod(self, axis, keepdims)

    # -- operators ----------------------------------------------------------------------------
    def _binary(self, other: Any, mode: str, reverse: bool = False) -> Tensor:
        from compiler.functional.elemwise import _elemwise_binary

        if other is None:  # MegEngine's TypeError, with the op's name and the user's line around it
            from compiler.core import user_location

            where = user_location()
            raise TypeError(f"{mode.lower()}: the operand is None and is not supported. (at {where})")
        return _elemwise_binary(mode, other, self) if reverse else _elemwise_binary(mode, self, other)

    def __add__(self, o: Any) -> Tensor:
        return self._binary(o, "ADD")

    def __radd__(self, o: Any) -> Tensor:
        return self._binary(o, "ADD", True)

    def __sub__(self, o: Any) -> Tensor:
        return self._binary(o, "SUB")

    def __rsub__(self, o: Any) -> Tensor:
        return self._binary(o, "SUB", True)

    def __mul__(self, o: Any) -> Tensor:
        return self._binary(o, "MUL")

    def __rmul__(self, o: Any) -> Tensor:
        return self._binary(o, "MUL", True)

    def __truediv__(self, o: Any) -> Tensor:
        return self._binary(o, "TRUE_DIV")

    def __rtruediv__(self, o: Any) -> Tensor:
        return self._binary(o, "TRUE_DIV", True)

    def __floordiv__(self, o: Any) -> Tensor:
        return self._binary(o, "FLOOR_DIV")

    def __rfloordiv__(self, o: Any) -> Tensor:
        return self._binary(o, "FLOOR_DIV", True)

    def __mod__(self, o: Any) -> Tensor:
        return self._binary(o, "MOD")

    def __rmod__(self, o: Any) -> Tensor:
        return self._binary(o, "MOD", True)

    def __pow__(self, o: Any) -> Tensor:
        return self._binary(o, "POW")

    def __rpow__(self, o: Any) -> Tensor:
        return self._binary(o, "POW", True)

    def __lt__(self, o: Any) -> Tensor:
        return self._binary(o, "LT")

    def __le__(self, o: Any) -> Tensor:
        return self._binary(o, "LEQ")

    def __gt__(self, o: Any) -> Tensor:
        return self._binary(o, "LT", True)

    def __ge__(self, o: Any) -> Tensor:
        return self._binary(o, "LEQ", True)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return self._binary(o, "EQ")

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return self._binary(o, "NEQ")

    __hash__ = object.__hash__

    def _logical(self, other: Any, fn: str, reverse: bool = False) -> Tensor:
        import compiler.functional as F

        a, b = (other, self) if reverse else (self, other)
        return getattr(F, fn)(a, b)

    def __and__(self, o: Any) -> Tensor:
        return self._logical(o, "logical_and")

    def __rand__(self, o: Any) -> Tensor:
        return self._logical(o, "logical_and", True)

    def __or__(self, o: Any) -> Tensor:
        return self._logical(o, "logical_or")

    def __ror__(self, o: Any) -> Tensor:
        return self._logical(o, "logical_or", True)

    def __xor__(self, o: Any) -> Tensor:
        return self._logical(o, "logical_xor")

    def __rxor__(self, o: Any) -> Tensor:
        return self._logical(o, "logical_xor", True)

    def __invert__(self) -> Tensor:
        import compiler.functional as F

        return F.logical_not(self)

    def __neg__(self) -> Tensor:
        from compiler.functional.elemwise import _elemwise

        return _elemwise("NEGATE", self, label="neg")

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        import compiler.functional as F

        return F.abs(self)

    def __matmul__(self, o: Any) -> Tensor:
        import compiler.functional as F

        return F.matmul(self, o)

    def __rmatmul__(self, o: Any) -> Tensor:
        import compiler.functional as F

        return F.matmul(o, self)

    def __getitem__(self, index: Any) -> Tensor:
        from compiler.functional.tensor import _getitem

        return _getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        from compiler.jit import is_tracing, rebind_traced

        if is_tracing():
            # traced as MegEngine does: a SetSubtensor / IndexingSetMultiAxisVec whose result
            # this tensor becomes from here on
            from compiler.functional.tensor import _setitem

            out = _setitem(self, index, value)
            rebind_traced(self, out)
            self._data = out._data
            return
        from compiler.autodiff import _Tape
        from compiler.core import active_recorders

        tapes = [r for r in active_recorders() if isinstance(r, _Tape)]
        if index is Ellipsis and not tapes:
            # MegEngine's x[...] = v resets x to v: a tensor's value, dtype, format and device, or
            # another value converted to x's dtype (with its own shape)
            if isinstance(value, Tensor):
                self._data, self.format, self._device = value._data, value.format, value._device
            else:
                self._data = Tensor(value, dtype=self.dtype)._data
            return
        if tapes:
            # a GradManager records: the assignment is a SetSubtensor / IndexingSetMultiAxisVec
            # op whose result this tensor becomes, so the gradient sees it (as MegEngine's does)
            from compiler.functional.tensor import _setitem

            out = _setitem(self, index, value)
            for tape in tapes:
                tape.rebind(self, out)
            self._data = out._data
            return
        data = np.array(self._data)
        data[_numpy_index(index)] = value._data if isinstance(value, Tensor) else value
        self._data = data


def _numpy_index(index: Any) -> Any:
    """An index with its Tensors (bool masks, integer index tensors) as numpy arrays."""
    if isinstance(index, tuple):
        return tuple(_numpy_index(i) for i in index)
    return index._data if isinstance(index, Tensor) else index


class Parameter(Tensor):
    """A trainable tensor owned by a Module."""


# MegEngine's ``tensor`` is the Tensor class itself: ``mge.tensor(x)`` builds one and
# ``isinstance(y, mge.tensor)`` tests for one
tensor = Tensor


def as_tensor(value: Any, like: Tensor | None = None) -> Tensor:
    """A Tensor for ``value``; Python scalars take ``like``'s dtype (MegEngine's scalar promotion)."""
    if isinstance(value, Tensor):
        return value
    if value is None:
        raise conversion_error("expected a Tensor or a number, got None")
    if isinstance(value, str | bytes):
        raise conversion_error(f"expected a Tensor or a number, got {type(value).__name__} {value!r:.40}")
    if like is not None and np.isscalar(value):
        dtype = like.dtype
        if dtype.kind in "iu" and isinstance(value, float):
            dtype = np.dtype(np.float32)
        if dtype.kind == "b":
            dtype = np.dtype(np.float32) if isinstance(value, float) else np.dtype(np.int32)
        return Tensor(np.asarray(value, dtype=dtype))
    return Tensor(value)
