"""MegEngine's ``module.lrn``: local response normalisation across channels."""

from __future__ import annotations

from typing import Any

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor


class LocalResponseNorm(Module):
    """``F.nn.local_response_norm`` with its hyper-parameters held by the module."""

    def __init__(
        self, kernel_size: int = 5, k: float = 2.0, alpha: float = 1e-4, beta: float = 0.75, **kwargs: Any
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.kernel_size, self.k, self.alpha, self.beta = kernel_size, k, alpha, beta

    def forward(self, inp: Tensor) -> Tensor:
        return F.nn.local_response_norm(inp, self.kernel_size, self.k, self.alpha, self.beta)


__all__ = ["LocalResponseNorm"]
