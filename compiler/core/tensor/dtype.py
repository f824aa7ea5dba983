"""``megengine.core.tensor.dtype``: the quantized dtypes and their helpers, where MegEngine 1.13 keeps
them (the definitions live in :mod:`compiler.dtype`; this module adds MegEngine's dtype predicates and
``create_quantized_dtype``)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

import compiler.dtype as _dtypes
from compiler.dtype import *  # noqa: F403 - every quantized dtype name, as MegEngine has them here
from compiler.dtype import __all__ as _dtype_names
from compiler.quantization.utils import QuantDtypeMeta, _builtin_quant_dtypes
from dialects.dtypes import METADATA_KEY

try:  # MegEngine's bfloat16 numpy dtype (its C extension); ml_dtypes provides the same one
    from ml_dtypes import bfloat16
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    bfloat16 = None

__all__ = [
    *_dtype_names,
    "bfloat16",
    "QuantDtypeMeta",
    "_builtin_quant_dtypes",
    "create_quantized_dtype",
    "get_dtype_bit",
    "is_bfloat16",
    "is_differentible_dtype",
    "is_dtype_equal",
    "is_lowbit",
]


def get_dtype_bit(dtype_name: str) -> int:
    """The bit width a dtype name spells (``"int8"`` -> 8, ``"quint4"`` -> 4, ``"bool"`` -> 1)."""
    if dtype_name == "bool":
        return 1
    numbers = re.findall(r"\d+", dtype_name)
    assert len(numbers) == 1, "Unsupport dtype name with more than one number."
    return int(numbers[0])


def is_lowbit(dtype: Any) -> bool:
    """Whether ``dtype`` is one of MegEngine's packed 1/2/4-bit integer types (``intb1``/``intb2``/
    ``intb4``: numpy dtypes of MegEngine's C extension, which xmge has no counterpart of)."""
    return False


def is_bfloat16(dtype: Any) -> bool:
    """Whether ``dtype`` is bfloat16 (a tensor can hold bfloat16 values; xmge's ops refuse them)."""
    return getattr(dtype, "name", str(dtype)) == "bfloat16"


def is_differentible_dtype(dtype: Any) -> bool:
    """Whether gradients flow through tensors of ``dtype`` (the float types)."""
    return dtype == np.float32 or dtype == np.float16 or is_bfloat16(dtype)


def _check_zero_point(zp: int, dtype_meta: QuantDtypeMeta) -> None:
    if zp < dtype_meta.qmin or zp > dtype_meta.qmax:
        raise ValueError(
            f"zero_point should be within [{dtype_meta.qmin}, {dtype_meta.qmax}] for {dtype_meta.name}"
        )


def create_quantized_dtype(dtype_meta: QuantDtypeMeta, scale: float, zp: int | None) -> np.dtype:
    """The numpy dtype of ``dtype_meta`` with ``scale`` (and ``zp`` for unsigned kinds, which need
    one; signed kinds must have none), as MegEngine's quantized tensors carry it. A meta whose
    ``cname`` is None (MegEngine's 2-bit kinds, custom QAT metas) has no dtype."""
    if dtype_meta.cname is None:
        raise ValueError(f"dtype {dtype_meta.name} without cname attr is not supported.")
    kind = _dtypes._KIND_BY_CNAME.get(dtype_meta.cname)
    if kind is None:
        raise ValueError(f"dtype {dtype_meta.name}: unknown cname {dtype_meta.cname!r}")
    make = getattr(_dtypes, kind)
    if dtype_meta.is_unsigned:
        if zp is None or int(zp) != zp:
            raise ValueError("zero_point should be an integer")
        _check_zero_point(int(zp), dtype_meta)
        return make(scale, int(zp))
    if zp is not None:
        raise ValueError(
            f"'{dtype_meta.name}' only supports symmetric quantization, zero_point should be None, "
            f"but actually got '{zp}'"
        )
    return make(scale)


def is_dtype_equal(dt0: Any, dt1: Any) -> bool:
    """Whether two dtypes are the same, quantization parameters included (numpy's ``==`` ignores
    the metadata that holds them)."""
    a, b = np.dtype(dt0), np.dtype(dt1)
    if a != b or _dtypes.is_quantize(a) != _dtypes.is_quantize(b):
        return False
    if not _dtypes.is_quantize(a):
        return True
    pa, pb = a.metadata[METADATA_KEY], b.metadata[METADATA_KEY]  # type: ignore[index]
    return bool(
        pa["name"] == pb["name"]
        and np.float32(pa["scale"]) == np.float32(pb["scale"])
        and (pa.get("zero_point") or 0) == (pb.get("zero_point") or 0)
    )


def _meta_checked(dtype: np.dtype, dtype_meta: QuantDtypeMeta, what: str) -> dict[str, Any]:
    if not _dtypes.is_quantize(dtype) or dtype.metadata[METADATA_KEY]["name"] != dtype_meta.cname:  # type: ignore[index]
        raise ValueError(f"{what} should be a {dtype_meta.name} dtype")
    return dtype.metadata[METADATA_KEY]  # type: ignore[index,no-any-return]


def _convert_to_quantized_dtype(arr: np.ndarray, dtype: np.dtype, dtype_meta: QuantDtypeMeta) -> np.ndarray:
    """``arr`` quantized to ``dtype`` (of ``dtype_meta``'s kind) by MegEngine's numpy rule:
    ``round(arr / scale) + zero_point`` (ties to even), clipped to the kind's range."""
    if not isinstance(arr, np.ndarray):
        raise ValueError("arr parameter should be instance of np.ndarray")
    params = _meta_checked(np.dtype(dtype), dtype_meta, "dtype parameter")
    q = np.round(arr / params["scale"])
    if dtype_meta.is_unsigned:
        q = q + params["zero_point"]
    return q.clip(dtype_meta.qmin, dtype_meta.qmax).astype(dtype)


def _convert_from_quantized_dtype(arr: np.ndarray, dtype_meta: QuantDtypeMeta) -> np.ndarray:
    """float32 values of a quantized ``arr`` of ``dtype_meta``'s kind."""
    if not isinstance(arr, np.ndarray):
        raise ValueError("arr parameter should be instance of np.ndarray")
    params = _meta_checked(arr.dtype, dtype_meta, "arr's dtype")
    values = arr.astype(np.float32)
    if dtype_meta.is_unsigned:
        values = values - params["zero_point"]
    return values * params["scale"]
