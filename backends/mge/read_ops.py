"""One function per MegEngine operator kind: a raw ``.mge`` operator record -> ``mgb`` IR.

Each is one row's ``read`` of :data:`backends.mge.oprs.OPRS`; the shared state and helpers are in
:mod:`backends.mge.read_context`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import Float32Type, IntegerType, TensorType

import backends.mge.layouts as layouts
from backends.mge.dtypes import to_element
from backends.mge.read_context import (
    ReadContext,
    ReadVar,
    const_var,
    define,
    emit,
    emit_one,
    emit_values,
    enum_of,
    fail,
    fold_const,
    foldable,
    input_var,
    int_values,
    read_alias,
    shape_of,
    unsupported,
    where,
)
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import is_float, numpy_dtype

if TYPE_CHECKING:
    from backends.mge.container import RawOpr


def read_immutable(ctx: ReadContext, op: RawOpr) -> None:
    if len(op.tensors) != 1:
        raise fail(op, f"needs exactly one tensor, has {len(op.tensors)}")
    var = const_var(ctx, op, op.tensors[0])
    var.name = op.tensors[0].name
    var.opr_name = op.name
    define(ctx, op, 0, var)


def read_multi_holder(ctx: ReadContext, op: RawOpr) -> None:
    if len(op.tensors) != len(op.outputs):
        raise fail(op, f"holds {len(op.tensors)} tensors but has {len(op.outputs)} outputs")
    for i, t in enumerate(op.tensors):
        var = const_var(ctx, op, t)
        var.name = t.name
        define(ctx, op, i, var)


def _tensor_format(op: RawOpr, p: dict[str, Any]) -> Any:
    """A conv/pooling param's ``format``: NCHW or a blocked layout xmge has (layouts.L)."""
    fmt = enum_of(op, enums.Format, p["format"], "format")
    if fmt != enums.Format.NCHW and fmt not in layouts.L.ACTIVATION_OF_FORMAT:
        raise unsupported(op, f"format {fmt.name} is not supported by xmge")
    return fmt


def _is_int8(element: Any) -> bool:
    try:
        dt = numpy_dtype(element)
    except Exception:  # noqa: BLE001 - an element type numpy cannot store is no int8
        return False
    return dt.kind in "iu" and dt.itemsize == 1


# formats whose kernels exist only for some operand dtypes (MegEngine's conv algorithms): a file
# claiming another would have the reference and the generated kernels read the filter differently
_FORMAT_OPERANDS: dict[Any, tuple[str, Any]] = {
    enums.Format.NCHW44_DOT: ("8-bit integer", _is_int8),
    enums.Format.NCHW32: ("8-bit integer", _is_int8),
    enums.Format.CHWN4: ("8-bit integer", _is_int8),
    enums.Format.NCHW64: ("4- or 8-bit integer", lambda e: not is_float(e)),
    enums.Format.NCHW88: ("float", is_float),
}


def _check_format_operands(op: RawOpr, fmt: Any, ins: Sequence[ReadVar]) -> None:
    """A conv's ``format`` must be one its operands' dtypes allow (a float32 ConvBias in
    NCHW44_DOT is a corrupt file, not a layout to guess)."""
    rule = _FORMAT_OPERANDS.get(fmt)
    if rule is None or not ins or ins[0].type is None:
        return
    needs, allowed = rule
    element = ins[0].type.element_type
    if not allowed(element):
        raise fail(op, f"format {fmt.name} needs {needs} operands, but the input is {element}")


def _conv_params(op: RawOpr, p: dict[str, Any]) -> dict[str, Any]:
    fmt = _tensor_format(op, p)
    return {
        "stride": (p["stride_h"], p["stride_w"]),
        "padding": (p["pad_h"], p["pad_w"]),
        "dilation": (p["dilate_h"], p["dilate_w"]),
        "mode": enum_of(op, enums.ConvMode, p["mode"], "mode"),
        "sparse": enum_of(op, enums.ConvSparse, p["sparse"], "sparse"),
        "compute_mode": enum_of(op, enums.ComputeMode, p["compute_mode"], "compute_mode"),
        "format": fmt,
    }


def read_convolution(ctx: ReadContext, op: RawOpr) -> None:
    params = _conv_params(op, op.param("Convolution"))
    ins = layouts.conv_operands(op, [input_var(ctx, op, 0), input_var(ctx, op, 1)], params)
    _check_format_operands(op, params["format"], ins)
    emit_one(ctx, op, T.ConvolutionOp, ins, **params)


def read_conv_bias(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("ConvBias")
    params = _conv_params(op, p)
    params["nonline_mode"] = enum_of(op, enums.NonlineMode, p["nonlineMode"], "nonlineMode")
    if not 2 <= len(op.inputs) <= 4:
        raise fail(op, f"takes 2 to 4 inputs, has {len(op.inputs)}")
    ins = layouts.conv_operands(op, [input_var(ctx, op, k) for k in range(len(op.inputs))], params)
    _check_format_operands(op, params["format"], ins)
    result_types = None
    if op.output_dtype is not None:
        src, filt = ins[0].type, ins[1].type
        assert src is not None and filt is not None
        try:
            (inferred,) = T.ConvBiasOp.infer([src, filt], **params)
        except (T.ShapeInferenceError, NotImplementedError) as exc:
            raise fail(op, str(exc)) from exc
        elem = to_element(op.output_dtype, where(op), op.offset)
        result_types = [TensorType(elem, inferred.get_shape(), inferred.encoding)]
    emit_one(ctx, op, T.ConvBiasOp, ins, result_types, **params)


def read_elemwise(ctx: ReadContext, op: RawOpr) -> None:
    mode = enum_of(op, enums.ElemwiseMode, op.param("Elemwise")["mode"], "mode")
    ins = [input_var(ctx, op, k) for k in range(len(op.inputs))]
    if not ins:
        raise fail(op, "has no inputs")
    if len(ins) != T.ELEMWISE_ARITY[mode]:  # before folding calls the mode's function with them
        raise fail(op, f"elemwise {mode.name} takes {T.ELEMWISE_ARITY[mode]} inputs, got {len(ins)}")
    if foldable(ins):
        from semantics.kernels import ELEMWISE

        fn = ELEMWISE.get(mode)
        if fn is None:
            raise unsupported(op, f"cannot evaluate elemwise {mode.name} on shapes")
        fold_const(ctx, op, fn(*[v.value for v in ins]), ins)
        return
    emit_one(ctx, op, T.ElemwiseOp, layouts.elemwise_operands(ins), mode=mode)


def read_elemwise_multi_type(ctx: ReadContext, op: RawOpr) -> None:
    mode = enum_of(op, enums.ElemwiseMultiTypeMode, op.param("ElemwiseMultiType")["mode"], "mode")
    ins = layouts.elemwise_operands([input_var(ctx, op, k) for k in range(len(op.inputs))])
    types = [v.type for v in ins]
    if not ins or any(t is None for t in types):
        raise fail(op, "has no inputs or an input without a known type")
    try:
        (inferred,) = T.ElemwiseMultiTypeOp.infer(types, mode=mode)  # type: ignore[arg-type]
    except T.ShapeInferenceError as exc:
        raise fail(op, str(exc)) from exc
    result_types = None
    if op.output_dtype is not None:
        elem = to_element(op.output_dtype, where(op), op.offset)
        result_types = [TensorType(elem, inferred.get_shape(), inferred.encoding)]
    emit_one(ctx, op, T.ElemwiseMultiTypeOp, ins, result_types, mode=mode)


def read_powc(ctx: ReadContext, op: RawOpr) -> None:
    x = input_var(ctx, op, 0)
    assert x.type is not None
    exp = np.asarray(op.param("PowC")["exp"], dtype=numpy_dtype(x.type.element_type))
    c = ReadVar(type=TensorType(x.type.element_type, []), value=exp.reshape(()))
    emit_one(ctx, op, T.ElemwiseOp, [x, c], mode=enums.ElemwiseMode.POW)


def read_typecvt(ctx: ReadContext, op: RawOpr) -> None:
    x = input_var(ctx, op, 0)
    dt = op.param("DType").get("dtype")
    if dt is None:
        raise fail(op, "lacks its target dtype")
    elem = to_element(dt, where(op), op.offset)
    if foldable([x]):
        assert x.value is not None
        fold_const(ctx, op, x.value.astype(numpy_dtype(elem)), [x])
        return
    enc = x.type.encoding if x.type is not None else None  # a blocked layout stays
    emit_one(ctx, op, T.TypeCvtOp, [x], [TensorType(elem, list(shape_of(op, x, "input")), enc)])


def read_pooling(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("Pooling")
    window = {
        "window": (p["window_h"], p["window_w"]),
        "stride": (p["stride_h"], p["stride_w"]),
        "padding": (p["pad_h"], p["pad_w"]),
    }
    _emit_pooling(ctx, op, T.PoolingOp, p, window)


def read_adaptive_pooling(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("AdaptivePooling")
    out = int_values(op, input_var(ctx, op, 1), "the output shape")
    if len(out) != 2:
        raise fail(op, f"output shape must have 2 values, got {out}")
    _emit_pooling(ctx, op, T.AdaptivePoolingOp, p, {"out_shape": tuple(out)})


def _emit_pooling(
    ctx: ReadContext, op: RawOpr, cls: type[T.MgbOp], p: dict[str, Any], window: dict[str, Any]
) -> None:
    """Either pooling of input 0: the mode and tensor format its table ``p`` holds, and its window."""
    fmt = _tensor_format(op, p)
    emit_one(
        ctx,
        op,
        cls,
        [input_var(ctx, op, 0)],
        mode=enum_of(op, enums.PoolingMode, p["mode"], "mode"),
        **window,
        format=fmt,
    )


def read_matmul(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("MatrixMul")
    cls = T.BatchedMatrixMulOp if op.kind == "BatchedMatrixMul" else T.MatrixMulOp
    emit_one(
        ctx,
        op,
        cls,
        [input_var(ctx, op, 0), input_var(ctx, op, 1)],
        transpose_a=bool(p["transposeA"]),
        transpose_b=bool(p["transposeB"]),
        compute_mode=enum_of(op, enums.ComputeMode, p["compute_mode"], "compute_mode"),
        format=enum_of(op, enums.MatrixMulFormat, p["format"], "format"),
    )


def read_reduce(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("Reduce")
    mode = enum_of(op, enums.ReduceMode, p["mode"], "mode")
    data_type = enum_of(op, enums.ReduceDataType, p["data_type"], "data_type")
    x = input_var(ctx, op, 0)
    shape = shape_of(op, x, "input")
    if len(op.inputs) >= 2:
        target = int_values(op, input_var(ctx, op, 1), "the target shape")
        if list(target) == [1] and len(shape) > 1:
            # MegEngine's F.sum(x) and friends without an axis: everything into one value
            _read_reduce_all(ctx, op, x, shape, mode, data_type)
            return
        if len(target) != len(shape):
            raise fail(op, f"target shape {target} does not match input rank {len(shape)}")
        axes = [a for a, (s, t) in enumerate(zip(shape, target, strict=True)) if s != t]
        if any(target[a] != 1 for a in axes):
            raise unsupported(op, f"reduction of {shape} to {target} is not a reduction to size-1 axes")
    else:
        axis = int(p["axis"])
        if axis < 0:
            axis += len(shape)
        if not 0 <= axis < len(shape):
            raise fail(op, f"axis {p['axis']} out of range for shape {shape}")
        axes = [axis]
    if not axes:
        read_alias(ctx, op)
        return
    cur = x
    for k, a in enumerate(axes):
        m = mode
        if k > 0 and mode == enums.ReduceMode.SUM_SQR:
            m = enums.ReduceMode.SUM  # later axes sum the already squared partial sums
        (cur,) = emit_values(ctx, op, T.ReduceOp, [cur], mode=m, axis=a, data_type=data_type)
    define(ctx, op, 0, cur)


def _read_reduce_all(
    ctx: ReadContext, op: RawOpr, x: ReadVar, shape: tuple[int, ...], mode: Any, data_type: Any
) -> None:
    """A Reduce to the target shape [1] of an n-D input: the axes one after another, then (1,)."""
    cur = x
    for k, a in enumerate(a for a, d in enumerate(shape) if d != 1):
        m = enums.ReduceMode.SUM if k > 0 and mode == enums.ReduceMode.SUM_SQR else mode
        (cur,) = emit_values(ctx, op, T.ReduceOp, [cur], mode=m, axis=a, data_type=data_type)
    assert x.type is not None
    (cur,) = emit_values(ctx, op, T.ReshapeOp, [cur], [TensorType(x.type.element_type, [1])])
    define(ctx, op, 0, cur)


def read_reshape(ctx: ReadContext, op: RawOpr) -> None:
    x = input_var(ctx, op, 0)
    target = int_values(op, input_var(ctx, op, 1), "the target shape")
    axis = op.param("OptionalAxisV1")["axis"]
    shape = shape_of(op, x, "input")
    total = math.prod(shape)
    unknown = [i for i, d in enumerate(target) if d < 0]
    if axis != 7:
        if not 0 <= axis < len(target):
            raise fail(op, f"unspecified axis {axis} out of range for target shape {target}")
        unknown = [axis]
    if len(unknown) > 1:
        raise fail(op, f"target shape {target} has several unspecified dimensions")
    if any(d < 0 for d in shape):  # a size known only at run time (after CondTake)
        if len(unknown) != 1 or any(d < 0 for i, d in enumerate(target) if i != unknown[0]):
            raise fail(op, f"the input's size {shape} is known only at run time: reshape it with one -1")
        target[unknown[0]] = -1  # stays dynamic: the kernel infers it, as MegEngine's Reshape does
        assert x.type is not None
        emit_one(ctx, op, T.ReshapeOp, [x], [TensorType(x.type.element_type, target)])
        return
    if unknown:
        rest = math.prod(d for i, d in enumerate(target) if i != unknown[0])
        if rest <= 0 or total % rest:
            raise fail(op, f"cannot reshape {shape} into {target}")
        target[unknown[0]] = total // rest
    if math.prod(target) != total or min(target, default=1) < 0:
        raise fail(op, f"cannot reshape {shape} into {tuple(target)}")
    if foldable([x]):
        assert x.value is not None
        fold_const(ctx, op, x.value.reshape(target), [x])
        return
    if layouts.read_reshape(ctx, op, x, target):  # a half of an NCHW <-> NCHWx pair
        return
    assert x.type is not None
    emit_one(ctx, op, T.ReshapeOp, [x], [TensorType(x.type.element_type, target)])


def read_broadcast(ctx: ReadContext, op: RawOpr) -> None:
    x = input_var(ctx, op, 0)
    target = int_values(op, input_var(ctx, op, 1), "the target shape")
    if foldable([x]):
        assert x.value is not None
        try:
            fold_const(ctx, op, np.broadcast_to(x.value, target), [x])
        except ValueError as exc:
            raise fail(op, str(exc)) from exc
        return
    assert x.type is not None
    emit_one(ctx, op, T.BroadcastOp, [x], [TensorType(x.type.element_type, target)])


def read_dimshuffle(ctx: ReadContext, op: RawOpr) -> None:
    pattern = tuple(op.param("Dimshuffle")["pattern"])
    x = input_var(ctx, op, 0)
    if foldable([x]):
        assert x.value is not None
        perm = [p for p in pattern if p != -1]
        out_shape = [1 if p == -1 else x.value.shape[p] for p in pattern]
        fold_const(ctx, op, np.transpose(x.value, perm).reshape(out_shape), [x])
        return
    if layouts.read_dimshuffle(ctx, op, x, pattern):  # a half of an NCHW <-> NCHWx pair
        return
    emit_one(ctx, op, T.DimshuffleOp, [x], pattern=pattern)


def read_axis_add_remove(ctx: ReadContext, op: RawOpr) -> None:
    descs = op.param("AxisAddRemove")["desc"]
    methods = tuple(enum_of(op, enums.AxisMethod, m, "axis method") for m, _ in descs)
    axes = tuple(a for _, a in descs)
    x = input_var(ctx, op, 0)
    if foldable([x]):
        assert x.value is not None
        v = x.value
        for m, a in zip(methods, axes, strict=True):
            v = np.expand_dims(v, a) if m == enums.AxisMethod.ADD_1 else np.squeeze(v, a)
        fold_const(ctx, op, v, [x])
        return
    emit_one(ctx, op, T.AxisAddRemoveOp, [x], methods=methods, axes=axes)


def read_concat(ctx: ReadContext, op: RawOpr) -> None:
    ins = [input_var(ctx, op, k) for k in range(len(op.inputs))]
    if not ins:
        raise fail(op, "has no inputs")
    axis = int(op.param("Axis")["axis"])
    nd = len(shape_of(op, ins[0], "input 0"))
    if axis < 0:
        axis += nd
    if foldable(ins):
        try:
            fold_const(ctx, op, np.concatenate([v.value for v in ins], axis=axis), ins)  # type: ignore[misc]
        except ValueError as exc:
            raise fail(op, str(exc)) from exc
        return
    emit_one(ctx, op, T.ConcatOp, ins, axis=axis)


def read_get_var_shape(ctx: ReadContext, op: RawOpr) -> None:
    ins = [input_var(ctx, op, k) for k in range(len(op.inputs))]
    if not ins:
        raise fail(op, "has no inputs")
    shapes = [shape_of(op, v, f"input {k}") for k, v in enumerate(ins)]
    try:
        shape = T.broadcast_shapes("GetVarShape", shapes)
    except T.ShapeInferenceError as exc:
        raise fail(op, str(exc)) from exc
    axis = op.param("OptionalAxisV1")["axis"]
    if any(d > np.iinfo(np.int32).max for d in shape):
        raise fail(op, f"input shape {shape} has a dimension beyond int32, which shape values cannot hold")
    value = np.asarray(shape, dtype=np.int32)
    if axis != 7:
        if not -len(shape) <= axis < len(shape):
            raise fail(op, f"axis {axis} out of range for shape {shape}")
        value = value[axis : axis + 1] if axis >= 0 else value[axis:][:1]
    fold_const(ctx, op, value, ins)


def _static_index(
    ctx: ReadContext, op: RawOpr, shape: tuple[int, ...], first: int, vectors: bool = False
) -> tuple[dict[int, Any], dict[int, ReadVar]]:
    """The IndexDescMaskDump items of a (Get/Modify)Subtensor-style operator, whose index inputs
    start at input ``first``: {axis: int or slice} from inputs known while reading, and, with
    ``vectors``, {axis: index var} for the items that index with a tensor."""
    items = op.param("IndexDescMaskDump")["items"]
    k = first
    index: dict[int, Any] = {}
    vecs: dict[int, ReadVar] = {}
    for axis, has_begin, has_end, has_step, has_idx in items:
        a = axis + len(shape) if axis < 0 else axis
        if not 0 <= a < len(shape) or a in index or a in vecs:
            raise fail(op, f"invalid or repeated index axis {axis} for shape {shape}")
        if has_idx and vectors and not (has_begin or has_end or has_step):
            vecs[a] = input_var(ctx, op, k)
            k += 1
            continue
        vals = []
        for flag in (has_begin, has_end, has_step, has_idx):
            if flag:
                (v,) = int_values(op, input_var(ctx, op, k), f"index input {k}")[:1] or [None]
                if v is None:
                    raise fail(op, f"index input {k} is empty")
                vals.append(v)
                k += 1
            else:
                vals.append(None)
        begin, end, step, idx = vals
        if has_idx:
            i = idx + shape[a] if idx < 0 else idx
            if not 0 <= i < shape[a]:
                raise fail(op, f"index {idx} out of range for axis {a} of size {shape[a]}")
            index[a] = i
        else:
            if step == 0:
                raise fail(op, "slice step is zero")
            index[a] = slice(begin, end, step)
    if k != len(op.inputs):
        raise fail(op, f"has {len(op.inputs)} inputs, its index items use {k}")
    return index, vecs


def _slice_params(index: dict[int, Any], shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """SubtensorOp's parameters for {axis: int or slice}."""
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
    return {
        "axes": tuple(axes),
        "starts": tuple(starts),
        "stops": tuple(stops),
        "steps": tuple(steps),
        "drop": tuple(drop),
    }


def read_subtensor(ctx: ReadContext, op: RawOpr) -> None:
    x = input_var(ctx, op, 0)
    shape = shape_of(op, x, "input")
    index, _ = _static_index(ctx, op, shape, 1)
    if foldable([x]):
        assert x.value is not None
        key = tuple(index.get(a, slice(None)) for a in range(len(shape)))
        fold_const(ctx, op, np.asarray(x.value[key]), [x])
        return
    emit_one(ctx, op, T.SubtensorOp, [x], **_slice_params(index, shape))


def read_modify_subtensor(ctx: ReadContext, op: RawOpr) -> None:
    """SetSubtensor / IncrSubtensor: (data, value, index inputs...)."""
    cls = T.SetSubtensorOp if op.kind == "SetSubtensor" else T.IncrSubtensorOp
    x, value = input_var(ctx, op, 0), input_var(ctx, op, 1)
    shape = shape_of(op, x, "input")
    index, _ = _static_index(ctx, op, shape, 2)
    emit_one(ctx, op, cls, [x, value], **_slice_params(index, shape))


_INDEXING_OPS: dict[str, tuple[type[T.MgbOp], int]] = {
    "IndexingMultiAxisVec": (T.IndexingMultiAxisVecOp, 1),  # (IR op, inputs before the indices)
    "IndexingSetMultiAxisVec": (T.IndexingSetMultiAxisVecOp, 2),
    "IndexingIncrMultiAxisVec": (T.IndexingIncrMultiAxisVecOp, 2),
}


def read_indexing(ctx: ReadContext, op: RawOpr) -> None:
    """IndexingMultiAxisVec and its Set/Incr siblings: tensor indices on some axes; slices on
    others (read: a Subtensor first, which keeps every axis)."""
    cls, n_data = _INDEXING_OPS[op.kind or ""]
    data = [input_var(ctx, op, k) for k in range(n_data)]
    shape = shape_of(op, data[0], "input")
    index, vecs = _static_index(ctx, op, shape, n_data, vectors=True)
    if not vecs:
        raise fail(op, "has no tensor index")
    if index:
        if cls is not T.IndexingMultiAxisVecOp:
            raise unsupported(op, f"{op.kind} mixing slices and tensor indices is not supported by xmge")
        if any(isinstance(v, int) for v in index.values()):
            raise unsupported(op, f"{op.kind} mixing integer and tensor indices is not supported by xmge")
        (data[0],) = emit_values(ctx, op, T.SubtensorOp, [data[0]], **_slice_params(index, shape))
    axes = tuple(sorted(vecs))
    emit_one(ctx, op, cls, [*data, *(vecs[a] for a in axes)], axes=axes)


def read_linspace(ctx: ReadContext, op: RawOpr) -> None:
    start, stop = input_var(ctx, op, 0), input_var(ctx, op, 1)
    (num,) = int_values(op, input_var(ctx, op, 2), "the number of values")[:1] or [None]
    if num is None or num < 0:
        raise fail(op, f"invalid number of values {num}")
    if len(op.inputs) != 3:
        raise fail(op, f"takes 3 inputs (start, stop, num), has {len(op.inputs)}")
    endpoint = bool(op.param("Linspace")["endpoint"])
    # MegEngine's Linspace casts integer start/stop to float32 (its output is always float32)
    start, stop = (_as_float32(ctx, op, v) for v in (start, stop))
    emit_one(ctx, op, T.LinspaceOp, [start, stop], num=num, endpoint=endpoint)


def _as_float32(ctx: ReadContext, op: RawOpr, var: ReadVar) -> ReadVar:
    if not isinstance(var.type, TensorType) or is_float(var.type.element_type):
        return var
    cast = TensorType(Float32Type(), list(var.type.get_shape()))
    return emit_values(ctx, op, T.TypeCvtOp, [var], [cast])[0]


def read_topk(ctx: ReadContext, op: RawOpr) -> None:
    """MegEngine's TopK: (data, k as a one-element int tensor); KTH_ONLY has the values output only."""
    if len(op.inputs) != 2:
        raise fail(op, f"takes 2 inputs (data, k), has {len(op.inputs)}")
    x = input_var(ctx, op, 0)
    (k,) = int_values(op, input_var(ctx, op, 1), "k")[:1] or [0]
    mode = int(op.param("TopK")["mode"])
    modes = list(enums.TopKMode)
    if not 0 <= mode < len(modes):
        raise fail(op, f"param.TopK.mode = {mode} is not one of {', '.join(m.name for m in modes)}")
    values = emit_values(ctx, op, T.TopKOp, [x], k=k, mode=mode)
    kth_only = modes[mode] == enums.TopKMode.KTH_ONLY  # type: ignore[attr-defined]
    for i, var in enumerate(values[: 1 if kth_only else 2]):
        define(ctx, op, i, var)


def read_cond_take(ctx: ReadContext, op: RawOpr) -> None:
    """MegEngine's CondTake: (data, mask) -> (values, int32 indices). How many it takes depends
    on the mask's values, so both results get a dynamic size (``?``) unless the mask is known now."""
    if len(op.inputs) != 2:
        raise fail(op, f"takes 2 inputs (data, mask), has {len(op.inputs)}")
    data, mask = input_var(ctx, op, 0), input_var(ctx, op, 1)
    p = op.param("CondTake")
    params = {"mode": int(p["mode"]), "val": float(p["val"]), "eps": float(p["eps"])}
    if not 0 <= params["mode"] < len(T.COND_TAKE_MODES):
        raise fail(op, f"param.CondTake.mode = {params['mode']} is not one of {', '.join(T.COND_TAKE_MODES)}")
    shape = shape_of(op, data, "data")
    if shape_of(op, mask, "mask") != shape:
        raise fail(op, f"mask shape {shape_of(op, mask, 'mask')} differs from the data shape {shape}")
    assert data.type is not None
    types = [TensorType(data.type.element_type, [-1]), TensorType(IntegerType(32), [-1])]
    # both known now (constants): evaluated, with the count they give
    values = emit_values(ctx, op, T.CondTakeOp, [data, mask], types, **params)
    for i, var in enumerate(values):
        define(ctx, op, i, var)


def read_split(ctx: ReadContext, op: RawOpr) -> None:
    """MegEngine's Split (SPECIFY method, the only one it serialises): (src, one size per part)."""
    x = input_var(ctx, op, 0)
    nd = len(shape_of(op, x, "input"))
    axis = int(op.param("Axis")["axis"])
    axis = axis + nd if axis < 0 else axis
    if len(op.inputs) < 2:
        raise fail(op, "needs the input and at least one part size")
    sizes = []
    for k in range(1, len(op.inputs)):
        (n,) = int_values(op, input_var(ctx, op, k), f"part size {k - 1}")[:1] or [None]
        if n is None:
            raise fail(op, f"part size {k - 1} is empty")
        sizes.append(n)
    if len(op.outputs) != len(sizes):
        raise fail(op, f"has {len(op.outputs)} outputs for {len(sizes)} parts")
    for i, var in enumerate(emit_values(ctx, op, T.SplitOp, [x], axis=axis, sizes=tuple(sizes))):
        define(ctx, op, i, var)


def read_first_input(ctx: ReadContext, op: RawOpr) -> None:
    """Operators whose output is their input 0 at inference (VirtualDep, MarkNoBroadcastElemwise,
    MarkDynamicVar): an alias."""
    if not op.inputs:
        raise fail(op, "has no inputs")
    read_alias(ctx, op)


def read_batch_norm(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("BN")
    fwd = enum_of(op, enums.BNFwdMode, p["fwd_mode"], "fwd_mode")
    if fwd != enums.BNFwdMode.INFERENCE:
        raise unsupported(op, "BatchNorm in training mode cannot be run for inference")
    if len(op.inputs) != 5:
        raise unsupported(
            op, f"BatchNorm with {len(op.inputs)} inputs (xmge reads the 5-input inference form)"
        )
    ins = [input_var(ctx, op, k) for k in range(5)]
    new = emit(
        ctx,
        op,
        T.BatchNormOp,
        ins,
        epsilon=float(p["epsilon"]),
        param_dim=enum_of(op, enums.BNParamDim, p["param_dim"], "param_dim"),
        fwd_mode=fwd,
    )
    n = len(op.outputs)
    for i in range(n - 1):
        define(
            ctx,
            op,
            i,
            ReadVar(unusable=f"output {i} of a BatchNorm (its statistics), which xmge does not compute"),
        )
    res = new.results[0]
    define(ctx, op, n - 1, ReadVar(type=res.type, ssa=res))  # type: ignore[arg-type]


def read_padding(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("Padding")
    x = input_var(ctx, op, 0)
    nd = len(shape_of(op, x, "input"))
    emit_one(
        ctx,
        op,
        T.PaddingOp,
        [x],
        front=tuple(p[f"front_offset_dim{i}"] for i in range(nd)),
        back=tuple(p[f"back_offset_dim{i}"] for i in range(nd)),
        value=float(p["padding_val"]),
        mode=enum_of(op, enums.PaddingMode, p["padding_mode"], "padding_mode"),
    )


def read_convolution_backward_data(ctx: ReadContext, op: RawOpr) -> None:
    params = _conv_params(op, op.param("Convolution"))
    if params.pop("format") != enums.Format.NCHW:
        raise unsupported(op, "ConvolutionBackwardData is read in format NCHW only")
    if len(op.inputs) not in (2, 3):
        raise fail(op, f"takes 2 or 3 inputs (filter, diff[, output shape]), has {len(op.inputs)}")
    filt, diff = input_var(ctx, op, 0), input_var(ctx, op, 1)
    if len(op.inputs) == 3:
        # the output shape input: what it adds to the plain transposed size is output padding
        want = int_values(op, input_var(ctx, op, 2), "the output shape")
        assert filt.type is not None and diff.type is not None
        try:
            (base,) = T.ConvolutionBackwardDataOp.infer([filt.type, diff.type], **params)
        except T.ShapeInferenceError as exc:
            raise fail(op, str(exc)) from exc
        got = base.get_shape()
        if len(want) != 4 or tuple(want[:2]) != tuple(got[:2]):
            raise fail(op, f"output shape {want} does not fit the inferred {tuple(got)}")
        params["output_padding"] = (want[2] - got[2], want[3] - got[3])
    emit_one(ctx, op, T.ConvolutionBackwardDataOp, [filt, diff], **params)


def read_resize(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("Resize")
    fmt = enum_of(op, enums.Format, p["format"], "format")
    blocked = {enums.Format.NCHW88: 8, enums.Format.NCHW44: 4}
    if fmt != enums.Format.NCHW and fmt not in blocked:
        raise unsupported(op, f"Resize in format {fmt.name} is not supported by xmge (NCHW, NCHW44, NCHW88)")
    out = int_values(op, input_var(ctx, op, 1), "the output size")
    if len(out) != 2:
        raise fail(op, f"output size must have 2 values, got {out}")
    imode = enum_of(op, enums.InterpolationMode, p["imode"], "imode")
    if imode == enums.InterpolationMode.CUBIC and fmt in blocked:
        raise unsupported(op, f"Resize CUBIC in format {fmt.name} is not supported by xmge (NCHW only)")
    if imode not in (enums.InterpolationMode.NEAREST, enums.InterpolationMode.LINEAR,
                     enums.InterpolationMode.CUBIC):  # fmt: skip
        raise unsupported(op, f"Resize with interpolation mode {imode.name} is not supported by xmge")
    if fmt in blocked:
        # enable_nchw88/nchw44 dumps resize blocked tensors in place: the same per-channel resize
        # between relayouts to NCHW and back (resizing never mixes channels)
        layouts.read_blocked_resize(ctx, op, blocked[fmt], tuple(out), imode)
        return
    emit_one(ctx, op, T.ResizeOp, [input_var(ctx, op, 0)], out_shape=tuple(out), imode=imode, format=fmt)


def read_layer_norm(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("LayerNorm")
    affine = bool(p["affine"])
    n_in = 3 if affine else 1
    if len(op.inputs) != n_in:
        raise fail(op, f"LayerNorm with affine={affine} takes {n_in} inputs, has {len(op.inputs)}")
    new = emit(
        ctx,
        op,
        T.LayerNormOp,
        [input_var(ctx, op, k) for k in range(n_in)],
        affine=affine,
        eps=float(p["eps"]),
        normalized_dim=int(p["normalized_dim"]),
        normalized_size=int(p["normalized_size"]),
    )
    # the statistics first, as aliases, so that the op takes the name of its output 0
    for i in range(1, min(len(op.outputs), 3)):
        res = new.results[i]
        define(ctx, op, i, ReadVar(type=res.type, ssa=res, alias=True))  # type: ignore[arg-type]
    define(ctx, op, 0, ReadVar(type=new.results[0].type, ssa=new.results[0]))  # type: ignore[arg-type]


def read_group_norm(ctx: ReadContext, op: RawOpr) -> None:
    """GroupNorm / InstanceNorm (InstanceNorm = GroupNorm with one group per channel) as the
    composition MegEngine's CPU kernel computes: per (sample, group) the mean and the biased
    variance over C/G*H*W values, x̂ = (x - mean) / sqrt(var + eps), then weight/bias per channel.
    Outputs (dst, mean, var) with the statistics shaped (N, G) in float32; MegEngine names the
    last one ``rstd`` but its CPU kernel stores the variance there (its backward adds eps)."""
    p = op.param("GroupNorm")
    affine = bool(p["affine"])
    n_in = 3 if affine else 1
    if len(op.inputs) != n_in:
        raise fail(op, f"{op.kind} with affine={affine} takes {n_in} inputs, has {len(op.inputs)}")
    if enum_of(op, enums.Format, p["format"], "format") != enums.Format.NCHW:
        raise unsupported(op, f"{op.kind} is read in format NCHW only")
    x = input_var(ctx, op, 0)
    shape = shape_of(op, x, "input")
    if len(shape) != 4:
        raise fail(op, f"{op.kind} takes a 4-d NCHW input, got shape {shape}")
    assert x.type is not None
    if x.type.encoding != TensorType(x.type.element_type, list(shape)).encoding:
        raise unsupported(op, f"{op.kind} on a blocked-layout input is not supported by xmge")
    n, c, h, w = shape
    group = c if op.kind == "InstanceNorm" else int(p["group"])
    if group <= 0 or c % group:
        raise fail(op, f"{op.kind}: {c} channels do not split into {group} groups")
    elem = x.type.element_type
    dtype = numpy_dtype(elem)
    if dtype != np.float32:
        raise unsupported(op, f"{op.kind} on {dtype} is not supported by xmge (float32 only)")

    def scalar(value: float) -> ReadVar:
        return ReadVar(type=TensorType(elem, [1]), value=np.asarray([value], dtype))

    def elemwise(mode: Any, a: ReadVar, b: ReadVar) -> ReadVar:
        (out,) = emit_values(ctx, op, T.ElemwiseOp, [a, b], mode=mode)
        return out

    def reshape(v: ReadVar, target: list[int]) -> ReadVar:
        (out,) = emit_values(ctx, op, T.ReshapeOp, [v], [TensorType(elem, target)])
        return out

    def mean_of_last(v: ReadVar) -> ReadVar:
        (out,) = emit_values(ctx, op, T.ReduceOp, [v], mode=enums.ReduceMode.MEAN, axis=2)
        return out

    E = enums.ElemwiseMode
    grouped = reshape(x, [n, group, c // group * h * w])
    mean = mean_of_last(grouped)
    centred = elemwise(E.SUB, grouped, mean)
    var = mean_of_last(elemwise(E.MUL, centred, centred))
    (std,) = emit_values(ctx, op, T.ElemwiseOp, [elemwise(E.ADD, var, scalar(float(p["eps"])))], mode=E.SQRT)
    out = reshape(elemwise(E.TRUE_DIV, centred, std), [n, c, h, w])
    if affine:
        per_channel = []
        for k, what in ((1, "weight"), (2, "bias")):
            v = input_var(ctx, op, k)
            if math.prod(shape_of(op, v, what)) != c:
                raise fail(op, f"{op.kind}'s {what} has shape {shape_of(op, v, what)}, needs {c} values")
            per_channel.append(reshape(v, [1, c, 1, 1]))
        out = elemwise(E.ADD, elemwise(E.MUL, out, per_channel[0]), per_channel[1])
    for i, stat in ((1, mean), (2, var)):
        if i < len(op.outputs):
            define(ctx, op, i, reshape(stat, [n, group]))
    define(ctx, op, 0, out)
