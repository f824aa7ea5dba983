"""MegEngine's ``megengine.core.autodiff.grad``: ``Grad``, the recorder under ``GradManager``.

``with Grad() as grad:`` records; ``grad.wrt(x, callback=f)`` asks for the gradient of ``x`` (an
input or an intermediate tensor), and ``grad(ys, dys)`` backpropagates and calls ``f(dx)`` for each
``x`` the outputs depend on. Unlike ``GradManager`` it never writes ``x.grad`` itself. Nested
``Grad``s see each other's backward (the outer one records it), so second-order gradients work as
with nested ``GradManager``s. Not thread-safe, as the recorder stack it uses is process-wide.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from compiler.autodiff import Function, GradManager
from compiler.tensor import Tensor

__all__ = ["Function", "Grad", "get_grad_managers"]

_names = itertools.count()
_grad_managers: weakref.WeakValueDictionary[str, Grad] = weakref.WeakValueDictionary()


def get_grad_managers() -> list[Grad]:
    """The ``Grad`` objects alive now."""
    return list(_grad_managers.values())


class _GradKey(GradManager):
    """A GradManager whose attached tensors get their gradient through a callback only."""

    def _deliver(self, i: int, t: Tensor, gt: Tensor, *, recorded: bool) -> None:
        for cb in self._callbacks.get(i, []):
            cb(t, gt)


class Grad:
    """Records the ops applied while entered; ``wrt`` picks the tensors to differentiate for."""

    def __init__(self, name: str | None = None) -> None:
        self.name = f"grad_{next(_names)}" if name is None else name
        self._impl = _GradKey()
        _grad_managers[self.name] = self

    def wrt(self, *tensors: Tensor, callback: Callable[[Tensor], Any] | None = None) -> Grad:
        """Compute the gradient of each of ``tensors``; ``callback(grad)`` receives it."""
        for x in tensors:
            self._impl.attach(x, None if callback is None else _drop_tensor(callback))
        return self

    def __call__(self, ys: Tensor | Sequence[Tensor], dys: Tensor | Sequence[Tensor]) -> None:
        ys = list(ys) if isinstance(ys, Sequence) else [ys]
        dys = list(dys) if isinstance(dys, Sequence) else [dys]
        if not ys:
            self._impl.release()
            return
        self._impl.backward(ys, dys)

    def __enter__(self) -> Grad:
        self._impl.record()
        return self

    def __exit__(self, *exc: object) -> None:
        self._impl.release()


def _drop_tensor(callback: Callable[[Tensor], Any]) -> Callable[[Tensor, Tensor], Tensor]:
    # GradManager's callbacks take (tensor, grad); Grad's take the gradient alone
    def cb(_: Tensor, grad: Tensor) -> Tensor:
        callback(grad)
        return grad

    return cb
