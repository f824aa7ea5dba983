"""Reference semantics of the ``mgb`` ops on quantized operands (MegEngine's megdnn naive kernels).

Quantized values travel as their storage arrays whose numpy dtype carries the parameters in
MegEngine's metadata (``dialects.dtypes.quantized_numpy_dtype``); a value ``q`` of a dtype with scale
``s`` and zero point ``zp`` stands for the real number ``(q - zp) * s``.

MegEngine runs these ops on x86 with its SIMD kernels (``dnn/src/x86``: ``QConverter``,
``BinaryQuantizationOp``, ``TypeCvtOp``, the conv-bias ``PostProcess``); the reference repeats their
float32 arithmetic step by step so that its int8 results are bit-exact with MegEngine's:

* **rounding** to an integer is ``trunc(y + copysign(0.5, y))`` in float32 (``round_x86``): half away
  from zero, except where the float32 addition itself carries ``y`` to the next integer.
* **quantize** (float32 → quantized, TypeCvt) is ``clamp(round_x86(x * (1.0f / s)) + zp)``: a
  multiplication by the reciprocal, not megdnn's naive ``x / s``.
* **dequantize** is ``(q - zp) * s`` in float32.
* **TypeCvt** between two quantized dtypes multiplies once by ``s_src / s_dst`` (float32).
* **Convolution / ConvBias / MatrixMul** accumulate ``(src - zp) * (filter - zp)`` exactly in int32
  (scale ``s_src * s_filter``, MegEngine's default ``QuantizedS32`` output). A quantized result is
  the conv-bias post-process: ``y = op(float(acc) * s_acc, float(bias) * s_bias) * (1.0f / s_dst)``
  with ``op`` = ADD, FUSE_ADD_RELU or FUSE_ADD_H_SWISH (the bias and the accumulator are scaled
  separately, then added in float32), without a bias ``round_x86(float(acc) * (s_acc / s_dst))``
  (TypeCvt) or ``relu``/``h_swish`` of ``float(acc) * s_acc`` times ``1.0f / s_dst``.
* **Elemwise / ElemwiseMultiType Q-modes** compute ``op(q0 * s0, q1 * s1) * (1.0f / s_dst)`` in
  float32 and round (MegEngine's QADD, QFUSE_ADD_RELU, QMUL, QH_SWISH, ...).
* **Pooling**: MAX compares stored values; AVERAGE divides the integer window sum by the count
  rounding half away from zero (megdnn's ``MeanIncludeRoundedPooler``). A result dtype whose
  parameters differ from the input's is reached by requantization.

The generated C, NEON and CUDA kernels repeat this arithmetic through one C definition
(``backends/c/templates/portable/requant.py``) and are bit-exact with it (tests/test_int8_kernels_exact.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import semantics.kernels as K
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import QuantizedType, quantized_type_of
from semantics.kernels import ResultSpec, kernel

QM = enums.ElemwiseMultiTypeMode


def qtype(dtype: np.dtype) -> QuantizedType | None:
    """The quantization parameters a numpy dtype carries, or None."""
    return quantized_type_of(dtype)


def _need(a: np.ndarray, what: str) -> QuantizedType:
    q = qtype(a.dtype)
    if q is None:
        raise TypeError(f"{what} must be quantized, got {a.dtype}")
    return q


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's ``roundf``: ties away from zero."""
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))


def _mul32(a: Any, b: Any) -> np.ndarray:
    """A float32 product (one rounding, as a SIMD ``mul_ps``)."""
    return np.multiply(a, b, dtype=np.float32)


def round_x86(y: np.ndarray) -> np.ndarray:
    """MegEngine's SIMD rounding on x86 (``QConverter::convert``): ``trunc(y + copysign(0.5, y))``
    with the addition in float32 (``y >= 0`` picks +0.5, so -0.0 and NaN take the signs the
    ``_mm_cmpge_ps`` mask gives them)."""
    y = np.asarray(y, np.float32)
    half = np.where(y >= 0, np.float32(0.5), np.float32(-0.5))
    with np.errstate(invalid="ignore"):
        return np.trunc(np.add(y, half, dtype=np.float32))


def saturate(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Rounded values plus the zero point, clamped to ``dtype``'s range, stored as ``dtype``."""
    q = qtype(dtype)
    assert q is not None
    lo, hi = q.qrange
    with np.errstate(invalid="ignore"):
        v = np.nan_to_num(np.asarray(v, np.float64) + q.zero_point_value, nan=0.0)
    return np.clip(v, lo, hi).astype(q.storage).view(dtype)


def scaled_to(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A float32 value already divided by the result's scale, rounded and saturated to ``dtype``."""
    return saturate(round_x86(y), dtype)


def inverse_scale(dtype: np.dtype) -> np.float32:
    """``1.0f / s`` of a quantized dtype, as MegEngine's kernels compute it once per op."""
    q = qtype(dtype)
    assert q is not None
    return np.float32(1.0) / np.float32(q.scale_value)


def quantize(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float → quantized ``dtype``: ``clamp(round_x86(x * (1.0f / s)) + zp)`` in float32."""
    return scaled_to(np.multiply(np.asarray(x, np.float32), inverse_scale(dtype), dtype=np.float32), dtype)


def dequantize(a: np.ndarray) -> np.ndarray:
    """Quantized → float32 ``(q - zp) * s``; plain arrays are converted to float32."""
    q = qtype(a.dtype)
    if q is None:
        return np.asarray(a, np.float32) if a.dtype.kind != "f" else a.astype(np.float32, copy=False)
    centered = a.astype(np.int64) - q.zero_point_value
    return (centered.astype(np.float32) * np.float32(q.scale_value)).astype(np.float32)


def integers(a: np.ndarray) -> np.ndarray:
    """Stored values minus the zero point, as int64."""
    q = qtype(a.dtype)
    return a.astype(np.int64) - (q.zero_point_value if q is not None else 0)


def _saturate_int32(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -(2**31), 2**31 - 1).astype(np.int32)


def from_accumulator(acc: np.ndarray, acc_scale: float, spec: ResultSpec) -> np.ndarray:
    """An int32 accumulator of scale ``acc_scale`` as a value of the result dtype (MegEngine's
    QuantizedS32 → QuantizedS8 TypeCvt: one float32 multiplication by ``s_acc / s_dst``)."""
    out_q = qtype(spec.dtype)
    if out_q is not None:
        if out_q.kind.data == "qint32" and np.float32(out_q.scale_value) == np.float32(acc_scale):
            return _saturate_int32(acc).view(spec.dtype)
        ratio = np.float32(np.float32(acc_scale) / np.float32(out_q.scale_value))
        return scaled_to(_mul32(_saturate_int32(acc).astype(np.float32), ratio), spec.dtype)
    if spec.dtype.kind == "f":
        return (acc.astype(np.float32) * np.float32(acc_scale)).astype(spec.dtype)
    return _saturate_int32(acc).astype(spec.dtype)


def _to_acc_scale(a: np.ndarray, acc_scale: float) -> np.ndarray:
    """A bias or z operand in the accumulator's integer domain."""
    q = qtype(a.dtype)
    if q is not None and np.float32(q.scale_value) == np.float32(acc_scale):
        return integers(a)
    return round_half_away(dequantize(a).astype(np.float64) / acc_scale).astype(np.int64)


def _acc_scale(x: np.ndarray, w: np.ndarray, what: str) -> float:
    return _need(x, f"{what}: the input").scale_value * _need(w, f"{what}: the filter").scale_value


# ----------------------------------------------------------------------------------------------
# Convolution, matrix multiplication


def hswish_x86(x: np.ndarray) -> np.ndarray:
    """MegEngine's SIMD ``HSwishOp`` on float32: ``x * clamp(x + 3, 0, 6) * (1.0f / 6)``."""
    x = np.asarray(x, np.float32)
    relu6 = np.maximum(np.minimum(np.add(x, np.float32(3), dtype=np.float32), np.float32(6)), np.float32(0))
    return _mul32(_mul32(x, relu6), np.float32(1.0) / np.float32(6))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return K.NONLINEARITY[enums.NonlineMode.SIGMOID](x).astype(np.float32)


# the float32 nonlinearities of MegEngine's quantized kernels
QUANTIZED_NONLINEARITY: dict[Any, Any] = {
    enums.NonlineMode.RELU: _relu,
    enums.NonlineMode.H_SWISH: hswish_x86,
    enums.NonlineMode.SIGMOID: _sigmoid,
}


def _conv_acc(x: np.ndarray, w: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    # float64 holds every int8 x int8 sum exactly (|acc| < 2**53) and runs on BLAS
    acc = K.conv2d_nchw(integers(x), integers(w), **K._conv_kwargs(p), acc_dtype=np.dtype(np.float64))
    return acc.astype(np.int64)


@K.quantized_kernel(T.ConvolutionOp)
def convolution(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, w = args
    acc = _conv_acc(x, w, p)
    return [from_accumulator(acc, _acc_scale(x, w, "mgb.convolution"), results[0])]


@K.quantized_kernel(T.ConvBiasOp)
def conv_bias(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, w, *rest = args
    scale = _acc_scale(x, w, "mgb.conv_bias")
    acc = _conv_acc(x, w, p)
    bias = rest[0] if rest else None
    for z in rest[1:]:  # z joins the accumulator (MegEngine's x86 kernels have no z: naive path)
        acc = acc + _to_acc_scale(z, scale)
    mode = p["nonline_mode"]
    out_q = qtype(results[0].dtype)
    if out_q is not None and out_q.kind.data != "qint32":
        return [_post_process(acc, scale, bias, mode, results[0])]
    if bias is not None:
        acc = acc + _to_acc_scale(bias, scale)
    if mode == enums.NonlineMode.IDENTITY:
        return [from_accumulator(acc, scale, results[0])]
    if mode == enums.NonlineMode.RELU:
        return [from_accumulator(np.maximum(acc, 0), scale, results[0])]
    y = QUANTIZED_NONLINEARITY[mode](acc.astype(np.float32) * np.float32(scale))
    return [_from_float(y, results[0])]


def _post_process(
    acc: np.ndarray, acc_scale: float, bias: np.ndarray | None, mode: Any, spec: ResultSpec
) -> np.ndarray:
    """MegEngine's x86 conv-bias ``PostProcess`` to an 8-bit result: the accumulator and the bias
    are each scaled to float32 and added (``AddOp`` / ``FuseAddReluOp`` / ``FuseAddHSwishOp`` of
    ``BinaryQuantizationOp<qint32, qint8>``), then multiplied by ``1.0f / s_dst`` and rounded."""
    if bias is None and mode == enums.NonlineMode.IDENTITY:
        return from_accumulator(acc, acc_scale, spec)  # the TypeCvt QuantizedS32 -> QuantizedS8
    y = np.multiply(_saturate_int32(acc).astype(np.float32), np.float32(acc_scale), dtype=np.float32)
    if bias is not None:
        y = np.add(y, dequantize(bias), dtype=np.float32)
    if mode != enums.NonlineMode.IDENTITY:
        y = QUANTIZED_NONLINEARITY[mode](y)
    return scaled_to(np.broadcast_to(_mul32(y, inverse_scale(spec.dtype)), spec.shape), spec.dtype)


@K.quantized_kernel(T.MatrixMulOp)
@K.quantized_kernel(T.BatchedMatrixMulOp)
def matmul(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    a, b = args
    scale = _acc_scale(a, b, "mgb.matrix_mul")
    ia, ib = integers(a), integers(b)
    if p.get("transpose_a"):
        ia = np.swapaxes(ia, -1, -2)
    if p.get("transpose_b"):
        ib = np.swapaxes(ib, -1, -2)
    acc = np.matmul(ia.astype(np.float64), ib.astype(np.float64)).astype(np.int64)  # exact, see _conv_acc
    return [from_accumulator(acc, scale, results[0])]


# ----------------------------------------------------------------------------------------------
# Elementwise and type conversion


def _from_float(y: np.ndarray, spec: ResultSpec) -> np.ndarray:
    y = np.broadcast_to(np.asarray(y), spec.shape)
    if qtype(spec.dtype) is not None:
        return quantize(y, spec.dtype)
    return y.astype(spec.dtype)


def elemwise_float(fn: Any, args: Sequence[np.ndarray], spec: ResultSpec) -> np.ndarray:
    """Dequantize the inputs, apply the float operation, quantize to the result dtype."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        y = np.asarray(fn(*[dequantize(a) for a in args]))
    return _from_float(y, spec)


def _fuse_add_hswish(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return hswish_x86(np.add(a, b, dtype=np.float32))


# float operations whose MegEngine SIMD form rounds differently from kernels.ELEMWISE's
QUANTIZED_ELEMWISE: dict[Any, Any] = {
    enums.ElemwiseMode.H_SWISH: hswish_x86,
    enums.ElemwiseMode.FUSE_ADD_H_SWISH: _fuse_add_hswish,
}


def float_op(mode: Any) -> Any:
    """The float32 operation a quantized elementwise ``mode`` applies between scalings."""
    return QUANTIZED_ELEMWISE.get(mode) or K.ELEMWISE.get(mode)


@K.quantized_kernel(T.ElemwiseOp)
def elemwise(args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, mode: Any) -> list[np.ndarray]:
    fn = float_op(mode)
    if fn is None:
        raise NotImplementedError(f"mgb.elemwise: mode {mode.name} has no reference kernel")
    return [elemwise_float(fn, args, results[0])]


@K.quantized_kernel(T.TypeCvtOp)
def typecvt(args: Sequence[np.ndarray], results: Sequence[ResultSpec]) -> list[np.ndarray]:
    (x,), (spec,) = args, results
    q_in, q_out = qtype(x.dtype), qtype(spec.dtype)
    if q_in is not None and q_out is not None:  # x86 TypeCvtOp: one multiplication by s_src / s_dst
        ratio = np.float32(np.float32(q_in.scale_value) / np.float32(q_out.scale_value))
        return [scaled_to(np.multiply(integers(x).astype(np.float32), ratio, dtype=np.float32), spec.dtype)]
    if q_out is not None:
        return [quantize(dequantize(x), spec.dtype)]
    return [dequantize(x).astype(spec.dtype)]


# ----------------------------------------------------------------------------------------------
# Pooling


def _requantize_like(y: np.ndarray, src: np.ndarray, spec: ResultSpec) -> np.ndarray:
    """Integers ``y`` (zero point removed) in ``src``'s dtype, as a value of the result dtype."""
    q_in, q_out = qtype(src.dtype), qtype(spec.dtype)
    assert q_in is not None
    if q_out is not None and (q_out.scale_value, q_out.zero_point_value) == (
        q_in.scale_value,
        q_in.zero_point_value,
    ):
        lo, hi = q_out.qrange
        return np.clip(y + q_out.zero_point_value, lo, hi).astype(q_out.storage).view(spec.dtype)
    return _from_float(y.astype(np.float32) * np.float32(q_in.scale_value), spec)


def _pool(
    x: np.ndarray,
    spec: ResultSpec,
    mode: Any,
    window: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
) -> np.ndarray:
    ix = integers(x)
    if mode == enums.PoolingMode.MAX:
        y = K.pool2d_nchw(ix, mode=mode, window=window, stride=stride, padding=padding)
        return _requantize_like(y, x, spec)
    fh, fw = window
    win = K._windows(K._pad_nchw(ix, padding[0], padding[1]), fh, fw, stride, (1, 1))
    total = win.sum(axis=(4, 5))
    if mode == enums.PoolingMode.AVERAGE:
        count = np.full_like(total, fh * fw)
    else:
        ones = K._pad_nchw(np.ones((1, 1, *x.shape[2:]), np.int64), padding[0], padding[1])
        count = np.broadcast_to(K._windows(ones, fh, fw, stride, (1, 1)).sum(axis=(4, 5)), total.shape)
    # round(total / count), ties away from zero, in exact integer arithmetic
    y = np.sign(total) * ((2 * np.abs(total) + count) // (2 * count))
    return _requantize_like(y, x, spec)


@K.quantized_kernel(T.PoolingOp)
def pooling(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    return [_pool(args[0], results[0], p["mode"], p["window"], p["stride"], p["padding"])]


@K.quantized_kernel(T.AdaptivePoolingOp)
def adaptive_pooling(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x = args[0]
    window, stride = K.adaptive_pool_params(x.shape[2:], p["out_shape"])
    return [_pool(x, results[0], p["mode"], window, stride, (0, 0))]


# ----------------------------------------------------------------------------------------------
# ElemwiseMultiType


E = enums.ElemwiseMode
# QXXX -> the float elementwise mode it applies between dequantization and quantization
Q_MODES: dict[Any, Any] = {
    m: E[m.name[1:]] for m in QM if m.name.startswith("Q") and m.name[1:] in E.__members__
}
_BOOL_MODES = {QM.EQ: E.EQ, QM.NEQ: E.NEQ, QM.LT: E.LT, QM.LEQ: E.LEQ, QM.ISNAN: E.ISNAN, QM.ISINF: E.ISINF}


def _fma3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return a * b + c


def _saturate(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(round_half_away(x), info.min, info.max).astype(dtype)


@kernel(T.ElemwiseMultiTypeOp)
def elemwise_multi_type(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, mode: Any
) -> list[np.ndarray]:
    spec = results[0]
    if mode in Q_MODES:
        return [elemwise_float(float_op(Q_MODES[mode]), args, spec)]
    if mode in _BOOL_MODES:
        with np.errstate(invalid="ignore"):
            y = K.ELEMWISE[_BOOL_MODES[mode]](*args)
        return [np.broadcast_to(y, spec.shape).astype(spec.dtype)]
    if mode == QM.FUSE_MUL_ADD3_INT16x32x32x32:
        a, b, c = (x.astype(np.int64) for x in args)
        return [_saturate_int32(np.broadcast_to(a * b + c, spec.shape))]
    if mode in (QM.FUSE_MUL_ADD3_INT16xF32xF32xF32, QM.FUSE_MUL_ADD3_UINT8xF32xF32xF32):
        a, b, c = args
        return [np.broadcast_to(_fma3(a.astype(np.float32), b, c), spec.shape).astype(np.float32)]
    if mode == QM.MUL_INT16xF32xF32:
        a, b = args
        return [np.broadcast_to(a.astype(np.float32) * b, spec.shape).astype(np.float32)]
    if mode == QM.FUSE_MUL_ADD3_IXxF32xF32xI8:
        a, b, c = args
        y = _fma3(a.astype(np.float32), b.astype(np.float32), c.astype(np.float32))
        return [np.broadcast_to(_saturate(y, np.dtype(np.int8)), spec.shape)]
    raise NotImplementedError(f"mgb.elemwise_multi_type: mode {mode.name} has no reference kernel")


def conform(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` viewed with exactly ``dtype`` (its quantization metadata included)."""
    if array.dtype.metadata == dtype.metadata:
        return array
    if array.dtype.itemsize != dtype.itemsize or array.dtype.kind != dtype.kind:
        return array.astype(dtype)
    return array.view(dtype)
