"""MegEngine's ``LocalConv2d`` (in ``megengine.module.conv``): a locally connected layer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import compiler.functional as F
from compiler.core import op_error
from compiler.module.layers import _pair
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor


class LocalConv2d(Module):
    """A convolution with its own kernel at each output position of an ``input_height`` x
    ``input_width`` input; weight (groups, OH, OW, IC/groups, kh, kw, OC/groups), no bias."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        input_height: int,
        input_width: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        conv_mode: str = "cross_correlation",
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        if in_channels % groups or out_channels % groups:
            raise op_error(
                "LocalConv2d",
                f"channels ({in_channels}, {out_channels}) must be divisible by groups {groups}",
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.input_height, self.input_width = input_height, input_width
        self.kernel_size, self.stride = _pair(kernel_size), _pair(stride)
        self.padding, self.dilation = _pair(padding), _pair(dilation)
        self.conv_mode = conv_mode
        self.bias = None
        shape = self._infer_weight_shape()
        fanin = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
        bound = math.sqrt(6.0 / fanin)  # MSRA-uniform like the dense convolutions
        from compiler.random import generator

        self.weight = Parameter(generator().uniform(-bound, bound, shape).astype(np.float32))

    def _infer_weight_shape(self) -> tuple[int, ...]:
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_size, self.stride, self.padding, self.dilation
        oh = (self.input_height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (self.input_width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        g = self.groups
        return (g, oh, ow, self.in_channels // g, kh, kw, self.out_channels // g)

    def forward(self, inp: Tensor) -> Tensor:
        return F.nn.local_conv2d(
            inp, self.weight, None, self.stride, self.padding, self.dilation, self.conv_mode
        )


__all__ = ["LocalConv2d"]
