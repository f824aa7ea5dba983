"""LAMB (MegEngine's ``LAMBUpdate``): Adam's direction plus weight decay, scaled per parameter by the
trust ratio ``||p|| / ||update||``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from compiler.optimizer.optimizer import Optimizer, check_non_negative, f32
from compiler.tensor import Parameter


class LAMB(Optimizer):
    """``m, v`` as Adam's; ``r = m_hat / (sqrt(v_hat) + eps) + weight_decay * p`` (bias-corrected
    with ``bias_correction``); ``p -= lr * ratio * r`` where ``ratio = ||p|| / ||r||`` when weight
    decay is on (or ``always_adapt``) and both norms are positive, else 1."""

    def __init__(
        self,
        params: Iterable[Parameter] | Iterable[dict[str, Any]],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        bias_correction: bool = True,
        weight_decay: float = 0.0,
        always_adapt: bool = False,
    ) -> None:
        check_non_negative(lr=lr, weight_decay=weight_decay)
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))
        self.bias_correction = bias_correction
        self.always_adapt = always_adapt

    state_names = ("exp_avg", "exp_avg_sq")
    counts_steps = True

    def _updates(self, param_group: dict[str, Any]) -> None:
        lr, wd, eps = f32(param_group["lr"]), f32(param_group["weight_decay"]), f32(param_group["eps"])
        beta0, beta1 = (f32(b) for b in param_group["betas"])
        one = np.float32(1.0)
        for param, data, grad, state in self._each_gradient(param_group, l2=False):
            p = data.astype(np.float32, copy=False)
            step = state["step"]._data
            # LAMBUpdate's order of float32 operations, not Adam's: (1 - beta1) * grad * grad
            m = beta0 * state["exp_avg"]._data + (one - beta0) * grad
            v = beta1 * state["exp_avg_sq"]._data + (one - beta1) * grad * grad
            state["exp_avg"]._data, state["exp_avg_sq"]._data = m, v
            bc1 = one - np.power(beta0, step, dtype=np.float32) if self.bias_correction else one
            bc2 = one - np.power(beta1, step, dtype=np.float32) if self.bias_correction else one
            r = (m / bc1) / (np.sqrt(v / bc2) + eps)
            if wd != 0:
                r = r + p * wd
            p_norm = np.float32(np.sqrt(np.sum(p * p, dtype=np.float32)))
            r_norm = np.float32(np.sqrt(np.sum(r * r, dtype=np.float32)))
            ratio = one
            if (self.always_adapt or wd > 0) and p_norm > 0 and r_norm > 0:
                ratio = p_norm / r_norm
            param._data = (p - lr * ratio * r).astype(data.dtype, copy=False)
