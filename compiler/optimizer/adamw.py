"""AdamW (MegEngine's): Adam with weight decay decoupled from the gradient."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compiler.optimizer.adam import Adam
from compiler.tensor import Parameter


class AdamW(Adam):
    decoupled_weight_decay = True

    def __init__(
        self,
        params: Iterable[Parameter] | Iterable[dict[str, Any]],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)
