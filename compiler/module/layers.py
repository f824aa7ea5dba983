"""MegEngine's standard layers."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

import compiler.functional as F
from compiler.core import op_error, user_location
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int | np.integer) else tuple(int(x) for x in v)  # type: ignore[return-value]


def _uniform(shape: Sequence[int], bound: float) -> Parameter:
    from compiler.random import generator

    return Parameter(generator().uniform(-bound, bound, size=tuple(shape)).astype(np.float32))


# what a Conv2d of any flavour (float, QAT, quantized) passes to its convolution op, by keyword
_CONV2D_OP_PARAMETERS = ("stride", "padding", "dilation", "groups", "conv_mode", "compute_mode")
# what it is built from besides its bias flag: the float -> QAT -> quantized conversions copy these
_CONV2D_HYPERPARAMETERS = ("in_channels", "out_channels", "kernel_size", *_CONV2D_OP_PARAMETERS)


def _conv2d_op_args(conv: Any) -> dict[str, Any]:
    return {name: getattr(conv, name) for name in _CONV2D_OP_PARAMETERS}


def _conv2d_hyperparameters(conv: Any) -> dict[str, Any]:
    """The constructor arguments (but ``bias``) that rebuild ``conv``."""
    return {name: getattr(conv, name) for name in _CONV2D_HYPERPARAMETERS}


class _ConvNd(Module):
    """What Conv2d and ConvTranspose2d share: hyper-parameters, the group check, the weight (its two
    channel axes in the order the op reads them) and the (1, OC, 1, 1) bias."""

    def _init_conv(
        self,
        kind: str,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int],
        padding: int | Sequence[int],
        dilation: int | Sequence[int],
        groups: int,
        bias: bool,
        conv_mode: str,
        compute_mode: str,
        transposed: bool,
    ) -> None:
        if in_channels % groups or out_channels % groups:
            raise op_error(
                kind,
                f"in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by "
                f"groups ({groups})",
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _pair(kernel_size), _pair(stride)
        self.padding, self.dilation = _pair(padding), _pair(dilation)
        self.groups, self.conv_mode, self.compute_mode = groups, conv_mode, compute_mode
        kh, kw = self.kernel_size
        # the weight's first channel axis is the one each output element sums over
        first, second = (in_channels, out_channels) if transposed else (out_channels, in_channels)
        bound = math.sqrt(6.0 / ((out_channels if transposed else in_channels) // groups * kh * kw))
        if groups == 1:
            wshape: tuple[int, ...] = (first, second, kh, kw)
        else:
            wshape = (groups, first // groups, second // groups, kh, kw)
        self.weight = _uniform(wshape, bound)
        self.bias = Parameter(np.zeros((1, out_channels, 1, 1), np.float32)) if bias else None
        self._transposed = transposed

    def reset_parameters(self) -> None:
        """Re-draw the weight from N(0, 1/fan_in) and zero the bias, in place (MegEngine's)."""
        from compiler.module import init

        kh, kw = self.kernel_size
        fan_in = (self.out_channels if getattr(self, "_transposed", False) else self.in_channels)
        init.normal_(self.weight, 0.0, math.sqrt(1.0 / (fan_in // self.groups * kh * kw)))
        if self.bias is not None:
            init.zeros_(self.bias)

    def _extra_repr(self) -> str:
        # MegEngine names only the settings that differ from their defaults
        text = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}"
        for name, default in (("stride", 1), ("padding", 0), ("dilation", 1)):
            value = getattr(self, name, None)
            if value is not None and tuple(value) != (default,) * len(tuple(value)):
                text += f", {name}={value}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        return text + (", bias=False" if self.bias is None else "")


class Conv2d(_ConvNd):
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
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name)
        self._init_conv(
            "Conv2d", in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            conv_mode, compute_mode, transposed=False,
        )  # fmt: skip

    def calc_conv(self, inp: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """This layer's convolution with the given weight and bias (MegEngine's ``calc_conv``)."""
        return F.conv2d(inp, weight, bias, **_conv2d_op_args(self))

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv(inp, self.weight, self.bias)


class ConvTranspose2d(_ConvNd):
    """MegEngine's ConvTranspose2d: weight (IC, OC, KH, KW), grouped (G, IC/G, OC/G, KH, KW)."""

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
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name)
        self._init_conv(
            "ConvTranspose2d", in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
            bias, conv_mode, compute_mode, transposed=True,
        )  # fmt: skip
        self.output_padding = _pair(output_padding)

    def forward(self, inp: Tensor) -> Tensor:
        return F.conv_transpose2d(
            inp,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.output_padding,
            self.dilation,
            self.groups,
            self.conv_mode,
            self.compute_mode,
        )


class LayerNorm(Module):
    """MegEngine's LayerNorm over the trailing ``normalized_shape`` axes (weight 1, bias 0)."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        affine: bool = True,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name)
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.affine = shape, eps, affine
        self.weight = Parameter(np.ones(shape, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(shape, np.float32)) if affine else None

    def forward(self, inp: Tensor) -> Tensor:
        return F.nn.layer_norm(inp, self.normalized_shape, self.affine, self.weight, self.bias, self.eps)

    def _extra_repr(self) -> str:
        return f"normalized_shape={self.normalized_shape}, eps={self.eps}, affine={self.affine}"


class Linear(Module):
    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, name: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(name)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform((out_features, in_features), math.sqrt(6.0 / in_features))
        self.bias = Parameter(np.zeros((out_features,), np.float32)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def _extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )


class _BatchNorm(Module):
    _FLAT_STATE = True  # state_dict() holds (C,) arrays for the (1, C, 1, 1) tensors

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.9,
        affine: bool = True,
        track_running_stats: bool = True,
        freeze: bool = False,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats, self.freeze = affine, track_running_stats, freeze
        # what the module was built with: statistics that were never tracked cannot be turned on
        self._track_running_stats_saved = track_running_stats
        if freeze and not track_running_stats:
            raise AssertionError("track_running_stats must be initilized to True if freeze is True")
        shape = (1, num_features, 1, 1)
        self.weight = Parameter(np.ones(shape, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(shape, np.float32)) if affine else None
        if track_running_stats:
            self.running_mean = Tensor(np.zeros(shape, np.float32))
            self.running_var = Tensor(np.ones(shape, np.float32))
        else:
            self.running_mean = None
            self.running_var = None

    def forward(self, inp: Tensor) -> Tensor:
        if not self._track_running_stats_saved and self.track_running_stats:
            raise AssertionError(
                "track_running_stats can not be initilized to False and changed to True later"
            )
        weight, bias = self.weight, self.bias
        if self.freeze:
            # MegEngine's frozen BN: running statistics and constant (detached) affine parameters
            if weight is not None:
                weight = weight.detach()
            if bias is not None:
                bias = bias.detach()
            return F.batch_norm(
                inp, self.running_mean, self.running_var, weight, bias, training=False, eps=self.eps
            )
        tracked = self.track_running_stats
        return F.batch_norm(
            inp,
            self.running_mean if tracked else None,
            self.running_var if tracked else None,
            weight,
            bias,
            training=self.training or not tracked,
            momentum=self.momentum if self.training and tracked else 0.0,
            eps=self.eps,
        )

    def reset_running_stats(self) -> None:
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            self.running_mean._reset(np.zeros(self.running_mean.shape, np.float32))
            self.running_var._reset(np.ones(self.running_var.shape, np.float32))

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.weight is not None and self.bias is not None:
            self.weight._reset(np.ones(self.weight.shape, np.float32))
            self.bias._reset(np.zeros(self.bias.shape, np.float32))

    def _extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm2d(_BatchNorm):
    def forward(self, inp: Tensor) -> Tensor:
        if inp.ndim != 4:
            raise op_error("BatchNorm2d", f"expected a 4-D input, got shape {inp.shape}")
        return super().forward(inp)


class BatchNorm1d(_BatchNorm):
    def forward(self, inp: Tensor) -> Tensor:
        if inp.ndim not in (2, 3):
            raise op_error("BatchNorm1d", f"expected a 2-D or 3-D input, got shape {inp.shape}")
        return super().forward(inp)


class _Activation(Module):
    fn: Any = None

    def forward(self, x: Tensor) -> Tensor:
        return type(self).fn(x)


class ReLU(_Activation):
    fn = staticmethod(F.relu)


class ReLU6(_Activation):
    fn = staticmethod(F.relu6)


class Sigmoid(_Activation):
    fn = staticmethod(F.sigmoid)


class Tanh(_Activation):
    fn = staticmethod(F.tanh)


class GELU(_Activation):
    fn = staticmethod(F.gelu)


class SiLU(_Activation):
    fn = staticmethod(F.silu)


class Hswish(_Activation):
    fn = staticmethod(F.hswish)


class Hsigmoid(_Activation):
    fn = staticmethod(F.hsigmoid)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, name: str | None = None) -> None:
        super().__init__(name)
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)


class Softmax(Module):
    def __init__(self, axis: int | None = None, name: str | None = None) -> None:
        super().__init__(name)
        self.axis = axis

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.axis)

    def _extra_repr(self) -> str:
        return f"axis={self.axis}"


class MaxPool2d(Module):
    def __init__(
        self, kernel_size: Any, stride: Any = None, padding: Any = 0, name: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(name)
        stride = kernel_size if stride is None else stride
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def _extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        mode: str = "average_count_exclude_padding",
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name)
        stride = kernel_size if stride is None else stride
        self.kernel_size, self.stride, self.padding, self.mode = kernel_size, stride, padding, mode

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.mode)

    def _extra_repr(self) -> str:
        pooling = f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
        return f"{pooling}, mode={self.mode}"


class _AdaptivePool2d(Module):
    fn: Any = None

    def __init__(self, oshp: Any, name: str | None = None) -> None:
        super().__init__(name)
        self.oshp = oshp

    def forward(self, x: Tensor) -> Tensor:
        return type(self).fn(x, self.oshp)


class AdaptiveAvgPool2d(_AdaptivePool2d):
    fn = staticmethod(F.adaptive_avg_pool2d)


class AdaptiveMaxPool2d(_AdaptivePool2d):
    fn = staticmethod(F.adaptive_max_pool2d)


class Dropout(Module):
    def __init__(self, drop_prob: float = 0.0, name: str | None = None, **kwargs: Any) -> None:
        super().__init__(name)
        self.drop_prob = drop_prob

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.drop_prob, training=self.training)

    def _extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"


class Identity(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class Flatten(Module):
    def __init__(self, start_axis: int = 1, end_axis: int = -1, name: str | None = None) -> None:
        super().__init__(name)
        self.start_axis, self.end_axis = start_axis, end_axis

    def forward(self, x: Tensor) -> Tensor:
        return F.flatten(x, self.start_axis, self.end_axis)


class Sequential(Module):
    """Runs its layers in order; ``Sequential(a, b)`` or ``Sequential(OrderedDict(name=layer))``."""

    def __init__(self, *args: Any, name: str | None = None) -> None:
        super().__init__(name)
        self.layer_keys: list[str] = []
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            items = list(args[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(args)]
        for key, module in items:
            if not isinstance(module, Module):
                raise TypeError(
                    f"Sequential: item {key!r} is a {type(module).__name__}, not a Module "
                    f"(at {user_location()})"
                )
            setattr(self, key, module)
            self.layer_keys.append(key)

    def __getitem__(self, idx: int | slice) -> Module:
        if isinstance(idx, slice):
            return Sequential(*[getattr(self, k) for k in self.layer_keys[idx]])
        return getattr(self, self.layer_keys[idx])

    def __setitem__(self, idx: int, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"Sequential: item {idx} must be a Module, got {type(module).__name__}")
        setattr(self, self.layer_keys[idx], module)

    def __len__(self) -> int:
        return len(self.layer_keys)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (getattr(self, k) for k in self.layer_keys)

    def forward(self, x: Any) -> Any:
        for layer in self:
            x = layer(x)
        return x
