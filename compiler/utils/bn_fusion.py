"""MegEngine's ``utils.bn_fusion``: fold a BatchNorm into the convolution or linear layer before it.

In eval mode the batch norm's statistics and affine parameters are folded into the layer's weight and
bias (``w * g / sqrt(v + eps)``, ``beta + g * (b - mean) / sqrt(v + eps)``) and a plain layer (or
ConvRelu2d) comes back; in training mode the fused training module (ConvBn2d, LinearBn1d, ...) is
returned with copies of both layers' state.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np

from compiler.core import XmgeError
from compiler.module.conv import ConvRelu2d
from compiler.module.conv_bn import ConvBn2d, ConvBnRelu2d
from compiler.module.conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d, ConvTransposeRelu2d
from compiler.module.layers import BatchNorm1d, BatchNorm2d, Conv2d, ConvTranspose2d, Linear, ReLU
from compiler.module.linear_bn import LinearBn1d, LinearBnRelu1d, LinearRelu
from compiler.tensor import Parameter, Tensor

__all__ = ["fold_weight_bias", "fuse_conv_bn_relu_module", "fuse_linear_bn_relu_module"]

# (layer, bn, relu, training) -> the fused module
_FUSED: dict[tuple[Any, ...], type] = {
    (Conv2d, BatchNorm2d, ReLU, False): ConvRelu2d,
    (Conv2d, BatchNorm2d, ReLU, True): ConvBnRelu2d,
    (Conv2d, BatchNorm2d, False): Conv2d,
    (Conv2d, BatchNorm2d, True): ConvBn2d,
    (Conv2d, ReLU): ConvRelu2d,
    (ConvTranspose2d, BatchNorm2d, ReLU, False): ConvTransposeRelu2d,
    (ConvTranspose2d, BatchNorm2d, ReLU, True): ConvTransposeBnRelu2d,
    (ConvTranspose2d, BatchNorm2d, False): ConvTranspose2d,
    (ConvTranspose2d, BatchNorm2d, True): ConvTransposeBn2d,
    (ConvTranspose2d, ReLU): ConvTransposeRelu2d,
    (Linear, BatchNorm1d, ReLU, False): LinearRelu,
    (Linear, BatchNorm1d, ReLU, True): LinearBnRelu1d,
    (Linear, BatchNorm1d, False): Linear,
    (Linear, BatchNorm1d, True): LinearBn1d,
    (Linear, ReLU): LinearRelu,
}


class FusionError(XmgeError, ValueError):
    """The layers cannot be fused (mismatched channels or modes, or an unsupported combination)."""


def _np(t: Tensor | None) -> np.ndarray | None:
    return None if t is None else t.numpy().astype(np.float32)


def fold_weight_bias(
    weight: Tensor,
    bias: Tensor | None,
    gamma: Tensor | None,
    beta: Tensor | None,
    bn_mean: Tensor | None,
    bn_var: Tensor | None,
    eps: float = 1e-5,
    transpose: bool = False,
) -> tuple[Tensor, Tensor]:
    """The weight and bias of a layer followed by a batch norm, as one layer (MegEngine's shapes:
    conv bias (1, OC, 1, 1), linear bias (OC,))."""
    w = weight.numpy()
    linear = w.ndim == 2
    if linear:
        out = w.shape[0]
    elif w.ndim == 5:
        out = w.shape[0] * (w.shape[2] if transpose else w.shape[1])
    else:
        out = w.shape[1] if transpose else w.shape[0]
    g = np.ones(out, np.float32) if gamma is None else _np(gamma).reshape(-1)
    b0 = np.zeros(out, np.float32) if beta is None else _np(beta).reshape(-1)
    mean = np.zeros(out, np.float32) if bn_mean is None else _np(bn_mean).reshape(-1)
    var = np.ones(out, np.float32) if bn_var is None else _np(bn_var).reshape(-1)
    b = np.zeros(out, np.float32) if bias is None else _np(bias).reshape(-1)
    scale = (g / np.sqrt(var + np.float32(eps))).astype(np.float32)
    if linear:
        shape: tuple[int, ...] = (-1, 1)
    elif w.ndim == 5:
        shape = (w.shape[0], 1, -1, 1, 1) if transpose else (w.shape[0], -1, 1, 1, 1)
    else:
        shape = (1, -1, 1, 1) if transpose else (-1, 1, 1, 1)
    w_fold = (w * scale.reshape(shape)).astype(w.dtype)
    b_fold = b0 + (b - mean) * scale
    return Tensor(w_fold), Tensor(b_fold if linear else b_fold.reshape(1, -1, 1, 1))


def _fused_class(key: tuple[Any, ...]) -> type:
    if key not in _FUSED:
        raise FusionError(f"cannot fuse {' + '.join(getattr(k, '__name__', str(k)) for k in key)}")
    return _FUSED[key]


def _key(layer: Any, bn: Any, relu: Any) -> tuple[Any, ...]:
    base = type(layer)
    for cls in (ConvTranspose2d, Conv2d, Linear):
        if isinstance(layer, cls):
            base = cls
            break
    key: tuple[Any, ...] = (base,) + tuple(type(m) for m in (bn, relu) if m is not None)
    return key + (layer.training,) if bn is not None else key


def fuse_conv_bn_relu_module(conv: Conv2d, bn: BatchNorm2d | None, relu: ReLU | None) -> Any:
    """One module for ``conv`` → ``bn`` → ``relu`` (either of the last two may be None)."""
    if bn is not None:
        if conv.training != bn.training:
            raise FusionError("Conv and BN both must be in the same mode (train or eval).")
        if bn.num_features != conv.out_channels:
            raise FusionError("Output channel of Conv2d must match num_features of BatchNorm2d")
    cls = _fused_class(_key(conv, bn, relu))
    transpose = isinstance(conv, ConvTranspose2d)
    kwargs: dict[str, Any] = dict(
        in_channels=conv.in_channels,
        out_channels=conv.out_channels,
        kernel_size=conv.kernel_size,
        stride=conv.stride,
        padding=conv.padding,
        dilation=conv.dilation,
        groups=conv.groups,
        bias=conv.bias is not None,
        conv_mode=conv.conv_mode,
        compute_mode=conv.compute_mode,
    )
    if transpose:
        kwargs["output_padding"] = conv.output_padding
    module = cls(**kwargs)
    fused_training = bn is not None and conv.training
    inner = (module.conv_transpose2d if transpose else module.conv) if fused_training else module
    weight, bias = conv.weight, conv.bias
    if bn is not None and not conv.training:
        weight, bias = fold_weight_bias(
            weight, bias, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps, transpose=transpose
        )
    inner.weight = Parameter(weight.numpy())
    if bias is not None:
        inner.bias = Parameter(bias.numpy())
    if fused_training:
        module.bn = deepcopy(bn)
    module.train(conv.training)
    return module


def fuse_linear_bn_relu_module(linear: Linear, bn: BatchNorm1d | None, relu: ReLU | None) -> Any:
    """One module for ``linear`` → ``bn`` → ``relu`` (either of the last two may be None)."""
    if bn is not None:
        if linear.training != bn.training:
            raise FusionError("Linear and BN both must be in the same mode (train or eval).")
        if bn.num_features != linear.out_features:
            raise FusionError("Output channel of Linear must match num_features of BatchNorm1d")
    cls = _fused_class(_key(linear, bn, relu))
    module = cls(linear.in_features, linear.out_features, linear.bias is not None)
    fused_training = bn is not None and linear.training
    inner = module.linear if fused_training else module
    weight, bias = linear.weight, linear.bias
    if bn is not None and not linear.training:
        weight, bias = fold_weight_bias(
            weight, bias, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps
        )
    inner.weight = Parameter(weight.numpy())
    if bias is not None:
        inner.bias = Parameter(
            bias.numpy().reshape(inner.bias.shape) if inner.bias is not None else bias.numpy()
        )
    if fused_training:
        module.bn = deepcopy(bn)
    module.train(linear.training)
    return module
