"""Int8 inference modules (MegEngine's ``module.quantized``), built from QAT modules by
``quantize``. Weights are stored as qint8, biases in float and converted to qint32 with scale
input_scale * weight_scale at each call (a TypeCvt of a constant, folded when dumped); outputs
take the dtype the QAT module's activation observer measured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import compiler.dtype as D
import compiler.functional as F
from compiler.core import op_error
from compiler.module.layers import _conv2d_hyperparameters, _conv2d_op_args, _ConvNd
from compiler.module.module import Module
from compiler.module.quantized.module import QuantizedModule
from compiler.tensor import Parameter, Tensor


def _quantized_param(t: Tensor, name: str | None = None) -> Parameter:
    """A quantized module's own parameter; it keeps the float parameter's name, as MegEngine's."""
    return Parameter(t.numpy(), dtype=t.dtype, name=name or None)


def _bias_dtype(label: str, inp: Tensor, weight: Tensor) -> np.dtype:
    if not D.is_quantize(inp.dtype):
        raise op_error(label, f"expects a quantized input (put a QuantStub before it), got {inp.dtype}")
    return D.qint32(D.get_scale(inp.dtype) * D.get_scale(weight.dtype))


class Conv2d(QuantizedModule):
    _nonlinear_mode = "identity"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        conv_mode: str = "cross_correlation",
        compute_mode: str = "default",
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.conv_mode, self.compute_mode = conv_mode, compute_mode
        self.output_dtype = dtype
        self.weight: Parameter | None = None
        self.bias: Parameter | None = None

    def calc_conv_quantized(self, inp: Tensor, nonlinear_mode: str = "identity") -> Tensor:
        assert self.weight is not None and self.bias is not None
        bias = self.bias.astype(_bias_dtype(type(self).__name__, inp, self.weight))
        conv_args = _conv2d_op_args(self)
        return F.quantized.conv_bias_activation(
            inp, self.weight, bias, dtype=self.output_dtype, nonlinear_mode=nonlinear_mode, **conv_args
        )

    def forward(self, inp: Tensor) -> Tensor:
        return self.calc_conv_quantized(inp, self._nonlinear_mode)

    def _extra_repr(self) -> str:
        return _ConvNd._extra_repr(self)  # type: ignore[arg-type] # the float convolution's settings

    @classmethod
    def _from_conv(cls, qat_module: Any, conv: Any, weight: Tensor, bias: Tensor | None) -> Conv2d:
        q = cls(
            **_conv2d_hyperparameters(conv), dtype=qat_module.get_activation_dtype(), name=qat_module.name
        )
        q.weight = _quantized_param(weight.astype(qat_module.get_weight_dtype()), conv.weight.name)
        bias_value = np.zeros((1, conv.out_channels, 1, 1), np.float32) if bias is None else bias.numpy()
        own_bias = bias is not None and bias is getattr(conv, "bias", None)  # not batch-norm folded
        q.bias = Parameter(
            np.asarray(bias_value, np.float32).reshape(1, conv.out_channels, 1, 1),
            name=(bias.name or None) if own_bias else None,  # type: ignore[union-attr]
        )
        return q

    @classmethod
    def from_qat_module(cls, qat_module: Module) -> Conv2d:
        m: Any = qat_module
        m.apply_quant_weight(m.weight)  # the weight observer has seen the weight before its dtype is read
        return cls._from_conv(m, m, m.weight, m.bias)


class ConvRelu2d(Conv2d):
    _nonlinear_mode = "relu"


class ConvBn2d(Conv2d):
    """Conv2d + BatchNorm2d folded into one int8 ConvBias (running statistics)."""

    @classmethod
    def from_qat_module(cls, qat_module: Module) -> Conv2d:
        m: Any = qat_module
        w_fold, b_fold = m.fold_weight_bias(m.bn.running_mean, m.bn.running_var)
        return cls._from_conv(m, m.conv, w_fold, b_fold)


class ConvBnRelu2d(ConvBn2d):
    _nonlinear_mode = "relu"


class Linear(QuantizedModule):
    def __init__(self, dtype: Any = None, **kwargs: Any) -> None:
        super().__init__(kwargs.get("name"))
        self.output_dtype = dtype
        self.weight: Parameter | None = None
        self.bias: Parameter | None = None

    def forward(self, inp: Tensor) -> Tensor:
        assert self.weight is not None
        bias = None
        if self.bias is not None:
            bias = self.bias.astype(_bias_dtype("Linear", inp, self.weight))
        out = F.linear(inp, self.weight, bias)
        return out if self.output_dtype is None else out.astype(self.output_dtype)

    @classmethod
    def from_qat_module(cls, qat_module: Module) -> Linear:
        m: Any = qat_module
        m.apply_quant_weight(m.weight)
        q = cls(dtype=m.get_activation_dtype(), name=m.name)
        q.weight = _quantized_param(m.weight.astype(m.get_weight_dtype()), m.weight.name)
        q.bias = None if m.bias is None else Parameter(m.bias.numpy(), name=m.bias.name or None)
        return q


class LinearRelu(Linear):
    def forward(self, inp: Tensor) -> Tensor:
        return F.relu(super().forward(inp))


class Elemwise(QuantizedModule):
    """The float mode ``method`` on quantized operands: ElemwiseMultiType ``Q<method>``."""

    def __init__(self, method: str, dtype: Any = None, **kwargs: Any) -> None:
        super().__init__(kwargs.get("name"))
        self.method, self.output_dtype = str(method).upper(), dtype

    def forward(self, *inps: Tensor) -> Tensor:
        return F.quantized.elemwise_multi_type(*inps, mode="Q" + self.method, dtype=self.output_dtype)

    @classmethod
    def from_qat_module(cls, qat_module: Module) -> Elemwise:
        m: Any = qat_module
        return cls(m.method, m.get_activation_dtype(), name=m.name)


class Concat(QuantizedModule):
    def __init__(self, dtype: Any = None, **kwargs: Any) -> None:
        super().__init__(kwargs.get("name"))
        self.output_dtype = dtype

    def forward(self, inps: Sequence[Tensor], axis: int = 0) -> Tensor:
        return F.concat([x.astype(self.output_dtype) for x in inps], axis)

    @classmethod
    def from_qat_module(cls, qat_module: Module) -> Concat:
        m: Any = qat_module
        return cls(m.get_activation_dtype(), name=m.name)


class QuantStub(QuantizedModule):
    """Float in, quantized out (TypeCvt to the measured activation dtype)."""

    def __init__(self, dtype: Any = None, **kwargs: Any) -> None:
        super().__init__(kwargs.get("name"))
        self.output_dtype = dtype

    def forward(self, inp: Tensor) -> Tensor:
        return inp.astype(self.output_dtype)

    @classmethod
    def from_qat_module(cls, qat_module: Module) -> QuantStub:
        m: Any = qat_module
        return cls(m.get_activation_dtype(), name=m.name)


class DequantStub(QuantizedModule):
    """Quantized in, float32 out."""

    def forward(self, inp: Tensor) -> Tensor:
        return inp.astype("float32")

    @classmethod
    def from_qat_module(cls, qat_module: Module) -> DequantStub:
        return cls(qat_module.name)


__all__ = [
    "Concat",
    "Conv2d",
    "ConvBn2d",
    "ConvBnRelu2d",
    "ConvRelu2d",
    "DequantStub",
    "Elemwise",
    "Linear",
    "LinearRelu",
    "QuantStub",
]
