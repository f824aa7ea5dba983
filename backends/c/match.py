"""What the C kernels' availability rules read off an op: element-type codes, quantization
parameters, logical shapes of blocked tensors, convolution and pooling geometry, strided views.

The rules themselves are the ``match`` methods of the kernel units (the templates), beside the code
they render; this module holds what several of them share.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float16Type, Float32Type, IntegerType, Signedness, TensorType
from xdsl.ir import Operation, SSAValue

from backends.c.isa_facts import ISA_FACTS
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.dtypes import QuantizedType, numpy_dtype
from passes.lowering.kernels import Lowered, broadcast_strides, const_array, shape
from semantics.kernels import adaptive_pool_params
from semantics.quant_kernels import _to_acc_scale as to_acc_scale


def dtype_key(codes: tuple[str, ...], scales: tuple[float, ...], zps: tuple[int, ...]) -> str:
    """A short stable tag of quantization parameters for symbol names."""
    text = ",".join(f"{c}:{s!r}:{z}" for c, s, z in zip(codes, scales, zps, strict=True))
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def is_f32(*values: SSAValue) -> bool:
    return all(
        isinstance(v.type, TensorType) and isinstance(v.type.element_type, Float32Type) for v in values
    )


def gemm_blocking(isa: str) -> dict[str, int]:
    em = ISA_FACTS[isa]
    return {"mr": em.gemm_mr, "nr": em.gemm_nr, "kc": em.gemm_kc}


ACT = {
    enums.NonlineMode.IDENTITY: "identity",
    enums.NonlineMode.RELU: "relu",
    enums.NonlineMode.SIGMOID: "sigmoid",
    enums.NonlineMode.H_SWISH: "hswish",
}


def conv_common(
    op: Operation, element: str = "f32"
) -> tuple[dict[str, Any], list[SSAValue | np.ndarray]] | None:
    """Geometry, epilogue and operands of a plain NCHW convolution whose values are all of ``element``
    (a :func:`code`: ``f32``, or ``f16`` for the float16-compute kernels)."""
    assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
    p = op.params()
    if p["format"] != enums.Format.NCHW or any(code(v) != element for v in (*op.operands, *op.results)):
        return None
    x, w = op.operands[0], op.operands[1]
    wv = const_array(w)
    if wv is None:
        return None  # run-time filters would need run-time packing
    w_operand: SSAValue | np.ndarray = w
    if p["mode"] == enums.ConvMode.CONVOLUTION:
        wv = np.ascontiguousarray(wv[..., ::-1, ::-1])
        w_operand = wv  # a new constant: the true convolution's flipped filter
    n, ic, ih, iw = shape(x)
    _, oc, oh, ow = shape(op.results[0])
    groups = wv.shape[0] if p["sparse"] == enums.ConvSparse.GROUP else 1
    fh, fw = wv.shape[-2:]
    params = {
        "n": n, "ic": ic, "ih": ih, "iw": iw, "oc": oc, "oh": oh, "ow": ow, "fh": fh, "fw": fw,
        "sh": p["stride"][0], "sw": p["stride"][1], "ph": p["padding"][0], "pw": p["padding"][1],
        "dh": p["dilation"][0], "dw": p["dilation"][1], "groups": groups,
        "bias": 0, "residual": 0, "act": "identity",
    }  # fmt: skip
    operands: list[SSAValue | np.ndarray] = [x, w_operand]
    if isinstance(op, T.ConvBiasOp) and not conv_bias_epilogue(
        op, params, operands, lambda v: shape(v) in ((1, oc, 1, 1), (oc,))
    ):
        return None
    return params, operands


def depthwise_lowered(
    op: Operation, got: tuple[dict[str, Any], list[SSAValue | np.ndarray]] | None
) -> Lowered | None:
    """:func:`conv_common`'s result as a depthwise kernel's (one filter per channel: ``c`` in place of
    ``ic``/``oc``/``groups``), or None where the convolution is not depthwise."""
    if got is None:
        return None
    params, operands = got
    if not (params["groups"] == params["ic"] == params["oc"]):
        return None
    params = {k: v for k, v in params.items() if k not in ("ic", "oc", "groups")}
    params["c"] = shape(op.operands[0])[1]
    return Lowered(params, operands)


def conv_bias_epilogue(
    op: T.ConvBiasOp, params: dict[str, Any], operands: list[Any], is_bias: Callable[[SSAValue], bool]
) -> bool:
    """A ConvBias's fused epilogue into a kernel's parameters: its activation as ``params["act"]``,
    then its addends after the filter (a per-channel bias where ``is_bias`` accepts one, an addend of
    the result's shape, each at most once) appended to ``operands`` with ``params["bias"]`` /
    ``params["residual"]`` set. False where the kernel cannot fuse it (another activation or
    addend)."""
    params["act"] = ACT.get(op.params()["nonline_mode"], "")
    if not params["act"]:
        return False
    bias = residual = None
    for v in op.operands[2:]:
        if bias is None and is_bias(v):
            bias = v
        elif residual is None and shape(v) == shape(op.results[0]):
            residual = v
        else:
            return False
    for key, v in (("bias", bias), ("residual", residual)):
        if v is not None:
            params[key] = 1
            operands.append(v)
    return True


def axis_split(s: tuple[int, ...], axis: int) -> dict[str, int]:
    return {"outer": math.prod(s[:axis]), "axis": s[axis], "inner": math.prod(s[axis + 1 :])}


def row_major(s: tuple[int, ...]) -> list[int]:
    return [math.prod(s[i + 1 :]) for i in range(len(s))]


def strided_view(op: Operation) -> tuple[tuple[int, ...], list[int], int]:
    """(output shape, element strides into the input, element offset) of a dimshuffle, broadcast or
    subtensor: each is a strided copy of its input, whatever the element type."""
    s = shape(op.operands[0])
    src = row_major(s)
    out = shape(op.results[0])
    if isinstance(op, T.DimshuffleOp):
        return out, [0 if a == -1 else src[a] for a in op.params()["pattern"]], 0
    if isinstance(op, T.BroadcastOp):
        return out, list(broadcast_strides(s, out)), 0
    assert isinstance(op, T.SubtensorOp)
    return slice_view(s, op.params())


def slice_view(s: Sequence[int], p: dict[str, Any]) -> tuple[tuple[int, ...], list[int], int]:
    """(shape of the selected slice without dropped axes, element strides into ``s``, element
    offset) of SubtensorOp-style parameters: the value's element at a row-major index of the slice
    shape sits at ``offset + sum(idx * strides)`` of the source."""
    src = row_major(tuple(s))
    full, strides, offset, dropped = list(s), list(src), 0, set()
    for axis, start, stop, step, drop in zip(
        p["axes"], p["starts"], p["stops"], p["steps"], p["drop"], strict=True
    ):
        r = range(*slice(start, stop, step).indices(s[axis]))
        offset += (r.start if len(r) else 0) * src[axis]
        strides[axis] = src[axis] * step
        full[axis] = len(r)
        if drop:
            dropped.add(axis)
    keep = [i for i in range(len(s)) if i not in dropped]
    return tuple(full[i] for i in keep), [strides[i] for i in keep], offset


INT_CODES = {(1, True): "b1", (32, True): "i32", (16, True): "i16", (8, True): "i8", (8, False): "ui8"}


def code(v: SSAValue) -> str | None:
    """The element-type code of a value (see :mod:`backends.c.templates.portable.typed`): ``f32``, ``f16``,
    quantized ``q8``/``q32``/``u8``, plain ``b1`` (bool, one byte), ``i32``, ``i16``, ``i8``, ``ui8``;
    None for anything else."""
    t = v.type
    assert isinstance(t, TensorType)
    e = t.element_type
    if isinstance(e, Float32Type):
        return "f32"
    if isinstance(e, Float16Type):
        return "f16"
    if isinstance(e, QuantizedType):
        return {"qint8": "q8", "qint32": "q32", "quint8": "u8"}.get(e.kind.data)
    if isinstance(e, IntegerType):
        signed = e.signedness.data != Signedness.UNSIGNED
        return INT_CODES.get((e.width.data, signed))
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


def blocked_conv_geometry(op: Operation, modes: Mapping[object, str], block: int) -> dict[str, Any] | None:
    """A convolution's geometry in a channel-blocked format (NCHW44: ``block`` 4, NCHW88: 8): the
    filter's mode (dense, group, chan, hybrid) named by ``modes`` for its layout, the logical sizes,
    window, stride, padding, dilation and groups; None where the filter layout has no mode or the
    channels do not fill whole blocks."""
    p = op.params()  # type: ignore[attr-defined]
    x, w = op.operands[:2]
    mode = modes.get(L.layout_of(w.type))  # type: ignore[arg-type]
    if mode is None:
        return None
    n, ic, ih, iw = logical(x)
    _, oc, oh, ow = logical(op.results[0])
    wl = logical(w)
    groups = wl[0] if mode in ("group", "chan") else 1
    if (
        oc % block
        or (mode in ("dense", "group") and (ic // groups) % block)
        or (mode == "chan" and groups % block)
    ):
        return None
    return {
        "mode": mode, "n": n, "ic": ic, "ih": ih, "iw": iw, "oc": oc, "oh": oh, "ow": ow,
        "fh": wl[-2], "fw": wl[-1], "sh": p["stride"][0], "sw": p["stride"][1], "ph": p["padding"][0],
        "pw": p["padding"][1], "dh": p["dilation"][0], "dw": p["dilation"][1], "groups": groups,
    }  # fmt: skip


def acc_scale(x: SSAValue, w: SSAValue) -> float:
    """The reference's accumulator scale ``s_x * s_w`` (a float64 product, used as float32)."""
    ex, ew = (v.type.element_type for v in (x, w))  # type: ignore[attr-defined]
    assert isinstance(ex, QuantizedType) and isinstance(ew, QuantizedType)
    return ex.scale_value * ew.scale_value


def int_bias(b: SSAValue, scale: float) -> np.ndarray | None:
    """A constant bias as int32 at the accumulator's scale (the reference's ``_to_acc_scale``)."""
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
    out = to_acc_scale(arr, scale).reshape(-1)
    if np.abs(out).max(initial=0) >= 2**31:
        return None
    return out.astype(np.int32)


def requant_params(x: SSAValue, w: SSAValue, y: SSAValue) -> dict[str, Any] | None:
    """``out`` kind and scales of an int8 product's result: ``q32_same`` (the accumulator as is),
    ``f32`` or a quantized type (requantized)."""
    acc = acc_scale(x, w)
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


def same_type(op: Operation) -> bool:
    return op.operands[0].type.element_type == op.results[0].type.element_type  # type: ignore[attr-defined]


POOL_NAMES = {
    enums.PoolingMode.MAX: "max",
    enums.PoolingMode.AVERAGE: "average",
    enums.PoolingMode.AVERAGE_COUNT_EXCLUDE_PADDING: "average_exclude_padding",
}


def pool_geometry(op: Operation) -> dict[str, Any] | None:
    assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
    p = op.params()
    n, c, ih, iw = logical(op.operands[0])
    _, _, oh, ow = logical(op.results[0])
    if isinstance(op, T.AdaptivePoolingOp):
        window, stride = adaptive_pool_params((ih, iw), p["out_shape"])
        pad: tuple[int, int] = (0, 0)
    else:
        window, stride, pad = p["window"], p["stride"], p["padding"]
    return {
        "mode": POOL_NAMES[p["mode"]], "n": n, "c": c, "ih": ih, "iw": iw, "oh": oh, "ow": ow,
        "fh": window[0], "fw": window[1], "sh": stride[0], "sw": stride[1], "ph": pad[0], "pw": pad[1],
    }  # fmt: skip


def same_plain_type(op: Operation) -> bool:
    """Non-float32 plain tensors of one element type (float32 ones have their own kernels)."""
    values = [*op.operands, *op.results]
    types = {v.type.element_type for v in values}  # type: ignore[attr-defined]
    return (
        len(types) == 1
        and code(values[0]) not in ("f32", None)
        and all(L.layout_of(v.type) is None for v in values)
    )


def storage(op: Operation) -> str | None:
    """``f32``, or ``f16`` for float16 storage computed in float32; None for anything else."""
    dt = code(op.operands[0])
    if dt not in ("f32", "f16") or any(code(v) != dt for v in (*op.operands, *op.results)):
        return None
    if dt == "f16" and op.params().get("compute_mode") != enums.ComputeMode.FLOAT32:
        return None
    return dt
