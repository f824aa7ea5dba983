"""Gradient clipping (MegEngine's ``clip_grad_norm`` / ``clip_grad_value``), in place on ``.grad``."""

from __future__ import annotations

from collections.abc import Iterable

import compiler.functional as F
from compiler.tensor import Tensor

__all__ = ["clip_grad_norm", "clip_grad_value"]


def clip_grad_norm(tensors: Tensor | Iterable[Tensor], max_norm: float, ord: float = 2.0) -> Tensor:  # noqa: A002
    """Scale the gradients so that their joint ``ord``-norm is at most ``max_norm``; returns the
    norm they had."""
    items = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    items = [t for t in items if t.grad is not None]
    if not items:
        return Tensor(0.0)
    norms = [F.norm(F.flatten(t.grad), ord=ord) for t in items]
    total = F.norm(F.concat([F.reshape(n, (1,)) for n in norms]), ord=ord) if len(norms) > 1 else norms[0]
    scale = F.minimum(max_norm / (total + 1e-6), 1.0)
    for t in items:
        t.grad = t.grad * scale
    return total


def clip_grad_value(tensors: Tensor | Iterable[Tensor], lower: float, upper: float) -> None:
    """Clip every gradient into ``[lower, upper]``."""
    items = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    for t in items:
        if t.grad is not None:
            t.grad = F.clip(t.grad, lower, upper)
