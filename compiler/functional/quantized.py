"""MegEngine's ``functional.quantized``: the fused int8 operators quantized modules call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.core import apply, op_error
from compiler.functional.nn import _conv_geometry, _grouped_weight, _mode
from compiler.tensor import Tensor, as_tensor
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import DTypeError, tensor_type


def _result_type(label: str, op_cls: type[T.MgbOp], inputs: list[Tensor], dtype: Any, **params: Any) -> Any:
    from compiler.core import tensor_type_of

    try:
        (inferred,) = op_cls.infer([tensor_type_of(t) for t in inputs], **params)
    except T.ShapeInferenceError as exc:
        raise op_error(label, str(exc)) from None
    if dtype is None:
        return inferred
    try:
        return tensor_type(inferred.get_shape(), np.dtype(dtype))
    except (DTypeError, TypeError) as exc:
        raise op_error(label, str(exc)) from None


def conv_bias_activation(
    inp: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    dtype: Any = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    nonlinear_mode: str = "identity",
    conv_mode: str = "cross_correlation",
    compute_mode: str = "default",
) -> Tensor:
    """ConvBias: ``nonlinear(conv(inp, weight) + bias)`` with result dtype ``dtype`` (e.g.
    ``qint8(s)``; by default ``qint32(s_inp * s_weight)`` for quantized operands)."""
    label = "conv_bias_activation"
    inp, weight = as_tensor(inp), as_tensor(weight)
    weight = _grouped_weight(label, weight, groups, "output")
    params = {
        **_conv_geometry(label, stride, padding, dilation, groups),
        "mode": _mode(label, enums.ConvMode, conv_mode, "conv_mode"),
        "compute_mode": _mode(label, enums.ComputeMode, compute_mode, "compute_mode"),
        "nonline_mode": _mode(label, enums.NonlineMode, nonlinear_mode, "nonlinear_mode"),
    }
    inputs = [inp, weight] + ([as_tensor(bias)] if bias is not None else [])
    full = T.ConvBiasOp.params_with_defaults({k: T.to_attr(v) for k, v in params.items()})
    rt = _result_type(label, T.ConvBiasOp, inputs, dtype, **full)
    (out,) = apply(T.ConvBiasOp, inputs, label=label, result_types=[rt], **params)
    return out


def elemwise_multi_type(*inputs: Tensor, mode: str, dtype: Any = None) -> Tensor:
    """ElemwiseMultiType (MegEngine's ``_elemwise_multi_type``): ``mode`` is e.g. ``"qadd"`` or
    ``"qfuse_add_relu"``; the result has dtype ``dtype`` (default: the first quantized input's)."""
    label = f"elemwise_multi_type {mode}"
    m = _mode(label, enums.ElemwiseMultiTypeMode, mode, "mode")
    tensors = [as_tensor(t) for t in inputs]
    rt = _result_type(label, T.ElemwiseMultiTypeOp, tensors, dtype, mode=m)
    (out,) = apply(T.ElemwiseMultiTypeOp, tensors, label=label, result_types=[rt], mode=m)
    return out


__all__ = ["conv_bias_activation", "elemwise_multi_type"]
