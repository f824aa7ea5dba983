"""``.mge`` (MegEngine 1.13, FBS v1 and v2) → ``mgb`` dialect.

Each graph of the file becomes one ``func.func`` (``@main``, then ``@graph1``, ... for files written
with ``append=True``). Host2DeviceCopy inputs become block arguments (``input_names``), graph
outputs the ``func.return`` operands (``output_names``); every emitted op carries the file's var
name as ``name``.

MegEngine computes shapes at run time (GetVarShape → Subtensor → Concat → Reshape); xmge's ops are
static, so every value that only depends on shapes and constants is evaluated while reading
(:class:`_Var.value`) and folded into the consumer's static parameters. Constants become
``mgb.const`` lazily, right before their first real use, so constants that only feed shape
computations or index inputs leave no trace in the IR.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Region, SSAValue

from backends.mge import layouts
from backends.mge import schema as S
from backends.mge.container import RawGraph, RawOpr, RawTensor, parse_file
from backends.mge.dtypes import FOUR_BIT, to_element, unpack_4bit
from backends.mge.fbs import MgeFormatError
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import numpy_dtype
from dialects.weights import WeightAttr


class MgeUnsupportedError(MgeFormatError):
    """A well-formed file using an operator, format or dtype that xmge does not handle."""


# Func attributes the reader sets so that a later write reproduces the file (see writer).
ATTR_USER_INFO = "mge.user_info"
ATTR_OPTIMIZE_OPTIONS = "mge.optimize_options"
ATTR_METADATA_VALID = "mge.metadata_valid"
ATTR_FORMAT = "mge.format"


@dataclass
class _Var:
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
class _Ctx:
    graph: RawGraph
    block: Block
    vars: dict[int, _Var] = field(default_factory=dict)
    weights: dict[tuple[int, int, str], WeightAttr] = field(default_factory=dict)
    layouts: dict[int, Any] | None = None  # block size -> activation layout (layouts.block_layout)


def read_mge(data: bytes | bytearray | memoryview) -> ModuleOp:
    """Read every graph of a ``.mge`` file into one module; MgeFormatError on any problem."""
    graphs = parse_file(data)
    funcs = [graph_to_func(g, "main" if i == 0 else f"graph{i}") for i, g in enumerate(graphs)]
    module = ModuleOp(funcs)
    try:
        module.verify()
    except Exception as exc:  # a file whose ops are individually valid but inconsistent overall
        raise MgeFormatError(f"the graph read from the file does not verify: {exc}") from exc
    return module


def dump_options(fn: func.FuncOp) -> dict[str, bool] | None:
    """The ``optimize_for_inference`` keywords a read graph was dumped with, decoded from its
    metadata's ``optimize_options`` word (MegEngine's ``deserialize_infer_option``); None when
    the file has no metadata."""
    # the option table is the optimizer's; imported here so that reading files does not load it
    from passes.inference.options import keywords_from_word

    word = fn.attributes.get(ATTR_OPTIMIZE_OPTIONS)
    return keywords_from_word(int(word.data)) if isinstance(word, StringAttr) else None


def _where(op: RawOpr) -> str:
    return f"operator #{op.index} ({op.type_name}" + (f" '{op.name}'" if op.name else "") + "): "


def _fail(op: RawOpr, message: str) -> MgeFormatError:
    return MgeFormatError(_where(op) + message, op.offset)


def _unsupported(op: RawOpr, message: str) -> MgeUnsupportedError:
    return MgeUnsupportedError(_where(op) + message, op.offset)


def graph_to_func(graph: RawGraph, name: str = "main") -> func.FuncOp:
    h2d = [op for op in graph.oprs if op.kind == "Host2DeviceCopy"]
    arg_types: list[Attribute] = []
    input_names: list[str] = []
    for op in h2d:
        if len(op.tensors) != 1:
            raise _fail(op, f"needs one tensor describing the input, has {len(op.tensors)}")
        t = op.tensors[0]
        if t.dtype is None:
            raise _fail(op, "the input tensor lacks its dtype")
        arg_types.append(TensorType(to_element(t.dtype, _where(op), op.offset), list(t.shape)))
        input_names.append(t.name or graph.var_names.get(op.outputs[0] if op.outputs else -1, "") or "")
    block = Block(arg_types=arg_types)
    ctx = _Ctx(graph, block)
    args = iter(block.args)
    for op in graph.oprs:
        if op.kind == "Host2DeviceCopy":
            arg = next(args)
            _define(ctx, op, 0, _Var(type=arg.type, ssa=arg))  # type: ignore[arg-type]
            continue
        _convert(ctx, op)
    results: list[SSAValue] = []
    output_names: list[str] = []
    for i, vid in enumerate(graph.outputs):
        var = ctx.vars.get(vid)
        if var is None:
            raise MgeFormatError(f"graph output {i} refers to var {vid}, which no operator defines")
        results.append(_ssa(ctx, var, f"graph output {i}"))
        output_names.append(var.name or f"unnamed{i}")
    if not results:
        raise MgeFormatError("the graph has no outputs", graph.offset)
    block.add_op(func.ReturnOp(*results))
    fn = func.FuncOp(name, (arg_types, [r.type for r in results]), Region(block))
    fn.attributes["input_names"] = ArrayAttr([StringAttr(n) for n in input_names])
    fn.attributes["output_names"] = ArrayAttr([StringAttr(n) for n in output_names])
    meta = graph.metadata
    fn.attributes[ATTR_FORMAT] = StringAttr(graph.format)
    if meta.present:
        fn.attributes[ATTR_METADATA_VALID] = IntegerAttr(int(meta.is_valid), i64)
        fn.attributes[ATTR_USER_INFO] = BytesAttr(meta.user_info)
        fn.attributes[ATTR_OPTIMIZE_OPTIONS] = StringAttr(str(meta.optimize_options))
    return fn


# ----------------------------------------------------------------------------------------------
# vars


def _define(ctx: _Ctx, op: RawOpr, i: int, var: _Var) -> None:
    if i >= len(op.outputs):
        raise _fail(op, f"has {len(op.outputs)} outputs in the file, xmge needs at least {i + 1}")
    vid = op.outputs[i]
    var.name = ctx.graph.var_names.get(vid) or (op.output_names[i] if op.output_names else None) or var.name
    ctx.vars[vid] = var
    owner = var.ssa.owner if var.ssa is not None else None
    if owner is not None and var.name and not var.alias and not isinstance(owner, Block):
        owner.attributes["name"] = StringAttr(var.name)


def _input(ctx: _Ctx, op: RawOpr, k: int) -> _Var:
    if k >= len(op.inputs):
        raise _fail(op, f"needs at least {k + 1} inputs, has {len(op.inputs)}")
    vid = op.inputs[k]
    var = ctx.vars.get(vid)
    if var is None:
        raise _fail(op, f"input {k} refers to var {vid}, which no earlier operator defines")
    if var.unusable:
        raise _fail(op, f"input {k} is {var.unusable}")
    return var


def _ssa(ctx: _Ctx, var: _Var, what: str) -> SSAValue:
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


def _value(op: RawOpr, var: _Var, what: str) -> np.ndarray:
    if var.value is None:
        raise _unsupported(op, f"{what} must be known when loading (a constant or derived from shapes)")
    return var.value


def _int_values(op: RawOpr, var: _Var, what: str) -> list[int]:
    v = _value(op, var, what)
    if v.dtype.kind not in "iu" or v.ndim > 1 or v.size > 64:
        raise _fail(op, f"{what} must be a short integer vector, got {v.dtype} {v.shape}")
    return [int(x) for x in v.reshape(-1)]


def _shape_of(op: RawOpr, var: _Var, what: str) -> tuple[int, ...]:
    if var.type is None:
        raise _fail(op, f"{what} has no known shape")
    return tuple(var.type.get_shape())


def _emit(
    ctx: _Ctx,
    op: RawOpr,
    cls: type[T.MgbOp],
    operands: Sequence[_Var],
    result_types: Any = None,
    **params: Any,
) -> T.MgbOp:
    ssa = [_ssa(ctx, v, f"{op.type_name} input") for v in operands]
    try:
        new = cls.make(ssa, result_types, **params)
    except (T.ShapeInferenceError, ValueError, TypeError, KeyError, NotImplementedError) as exc:
        raise _fail(op, f"invalid operands or params: {exc}") from exc
    if op.name:
        new.attributes["opr_name"] = StringAttr(op.name)
    ctx.block.add_op(new)
    return new


def _emit_one(
    ctx: _Ctx,
    op: RawOpr,
    cls: type[T.MgbOp],
    operands: Sequence[_Var],
    result_types: Any = None,
    **params: Any,
) -> None:
    new = _emit(ctx, op, cls, operands, result_types, **params)
    res = new.results[0]
    _define(ctx, op, 0, _Var(type=res.type, ssa=res))  # type: ignore[arg-type]


def _enum(op: RawOpr, enum: Any, value: int, what: str) -> Any:
    try:
        return enums.from_number(enum, int(value))
    except ValueError as exc:
        raise _fail(op, f"{what}: {exc}") from exc


# ----------------------------------------------------------------------------------------------
# constants


def _const_var(ctx: _Ctx, op: RawOpr, t: RawTensor) -> _Var:
    if t.dtype is None or t.data is None:
        raise _fail(op, "constant tensor lacks its dtype or data")
    elem = to_element(t.dtype, _where(op), op.offset)
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
    return _Var(type=ttype, value=value, const_weight=weight)


def _fold_const(ctx: _Ctx, op: RawOpr, value: np.ndarray, inputs: Sequence[_Var]) -> None:
    """Define output 0 as a load-time value (shape arithmetic)."""
    from dialects.dtypes import element_type

    value = np.asarray(value)
    if value.ndim == 0:
        value = value.reshape(1)  # MegEngine has no 0-d vars: scalars are shape (1,)
    if value.dtype == np.int64:
        value = value.astype(np.int32)
    ttype = TensorType(element_type(value.dtype), list(value.shape))
    _define(ctx, op, 0, _Var(type=ttype, value=value, shape_only=True))


def _foldable(inputs: Sequence[_Var]) -> bool:
    return all(v.value is not None for v in inputs) and any(v.shape_only for v in inputs)


# ----------------------------------------------------------------------------------------------
# operators


def _convert(ctx: _Ctx, op: RawOpr) -> None:
    kind = op.kind
    if kind is None:
        raise _unsupported(op, f"unknown operator type (type id {op.type_id}, version {op.opr_version})")
    handler = _HANDLERS.get(kind)
    if handler is None:
        raise _unsupported(op, f"operator type {kind} is not supported by xmge's reader")
    handler(ctx, op)


def _immutable(ctx: _Ctx, op: RawOpr) -> None:
    if len(op.tensors) != 1:
        raise _fail(op, f"needs exactly one tensor, has {len(op.tensors)}")
    var = _const_var(ctx, op, op.tensors[0])
    var.name = op.tensors[0].name
    _define(ctx, op, 0, var)


def _multi_holder(ctx: _Ctx, op: RawOpr) -> None:
    if len(op.tensors) != len(op.outputs):
        raise _fail(op, f"holds {len(op.tensors)} tensors but has {len(op.outputs)} outputs")
    for i, t in enumerate(op.tensors):
        var = _const_var(ctx, op, t)
        var.name = t.name
        _define(ctx, op, i, var)


def _alias(ctx: _Ctx, op: RawOpr) -> None:
    src = _input(ctx, op, 0)
    _define(
        ctx,
        op,
        0,
        _Var(
            type=src.type,
            value=src.value,
            ssa=src.ssa,
            shape_only=src.shape_only,
            const_weight=src.const_weight,
            alias=True,
        ),
    )


def _conv_params(op: RawOpr, p: dict[str, Any]) -> dict[str, Any]:
    fmt = _enum(op, enums.Format, p["format"], "format")
    if fmt != enums.Format.NCHW and fmt not in layouts.L.ACTIVATION_OF_FORMAT:
        raise _unsupported(op, f"format {fmt.name} is not supported by xmge")
    return {
        "stride": (p["stride_h"], p["stride_w"]),
        "padding": (p["pad_h"], p["pad_w"]),
        "dilation": (p["dilate_h"], p["dilate_w"]),
        "mode": _enum(op, enums.ConvMode, p["mode"], "mode"),
        "sparse": _enum(op, enums.ConvSparse, p["sparse"], "sparse"),
        "compute_mode": _enum(op, enums.ComputeMode, p["compute_mode"], "compute_mode"),
        "format": fmt,
    }


def _convolution(ctx: _Ctx, op: RawOpr) -> None:
    params = _conv_params(op, op.param("Convolution"))
    ins = layouts.conv_operands(op, [_input(ctx, op, 0), _input(ctx, op, 1)], params)
    _emit_one(ctx, op, T.ConvolutionOp, ins, **params)


def _conv_bias(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("ConvBias")
    params = _conv_params(op, p)
    params["nonline_mode"] = _enum(op, enums.NonlineMode, p["nonlineMode"], "nonlineMode")
    if not 2 <= len(op.inputs) <= 4:
        raise _fail(op, f"takes 2 to 4 inputs, has {len(op.inputs)}")
    ins = layouts.conv_operands(op, [_input(ctx, op, k) for k in range(len(op.inputs))], params)
    result_types = None
    if op.output_dtype is not None:
        src, filt = ins[0].type, ins[1].type
        assert src is not None and filt is not None
        try:
            (inferred,) = T.ConvBiasOp.infer([src, filt], **params)
        except (T.ShapeInferenceError, NotImplementedError) as exc:
            raise _fail(op, str(exc)) from exc
        elem = to_element(op.output_dtype, _where(op), op.offset)
        result_types = [TensorType(elem, inferred.get_shape(), inferred.encoding)]
    _emit_one(ctx, op, T.ConvBiasOp, ins, result_types, **params)


def _elemwise(ctx: _Ctx, op: RawOpr) -> None:
    mode = _enum(op, enums.ElemwiseMode, op.param("Elemwise")["mode"], "mode")
    ins = [_input(ctx, op, k) for k in range(len(op.inputs))]
    if not ins:
        raise _fail(op, "has no inputs")
    if _foldable(ins):
        from backends.reference.kernels import ELEMWISE

        fn = ELEMWISE.get(mode)
        if fn is None:
            raise _unsupported(op, f"cannot evaluate elemwise {mode.name} on shapes")
        _fold_const(ctx, op, fn(*[v.value for v in ins]), ins)
        return
    _emit_one(ctx, op, T.ElemwiseOp, layouts.elemwise_operands(ins), mode=mode)


def _elemwise_multi_type(ctx: _Ctx, op: RawOpr) -> None:
    mode = _enum(op, enums.ElemwiseMultiTypeMode, op.param("ElemwiseMultiType")["mode"], "mode")
    ins = layouts.elemwise_operands([_input(ctx, op, k) for k in range(len(op.inputs))])
    types = [v.type for v in ins]
    if not ins or any(t is None for t in types):
        raise _fail(op, "has no inputs or an input without a known type")
    try:
        (inferred,) = T.ElemwiseMultiTypeOp.infer(types, mode=mode)  # type: ignore[arg-type]
    except T.ShapeInferenceError as exc:
        raise _fail(op, str(exc)) from exc
    result_types = None
    if op.output_dtype is not None:
        elem = to_element(op.output_dtype, _where(op), op.offset)
        result_types = [TensorType(elem, inferred.get_shape(), inferred.encoding)]
    _emit_one(ctx, op, T.ElemwiseMultiTypeOp, ins, result_types, mode=mode)


def _powc(ctx: _Ctx, op: RawOpr) -> None:
    x = _input(ctx, op, 0)
    assert x.type is not None
    exp = np.asarray(op.param("PowC")["exp"], dtype=numpy_dtype(x.type.element_type))
    c = _Var(type=TensorType(x.type.element_type, []), value=exp.reshape(()))
    _emit_one(ctx, op, T.ElemwiseOp, [x, c], mode=enums.ElemwiseMode.POW)


def _typecvt(ctx: _Ctx, op: RawOpr) -> None:
    x = _input(ctx, op, 0)
    dt = op.param("DType").get("dtype")
    if dt is None:
        raise _fail(op, "lacks its target dtype")
    elem = to_element(dt, _where(op), op.offset)
    if _foldable([x]):
        assert x.value is not None
        _fold_const(ctx, op, x.value.astype(numpy_dtype(elem)), [x])
        return
    enc = x.type.encoding if x.type is not None else None  # a blocked layout stays
    _emit_one(ctx, op, T.TypeCvtOp, [x], [TensorType(elem, list(_shape_of(op, x, "input")), enc)])


def _pooling(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("Pooling")
    fmt = _enum(op, enums.Format, p["format"], "format")
    if fmt != enums.Format.NCHW and fmt not in layouts.L.ACTIVATION_OF_FORMAT:
        raise _unsupported(op, f"format {fmt.name} is not supported by xmge")
    _emit_one(
        ctx,
        op,
        T.PoolingOp,
        [_input(ctx, op, 0)],
        mode=_enum(op, enums.PoolingMode, p["mode"], "mode"),
        window=(p["window_h"], p["window_w"]),
        stride=(p["stride_h"], p["stride_w"]),
        padding=(p["pad_h"], p["pad_w"]),
        format=fmt,
    )


def _adaptive_pooling(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("AdaptivePooling")
    fmt = _enum(op, enums.Format, p["format"], "format")
    if fmt != enums.Format.NCHW and fmt not in layouts.L.ACTIVATION_OF_FORMAT:
        raise _unsupported(op, f"format {fmt.name} is not supported by xmge")
    out = _int_values(op, _input(ctx, op, 1), "the output shape")
    if len(out) != 2:
        raise _fail(op, f"output shape must have 2 values, got {out}")
    _emit_one(
        ctx,
        op,
        T.AdaptivePoolingOp,
        [_input(ctx, op, 0)],
        mode=_enum(op, enums.PoolingMode, p["mode"], "mode"),
        out_shape=tuple(out),
        format=fmt,
    )


def _matmul(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("MatrixMul")
    cls = T.BatchedMatrixMulOp if op.kind == "BatchedMatrixMul" else T.MatrixMulOp
    _emit_one(
        ctx,
        op,
        cls,
        [_input(ctx, op, 0), _input(ctx, op, 1)],
        transpose_a=bool(p["transposeA"]),
        transpose_b=bool(p["transposeB"]),
        compute_mode=_enum(op, enums.ComputeMode, p["compute_mode"], "compute_mode"),
        format=_enum(op, enums.MatrixMulFormat, p["format"], "format"),
    )


def _reduce(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("Reduce")
    mode = _enum(op, enums.ReduceMode, p["mode"], "mode")
    data_type = _enum(op, enums.ReduceDataType, p["data_type"], "data_type")
    x = _input(ctx, op, 0)
    shape = _shape_of(op, x, "input")
    if len(op.inputs) >= 2:
        target = _int_values(op, _input(ctx, op, 1), "the target shape")
        if len(target) != len(shape):
            raise _fail(op, f"target shape {target} does not match input rank {len(shape)}")
        axes = [a for a, (s, t) in enumerate(zip(shape, target, strict=True)) if s != t]
        if any(target[a] != 1 for a in axes):
            raise _unsupported(op, f"reduction of {shape} to {target} is not a reduction to size-1 axes")
    else:
        axis = int(p["axis"])
        if axis < 0:
            axis += len(shape)
        if not 0 <= axis < len(shape):
            raise _fail(op, f"axis {p['axis']} out of range for shape {shape}")
        axes = [axis]
    if not axes:
        _alias(ctx, op)
        return
    cur = x
    for k, a in enumerate(axes):
        m = mode
        if k > 0 and mode == enums.ReduceMode.SUM_SQR:
            m = enums.ReduceMode.SUM  # later axes sum the already squared partial sums
        new = _emit(ctx, op, T.ReduceOp, [cur], mode=m, axis=a, data_type=data_type)
        cur = _Var(type=new.results[0].type, ssa=new.results[0])  # type: ignore[arg-type]
    _define(ctx, op, 0, cur)


def _reshape(ctx: _Ctx, op: RawOpr) -> None:
    x = _input(ctx, op, 0)
    target = _int_values(op, _input(ctx, op, 1), "the target shape")
    axis = op.param("OptionalAxisV1")["axis"]
    shape = _shape_of(op, x, "input")
    total = math.prod(shape)
    unknown = [i for i, d in enumerate(target) if d < 0]
    if axis != 7:
        if not 0 <= axis < len(target):
            raise _fail(op, f"unspecified axis {axis} out of range for target shape {target}")
        unknown = [axis]
    if len(unknown) > 1:
        raise _fail(op, f"target shape {target} has several unspecified dimensions")
    if unknown:
        rest = math.prod(d for i, d in enumerate(target) if i != unknown[0])
        if rest <= 0 or total % rest:
            raise _fail(op, f"cannot reshape {shape} into {target}")
        target[unknown[0]] = total // rest
    if math.prod(target) != total or min(target, default=1) < 0:
        raise _fail(op, f"cannot reshape {shape} into {tuple(target)}")
    if _foldable([x]):
        assert x.value is not None
        _fold_const(ctx, op, x.value.reshape(target), [x])
        return
    if layouts.read_reshape(ctx, op, x, target):  # a half of an NCHW <-> NCHWx pair
        return
    assert x.type is not None
    _emit_one(ctx, op, T.ReshapeOp, [x], [TensorType(x.type.element_type, target)])


def _broadcast(ctx: _Ctx, op: RawOpr) -> None:
    x = _input(ctx, op, 0)
    target = _int_values(op, _input(ctx, op, 1), "the target shape")
    if _foldable([x]):
        assert x.value is not None
        try:
            _fold_const(ctx, op, np.broadcast_to(x.value, target), [x])
        except ValueError as exc:
            raise _fail(op, str(exc)) from exc
        return
    assert x.type is not None
    _emit_one(ctx, op, T.BroadcastOp, [x], [TensorType(x.type.element_type, target)])


def _dimshuffle(ctx: _Ctx, op: RawOpr) -> None:
    pattern = tuple(op.param("Dimshuffle")["pattern"])
    x = _input(ctx, op, 0)
    if _foldable([x]):
        assert x.value is not None
        perm = [p for p in pattern if p != -1]
        out_shape = [1 if p == -1 else x.value.shape[p] for p in pattern]
        _fold_const(ctx, op, np.transpose(x.value, perm).reshape(out_shape), [x])
        return
    if layouts.read_dimshuffle(ctx, op, x, pattern):  # a half of an NCHW <-> NCHWx pair
        return
    _emit_one(ctx, op, T.DimshuffleOp, [x], pattern=pattern)


def _axis_add_remove(ctx: _Ctx, op: RawOpr) -> None:
    descs = op.param("AxisAddRemove")["desc"]
    methods = tuple(_enum(op, enums.AxisMethod, m, "axis method") for m, _ in descs)
    axes = tuple(a for _, a in descs)
    x = _input(ctx, op, 0)
    if _foldable([x]):
        assert x.value is not None
        v = x.value
        for m, a in zip(methods, axes, strict=True):
            v = np.expand_dims(v, a) if m == enums.AxisMethod.ADD_1 else np.squeeze(v, a)
        _fold_const(ctx, op, v, [x])
        return
    _emit_one(ctx, op, T.AxisAddRemoveOp, [x], methods=methods, axes=axes)


def _concat(ctx: _Ctx, op: RawOpr) -> None:
    ins = [_input(ctx, op, k) for k in range(len(op.inputs))]
    if not ins:
        raise _fail(op, "has no inputs")
    axis = int(op.param("Axis")["axis"])
    nd = len(_shape_of(op, ins[0], "input 0"))
    if axis < 0:
        axis += nd
    if _foldable(ins):
        try:
            _fold_const(ctx, op, np.concatenate([v.value for v in ins], axis=axis), ins)  # type: ignore[misc]
        except ValueError as exc:
            raise _fail(op, str(exc)) from exc
        return
    _emit_one(ctx, op, T.ConcatOp, ins, axis=axis)


def _get_var_shape(ctx: _Ctx, op: RawOpr) -> None:
    ins = [_input(ctx, op, k) for k in range(len(op.inputs))]
    if not ins:
        raise _fail(op, "has no inputs")
    shapes = [_shape_of(op, v, f"input {k}") for k, v in enumerate(ins)]
    try:
        shape = T.broadcast_shapes("GetVarShape", shapes)
    except T.ShapeInferenceError as exc:
        raise _fail(op, str(exc)) from exc
    axis = op.param("OptionalAxisV1")["axis"]
    value = np.asarray(shape, dtype=np.int32)
    if axis != 7:
        if not -len(shape) <= axis < len(shape):
            raise _fail(op, f"axis {axis} out of range for shape {shape}")
        value = value[axis : axis + 1] if axis >= 0 else value[axis:][:1]
    _fold_const(ctx, op, value, ins)


def _subtensor(ctx: _Ctx, op: RawOpr) -> None:
    items = op.param("IndexDescMaskDump")["items"]
    x = _input(ctx, op, 0)
    shape = _shape_of(op, x, "input")
    k = 1
    index: dict[int, Any] = {}
    for axis, has_begin, has_end, has_step, has_idx in items:
        vals = []
        for flag in (has_begin, has_end, has_step, has_idx):
            if flag:
                (v,) = _int_values(op, _input(ctx, op, k), f"index input {k}") or [None]
                if v is None:
                    raise _fail(op, f"index input {k} is empty")
                vals.append(v)
                k += 1
            else:
                vals.append(None)
        a = axis + len(shape) if axis < 0 else axis
        if not 0 <= a < len(shape) or a in index:
            raise _fail(op, f"invalid or repeated index axis {axis} for shape {shape}")
        begin, end, step, idx = vals
        if has_idx:
            i = idx + shape[a] if idx < 0 else idx
            if not 0 <= i < shape[a]:
                raise _fail(op, f"index {idx} out of range for axis {a} of size {shape[a]}")
            index[a] = i
        else:
            if step == 0:
                raise _fail(op, "slice step is zero")
            index[a] = slice(begin, end, step)
    if k != len(op.inputs):
        raise _fail(op, f"has {len(op.inputs)} inputs, its index items use {k}")
    if _foldable([x]):
        assert x.value is not None
        key = tuple(index.get(a, slice(None)) for a in range(len(shape)))
        _fold_const(ctx, op, np.asarray(x.value[key]), [x])
        return
    axes, starts, stops, steps, drop = [], [], [], [], []
    for a in sorted(index):
        v = index[a]
        axes.append(a)
        if isinstance(v, int):
            starts.append(v)
            stops.append(v + 1)
            steps.append(1)
            drop.append(1)
        else:
            start, stop, step = v.indices(shape[a])
            if step < 0 and stop < 0:
                stop = -(shape[a] + 1)  # "before the first element", which a plain -1 cannot say
            starts.append(start)
            stops.append(stop)
            steps.append(step)
            drop.append(0)
    _emit_one(
        ctx,
        op,
        T.SubtensorOp,
        [x],
        axes=tuple(axes),
        starts=tuple(starts),
        stops=tuple(stops),
        steps=tuple(steps),
        drop=tuple(drop),
    )


def _batch_norm(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("BN")
    fwd = _enum(op, enums.BNFwdMode, p["fwd_mode"], "fwd_mode")
    if fwd != enums.BNFwdMode.INFERENCE:
        raise _unsupported(op, "BatchNorm in training mode cannot be run for inference")
    if len(op.inputs) != 5:
        raise _unsupported(
            op, f"BatchNorm with {len(op.inputs)} inputs (xmge reads the 5-input inference form)"
        )
    ins = [_input(ctx, op, k) for k in range(5)]
    new = _emit(
        ctx,
        op,
        T.BatchNormOp,
        ins,
        epsilon=float(p["epsilon"]),
        param_dim=_enum(op, enums.BNParamDim, p["param_dim"], "param_dim"),
        fwd_mode=fwd,
    )
    n = len(op.outputs)
    for i in range(n - 1):
        _define(
            ctx,
            op,
            i,
            _Var(unusable=f"output {i} of a BatchNorm (its statistics), which xmge does not compute"),
        )
    res = new.results[0]
    _define(ctx, op, n - 1, _Var(type=res.type, ssa=res))  # type: ignore[arg-type]


def _softmax(ctx: _Ctx, op: RawOpr) -> None:
    x = _input(ctx, op, 0)
    axis = int(op.param("Softmax")["axis"])
    nd = len(_shape_of(op, x, "input"))
    _emit_one(ctx, op, T.SoftmaxOp, [x], axis=axis + nd if axis < 0 else axis)


def _padding(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("Padding")
    x = _input(ctx, op, 0)
    nd = len(_shape_of(op, x, "input"))
    _emit_one(
        ctx,
        op,
        T.PaddingOp,
        [x],
        front=tuple(p[f"front_offset_dim{i}"] for i in range(nd)),
        back=tuple(p[f"back_offset_dim{i}"] for i in range(nd)),
        value=float(p["padding_val"]),
        mode=_enum(op, enums.PaddingMode, p["padding_mode"], "padding_mode"),
    )


def _convolution_backward_data(ctx: _Ctx, op: RawOpr) -> None:
    params = _conv_params(op, op.param("Convolution"))
    if params.pop("format") != enums.Format.NCHW:
        raise _unsupported(op, "ConvolutionBackwardData is read in format NCHW only")
    if len(op.inputs) not in (2, 3):
        raise _fail(op, f"takes 2 or 3 inputs (filter, diff[, output shape]), has {len(op.inputs)}")
    filt, diff = _input(ctx, op, 0), _input(ctx, op, 1)
    if len(op.inputs) == 3:
        # the output shape input: what it adds to the plain transposed size is output padding
        want = _int_values(op, _input(ctx, op, 2), "the output shape")
        assert filt.type is not None and diff.type is not None
        try:
            (base,) = T.ConvolutionBackwardDataOp.infer([filt.type, diff.type], **params)
        except T.ShapeInferenceError as exc:
            raise _fail(op, str(exc)) from exc
        got = base.get_shape()
        if len(want) != 4 or tuple(want[:2]) != tuple(got[:2]):
            raise _fail(op, f"output shape {want} does not fit the inferred {tuple(got)}")
        params["output_padding"] = (want[2] - got[2], want[3] - got[3])
    _emit_one(ctx, op, T.ConvolutionBackwardDataOp, [filt, diff], **params)


def _resize(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("Resize")
    fmt = _enum(op, enums.Format, p["format"], "format")
    if fmt != enums.Format.NCHW:
        raise _unsupported(op, f"Resize in format {fmt.name} is not supported by xmge (NCHW only)")
    out = _int_values(op, _input(ctx, op, 1), "the output size")
    if len(out) != 2:
        raise _fail(op, f"output size must have 2 values, got {out}")
    imode = _enum(op, enums.InterpolationMode, p["imode"], "imode")
    if imode not in (enums.InterpolationMode.NEAREST, enums.InterpolationMode.LINEAR):
        raise _unsupported(op, f"Resize with interpolation mode {imode.name} is not supported by xmge")
    _emit_one(ctx, op, T.ResizeOp, [_input(ctx, op, 0)], out_shape=tuple(out), imode=imode, format=fmt)


def _layer_norm(ctx: _Ctx, op: RawOpr) -> None:
    p = op.param("LayerNorm")
    affine = bool(p["affine"])
    n_in = 3 if affine else 1
    if len(op.inputs) != n_in:
        raise _fail(op, f"LayerNorm with affine={affine} takes {n_in} inputs, has {len(op.inputs)}")
    new = _emit(
        ctx,
        op,
        T.LayerNormOp,
        [_input(ctx, op, k) for k in range(n_in)],
        affine=affine,
        eps=float(p["eps"]),
        normalized_dim=int(p["normalized_dim"]),
        normalized_size=int(p["normalized_size"]),
    )
    # the statistics first, as aliases, so that the op takes the name of its output 0
    for i in range(1, min(len(op.outputs), 3)):
        res = new.results[i]
        _define(ctx, op, i, _Var(type=res.type, ssa=res, alias=True))  # type: ignore[arg-type]
    _define(ctx, op, 0, _Var(type=new.results[0].type, ssa=new.results[0]))  # type: ignore[arg-type]


def _arg_reduce(ctx: _Ctx, op: RawOpr) -> None:
    x = _input(ctx, op, 0)
    axis = int(op.param("Axis")["axis"])
    nd = len(_shape_of(op, x, "input"))
    cls = T.ArgmaxOp if op.kind == "Argmax" else T.ArgminOp
    _emit_one(ctx, op, cls, [x], axis=axis + nd if axis < 0 else axis)


_HANDLERS = {
    "ImmutableTensor": _immutable,
    "SharedDeviceTensor": _immutable,
    "MultipleDeviceTensorHolder": _multi_holder,
    "MultipleDeviceTensorWithFormatHolder": _multi_holder,  # NHWCD4 weights (Image2D formats)
    "Identity": _alias,
    "Copy": _alias,
    "Convolution": _convolution,
    "ConvBias": _conv_bias,
    "Elemwise": _elemwise,
    "ElemwiseMultiType": _elemwise_multi_type,
    "PowC": _powc,
    "TypeCvt": _typecvt,
    "Pooling": _pooling,
    "AdaptivePooling": _adaptive_pooling,
    "MatrixMul": _matmul,
    "BatchedMatrixMul": _matmul,
    "Reduce": _reduce,
    "Reshape": _reshape,
    "Broadcast": _broadcast,
    "Dimshuffle": _dimshuffle,
    "AxisAddRemove": _axis_add_remove,
    "Concat": _concat,
    "GetVarShape": _get_var_shape,
    "Subtensor": _subtensor,
    "BatchNorm": _batch_norm,
    "Softmax": _softmax,
    "Padding": _padding,
    "ConvolutionBackwardData": _convolution_backward_data,
    "Resize": _resize,
    "LayerNorm": _layer_norm,
    "Argmax": _arg_reduce,
    "Argmin": _arg_reduce,
    "RelayoutFormat": layouts.read_relayout_format,
}
S_KINDS_READ = frozenset(_HANDLERS) | {"Host2DeviceCopy"}
assert S_KINDS_READ <= set(S.BY_KIND), S_KINDS_READ - set(S.BY_KIND)
