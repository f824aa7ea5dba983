"""MegEngine's ``module.conv``: Conv1d, Conv2d, ConvRelu2d, ConvTranspose2d."""

from __future__ import annotations

import math
from typing import Any

import compiler.functional as F
from compiler.core import op_error
from compiler.module.layers import Conv2d, ConvTranspose2d, _uniform
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor


class Conv1d(Module):
    """1-D convolution of (N, C, L); weight (OC, IC, K), grouped (G, OC/G, IC/G, K); bias (1, OC, 1)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
        conv_mode: str = "cross_correlation",
        compute_mode: str = "default",
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        if in_channels % groups or out_channels % groups:
            raise op_error(
                "Conv1d", f"channels ({in_channels}, {out_channels}) must be divisible by groups {groups}"
            )
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.conv_mode, self.compute_mode = conv_mode, compute_mode
        bound = math.sqrt(6.0 / (in_channels // groups * kernel_size))
        self.weight = _uniform((out_channels, in_channels // groups, kernel_size), bound)
        self.bias = Parameter(F.zeros((1, out_channels, 1)).numpy()) if bias else None

    def forward(self, inp: Tensor) -> Tensor:
        return F.nn.conv1d(
            inp, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
            self.conv_mode, self.compute_mode,
        )  # fmt: skip


class ConvRelu2d(Conv2d):
    """Conv2d followed by ReLU (one unit for quantization)."""

    def forward(self, inp: Tensor) -> Tensor:
        return F.relu(super().forward(inp))


__all__ = ["Conv1d", "Conv2d", "ConvRelu2d", "ConvTranspose2d"]
