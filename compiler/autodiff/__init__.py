"""Reverse-mode autodiff: MegEngine's ``GradManager`` as a tape recorder over ``compiler.core.apply``.

Every frontend op goes through ``apply``, so a recorder that sees each application sees the whole
computation. While a ``GradManager`` records, each op with at least one input that depends on an
attached tensor is put on a tape together with the arrays it read and produced. ``backward`` walks
the tape in reverse and applies one rule per ``mgb`` op class (``BACKWARD``), in numpy, and adds the
results into ``.grad`` of the attached tensors, as MegEngine does::

    gm = GradManager().attach(model.parameters())
    with gm:
        loss = F.nn.cross_entropy(model(x), y)
        gm.backward(loss)
    opt.step().clear_grad()

Backward rules work on the arrays the op saw when it ran (not on the tensors' current data), so an
in-place update between forward and backward, such as batch norm's running statistics, cannot
change the gradient. Composite functions (``batch_norm`` in training mode, ``logsumexp``, losses)
need no rule of their own: they are made of ops that have one. An op that declares
``NO_GRADIENT`` in the dialect (index results, inference-only ops) has no rule: differentiating
through it is a ``GradError`` naming the op and the reason.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compiler.core import AppliedOp, XmgeError, pop_recorder, push_recorder, user_location
from compiler.tensor import Tensor
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.registration import registering
from semantics import kernels as K

Array = np.ndarray
# rule(inputs, outputs, output_grads, params) -> one gradient (or None) per input
BackwardRule = Callable[
    [Sequence[Array], Sequence[Array], Sequence[Array | None], dict[str, Any]], list[Array | None]
]

BACKWARD: dict[type[T.MgbOp], BackwardRule] = {}


class GradError(XmgeError, RuntimeError):
    """A gradient cannot be computed (no history, or an op without a backward rule)."""


def register_backward(op_cls: type[T.MgbOp]) -> Callable[[BackwardRule], BackwardRule]:
    return registering(BACKWARD, op_cls)


def _only_grad(grads: Sequence[Array | None]) -> Array:
    """The output gradient of a one-result op: the tape runs a rule only when a gradient reached
    one of the op's results, so for a single result it is there."""
    (g,) = grads
    assert g is not None
    return g


def _is_float(a: Array) -> bool:
    return a.dtype.kind == "f"


def unbroadcast(g: Array, shape: Sequence[int]) -> Array:
    """Sum ``g`` over the axes that broadcasting added to or stretched in ``shape``."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, (s, d) in enumerate(zip(shape, g.shape, strict=True)) if s == 1 and d != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


# ----------------------------------------------------------------------------------------------
# Elementwise

E = enums.ElemwiseMode
# mode -> fn(inputs, output, grad) -> per-input gradient at the output's (broadcast) shape
ElemwiseRule = Callable[[Sequence[Array], Array, Array], Sequence[Array | None]]
ELEMWISE_BACKWARD: dict[Any, ElemwiseRule] = {}

# Modes whose result is piecewise constant (or boolean): they pass no gradient.
_ZERO_GRAD_MODES = {
    E.FLOOR,
    E.CEIL,
    E.ROUND,
    E.FLOOR_DIV,
    E.SIGN,
    E.LT,
    E.LEQ,
    E.EQ,
    E.NEQ,
    E.ISNAN,
    E.ISINF,
    E.NOT,
    E.AND,
    E.OR,
    E.XOR,
    E.SHL,
    E.SHR,
}


def _ew(*modes: Any) -> Callable[[ElemwiseRule], ElemwiseRule]:
    return registering(ELEMWISE_BACKWARD, *modes)


def _sig(x: Array) -> Array:
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _tie_split(a: Array, b: Array, g: Array, a_wins: Array) -> tuple[Array, Array]:
    # equal operands share the gradient, as torch.maximum/minimum do (keeps d(a)+d(b) == g)
    tie = (a == b).astype(g.dtype)
    win = a_wins.astype(g.dtype)
    return g * (win + 0.5 * tie), g * (1 - win - tie + 0.5 * tie)


_ew(E.ADD)(lambda x, y, g: (g, g))
_ew(E.SUB)(lambda x, y, g: (g, -g))
_ew(E.MUL)(lambda x, y, g: (g * x[1], g * x[0]))
_ew(E.TRUE_DIV)(lambda x, y, g: (g / x[1], -g * x[0] / (x[1] * x[1])))
_ew(E.NEGATE)(lambda x, y, g: (-g,))
_ew(E.ABS)(lambda x, y, g: (g * np.sign(x[0]),))
_ew(E.EXP)(lambda x, y, g: (g * y,))
_ew(E.EXPM1)(lambda x, y, g: (g * (y + 1),))
_ew(E.LOG)(lambda x, y, g: (g / x[0],))
_ew(E.LOG1P)(lambda x, y, g: (g / (1 + x[0]),))
_ew(E.SQRT)(lambda x, y, g: (g / (2 * y),))
_ew(E.SQUARE)(lambda x, y, g: (2 * g * x[0],))
_ew(E.SIN)(lambda x, y, g: (g * np.cos(x[0]),))
_ew(E.COS)(lambda x, y, g: (-g * np.sin(x[0]),))
_ew(E.TAN)(lambda x, y, g: (g * (1 + y * y),))
_ew(E.TANH, E.FAST_TANH)(lambda x, y, g: (g * (1 - y * y),))
_ew(E.SIGMOID)(lambda x, y, g: (g * y * (1 - y),))
_ew(E.SINH)(lambda x, y, g: (g * np.cosh(x[0]),))
_ew(E.COSH)(lambda x, y, g: (g * np.sinh(x[0]),))
_ew(E.ASIN)(lambda x, y, g: (g / np.sqrt(1 - x[0] * x[0]),))
_ew(E.ACOS)(lambda x, y, g: (-g / np.sqrt(1 - x[0] * x[0]),))
_ew(E.ASINH)(lambda x, y, g: (g / np.sqrt(x[0] * x[0] + 1),))
_ew(E.ACOSH)(lambda x, y, g: (g / np.sqrt(x[0] * x[0] - 1),))
_ew(E.ATANH)(lambda x, y, g: (g / (1 - x[0] * x[0]),))
_ew(E.ERF)(lambda x, y, g: (g * (2 / math.sqrt(math.pi)) * np.exp(-x[0] * x[0]),))
_ew(E.ERFC)(lambda x, y, g: (-g * (2 / math.sqrt(math.pi)) * np.exp(-x[0] * x[0]),))
_ew(E.RELU)(lambda x, y, g: (g * (x[0] > 0),))
_ew(E.RELU6)(lambda x, y, g: (g * ((x[0] > 0) & (x[0] < 6)),))
_ew(E.HSIGMOID)(lambda x, y, g: (g * ((x[0] > -3) & (x[0] < 3)) / 6,))
_ew(E.SOFTPLUS)(lambda x, y, g: (g * _sig(x[0]),))
_ew(E.LOGSIGMOID)(lambda x, y, g: (g * _sig(-x[0]),))
_ew(E.SWITCH_GT0)(lambda x, y, g: (None, g * (x[0] > 0)))
_ew(E.FUSE_ADD_RELU)(lambda x, y, g: (g * (y > 0),) * 2)
_ew(E.FUSE_ADD_SIGMOID)(lambda x, y, g: (g * y * (1 - y),) * 2)
_ew(E.FUSE_ADD_TANH)(lambda x, y, g: (g * (1 - y * y),) * 2)
_ew(E.FUSE_MUL_ADD3)(lambda x, y, g: (g * x[1], g * x[0], g))
_ew(E.FUSE_MUL_ADD4)(lambda x, y, g: (g * x[1], g * x[0], g * x[3], g * x[2]))
_ew(E.LOG_SUM_EXP)(lambda x, y, g: (g * np.exp(x[0] - y), g * np.exp(x[1] - y)))


@_ew(E.ATAN2)
def _atan2_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array, Array]:
    r2 = x[0] * x[0] + x[1] * x[1]
    return g * x[1] / r2, -g * x[0] / r2


_ew(E.MOD)(lambda x, y, g: (g, -g * np.trunc(x[0] / x[1])))  # fmod: a - trunc(a/b)*b


@_ew(E.POW)
def _pow_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array, Array]:
    a, b = x
    with np.errstate(divide="ignore", invalid="ignore"):
        ga = g * b * np.power(a, b - 1)
        gb = np.where(a > 0, g * y * np.log(np.where(a > 0, a, 1)), 0)
    return ga, gb


@_ew(E.MAX)
def _max_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array, Array]:
    return _tie_split(x[0], x[1], g, x[0] > x[1])


@_ew(E.MIN)
def _min_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array, Array]:
    return _tie_split(x[0], x[1], g, x[0] < x[1])


@_ew(E.CLIP)
def _clip_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array, Array, Array]:
    # forward is min(max(x, lo), hi): route g through the two selections in that order
    v, lo, hi = x
    m = np.maximum(v, lo)
    to_m, to_hi = g * (m <= hi), g * (m > hi)
    return to_m * (v >= lo), to_m * (v < lo), to_hi


def _hswish_slope(v: Array) -> Array:
    return np.where(v < -3, 0, np.where(v > 3, 1, (2 * v + 3) / 6))


_ew(E.H_SWISH)(lambda x, y, g: (g * _hswish_slope(x[0]),))
_ew(E.FUSE_ADD_H_SWISH)(lambda x, y, g: (g * _hswish_slope(x[0] + x[1]),) * 2)


@_ew(E.SILU)
def _silu_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array]:
    s = _sig(x[0])
    return (g * (s + x[0] * s * (1 - s)),)


@_ew(E.GELU)
def _gelu_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array]:
    v = x[0].astype(np.float64)
    cdf = 0.5 * (1 + np.vectorize(math.erf, otypes=[np.float64])(v / math.sqrt(2)))
    pdf = np.exp(-0.5 * v * v) / math.sqrt(2 * math.pi)
    return (g * (cdf + v * pdf).astype(g.dtype),)


@_ew(E.ATAN2)
def _atan2_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array, Array]:
    a, b = x
    r = a * a + b * b
    return g * b / r, -g * a / r


@_ew(E.PRELU)
def _prelu_grad(x: Sequence[Array], y: Array, g: Array) -> tuple[Array, Array]:
    v, w = x
    pos = v > 0
    return g * np.where(pos, 1, w), g * np.where(pos, 0, v)


@register_backward(T.ElemwiseOp)
def _elemwise_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    mode = params["mode"]
    (g,) = grads
    if mode in _ZERO_GRAD_MODES or g is None:
        return [None] * len(inputs)
    rule = ELEMWISE_BACKWARD.get(mode)
    if rule is None:
        raise GradError(f"mgb.elemwise {mode.value}: no gradient rule")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        full = rule(inputs, outputs[0], g)
    out: list[Array | None] = []
    for x, gx in zip(inputs, full, strict=True):
        if gx is None or not _is_float(x):
            out.append(None)
        else:
            out.append(
                unbroadcast(np.broadcast_to(np.asarray(gx), g.shape), x.shape).astype(x.dtype, copy=False)
            )
    return out


# ----------------------------------------------------------------------------------------------
# Convolution


def conv2d_backward(
    x: Array,
    w: Array,
    g: Array,
    *,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    sparse: Any,
    mode: Any,
) -> tuple[Array, Array]:
    """(dx, dw) of ``kernels.conv2d_nchw``: the weight gradient correlates the input windows with
    ``g``; the input gradient scatters ``g @ w`` back over the windows (col2im)."""
    wshape = w.shape
    w, groups = K.dense_filter(w, sparse, mode)
    oc, icpg, fh, fw = w.shape
    ocpg = oc // groups
    ph, pw = padding
    sh, sw = stride
    dh, dw_ = dilation
    xp = K._pad_nchw(x.astype(np.float32, copy=False), ph, pw)
    win = K._windows(xp, fh, fw, stride, dilation)  # N, C, OH, OW, FH, FW
    n, _, oh, ow = g.shape
    g32 = g.astype(np.float32, copy=False)
    wa = w.astype(np.float32, copy=False)
    dxp = np.zeros(xp.shape, np.float32)
    dw = np.empty(w.shape, np.float32)
    k = icpg * fh * fw
    for gi in range(groups):
        gg = g32[:, gi * ocpg : (gi + 1) * ocpg].reshape(n, ocpg, oh * ow)
        cols = win[:, gi * icpg : (gi + 1) * icpg].transpose(0, 2, 3, 1, 4, 5).reshape(n, oh * ow, k)
        dw[gi * ocpg : (gi + 1) * ocpg] = np.tensordot(gg, cols, axes=([0, 2], [0, 1])).reshape(
            ocpg, icpg, fh, fw
        )
        wg = wa[gi * ocpg : (gi + 1) * ocpg].reshape(ocpg, k)
        dcols = (gg.transpose(0, 2, 1) @ wg).reshape(n, oh, ow, icpg, fh, fw).transpose(0, 3, 4, 5, 1, 2)
        for i in range(fh):
            for j in range(fw):
                hs, ws = i * dh, j * dw_
                dxp[
                    :,
                    gi * icpg : (gi + 1) * icpg,
                    hs : hs + sh * (oh - 1) + 1 : sh,
                    ws : ws + sw * (ow - 1) + 1 : sw,
                ] += dcols[:, :, i, j]
    dx = dxp[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]]
    if mode == enums.ConvMode.CONVOLUTION:
        dw = dw[..., ::-1, ::-1]
    return dx.astype(x.dtype), np.ascontiguousarray(dw).reshape(wshape).astype(w.dtype)


def _conv_params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in ("stride", "padding", "dilation", "sparse", "mode")}


@register_backward(T.ConvolutionOp)
def _convolution_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    x, w = inputs
    g = _only_grad(grads)
    dx, dw = conv2d_backward(x, w, g, **_conv_params(params))
    return [dx, dw]


@register_backward(T.ConvBiasOp)
def _conv_bias_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    x, w, *rest = inputs
    g = _only_grad(grads)
    y = outputs[0].astype(np.float32)
    nl = params["nonline_mode"]
    N = enums.NonlineMode
    if nl == N.RELU:
        g = g * (y > 0)
    elif nl == N.SIGMOID:
        g = g * y * (1 - y)
    elif nl == N.H_SWISH:
        pre = K.conv2d_nchw(x, w, **_conv_params(params))
        for extra in rest:
            pre = pre + extra.astype(pre.dtype)
        g = g * _hswish_slope(pre)
    dx, dw = conv2d_backward(x, w, g, **_conv_params(params))
    return [dx, dw, *(unbroadcast(g, r.shape).astype(r.dtype) for r in rest)]


# ----------------------------------------------------------------------------------------------
# Pooling


def pool2d_backward(
    x: Array, g: Array, *, mode: Any, window: Sequence[int], stride: Sequence[int], padding: Sequence[int]
) -> Array:
    """Gradient of ``kernels.pool2d_nchw``: max routes each output's gradient to the first maximum
    of its window (as MegEngine and torch do); the averages spread it over the window."""
    fh, fw = window
    sh, sw = stride
    ph, pw = padding
    n, c, oh, ow = g.shape
    g32 = g.astype(np.float32)
    if mode == enums.PoolingMode.MAX:
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        xp = K._pad_nchw(x, ph, pw, fill)
        win = K._windows(xp, fh, fw, stride, (1, 1)).reshape(n, c, oh, ow, fh * fw)
        arg = win.argmax(axis=-1)
        share = [[g32 * (arg == i * fw + j) for j in range(fw)] for i in range(fh)]
    else:
        if mode == enums.PoolingMode.AVERAGE:
            per = g32 / np.float32(fh * fw)
        else:
            ones = K._pad_nchw(np.ones((1, 1, *x.shape[2:]), np.float32), ph, pw)
            count = K._windows(ones, fh, fw, stride, (1, 1)).sum(axis=(4, 5))
            per = g32 / count
        share = [[per] * fw for _ in range(fh)]
    dxp = np.zeros((n, c, x.shape[2] + 2 * ph, x.shape[3] + 2 * pw), np.float32)
    for i in range(fh):
        for j in range(fw):
            dxp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += share[i][j]
    return dxp[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]].astype(x.dtype)


@register_backward(T.PoolingOp)
def _pooling_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    dx = pool2d_backward(
        inputs[0],
        g,
        mode=params["mode"],
        window=params["window"],
        stride=params["stride"],
        padding=params["padding"],
    )
    return [dx]


@register_backward(T.AdaptivePoolingOp)
def _adaptive_pooling_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    x = inputs[0]
    window, stride = K.adaptive_pool_params(x.shape[2:], params["out_shape"])
    return [pool2d_backward(x, g, mode=params["mode"], window=window, stride=stride, padding=(0, 0))]


# ----------------------------------------------------------------------------------------------
# Matrix multiplication


def _matmul_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    a, b = inputs
    g = _only_grad(grads)
    if not _is_float(a):
        return [None, None]
    ta, tb = bool(params.get("transpose_a")), bool(params.get("transpose_b"))
    g32 = g.astype(np.float32)
    a_eff = np.swapaxes(a, -1, -2) if ta else a
    b_eff = np.swapaxes(b, -1, -2) if tb else b
    da_eff = g32 @ np.swapaxes(b_eff, -1, -2).astype(np.float32)
    db_eff = np.swapaxes(a_eff, -1, -2).astype(np.float32) @ g32
    da = np.swapaxes(da_eff, -1, -2) if ta else da_eff
    db = np.swapaxes(db_eff, -1, -2) if tb else db_eff
    return [np.ascontiguousarray(da).astype(a.dtype), np.ascontiguousarray(db).astype(b.dtype)]


register_backward(T.MatrixMulOp)(_matmul_backward)
register_backward(T.BatchedMatrixMulOp)(_matmul_backward)


# ----------------------------------------------------------------------------------------------
# Shape and data movement


def _reshape_back(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    return [g.reshape(inputs[0].shape)]


register_backward(T.ReshapeOp)(_reshape_back)
register_backward(T.AxisAddRemoveOp)(_reshape_back)


@register_backward(T.BroadcastOp)
def _broadcast_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    return [unbroadcast(g, inputs[0].shape).astype(inputs[0].dtype, copy=False)]


@register_backward(T.ReshapeToOp)
def _reshape_to_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """As the static reshape's; the shape operand (a shape) has no gradient."""
    return [_only_grad(grads).reshape(inputs[0].shape), None]


@register_backward(T.BroadcastToOp)
def _broadcast_to_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """As the static broadcast's; the shape operand (a shape) has no gradient."""
    g = _only_grad(grads)
    return [unbroadcast(g, inputs[0].shape).astype(inputs[0].dtype, copy=False), None]


@register_backward(T.CondTakeOp)
def _cond_take_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """The taken values' gradient goes back to their positions; the mask has none."""
    g = grads[0]
    if g is None:
        return [None, None]
    data = inputs[0]
    out = np.zeros(data.size, dtype=g.dtype)
    out[outputs[1]] = g
    return [out.reshape(data.shape), None]


@register_backward(T.DimshuffleOp)
def _dimshuffle_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    x = inputs[0]
    perm = [p for p in params["pattern"] if p != -1]
    moved = g.reshape([x.shape[p] for p in perm])  # drop the size-1 axes the pattern inserted
    return [np.ascontiguousarray(moved.transpose(np.argsort(perm)))]


@register_backward(T.ConcatOp)
def _concat_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    bounds = np.cumsum([x.shape[params["axis"]] for x in inputs])[:-1]
    return list(np.split(g, bounds, axis=params["axis"]))


@register_backward(T.SplitOp)
def _split_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    parts = [np.zeros(o.shape, o.dtype) if g is None else g for g, o in zip(grads, outputs, strict=True)]
    return [np.concatenate(parts, axis=params["axis"])]


@register_backward(T.SubtensorOp)
def _subtensor_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    x = inputs[0]
    index: list[Any] = [slice(None)] * x.ndim
    keys = ("axes", "starts", "stops", "steps", "drop")
    for axis, start, stop, step, drop in zip(*(params[k] for k in keys), strict=True):
        index[axis] = start if drop else slice(start, stop, step)
    gx = np.zeros(x.shape, g.dtype)
    view = gx[tuple(index)]
    gx[tuple(index)] = g.reshape(np.shape(view))  # a basic index never repeats an element
    return [gx]


def _slice_of(params: dict[str, Any], ndim: int) -> tuple[Any, ...]:
    from semantics.kernels import slice_index

    return slice_index(ndim, params)


@register_backward(T.SetSubtensorOp)
def _set_subtensor_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    index = _slice_of(params, g.ndim)
    gx = np.array(g, copy=True)
    gx[index] = 0  # the overwritten elements do not reach the output
    return [gx, np.asarray(g[index]).reshape(np.shape(inputs[1]))]


@register_backward(T.IncrSubtensorOp)
def _incr_subtensor_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    index = _slice_of(params, g.ndim)
    return [g, np.asarray(g[index]).reshape(np.shape(inputs[1]))]


def _vec_of(shape: Sequence[int], indices: Sequence[Array], params: dict[str, Any]) -> tuple[Any, ...]:
    from semantics.kernels import vec_index

    return vec_index(shape, indices, params["axes"])


@register_backward(T.IndexingMultiAxisVecOp)
def _indexing_multi_axis_vec_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    x = inputs[0]
    gx = np.zeros(x.shape, g.dtype)
    np.add.at(gx, _vec_of(x.shape, inputs[1:], params), g)  # repeated indices gather repeatedly
    return [gx, *(None for _ in inputs[1:])]


@register_backward(T.IndexingSetMultiAxisVecOp)
def _indexing_set_multi_axis_vec_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    index = _vec_of(g.shape, inputs[2:], params)
    gx = np.array(g, copy=True)
    gx[index] = 0
    # with a repeated index only the last write survives; torch's index_put_ gradient takes the
    # output gradient at every position alike, and so does this rule
    return [gx, np.asarray(g[index]).reshape(np.shape(inputs[1])), *(None for _ in inputs[2:])]


@register_backward(T.IndexingIncrMultiAxisVecOp)
def _indexing_incr_multi_axis_vec_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    index = _vec_of(g.shape, inputs[2:], params)
    return [g, np.asarray(g[index]).reshape(np.shape(inputs[1])), *(None for _ in inputs[2:])]


def _scatter_rows_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """The values of Argsort/TopK are the input picked at the index result, row by row: their
    gradient lands back at those indices (the index result has none)."""
    g = grads[0]
    if g is None:
        return [None]
    x, idx = inputs[0], np.asarray(outputs[1])
    gx = np.zeros(x.shape, g.dtype)
    if idx.ndim == 1:
        idx, g = idx[:, None], np.asarray(g)[:, None]
    np.put_along_axis(gx, idx.astype(np.int64), g, axis=1)
    return [gx]


register_backward(T.ArgsortOp)(_scatter_rows_backward)
register_backward(T.TopKOp)(_scatter_rows_backward)


@register_backward(T.LinspaceOp)
def _linspace_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """value[i] = start + (stop - start) * i / d with d = num - 1 (endpoint) or num."""
    g = _only_grad(grads)
    num = int(params["num"])
    d = (num - 1) if params["endpoint"] else num
    w = np.arange(num, dtype=np.float64) / d if d > 0 else np.zeros(num)
    g64 = np.asarray(g, np.float64)
    gstop = float((g64 * w).sum())
    gstart = float(g64.sum()) - gstop
    return [
        np.full(np.shape(inputs[0]), gstart, np.asarray(inputs[0]).dtype),
        np.full(np.shape(inputs[1]), gstop, np.asarray(inputs[1]).dtype),
    ]


@register_backward(T.PaddingOp)
def _padding_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """Padding acts axis by axis (np.pad too), so its gradient folds each axis back separately:
    the padded index map says which source element every output position copies (-1: the constant)."""
    g = _only_grad(grads)
    x = inputs[0]
    np_mode = {
        enums.PaddingMode.CONSTANT: "constant",
        enums.PaddingMode.REFLECT: "reflect",
        enums.PaddingMode.REPLICATE: "edge",
    }[params["mode"]]
    out = g.astype(np.float32)
    for axis, (front, back) in enumerate(zip(params["front"], params["back"], strict=True)):
        if front == 0 and back == 0:
            continue
        size = x.shape[axis]
        if np_mode == "constant":
            src = np.pad(np.arange(size), (front, back), mode="constant", constant_values=-1)
        else:
            src = np.pad(np.arange(size), (front, back), mode=np_mode)  # type: ignore[call-overload]
        moved = np.moveaxis(out, axis, 0)
        folded = np.zeros((size, *moved.shape[1:]), np.float32)
        keep = src >= 0
        np.add.at(folded, src[keep], moved[keep])
        out = np.moveaxis(folded, 0, axis)
    return [np.ascontiguousarray(out).astype(x.dtype)]


@register_backward(T.ReduceOp)
def _reduce_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    x, y = inputs[0], outputs[0]
    if not _is_float(x):
        return [None]
    axis = params["axis"]
    R = enums.ReduceMode
    mode = params["mode"]
    g32 = g.astype(np.float32)
    if mode == R.SUM:
        gx = np.broadcast_to(g32, x.shape)
    elif mode == R.MEAN:
        gx = np.broadcast_to(g32 / np.float32(x.shape[axis]), x.shape)
    elif mode == R.SUM_SQR:
        gx = 2 * x * g32
    elif mode in (R.MAX, R.MIN):
        # ties share the gradient equally (torch.amax/amin), keeping the total equal to g
        hit = (x == y).astype(np.float32)
        gx = g32 * hit / hit.sum(axis=axis, keepdims=True)
    else:  # PRODUCT: d/dx_i = product of the others, computed without dividing (zeros are fine)
        xm = np.moveaxis(x.astype(np.float32), axis, -1)
        ones = np.ones((*xm.shape[:-1], 1), np.float32)
        left = np.cumprod(np.concatenate([ones, xm[..., :-1]], axis=-1), axis=-1)
        right = np.cumprod(np.concatenate([ones, xm[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
        gx = np.moveaxis(left * right, -1, axis) * g32
    return [np.ascontiguousarray(gx).astype(x.dtype)]


@register_backward(T.TypeCvtOp)
def _typecvt_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    x = inputs[0]
    if not (_is_float(x) and _is_float(outputs[0])):
        return [None]  # through an integer or bool value no gradient flows
    return [g.astype(x.dtype)]


@register_backward(T.SoftmaxOp)
def _softmax_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g = _only_grad(grads)
    y = outputs[0].astype(np.float32)
    g32 = g.astype(np.float32)
    gx = y * (g32 - (g32 * y).sum(axis=params["axis"], keepdims=True))
    return [gx.astype(inputs[0].dtype)]


@register_backward(T.BatchNormOp)
def _batch_norm_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """Inference-mode batch norm, y = (x - mean) * rsqrt(var + eps) * scale + bias, with gradients
    for all five operands (training mode is composed of other ops in ``F.batch_norm``)."""
    g = _only_grad(grads)
    x, scale, bias, mean, var = inputs
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    s, m, v = (a.reshape(shape).astype(np.float32) for a in (scale, mean, var))
    r = 1 / np.sqrt(v + np.float32(params["epsilon"]))
    g32 = g.astype(np.float32)
    xc = x.astype(np.float32) - m
    axes = tuple(i for i in range(x.ndim) if i != 1)
    sum_g = g32.sum(axis=axes, keepdims=True)
    sum_gxc = (g32 * xc).sum(axis=axes, keepdims=True)
    gx = g32 * r * s
    gs = sum_gxc * r
    gm = -sum_g * r * s
    gv = -0.5 * sum_gxc * s * r**3
    return [
        gx.astype(x.dtype),
        *(d.reshape(a.shape).astype(a.dtype) for d, a in ((gs, scale), (sum_g, bias), (gm, mean), (gv, var))),
    ]


@register_backward(T.ConvolutionBackwardDataOp)
def _convolution_backward_data_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """y = conv_transpose(filter, diff) is the adjoint of the convolution ``diff = conv(y, filter)``,
    so d(diff) is that convolution of g, and d(filter) is its weight gradient."""
    filt, diff = inputs
    g = _only_grad(grads)
    conv = _conv_params(params)
    gd = K.conv2d_nchw(g.astype(np.float32), filt.astype(np.float32), **conv)
    _, gf = conv2d_backward(g.astype(np.float32), filt.astype(np.float32), diff.astype(np.float32), **conv)
    return [gf.astype(filt.dtype), gd.astype(diff.dtype)]


@register_backward(T.ResizeOp)
def _resize_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """Resize is y = Ah x Aw^T per image, so dx = Ah^T g Aw."""
    (x,) = inputs
    g = _only_grad(grads)
    if params["imode"] == enums.InterpolationMode.CUBIC:
        from semantics.image_kernels import cubic_matrix

        ah, aw = cubic_matrix(x.shape[2], g.shape[2]), cubic_matrix(x.shape[3], g.shape[3])
    else:
        ah = K.interp_matrix(x.shape[2], g.shape[2], params["imode"])
        aw = K.interp_matrix(x.shape[3], g.shape[3], params["imode"])
    return [np.einsum("oh,ncop,pw->nchw", ah, g.astype(np.float64), aw).astype(x.dtype)]


@register_backward(T.LayerNormOp)
def _layer_norm_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    g, g_mean, g_rstd = grads
    if g_mean is not None or g_rstd is not None:
        raise GradError("mgb.layer_norm: no gradient through its mean/rstd results")
    assert g is not None
    x = inputs[0]
    size = params["normalized_size"]
    mean, rstd = K.layer_norm_stats(x, size, params["eps"])
    xhat = (x.astype(np.float32).reshape(-1, size) - mean[:, None]) * rstd[:, None]
    g2 = g.astype(np.float32).reshape(-1, size)
    dxhat = g2 * inputs[1].astype(np.float32).reshape(-1) if params["affine"] else g2
    dx = rstd[:, None] * (
        dxhat - dxhat.mean(axis=1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=1, keepdims=True)
    )
    out: list[Array | None] = [dx.reshape(x.shape).astype(x.dtype)]
    if params["affine"]:
        w, b = inputs[1], inputs[2]
        out.append((g2 * xhat).sum(axis=0).reshape(w.shape).astype(w.dtype))
        out.append(g2.sum(axis=0).reshape(b.shape).astype(b.dtype))
    return out


@register_backward(T.CumsumOp)
def _cumsum_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """Each input element is in the sums after it (before it, reversed): the gradient is the
    output gradient summed the other way (MegEngine's rule)."""
    g = _only_grad(grads)
    flipped = {**params, "reverse": not params["reverse"]}
    return K.cumsum([g], [K.ResultSpec(g.shape, g.dtype)], **flipped)


@register_backward(T.IndexingOneHotOp)
def _indexing_one_hot_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """The output gradient goes back to the picked elements (MegEngine's IndexingSetOneHot into
    zeros); the indices get none."""
    g = _only_grad(grads)
    src, index = inputs
    axis = params["axis"]
    gx = np.zeros(src.shape, dtype=g.dtype)
    np.put_along_axis(gx, np.expand_dims(np.asarray(index, np.int64), axis), g, axis)
    return [gx, None]


# ----------------------------------------------------------------------------------------------
# The tape and GradManager


@dataclass
class _Entry:
    op_cls: type[T.MgbOp]
    params: dict[str, Any]
    input_ids: list[int]
    inputs: list[Array]
    output_ids: list[int]
    outputs: list[Array]
    where: str | None  # the user's source line, kept only for ops without a rule (for the error)
    # the tensors themselves: a backward that an outer GradManager records computes on these
    input_tensors: list[Tensor] = field(default_factory=list)
    output_tensors: list[Tensor] = field(default_factory=list)
    function: Function | None = None  # a user-defined Function: its backward is the rule


_DEFAULTS: dict[type[T.MgbOp], dict[str, Any]] = {}


def _full_params(op_cls: type[T.MgbOp], params: dict[str, Any]) -> dict[str, Any]:
    # recorders see only the parameters the caller passed; the rules want the defaults too
    defaults = _DEFAULTS.get(op_cls)
    if defaults is None:
        defaults = _DEFAULTS[op_cls] = op_cls.params_with_defaults({})
    return {**defaults, **params}


class _Tape:
    """The recorder ``GradManager`` pushes: keeps every op that depends on a tracked tensor."""

    def __init__(self, sources: Iterable[Tensor]) -> None:
        # id -> tensor; holding the tensor keeps its id from being reused while recording
        self.tracked: dict[int, Tensor] = {id(t): t for t in sources}
        # the attached tensors: an intermediate one keeps its gradient when backward passes it
        self.attached: set[int] = set(self.tracked)
        self.entries: list[_Entry] = []
        self.group: object | None = None  # managers entered together (gm | gm2) do not see each other

    def track(self, t: Tensor) -> None:
        self.tracked[id(t)] = t
        self.attached.add(id(t))

    def _take(self, grads: dict[int, Any], kept: dict[int, Any], ids: Sequence[int]) -> list[Any]:
        """Pop the gradients of an entry's outputs (complete once backward reaches their producer);
        those of attached tensors are kept for the caller."""
        out = [grads.pop(i, None) for i in ids]
        for i, g in zip(ids, out, strict=True):
            if g is not None and i in self.attached:
                kept[i] = g
        return out

    def record(self, applied: AppliedOp) -> None:
        inputs, outputs = applied.inputs, applied.outputs
        if not any(id(t) in self.tracked for t in inputs):
            return
        float_outs = [t for t in outputs if t.dtype.kind == "f"]
        if not float_outs:
            return  # a bool/int result carries no gradient onwards
        for t in float_outs:
            self.tracked[id(t)] = t
        self.entries.append(
            _Entry(
                applied.op_cls,
                _full_params(applied.op_cls, applied.params),
                [id(t) for t in inputs],
                [t._data for t in inputs],
                [id(t) for t in outputs],
                [t._data for t in outputs],
                None if applied.op_cls in BACKWARD else user_location(),
                list(inputs),
                list(outputs),
            )
        )

    def record_function(self, fn: Function, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
        if not any(id(t) in self.tracked for t in inputs):
            return
        for t in outputs:
            if t.dtype.kind == "f":
                self.tracked[id(t)] = t
        self.entries.append(
            _Entry(
                T.MgbOp, {}, [id(t) for t in inputs], [t._data for t in inputs], [id(t) for t in outputs],
                [t._data for t in outputs], None, list(inputs), list(outputs), fn,
            )
        )  # fmt: skip

    def _accumulate(self, grads: dict[int, Any], e: _Entry, in_grads: Sequence[Any]) -> None:
        for i, x, gx in zip(e.input_ids, e.inputs, in_grads, strict=True):
            if gx is None or i not in self.tracked:
                continue
            if tuple(gx.shape) != tuple(x.shape):
                raise GradError(
                    f"{e.function or e.op_cls.name}: gradient shape {gx.shape} differs from "
                    f"input shape {x.shape}"
                )
            prev = grads.get(i)
            grads[i] = gx if prev is None else prev + gx

    def backward(self, seeds: dict[int, Array]) -> dict[int, Array]:
        grads = dict(seeds)
        kept: dict[int, Any] = {}
        for e in reversed(self.entries):
            out_grads = self._take(grads, kept, e.output_ids)
            if all(g is None for g in out_grads):
                continue
            if e.function is not None:
                tgrads = [None if g is None else Tensor._from_array(np.asarray(g)) for g in out_grads]
                custom = e.function._input_grads(tgrads, len(e.inputs))
                self._accumulate(grads, e, [None if g is None else g._data for g in custom])
                continue
            rule = BACKWARD.get(e.op_cls)
            if rule is None:
                why = e.op_cls.NO_GRADIENT
                if why is not None:
                    raise GradError(f"{e.op_cls.name} is not differentiable: {why} (op applied at {e.where})")
                raise GradError(f"{e.op_cls.name} has no gradient rule (op applied at {e.where})")
            in_grads = rule(e.inputs, e.outputs, out_grads, e.params)
            self._accumulate(grads, e, in_grads)
        return {**grads, **kept}


class Function:
    """A differentiable operation with a user-written gradient (MegEngine's ``autodiff.Function``).

    Subclass it with ``forward(self, *inputs)`` (tensors in, a tensor or a tuple of tensors out)
    and ``backward(self, *output_grads)`` (one gradient per output, ``None`` where none reached it;
    returns one gradient per input, or ``None``). Call an instance like a function. The ops inside
    ``forward`` are not differentiated themselves; ``backward``'s ops are, by enclosing managers
    (second-order gradients)."""

    def forward(self, *inputs: Tensor) -> Tensor | tuple[Tensor, ...]:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def backward(self, *output_grads: Tensor | None) -> Tensor | Sequence[Tensor | None] | None:
        raise NotImplementedError(f"{type(self).__name__} does not define backward()")

    def __call__(self, *inputs: Tensor) -> Any:
        from compiler.core import active_recorders

        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"{type(self).__name__}: input {i} must be a Tensor, got {type(t).__name__}")
        tapes = [r for r in active_recorders() if isinstance(r, _Tape)]
        for tape in tapes:
            pop_recorder(tape)
        try:
            out = self.forward(*inputs)
        finally:
            for tape in tapes:
                push_recorder(tape)
        outs = [out] if isinstance(out, Tensor) else list(out)
        if not all(isinstance(o, Tensor) for o in outs):
            raise TypeError(f"{type(self).__name__}.forward must return Tensors")
        for tape in tapes:
            tape.record_function(self, inputs, outs)
        return out

    def _input_grads(self, output_grads: Sequence[Tensor | None], n_inputs: int) -> list[Tensor | None]:
        got = self.backward(*output_grads)
        grads = [got] if got is None or isinstance(got, Tensor) else list(got)
        if len(grads) != n_inputs:
            raise GradError(
                f"{type(self).__name__}.backward returned {len(grads)} gradients for {n_inputs} inputs"
            )
        return grads

    def __str__(self) -> str:
        return type(self).__name__


class GradManager:
    """MegEngine's ``GradManager``: attach tensors, record a computation, backpropagate into ``.grad``."""

    def __init__(self) -> None:
        # weak references, as MegEngine's: attaching a tensor does not keep it alive
        self._attached: dict[int, weakref.ref[Tensor]] = {}
        self._callbacks: dict[int, list[Callable[[Tensor, Tensor], Tensor]]] = {}
        self._tape: _Tape | None = None

    def _forget(self, key: int) -> Callable[[Any], None]:
        this = weakref.ref(self)

        def deleter(_: Any) -> None:
            gm = this()
            if gm is not None:
                gm._attached.pop(key, None)
                gm._callbacks.pop(key, None)

        return deleter

    def _live(self) -> list[tuple[int, Tensor]]:
        out = []
        for key, ref in list(self._attached.items()):
            t = ref()
            if t is not None:
                out.append((key, t))
        return out

    def attach(
        self,
        tensors: Tensor | Iterable[Tensor],
        callbacks: Callable[[Tensor, Tensor], Tensor]
        | Sequence[Callable[[Tensor, Tensor], Tensor]]
        | None = None,
    ) -> GradManager:
        """Compute gradients for ``tensors`` from now on; ``callbacks(tensor, grad) -> grad`` run on
        each gradient before it is added to ``tensor.grad``."""
        items = [tensors] if isinstance(tensors, Tensor) else list(tensors)
        cbs = [] if callbacks is None else [callbacks] if callable(callbacks) else list(callbacks)
        for t in items:
            if not isinstance(t, Tensor):
                raise TypeError(f"GradManager.attach: expected Tensors, got {type(t).__name__}")
            if t.dtype.kind != "f":
                raise AssertionError(
                    "Only tensors of floating point dtype can be attached to get gradients, "
                    f"get tensor dtype: {t.dtype} and shape: {t.shape}"
                )
            if id(t) not in self._attached:
                self._attached[id(t)] = weakref.ref(t, self._forget(id(t)))
            self._callbacks.setdefault(id(t), []).extend(cbs)
            if self._tape is not None:
                self._tape.track(t)
        return self

    def attached_tensors(self) -> list[Tensor]:
        return [t for _, t in self._live()]

    def is_attached(self, tensor: Tensor) -> bool:
        return id(tensor) in self._attached

    @property
    def _recording(self) -> bool:
        return self._tape is not None

    def record(self) -> None:
        """Start recording (what ``with gm:`` does)."""
        if self._tape is not None:
            raise GradError("GradManager is already recording")
        self._tape = _Tape(t for _, t in self._live())
        push_recorder(self._tape)

    def __or__(self, other: GradManager | GradManagerGroup) -> GradManagerGroup:
        """``with gm | gm2:`` records with both at the same level: neither sees the other's backward."""
        return GradManagerGroup([self]) | other

    def release(self) -> None:
        """Stop recording and drop the history."""
        if self._tape is not None:
            pop_recorder(self._tape)
            self._tape = None

    def __enter__(self) -> GradManager:
        self.record()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def backward(
        self, y: Tensor | Sequence[Tensor] | None = None, dy: Tensor | Sequence[Tensor] | None = None
    ) -> None:
        """Add d(y)/d(t), weighted by ``dy`` (default: ones), into ``t.grad`` for every attached ``t``
        that ``y`` depends on, then stop recording, as MegEngine does."""
        tape = self._tape
        if tape is None:
            raise GradError("no computation history: call backward inside `with gm:` (or after gm.record())")
        if y is None:
            raise GradError("backward needs the tensor(s) to differentiate")
        ys = [y] if isinstance(y, Tensor) else list(y)
        if dy is None:
            dys: list[Any] = [None] * len(ys)
        else:
            dys = [dy] if isinstance(dy, Tensor) else list(dy)
        if len(dys) != len(ys):
            raise GradError(f"backward got {len(ys)} tensors but {len(dys)} output gradients")
        try:
            seeds: dict[int, Array] = {}
            for t, d in zip(ys, dys, strict=True):
                arr = (
                    np.ones(t.shape, t.dtype)
                    if d is None
                    else np.asarray(d._data if isinstance(d, Tensor) else d)
                )
                if arr.shape != t.shape:
                    raise GradError(f"backward: dy has shape {arr.shape}, y has shape {t.shape}")
                seeds[id(t)] = arr.astype(t.dtype) if id(t) not in seeds else seeds[id(t)] + arr
            outer, inner = _split_tapes(tape)
            pop_recorder(tape)  # stop recording first: nothing backward does is part of its own history
            self._tape = None
            if outer:
                # an enclosing GradManager records: compute the gradients with recorded ops it sees
                # (the managers entered after this one do not), so it can differentiate them again
                seed_tensors = {
                    id(t): (d if isinstance(d, Tensor) else Tensor._from_array(seeds[id(t)]))
                    for t, d in zip(ys, dys, strict=True)
                }
                self._accumulate_recorded(tape, seed_tensors, inner)
                return
            grads = tape.backward(seeds)
        finally:
            self.release()
        for i, t in self._live():
            g = grads.get(i)
            if g is None:
                continue
            # a fresh, writeable array: rules may return read-only broadcast views
            self._deliver(i, t, Tensor._from_array(np.array(g, dtype=t.dtype)), recorded=False)

    def _deliver(self, i: int, t: Tensor, gt: Tensor, *, recorded: bool) -> None:
        """Hand attached tensor ``t`` its gradient: through the callbacks, then added into ``t.grad``
        (with a recorded op when an enclosing manager differentiates the backward)."""
        for cb in self._callbacks.get(i, []):
            gt = cb(t, gt)
        if t.grad is None:
            t.grad = gt
        else:
            t.grad = t.grad + gt if recorded else Tensor._from_array(t.grad._data + gt._data)

    def _accumulate_recorded(self, tape: _Tape, seeds: dict[int, Tensor], inner: list[_Tape]) -> None:
        for rec in inner:
            pop_recorder(rec)
        try:
            grads = tape.backward_recorded(seeds)
            for i, t in self._live():
                gt = grads.get(i)
                if gt is None:
                    continue
                self._deliver(i, t, gt, recorded=True)
        finally:
            for rec in inner:
                push_recorder(rec)


class GradManagerGroup:
    """Several GradManagers entered together (``gm | gm2``)."""

    def __init__(self, managers: Iterable[GradManager]) -> None:
        self.managers: list[GradManager] = list(managers)

    def __or__(self, other: GradManager | GradManagerGroup) -> GradManagerGroup:
        more = other.managers if isinstance(other, GradManagerGroup) else [other]
        for m in more:
            if not isinstance(m, GradManager):
                raise TypeError(f"a GradManager group takes GradManagers, got {type(m).__name__}")
        return GradManagerGroup([*self.managers, *more])

    def __enter__(self) -> GradManagerGroup:
        token = object()
        for m in self.managers:
            m.record()
            assert m._tape is not None
            m._tape.group = token
        return self

    def __exit__(self, *exc: object) -> None:
        for m in reversed(self.managers):
            m.release()


def _split_tapes(tape: _Tape) -> tuple[list[_Tape], list[_Tape]]:
    """The other GradManagers' tapes recording now: those entered before ``tape`` (they see its
    backward) and those entered after it (they do not), as MegEngine orders nested managers."""
    from compiler.core import active_recorders

    recs = list(active_recorders())
    k = next(i for i, r in enumerate(recs) if r is tape)

    def peer(r: _Tape) -> bool:
        return tape.group is not None and r.group is tape.group

    return (
        [r for r in recs[:k] if isinstance(r, _Tape) and not peer(r)],
        [r for i, r in enumerate(recs) if i != k and isinstance(r, _Tape) and (i > k or peer(r))],
    )


# ----------------------------------------------------------------------------------------------
# Backward rules written with tensor ops: used when an enclosing GradManager records the backward
# (second-order gradients). Ops without one fall back to their numpy rule (a constant to the outer
# manager: its gradient through them is not second-order).

TensorRule = Callable[[Sequence[Tensor], Sequence[Tensor], Tensor, dict[str, Any]], Sequence[Tensor | None]]
TENSOR_BACKWARD: dict[type[T.MgbOp], TensorRule] = {}
ElemwiseTensorRule = Callable[[Sequence[Tensor], Tensor, Tensor], Sequence[Tensor | None]]
ELEMWISE_TENSOR_BACKWARD: dict[Any, ElemwiseTensorRule] = {}


def _tensor_unbroadcast(g: Tensor, shape: Sequence[int]) -> Tensor:
    import compiler.functional as F

    shape = tuple(shape)
    if g.shape == shape:
        return g
    while g.ndim > len(shape):
        g = F.sum(g, axis=0)
    for ax, (s, d) in enumerate(zip(shape, g.shape, strict=True)):
        if s == 1 and d != 1:
            g = F.sum(g, axis=ax, keepdims=True)
    return g.reshape(shape)


def _install_tensor_rules() -> None:
    import compiler.functional as F

    ew = ELEMWISE_TENSOR_BACKWARD
    ew[E.ADD] = lambda x, y, g: (g, g)
    ew[E.SUB] = lambda x, y, g: (g, -g)
    ew[E.MUL] = lambda x, y, g: (g * x[1], g * x[0])
    ew[E.TRUE_DIV] = lambda x, y, g: (g / x[1], -g * x[0] / (x[1] * x[1]))
    ew[E.NEGATE] = lambda x, y, g: (-g,)
    ew[E.EXP] = lambda x, y, g: (g * y,)
    ew[E.LOG] = lambda x, y, g: (g / x[0],)
    ew[E.SIN] = lambda x, y, g: (g * F.cos(x[0]),)
    ew[E.COS] = lambda x, y, g: (-g * F.sin(x[0]),)
    ew[E.TANH] = lambda x, y, g: (g * (1 - y * y),)
    ew[E.SIGMOID] = lambda x, y, g: (g * y * (1 - y),)
    ew[E.SQRT] = lambda x, y, g: (g / (2 * y),)
    ew[E.SQUARE] = lambda x, y, g: (2 * g * x[0],)
    ew[E.RELU] = lambda x, y, g: (g * (x[0] > 0).astype(g.dtype),)
    ew[E.ABS] = lambda x, y, g: (g * F.sign(x[0]),)

    def elemwise(
        x: Sequence[Tensor], y: Sequence[Tensor], g: Tensor, params: dict[str, Any]
    ) -> list[Tensor | None]:
        rule = ew[params["mode"]]
        out: list[Tensor | None] = []
        for xi, gi in zip(x, rule(x, y[0], g), strict=True):
            if gi is None or xi.dtype.kind != "f":
                out.append(None)
                continue
            if gi.shape != g.shape:
                gi = F.broadcast_to(gi, g.shape)
            out.append(_tensor_unbroadcast(gi, xi.shape).astype(xi.dtype))
        return out

    TENSOR_BACKWARD[T.ElemwiseOp] = elemwise
    TENSOR_BACKWARD[T.ReshapeOp] = lambda x, y, g, p: [g.reshape(x[0].shape)]
    TENSOR_BACKWARD[T.AxisAddRemoveOp] = lambda x, y, g, p: [g.reshape(x[0].shape)]
    TENSOR_BACKWARD[T.BroadcastOp] = lambda x, y, g, p: [_tensor_unbroadcast(g, x[0].shape)]
    TENSOR_BACKWARD[T.ReshapeToOp] = lambda x, y, g, p: [g.reshape(x[0].shape), None]
    TENSOR_BACKWARD[T.BroadcastToOp] = lambda x, y, g, p: [_tensor_unbroadcast(g, x[0].shape), None]
    TENSOR_BACKWARD[T.TypeCvtOp] = lambda x, y, g, p: [
        g.astype(x[0].dtype) if x[0].dtype.kind == "f" and y[0].dtype.kind == "f" else None
    ]


def _tensor_rule(e: _Entry) -> TensorRule | None:
    if not e.input_tensors:
        return None
    if e.op_cls is T.ElemwiseOp and e.params["mode"] not in ELEMWISE_TENSOR_BACKWARD:
        return None
    if e.op_cls is T.ElemwiseOp and len(e.output_tensors) != 1:
        return None
    return TENSOR_BACKWARD.get(e.op_cls)


def _backward_recorded(self: _Tape, seeds: dict[int, Tensor]) -> dict[int, Tensor]:
    """:meth:`_Tape.backward` with tensors: the rules run as ops the active recorders see."""
    if not TENSOR_BACKWARD:
        _install_tensor_rules()
    grads: dict[int, Tensor] = dict(seeds)
    kept: dict[int, Tensor] = {}
    for e in reversed(self.entries):
        out_grads = self._take(grads, kept, e.output_ids)
        if all(g is None for g in out_grads):
            continue
        if e.function is not None:  # its backward runs as ops the enclosing managers record
            self._accumulate(grads, e, e.function._input_grads(out_grads, len(e.inputs)))
            continue
        rule = _tensor_rule(e)
        if rule is not None and len(out_grads) == 1:
            in_grads: Sequence[Tensor | None] = rule(
                e.input_tensors, e.output_tensors, out_grads[0], e.params
            )
        else:
            np_rule = BACKWARD.get(e.op_cls)
            if np_rule is None:
                why = e.op_cls.NO_GRADIENT
                raise GradError(
                    f"{e.op_cls.name} is not differentiable: {why or 'no gradient rule'} "
                    f"(op applied at {e.where})"
                )
            arrays = np_rule(
                e.inputs, e.outputs, [None if g is None else g._data for g in out_grads], e.params
            )
            in_grads = [None if a is None else Tensor._from_array(np.array(a)) for a in arrays]
        self._accumulate(grads, e, in_grads)
    return {**grads, **kept}


_Tape.backward_recorded = _backward_recorded  # type: ignore[attr-defined]


@register_backward(L.RelayoutOp)
def _relayout_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    # The gradient lives in the result's layout; the inverse relayout brings it back. Channels the
    # forward padded with zeros are dropped by unpacking to the input's logical shape.
    g = _only_grad(grads)
    x = inputs[0]
    src, dst, channels = params["src"], params["dst"], params["channels"]
    logical = tuple(x.shape) if src is None else tuple(L.SPECS[src].logical_shape(x.shape, channels))
    return [L.relayout_array(g, dst, src, logical).astype(x.dtype, copy=False)]


@register_backward(T.ElemwiseMultiTypeOp)
def _elemwise_multi_type_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    # Quantized arithmetic: values are integers on a fixed grid, so no gradient flows through it
    # (quantization-aware training would use a straight-through estimator on float values instead).
    return [None for _ in inputs]


# conv3d and the image ops keep their rules in their own module
from compiler.autodiff.vision import RULES as _VISION_RULES  # noqa: E402

for _cls, _rule in _VISION_RULES.items():
    register_backward(_cls)(_rule)


@register_backward(T.SVDOp)
def _svd_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    from semantics.linalg_kernels import svd_backward

    x = np.asarray(inputs[0])
    return [svd_backward(x, outputs, grads, params).astype(x.dtype)]
