"""Adadelta (MegEngine's): step sizes from running averages of squared gradients and updates."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from compiler.optimizer.optimizer import Optimizer, check_non_negative, f32
from compiler.tensor import Parameter


class Adadelta(Optimizer):
    """``s = rho s + (1 - rho) g**2``; ``d = sqrt(a + eps) / sqrt(s + eps) * g``; ``p -= lr d``;
    ``a = rho a + (1 - rho) d**2``, with ``g = grad + weight_decay * p``."""

    def __init__(
        self,
        params: Iterable[Parameter] | Iterable[dict[str, Any]],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        check_non_negative(lr=lr, eps=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    state_names = ("square_avg", "acc_delta")
    counts_steps = True

    def _updates(self, param_group: dict[str, Any]) -> None:
        lr, rho, eps = f32(param_group["lr"]), f32(param_group["rho"]), f32(param_group["eps"])
        one = np.float32(1.0)
        for param, p, grad, state in self._each_gradient(param_group):
            square_avg = rho * state["square_avg"]._data + (one - rho) * grad * grad
            delta = np.sqrt(state["acc_delta"]._data + eps) / np.sqrt(square_avg + eps) * grad
            param._data = (p - lr * delta).astype(p.dtype, copy=False)
            state["square_avg"]._data = square_avg
            state["acc_delta"]._data = rho * state["acc_delta"]._data + (one - rho) * delta * delta
