"""Post-training int8 quantization (MegEngine's ``quantization`` flow, calibrate then quantize).

    qmodel = quantize(float_model, calibration_batches)           # min/max observers
    qmodel = quantize(float_model, batches, observer="percentile", percentile=99.99)

(``compiler.quantization.quantize`` with calibration batches comes here; without them it is
MegEngine's QAT -> int8 conversion, :mod:`compiler.quantization.quantize`.)
    y = qmodel(x)                                                 # float in, float out

``qmodel`` is a :class:`compiler.module.Module`: it runs int8 operators through the reference
kernels, traces with ``jit.trace`` and dumps with ``trace.dump`` into a ``.mge`` whose operators
mirror MegEngine's quantized dumps (``TypeCvt`` to QuantizedS8 at the input, ``ConvBias`` with
QuantizedS8 weights, QuantizedS32 bias and QuantizedS8 output, ``ElemwiseMultiType`` QADD /
QFUSE_ADD_RELU for residual adds, ``TypeCvt`` back to float32 at the output). How the float graph
is split into int8 units: :mod:`compiler.quantization.graph`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

import compiler.dtype as D
import compiler.functional as F
from compiler.core import apply
from compiler.module.module import Module
from compiler.quantization.graph import (
    Observer,
    Plan,
    Unit,
    calibrate,
    minmax_observer,
    percentile_observer,
    plan,
)
from compiler.tensor import Parameter, Tensor
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import element_type

QMAX = 127.0  # symmetric int8: scale = range / 127


def _quantize_array(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    from semantics.quant_kernels import quantize as q

    return np.array(q(np.asarray(x, np.float32), dtype))


class QuantizedUnit(Module):
    """The int8 parameters of one unit (weights qint8, bias qint32)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray, w_dtype: np.dtype, b_dtype: np.dtype) -> None:
        super().__init__()
        self.weight = Parameter(_quantize_array(weight, w_dtype), dtype=w_dtype)
        self.bias = Parameter(_quantize_array(bias, b_dtype), dtype=b_dtype)

    def forward(self, *args: Any) -> Any:  # pragma: no cover - parameters only
        raise NotImplementedError


class QuantizedModel(Module):
    """An int8 model built by :func:`quantize` from a float model's trace."""

    def __init__(self, p: Plan, ranges: dict[SSAValue, float]) -> None:
        super().__init__()
        self._plan = p
        self._scales: dict[SSAValue, float] = {}
        self._consts: dict[SSAValue, Tensor] = {}
        fn = p.fn
        for arg in fn.body.block.args:
            self._scales[arg] = _scale(ranges[arg])
        units: dict[str, QuantizedUnit] = {}
        self._unit_key: dict[int, str] = {}
        for i, u in enumerate(p.units):
            if u.kind in ("conv", "linear", "add"):
                self._scales[u.output] = _scale(ranges[u.output])
            elif u.kind == "same":
                if u.inputs and u.inputs[0] in self._scales:
                    self._scales[u.output] = self._scales[u.inputs[0]]
            else:
                self._scales[u.output] = _scale(ranges[u.output])
                for v in u.op.operands:
                    if isinstance(v.owner, T.ConstOp):
                        self._consts[v] = Tensor(v.owner.numpy())
            if u.kind in ("conv", "linear"):
                assert u.weight is not None and u.bias is not None
                s_in = self._scales[u.inputs[0]]
                s_w = _scale(float(np.abs(u.weight).max()))
                w_dtype = D.qint8(s_w)
                b_dtype = D.qint32(D.get_scale(D.qint8(s_in)) * D.get_scale(w_dtype))
                bias = u.bias.reshape(1, -1, 1, 1) if u.kind == "conv" else u.bias
                key = u.name if u.name not in units else f"{u.name}#{i}"
                units[key] = QuantizedUnit(u.weight, bias, w_dtype, b_dtype)
                self._unit_key[i] = key
        # parameters named after the float model's modules: "quantized.<scope>.weight"
        self.quantized = units
        self._names = [str(a.data) for a in fn.attributes["input_names"].data]  # type: ignore[attr-defined]

    # -- execution ------------------------------------------------------------------------------
    def _q(self, v: SSAValue, env: dict[SSAValue, Tensor]) -> Tensor:
        """The value of ``v`` as int8 (quantizing a float value with its calibrated scale)."""
        t = env[v]
        if D.is_quantize(t.dtype):
            return t
        return t.astype(D.qint8(self._scales[v]))

    def _shape(self, v: SSAValue, batch: int) -> list[int]:
        t = v.type
        assert isinstance(t, TensorType)
        shape = list(t.get_shape())
        if shape and shape[0] == self._plan.batch:
            shape[0] = batch
        return shape

    def forward(self, *inputs: Tensor) -> Any:
        fn = self._plan.fn
        args = fn.body.block.args
        if len(inputs) != len(args):
            raise TypeError(f"the quantized model takes {len(args)} inputs, got {len(inputs)}")
        batch = inputs[0].shape[0] if inputs and inputs[0].ndim else 1
        env: dict[SSAValue, Tensor] = dict(self._consts)
        for arg, x in zip(args, inputs, strict=True):
            env[arg] = x.astype(D.qint8(self._scales[arg]))  # QuantStub
        for i, u in enumerate(self._plan.units):
            env[u.output] = self._run(i, u, env, batch)
        ret = next(op for op in fn.body.block.ops if isinstance(op, func.ReturnOp))
        outs = [env[v].astype("float32") if D.is_quantize(env[v].dtype) else env[v] for v in ret.operands]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run(self, i: int, u: Unit, env: dict[SSAValue, Tensor], batch: int) -> Tensor:
        out_dtype = D.qint8(self._scales[u.output]) if u.output in self._scales else None
        if u.kind == "conv":
            params = self.quantized[self._unit_key[i]]
            p = u.op.params()
            groups = params.weight.shape[0] if p["sparse"] == enums.ConvSparse.GROUP else 1
            return F.quantized.conv_bias_activation(
                self._q(u.inputs[0], env),
                params.weight,
                params.bias,
                dtype=out_dtype,
                stride=p["stride"],
                padding=p["padding"],
                dilation=p["dilation"],
                groups=groups,
                nonlinear_mode="relu" if u.relu else "identity",
            )
        if u.kind == "linear":
            params = self.quantized[self._unit_key[i]]
            (acc,) = apply(
                T.MatrixMulOp, [self._q(u.inputs[0], env), params.weight], label="linear", transpose_b=True
            )
            y = acc + params.bias
            if u.relu:
                y = F.relu(y)
            return y.astype(out_dtype)
        if u.kind == "add":
            a, b = (self._q(v, env) for v in u.inputs)
            mode = "qfuse_add_relu" if u.relu else "qadd"
            return F.quantized.elemwise_multi_type(a, b, mode=mode, dtype=out_dtype)
        operands = [env[v] for v in u.op.operands]
        quantized_in = u.kind == "same" and any(D.is_quantize(t.dtype) for t in operands)
        if not quantized_in:
            operands = [t.astype("float32") if D.is_quantize(t.dtype) else t for t in operands]
        types = []
        for r in u.op.results:
            elem = element_type(operands[0].dtype) if quantized_in else r.type.element_type  # type: ignore[attr-defined]
            types.append(TensorType(elem, self._shape(r, batch)))
        (out,) = apply(type(u.op), operands, label=u.op.name, result_types=types, **_user_params(u.op))
        return out


def _user_params(op: T.MgbOp) -> dict[str, Any]:
    props = dict(op.properties)
    for k in op.IGNORED_PROPS:
        props.pop(k, None)
    return {k: T.from_attr(v) for k, v in props.items()}


def _scale(magnitude: float) -> float:
    return max(float(magnitude), 1e-8) / QMAX


def _observer(observer: str | Observer, percentile: float) -> Observer:
    if callable(observer):
        return observer
    if observer == "minmax":
        return minmax_observer
    if observer == "percentile":
        return percentile_observer(percentile)
    raise ValueError(f"unknown observer {observer!r}; expected 'minmax', 'percentile' or a function")


def trace_float(model: Module, example: Sequence[np.ndarray]) -> func.FuncOp:
    """The traced float function of ``model`` on example inputs (module in eval mode)."""
    import compiler.jit as jit

    model.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(*xs: Tensor) -> Any:
        return model(*xs)

    f(*[Tensor(np.asarray(x, np.float32)) for x in example])
    return next(op for op in f.module.ops if isinstance(op, func.FuncOp))


def quantize_calibrated(
    model: Module,
    calibration: Sequence[np.ndarray | Sequence[np.ndarray]],
    *,
    observer: str | Observer = "minmax",
    percentile: float = 99.99,
) -> QuantizedModel:
    """Calibrate ``model`` on the calibration batches (all of one shape; a batch is an array or a
    tuple of arrays, one per model input) and return its int8 version.

    Activation scales: ``observer`` ("minmax": the largest magnitude seen; "percentile": that
    percentile of the magnitudes) / 127 per tensor; weights per tensor ``max|w| / 127``.
    """
    batches = [tuple(b) if isinstance(b, tuple | list) else (b,) for b in calibration]
    if not batches:
        raise ValueError("quantize needs at least one calibration batch")
    shapes = {tuple(np.shape(x) for x in b) for b in batches}
    if len(shapes) != 1:
        raise ValueError(f"calibration batches must all have one shape, got {sorted(shapes)}")
    fn = trace_float(model, batches[0])
    p = plan(fn)
    points = set(fn.body.block.args) | {u.output for u in p.units}
    ranges = calibrate(fn, batches, points, _observer(observer, percentile))
    return QuantizedModel(p, ranges)


__all__ = ["quantize_calibrated", "QuantizedModel", "trace_float", "minmax_observer", "percentile_observer"]
