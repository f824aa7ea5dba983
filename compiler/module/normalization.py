"""MegEngine's ``module.normalization``: GroupNorm, InstanceNorm and LayerNorm."""

from __future__ import annotations

from typing import Any

import numpy as np

import compiler.functional as F
from compiler.core import op_error
from compiler.module.layers import LayerNorm
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor


class GroupNorm(Module):
    """Normalises each sample over groups of ``num_channels / num_groups`` channels (and all
    spatial positions); per-channel ``weight`` (ones) and ``bias`` (zeros) of shape (C,)."""

    def __init__(
        self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(kwargs.get("name"))
        if num_groups < 1 or num_channels % num_groups:
            raise op_error("GroupNorm", f"{num_channels} channels cannot be split into {num_groups} groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = Parameter(np.ones(num_channels, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(num_channels, np.float32)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise op_error(
                "GroupNorm", f"expected {self.num_channels} channels on axis 1, got shape {x.shape}"
            )
        return F.nn.group_norm(x, self.num_groups, self.affine, self.weight, self.bias, self.eps)

    def _extra_repr(self) -> str:
        return f"groups={self.num_groups}, channels={self.num_channels}, eps={self.eps}, affine={self.affine}"


class InstanceNorm(GroupNorm):
    """GroupNorm with one group per channel."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True, **kwargs: Any) -> None:
        super().__init__(num_channels, num_channels, eps, affine, **kwargs)

    def _extra_repr(self) -> str:
        return f"channels={self.num_channels}, eps={self.eps}, affine={self.affine}"


__all__ = ["GroupNorm", "InstanceNorm", "LayerNorm"]
