"""Post-training int8 quantization of a traced float model.

The float model is traced once (``jit.trace``) and its ``mgb`` function split into *units*, each of
which becomes one or a few int8 operators in MegEngine's quantized form:

* ``conv`` — Convolution [+ BatchNorm (folded)] [+ bias ADD] [+ RELU] →
  ``ConvBias(qint8 src, qint8 weight, qint32 bias, nonlinearity) -> qint8``;
* ``linear`` — MatrixMul [+ bias ADD] [+ RELU] → ``MatrixMul -> qint32``, ``ADD`` of the qint32 bias,
  [RELU], ``TypeCvt -> qint8`` (MegEngine's quantized ``Linear``);
* ``add`` — ADD of two activations [+ RELU] or FUSE_ADD_RELU → ``ElemwiseMultiType QADD`` /
  ``QFUSE_ADD_RELU -> qint8``;
* ``same`` — ops that keep the quantization of their input (pooling, reshape, RELU, axis and
  index ops) run on the int8 values directly;
* ``float`` — anything else runs in float32 on dequantized inputs; its result is quantized again
  where an int8 unit consumes it.

Graph inputs are quantized by a ``TypeCvt`` (QuantStub) and outputs dequantized by a ``TypeCvt``
(DequantStub). Activation scales come from observers run on calibration batches; weights are
quantized per tensor (symmetric, ``max|w| / 127``); biases to ``qint32(s_in * s_w)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from dialects import enums
from dialects import tensor as T
from semantics.interpreter import result_specs
from semantics.kernels import KERNELS

E = enums.ElemwiseMode

# ops that run on int8 values unchanged and keep their input's quantization
SAME_SCALE_OPS: tuple[type[T.MgbOp], ...] = (
    T.PoolingOp,
    T.AdaptivePoolingOp,
    T.ReshapeOp,
    T.BroadcastOp,
    T.AxisAddRemoveOp,
    T.DimshuffleOp,
    T.SubtensorOp,
)


@dataclass
class Unit:
    kind: str  # "conv" | "linear" | "add" | "same" | "float"
    name: str  # the module scope (or op name) it came from
    inputs: list[SSAValue]  # activation operands
    output: SSAValue  # the float value this unit computes
    op: T.MgbOp  # the anchor op (conv, matmul, add, or the op itself)
    weight: np.ndarray | None = None
    weight_name: str | None = None
    bias: np.ndarray | None = None
    relu: bool = False
    ops: list[Any] = field(default_factory=list)  # the float ops it replaces, anchor first

    def absorb(self, op: Any) -> None:
        self.ops.append(op)
        self.output = op.results[0]


@dataclass
class Plan:
    fn: func.FuncOp
    units: list[Unit] = field(default_factory=list)
    batch: int = 1


def _const(v: SSAValue) -> np.ndarray | None:
    op = v.owner
    if isinstance(op, T.ConstOp) and not op.value.is_elided:
        return np.asarray(op.numpy(), np.float32)
    return None


def _name(op: Any, fallback: str) -> str:
    for key in ("name", "scope"):
        a = op.attributes.get(key)
        if a is not None and getattr(a, "data", ""):
            return str(a.data)
    return fallback


def _single_user(v: SSAValue) -> Any:
    """The op using ``v``, if ``v`` has exactly one use."""
    if not v.has_one_use():
        return None
    return next(iter(v.uses)).operation


def _mode(op: Any) -> Any:
    return op.params()["mode"] if isinstance(op, T.ElemwiseOp) else None


def _const_operand(op: T.ElemwiseOp, v: SSAValue) -> np.ndarray | None:
    """The constant other operand of a binary elemwise op that uses ``v``."""
    a, b = op.operands
    other = b if a is v else a
    return _const(other)


def _absorb_bias_relu(unit: Unit, out_channels: int, bias_shapes: Sequence[tuple[int, ...]]) -> None:
    """Fold a following ``ADD const`` / ``FUSE_ADD_RELU const`` and ``RELU`` into the unit."""
    user = _single_user(unit.output)
    if _mode(user) in (E.ADD, E.FUSE_ADD_RELU) and len(user.operands) == 2:
        c = _const_operand(user, unit.output)
        if c is not None and c.shape in bias_shapes:
            unit.bias = unit.bias + c.reshape(-1) if unit.bias is not None else c.reshape(-1).copy()
            unit.relu = _mode(user) == E.FUSE_ADD_RELU
            unit.absorb(user)
            user = _single_user(unit.output)
    if not unit.relu and _mode(user) == E.RELU:
        unit.relu = True
        unit.absorb(user)
    if unit.bias is None:
        unit.bias = np.zeros(out_channels, np.float32)


def _fold_batch_norm(unit: Unit) -> None:
    bn = _single_user(unit.output)
    if not isinstance(bn, T.BatchNormOp) or bn.operands[0] is not unit.output:
        return
    vals = [_const(v) for v in bn.operands[1:]]
    if any(v is None for v in vals):
        return
    s, b, m, var = (np.asarray(v, np.float32).reshape(-1) for v in vals)  # type: ignore[arg-type]
    k = s / np.sqrt(var + np.float32(bn.params()["epsilon"]))
    assert unit.weight is not None
    w = unit.weight
    if unit.op.params()["sparse"] == enums.ConvSparse.GROUP:
        unit.weight = w * k.reshape(w.shape[0], w.shape[1], *([1] * (w.ndim - 2)))
    else:
        unit.weight = w * k.reshape(-1, *([1] * (w.ndim - 1)))
    bias = unit.bias if unit.bias is not None else np.zeros_like(k)
    unit.bias = (bias - m) * k + b
    unit.absorb(bn)


def plan(fn: func.FuncOp) -> Plan:
    """Split a traced float function into quantization units (see the module docstring)."""
    result = Plan(fn)
    taken: set[Any] = set()
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp) or isinstance(op, T.ConstOp) or op in taken:
            continue
        assert isinstance(op, T.MgbOp)
        unit = _match(op)
        taken.update(unit.ops)
        result.units.append(unit)
    args = fn.body.block.args
    if args:
        t = args[0].type
        assert isinstance(t, TensorType)
        result.batch = int(t.get_shape()[0]) if t.get_shape() else 1
    return result


def _match(op: T.MgbOp) -> Unit:
    name = _name(op, op.name)
    if isinstance(op, T.ConvolutionOp) and _const(op.operands[1]) is not None:
        p = op.params()
        if p["format"] == enums.Format.NCHW and p["mode"] == enums.ConvMode.CROSS_CORRELATION:
            w = _const(op.operands[1])
            unit = Unit("conv", name, [op.operands[0]], op.results[0], op, weight=w, ops=[op])
            unit.weight_name = _name(op.operands[1].owner, name + ".weight")
            _fold_batch_norm(unit)
            oc = op.results[0].type.get_shape()[1]  # type: ignore[attr-defined]
            _absorb_bias_relu(unit, oc, [(1, oc, 1, 1)])
            return unit
    if (
        isinstance(op, T.MatrixMulOp)
        and _const(op.operands[1]) is not None
        and not op.params()["transpose_a"]
    ):
        w = _const(op.operands[1])
        assert w is not None
        if not op.params()["transpose_b"]:
            w = w.T
        unit = Unit(
            "linear", name, [op.operands[0]], op.results[0], op, weight=np.ascontiguousarray(w), ops=[op]
        )
        unit.weight_name = _name(op.operands[1].owner, name + ".weight")
        oc = w.shape[0]
        _absorb_bias_relu(unit, oc, [(oc,), (1, oc)])
        return unit
    if isinstance(op, T.ElemwiseOp) and _mode(op) in (E.ADD, E.FUSE_ADD_RELU):
        a, b = op.operands
        if _const(a) is None and _const(b) is None:
            unit = Unit("add", name, [a, b], op.results[0], op, relu=_mode(op) == E.FUSE_ADD_RELU, ops=[op])
            user = _single_user(unit.output)
            if not unit.relu and _mode(user) == E.RELU:
                unit.relu = True
                unit.absorb(user)
            return unit
    activations = [v for v in op.operands if _const(v) is None]
    if isinstance(op, SAME_SCALE_OPS) or (_mode(op) == E.RELU):
        return Unit("same", name, activations, op.results[0], op, ops=[op])
    return Unit("float", name, list(op.operands), op.results[0], op, ops=[op])


# ----------------------------------------------------------------------------------------------
# Calibration


Observer = Callable[[list[np.ndarray]], float]


def minmax_observer(samples: list[np.ndarray]) -> float:
    """Symmetric min/max: the largest magnitude seen."""
    return float(max(np.abs(s).max() for s in samples))


def percentile_observer(percentile: float) -> Observer:
    """Symmetric percentile: the ``percentile``-th percentile of the magnitudes seen."""

    def observe(samples: list[np.ndarray]) -> float:
        return float(np.percentile(np.concatenate([np.abs(s).reshape(-1) for s in samples]), percentile))

    return observe


def calibrate(
    fn: func.FuncOp, batches: Sequence[Sequence[np.ndarray]], points: set[SSAValue], observer: Observer
) -> dict[SSAValue, float]:
    """Run ``fn`` on each calibration batch with the reference kernels; the observer's range of
    every value in ``points``."""
    seen: dict[SSAValue, list[np.ndarray]] = {p: [] for p in points}
    for batch in batches:
        env: dict[SSAValue, np.ndarray] = {}
        for arg, x in zip(fn.body.block.args, batch, strict=True):
            env[arg] = np.asarray(x, np.float32)
        for op in fn.body.block.ops:
            if isinstance(op, func.ReturnOp):
                break
            if isinstance(op, T.ConstOp):
                env[op.output] = op.numpy()
                continue
            assert isinstance(op, T.MgbOp)
            outs = KERNELS[type(op)]([env[v] for v in op.operands], result_specs(op), **op.params())
            for r, v in zip(op.results, outs, strict=True):
                env[r] = v
        for p in points:
            seen[p].append(env[p])
    return {p: max(observer(s), 1e-8) for p, s in seen.items()}
