"""MegEngine's ``module.conv``: Conv1d, Conv2d, Conv3d, ConvRelu2d, ConvTranspose2d, ConvTranspose3d."""

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


class Conv3d(Module):
    """3-D convolution of NCDHW input (MegEngine's Conv3d): weight (OC, IC, KD, KH, KW), grouped
    (G, OC/G, IC/G, KD, KH, KW), drawn from N(0, 1/fan_in) with MegEngine's fan_in (KD*KH*KW*IC);
    bias (1, OC, 1, 1, 1), zeros."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int, int],
        stride: int | tuple[int, int, int] = 1,
        padding: int | tuple[int, int, int] = 0,
        dilation: int | tuple[int, int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        conv_mode: str = "cross_correlation",
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise op_error(
                "Conv3d", f"channels ({in_channels}, {out_channels}) must be divisible by groups {groups}"
            )
        from compiler.functional.nn import _triple
        from compiler.random import generator

        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _triple("Conv3d", kernel_size, "kernel_size")
        self.stride = _triple("Conv3d", stride, "stride")
        self.padding = _triple("Conv3d", padding, "padding")
        self.dilation = _triple("Conv3d", dilation, "dilation")
        self.conv_mode = conv_mode
        kd, kh, kw = self.kernel_size
        shape: tuple[int, ...] = (out_channels, in_channels, kd, kh, kw)
        if groups > 1:
            shape = (groups, out_channels // groups, in_channels // groups, kd, kh, kw)
        std = math.sqrt(1.0 / (kd * kh * kw * in_channels))
        self.weight = Parameter(generator().normal(0.0, std, size=shape).astype("float32"))
        self.bias = Parameter(F.zeros((1, out_channels, 1, 1, 1)).numpy()) if bias else None

    def calc_conv(self, inp: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return F.conv3d(
            inp, weight, bias, self.stride, self.padding, self.dilation, self.groups, self.conv_mode
        )

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv(inp, self.weight, self.bias)


class DeformableConv2d(Module):
    """Deformable convolution (MegEngine's DeformableConv2d): ``forward(inp, offset, mask)`` is
    ``F.deformable_conv2d`` with the module's weight (OC, IC, KH, KW), grouped (G, OC/G, IC/G, KH,
    KW), drawn from N(0, 1/fan_in) with MegEngine's fan_in (KH*KW*IC), and bias (1, OC, 1, 1),
    zeros."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        conv_mode: str = "cross_correlation",
        compute_mode: str = "default",
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        label = "DeformableConv2d"
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise op_error(
                label, f"channels ({in_channels}, {out_channels}) must be divisible by groups {groups}"
            )
        from compiler.functional.nn import _pair
        from compiler.random import generator

        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(label, kernel_size, "kernel_size")
        self.stride = _pair(label, stride, "stride")
        self.padding = _pair(label, padding, "padding")
        self.dilation = _pair(label, dilation, "dilation")
        self.conv_mode, self.compute_mode = conv_mode, compute_mode
        kh, kw = self.kernel_size
        shape: tuple[int, ...] = (out_channels, in_channels, kh, kw)
        if groups > 1:
            shape = (groups, out_channels // groups, in_channels // groups, kh, kw)
        std = math.sqrt(1.0 / (kh * kw * in_channels))
        self.weight = Parameter(generator().normal(0.0, std, size=shape).astype("float32"))
        self.bias = Parameter(F.zeros((1, out_channels, 1, 1)).numpy()) if bias else None

    def calc_conv(
        self, inp: Tensor, weight: Tensor, offset: Tensor, mask: Tensor, bias: Tensor | None
    ) -> Tensor:
        return F.deformable_conv2d(inp, weight, offset, mask, bias, self.stride, self.padding, self.dilation,
                                   self.groups, self.conv_mode, self.compute_mode)  # fmt: skip

    def forward(self, inp: Tensor, offset: Tensor, mask: Tensor) -> Tensor:
        return self.calc_conv(inp, self.weight, offset, mask, self.bias)


class RegionRestrictedConv(Module):
    """Region-restricted convolution (MegEngine's RegionRestrictedConv): ``forward(inp, rin, rout)``
    is ``F.nn.region_restricted_conv`` with the module's grouped weight (G, OC/G, IC/G, KH, KW),
    drawn from N(0, 1/fan_in) with MegEngine's fan_in (KH*KW*IC), and bias (1, OC, 1, 1), zeros.
    ``padding_mode`` is kept (as MegEngine does) but only zero padding is computed."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        groups: int = 1,
        bias: bool = True,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        conv_mode: str = "cross_correlation",
        compute_mode: str = "default",
        padding_mode: str = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        label = "RegionRestrictedConv"
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise op_error(
                label, f"channels ({in_channels}, {out_channels}) must be divisible by groups {groups}"
            )
        if padding_mode not in ("zeros", "reflect", "replicate"):
            raise op_error(label, f"padding_mode must be zeros, reflect or replicate, got {padding_mode!r}")
        from compiler.functional.nn import _pair
        from compiler.random import generator

        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(label, kernel_size, "kernel_size")
        self.stride = _pair(label, stride, "stride")
        self.padding = _pair(label, padding, "padding")
        self.dilation = _pair(label, dilation, "dilation")
        self.conv_mode, self.compute_mode, self.padding_mode = conv_mode, compute_mode, padding_mode
        kh, kw = self.kernel_size
        shape = (groups, out_channels // groups, in_channels // groups, kh, kw)
        std = math.sqrt(1.0 / (kh * kw * in_channels))
        self.weight = Parameter(generator().normal(0.0, std, size=shape).astype("float32"))
        self.bias = Parameter(F.zeros((1, out_channels, 1, 1)).numpy()) if bias else None

    def calc_conv(
        self, inp: Tensor, weight: Tensor, rin: Tensor, rout: Tensor, bias: Tensor | None
    ) -> Tensor:
        return F.nn.region_restricted_conv(inp, weight, rin, rout, bias, self.stride, self.padding,
                                           self.dilation, self.groups, self.conv_mode,
                                           self.compute_mode)  # fmt: skip

    def forward(self, inp: Tensor, rin: Tensor, rout: Tensor) -> Tensor:
        return self.calc_conv(inp, self.weight, rin, rout, self.bias)


class ConvTranspose3d(Module):
    """3-D transposed convolution of NCDHW input (MegEngine's ConvTranspose3d): weight
    (IC, OC, KD, KH, KW), grouped (G, IC/G, OC/G, KD, KH, KW), drawn from N(0, 1/fan_in) with
    MegEngine's fan_in (KD*KH*KW*IC); bias (1, OC, 1, 1, 1), zeros."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int, int],
        stride: int | tuple[int, int, int] = 1,
        padding: int | tuple[int, int, int] = 0,
        output_padding: int | tuple[int, int, int] = 0,
        dilation: int | tuple[int, int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise op_error(
                "ConvTranspose3d",
                f"channels ({in_channels}, {out_channels}) must be divisible by groups {groups}",
            )
        from compiler.functional.nn import _triple
        from compiler.random import generator

        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _triple("ConvTranspose3d", kernel_size, "kernel_size")
        self.stride = _triple("ConvTranspose3d", stride, "stride")
        self.padding = _triple("ConvTranspose3d", padding, "padding")
        self.output_padding = _triple("ConvTranspose3d", output_padding, "output_padding")
        self.dilation = _triple("ConvTranspose3d", dilation, "dilation")
        kd, kh, kw = self.kernel_size
        shape: tuple[int, ...] = (in_channels, out_channels, kd, kh, kw)
        if groups > 1:
            shape = (groups, in_channels // groups, out_channels // groups, kd, kh, kw)
        std = math.sqrt(1.0 / (kd * kh * kw * in_channels))
        self.weight = Parameter(generator().normal(0.0, std, size=shape).astype("float32"))
        self.bias = Parameter(F.zeros((1, out_channels, 1, 1, 1)).numpy()) if bias else None

    def forward(self, inp: Tensor) -> Tensor:
        return F.conv_transpose3d(
            inp, self.weight, self.bias, self.stride, self.padding, self.output_padding, self.dilation,
            self.groups,
        )  # fmt: skip


class ConvRelu2d(Conv2d):
    """Conv2d followed by ReLU (one unit for quantization)."""

    def forward(self, inp: Tensor) -> Tensor:
        return F.relu(super().forward(inp))


__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvRelu2d", "ConvTranspose2d", "ConvTranspose3d"]
