"""Stochastic gradient descent with momentum, Nesterov momentum and weight decay (MegEngine's SGD)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compiler.optimizer.optimizer import Optimizer, check_non_negative, f32
from compiler.tensor import Parameter


class SGD(Optimizer):
    """``g = grad + weight_decay * p``; ``v = momentum * v + g``; ``p -= lr * v``
    (Nesterov: ``p -= lr * (g + momentum * v)``)."""

    def __init__(
        self,
        params: Iterable[Parameter] | Iterable[dict[str, Any]],
        lr: float,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        check_non_negative(lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and momentum <= 0:
            raise ValueError("nesterov momentum requires a momentum")
        # nesterov is an attribute, not a group entry, as in MegEngine (its checkpoints lack it)
        self.nesterov = nesterov
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    def _create_state(self, param_group: dict[str, Any]) -> None:
        if param_group["momentum"] != 0.0:
            for param in param_group["params"]:
                self._add_state(param, "momentum_buffer")

    def _updates(self, param_group: dict[str, Any]) -> None:
        lr, mom = f32(param_group["lr"]), f32(param_group["momentum"])
        for param, p, grad, state in self._each_gradient(param_group):
            if mom != 0:
                buf = state["momentum_buffer"]
                v = buf._data * mom + grad
                buf._data = v
                grad = grad + v * mom if self.nesterov else v
            param._data = (p - lr * grad).astype(p.dtype, copy=False)
