"""Adam (MegEngine's): L2 weight decay added to the gradient, bias-corrected moments."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from compiler.optimizer.optimizer import Optimizer, check_non_negative, f32
from compiler.tensor import Parameter


def check_adam_args(lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    check_non_negative(lr=lr, eps=eps, weight_decay=weight_decay)
    if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
        raise ValueError(f"invalid betas: {betas}")


def adam_delta(
    state: dict[str, Any], grad: np.ndarray, beta0: np.float32, beta1: np.float32, eps: np.float32
) -> np.ndarray:
    """Advance Adam's moments by ``grad`` and return the step direction, in MegEngine's order of
    float32 operations (``state["step"]`` already counts this step)."""
    one = np.float32(1.0)
    step = state["step"]._data
    exp_avg = state["exp_avg"]._data * beta0 + grad * (one - beta0)
    exp_avg_sq = state["exp_avg_sq"]._data * beta1 + (one - beta1) * (grad * grad)
    state["exp_avg"]._data, state["exp_avg_sq"]._data = exp_avg, exp_avg_sq
    bias1 = one - np.power(beta0, step, dtype=np.float32)
    bias2 = one - np.power(beta1, step, dtype=np.float32)
    return (exp_avg / bias1) / (np.sqrt(exp_avg_sq / bias2) + eps)


class Adam(Optimizer):
    # AdamW applies weight decay to the update instead of the gradient; nothing else differs.
    decoupled_weight_decay = False

    def __init__(
        self,
        params: Iterable[Parameter] | Iterable[dict[str, Any]],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))

    state_names = ("exp_avg", "exp_avg_sq")
    counts_steps = True

    def _updates(self, param_group: dict[str, Any]) -> None:
        lr, wd, eps = f32(param_group["lr"]), f32(param_group["weight_decay"]), f32(param_group["eps"])
        beta0, beta1 = (f32(b) for b in param_group["betas"])
        for param, p, grad, state in self._each_gradient(param_group, l2=not self.decoupled_weight_decay):
            delta = adam_delta(state, grad, beta0, beta1, eps)
            if self.decoupled_weight_decay:
                delta = delta + wd * p
            param._data = (p - lr * delta).astype(p.dtype, copy=False)
