"""MegEngine's ``module.linear_bn``: Linear + BatchNorm1d (+ ReLU) as one unit."""

from __future__ import annotations

from typing import Any

import compiler.functional as F
from compiler.module.layers import BatchNorm1d, Linear
from compiler.module.module import Module
from compiler.tensor import Tensor

__all__ = ["LinearBn1d", "LinearBnRelu1d", "LinearRelu"]


class _LinearBnActivation1d(Module):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        compute_mode: str = "default",
        eps: float = 1e-5,
        momentum: float = 0.9,
        affine: bool = True,
        track_running_stats: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.in_features, self.out_features = in_features, out_features
        self.compute_mode = compute_mode
        self.linear = Linear(in_features, out_features, bias)
        self.bn = BatchNorm1d(out_features, eps, momentum, affine, track_running_stats)


class LinearBn1d(_LinearBnActivation1d):
    """Linear followed by BatchNorm1d."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.bn(self.linear(inp))


class LinearBnRelu1d(_LinearBnActivation1d):
    """Linear, BatchNorm1d, then ReLU."""

    def forward(self, inp: Tensor) -> Tensor:
        return F.relu(self.bn(self.linear(inp)))


class LinearRelu(Linear):
    """Linear followed by ReLU (what folding a LinearBnRelu1d in eval mode gives)."""

    def forward(self, inp: Tensor) -> Tensor:
        return F.relu(super().forward(inp))
