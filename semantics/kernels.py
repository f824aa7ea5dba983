"""Reference kernels: the single definition of each ``mgb`` op's semantics, in numpy.

A kernel takes the operand arrays, the result specs (shape and numpy dtype of every result) and the
op's parameters as Python values (see ``MgbOp.params``), and returns the result arrays. The eager
frontend, the tracer's replay, the interpreter and every test of a pass or a generated kernel run
through these functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dialects import enums
from dialects import tensor as T
from dialects.dtypes import quantized_type_of
from dialects.errors import AssertEqualError
from dialects.registration import registering

E = enums.ElemwiseMode


@dataclass(frozen=True)
class ResultSpec:
    shape: tuple[int, ...]
    dtype: np.dtype


Kernel = Callable[..., list[np.ndarray]]
KERNELS: dict[type[T.MgbOp], Kernel] = {}


# op class -> its semantics on quantized operands or results, for the ops whose kernel here serves
# both: ``quant_kernels`` (which builds on this module, and which the package imports) registers them
QUANTIZED_KERNELS: dict[type[T.MgbOp], Kernel] = {}


def kernel(op: type[T.MgbOp]) -> Callable[[Kernel], Kernel]:
    return registering(KERNELS, op)


def quantized_kernel(op: type[T.MgbOp]) -> Callable[[Kernel], Kernel]:
    return registering(QUANTIZED_KERNELS, op)


def involved(args: Sequence[np.ndarray], results: Sequence[ResultSpec]) -> bool:
    """Whether any operand or result of an op is quantized."""
    return any(quantized_type_of(a.dtype) is not None for a in args) or any(
        quantized_type_of(r.dtype) is not None for r in results
    )


def quantized(op: type[T.MgbOp], args: Sequence[np.ndarray], results: Sequence[ResultSpec]) -> Kernel | None:
    """``op``'s quantized kernel when an operand or result of this call is quantized, else None."""
    return QUANTIZED_KERNELS[op] if involved(args, results) else None


# ----------------------------------------------------------------------------------------------
# Convolution


def _pad_nchw(x: np.ndarray, ph: int, pw: int, value: float = 0.0) -> np.ndarray:
    if ph == 0 and pw == 0:
        return x
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _windows(x: np.ndarray, fh: int, fw: int, stride: Sequence[int], dilation: Sequence[int]) -> np.ndarray:
    """(N, C, OH, OW, FH, FW) strided view of the windows of a padded NCHW input."""
    n, c, h, w = x.shape
    oh = (h - dilation[0] * (fh - 1) - 1) // stride[0] + 1
    ow = (w - dilation[1] * (fw - 1) - 1) // stride[1] + 1
    sn, sc, sh, sw = x.strides
    return np.lib.stride_tricks.as_strided(
        x,
        shape=(n, c, oh, ow, fh, fw),
        strides=(sn, sc, sh * stride[0], sw * stride[1], sh * dilation[0], sw * dilation[1]),
        writeable=False,
    )


def dense_filter(w: np.ndarray, sparse: Any, mode: Any) -> tuple[np.ndarray, int]:
    """A convolution's filter as (OC, IC/G, FH, FW) for cross-correlation (flipped for a true
    convolution) and its group count."""
    if sparse == enums.ConvSparse.GROUP:
        groups = w.shape[0]
        w = w.reshape(w.shape[0] * w.shape[1], *w.shape[2:])
    else:
        groups = 1
    if mode == enums.ConvMode.CONVOLUTION:
        w = w[..., ::-1, ::-1]
    return w, groups


def conv2d_nchw(
    x: np.ndarray,
    w: np.ndarray,
    *,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    sparse: Any,
    mode: Any = enums.ConvMode.CROSS_CORRELATION,
    acc_dtype: np.dtype | None = None,
) -> np.ndarray:
    """NCHW convolution; ``w`` is (OC, IC, FH, FW) or, with sparse=GROUP, (G, OC/G, IC/G, FH, FW)."""
    w, groups = dense_filter(w, sparse, mode)
    acc = acc_dtype or (np.float32 if x.dtype.kind == "f" else np.int32)
    oc, icpg, fh, fw = w.shape
    xp = _pad_nchw(x.astype(acc, copy=False), padding[0], padding[1])
    win = _windows(xp, fh, fw, stride, dilation)  # N, C, OH, OW, FH, FW
    n, _, oh, ow = win.shape[:4]
    ocpg = oc // groups
    out = np.empty((n, oc, oh, ow), dtype=acc)
    wa = w.astype(acc, copy=False)
    for g in range(groups):
        wg = wa[g * ocpg : (g + 1) * ocpg].reshape(ocpg, icpg * fh * fw)
        cols = (
            win[:, g * icpg : (g + 1) * icpg].transpose(0, 2, 3, 1, 4, 5).reshape(n, oh * ow, icpg * fh * fw)
        )
        out[:, g * ocpg : (g + 1) * ocpg] = (cols @ wg.T).transpose(0, 2, 1).reshape(n, ocpg, oh, ow)
    return out


@kernel(T.ConvolutionOp)
def convolution(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    _require_nchw("mgb.convolution", p)
    if (q := quantized(T.ConvolutionOp, args, results)) is not None:
        return q(args, results, **p)
    x, w = args
    y = conv2d_nchw(x, w, **_conv_kwargs(p))
    return [y.astype(results[0].dtype, copy=False)]


NONLINEARITY: dict[Any, Callable[[np.ndarray], np.ndarray]] = {}


@kernel(T.ConvBiasOp)
def conv_bias(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    _require_nchw("mgb.conv_bias", p)
    if (q := quantized(T.ConvBiasOp, args, results)) is not None:
        return q(args, results, **p)
    x, w, *rest = args
    y = conv2d_nchw(x, w, **_conv_kwargs(p))
    for extra in rest:
        y = y + extra.astype(y.dtype, copy=False)
    y = NONLINEARITY[p["nonline_mode"]](y)
    return [y.astype(results[0].dtype, copy=False)]


def _conv_kwargs(p: dict[str, Any]) -> dict[str, Any]:
    return {k: p[k] for k in ("stride", "padding", "dilation", "sparse", "mode")}


def _require_nchw(op: str, p: dict[str, Any]) -> None:
    if p.get("format", enums.Format.NCHW) != enums.Format.NCHW:
        raise NotImplementedError(f"{op}: the reference kernel runs NCHW only, got format {p['format'].name}")


# ----------------------------------------------------------------------------------------------
# Elementwise


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (1 / (1 + np.exp(-x))).astype(x.dtype, copy=False)


def _hswish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3, 0, 6) / 6


def _gelu(x: np.ndarray) -> np.ndarray:
    import math as _m

    erf = np.vectorize(_m.erf, otypes=[np.float64])
    return (0.5 * x * (1.0 + erf(x.astype(np.float64) / np.sqrt(2.0)))).astype(x.dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # megdnn: floorf(x / y) for floats, floor division for integers
    with np.errstate(divide="ignore", invalid="ignore"):
        if a.dtype.kind == "f":
            return np.floor(np.true_divide(a, b))
        return np.floor_divide(a, b)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # megdnn: fmodf(x, y) for floats (sign of x), Python's modulo for integers (sign of y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b) if a.dtype.kind == "f" else np.mod(a, b)


def _true_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.true_divide(a, b)


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if a.dtype.kind in "iu" and b.dtype.kind in "iu" and (b < 0).any():
            # integer powers with negative exponents (numpy refuses them): the exact value
            # truncated toward zero, 1 and -1 to the power, 0 otherwise (the C kernels' rule)
            a, b = np.broadcast_arrays(a, b)
            neg = b < 0
            odd = (b % 2) != 0
            trunc = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(a.dtype)
            return np.where(neg, trunc, np.power(a, np.where(neg, 0, b).astype(b.dtype)))
        return np.power(a, b)


ELEMWISE: dict[Any, Callable[..., np.ndarray]] = {
    E.RELU: _relu,
    E.ABS: np.abs,
    E.ACOS: np.arccos,
    E.ASIN: np.arcsin,
    E.CEIL: np.ceil,
    E.COS: np.cos,
    E.EXP: np.exp,
    E.EXPM1: np.expm1,
    E.FLOOR: np.floor,
    E.LOG: _log,
    E.LOG1P: np.log1p,
    E.NEGATE: np.negative,
    E.SIGMOID: _sigmoid,
    E.SIN: np.sin,
    E.TANH: np.tanh,
    E.ABS_GRAD: lambda x, g: np.where(x > 0, g, np.where(x < 0, -g, 0)),
    E.ADD: np.add,
    E.FLOOR_DIV: _floor_div,
    E.MAX: np.maximum,
    E.MIN: np.minimum,
    E.MOD: _mod,
    E.MUL: np.multiply,
    E.POW: _pow,
    E.SIGMOID_GRAD: lambda y, g: g * y * (1 - y),
    E.SUB: np.subtract,
    E.SWITCH_GT0: lambda x, y: np.where(x > 0, y, np.zeros((), y.dtype)),
    E.TANH_GRAD: lambda y, g: g * (1 - y * y),
    E.TRUE_DIV: _true_div,
    E.LOG_SUM_EXP: np.logaddexp,
    E.LT: np.less,
    E.LEQ: np.less_equal,
    E.EQ: np.equal,
    E.NEQ: np.not_equal,
    E.SHL: np.left_shift,
    E.SHR: np.right_shift,
    E.COND_LEQ_MOV: lambda x, y, z: np.where(x <= y, z, np.zeros((), z.dtype)),
    E.COND_LT_MOV: lambda x, y, z: np.where(x < y, z, np.zeros((), z.dtype)),
    E.FUSE_MUL_ADD3: lambda a, b, c: a * b + c,
    E.FUSE_MUL_ADD4: lambda a, b, c, d: a * b + c * d,
    E.FUSE_ADD_RELU: lambda a, b: _relu(a + b),
    E.FUSE_ADD_SIGMOID: lambda a, b: _sigmoid(a + b),
    E.FUSE_ADD_TANH: lambda a, b: np.tanh(a + b),
    E.FAST_TANH: np.tanh,
    E.FAST_TANH_GRAD: lambda y, g: g * (1 - y * y),
    E.ROUND: lambda x: np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5)).astype(x.dtype),
    E.ATAN2: np.arctan2,
    E.ERF: _erf,
    E.ERFC: lambda x: (1 - _erf(x)).astype(x.dtype),
    E.H_SWISH: _hswish,
    E.H_SWISH_GRAD: lambda x, g: np.where(x < -3, 0, np.where(x > 3, g, g * (2 * x + 3) / 6)).astype(g.dtype),
    E.FUSE_ADD_H_SWISH: lambda a, b: _hswish(a + b),
    E.NOT: np.logical_not,
    E.AND: np.logical_and,
    E.OR: np.logical_or,
    E.XOR: np.logical_xor,
    E.SILU: lambda x: x * _sigmoid(x),
    E.GELU: _gelu,
    E.ISNAN: np.isnan,
    E.ISINF: np.isinf,
    E.SINH: np.sinh,
    E.COSH: np.cosh,
    E.ASINH: np.arcsinh,
    E.ACOSH: np.arccosh,
    E.ATANH: np.arctanh,
    E.TAN: np.tan,
    E.PRELU: lambda x, w: np.where(x > 0, x, x * w),
    E.CLIP: lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
    E.SOFTPLUS: lambda x: np.logaddexp(np.zeros((), x.dtype), x),
    E.RELU6: lambda x: np.minimum(np.maximum(x, np.zeros((), x.dtype)), np.asarray(6, x.dtype)),
    E.RELU6_GRAD: lambda x, g: np.where((x > 0) & (x < 6), g, np.zeros((), g.dtype)),
    E.HSIGMOID: lambda x: np.clip(x + 3, 0, 6) / 6,
    E.LOGSIGMOID: lambda x: -np.logaddexp(np.zeros((), x.dtype), -x),
    E.SQRT: np.sqrt,
    E.SQUARE: np.square,
    E.SIGN: np.sign,
}

NONLINEARITY.update(
    {
        enums.NonlineMode.IDENTITY: lambda x: x,
        enums.NonlineMode.RELU: _relu,
        enums.NonlineMode.SIGMOID: _sigmoid,
        enums.NonlineMode.H_SWISH: _hswish,
    }
)


@kernel(T.ElemwiseOp)
def elemwise(args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, mode: Any) -> list[np.ndarray]:
    fn = ELEMWISE.get(mode)
    if fn is None:
        raise NotImplementedError(f"mgb.elemwise: mode {mode.name} has no reference kernel")
    if (q := quantized(T.ElemwiseOp, args, results)) is not None:
        return q(args, results, mode=mode)
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.asarray(fn(*args))
    return [np.broadcast_to(y, results[0].shape).astype(results[0].dtype, copy=False)]


# ----------------------------------------------------------------------------------------------
# Pooling


def pool2d_nchw(
    x: np.ndarray, *, mode: Any, window: Sequence[int], stride: Sequence[int], padding: Sequence[int]
) -> np.ndarray:
    fh, fw = window
    if mode == enums.PoolingMode.MAX:
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        win = _windows(_pad_nchw(x, padding[0], padding[1], fill), fh, fw, stride, (1, 1))
        return win.max(axis=(4, 5))
    acc = np.float32 if x.dtype.kind == "f" else np.int64
    xp = _pad_nchw(x.astype(acc), padding[0], padding[1])
    total = _windows(xp, fh, fw, stride, (1, 1)).sum(axis=(4, 5), dtype=acc)
    if mode == enums.PoolingMode.AVERAGE:
        return total / np.asarray(fh * fw, acc)
    ones = _pad_nchw(np.ones((1, 1, *x.shape[2:]), acc), padding[0], padding[1])
    count = _windows(ones, fh, fw, stride, (1, 1)).sum(axis=(4, 5), dtype=acc)
    return total / count


@kernel(T.PoolingOp)
def pooling(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    _require_nchw("mgb.pooling", p)
    if (q := quantized(T.PoolingOp, args, results)) is not None:
        return q(args, results, **p)
    y = pool2d_nchw(args[0], mode=p["mode"], window=p["window"], stride=p["stride"], padding=p["padding"])
    return [y.astype(results[0].dtype, copy=False)]


def adaptive_pool_params(
    in_hw: Sequence[int], out_hw: Sequence[int]
) -> tuple[tuple[int, int], tuple[int, int]]:
    """MegEngine's AdaptivePooling as plain pooling: (window, stride) per spatial axis."""
    stride = tuple(i // o for i, o in zip(in_hw, out_hw, strict=True))
    window = tuple(i - (o - 1) * s for i, o, s in zip(in_hw, out_hw, stride, strict=True))
    return window, stride  # type: ignore[return-value]


@kernel(T.AdaptivePoolingOp)
def adaptive_pooling(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    _require_nchw("mgb.adaptive_pooling", p)
    if (q := quantized(T.AdaptivePoolingOp, args, results)) is not None:
        return q(args, results, **p)
    x = args[0]
    window, stride = adaptive_pool_params(x.shape[2:], p["out_shape"])
    y = pool2d_nchw(x, mode=p["mode"], window=window, stride=stride, padding=(0, 0))
    return [y.astype(results[0].dtype, copy=False)]


# ----------------------------------------------------------------------------------------------
# Matrix multiplication


def _matmul(
    op: type[T.MgbOp], args: Sequence[np.ndarray], results: Sequence[ResultSpec], p: dict[str, Any]
) -> list[np.ndarray]:
    if (q := quantized(op, args, results)) is not None:
        return q(args, results, **p)
    a, b = args
    if p.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if p.get("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    acc = np.float32 if a.dtype.kind == "f" else np.int32
    y = np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
    return [y.astype(results[0].dtype, copy=False)]


@kernel(T.MatrixMulOp)
def matrix_mul(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    return _matmul(T.MatrixMulOp, args, results, p)


@kernel(T.BatchedMatrixMulOp)
def batched_matrix_mul(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any
) -> list[np.ndarray]:
    return _matmul(T.BatchedMatrixMulOp, args, results, p)


# ----------------------------------------------------------------------------------------------
# Shape and data movement


@kernel(T.ReshapeOp)
def reshape(args: Sequence[np.ndarray], results: Sequence[ResultSpec]) -> list[np.ndarray]:
    return [args[0].reshape(results[0].shape)]


@kernel(T.BroadcastOp)
def broadcast(args: Sequence[np.ndarray], results: Sequence[ResultSpec]) -> list[np.ndarray]:
    return [np.broadcast_to(args[0], results[0].shape)]



@kernel(T.GetVarShapeOp)
def get_var_shape(args: Sequence[np.ndarray], results: Sequence[ResultSpec]) -> list[np.ndarray]:
    return [np.array(args[0].shape, np.int32)]


def shape_from_operand(op: str, value: np.ndarray, size: int, unspec_axis: int = -1) -> tuple[int, ...]:
    """The target shape an int32 shape operand holds (the ``unspec_axis`` entry inferred from
    ``size``, as MegEngine's Reshape does); ValueError naming ``op`` when it holds no valid shape."""
    dims = [int(v) for v in np.asarray(value).reshape(-1)]
    if 0 <= unspec_axis < len(dims):
        rest = math.prod(d for i, d in enumerate(dims) if i != unspec_axis)
        if rest <= 0 or size % rest:
            raise ValueError(f"{op}: cannot infer axis {unspec_axis} of {tuple(dims)} for {size} elements")
        dims[unspec_axis] = size // rest
    if any(d < 0 for d in dims):
        raise ValueError(f"{op}: negative size in the shape {tuple(dims)}")
    return tuple(dims)


@kernel(T.ReshapeToOp)
def reshape_to(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, unspec_axis: int = -1
) -> list[np.ndarray]:
    """The shape comes from the operand (the result type holds it as traced): a graph whose sizes
    depend on data (CondTake) or on other input shapes reshapes as MegEngine's Reshape does."""
    shape = shape_from_operand(T.ReshapeToOp.name, args[1], args[0].size, unspec_axis)
    if math.prod(shape) != args[0].size:
        raise ValueError(f"{T.ReshapeToOp.name}: cannot reshape {args[0].shape} into {shape}")
    return [args[0].reshape(shape)]


@kernel(T.BroadcastToOp)
def broadcast_to(args: Sequence[np.ndarray], results: Sequence[ResultSpec]) -> list[np.ndarray]:
    shape = shape_from_operand(T.BroadcastToOp.name, args[1], 0)
    try:
        return [np.broadcast_to(args[0], shape)]
    except ValueError:
        raise ValueError(f"{T.BroadcastToOp.name}: cannot broadcast {args[0].shape} to {shape}") from None

@kernel(T.DimshuffleOp)
def dimshuffle(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, pattern: Sequence[int]
) -> list[np.ndarray]:
    perm = [p for p in pattern if p != -1]
    return [np.transpose(args[0], perm).reshape(results[0].shape)]


@kernel(T.AxisAddRemoveOp)
def axis_add_remove(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    return [args[0].reshape(results[0].shape)]


@kernel(T.ConcatOp)
def concat(args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axis: int) -> list[np.ndarray]:
    return [np.concatenate(args, axis=axis)]


@kernel(T.SplitOp)
def split(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axis: int, sizes: Sequence[int]
) -> list[np.ndarray]:
    bounds = np.cumsum(sizes)[:-1]
    return list(np.split(args[0], bounds, axis=axis))


@kernel(T.SubtensorOp)
def subtensor(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x = args[0]
    index: list[Any] = [slice(None)] * x.ndim
    for axis, start, stop, step, drop in zip(
        p["axes"], p["starts"], p["stops"], p["steps"], p["drop"], strict=True
    ):
        index[axis] = start if drop else slice(start, stop, step)
    return [np.asarray(x[tuple(index)]).reshape(results[0].shape)]


def _dtype_bounds(dtype: np.dtype) -> tuple[Any, Any]:
    """The smallest and largest value of ``dtype`` (infinities for floats)."""
    if dtype.kind == "f":
        return -np.inf, np.inf
    if dtype == np.bool_:
        return False, True
    info = np.iinfo(dtype)
    return info.min, info.max


@kernel(T.ReduceOp)
def reduce(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, mode: Any, axis: int, data_type: Any
) -> list[np.ndarray]:
    x = args[0]
    acc = np.float32 if x.dtype.kind == "f" else None
    R = enums.ReduceMode
    if mode == R.SUM:
        y = x.sum(axis=axis, keepdims=True, dtype=acc)
    elif mode == R.SUM_SQR:
        y = np.square(x.astype(acc or x.dtype)).sum(axis=axis, keepdims=True)
    elif mode == R.PRODUCT:
        y = x.prod(axis=axis, keepdims=True, dtype=acc)
    elif mode in (R.MIN, R.MAX):
        # the reduction of nothing (an empty axis) is the identity: +inf / -inf, the integer
        # type's largest / smallest value (what the compiled kernels start from)
        lowest, highest = _dtype_bounds(x.dtype)
        if mode == R.MIN:
            y = x.min(axis=axis, keepdims=True, initial=highest)
        else:
            y = x.max(axis=axis, keepdims=True, initial=lowest)
    else:
        y = x.mean(axis=axis, keepdims=True, dtype=acc)
    return [y.astype(results[0].dtype, copy=False)]


@kernel(T.TypeCvtOp)
def typecvt(args: Sequence[np.ndarray], results: Sequence[ResultSpec]) -> list[np.ndarray]:
    if (q := quantized(T.TypeCvtOp, args, results)) is not None:
        return q(args, results)
    return [args[0].astype(results[0].dtype)]


@kernel(T.SoftmaxOp)
def softmax(args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axis: int) -> list[np.ndarray]:
    x = args[0].astype(np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(results[0].dtype, copy=False)]


@kernel(T.BatchNormOp)
def batch_norm(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, scale, bias, mean, var = args
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    scale, bias, mean, var = (a.reshape(shape).astype(np.float32) for a in (scale, bias, mean, var))
    y = (x.astype(np.float32) - mean) / np.sqrt(var + np.float32(p["epsilon"])) * scale + bias
    return [y.astype(results[0].dtype, copy=False)]


@kernel(T.PaddingOp)
def padding(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    widths = list(zip(p["front"], p["back"], strict=True))
    mode = p["mode"]
    if mode == enums.PaddingMode.CONSTANT:
        y = np.pad(args[0], widths, constant_values=p["value"])
    elif mode == enums.PaddingMode.REFLECT:
        y = np.pad(args[0], widths, mode="reflect")
    else:
        y = np.pad(args[0], widths, mode="edge")
    return [y.astype(results[0].dtype, copy=False)]


# ----------------------------------------------------------------------------------------------
# Transposed convolution, resampling, normalisation, arg-reductions


def conv_transpose2d_nchw(
    diff: np.ndarray,
    filt: np.ndarray,
    out_hw: Sequence[int],
    *,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    sparse: Any,
    mode: Any = enums.ConvMode.CROSS_CORRELATION,
) -> np.ndarray:
    """MegEngine's ConvolutionBackwardData: every ``diff`` value scatters ``value * filter`` into the
    (un-padded) output window it came from; ``out_hw`` includes any output padding."""
    if sparse != enums.ConvSparse.GROUP:
        filt = filt[None]
    groups, icpg, ocpg, fh, fw = filt.shape
    if mode == enums.ConvMode.CONVOLUTION:
        filt = filt[..., ::-1, ::-1]
    n, _, h, w = diff.shape
    d = diff.astype(np.float64).reshape(n, groups, icpg, h, w)
    cols = np.einsum("ngihw,giokl->ngohwkl", d, filt.astype(np.float64))
    cols = cols.reshape(n, groups * ocpg, h, w, fh, fw)
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    full = np.zeros(
        (
            n,
            groups * ocpg,
            max((h - 1) * sh + dh * (fh - 1) + 1, ph + out_hw[0]),
            max((w - 1) * sw + dw * (fw - 1) + 1, pw + out_hw[1]),
        )
    )
    for i in range(fh):
        for j in range(fw):
            rows = slice(i * dh, i * dh + sh * (h - 1) + 1, sh)
            full[:, :, rows, j * dw : j * dw + sw * (w - 1) + 1 : sw] += cols[..., i, j]
    return full[:, :, ph : ph + out_hw[0], pw : pw + out_hw[1]]


@kernel(T.ConvolutionBackwardDataOp)
def convolution_backward_data(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any
) -> list[np.ndarray]:
    filt, diff = args
    out = conv_transpose2d_nchw(
        diff,
        filt,
        results[0].shape[2:],
        stride=p["stride"],
        padding=p["padding"],
        dilation=p["dilation"],
        sparse=p["sparse"],
        mode=p["mode"],
    )
    return [out.astype(results[0].dtype)]


def interp_taps(
    n_in: int, n_out: int, imode: Any, align_corners: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, w_lo, w_hi) per output index of 1-D resampling along one axis, as MegEngine's Resize
    reads its input: NEAREST takes ``floor(i * n_in / n_out)`` (``hi`` unused, weight 0); LINEAR
    samples at ``(i + 0.5) * n_in / n_out - 0.5``, clamped to the edge pixels (with
    ``align_corners``: at ``i * (n_in - 1) / (n_out - 1)``), from the two neighbouring pixels."""
    rows = np.arange(n_out)
    if imode == enums.InterpolationMode.NEAREST:
        lo = np.minimum(np.floor(rows * np.float32(n_in / n_out)).astype(np.int64), n_in - 1)
        return lo, lo, np.ones(n_out), np.zeros(n_out)
    if align_corners:
        pos = rows * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        pos = np.maximum((rows + 0.5) * (n_in / n_out) - 0.5, 0.0)
    lo = np.minimum(np.floor(pos).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = pos - lo
    return lo, hi, 1.0 - frac, frac


def interp_matrix(n_in: int, n_out: int, imode: Any, align_corners: bool = False) -> np.ndarray:
    """(n_out, n_in) weights of :func:`interp_taps` as a dense matrix."""
    lo, hi, w_lo, w_hi = interp_taps(n_in, n_out, imode, align_corners)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    np.add.at(m, (rows, lo), w_lo)
    np.add.at(m, (rows, hi), w_hi)
    return m


@dataclass(frozen=True)
class OnnxResizeAxis:
    """ONNX ``Resize`` along one axis: the attributes that decide which input pixels each output
    pixel reads and with which weights (opsets 10-19)."""

    mode: str = "nearest"  # nearest, linear, cubic
    coordinate_transformation_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    roi: tuple[float, float] = (0.0, 1.0)  # tf_crop_and_resize's region of this axis


def _onnx_source_coordinate(i: int, n_in: int, n_out: int, scale: float, a: OnnxResizeAxis) -> float | None:
    """The input coordinate output pixel ``i`` samples (None: outside tf_crop_and_resize's region)."""
    ctm = a.coordinate_transformation_mode
    out_width = scale * n_in
    if ctm == "align_corners":
        return 0.0 if out_width == 1 else i * (n_in - 1) / (out_width - 1)
    if ctm == "asymmetric":
        return i / scale
    if ctm == "tf_crop_and_resize":
        lo, hi = a.roi
        if out_width == 1:
            x = (hi - lo) * (n_in - 1) / 2
        else:
            x = i * (hi - lo) * (n_in - 1) / (out_width - 1)
        x += lo * (n_in - 1)
        return None if x < 0 or x > n_in - 1 else x
    if ctm == "pytorch_half_pixel":
        return -0.5 if out_width == 1 else (i + 0.5) / scale - 0.5
    if ctm == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_width)
        return offset + (i + 0.5) / scale - 0.5
    if ctm == "tf_half_pixel_for_nn":  # opset 11 only
        return (i + 0.5) / scale
    raise ValueError(f"coordinate_transformation_mode {ctm!r} is not an ONNX mode")


def _onnx_resize_coeffs(ratio: float, scale: float, a: OnnxResizeAxis) -> np.ndarray:
    """The weights of the taps left of / at the sample point, ``ratio`` in (0, 1] (the spec's
    convention: an integer coordinate reads the pixel on its right)."""
    if a.mode == "nearest":
        if ratio == 1:
            return np.array([0.0, 1.0])
        pick_right = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": False,
            "ceil": True,
        }.get(a.nearest_mode)
        if pick_right is None:
            raise ValueError(f"nearest_mode {a.nearest_mode!r} is not an ONNX mode")
        return np.array([0.0, 1.0]) if pick_right else np.array([1.0, 0.0])
    A = a.cubic_coeff_a
    if a.antialias and scale < 1:  # a wider kernel stretched by 1 / scale, normalised
        if a.mode == "linear":
            start = int(np.floor(-1 / scale) + 1)
            args = (np.arange(start, 2 - start) - ratio) * scale
            c = np.clip(1 - np.abs(args), 0, 1)
        else:
            start = int(np.floor(-2 / scale) + 1)
            x = np.abs((np.arange(start, 2 - start) - ratio) * scale)
            c = np.where(
                x <= 1,
                (A + 2) * x**3 - (A + 3) * x**2 + 1,
                np.where(x < 2, A * x**3 - 5 * A * x**2 + 8 * A * x - 4 * A, 0.0),
            )
        return c / c.sum()
    if a.mode == "linear":
        return np.array([1 - ratio, ratio])
    if a.mode == "cubic":
        r, q = ratio, 1 - ratio
        return np.array(
            [
                ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
                ((A + 2) * r - (A + 3)) * r * r + 1,
                ((A + 2) * q - (A + 3)) * q * q + 1,
                ((A * (q + 1) - 5 * A) * (q + 1) + 8 * A) * (q + 1) - 4 * A,
            ]
        )
    raise ValueError(f"mode {a.mode!r} is not an ONNX Resize mode")


def onnx_resize_matrix(
    n_in: int, n_out: int, scale: float, a: OnnxResizeAxis
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX ``Resize`` along one axis as ``(weights, outside)``: ``weights`` (n_out, n_in), so that
    the output is ``weights @ input`` along that axis, and ``outside`` (n_out,) marking the pixels
    tf_crop_and_resize sets to ``extrapolation_value``. Pixels beyond the border repeat the edge
    (``exclude_outside`` drops them and renormalises instead), as the spec's reference does."""
    m = np.zeros((n_out, n_in))
    outside = np.zeros(n_out, bool)
    for i in range(n_out):
        x = _onnx_source_coordinate(i, n_in, n_out, scale, a)
        if x is None:
            outside[i] = True
            continue
        ratio = x - math.floor(x) or 1.0
        coeffs = _onnx_resize_coeffs(ratio, scale, a)
        n = len(coeffs)
        # the n nearest pixels of the edge-padded row (nearer first, then the smaller index)
        pad = -(-n // 2)
        limit = n_in + 2 * pad
        centre = x + pad
        candidates = [k for k in range(math.floor(centre) - n, math.floor(centre) + n + 1) if 0 <= k < limit]
        taps = sorted(sorted(candidates, key=lambda k: (abs(centre - k), k))[:n])
        idx = np.array(taps) - pad
        if a.exclude_outside:
            coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
            coeffs = coeffs / coeffs.sum()
        np.add.at(m[i], np.clip(idx, 0, n_in - 1), coeffs)
    return m, outside


@kernel(T.ResizeOp)
def resize(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    (x,) = args
    oh, ow = p["out_shape"]
    imode = p["imode"]
    if imode == enums.InterpolationMode.CUBIC:
        from semantics.image_kernels import resize_cubic

        return [resize_cubic(x, oh, ow).astype(results[0].dtype)]
    y = _resample_axis(x.astype(np.float64), interp_taps(x.shape[2], oh, imode), axis=2, imode=imode)
    y = _resample_axis(y, interp_taps(x.shape[3], ow, imode), axis=3, imode=imode)
    return [y.astype(results[0].dtype)]


def _resample_axis(x: np.ndarray, taps: tuple[np.ndarray, ...], axis: int, imode: Any) -> np.ndarray:
    """Resampling along ``axis`` from the pixels MegEngine's kernel reads: one for NEAREST, the two
    neighbours for LINEAR (a NaN/Inf there reaches the output even at weight 0, as ``0 * inf`` does in
    MegEngine; pixels no output reads never matter, unlike in a dense matrix product)."""
    lo, hi, w_lo, w_hi = taps
    near = np.take(x, lo, axis=axis)
    if imode == enums.InterpolationMode.NEAREST:
        return near
    shape = [1] * x.ndim
    shape[axis] = -1
    with np.errstate(invalid="ignore"):
        return w_lo.reshape(shape) * near + w_hi.reshape(shape) * np.take(x, hi, axis=axis)


def layer_norm_stats(x: np.ndarray, normalized_size: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(mean, rstd) of ``x`` over its trailing ``normalized_size`` elements, one row per position."""
    rows = x.astype(np.float32).reshape(-1, normalized_size)
    mean = rows.mean(axis=1, dtype=np.float64)
    var = ((rows - mean[:, None]) ** 2).mean(axis=1)
    return mean.astype(np.float32), (1.0 / np.sqrt(var + eps)).astype(np.float32)


@kernel(T.LayerNormOp)
def layer_norm(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x = args[0]
    size = p["normalized_size"]
    mean, rstd = layer_norm_stats(x, size, p["eps"])
    y = (x.astype(np.float32).reshape(-1, size) - mean[:, None]) * rstd[:, None]
    if p["affine"]:
        y = y * args[1].astype(np.float32).reshape(-1) + args[2].astype(np.float32).reshape(-1)
    return [
        y.reshape(x.shape).astype(results[0].dtype, copy=False),
        mean.reshape(results[1].shape),
        rstd.reshape(results[2].shape),
    ]


@kernel(T.ArgmaxOp)
def argmax(args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axis: int) -> list[np.ndarray]:
    return [np.argmax(args[0], axis=axis, keepdims=True).astype(np.int32)]


@kernel(T.ArgminOp)
def argmin(args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axis: int) -> list[np.ndarray]:
    return [np.argmin(args[0], axis=axis, keepdims=True).astype(np.int32)]


def _sort_rows(x: np.ndarray, descending: bool) -> np.ndarray:
    """Column order sorting each row, stable both ways (ties keep their first-come order); NaN
    counts as the largest value, as torch orders it: last ascending, first descending."""
    if not descending:
        return np.argsort(x, axis=1, kind="stable")
    if x.dtype.kind != "f":
        return np.argsort(-x.astype(np.int64), axis=1, kind="stable")  # widened: no overflow
    wide = x.astype(np.float64)
    return np.lexsort((-wide, ~np.isnan(wide)), axis=1)


@kernel(T.ArgsortOp)
def argsort(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, descending: int
) -> list[np.ndarray]:
    x = args[0]
    idx = _sort_rows(x, bool(descending))
    return [np.take_along_axis(x, idx, axis=1), idx.astype(np.int32)]


@kernel(T.TopKOp)
def topk(args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, k: int, mode: int) -> list[np.ndarray]:
    x = args[0]
    idx = _sort_rows(x, k < 0)[:, : abs(k)]
    if mode == 0:
        idx = idx[:, -1]
        return [np.take_along_axis(x, idx[:, None], axis=1)[:, 0], idx.astype(np.int32)]
    return [np.take_along_axis(x, idx, axis=1), idx.astype(np.int32)]


@kernel(T.CumsumOp)
def cumsum(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axis: int, exclusive: bool, reverse: bool
) -> list[np.ndarray]:
    """One running sum per line along ``axis``, added element after element in the input's dtype
    (``np.cumsum`` accumulates sequentially, as MegEngine does); ``exclusive`` shifts the sums by one
    so that each leaves out its own element."""
    x = np.flip(args[0], axis) if reverse else args[0]
    y = np.cumsum(x, axis=axis, dtype=results[0].dtype)
    if exclusive:
        head = np.zeros_like(np.take(y, [0], axis=axis))
        y = np.concatenate([head, np.delete(y, -1, axis=axis)], axis=axis)
    return [np.ascontiguousarray(np.flip(y, axis) if reverse else y)]


@kernel(T.IndexingOneHotOp)
def indexing_one_hot(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axis: int
) -> list[np.ndarray]:
    """``src`` at ``index`` along ``axis``; ValueError naming an index outside ``[0, n)`` (MegEngine
    asserts on those at run time; negative indices do not count from the end)."""
    src, index = args
    idx = np.asarray(index, dtype=np.int64)
    n = src.shape[axis]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"index out of range for axis {axis} of size {n}: {idx.min()}..{idx.max()}")
    return [np.take_along_axis(src, np.expand_dims(idx, axis), axis)]


def run_op(
    op_cls: type[T.MgbOp], args: Sequence[np.ndarray], results: Sequence[ResultSpec], params: dict[str, Any]
) -> list[np.ndarray]:
    """Run one op's reference kernel."""
    fn = KERNELS.get(op_cls)
    if fn is None:
        raise NotImplementedError(f"{op_cls.name}: no reference kernel")
    return fn(args, results, **params)


# ----------------------------------------------------------------------------------------------
# Modifying slices, advanced indexing, Linspace


def slice_index(ndim: int, p: dict[str, Any]) -> tuple[Any, ...]:
    """The numpy index of SubtensorOp-style static slice parameters."""
    index: list[Any] = [slice(None)] * ndim
    for axis, start, stop, step, drop in zip(
        p["axes"], p["starts"], p["stops"], p["steps"], p["drop"], strict=True
    ):
        index[axis] = start if drop else slice(start, stop, step)
    return tuple(index)


@kernel(T.SetSubtensorOp)
def set_subtensor(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    out = np.array(args[0], copy=True)
    out[slice_index(out.ndim, p)] = args[1]
    return [out]


@kernel(T.IncrSubtensorOp)
def incr_subtensor(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    out = np.array(args[0], copy=True)
    index = slice_index(out.ndim, p)
    out[index] = out[index] + args[1]
    return [out]


def vec_index(shape: Sequence[int], indices: Sequence[np.ndarray], axes: Sequence[int]) -> tuple[Any, ...]:
    """The numpy index of IndexingMultiAxisVec; ValueError naming an index out of range (MegEngine
    reports those at run time too, where numpy would raise IndexError)."""
    index: list[Any] = [slice(None)] * len(shape)
    for axis, idx in zip(axes, indices, strict=True):
        idx = np.asarray(idx, dtype=np.int64)
        size = shape[axis]
        if idx.size and (idx.min() < -size or idx.max() >= size):
            raise ValueError(f"index out of range for axis {axis} of size {size}: {idx.min()}..{idx.max()}")
        index[axis] = idx
    return tuple(index)


@kernel(T.IndexingMultiAxisVecOp)
def indexing_multi_axis_vec(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axes: Sequence[int]
) -> list[np.ndarray]:
    x = args[0]
    return [np.asarray(x[vec_index(x.shape, args[1:], axes)]).reshape(results[0].shape)]


@kernel(T.IndexingSetMultiAxisVecOp)
def indexing_set_multi_axis_vec(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axes: Sequence[int]
) -> list[np.ndarray]:
    out = np.array(args[0], copy=True)
    out[vec_index(out.shape, args[2:], axes)] = args[1]  # a repeated index keeps the last value
    return [out]


@kernel(T.IndexingIncrMultiAxisVecOp)
def indexing_incr_multi_axis_vec(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, axes: Sequence[int]
) -> list[np.ndarray]:
    out = np.array(args[0], copy=True)
    np.add.at(out, vec_index(out.shape, args[2:], axes), args[1])  # repeated indices accumulate
    return [out]


@kernel(T.LinspaceOp)
def linspace(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, num: int, endpoint: bool
) -> list[np.ndarray]:
    start, stop = (float(np.asarray(a).reshape(-1)[0]) for a in args)
    return [np.linspace(start, stop, num, endpoint=endpoint).astype(np.float32)]


def cond_take_selected(mask: np.ndarray, mode: int, val: float, eps: float) -> np.ndarray:
    """Which mask entries CondTake takes (param.CondTake's modes, by number: EQ NEQ LT LEQ GT GEQ)."""
    m = np.asarray(mask).astype(np.float32) if np.asarray(mask).dtype == np.bool_ else np.asarray(mask)
    v = np.float32(val)
    tests = (
        lambda: np.abs(m - v) < eps,
        lambda: np.abs(m - v) >= eps,
        lambda: m < v,
        lambda: m <= v,
        lambda: m > v,
        lambda: m >= v,
    )
    if not 0 <= mode < len(tests):
        raise ValueError(f"{T.CondTakeOp.name}: mode {mode} is not one of {T.COND_TAKE_MODES}")
    return tests[mode]()


@kernel(T.AssertEqualOp)
def assert_equal(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, maxerr: float = 1e-4, verbose: int = 0
) -> list[np.ndarray]:
    expect, get, err_value = args
    err = float(np.asarray(err_value, np.float64).reshape(-1)[0])
    if verbose:
        print(f"AssertEqual: err={err:g}")
    if not 0 <= err <= maxerr:
        where = _first_difference(expect, get)
        raise AssertEqualError(f"AssertEqual: expect and get differ by {err:g} (maxerr {maxerr:g}); {where}")
    return [np.array(expect, copy=True)]


def _first_difference(expect: np.ndarray, get: np.ndarray) -> str:
    """Where two arrays of one shape differ most, for AssertEqual's message."""
    a, b = np.asarray(expect, np.float64).reshape(-1), np.asarray(get, np.float64).reshape(-1)
    if not a.size:
        return "both are empty"
    diff = np.where(np.isnan(a) ^ np.isnan(b), np.inf, np.nan_to_num(np.abs(a - b)))
    k = int(np.argmax(diff))
    index = tuple(int(i) for i in np.unravel_index(k, np.shape(expect)))
    return f"largest difference at {index}: expect {a[k]:g}, get {b[k]:g}"


@kernel(T.CondTakeOp)
def cond_take(
    args: Sequence[np.ndarray],
    results: Sequence[ResultSpec],
    *,
    mode: int = 0,
    val: float = 1.0,
    eps: float = 1e-6,
) -> list[np.ndarray]:
    """The count comes from the mask's values, not from ``results`` (which may hold another count
    or a dynamic one): the interpreter re-sizes what follows."""
    data, mask = args
    index = np.flatnonzero(cond_take_selected(mask, mode, val, eps)).astype(np.int32)
    return [np.ascontiguousarray(data.reshape(-1)[index]), index]
