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

__all__ = [
    *_dtype_names,
    "QuantDtypeMeta",
    "_builtin_quant_dtypes",
    "create_quantized_dtype",
    "get_dtype_bit",
    "is_bfloat16",
    "is_differentible_dtype",
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
    """Whether ``dtype`` is one of MegEngine's packed 1/2/4-bit integer types (xmge has none)."""
    return False


def is_bfloat16(dtype: Any) -> bool:
    """Whether ``dtype`` is bfloat16 (xmge tensors have no bfloat16 dtype)."""
    return getattr(dtype, "name", str(dtype)) == "bfloat16"


def is_differentible_dtype(dtype: Any) -> bool:
    """Whether gradients flow through tensors of ``dtype`` (the float types)."""
    return dtype == np.float32 or dtype == np.float16 or is_bfloat16(dtype)


def create_quantized_dtype(dtype_meta: QuantDtypeMeta, scale: float, zp: int | None) -> np.dtype:
    """The numpy dtype of ``dtype_meta`` with ``scale`` (and ``zp`` for unsigned kinds, which need
    one; signed kinds must have none), as MegEngine's quantized tensors carry it."""
    make = getattr(_dtypes, dtype_meta.cname, None)
    if make is None:
        raise ValueError(f"dtype {dtype_meta.name} without a dump name is not supported")
    if not dtype_meta.is_signed:
        if zp is None or int(zp) != zp:
            raise ValueError("zero_point should be an integer")
        if not dtype_meta.qmin <= int(zp) <= dtype_meta.qmax:
            raise ValueError(
                f"zero_point should be within [{dtype_meta.qmin}, {dtype_meta.qmax}] for {dtype_meta.name}"
            )
        return make(scale, int(zp))
    if zp is not None:
        raise ValueError(
            f"'{dtype_meta.name}' only supports symmetric quantization, zero_point should be None, "
            f"but actually got '{zp}'"
        )
    return make(scale)
