"""MegEngine's quantized dtypes (``megengine.core.tensor.dtype`` / ``megengine.dtype``).

A quantized dtype is a numpy dtype of the storage type whose metadata holds the parameters, spelled
exactly as MegEngine does::

    >>> qint8(0.05)
    dtype('int8')  # .metadata == {"mgb_dtype": {"name": "QuantizedS8", "scale": 0.05, "zero_point": None}}

so a ``Tensor`` of that dtype stores the integers and ``get_scale(t.dtype)`` reads the scale. The
mapping to the IR's ``!mgb.quant<qint8, 0.05>`` lives in ``dialects.dtypes``.

``convert_to_*`` / ``convert_from_*`` are MegEngine's numpy helpers: they quantize with
``np.round`` (ties to even) like MegEngine's Python helpers; graph ops (``astype``/TypeCvt) use the
reference kernels' rounding (ties away from zero, megdnn's ``roundf``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dialects.dtypes import (
    METADATA_KEY,
    QUANTIZED_CNAME,
    QUANTIZED_RANGE,
    DTypeError,
    quantized_numpy_dtype,
    quantized_type_of,
)

_KIND_BY_CNAME = {v: k for k, v in QUANTIZED_CNAME.items()}


class QuantizedParamError(DTypeError, ValueError):
    """A scale or zero point a quantized dtype cannot take (a ValueError, as MegEngine raises)."""


def qint8(scale: float) -> np.dtype:
    """``QuantizedS8(scale)``: int8 storage, value = q * scale."""
    return quantized_numpy_dtype("qint8", _scale(scale))


def qint32(scale: float) -> np.dtype:
    """``QuantizedS32(scale)``: int32 storage (accumulators, conv biases)."""
    return quantized_numpy_dtype("qint32", _scale(scale))


def quint8(scale: float, zero_point: int) -> np.dtype:
    """``Quantized8Asymm(scale, zero_point)``: uint8 storage, value = (q - zero_point) * scale."""
    return quantized_numpy_dtype("quint8", _scale(scale), _zero_point(zero_point, 0, 255))


def qint4(scale: float) -> np.dtype:
    """``QuantizedS4(scale)``: values in [-8, 7], stored one per byte (int8)."""
    return quantized_numpy_dtype("qint4", _scale(scale))


def quint4(scale: float, zero_point: int) -> np.dtype:
    """``Quantized4Asymm(scale, zero_point)``: values in [0, 15], stored one per byte (uint8)."""
    return quantized_numpy_dtype("quint4", _scale(scale), _zero_point(zero_point, 0, 15))


def qint1(scale: float) -> np.dtype:
    """``QuantizedS1(scale)``: one bit per value (0 or 1), value = q * scale; stored one per byte
    (int8). xmge computes with it in the reference interpreter; a ``.mge`` holding it is refused."""
    return quantized_numpy_dtype("qint1", _scale(scale))


def _scale(scale: float) -> float:
    s = float(scale)
    if not (s > 0 and np.isfinite(s)):
        raise QuantizedParamError(f"a quantized dtype needs a positive finite scale, got {scale!r}")
    return float(np.float32(s))  # the file format stores float32 scales


def _zero_point(zp: int, lo: int, hi: int) -> int:
    if int(zp) != zp or not lo <= int(zp) <= hi:
        raise QuantizedParamError(f"zero point {zp!r} must be an integer in [{lo}, {hi}]")
    return int(zp)


def _as_dtype(dtype: Any) -> np.dtype:
    from compiler.tensor import Tensor

    if isinstance(dtype, Tensor):
        return dtype.dtype
    return np.dtype(dtype)


def is_quantize(dtype: Any) -> bool:
    """Whether ``dtype`` (a numpy dtype or a Tensor) is quantized."""
    d = _as_dtype(dtype)
    return d.metadata is not None and METADATA_KEY in d.metadata


def _params(dtype: Any) -> dict[str, Any]:
    d = _as_dtype(dtype)
    if not is_quantize(d):
        raise DTypeError(f"{d} is not a quantized dtype")
    return d.metadata[METADATA_KEY]  # type: ignore[index]


def get_scale(dtype: Any) -> float:
    """The scale of a quantized dtype."""
    return float(_params(dtype)["scale"])


def get_zero_point(dtype: Any) -> int:
    """The zero point of an asymmetric quantized dtype (0 for symmetric ones)."""
    return int(_params(dtype).get("zero_point") or 0)


def dtype_name(dtype: Any) -> str:
    """MegEngine's C++ name: ``QuantizedS8``, ``Quantized8Asymm``, ... or the numpy name."""
    d = _as_dtype(dtype)
    return str(_params(d)["name"]) if is_quantize(d) else d.name


def _kind(dtype: np.dtype) -> str:
    q = quantized_type_of(dtype)
    if q is None:
        raise DTypeError(f"{dtype} is not a quantized dtype")
    return q.kind.data


def _convert_to(arr: Any, dtype: np.dtype, kind: str) -> np.ndarray:
    d = np.dtype(dtype)
    if _kind(d) != kind:
        raise DTypeError(f"expected a {kind} dtype, got {dtype_name(d)}")
    lo, hi = QUANTIZED_RANGE[kind]
    q = np.round(np.asarray(arr, np.float32) / np.float32(get_scale(d))) + get_zero_point(d)
    return np.clip(q, lo, hi).astype(d.base).view(d)


def _convert_from(arr: Any, kind: str) -> np.ndarray:
    a = np.asarray(arr)
    if _kind(a.dtype) != kind:
        raise DTypeError(f"expected a {kind} array, got {a.dtype}")
    centered = a.astype(np.int64) - get_zero_point(a.dtype)
    return (centered * np.float32(get_scale(a.dtype))).astype(np.float32)


def _converters(kind: str) -> tuple[Callable[[Any, np.dtype], np.ndarray], Callable[[Any], np.ndarray]]:
    """MegEngine's ``convert_to_<kind>(arr, q_dtype)`` and ``convert_from_<kind>(arr)``."""

    def convert_to(arr: Any, q_dtype: np.dtype) -> np.ndarray:
        return _convert_to(arr, q_dtype, kind)

    def convert_from(arr: Any) -> np.ndarray:
        return _convert_from(arr, kind)

    for function, direction in ((convert_to, "to"), (convert_from, "from")):
        function.__name__ = function.__qualname__ = f"convert_{direction}_{kind}"
    return convert_to, convert_from


convert_to_qint8, convert_from_qint8 = _converters("qint8")
convert_to_qint32, convert_from_qint32 = _converters("qint32")
convert_to_quint8, convert_from_quint8 = _converters("quint8")
convert_to_qint4, convert_from_qint4 = _converters("qint4")
convert_to_quint4, convert_from_quint4 = _converters("quint4")
convert_to_qint1, convert_from_qint1 = _converters("qint1")


__all__ = [
    "qint8",
    "qint32",
    "quint8",
    "qint4",
    "quint4",
    "is_quantize",
    "get_scale",
    "get_zero_point",
    "dtype_name",
    "convert_to_qint8",
    "convert_from_qint8",
    "convert_to_qint32",
    "convert_from_qint32",
    "convert_to_quint8",
    "convert_from_quint8",
    "convert_to_qint4",
    "convert_from_qint4",
    "convert_to_quint4",
    "convert_from_quint4",
    "qint1",
    "convert_to_qint1",
    "convert_from_qint1",
]
