"""MegEngine 1.13's complex numbers: ``complex``, ``real``, ``imag`` and ``polar``.

MegEngine has no complex dtype in its graphs: its imperative runtime keeps a complex64 tensor as a
pair of float32 tensors (real, imaginary) and supports only the arithmetic that maps onto float
ops on that pair (``+``, ``-``, ``*``, negation, reshape, indexing), so traced graphs and dumps hold
float ops only and gradients flow through both parts. :class:`ComplexTensor` is that pair; every
other operation on it is refused with a one-line error, as MegEngine refuses it."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.core import op_error
from compiler.tensor import Tensor, as_tensor

__all__ = ["ComplexTensor", "complex", "imag", "polar", "real"]

_SUPPORTED = "complex tensors support only +, -, *, negation, reshape and indexing (as in MegEngine 1.13)"


class ComplexTensor(Tensor):
    """A complex64 tensor held as its float32 real and imaginary parts (``real``/``imag`` of the
    functional API give them back, gradients included)."""

    def __init__(self, real: Tensor, imag: Tensor) -> None:  # noqa: A002 - MegEngine's names
        self._re, self._im = real, imag
        self.name = None
        self.grad = None

    @property  # type: ignore[override]
    def _data(self) -> np.ndarray:
        return (self._re._data.astype(np.complex64) + 1j * self._im._data).astype(np.complex64)

    @_data.setter
    def _data(self, value: Any) -> None:
        raise op_error("complex", "a complex tensor's values cannot be set in place; build a new one")

    def __repr__(self) -> str:
        with np.printoptions(precision=4, suppress=False):
            return f"Tensor({self._data!s}, dtype=complex64, device={self.device})"

    def _pair(self, other: Any) -> tuple[Any, Any]:
        if isinstance(other, ComplexTensor):
            return other._re, other._im
        if isinstance(other, (complex, np.complexfloating)):
            return float(other.real), float(other.imag)
        if isinstance(other, (int, float, np.number, Tensor)):
            return other, 0.0
        raise op_error("complex", f"cannot combine a complex tensor with {type(other).__name__}")

    def __add__(self, o: Any) -> ComplexTensor:
        re, im = self._pair(o)
        return ComplexTensor(self._re + re, self._im + im)

    __radd__ = __add__

    def __sub__(self, o: Any) -> ComplexTensor:
        re, im = self._pair(o)
        return ComplexTensor(self._re - re, self._im - im)

    def __rsub__(self, o: Any) -> ComplexTensor:
        re, im = self._pair(o)
        return ComplexTensor(re - self._re, im - self._im)

    def __mul__(self, o: Any) -> ComplexTensor:
        re, im = self._pair(o)
        if isinstance(im, float) and im == 0.0:
            return ComplexTensor(self._re * re, self._im * re)
        return ComplexTensor(self._re * re - self._im * im, self._re * im + self._im * re)

    __rmul__ = __mul__

    def __neg__(self) -> ComplexTensor:
        return ComplexTensor(-self._re, -self._im)

    def __pos__(self) -> ComplexTensor:
        return self

    def reshape(self, *shape: Any) -> ComplexTensor:
        return ComplexTensor(self._re.reshape(*shape), self._im.reshape(*shape))

    def __getitem__(self, index: Any) -> ComplexTensor:
        return ComplexTensor(self._re[index], self._im[index])

    def detach(self) -> ComplexTensor:
        return ComplexTensor(self._re.detach(), self._im.detach())


def _refuse(name: str) -> Any:
    def refused(self: ComplexTensor, *args: Any, **kwargs: Any) -> Any:
        raise op_error(name.strip("_"), _SUPPORTED)

    refused.__name__ = name
    return refused


for _name in (
    "__truediv__ __rtruediv__ __floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __lt__ __le__ "
    "__gt__ __ge__ __and__ __rand__ __or__ __ror__ __xor__ __rxor__ __invert__ __abs__ __matmul__ "
    "__rmatmul__ __setitem__ astype sum mean max min prod transpose flatten broadcast_to set_value _reset"
).split():
    setattr(ComplexTensor, _name, _refuse(_name))


def _float32(label: str, what: str, x: Any) -> Tensor:
    t = x if isinstance(x, Tensor) else Tensor(x)
    if isinstance(t, ComplexTensor) or t.dtype != np.float32:
        raise op_error(label, f"{what} must be a float32 tensor, got {t.dtype}")
    return t


def complex(real: Tensor, imag: Tensor) -> ComplexTensor:  # noqa: A001 - MegEngine's name
    """The complex64 tensor ``real + 1j * imag`` of two float32 tensors of one shape."""
    re, im = _float32("complex", "real", real), _float32("complex", "imag", imag)
    if re.shape != im.shape:
        raise op_error("complex", f"real and imag need one shape, got {re.shape} and {im.shape}")
    return ComplexTensor(re, im)


def real(complex: ComplexTensor) -> Tensor:  # noqa: A002 - MegEngine's parameter name
    """The real part (float32) of a complex tensor."""
    if not isinstance(complex, ComplexTensor):
        raise op_error("real", f"needs a complex tensor, got {as_tensor(complex).dtype}")
    return complex._re


def imag(complex: ComplexTensor) -> Tensor:  # noqa: A002 - MegEngine's parameter name
    """The imaginary part (float32) of a complex tensor."""
    if not isinstance(complex, ComplexTensor):
        raise op_error("imag", f"needs a complex tensor, got {as_tensor(complex).dtype}")
    return complex._im


def polar(abs: Tensor, angle: Tensor) -> ComplexTensor:  # noqa: A002 - MegEngine's parameter name
    """The complex tensor ``abs * (cos(angle) + 1j * sin(angle))``."""
    from compiler.functional.elemwise import cos, sin

    r, theta = _float32("polar", "abs", abs), _float32("polar", "angle", angle)
    return complex(r * cos(theta), r * sin(theta))
