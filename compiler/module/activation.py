"""MegEngine's ``module.activation``."""

from __future__ import annotations

from typing import Any

import numpy as np

import compiler.functional as F
from compiler.module.layers import (
    GELU,
    Hsigmoid,
    Hswish,
    LeakyReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor


class PReLU(Module):
    """``max(x, 0) + weight * min(x, 0)`` with one learnable slope, or one per channel (axis 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, **kwargs: Any) -> None:
        super().__init__(kwargs.get("name"))
        self.num_parameters = num_parameters
        shape = (1,) if num_parameters == 1 else (1, num_parameters, 1, 1)
        self.weight = Parameter(np.full(shape, init, np.float32))

    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight
        if self.num_parameters > 1 and x.ndim != 4:
            weight = F.reshape(weight, (1, self.num_parameters) + (1,) * (x.ndim - 2))
        return F.relu(x) + weight * F.minimum(x, 0.0)


__all__ = [
    "GELU",
    "Hsigmoid",
    "Hswish",
    "LeakyReLU",
    "PReLU",
    "ReLU",
    "ReLU6",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
]
