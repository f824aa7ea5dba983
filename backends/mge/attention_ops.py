"""The ``.mge`` row of MegEngine's MultiHeadAttn (``MultiHeadAttnForward``): its param table
(MegEngine 1.13's slot order and defaults, spec A.4.4 tag 95) and how a dump holding one is read.

xmge has no attention op: ``F.nn.multi_head_attention`` is composed of matmul, softmax and
elementwise ops, and so is a MultiHeadAttn read from a file, op for op the same computation (the
projections ``x @ W + b`` from the packed ``io_weight_bias``, which must be a constant, the scaled
per-head scores plus the mask, softmax, the weighted values and the output projection). xmge's
own dumps therefore hold those ops, never a MultiHeadAttn. What an inference graph cannot hold is
refused naming the reason: dropout in training mode (random), bias_k/bias_v, add_zero_attn,
reslink and cuDNN-style masks (MegEngine's CPU kernel refuses or ignores them too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import TensorType

import backends.mge.schema as S
from backends.mge.read_context import (
    ReadVar,
    define,
    emit_values,
    enum_of,
    fail,
    input_var,
    shape_of,
    unsupported,
)
from backends.mge.schema import ParamDef
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import element_type
from semantics.attention import io_weight_layout

if TYPE_CHECKING:
    from backends.mge.container import RawOpr
    from backends.mge.read_context import ReadContext

PARAM = ParamDef(
    "MultiHeadAttn",
    95,
    (
        ("num_heads", "I", 1),
        ("embeding_size", "I", 0),
        ("k_size", "I", 0),
        ("v_size", "I", 0),
        ("qproj_size", "I", 0),
        ("kproj_size", "I", 0),
        ("vproj_size", "I", 0),
        ("oproj_size", "I", 0),
        ("qbias", "?", False),
        ("kbias", "?", False),
        ("vbias", "?", False),
        ("obias", "?", False),
        ("sm_scaler", "f", 1.0),
        ("input_order", "I", 0),
        ("attn_mask_type", "I", 0),
        ("tensor_combination_type", "I", 0),
        ("add_zero_attn", "?", False),
        ("need_weights", "?", False),
        ("reslink", "?", False),
        ("training", "?", True),
        ("seed", "Q", 0),
        ("attn_prob", "f", 0.0),
        ("out_prob", "f", 0.0),
    ),
)
_MASK = enums.AttnMaskType
_COMBINATION = enums.TensorCombinationType


def register_params() -> None:
    known = S.PARAMS.get(PARAM.name) or S.PARAMS_BY_TAG.get(PARAM.tag)
    if known is not None and known != PARAM:
        raise TypeError(f"param.{PARAM.name} (tag {PARAM.tag}) clashes with {known}")
    S.PARAMS[PARAM.name] = PARAM
    S.PARAMS_BY_TAG[PARAM.tag] = PARAM


class _Builder:
    """Emits (or folds, for constants) the ops of the composition for one file operator."""

    def __init__(self, ctx: ReadContext, op: RawOpr, dtype: Any) -> None:
        self.ctx, self.op, self.elem = ctx, op, dtype

    def const(self, value: np.ndarray) -> ReadVar:
        v = np.ascontiguousarray(value, dtype=np.float32)
        return ReadVar(type=TensorType(self.elem, list(v.shape)), value=v)

    def one(self, cls: type[T.MgbOp], operands: list[ReadVar], result_types: Any = None, **p: Any) -> ReadVar:
        return emit_values(self.ctx, self.op, cls, operands, result_types, **p)[0]

    def reshape(self, x: ReadVar, shape: tuple[int, ...]) -> ReadVar:
        return self.one(T.ReshapeOp, [x], [TensorType(self.elem, list(shape))])

    def shuffle(self, x: ReadVar, pattern: tuple[int, ...]) -> ReadVar:
        return self.one(T.DimshuffleOp, [x], pattern=pattern)

    def elemwise(self, mode: Any, a: ReadVar, b: ReadVar) -> ReadVar:
        return self.one(T.ElemwiseOp, [a, b], mode=mode)

    def matmul(self, a: ReadVar, b: ReadVar, batched: bool, transpose_b: bool = False) -> ReadVar:
        cls = T.BatchedMatrixMulOp if batched else T.MatrixMulOp
        return self.one(
            cls, [a, b], transpose_a=False, transpose_b=transpose_b,
            compute_mode=enums.ComputeMode.DEFAULT, format=enums.MatrixMulFormat.DEFAULT,  # type: ignore[attr-defined]
        )  # fmt: skip

    def project(self, x: ReadVar, w: np.ndarray | None, b: np.ndarray | None) -> ReadVar:
        """``x (N, L, in) @ w (in, out) + b``, as a 2-D matrix product."""
        if w is None:
            return x
        n, length, width = shape_of(self.op, x, "a projection input")
        y = self.matmul(self.reshape(x, (n * length, width)), self.const(w), batched=False)
        if b is not None:
            y = self.elemwise(enums.ElemwiseMode.ADD, y, self.const(b.reshape(1, -1)))  # type: ignore[attr-defined]
        return self.reshape(y, (n, length, w.shape[1]))


def _weights(
    op: RawOpr, p: dict[str, Any], w: np.ndarray, widths: tuple[int, int, int]
) -> dict[str, np.ndarray]:
    """MegEngine's packing of io_weight_bias: the q, k, v, o weights (in, out), then their biases."""
    sizes = [int(p[n]) for n in ("qproj_size", "kproj_size", "vproj_size", "oproj_size")]
    layout = io_weight_layout(sizes, [bool(p[f]) for f in ("qbias", "kbias", "vbias", "obias")], widths)
    flat = w.reshape(-1).astype(np.float32)
    total = sum(int(np.prod(s)) for _, s in layout)
    if flat.size != total:
        raise fail(op, f"io_weight_bias has {flat.size} values, the projections need {total}")
    out, at = {}, 0
    for name, shape in layout:
        n = int(np.prod(shape))
        out[name] = flat[at : at + n].reshape(shape)
        at += n
    return out


def read_multi_head_attn(ctx: ReadContext, op: RawOpr) -> None:
    p = op.param("MultiHeadAttn")
    if p["training"] and (p["attn_prob"] > 0 or p["out_prob"] > 0):
        raise unsupported(
            op, "MultiHeadAttn with dropout in training mode is random; dump the model in eval mode"
        )
    for flag, what in (("add_zero_attn", "add_zero_attn"), ("reslink", "reslink")):
        if p[flag]:
            raise unsupported(
                op, f"MultiHeadAttn with {what} is not supported (MegEngine's CPU kernel refuses it too)"
            )
    comb = enum_of(op, _COMBINATION, p["tensor_combination_type"], "tensor_combination_type")
    mask_type = enum_of(op, _MASK, p["attn_mask_type"], "attn_mask_type")
    if comb in (_COMBINATION.ONLY_BIASKV, _COMBINATION.ALL):  # type: ignore[attr-defined]
        raise unsupported(
            op, "MultiHeadAttn with bias_k/bias_v is not supported (MegEngine's CPU kernel refuses it)"
        )
    if mask_type == _MASK.CUDNN_STYLE_MASK:  # type: ignore[attr-defined]
        raise unsupported(op, "MultiHeadAttn with a cuDNN-style mask is not supported (cuDNN only)")
    if int(p["input_order"]) != 0:
        raise unsupported(op, f"MultiHeadAttn input_order {p['input_order']} is not supported (only 0)")
    q, k, v, wv = (input_var(ctx, op, i) for i in range(4))
    if wv.value is None:
        raise unsupported(op, "MultiHeadAttn's io_weight_bias must be a constant of the file")
    mask = input_var(ctx, op, 4) if comb == _COMBINATION.ONLY_MASK else None  # type: ignore[attr-defined]
    (n, lq, eq), (_, s, ek), (_, _, ev) = (
        shape_of(op, t, name) for t, name in ((q, "query"), (k, "key"), (v, "value"))
    )
    assert q.type is not None
    b = _Builder(ctx, op, q.type.element_type if q.type.element_type else element_type("float32"))
    w = _weights(op, p, wv.value, (eq, ek, ev))
    h = int(p["num_heads"])
    qp, kp, vp = (b.project(x, w.get("w" + c), w.get("b" + c)) for x, c in ((q, "q"), (k, "k"), (v, "v")))
    dq, dv = shape_of(op, qp, "projected query")[2], shape_of(op, vp, "projected value")[2]
    if dq % h or dv % h or shape_of(op, kp, "projected key")[2] != dq:
        raise fail(op, f"num_heads {h} does not divide the projected widths {dq} and {dv}")

    def heads(x: ReadVar, length: int, width: int) -> ReadVar:
        d = width // h
        return b.reshape(b.shuffle(b.reshape(x, (n, length, h, d)), (0, 2, 1, 3)), (n * h, length, d))

    scores = b.matmul(heads(qp, lq, dq), heads(kp, s, dq), batched=True, transpose_b=True)
    scale = b.const(np.full((1, 1, 1), np.float32(p["sm_scaler"])))
    scores = b.elemwise(enums.ElemwiseMode.MUL, scores, scale)  # type: ignore[attr-defined]
    if mask_type == _MASK.DEFAULT_MASK and mask is None:  # type: ignore[attr-defined]
        mask = b.const(np.where(np.triu(np.ones((1, lq, s), bool), 1), -np.inf, 0.0))
    if mask is not None:
        shape = shape_of(op, mask, "attn_mask")
        if len(shape) == 2:
            mask = b.reshape(mask, (1, *shape))
        scores = b.elemwise(enums.ElemwiseMode.ADD, scores, mask)  # type: ignore[attr-defined]
    weights = b.one(T.SoftmaxOp, [scores], axis=2)
    ctx_h = b.matmul(weights, heads(vp, s, dv), batched=True)
    merged = b.reshape(b.shuffle(b.reshape(ctx_h, (n, h, lq, dv // h)), (0, 2, 1, 3)), (n, lq, dv))
    define(ctx, op, 0, b.project(merged, w.get("wo"), w.get("bo")))
    define(ctx, op, 1, weights)
    for i in range(2, len(op.outputs)):
        define(
            ctx, op, i, ReadVar(unusable="MultiHeadAttn's backward workspace, which xmge does not compute")
        )


register_params()
