"""The one kernel-selection registry: per ``mgb`` op, an ordered list of candidate kernel families.

A candidate is a family name and a rule that returns the kernel's parameters for an op, or ``None`` when
the family cannot run that op (the shape/dtype/parameter half of the availability check). The other
half is whether the target's backend has a template for the family on one of its ISAs, searched in the
target's order (:func:`backends.c.templates.lookup`). The first available candidate wins, so more
specialised kernels are listed first (MegCC's ordered candidates); a per-target override is a candidate
whose rule checks the ISA (JAX's per-platform lowering rules).

Rules see the op and the ISA of the template that would serve it, and return a :class:`Lowered`: the
parameters, the operands in the kernel's order (constants already transformed where the op's semantics
demand, e.g. flipped for a true convolution), and the op's result types.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float32Type, TensorType
from xdsl.ir import Operation, SSAValue

from backends.reference.kernels import adaptive_pool_params
from dialects import enums
from dialects import tensor as T


@dataclass
class Lowered:
    params: dict[str, Any]
    operands: list[SSAValue | np.ndarray]  # arrays become new constants


Rule = Callable[[Operation, str], Lowered | None]


@dataclass(frozen=True)
class Candidate:
    family: str
    rule: Rule


RULES: dict[type[Operation], list[Candidate]] = {}


def candidate(op_cls: type[Operation], family: str) -> Callable[[Rule], Rule]:
    """Append a candidate for ``op_cls`` (decorator); the order of registration is the order tried."""

    def register(rule: Rule) -> Rule:
        RULES.setdefault(op_cls, []).append(Candidate(family, rule))
        return rule

    return register


# ----------------------------------------------------------------------------------------------
# helpers


def shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def is_f32(*values: SSAValue) -> bool:
    return all(
        isinstance(v.type, TensorType) and isinstance(v.type.element_type, Float32Type) for v in values
    )


def const_array(v: SSAValue) -> np.ndarray | None:
    op = v.owner
    if isinstance(op, T.ConstOp) and not op.value.is_elided:
        return op.numpy()
    from dialects.kernel import WeightOp

    if isinstance(op, WeightOp) and not op.value.is_elided:
        return op.numpy()
    return None


def gemm_blocking(isa: str) -> dict[str, int]:
    from backends.c.isas import ISA_EMITTERS as EMITTERS

    em = EMITTERS[isa]
    return {"mr": em.gemm_mr, "nr": em.gemm_nr, "kc": em.gemm_kc}


ACT = {
    enums.NonlineMode.IDENTITY: "identity",
    enums.NonlineMode.RELU: "relu",
    enums.NonlineMode.SIGMOID: "sigmoid",
    enums.NonlineMode.H_SWISH: "hswish",
}


# ----------------------------------------------------------------------------------------------
# Convolution


def _conv_common(op: Operation) -> tuple[dict[str, Any], list[SSAValue | np.ndarray]] | None:
    assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
    p = op.params()
    if p["format"] != enums.Format.NCHW or not is_f32(*op.operands, *op.results):
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
    bias = residual = None
    if isinstance(op, T.ConvBiasOp):
        params["act"] = ACT.get(p["nonline_mode"], "")
        if not params["act"]:
            return None
        extra = list(op.operands[2:])
        for v in extra:
            if math.prod(shape(v)) == oc and shape(v) in ((1, oc, 1, 1), (oc,)):
                if bias is not None:
                    return None
                bias = v
            elif shape(v) == shape(op.results[0]):
                if residual is not None:
                    return None
                residual = v
            else:
                return None
    if bias is not None:
        params["bias"] = 1
        operands.append(bias)
    if residual is not None:
        params["residual"] = 1
        operands.append(residual)
    return params, operands


def _depthwise(op: Operation, isa: str) -> Lowered | None:
    got = _conv_common(op)
    if got is None:
        return None
    params, operands = got
    if not (params["groups"] == params["ic"] == params["oc"]):
        return None
    params = {k: v for k, v in params.items() if k not in ("ic", "oc", "groups")}
    params["c"] = shape(op.operands[0])[1]
    return Lowered(params, operands)


def _conv_gemm(op: Operation, isa: str) -> Lowered | None:
    from backends.c.templates.gemm import ConvGemm, conv_pack_mode

    got = _conv_common(op)
    if got is None:
        return None
    params, operands = got
    params.update(gemm_blocking(isa))
    params["pack"] = conv_pack_mode(params, params["nr"])
    # loop order: keep the smaller operand cache-resident and stream the larger one once. With more
    # filter bytes than im2col bytes (deep layers, small images) the m panels go outermost, so each
    # weight is read from memory once; otherwise the B panels go outermost
    geo = ConvGemm.geometry(params)
    params["order"] = "m" if geo["MP"] * params["mr"] > geo["NP"] * params["nr"] else "n"
    return Lowered(params, operands)


for _cls in (T.ConvolutionOp, T.ConvBiasOp):
    candidate(_cls, "conv2d_depthwise")(_depthwise)
    candidate(_cls, "conv2d_gemm")(_conv_gemm)


# ----------------------------------------------------------------------------------------------
# Matrix multiplication


def _matmul(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.MatrixMulOp | T.BatchedMatrixMulOp)
    if not is_f32(*op.operands, *op.results):
        return None
    p = op.params()
    a, b = op.operands
    sa, sb = shape(a), shape(b)
    batched = isinstance(op, T.BatchedMatrixMulOp)
    m = sa[-1] if p["transpose_a"] else sa[-2]
    k = sa[-2] if p["transpose_a"] else sa[-1]
    n = sb[-2] if p["transpose_b"] else sb[-1]
    b_const = int(not batched and const_array(b) is not None)
    params = {
        "batch": sa[0] if batched else 1, "m": m, "n": n, "k": k,
        "ta": int(bool(p["transpose_a"])), "tb": int(bool(p["transpose_b"])), "b_const": b_const,
        "bias": 0, "residual": 0, "act": "identity", **gemm_blocking(isa),
    }  # fmt: skip
    return Lowered(params, [a, b])


candidate(T.MatrixMulOp, "matmul_gemm")(_matmul)
candidate(T.BatchedMatrixMulOp, "matmul_gemm")(_matmul)


# ----------------------------------------------------------------------------------------------
# Elementwise, pooling, softmax, reduce


@candidate(T.ElemwiseOp, "elemwise")
def _elemwise(op: Operation, isa: str) -> Lowered | None:
    from backends.c.templates.generic import ELEMWISE_C, broadcast_strides, collapse

    assert isinstance(op, T.ElemwiseOp)
    mode = op.params()["mode"].value
    if mode not in ELEMWISE_C or not is_f32(*op.operands, *op.results):
        return None
    out = shape(op.results[0])
    strides = [broadcast_strides(shape(v), out) for v in op.operands]
    cshape, cstrides = collapse(out, strides)
    # in place over operand 0 when it is read exactly where the result is written
    in_place = shape(op.operands[0]) == out
    params = {"mode": mode, "shape": cshape, "strides": cstrides, "inplace": int(in_place)}
    return Lowered(params, list(op.operands))


def _pool_params(
    op: Operation, mode: Any, window: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int]
) -> Lowered | None:
    if not is_f32(*op.operands, *op.results):
        return None
    n, c, ih, iw = shape(op.operands[0])
    _, _, oh, ow = shape(op.results[0])
    names = {
        enums.PoolingMode.MAX: "max",
        enums.PoolingMode.AVERAGE: "average",
        enums.PoolingMode.AVERAGE_COUNT_EXCLUDE_PADDING: "average_exclude_padding",
    }
    params = {
        "mode": names[mode], "n": n, "c": c, "ih": ih, "iw": iw, "oh": oh, "ow": ow,
        "fh": window[0], "fw": window[1], "sh": stride[0], "sw": stride[1], "ph": pad[0], "pw": pad[1],
    }  # fmt: skip
    return Lowered(params, [op.operands[0]])


@candidate(T.PoolingOp, "pool2d")
def _pool(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.PoolingOp)
    p = op.params()
    if p["format"] != enums.Format.NCHW:
        return None
    return _pool_params(op, p["mode"], p["window"], p["stride"], p["padding"])


@candidate(T.AdaptivePoolingOp, "pool2d")
def _adaptive_pool(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.AdaptivePoolingOp)
    p = op.params()
    if p["format"] != enums.Format.NCHW:
        return None
    window, stride = adaptive_pool_params(shape(op.operands[0])[2:], p["out_shape"])
    return _pool_params(op, p["mode"], window, stride, (0, 0))


def _axis_split(s: tuple[int, ...], axis: int) -> dict[str, int]:
    return {"outer": math.prod(s[:axis]), "axis": s[axis], "inner": math.prod(s[axis + 1 :])}


@candidate(T.SoftmaxOp, "softmax")
def _softmax(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.SoftmaxOp)
    if not is_f32(*op.operands):
        return None
    return Lowered(_axis_split(shape(op.operands[0]), op.params()["axis"]), [op.operands[0]])


@candidate(T.ReduceOp, "reduce")
def _reduce(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.ReduceOp)
    p = op.params()
    if not is_f32(*op.operands, *op.results) or p["data_type"] != enums.ReduceDataType.DEFAULT:
        return None
    params = {"mode": p["mode"].value, **_axis_split(shape(op.operands[0]), p["axis"])}
    return Lowered(params, [op.operands[0]])


# ----------------------------------------------------------------------------------------------
# Data movement


def _row_major(s: tuple[int, ...]) -> list[int]:
    return [math.prod(s[i + 1 :]) for i in range(len(s))]


def _copy(op: Operation, out: tuple[int, ...], strides: list[int], offset: int) -> Lowered | None:
    from backends.c.templates.generic import collapse

    if not is_f32(*op.operands, *op.results):
        return None
    cshape, (cstrides,) = collapse(out, [strides])
    return Lowered({"shape": cshape, "strides": cstrides, "offset": offset}, [op.operands[0]])


def strided_view(op: Operation) -> tuple[tuple[int, ...], list[int], int]:
    """(output shape, element strides into the input, element offset) of a dimshuffle, broadcast or
    subtensor: each is a strided copy of its input, whatever the element type."""
    s = shape(op.operands[0])
    src = _row_major(s)
    out = shape(op.results[0])
    if isinstance(op, T.DimshuffleOp):
        return out, [0 if a == -1 else src[a] for a in op.params()["pattern"]], 0
    if isinstance(op, T.BroadcastOp):
        from backends.c.templates.generic import broadcast_strides

        return out, list(broadcast_strides(s, out)), 0
    assert isinstance(op, T.SubtensorOp)
    p = op.params()
    full_shape, strides, offset, dropped = list(s), list(src), 0, set()
    for axis, start, stop, step, drop in zip(
        p["axes"], p["starts"], p["stops"], p["steps"], p["drop"], strict=True
    ):
        r = range(*slice(start, stop, step).indices(s[axis]))
        offset += (r.start if len(r) else 0) * src[axis]
        strides[axis] = src[axis] * step
        full_shape[axis] = len(r)
        if drop:
            dropped.add(axis)
    keep = [i for i in range(len(s)) if i not in dropped]
    return tuple(full_shape[i] for i in keep), [strides[i] for i in keep], offset


@candidate(T.DimshuffleOp, "copy")
def _dimshuffle(op: Operation, isa: str) -> Lowered | None:
    return _copy(op, *strided_view(op))


@candidate(T.BroadcastOp, "copy")
def _broadcast(op: Operation, isa: str) -> Lowered | None:
    return _copy(op, *strided_view(op))


@candidate(T.SubtensorOp, "copy")
def _subtensor(op: Operation, isa: str) -> Lowered | None:
    return _copy(op, *strided_view(op))


@candidate(T.ConcatOp, "concat")
def _concat(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.ConcatOp)
    if not is_f32(*op.operands, *op.results):
        return None
    axis = op.params()["axis"]
    out = shape(op.results[0])
    outer = math.prod(out[:axis])
    chunks = tuple(math.prod(shape(v)[axis:]) for v in op.operands)
    return Lowered({"outer": outer, "chunks": chunks}, list(op.operands))


@candidate(T.SplitOp, "split")
def _split(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.SplitOp)
    if not is_f32(*op.operands, *op.results):
        return None
    axis = op.params()["axis"]
    src = shape(op.operands[0])
    chunks = tuple(math.prod(shape(r)[axis:]) for r in op.results)
    return Lowered({"outer": math.prod(src[:axis]), "chunks": chunks}, [op.operands[0]])


# ops that become a kernel.view (same bytes, new shape)
VIEW_OPS: tuple[type[Operation], ...] = (T.ReshapeOp, T.AxisAddRemoveOp)
