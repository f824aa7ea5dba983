"""One function per MegEngine operator kind: ``mgb`` IR op -> MegEngine operator records.

Each is one row's ``lower`` of :data:`backends.mge.oprs.OPRS` (the lowering looks it up by the
op's class); they add :class:`~backends.mge.records.WOpr` records through the
:class:`~backends.mge.lowering.Lowering` they are given. Elemwise modes newer than MegEngine 1.13's
default dump are rewritten into older ones here (:data:`COMPAT_REWRITES`, spec A.11).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue

import backends.mge.schema as S
from backends.mge.dtypes import RawDType, from_element
from backends.mge.records import MgeWriteError, WOpr
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import QuantizedType

if TYPE_CHECKING:
    from backends.mge.lowering import Lowering

E = enums.ElemwiseMode
EXECUTION_POLICY = ("ExecutionPolicy", {"strategy": 1, "workspace_limit": S.UINT_MAX64})
LowerFn = Callable[["Lowering", Any, dict[str, Any]], None]


def value_shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def value_elem(v: SSAValue) -> Attribute:
    t = v.type
    assert isinstance(t, TensorType)
    return t.element_type


def attr_str(op: Operation, key: str) -> str | None:
    a = op.attributes.get(key)
    return a.data if isinstance(a, StringAttr) else None


def flatten_start_axis(src: Sequence[int], dst: Sequence[int]) -> int | None:
    """``k`` when ``dst`` is ``src`` with axes k.. merged into one (``F.flatten(x, k)``), k ≥ 1."""
    k = len(dst) - 1
    if k < 1 or len(src) < k + 2 or tuple(src[:k]) != tuple(dst[:k]):
        return None
    return k if math.prod(src[k:]) == dst[k] else None


def _window_fields(p: dict[str, Any], **prefixes: str) -> dict[str, int]:
    """MegEngine's ``<prefix>_h``/``<prefix>_w`` param fields from an op's (h, w) parameters, in
    the order given (``padding="pad"``: ``pad_h``, ``pad_w`` from ``p["padding"]``)."""
    return {f"{prefix}_{axis}": p[key][i] for key, prefix in prefixes.items() for i, axis in enumerate("hw")}


def _convolution_param(p: dict[str, Any], fmt: Any) -> dict[str, int]:
    """MegEngine's param.Convolution fields (shared by Convolution, ConvBias and
    ConvolutionBackwardData) from an op's parameters."""
    return {
        "mode": enums.number(p["mode"]),
        **_window_fields(p, padding="pad", stride="stride", dilation="dilate"),
        "sparse": enums.number(p["sparse"]),
        "format": enums.number(fmt),
        "compute_mode": enums.number(p["compute_mode"]),
    }


def _quantized_output(op: T.MgbOp) -> RawDType | None:
    """``Operator.output_dtype`` for a quantized result (ConvBias, ElemwiseMultiType)."""
    out = value_elem(op.results[0])
    return from_element(out) if isinstance(out, QuantizedType) else None


def _non_default_dtype(op: T.MgbOp) -> RawDType | None:
    """``Operator.output_dtype`` for a quantized result other than the op's deduced one (MegEngine
    deduces ``QuantizedS32(s_src * s_filter)`` for quantized convolutions and matrix products)."""
    out = value_elem(op.results[0])
    if not isinstance(out, QuantizedType):
        return None
    (default,) = type(op).infer(list(op.operand_types), **op.params())
    return None if default.element_type == out else from_element(out)


# ----------------------------------------------------------------------------------------------
# operators


def lower_convolution(lw: Lowering, op: T.ConvolutionOp, p: dict[str, Any]) -> None:
    conv = _convolution_param(p, p.get("format", enums.Format.NCHW))
    out_dt = _non_default_dtype(op)
    lw.simple(op, "Convolution", [("Convolution", conv), EXECUTION_POLICY], output_dtype=out_dt)


def lower_conv_bias(lw: Lowering, op: T.ConvBiasOp, p: dict[str, Any]) -> None:
    conv = _convolution_param(p, p.get("format", enums.Format.NCHW))
    conv["nonlineMode"] = enums.number(p["nonline_mode"])
    lw.simple(op, "ConvBias", [("ConvBias", conv), EXECUTION_POLICY], output_dtype=_quantized_output(op))


def lower_convolution_backward_data(lw: Lowering, op: T.ConvolutionBackwardDataOp, p: dict[str, Any]) -> None:
    conv = _convolution_param(p, enums.Format.NCHW)
    ins = [lw.ids[v] for v in op.operands]
    if any(p["output_padding"]):  # MegEngine passes the output shape as a third input
        ins.append(lw.int_const(value_shape(op.output)))
    lw.simple(op, "ConvolutionBackwardData", [("Convolution", conv), EXECUTION_POLICY], ins)


def lower_pooling(lw: Lowering, op: T.PoolingOp, p: dict[str, Any]) -> None:
    pool = {
        "mode": enums.number(p["mode"]),
        **_window_fields(p, padding="pad", stride="stride", window="window"),
        "format": enums.number(p.get("format", enums.Format.NCHW)),
    }
    lw.simple(op, "Pooling", [("Pooling", pool)])


def lower_adaptive_pooling(lw: Lowering, op: T.AdaptivePoolingOp, p: dict[str, Any]) -> None:
    x = lw.ids[op.operands[0]]
    shape = lw.int_const(p["out_shape"])
    params = {"mode": enums.number(p["mode"]), "format": enums.number(p.get("format", enums.Format.NCHW))}
    lw.simple(op, "AdaptivePooling", [("AdaptivePooling", params)], [x, shape])


def lower_matmul(lw: Lowering, op: T.MatrixMulOp | T.BatchedMatrixMulOp, p: dict[str, Any]) -> None:
    mm = {
        "transposeA": bool(p.get("transpose_a", False)),
        "transposeB": bool(p.get("transpose_b", False)),
        "compute_mode": enums.number(p["compute_mode"]),
        "format": enums.number(p["format"]),
    }
    kind = "BatchedMatrixMul" if isinstance(op, T.BatchedMatrixMulOp) else "MatrixMul"
    lw.simple(op, kind, [("MatrixMul", mm)], output_dtype=_non_default_dtype(op))


def lower_elemwise(lw: Lowering, op: T.ElemwiseOp, p: dict[str, Any]) -> None:
    mode = p["mode"]
    ins = [lw.ids[v] for v in op.operands]
    name = lw.var_name(op, mode.name)
    if not lw.no_change_graph and mode in COMPAT_REWRITES:
        vid = COMPAT_REWRITES[mode](lw, op, ins, name)
    else:
        vid = lw.elem_opr(mode, ins, name, attr_str(op, "opr_name"))
    lw.ids[op.output] = vid


def lower_elemwise_multi_type(lw: Lowering, op: T.ElemwiseMultiTypeOp, p: dict[str, Any]) -> None:
    mode = {"mode": enums.number(p["mode"])}
    lw.simple(op, "ElemwiseMultiType", [("ElemwiseMultiType", mode)], output_dtype=_quantized_output(op))


def lower_get_var_shape(lw: Lowering, op: T.GetVarShapeOp, p: dict[str, Any]) -> None:
    lw.simple(op, "GetVarShape", [("OptionalAxisV1", {"axis": 7})])


def lower_reshape(lw: Lowering, op: T.ReshapeOp | T.ReshapeToOp, p: dict[str, Any]) -> None:
    src, dst = value_shape(op.operands[0]), value_shape(op.output)
    x = lw.ids[op.operands[0]]
    if isinstance(op, T.ReshapeOp) and (src or (1,)) == (dst or (1,)):
        # (1,) <-> (): one shape to MegEngine, whose loader refuses a Reshape that changes nothing
        # after a Reduce (it merges it into the Reduce: "got_type=Reduce expected_type=Reshape")
        lw.ids[op.output] = x
        return
    if isinstance(op, T.ReshapeToOp):  # the shape computed in the graph; axis 7: none inferred
        axis = p["unspec_axis"] if p["unspec_axis"] >= 0 else 7
        lw.simple(op, "Reshape", [("OptionalAxisV1", {"axis": axis})], [x, lw.ids[op.shape]])
        return
    k = flatten_start_axis(src, dst)
    if k is not None:
        # MegEngine's F.flatten: Reshape(x, Concat(x.shape[0], ..., x.shape[k-1], -1)), axis k
        shape = lw.add(WOpr("GetVarShape", [x], params=[("OptionalAxisV1", {"axis": 7})]), ["GetVarShape"])[0]
        parts = []
        for i in range(k):
            idx = lw.int_const([i])
            item = {"items": ((0, False, False, False, True),)}
            wopr = WOpr("Subtensor", [shape, idx], params=[("IndexDescMaskDump", item)])
            parts.append(lw.add(wopr, ["Subtensor"])[0])
        parts.append(lw.int_const([-1]))
        target = lw.add(WOpr("Concat", parts, params=[("Axis", {"axis": 0})]), ["Concat"])[0]
        lw.simple(op, "Reshape", [("OptionalAxisV1", {"axis": k})], [x, target])
        return
    target = lw.int_const(dst or (1,))
    lw.simple(op, "Reshape", [("OptionalAxisV1", {"axis": 7})], [x, target])


def lower_broadcast(lw: Lowering, op: T.BroadcastOp | T.BroadcastToOp, p: dict[str, Any]) -> None:
    if isinstance(op, T.BroadcastToOp):  # the shape computed in the graph
        target = lw.ids[op.shape]
    else:
        target = lw.int_const(value_shape(op.output))
    lw.simple(op, "Broadcast", [("Empty", {})], [lw.ids[op.operands[0]], target])


def lower_dimshuffle(lw: Lowering, op: T.DimshuffleOp, p: dict[str, Any]) -> None:
    params = {"pattern": tuple(p["pattern"]), "ndim": len(value_shape(op.operands[0]))}
    lw.simple(op, "Dimshuffle", [("Dimshuffle", params)])


def lower_axis_add_remove(lw: Lowering, op: T.AxisAddRemoveOp, p: dict[str, Any]) -> None:
    desc = tuple((enums.number(m), a) for m, a in zip(p["methods"], p["axes"], strict=True))
    lw.simple(op, "AxisAddRemove", [("AxisAddRemove", {"desc": desc})])


def lower_concat(lw: Lowering, op: T.ConcatOp, p: dict[str, Any]) -> None:
    lw.simple(op, "Concat", [("Axis", {"axis": p["axis"]})])


def _slice_items(
    lw: Lowering, shape: Sequence[int], p: dict[str, Any]
) -> tuple[list[tuple[int, bool, bool, bool, bool]], list[int]]:
    """IndexDescMaskDump items and index inputs of a static slice (SubtensorOp's parameters)."""
    rows = sorted(zip(p["axes"], p["starts"], p["stops"], p["steps"], p["drop"], strict=True), reverse=True)
    inputs: list[int] = []
    items = []
    for axis, start, stop, step, drop in rows:
        if drop:
            items.append((axis, False, False, False, True))
            inputs.append(lw.int_const([start]))
            continue
        dim = shape[axis]
        s0, s1, st = slice(start, stop, step).indices(dim)
        want_begin = s0 != (0 if st > 0 else dim - 1)
        want_end = (s1 != dim) if st > 0 else True
        want_step = st != 1
        items.append((axis, want_begin, want_end, want_step, False))
        if want_begin:
            inputs.append(lw.int_const([s0]))
        if want_end:
            inputs.append(lw.int_const([s1 if st > 0 or s1 >= 0 else -(dim + 1)]))
        if want_step:
            inputs.append(lw.int_const([st]))
    return items, inputs


def lower_subtensor(lw: Lowering, op: T.SubtensorOp, p: dict[str, Any]) -> None:
    items, index = _slice_items(lw, value_shape(op.operands[0]), p)
    inputs = [lw.ids[op.operands[0]], *index]
    lw.simple(op, "Subtensor", [("IndexDescMaskDump", {"items": tuple(items)})], inputs)


def lower_modify_subtensor(lw: Lowering, op: T.SetSubtensorOp | T.IncrSubtensorOp, p: dict[str, Any]) -> None:
    kind = "SetSubtensor" if isinstance(op, T.SetSubtensorOp) else "IncrSubtensor"
    items, index = _slice_items(lw, value_shape(op.operands[0]), p)
    inputs = [lw.ids[op.operands[0]], lw.ids[op.operands[1]], *index]
    lw.simple(op, kind, [("IndexDescMaskDump", {"items": tuple(items)})], inputs)


_INDEXING_KIND: dict[type[T.MgbOp], tuple[str, int]] = {
    T.IndexingMultiAxisVecOp: ("IndexingMultiAxisVec", 1),  # (kind, operands before the indices)
    T.IndexingSetMultiAxisVecOp: ("IndexingSetMultiAxisVec", 2),
    T.IndexingIncrMultiAxisVecOp: ("IndexingIncrMultiAxisVec", 2),
}


def lower_indexing(lw: Lowering, op: T.MgbOp, p: dict[str, Any]) -> None:
    kind, n_data = _INDEXING_KIND[type(op)]
    items = tuple((int(a), False, False, False, True) for a in p["axes"])
    inputs = [lw.ids[v] for v in op.operands]
    lw.simple(op, kind, [("IndexDescMaskDump", {"items": items})], inputs[:n_data] + inputs[n_data:])


def lower_linspace(lw: Lowering, op: T.LinspaceOp, p: dict[str, Any]) -> None:
    inputs = [lw.ids[op.operands[0]], lw.ids[op.operands[1]], lw.int_const([int(p["num"])])]
    lw.simple(op, "Linspace", [("Linspace", {"endpoint": bool(p["endpoint"])})], inputs)


def lower_cond_take(lw: Lowering, op: T.CondTakeOp, p: dict[str, Any]) -> None:
    params = {"mode": int(p["mode"]), "val": float(p["val"]), "eps": float(p["eps"])}
    name = lw.var_name(op, "CondTake")
    inputs = [lw.ids[v] for v in op.operands]
    wopr = WOpr("CondTake", inputs, 2, [("CondTake", params)], name=attr_str(op, "opr_name"))
    vids = lw.add(wopr, [f"{name}:o0", f"{name}:o1"])
    for res, vid in zip(op.results, vids, strict=True):
        lw.ids[res] = vid


def lower_topk(lw: Lowering, op: T.TopKOp, p: dict[str, Any]) -> None:
    """k travels as an int32 input, as MegEngine's F.topk passes it; KTH_ONLY has no index output
    in MegEngine, so an op whose k-th index is used cannot be written as one."""
    inputs = [lw.ids[op.operands[0]], lw.int_const([int(p["k"])])]
    mode = int(p["mode"])
    if mode == 0 and op.results[1].uses:
        raise MgeWriteError(f"{op.name}: MegEngine's TopK KTH_ONLY has no index output for the used index")
    n = 1 if mode == 0 else 2
    name = lw.var_name(op, "TopK")
    wopr = WOpr("TopK", inputs, n, [("TopK", {"mode": mode})], name=attr_str(op, "opr_name"))
    vids = lw.add(wopr, [name] + [f"{name}:{i}" for i in range(1, n)])
    for res, vid in zip(op.results, vids, strict=False):
        lw.ids[res] = vid


def lower_split(lw: Lowering, op: T.SplitOp, p: dict[str, Any]) -> None:
    x = lw.ids[op.operands[0]]
    axis, start = p["axis"], 0
    base = lw.var_name(op, "Split")
    for i, (res, size) in enumerate(zip(op.results, p["sizes"], strict=True)):
        b, e = lw.int_const([start]), lw.int_const([start + size])
        item = {"items": ((axis, True, True, False, False),)}
        (vid,) = lw.add(WOpr("Subtensor", [x, b, e], params=[("IndexDescMaskDump", item)]), [f"{base}:{i}"])
        lw.ids[res] = vid
        start += size


def lower_reduce(lw: Lowering, op: T.ReduceOp, p: dict[str, Any]) -> None:
    params = {"mode": enums.number(p["mode"]), "axis": p["axis"], "data_type": enums.number(p["data_type"])}
    lw.simple(op, "Reduce", [("Reduce", params)])


def lower_typecvt(lw: Lowering, op: T.TypeCvtOp, p: dict[str, Any]) -> None:
    lw.simple(op, "TypeCvt", [("DType", {"dtype": from_element(value_elem(op.output))})])


def lower_batch_norm(lw: Lowering, op: T.BatchNormOp, p: dict[str, Any]) -> None:
    bn = {
        "param_dim": enums.number(p["param_dim"]),
        "fwd_mode": enums.number(p["fwd_mode"]),
        "epsilon": float(p["epsilon"]),
        "avg_factor": 1.0,
        "scale": 1.0,
        "bias": 0.0,
    }
    base = lw.var_name(op, "BatchNorm")
    # MegEngine's inference BatchNorm has 4 outputs; the normalised value is the last.
    wopr = WOpr("BatchNorm", [lw.ids[v] for v in op.operands], 4, [("BN", bn)], name=attr_str(op, "opr_name"))
    vids = lw.add(wopr, [f"{base}:o{i}" for i in range(2, 5)] + [base])
    lw.ids[op.output] = vids[-1]


def lower_padding(lw: Lowering, op: T.PaddingOp, p: dict[str, Any]) -> None:
    front, back = list(p["front"]), list(p["back"])
    if len(front) > 7:
        raise MgeWriteError("mgb.padding: MegEngine pads at most 7 dimensions")
    params = {f"front_offset_dim{i}": (front[i] if i < len(front) else 0) for i in range(7)}
    params.update({f"back_offset_dim{i}": (back[i] if i < len(back) else 0) for i in range(7)})
    params["padding_val"] = float(p["value"])
    params["padding_mode"] = enums.number(p["mode"])
    lw.simple(op, "Padding", [("Padding", params)])


def lower_resize(lw: Lowering, op: T.ResizeOp, p: dict[str, Any]) -> None:
    params = {"imode": enums.number(p["imode"]), "format": enums.number(p["format"])}
    ins = [lw.ids[op.operands[0]], lw.int_const(p["out_shape"])]
    lw.simple(op, "Resize", [("Resize", params)], ins)


def lower_layer_norm(lw: Lowering, op: T.LayerNormOp, p: dict[str, Any]) -> None:
    ln = {
        "affine": bool(p["affine"]),
        "eps": float(p["eps"]),
        "normalized_dim": p["normalized_dim"],
        "normalized_size": p["normalized_size"],
    }
    base = lw.var_name(op, "LayerNorm")
    wopr = WOpr(
        "LayerNorm", [lw.ids[v] for v in op.operands], 3, [("LayerNorm", ln)], name=attr_str(op, "opr_name")
    )
    vids = lw.add(wopr, [base, f"{base}:o1", f"{base}:o2"])
    for res, vid in zip(op.results, vids, strict=True):
        lw.ids[res] = vid


# ----------------------------------------------------------------------------------------------
# Dump-time rewrites of elemwise modes that MegEngine 1.13's default dump (no_change_graph=False)
# replaces by older ones (spec A.11). CLIP is written as MAX(x, lo) then MIN(·, hi): MegEngine's own
# rewrite drops ``hi`` (spec H), ours keeps the graph correct.
def _rw_sqrt(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    return lw.elem_opr(E.POW, [ins[0], lw.scalar(0.5, op.output)], name)


def _rw_square(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    return lw.elem_opr(E.POW, [ins[0], lw.scalar(2.0, op.output)], name)


def _rw_tan(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    s = lw.elem_opr(E.SIN, [ins[0]], name + ":sin")
    c = lw.elem_opr(E.COS, [ins[0]], name + ":cos")
    return lw.elem_opr(E.TRUE_DIV, [s, c], name)


def _rw_clip(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    lo = lw.elem_opr(E.MAX, [ins[0], ins[1]], name + ":max")
    return lw.elem_opr(E.MIN, [lo, ins[2]], name)


def _rw_relu6(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    lo = lw.elem_opr(E.MAX, [ins[0], lw.scalar(0.0, op.output)], name + ":max")
    return lw.elem_opr(E.MIN, [lo, lw.scalar(6.0, op.output)], name)


def _rw_hsigmoid(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    a = lw.elem_opr(E.ADD, [ins[0], lw.scalar(3.0, op.output)], name + ":add")
    b = lw.elem_opr(E.MAX, [a, lw.scalar(0.0, op.output)], name + ":max")
    c = lw.elem_opr(E.MIN, [b, lw.scalar(6.0, op.output)], name + ":min")
    return lw.elem_opr(E.TRUE_DIV, [c, lw.scalar(6.0, op.output)], name)


def _rw_sign(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    zero = lw.scalar(0.0, op.output)
    neg = lw.elem_opr(E.LT, [ins[0], zero], name + ":lt")
    pos = lw.elem_opr(E.LT, [zero, ins[0]], name + ":gt")
    # LT yields bool; the TypeCvt back to the input dtype keeps SUB well-typed
    dt = from_element(value_elem(op.output))
    negf = lw.add(WOpr("TypeCvt", [neg], params=[("DType", {"dtype": dt})]), [name + ":neg"])[0]
    posf = lw.add(WOpr("TypeCvt", [pos], params=[("DType", {"dtype": dt})]), [name + ":pos"])[0]
    return lw.elem_opr(E.SUB, [posf, negf], name)


def _rw_prelu(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    zero = lw.scalar(0.0, op.output)
    mn = lw.elem_opr(E.MIN, [ins[0], zero], name + ":min")
    mx = lw.elem_opr(E.MAX, [ins[0], zero], name + ":max")
    return lw.elem_opr(E.FUSE_MUL_ADD3, [mn, ins[1], mx], name)


def _rw_softplus(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    # softplus(x) = log1p(exp(-|x|)) + relu(x)
    a = lw.elem_opr(E.ABS, [ins[0]], name + ":abs")
    n = lw.elem_opr(E.NEGATE, [a], name + ":neg")
    e = lw.elem_opr(E.EXP, [n], name + ":exp")
    lg = lw.elem_opr(E.LOG1P, [e], name + ":log1p")
    r = lw.elem_opr(E.RELU, [ins[0]], name + ":relu")
    return lw.elem_opr(E.ADD, [lg, r], name)


def _rw_logsigmoid(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    # logsigmoid(x) = -softplus(-x)
    nx = lw.elem_opr(E.NEGATE, [ins[0]], name + ":negx")
    a = lw.elem_opr(E.ABS, [nx], name + ":abs")
    n = lw.elem_opr(E.NEGATE, [a], name + ":neg")
    e = lw.elem_opr(E.EXP, [n], name + ":exp")
    lg = lw.elem_opr(E.LOG1P, [e], name + ":log1p")
    r = lw.elem_opr(E.RELU, [nx], name + ":relu")
    s = lw.elem_opr(E.ADD, [lg, r], name + ":softplus")
    return lw.elem_opr(E.NEGATE, [s], name)


def _rw_hyperbolic(kind: str) -> Any:
    def rewrite(lw: Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
        x = ins[0]
        if kind in ("SINH", "COSH"):
            ep = lw.elem_opr(E.EXP, [x], name + ":exp")
            nx = lw.elem_opr(E.NEGATE, [x], name + ":negx")
            en = lw.elem_opr(E.EXP, [nx], name + ":expneg")
            s = lw.elem_opr(E.SUB if kind == "SINH" else E.ADD, [ep, en], name + ":comb")
            return lw.elem_opr(E.MUL, [s, lw.scalar(0.5, op.output)], name)
        one = lw.scalar(1.0, op.output)
        if kind == "ATANH":
            num = lw.elem_opr(E.ADD, [one, x], name + ":num")
            den = lw.elem_opr(E.SUB, [one, x], name + ":den")
            q = lw.elem_opr(E.TRUE_DIV, [num, den], name + ":q")
            lg = lw.elem_opr(E.LOG, [q], name + ":log")
            return lw.elem_opr(E.MUL, [lg, lw.scalar(0.5, op.output)], name)
        sq = lw.elem_opr(E.MUL, [x, x], name + ":sq")
        t = lw.elem_opr(E.ADD if kind == "ASINH" else E.SUB, [sq, one], name + ":t")
        r = lw.elem_opr(E.POW, [t, lw.scalar(0.5, op.output)], name + ":sqrt")
        s = lw.elem_opr(E.ADD, [x, r], name + ":sum")
        return lw.elem_opr(E.LOG, [s], name)

    return rewrite


COMPAT_REWRITES: dict[Any, Any] = {
    E.SQRT: _rw_sqrt,
    E.SQUARE: _rw_square,
    E.TAN: _rw_tan,
    E.CLIP: _rw_clip,
    E.RELU6: _rw_relu6,
    E.HSIGMOID: _rw_hsigmoid,
    E.SIGN: _rw_sign,
    E.PRELU: _rw_prelu,
    E.SOFTPLUS: _rw_softplus,
    E.LOGSIGMOID: _rw_logsigmoid,
    E.SINH: _rw_hyperbolic("SINH"),
    E.COSH: _rw_hyperbolic("COSH"),
    E.ASINH: _rw_hyperbolic("ASINH"),
    E.ACOSH: _rw_hyperbolic("ACOSH"),
    E.ATANH: _rw_hyperbolic("ATANH"),
}
