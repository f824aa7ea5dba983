"""The one path every frontend operation takes: infer, run the reference kernel, notify recorders.

``apply`` is how ``functional`` runs an ``mgb`` op eagerly. Recorders (the tracer building IR, the
autodiff tape) observe each application; the numerics always come from the reference kernel, so an
eager run and a replay of its trace agree bit for bit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute

from compiler.core.tensor import amp as _amp
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import DTypeError, numpy_dtype, tensor_type
from dialects.errors import XmgeError
from dialects.tensor import MgbOp, ShapeInferenceError, to_attr
from semantics.kernels import KERNELS, ResultSpec
from semantics.quant_kernels import conform

if TYPE_CHECKING:
    from compiler.tensor import Tensor

# compiler/core/__init__.py -> the repository root holding the four packages
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PACKAGE_ROOTS = tuple(
    os.path.join(_REPO_ROOT, d) + os.sep for d in ("compiler", "dialects", "backends", "passes")
)


class OpError(XmgeError, ValueError, RuntimeError):
    """An operation got operands it cannot accept; names the op and the user's source line. It is a
    RuntimeError too: MegEngine raises its operator errors as RuntimeError, and code catches that."""


class AxisError(OpError, AssertionError):
    """An axis out of range, or repeated where each axis may appear once. An AssertionError too:
    MegEngine checks axes with assertions (``_normalize_axis``), and code catches that."""


class CheckError(OpError, AssertionError):
    """An operand that fails a precondition MegEngine checks with ``assert`` (a rank, a length):
    an AssertionError too, as code written for MegEngine catches that."""


def check_error(label: str, message: str) -> CheckError:
    return CheckError(f"{label}: {message} (at {user_location()})")


def axis_error(label: str, message: str) -> AxisError:
    return AxisError(f"{label}: {message} (at {user_location()})")


def user_location() -> str:
    """``file:line`` of the innermost stack frame outside xmge's own packages."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_ROOTS) and "importlib" not in path:
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


class MissingOperatorError(OpError, NotImplementedError):
    """The API call is valid MegEngine but needs an ``mgb`` operator xmge does not have yet."""


def missing_operator(label: str, what: str, operators: str) -> MissingOperatorError:
    return MissingOperatorError(
        f"{label}: {what} needs MegEngine's {operators} operator, which xmge's mgb dialect does not "
        f"have yet (at {user_location()})"
    )


def op_error(label: str, message: str) -> OpError:
    return OpError(f"{label}: {message} (at {user_location()})")


@dataclass(frozen=True)
class AppliedOp:
    """One eager application of an op, as the recorders see it. ``params`` holds only what the
    caller passed (no defaults), as given, not converted to attributes."""

    op_cls: type[MgbOp]
    inputs: Sequence[Tensor]
    outputs: Sequence[Tensor]
    params: dict[str, Any]
    result_types: Sequence[Attribute]


class Recorder(Protocol):
    def record(self, applied: AppliedOp) -> None: ...


_recorders: list[Recorder] = []


def push_recorder(recorder: Recorder) -> None:
    _recorders.append(recorder)


def pop_recorder(recorder: Recorder) -> None:
    _recorders.remove(recorder)


def active_recorders() -> tuple[Recorder, ...]:
    return tuple(_recorders)


def note_training_only(what: str) -> None:
    """Tell the active recorders that a training-only computation ran (batch statistics of a
    BatchNorm in training mode): a trace records it so that ``dump`` can refuse the graph."""
    for recorder in _recorders:
        note = getattr(recorder, "note_training_only", None)
        if note is not None:
            note(what)


def tensor_type_of(t: Tensor) -> TensorType:
    return tensor_type(t.shape, t.dtype)


def apply(
    op_cls: type[MgbOp],
    inputs: Sequence[Tensor],
    *,
    label: str,
    result_types: Sequence[Attribute] | None = None,
    **params: Any,
) -> list[Tensor]:
    """Run ``op_cls`` on ``inputs`` eagerly and let the active recorders see it."""
    from compiler.tensor import Tensor

    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise op_error(label, f"operand {i} must be a Tensor, got {type(t).__name__}")
    if _amp._enabled and result_types is None:
        inputs, params = _autocast(op_cls, inputs, {k: v for k, v in params.items() if v is not None}, label)
    try:
        types = [tensor_type_of(t) for t in inputs]
    except DTypeError as exc:
        raise op_error(label, str(exc)) from None
    params = {k: v for k, v in params.items() if v is not None}
    full = op_cls.params_with_defaults({k: to_attr(v) for k, v in params.items()})
    if result_types is None:
        try:
            result_types = op_cls.infer(types, **full)
        except ShapeInferenceError as exc:
            raise op_error(label, str(exc)) from None
    specs = []
    for t in result_types:
        assert isinstance(t, TensorType)
        specs.append(ResultSpec(tuple(t.get_shape()), numpy_dtype(t.element_type)))
    arrays = [t._data for t in inputs]
    outs = KERNELS[op_cls](arrays, specs, **full)
    # quantized results carry their parameters in the numpy dtype (MegEngine's metadata)
    tensors = [Tensor._from_array(conform(np.asarray(o), s.dtype)) for o, s in zip(outs, specs, strict=True)]
    if any(t.format == "nhwc" for t in inputs):
        # MegEngine's format propagation: results of NHWC-tagged operands stay NHWC-tagged
        for t in tensors:
            if t.ndim in (4, 5):
                t.format = "nhwc"
    placed = {t._device for t in inputs if t._device is not None}
    if len(placed) == 1:
        # MegEngine computes on its operands' device and leaves the results there
        device = next(iter(placed))
        for t in tensors:
            t._device = device
    applied = AppliedOp(op_cls, inputs, tensors, params, result_types)
    for rec in _recorders:
        rec.record(applied)
    return tensors


# MegEngine's autocast rules (its dtype-promotion transformation): which ops run in low precision
_AMP_LOW = (T.ConvolutionOp, T.ConvolutionBackwardDataOp, T.MatrixMulOp, T.BatchedMatrixMulOp)
_AMP_HIGH = (T.LayerNormOp,)
_AMP_HIGH_ELEMWISE = frozenset(
    "EXP POW LOG EXPM1 LOG1P ACOS ASIN ATAN2 COS SIN LOG_SUM_EXP TAN ASINH ACOSH ATANH SINH COSH "
    "SOFTPLUS HSIGMOID LOGSIGMOID SQRT".split()
)


def _cast(t: Tensor, dtype: str, label: str) -> Tensor:
    if t.dtype == np.dtype(dtype) or t.dtype.kind != "f":
        return t
    (out,) = apply(T.TypeCvtOp, [t], label=label, result_types=[tensor_type(t.shape, dtype)])
    return out


def _autocast(
    op_cls: type[MgbOp], inputs: Sequence[Tensor], params: dict[str, Any], label: str
) -> tuple[Sequence[Tensor], dict[str, Any]]:
    """Inputs (and params) of one op under ``amp.autocast``."""
    low, high = _amp._low_prec_dtype, _amp._high_prec_dtype
    if any(t.dtype.metadata is not None for t in inputs):  # quantized: never autocast
        return inputs, params
    if issubclass(op_cls, _AMP_LOW):
        return [_cast(t, low, label) for t in inputs], {**params, "compute_mode": enums.ComputeMode.FLOAT32}
    if issubclass(op_cls, T.BatchNormOp):
        return [_cast(t, low if i == 0 else high, label) for i, t in enumerate(inputs)], params
    if issubclass(op_cls, _AMP_HIGH):
        return [_cast(t, high, label) for t in inputs], params
    if issubclass(op_cls, T.ElemwiseOp):
        mode = params.get("mode")
        if getattr(mode, "name", str(mode).upper()) in _AMP_HIGH_ELEMWISE:
            return [_cast(t, high, label) for t in inputs], params
    return inputs, params
