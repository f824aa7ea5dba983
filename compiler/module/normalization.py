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


class GeneralNorm(Module):
    """Normalises over the axes ``normalized_axis`` (ascending), whose sizes are
    ``normalized_shape``; ``weight`` (ones) and ``bias`` (zeros) have that shape when ``affine``."""

    def __init__(
        self,
        normalized_shape: Any = None,
        normalized_axis: Any = 0,
        eps: float = 1e-5,
        affine: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        axes = list(normalized_axis) if isinstance(normalized_axis, (list, tuple)) else [normalized_axis]
        shape = None
        if normalized_shape is not None:
            shape = (
                list(normalized_shape) if isinstance(normalized_shape, (list, tuple)) else [normalized_shape]
            )
        if affine:
            if shape is None:
                raise op_error("GeneralNorm", "normalized_shape must be given when affine is True")
            if len(shape) != len(axes):
                raise op_error(
                    "GeneralNorm", f"normalized_axis {axes} and normalized_shape {shape} differ in length"
                )
            if len(set(axes)) != len(axes):
                raise op_error("GeneralNorm", f"normalized_axis {axes} repeats an axis")
        self.eps, self.affine = eps, affine
        self.normalized_shape, self.normalized_axis = shape, axes
        self.weight = Parameter(np.ones(shape, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(shape, np.float32)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        axes = [a + x.ndim if a < 0 else a for a in self.normalized_axis]
        if self.normalized_shape is not None:
            got = [x.shape[a] if 0 <= a < x.ndim else None for a in axes]
            if got != list(self.normalized_shape):
                raise op_error(
                    "GeneralNorm",
                    f"input shape {x.shape} at axes {axes} is {got}, expected {self.normalized_shape}",
                )
        return F.nn.general_norm(x, axes, self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self) -> str:
        return (
            f"normalized_shape={self.normalized_shape}, normalized_axis={self.normalized_axis}, "
            f"eps={self.eps}, affine={self.affine}"
        )


__all__ = ["GeneralNorm", "GroupNorm", "InstanceNorm", "LayerNorm"]
