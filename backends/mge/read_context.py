"""The state and helpers shared by the ``.mge`` reader's operator functions (:mod:`read_ops`) and
its layout support (:mod:`layouts`): the vars of the graph being read, how an operator's inputs
are fetched and its IR op emitted, and the errors that name the operator.

Constants and shape arithmetic are known while reading (:attr:`ReadVar.value`): they are folded
into their consumers' static parameters, and become ``mgb.const`` only right before a real use.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import StringAttr, TensorType, i32
from xdsl.ir import Block, SSAValue

from backends.mge.dtypes import FOUR_BIT, to_element, unpack_4bit
from backends.mge.fbs import MgeFormatError
from dialects import enums, limits
from dialects import tensor as T
from dialects.dtypes import is_float, numpy_dtype
from dialects.weights import WeightAttr

if TYPE_CHECKING:
    from backends.mge.container import RawGraph, RawOpr, RawTensor


class MgeUnsupportedError(MgeFormatError):
    """A well-formed file using an operator, format or dtype that xmge does not handle."""


# ----------------------------------------------------------------------------------------------
# size limits: a file's numbers may not make xmge allocate or compute without bound

# one budget for every loader (dialects.limits): the same defaults and variables
MAX_TENSOR_BYTES_ENV = limits.MAX_TENSOR_BYTES_ENV
MAX_FOLDED_BYTES_ENV = limits.MAX_FOLDED_BYTES_ENV
DEFAULT_MAX_TENSOR_BYTES = limits.DEFAULT_MAX_TENSOR_BYTES
DEFAULT_MAX_FOLDED_BYTES = limits.DEFAULT_MAX_FOLDED_BYTES
FOLD_SMALL_INT_ELEMENTS = 64
"""int32 operands (MegEngine's shape dtype) of at most this many elements count as shape values:
an op taking only such constants is evaluated while reading, as MegEngine's static value
inference does."""


def _limit(env: str, default: int) -> int:
    raw = os.environ.get(env)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise MgeFormatError(f"{env}={raw!r} is not a number of bytes") from None
    return max(value, 1)


def max_tensor_bytes() -> int:
    return _limit(MAX_TENSOR_BYTES_ENV, DEFAULT_MAX_TENSOR_BYTES)


def max_folded_bytes() -> int:
    return _limit(MAX_FOLDED_BYTES_ENV, DEFAULT_MAX_FOLDED_BYTES)


def check_tensor_size(op: RawOpr, shape: Sequence[int], itemsize: int, what: str) -> None:
    """MgeFormatError when a tensor of ``shape`` would exceed the per-tensor memory cap."""
    nbytes = math.prod(int(d) for d in shape) * itemsize
    cap = max_tensor_bytes()
    if nbytes > cap:
        raise fail(
            op,
            f"{what} of shape {tuple(shape)} would need {nbytes} bytes, more than the limit of {cap} "
            f"({MAX_TENSOR_BYTES_ENV})",
        )


@dataclass
class ReadVar:
    type: TensorType | None = None
    value: np.ndarray | None = None  # known while reading (constants and shape arithmetic)
    ssa: SSAValue | None = None
    shape_only: bool = False  # derived from GetVarShape: folded, never emitted
    name: str | None = None
    const_weight: WeightAttr | None = None  # the file's bytes for a constant, shared by position
    unusable: str | None = None  # e.g. BatchNorm's statistics outputs
    alias: bool = False  # another var's value under a new id (Identity): its op keeps its name
    pending: Any = None  # half of a relayout pair (layouts.Pending), emitted only if used alone
    opr_name: str | None = None  # a constant's operator name, where the file keeps it


@dataclass
class ReadContext:
    graph: RawGraph
    block: Block
    vars: dict[int, ReadVar] = field(default_factory=dict)
    weights: dict[tuple[int, int, str], WeightAttr] = field(default_factory=dict)
    folded_bytes: int = 0  # bytes of values evaluated while reading (max_folded_bytes)
    total_bytes: int = 0  # bytes of every result the graph computes (limits.max_total_bytes)
    started: float = field(default_factory=time.monotonic)  # for the folding time (max_fold_seconds)
    layouts: dict[int, Any] | None = None  # block size -> activation layout (layouts.block_layout)


def where(op: RawOpr) -> str:
    return f"operator #{op.index} ({op.type_name}" + (f" '{op.name}'" if op.name else "") + "): "


def fail(op: RawOpr, message: str) -> MgeFormatError:
    return MgeFormatError(where(op) + message, op.offset)


def unsupported(op: RawOpr, message: str) -> MgeUnsupportedError:
    return MgeUnsupportedError(where(op) + message, op.offset)


# ----------------------------------------------------------------------------------------------
# vars


def define(ctx: ReadContext, op: RawOpr, i: int, var: ReadVar) -> None:
    if i >= len(op.outputs):
        raise fail(op, f"has {len(op.outputs)} outputs in the file, xmge needs at least {i + 1}")
    vid = op.outputs[i]
    var.name = ctx.graph.var_names.get(vid) or (op.output_names[i] if op.output_names else None) or var.name
    if not var.name and op.name and len(op.outputs) == 1:
        var.name = op.name  # MegBrain: a var without a name of its own is called after its operator
    ctx.vars[vid] = var
    owner = var.ssa.owner if var.ssa is not None else None
    if owner is not None and var.name and not var.alias and not isinstance(owner, Block):
        owner.attributes["name"] = StringAttr(var.name)


def input_var(ctx: ReadContext, op: RawOpr, k: int) -> ReadVar:
    if k >= len(op.inputs):
        raise fail(op, f"needs at least {k + 1} inputs, has {len(op.inputs)}")
    vid = op.inputs[k]
    var = ctx.vars.get(vid)
    if var is None:
        raise fail(op, f"input {k} refers to var {vid}, which no earlier operator defines")
    if var.unusable:
        raise fail(op, f"input {k} is {var.unusable}")
    return var


def ssa_of(ctx: ReadContext, var: ReadVar, what: str) -> SSAValue:
    """The IR value of a var, emitting its ``mgb.const`` on first use."""
    if var.ssa is None and var.pending is not None:
        var.ssa = var.pending.materialize()
    if var.ssa is None:
        assert var.value is not None and var.type is not None, what
        weight = var.const_weight or WeightAttr(np.ascontiguousarray(var.value).tobytes())
        const = T.ConstOp.create(result_types=[var.type], properties={"value": weight})
        if var.name:
            const.attributes["name"] = StringAttr(var.name)
        if var.opr_name:
            const.attributes["opr_name"] = StringAttr(var.opr_name)
        ctx.block.add_op(const)
        var.ssa = const.output
    return var.ssa


def value_of(op: RawOpr, var: ReadVar, what: str) -> np.ndarray:
    if var.value is None:
        raise unsupported(op, f"{what} must be known when loading (a constant or derived from shapes)")
    return var.value


def int_values(op: RawOpr, var: ReadVar, what: str) -> list[int]:
    """A short vector of sizes or indices. Float values are truncated toward zero, as MegEngine
    does when it copies a float tensor into a shape (``copy_tensor_value_to_shape``)."""
    v = value_of(op, var, what)
    if v.dtype.kind not in "iuf" or v.ndim > 1 or v.size > 64:
        raise fail(op, f"{what} must be a short integer vector, got {v.dtype} {v.shape}")
    if v.dtype.kind == "f":
        if not np.all(np.isfinite(v)) or np.any(np.abs(v) >= 2**62):
            raise fail(op, f"{what} holds values that are not sizes: {v.tolist()}")
        v = np.trunc(v).astype(np.int64)
    return [int(x) for x in v.reshape(-1)]


def shape_of(op: RawOpr, var: ReadVar, what: str) -> tuple[int, ...]:
    if var.type is None:
        raise fail(op, f"{what} has no known shape")
    return tuple(var.type.get_shape())


# what an op's inference raises on operands or params it cannot take
_BAD_PARAMS = (T.ShapeInferenceError, ValueError, TypeError, KeyError, NotImplementedError, OverflowError)


def emit(
    ctx: ReadContext,
    op: RawOpr,
    cls: type[T.MgbOp],
    operands: Sequence[ReadVar],
    result_types: Any = None,
    **params: Any,
) -> T.MgbOp:
    ssa = [ssa_of(ctx, v, f"{op.type_name} input") for v in operands]
    try:
        new = cls.make(ssa, result_types, **params)
    except _BAD_PARAMS as exc:
        raise fail(op, f"invalid operands or params: {exc}") from exc
    _check_sizes(op, new)
    _count_total(ctx, op, new)
    if op.name:
        new.attributes["opr_name"] = StringAttr(op.name)
    ctx.block.add_op(new)
    return new


def _working_itemsize(element: Any) -> int:
    """Bytes per element the reference kernels use: integer and quantized tensors are widened to
    int64/float64 accumulators, so an int8 tensor under the cap in int8 could need 8x the memory."""
    itemsize = numpy_dtype(element).itemsize
    return itemsize if is_float(element) else max(itemsize, 8)


def _check_sizes(op: RawOpr, new: T.MgbOp) -> None:
    """Every result, and the padded copy of operand 0 that padding ops build, within the cap (at
    the width the reference kernels compute in)."""
    for i, r in enumerate(new.results):
        t = r.type
        assert isinstance(t, TensorType)
        check_tensor_size(op, t.get_shape(), _working_itemsize(t.element_type), f"output {i}")
    padding = new.params().get("padding")
    if padding is not None and new.operands:
        src = new.operands[0].type
        assert isinstance(src, TensorType)
        shape = list(src.get_shape())
        pads = [int(p) for p in padding]
        if len(shape) >= len(pads):  # NCHW: padding applies to the trailing spatial axes
            for k, p in enumerate(pads):
                shape[len(shape) - len(pads) + k] += 2 * p
            check_tensor_size(op, shape, _working_itemsize(src.element_type), "the padded input")


def emit_values(
    ctx: ReadContext,
    op: RawOpr,
    cls: type[T.MgbOp],
    operands: Sequence[ReadVar],
    result_types: Any = None,
    **params: Any,
) -> list[ReadVar]:
    """The results of ``cls`` on ``operands``: evaluated now with the op's reference kernel when
    every operand is known while reading and the op computes shapes (:func:`foldable`), otherwise
    an IR op appended to the graph."""
    if foldable(operands):
        return evaluate(ctx, op, cls, operands, result_types, **params)
    new = emit(ctx, op, cls, operands, result_types, **params)
    return [ReadVar(type=r.type, ssa=r) for r in new.results]  # type: ignore[arg-type]


def evaluate(
    ctx: ReadContext,
    op: RawOpr,
    cls: type[T.MgbOp],
    operands: Sequence[ReadVar],
    result_types: Any = None,
    **params: Any,
) -> list[ReadVar]:
    """Run ``cls``'s reference kernel on known operand values (bounded by max_folded_bytes)."""
    from semantics.kernels import KERNELS, ResultSpec  # the reader needs them only here

    kernel = KERNELS.get(cls)
    if kernel is None:
        raise unsupported(op, f"cannot evaluate {cls.name} while loading (no reference kernel)")
    props = {k: T.to_attr(v) for k, v in params.items() if v is not None}
    full = cls.params_with_defaults(props)
    types = [v.type for v in operands]
    try:
        if result_types is None:
            result_types = cls.infer(types, **full)
    except _BAD_PARAMS as exc:
        raise fail(op, f"invalid operands or params: {exc}") from exc
    specs = [ResultSpec(tuple(t.get_shape()), numpy_dtype(t.element_type)) for t in result_types]
    _count_folded(ctx, op, sum(math.prod(s.shape) * s.dtype.itemsize for s in specs))
    try:
        outs = kernel([v.value for v in operands], specs, **full)
    except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError, NotImplementedError) as exc:
        raise fail(op, f"cannot evaluate {cls.name} on its known inputs: {exc}") from exc
    return [
        _known(np.asarray(v).astype(s.dtype, copy=False).reshape(s.shape))
        for v, s in zip(outs, specs, strict=True)
    ]


def _count_folded(ctx: ReadContext, op: RawOpr, nbytes: int) -> None:
    """Add ``nbytes`` to the values evaluated while reading; past the cap (or past the time allowed
    for folding) the graph is refused."""
    ctx.folded_bytes += nbytes
    cap = max_folded_bytes()
    if ctx.folded_bytes > cap:
        raise fail(op, f"the values evaluated while loading exceed {cap} bytes ({MAX_FOLDED_BYTES_ENV})")
    elapsed, seconds = time.monotonic() - ctx.started, _fold_seconds()
    if elapsed > seconds:
        raise fail(
            op,
            f"reading and folding ran {elapsed:.1f} s, more than the {seconds:g} s allowed "
            f"({limits.MAX_FOLD_SECONDS_ENV})",
        )


def _fold_seconds() -> float:
    try:
        return limits.max_fold_seconds()
    except limits.LimitError as exc:
        raise MgeFormatError(str(exc)) from None


def _count_total(ctx: ReadContext, op: RawOpr, new: T.MgbOp) -> None:
    """Every result of the graph together within the whole-load cap (the reference keeps them)."""
    for r in new.results:
        t = r.type
        assert isinstance(t, TensorType)
        ctx.total_bytes += math.prod(int(d) for d in t.get_shape()) * _working_itemsize(t.element_type)
    cap = _limit(limits.MAX_TOTAL_BYTES_ENV, limits.DEFAULT_MAX_TOTAL_BYTES)
    if ctx.total_bytes > cap:
        raise fail(
            op,
            f"the graph's tensors together would need {ctx.total_bytes} bytes, more than the limit of "
            f"{cap} ({limits.MAX_TOTAL_BYTES_ENV})",
        )


def _known(value: np.ndarray) -> ReadVar:
    """A value known while reading (computed from shapes or small constants), as a var."""
    from dialects.dtypes import element_type

    if value.ndim == 0:
        value = value.reshape(1)  # MegEngine has no 0-d vars: scalars are shape (1,)
    ttype = TensorType(element_type(value.dtype), list(value.shape))
    return ReadVar(type=ttype, value=value, shape_only=True)


def emit_one(
    ctx: ReadContext,
    op: RawOpr,
    cls: type[T.MgbOp],
    operands: Sequence[ReadVar],
    result_types: Any = None,
    **params: Any,
) -> None:
    define(ctx, op, 0, emit_values(ctx, op, cls, operands, result_types, **params)[0])


def enum_of(op: RawOpr, enum: Any, value: int, what: str) -> Any:
    try:
        return enums.from_number(enum, int(value))
    except ValueError as exc:
        raise fail(op, f"{what}: {exc}") from exc


# ----------------------------------------------------------------------------------------------
# constants


def const_var(ctx: ReadContext, op: RawOpr, t: RawTensor) -> ReadVar:
    if t.dtype is None or t.data is None:
        raise fail(op, "constant tensor lacks its dtype or data")
    elem = to_element(t.dtype, where(op), op.offset)
    ttype = TensorType(elem, list(t.shape))
    key = (t.data_pos, len(t.data), str(elem))
    weight = ctx.weights.get(key)
    if weight is None:
        # one bytes object per distinct blob: a file repeating one blob stays cheap to read
        raw = bytes(t.data)
        if t.dtype.name in FOUR_BIT:  # 4-bit: packed in the file, a byte per value in xmge
            raw = unpack_4bit(raw, t.shape, t.dtype).tobytes()
        weight = WeightAttr(raw)
        ctx.weights[key] = weight
    value = np.frombuffer(weight.data.data, dtype=numpy_dtype(elem)).reshape(t.shape)
    return ReadVar(type=ttype, value=value, const_weight=weight)


def fold_const(ctx: ReadContext, op: RawOpr, value: np.ndarray, inputs: Sequence[ReadVar]) -> None:
    """Define output 0 as a load-time value (shape arithmetic)."""
    value = np.asarray(value)
    if value.dtype == np.int64:
        if value.size and (value.max() > np.iinfo(np.int32).max or value.min() < np.iinfo(np.int32).min):
            raise fail(op, f"shape value {value.tolist()} does not fit in int32")
        value = value.astype(np.int32)
    _count_folded(ctx, op, value.nbytes)
    define(ctx, op, 0, _known(value))


def foldable(inputs: Sequence[ReadVar]) -> bool:
    """Whether an op on ``inputs`` computes a shape-like value to evaluate while reading: all its
    inputs are known and one derives from shapes, or all are small integer constants."""
    if not inputs or any(v.value is None for v in inputs):
        return False
    if any(v.shape_only for v in inputs):
        return True
    return all(
        v.type is not None
        and v.type.element_type == i32
        and v.value is not None
        and v.value.size <= FOLD_SMALL_INT_ELEMENTS
        for v in inputs
    )


def read_alias(ctx: ReadContext, op: RawOpr) -> None:
    src = input_var(ctx, op, 0)
    define(
        ctx,
        op,
        0,
        ReadVar(
            type=src.type,
            value=src.value,
            ssa=src.ssa,
            shape_only=src.shape_only,
            const_weight=src.const_weight,
            alias=True,
        ),
    )
