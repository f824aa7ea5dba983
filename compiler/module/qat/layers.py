"""QAT versions of the quantizable float modules: same parameters, with fake-quantized weights
and outputs. ``quantize_qat`` builds them with ``from_float_module`` (sharing the parameters)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import compiler.functional as F
import compiler.module.concat as _concat
import compiler.module.conv_bn as _conv_bn
import compiler.module.elemwise as _elemwise
import compiler.module.layers as _layers
import compiler.module.quant_dequant as _quant_dequant
from compiler.module.module import Module
from compiler.module.qat.module import QATModule
from compiler.module.quantized import layers as _quantized_layers
from compiler.tensor import Tensor


def _conv_args(m: Any) -> dict[str, Any]:
    return {**_layers._conv2d_hyperparameters(m), "bias": m.bias is not None}


class Conv2d(_layers.Conv2d, QATModule):
    def calc_conv(self, inp: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return F.conv2d(inp, weight, bias, **_layers._conv2d_op_args(self))

    def calc_conv_qat(self, inp: Tensor) -> Tensor:
        w_qat = self.apply_quant_weight(self.weight)
        return self.calc_conv(inp, w_qat, self.apply_quant_bias(self.bias, inp, w_qat))

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(self.calc_conv_qat(inp))

    @classmethod
    def from_float_module(cls, float_module: Module) -> Conv2d:
        qat = cls(**_conv_args(float_module), name=float_module.name)
        qat.weight, qat.bias = float_module.weight, float_module.bias  # type: ignore[attr-defined]
        return qat


class ConvRelu2d(Conv2d):
    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(F.relu(self.calc_conv_qat(inp)))


class _ConvBnActivation2d(_conv_bn._ConvBnActivation2d, QATModule):
    def get_batch_mean_var(self, inp: Tensor) -> tuple[Tensor, Tensor]:
        mean = F.mean(inp, [0, 2, 3], keepdims=True)
        centered = inp - mean
        return mean, F.mean(centered * centered, [0, 2, 3], keepdims=True)

    def fold_weight_bias(self, bn_mean: Tensor | None, bn_var: Tensor | None) -> tuple[Tensor, Tensor]:
        """The convolution's weight and bias with the batch norm folded in (weight fake-quantized):
        w * gamma / sqrt(var + eps), beta + gamma * (b - mean) / sqrt(var + eps)."""
        conv, bn = self.conv, self.bn
        oc = conv.out_channels
        shape = (1, oc, 1, 1)
        ones, zeros = Tensor(np.ones(shape, np.float32)), Tensor(np.zeros(shape, np.float32))
        gamma = ones if bn.weight is None else F.reshape(bn.weight, shape)
        beta = zeros if bn.bias is None else F.reshape(bn.bias, shape)
        mean = zeros if bn_mean is None else F.reshape(bn_mean, shape)
        var = ones if bn_var is None else F.reshape(bn_var, shape)
        factor = gamma / F.sqrt(var + bn.eps)
        if conv.groups == 1:
            w_fold = conv.weight * F.reshape(factor, (-1, 1, 1, 1))
        else:
            w_fold = conv.weight * F.reshape(factor, (conv.groups, -1, 1, 1, 1))
        w_fold = self.apply_quant_weight(w_fold)
        bias = zeros if conv.bias is None else conv.bias
        b_fold = beta + (bias - mean) * factor
        return w_fold, b_fold

    def calc_conv_bn_qat(self, inp: Tensor) -> Tensor:
        if self.training:
            # batch statistics of the float convolution; the batch norm call updates its running ones
            conv_out = self.conv(inp)
            bn_mean, bn_var = self.get_batch_mean_var(conv_out)
            if self.bn.track_running_stats:
                self.bn(conv_out)
        else:
            bn_mean, bn_var = self.bn.running_mean, self.bn.running_var
        w_fold, b_fold = self.fold_weight_bias(bn_mean, bn_var)
        b_qat = self.apply_quant_bias(b_fold, inp, w_fold)
        return F.conv2d(inp, w_fold, b_qat, **_layers._conv2d_op_args(self.conv))

    @classmethod
    def from_float_module(cls, float_module: Module) -> _ConvBnActivation2d:
        conv, bn = float_module.conv, float_module.bn  # type: ignore[attr-defined]
        qat = cls(
            **_conv_args(conv), eps=bn.eps, momentum=bn.momentum, affine=bn.affine,
            track_running_stats=bn.track_running_stats, name=float_module.name,
        )  # fmt: skip
        qat.conv, qat.bn = conv, bn
        return qat


class ConvBn2d(_ConvBnActivation2d):
    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(self.calc_conv_bn_qat(inp))


class ConvBnRelu2d(_ConvBnActivation2d):
    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(F.relu(self.calc_conv_bn_qat(inp)))


class Linear(_layers.Linear, QATModule):
    def forward(self, inp: Tensor) -> Tensor:
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.apply_quant_activation(F.linear(inp, w_qat, b_qat))

    @classmethod
    def from_float_module(cls, float_module: Module) -> Linear:
        m: Any = float_module
        qat = cls(m.in_features, m.out_features, m.bias is not None, name=m.name)
        qat.weight, qat.bias = m.weight, m.bias
        return qat


class LinearRelu(Linear):
    def forward(self, inp: Tensor) -> Tensor:
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.apply_quant_activation(F.relu(F.linear(inp, w_qat, b_qat)))


class Elemwise(_elemwise.Elemwise, QATModule):
    with_weight = False

    def forward(self, *inps: Any) -> Tensor:
        return self.apply_quant_activation(super().forward(*inps))

    @classmethod
    def from_float_module(cls, float_module: Module) -> Elemwise:
        return cls(float_module.method, name=float_module.name)  # type: ignore[attr-defined]


class Concat(_concat.Concat, QATModule):
    with_weight = False

    def forward(self, inps: Sequence[Tensor], axis: int = 0) -> Tensor:
        return self.apply_quant_activation(super().forward(inps, axis))

    @classmethod
    def from_float_module(cls, float_module: Module) -> Concat:
        return cls(float_module.name)


class QuantStub(_quant_dequant.QuantStub, QATModule):
    """Where the int8 region begins: the activation fake quantizer sets the input's scale."""

    with_weight = False

    def forward(self, inp: Tensor) -> Tensor:
        return self.apply_quant_activation(inp)

    @classmethod
    def from_float_module(cls, float_module: Module) -> QuantStub:
        return cls(float_module.name)


class DequantStub(_quant_dequant.DequantStub, QATModule):
    with_weight = False
    with_act = False

    @classmethod
    def from_float_module(cls, float_module: Module) -> DequantStub:
        return cls(float_module.name)


# every quantized module has a QAT twin of the same name (quantize() pairs them by name)
__all__ = sorted([*_quantized_layers.__all__, "QATModule"])
