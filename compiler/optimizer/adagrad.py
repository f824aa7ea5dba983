"""Adagrad (MegEngine's): per-element learning rates from the running sum of squared gradients."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from compiler.optimizer.optimizer import Optimizer, check_non_negative, f32
from compiler.tensor import Parameter


class Adagrad(Optimizer):
    """``s += g**2``; ``p -= lr / (1 + (t - 1) * lr_decay) * g / sqrt(s + eps)``, with
    ``g = grad + weight_decay * p``."""

    def __init__(
        self,
        params: Iterable[Parameter] | Iterable[dict[str, Any]],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        eps: float = 1e-10,
        weight_decay: float = 0.0,
    ) -> None:
        check_non_negative(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay))

    state_names = ("square_avg",)
    counts_steps = True

    def _updates(self, param_group: dict[str, Any]) -> None:
        lr, decay, eps = f32(param_group["lr"]), f32(param_group["lr_decay"]), f32(param_group["eps"])
        one = np.float32(1.0)
        for param, p, grad, state in self._each_gradient(param_group):
            square_avg = state["square_avg"]._data + grad * grad
            state["square_avg"]._data = square_avg
            delta = grad / np.sqrt(square_avg + eps)
            clr = lr / (one + (state["step"]._data - one) * decay)
            param._data = (p - clr * delta).astype(p.dtype, copy=False)
