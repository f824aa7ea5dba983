"""Kernel-selection rules for blocked layouts and non-float32 element types (the ARM targets' ops),
appended to the one registry of :mod:`passes.lowering.rules`:

* NCHW44 / NCHW44_DOT convolutions (``conv2d_nchw44_dot`` before ``conv2d_nchw44`` and
  ``conv2d_nchw44_q8``; which one serves is decided by the filter layout and element type) and
  NCHW44 pooling;
* ``layout.relayout``, ``mgb.typecvt``;
* int8: elementwise and ElemwiseMultiType Q-modes, NCHW pooling, matrix multiplication and the NCHW
  convolution fallback; int8/float16 data movement (dimshuffle, broadcast, subtensor, concat, split).

int8 convolutions get their bias ahead of time as int32 at the accumulator's scale (exactly the
reference's ``_to_acc_scale``), and their requantization constants ``s_acc = float32(s_x * s_w)``
and ``1 / s_out`` as float32 values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float16Type, Float32Type, TensorType
from xdsl.ir import Operation, SSAValue

from backends.c.templates.typed import dtype_key
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.dtypes import QuantizedType, numpy_dtype
from passes.lowering.rules import ACT, Lowered, candidate, const_array, shape, strided_view

Layout = L.Layout


def code(v: SSAValue) -> str | None:
    """The element-type code of a value (see :mod:`backends.c.templates.typed`), or None."""
    t = v.type
    assert isinstance(t, TensorType)
    e = t.element_type
    if isinstance(e, Float32Type):
        return "f32"
    if isinstance(e, Float16Type):
        return "f16"
    if isinstance(e, QuantizedType):
        return {"qint8": "q8", "qint32": "q32", "quint8": "u8"}.get(e.kind.data)
    return None


def qparams(v: SSAValue) -> tuple[float, int]:
    """(float32 scale, zero point) of a quantized value; (1.0, 0) for float values."""
    t = v.type
    assert isinstance(t, TensorType)
    e = t.element_type
    if isinstance(e, QuantizedType):
        return float(np.float32(e.scale_value)), e.zero_point_value
    return 1.0, 0


def esize(v: SSAValue) -> int:
    t = v.type
    assert isinstance(t, TensorType)
    return numpy_dtype(t.element_type).itemsize


def logical(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(L.to_logical(t).get_shape())


# ----------------------------------------------------------------------------------------------
# int8 requantization parameters


def _acc_scale(x: SSAValue, w: SSAValue) -> float:
    """The reference's accumulator scale ``s_x * s_w`` (a float64 product, used as float32)."""
    ex, ew = (v.type.element_type for v in (x, w))  # type: ignore[attr-defined]
    assert isinstance(ex, QuantizedType) and isinstance(ew, QuantizedType)
    return ex.scale_value * ew.scale_value


def _int_bias(b: SSAValue, acc_scale: float) -> np.ndarray | None:
    """A constant bias as int32 at the accumulator's scale (the reference's ``_to_acc_scale``)."""
    from backends.reference.quant_kernels import _to_acc_scale

    arr = const_array(b)
    if arr is None:
        return None
    t = b.type
    assert isinstance(t, TensorType)
    arr = (
        np.asarray(arr).view(numpy_dtype(t.element_type))
        if isinstance(t.element_type, QuantizedType)
        else arr
    )
    out = _to_acc_scale(arr, acc_scale).reshape(-1)
    if np.abs(out).max(initial=0) >= 2**31:
        return None
    return out.astype(np.int32)


def _requant_params(x: SSAValue, w: SSAValue, y: SSAValue) -> dict[str, Any] | None:
    """``out`` kind and scales of an int8 product's result: ``q32_same`` (the accumulator as is),
    ``f32`` or a quantized type (requantized)."""
    acc = _acc_scale(x, w)
    out = code(y)
    s_out, zp_out = qparams(y)
    p: dict[str, Any] = {"s_acc": float(np.float32(acc)), "s_out": s_out, "zp_out": zp_out}
    if out == "q32" and np.float32(s_out) == np.float32(acc):
        p["out"] = "q32_same"
    elif out in ("q8", "u8", "q32", "f32"):
        p["out"] = out
    else:
        return None
    p["inv_out"] = float(np.float32(1.0) / np.float32(s_out))
    p["qid"] = dtype_key(("acc", p["out"]), (p["s_acc"], s_out), (0, zp_out))
    return p


# ----------------------------------------------------------------------------------------------
# NCHW44 convolutions


MODES = {
    Layout.KCRSc4k4: "dense", Layout.KCRSk4c4: "dense", Layout.GKCRSc4k4: "group", Layout.GKCRSk4c4: "group",
    Layout.C11RSc4: "chan", Layout.KRSCk4: "hybrid",
}  # fmt: skip
DOT_FILTERS = (Layout.KCRSk4c4, Layout.GKCRSk4c4)


def _nchw44_common(
    op: Operation, isa: str
) -> tuple[dict[str, Any], list[SSAValue | np.ndarray], Layout] | None:
    assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
    p = op.params()
    if p["format"] not in (enums.Format.NCHW44, enums.Format.NCHW44_DOT):
        return None
    if p["mode"] != enums.ConvMode.CROSS_CORRELATION:
        return None
    x, w, *rest = op.operands
    flayout = L.layout_of(w.type)
    if flayout not in MODES:
        return None
    mode = MODES[flayout]
    n, ic, ih, iw = logical(x)
    _, oc, oh, ow = logical(op.results[0])
    wl = logical(w)
    groups = wl[0] if mode in ("group", "chan") else 1
    if oc % 4 or (mode in ("dense", "group") and (ic // groups) % 4) or (mode == "chan" and groups % 4):
        return None
    params: dict[str, Any] = {
        "mode": mode, "n": n, "ic": ic, "ih": ih, "iw": iw, "oc": oc, "oh": oh, "ow": ow,
        "fh": wl[-2], "fw": wl[-1], "sh": p["stride"][0], "sw": p["stride"][1], "ph": p["padding"][0],
        "pw": p["padding"][1], "dh": p["dilation"][0], "dw": p["dilation"][1], "groups": groups,
        "bias": 0, "act": "identity",
    }  # fmt: skip
    operands: list[SSAValue | np.ndarray] = [x, w]
    if isinstance(op, T.ConvBiasOp):
        params["act"] = ACT.get(p["nonline_mode"], "")
        if not params["act"]:
            return None
        # a per-channel bias and/or a tensor of the result's shape (a fused residual add)
        out_type = op.results[0].type
        bias = [b for b in rest if math.prod(shape(b)) == oc and L.layout_of(b.type) in (Layout.NCHW44, None)]
        res = [b for b in rest if b.type == out_type and b not in bias]
        if len(bias) > 1 or len(res) > 1 or len(bias) + len(res) != len(rest):
            return None
        if bias:
            params["bias"] = 1
            operands.append(bias[0])
        if res:
            params["residual"] = 1
            operands.append(res[0])
    return params, operands, flayout


def _nchw44_float(op: Operation, isa: str) -> Lowered | None:
    got = _nchw44_common(op, isa)
    if got is None:
        return None
    params, operands, flayout = got
    dt = code(op.operands[0])
    if dt not in ("f32", "f16") or any(code(v) != dt for v in (*op.operands, *op.results)):
        return None
    acc = dt
    if dt == "f16" and op.params().get("compute_mode") == enums.ComputeMode.FLOAT32:
        acc = "f32"
    if dt == "f16" and acc == "f16" and isa not in ("fp16", "generic"):
        return None  # float16 arithmetic needs ARMv8.2 FP16 (the fp16 ISA)
    params.update(dtype=dt, acc=acc)
    return Lowered(params, operands)


def _nchw44_int8(op: Operation, isa: str, dot: bool) -> Lowered | None:
    got = _nchw44_common(op, isa)
    if got is None:
        return None
    params, operands, flayout = got
    x, w = op.operands[0], op.operands[1]
    if code(x) != "q8" or code(w) != "q8" or (flayout in DOT_FILTERS) != dot or params.get("residual"):
        return None
    if qparams(x)[1] or qparams(w)[1] or params["act"] not in ("identity", "relu"):
        return None
    rq = _requant_params(x, w, op.results[0])
    if rq is None or rq["out"] != "q8" or rq["zp_out"]:
        return None
    params.update(dtype="q8", s_acc=rq["s_acc"], inv_out=rq["inv_out"], qid=rq["qid"])
    if params["bias"]:
        b = _int_bias(op.operands[2], _acc_scale(x, w))
        if b is None:
            return None
        operands[2] = b
    return Lowered(params, operands)


for _cls in (T.ConvolutionOp, T.ConvBiasOp):
    candidate(_cls, "conv2d_nchw44_dot")(lambda op, isa: _nchw44_int8(op, isa, True))
    candidate(_cls, "conv2d_nchw44")(_nchw44_float)
    candidate(_cls, "conv2d_nchw44_q8")(lambda op, isa: _nchw44_int8(op, isa, False))


# ----------------------------------------------------------------------------------------------
# Pooling


def _same_type(op: Operation) -> bool:
    return op.operands[0].type.element_type == op.results[0].type.element_type  # type: ignore[attr-defined]


_POOL_NAMES = {
    enums.PoolingMode.MAX: "max",
    enums.PoolingMode.AVERAGE: "average",
    enums.PoolingMode.AVERAGE_COUNT_EXCLUDE_PADDING: "average_exclude_padding",
}


def _pool_geometry(op: Operation) -> dict[str, Any] | None:
    assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
    from backends.reference.kernels import adaptive_pool_params

    p = op.params()
    n, c, ih, iw = logical(op.operands[0])
    _, _, oh, ow = logical(op.results[0])
    if isinstance(op, T.AdaptivePoolingOp):
        window, stride = adaptive_pool_params((ih, iw), p["out_shape"])
        pad: tuple[int, int] = (0, 0)
    else:
        window, stride, pad = p["window"], p["stride"], p["padding"]
    return {
        "mode": _POOL_NAMES[p["mode"]], "n": n, "c": c, "ih": ih, "iw": iw, "oh": oh, "ow": ow,
        "fh": window[0], "fw": window[1], "sh": stride[0], "sw": stride[1], "ph": pad[0], "pw": pad[1],
    }  # fmt: skip


def _pool_nchw44(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
    if op.params()["format"] != enums.Format.NCHW44 or not _same_type(op):
        return None
    dt = code(op.operands[0])
    if dt not in ("f32", "f16", "q8") or (dt == "q8" and qparams(op.operands[0])[1]):
        return None
    params = _pool_geometry(op)
    if params is None or params["c"] % 4:
        return None
    params["dtype"] = dt
    return Lowered(params, [op.operands[0]])


def _pool_q8(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
    if op.params()["format"] != enums.Format.NCHW or not _same_type(op) or code(op.operands[0]) != "q8":
        return None
    if qparams(op.operands[0])[1]:
        return None
    params = _pool_geometry(op)
    return None if params is None else Lowered(params, [op.operands[0]])


for _cls in (T.PoolingOp, T.AdaptivePoolingOp):
    candidate(_cls, "pool2d_nchw44")(_pool_nchw44)
    candidate(_cls, "pool2d_q8")(_pool_q8)


# ----------------------------------------------------------------------------------------------
# Relayout and type conversion


@candidate(L.RelayoutOp, "relayout")
def _relayout(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, L.RelayoutOp)
    p = op.params()
    if (p["src"] is None) == (p["dst"] is None):
        return None  # blocked -> blocked: not needed by the NCHWxx passes
    blocked = p["src"] if p["src"] is not None else p["dst"]
    ls, ld = op.logical_shapes()
    split, lst, pst, bounds = L.SPECS[blocked].split_strides(ls)
    params = {
        "src": p["src"].value if p["src"] is not None else "plain",
        "dst": p["dst"].value if p["dst"] is not None else "plain",
        "logical": ls, "split": split, "lstrides": lst, "pstrides": pst,
        "bounds": bounds, "esize": esize(op.operands[0]),
    }  # fmt: skip
    return Lowered(params, [op.operands[0]])


@candidate(T.TypeCvtOp, "typecvt")
def _typecvt(op: Operation, isa: str) -> Lowered | None:
    src, dst = code(op.operands[0]), code(op.results[0])
    if src is None or dst is None:
        return None
    s_in, zp_in = qparams(op.operands[0])
    s_out, zp_out = qparams(op.results[0])
    params = {
        "src": src, "dst": dst, "size": math.prod(shape(op.results[0])), "s_in": s_in, "zp_in": zp_in,
        "s_out": s_out, "zp_out": zp_out, "qid": dtype_key((src, dst), (s_in, s_out), (zp_in, zp_out)),
    }  # fmt: skip
    return Lowered(params, [op.operands[0]])


# ----------------------------------------------------------------------------------------------
# int8 elementwise


def _elemwise_q(op: Operation, float_mode: str) -> Lowered | None:
    from backends.c.templates.generic import ELEMWISE_C, broadcast_strides, collapse

    values = [*op.operands, op.results[0]]
    codes = [code(v) for v in values]
    if float_mode not in ELEMWISE_C or None in codes or "f16" in codes:
        return None
    if not any(c in ("q8", "q32", "u8") for c in codes):
        return None  # float32 elementwise ops have their own kernel
    out = shape(op.results[0])
    strides = [broadcast_strides(shape(v), out) for v in op.operands]
    cshape, cstrides = collapse(out, strides)
    qp = [qparams(v) for v in values]
    scales, zps = tuple(s for s, _ in qp), tuple(z for _, z in qp)
    params = {
        "mode": float_mode, "shape": cshape, "strides": cstrides, "dtypes": tuple(codes), "scales": scales,
        "zps": zps, "qid": dtype_key(tuple(c or "" for c in codes), scales, zps),
    }  # fmt: skip
    return Lowered(params, list(op.operands))


@candidate(T.ElemwiseOp, "elemwise_q")
def _elemwise_quantized(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.ElemwiseOp)
    return _elemwise_q(op, op.params()["mode"].value)


@candidate(T.ElemwiseMultiTypeOp, "elemwise_q")
def _elemwise_multi_type(op: Operation, isa: str) -> Lowered | None:
    from backends.reference.quant_kernels import Q_MODES

    assert isinstance(op, T.ElemwiseMultiTypeOp)
    mode = op.params()["mode"]
    if mode not in Q_MODES:
        return None
    return _elemwise_q(op, Q_MODES[mode].value)


# ----------------------------------------------------------------------------------------------
# int8 matrix multiplication and NCHW convolution


@candidate(T.MatrixMulOp, "matmul_q8")
@candidate(T.BatchedMatrixMulOp, "matmul_q8")
def _matmul_q8(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.MatrixMulOp | T.BatchedMatrixMulOp)
    a, b = op.operands
    if code(a) != "q8" or code(b) != "q8" or qparams(a)[1] or qparams(b)[1]:
        return None
    rq = _requant_params(a, b, op.results[0])
    if rq is None:
        return None
    p = op.params()
    sa, sb = shape(a), shape(b)
    batched = isinstance(op, T.BatchedMatrixMulOp)
    params = {
        "batch": sa[0] if batched else 1, "m": sa[-1] if p["transpose_a"] else sa[-2],
        "k": sa[-2] if p["transpose_a"] else sa[-1], "n": sb[-2] if p["transpose_b"] else sb[-1],
        "ta": int(bool(p["transpose_a"])), "tb": int(bool(p["transpose_b"])), "b_const": int(not batched),
        **rq,
    }  # fmt: skip
    return Lowered(params, [a, b])


def _conv_q8(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
    p = op.params()
    x, w, *rest = op.operands
    if (
        p["format"] != enums.Format.NCHW
        or code(x) != "q8"
        or code(w) != "q8"
        or qparams(x)[1]
        or qparams(w)[1]
    ):
        return None
    if L.layout_of(w.type) is not None:
        return None
    rq = _requant_params(x, w, op.results[0])
    if rq is None:
        return None
    wv = const_array(w)
    w_operand: SSAValue | np.ndarray = w
    if p["mode"] == enums.ConvMode.CONVOLUTION:
        if wv is None:
            return None
        w_operand = np.ascontiguousarray(wv[..., ::-1, ::-1])
    n, ic, ih, iw = shape(x)
    _, oc, oh, ow = shape(op.results[0])
    ws = shape(w)
    groups = ws[0] if p["sparse"] == enums.ConvSparse.GROUP else 1
    params: dict[str, Any] = {
        "n": n, "ic": ic, "ih": ih, "iw": iw, "oc": oc, "oh": oh, "ow": ow, "fh": ws[-2], "fw": ws[-1],
        "sh": p["stride"][0], "sw": p["stride"][1], "ph": p["padding"][0], "pw": p["padding"][1],
        "dh": p["dilation"][0], "dw": p["dilation"][1], "groups": groups, "bias": 0, "act": "identity", **rq,
    }  # fmt: skip
    operands: list[SSAValue | np.ndarray] = [x, w_operand]
    if isinstance(op, T.ConvBiasOp):
        params["act"] = {enums.NonlineMode.IDENTITY: "identity", enums.NonlineMode.RELU: "relu"}.get(
            p["nonline_mode"], ""
        )
        if not params["act"] or len(rest) > 1:
            return None
        if rest:
            if math.prod(shape(rest[0])) != oc:
                return None
            bias = _int_bias(rest[0], _acc_scale(x, w))
            if bias is None:
                return None
            params["bias"] = 1
            operands.append(bias)
    return Lowered(params, operands)


candidate(T.ConvolutionOp, "conv2d_q8")(_conv_q8)
candidate(T.ConvBiasOp, "conv2d_q8")(_conv_q8)


# ----------------------------------------------------------------------------------------------
# Data movement for other element types


def _typed(op: Operation) -> bool:
    """Non-float32 plain tensors of one element type (float32 ones have their own kernels)."""
    values = [*op.operands, *op.results]
    types = {v.type.element_type for v in values}  # type: ignore[attr-defined]
    return (
        len(types) == 1
        and code(values[0]) not in ("f32", None)
        and all(L.layout_of(v.type) is None for v in values)
    )


def _copy_typed(op: Operation, out: tuple[int, ...], strides: list[int], offset: int) -> Lowered | None:
    from backends.c.templates.generic import collapse

    if not _typed(op):
        return None
    cshape, (cstrides,) = collapse(out, [strides])
    params = {"shape": cshape, "strides": cstrides, "offset": offset, "esize": esize(op.operands[0])}
    return Lowered(params, [op.operands[0]])


@candidate(T.DimshuffleOp, "copy_typed")
def _dimshuffle_typed(op: Operation, isa: str) -> Lowered | None:
    return _copy_typed(op, *strided_view(op))


@candidate(T.BroadcastOp, "copy_typed")
def _broadcast_typed(op: Operation, isa: str) -> Lowered | None:
    return _copy_typed(op, *strided_view(op))


@candidate(T.SubtensorOp, "copy_typed")
def _subtensor_typed(op: Operation, isa: str) -> Lowered | None:
    return _copy_typed(op, *strided_view(op))


@candidate(T.ConcatOp, "concat_typed")
def _concat_typed(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.ConcatOp)
    if not _typed(op):
        return None
    axis = op.params()["axis"]
    out = shape(op.results[0])
    chunks = tuple(math.prod(shape(v)[axis:]) for v in op.operands)
    return Lowered({"outer": math.prod(out[:axis]), "chunks": chunks, "esize": esize(op.results[0])},
                   list(op.operands))  # fmt: skip


@candidate(T.SplitOp, "split_typed")
def _split_typed(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.SplitOp)
    if not _typed(op):
        return None
    axis = op.params()["axis"]
    src = shape(op.operands[0])
    chunks = tuple(math.prod(shape(r)[axis:]) for r in op.results)
    return Lowered({"outer": math.prod(src[:axis]), "chunks": chunks, "esize": esize(op.operands[0])},
                   [op.operands[0]])  # fmt: skip
