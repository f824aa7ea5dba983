"""MegEngine's ``module.conv_bn``: Conv2d + BatchNorm2d (+ ReLU) as one unit, so quantization
can fold the batch norm into the convolution."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import compiler.functional as F
from compiler.module.layers import BatchNorm2d, Conv2d
from compiler.module.module import Module
from compiler.tensor import Tensor


class _ConvBnActivation2d(Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        conv_mode: str = "cross_correlation",
        compute_mode: str = "default",
        eps: float = 1e-5,
        momentum: float = 0.9,
        affine: bool = True,
        track_running_stats: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.conv = Conv2d(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, conv_mode,
            compute_mode,
        )  # fmt: skip
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvBn2d(_ConvBnActivation2d):
    def forward(self, inp: Tensor) -> Tensor:
        return self.bn(self.conv(inp))


class ConvBnRelu2d(_ConvBnActivation2d):
    def forward(self, inp: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(inp)))


__all__ = ["ConvBn2d", "ConvBnRelu2d"]
