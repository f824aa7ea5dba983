"""MegEngine's ``module.lrn``: ``F.nn.local_response_norm`` as a module."""

from __future__ import annotations

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor

__all__ = ["LocalResponseNorm"]


class LocalResponseNorm(Module):
    """Local response normalisation across ``kernel_size`` neighbouring channels (see
    ``F.nn.local_response_norm``)."""

    def __init__(
        self,
        kernel_size: int = 5,
        k: float = 2.0,
        alpha: float = 1e-4,
        beta: float = 0.75,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.kernel_size, self.k, self.alpha, self.beta = kernel_size, k, alpha, beta

    def forward(self, inp: Tensor) -> Tensor:
        return F.nn.local_response_norm(inp, self.kernel_size, self.k, self.alpha, self.beta)
