"""MegEngine's ``module.conv_transpose_bn``: ConvTranspose2d + BatchNorm2d (+ ReLU) as one unit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import compiler.functional as F
from compiler.module.layers import BatchNorm2d, ConvTranspose2d
from compiler.module.module import Module
from compiler.tensor import Tensor

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d", "ConvTransposeRelu2d"]


class _ConvTransposeBnActivation2d(Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
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
        self.conv_transpose2d = ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups,
            bias, conv_mode, compute_mode,
        )  # fmt: skip
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    """ConvTranspose2d followed by BatchNorm2d."""

    def forward(self, inp: Tensor) -> Tensor:
        return self.bn(self.conv_transpose2d(inp))


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    """ConvTranspose2d, BatchNorm2d, then ReLU."""

    def forward(self, inp: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv_transpose2d(inp)))


class ConvTransposeRelu2d(ConvTranspose2d):
    """ConvTranspose2d followed by ReLU (what folding a ConvTransposeBnRelu2d in eval mode gives)."""

    def forward(self, inp: Tensor) -> Tensor:
        return F.relu(super().forward(inp))
