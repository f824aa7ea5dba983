"""The state and helpers shared by the ``.mge`` reader's operator functions (:mod:`read_ops`) and
its layout support (:mod:`layouts`): the vars of the graph being read, how an operator's inputs
are fetched and its IR op emitted, and the errors that name the operator.

Constants and shape arithmetic are known while reading (:attr:`ReadVar.value`): they are folded
into their consumers' static parameters, and become ``mgb.const`` only right before a real use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Block, SSAValue

from backends.mge.dtypes import FOUR_BIT, to_element, unpack_4bit
from backends.mge.fbs import MgeFormatError
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import numpy_dtype
from dialects.weights import WeightAttr

if TYPE_CHECKING:
    from backends.mge.container import RawGraph, RawOpr, RawTensor


class MgeUnsupportedError(MgeFormatError):
    """A well-formed file using an operator, format or dtype that xmge does not handle."""


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


@dataclass
class ReadContext:
    graph: RawGraph
    block: Block
    vars: dict[int, ReadVar] = field(default_factory=dict)
    weights: dict[tuple[int, int, str], WeightAttr] = field(default_factory=dict)
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
        ctx.block.add_op(const)
        var.ssa = const.output
    return var.ssa


def value_of(op: RawOpr, var: ReadVar, what: str) -> np.ndarray:
    if var.value is None:
        raise unsupported(op, f"{what} must be known when loading (a constant or derived from shapes)")
    return var.value


def int_values(op: RawOpr, var: ReadVar, what: str) -> list[int]:
    v = value_of(op, var, what)
    if v.dtype.kind not in "iu" or v.ndim > 1 or v.size > 64:
        raise fail(op, f"{what} must be a short integer vector, got {v.dtype} {v.shape}")
    return [int(x) for x in v.reshape(-1)]


def shape_of(op: RawOpr, var: ReadVar, what: str) -> tuple[int, ...]:
    if var.type is None:
        raise fail(op, f"{what} has no known shape")
    return tuple(var.type.get_shape())


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
    except (T.ShapeInferenceError, ValueError, TypeError, KeyError, NotImplementedError) as exc:
        raise fail(op, f"invalid operands or params: {exc}") from exc
    if op.name:
        new.attributes["opr_name"] = StringAttr(op.name)
    ctx.block.add_op(new)
    return new


def emit_one(
    ctx: ReadContext,
    op: RawOpr,
    cls: type[T.MgbOp],
    operands: Sequence[ReadVar],
    result_types: Any = None,
    **params: Any,
) -> None:
    new = emit(ctx, op, cls, operands, result_types, **params)
    res = new.results[0]
    define(ctx, op, 0, ReadVar(type=res.type, ssa=res))  # type: ignore[arg-type]


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
    from dialects.dtypes import element_type

    value = np.asarray(value)
    if value.ndim == 0:
        value = value.reshape(1)  # MegEngine has no 0-d vars: scalars are shape (1,)
    if value.dtype == np.int64:
        value = value.astype(np.int32)
    ttype = TensorType(element_type(value.dtype), list(value.shape))
    define(ctx, op, 0, ReadVar(type=ttype, value=value, shape_only=True))


def foldable(inputs: Sequence[ReadVar]) -> bool:
    return all(v.value is not None for v in inputs) and any(v.shape_only for v in inputs)


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
