"""AdamW (MegEngine's): Adam with weight decay decoupled from the gradient."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compiler.optimizer.adam import adam_delta, check_adam_args
from compiler.optimizer.optimizer import Optimizer, f32, grad_of
from compiler.tensor import Parameter


class AdamW(Optimizer):
    def __init__(
        self,
        params: Iterable[Parameter] | Iterable[dict[str, Any]],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))

    def _create_state(self, param_group: dict[str, Any]) -> None:
        for param in param_group["params"]:
            self._add_state(param, "exp_avg")
            self._add_state(param, "exp_avg_sq")
            self._add_state(param, "step", initializer=0.0)

    def _updates(self, param_group: dict[str, Any]) -> None:
        lr, wd, eps = f32(param_group["lr"]), f32(param_group["weight_decay"]), f32(param_group["eps"])
        beta0, beta1 = (f32(b) for b in param_group["betas"])
        for param in param_group["params"]:
            grad = grad_of(param)
            if grad is None:
                continue
            p = param._data
            delta = adam_delta(self._state[param], grad, beta0, beta1, eps)
            param._data = (p - lr * (delta + wd * p)).astype(p.dtype, copy=False)
