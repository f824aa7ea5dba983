"""MegEngine's ``module.batch_matmul_activation``."""

from __future__ import annotations

from typing import Any

import numpy as np

import compiler.functional as F
from compiler.core import op_error
from compiler.module.init import normal_, zeros_
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor


class BatchMatMulActivation(Module):
    """``weight @ x (+ bias)`` per batch with weight (batch, out, in), then the activation
    ``nonlinear_mode`` ("identity" or "relu"). The bias of ``out_features`` elements is added
    along the last axis, as MegEngine adds it."""

    def __init__(
        self,
        batch: int,
        in_features: int,
        out_features: int,
        bias: bool = True,
        nonlinear_mode: str = "identity",
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        mode = nonlinear_mode.lower()
        if mode not in ("identity", "relu"):
            raise op_error(
                "BatchMatMulActivation",
                f"nonlinear_mode must be 'identity' or 'relu', got {nonlinear_mode!r}",
            )
        self.batch, self.in_features, self.out_features = batch, in_features, out_features
        self.nonlinear_mode = mode
        self.weight = Parameter(np.zeros((batch, out_features, in_features), np.float32))
        self.bias = Parameter(np.zeros((out_features,), np.float32)) if bias else None
        self.reset_parameters()

    def _get_fanin(self) -> int:
        return self.in_features

    def reset_parameters(self) -> None:
        normal_(self.weight, 0.0, float(np.sqrt(1 / self._get_fanin())))
        if self.bias is not None:
            zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        res = F.matmul(self.weight, x)
        if self.bias is not None:
            res = res + self.bias
        return F.relu(res) if self.nonlinear_mode == "relu" else res

    def _module_info_string(self) -> str:
        return (
            f"batch={self.batch}, in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


__all__ = ["BatchMatMulActivation"]
