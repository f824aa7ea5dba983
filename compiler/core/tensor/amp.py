"""MegEngine's ``megengine.core.tensor.amp``: the process-wide automatic-mixed-precision state
that :func:`compiler.core.apply` consults (see ``compiler.amp``). Not thread-local, as in MegEngine."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np

_enabled = False
_high_prec_dtype = "float32"
_low_prec_dtype = "float16"

__all__ = ["enabled", "high_prec_dtype", "low_prec_dtype"]  # noqa: F822 - properties of AmpSettings


def _dtype_name(dtype: object) -> str:
    name = np.dtype(dtype).name  # type: ignore[call-overload]
    if name not in ("float16", "float32", "bfloat16"):
        raise ValueError(f"amp: {name} is not a floating-point precision autocast can use (float16, float32)")
    return name


def _get_amp_dtype_autocast() -> bool:
    return _enabled


def _set_amp_dtype_autocast(enabled: bool) -> None:
    global _enabled
    _enabled = bool(enabled)


def _get_amp_high_prec_dtype() -> str:
    return _high_prec_dtype


def _set_amp_high_prec_dtype(dtype: object) -> None:
    global _high_prec_dtype
    _high_prec_dtype = _dtype_name(dtype)


def _get_amp_low_prec_dtype() -> str:
    return _low_prec_dtype


def _set_amp_low_prec_dtype(dtype: object) -> None:
    global _low_prec_dtype
    _low_prec_dtype = _dtype_name(dtype)


class AmpSettings(types.ModuleType):
    """The module class of this module and of ``compiler.amp``: ``enabled``, ``high_prec_dtype``
    and ``low_prec_dtype`` are read and set as module attributes, like MegEngine's ``mprop`` ones."""

    @property
    def enabled(self) -> bool:
        return _enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        _set_amp_dtype_autocast(value)

    @property
    def high_prec_dtype(self) -> str:
        return _high_prec_dtype

    @high_prec_dtype.setter
    def high_prec_dtype(self, value: Any) -> None:
        _set_amp_high_prec_dtype(value)

    @property
    def low_prec_dtype(self) -> str:
        return _low_prec_dtype

    @low_prec_dtype.setter
    def low_prec_dtype(self, value: Any) -> None:
        _set_amp_low_prec_dtype(value)


sys.modules[__name__].__class__ = AmpSettings
