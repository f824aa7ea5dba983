"""MegEngine's ``megengine.core._config``: process-wide defaults that model code reads or sets.

MegEngine's model zoo toggles ``_config.__compute_mode`` around float32-sensitive layers. xmge
computes in float32 throughout, so these settings are recorded (and readable back) but change no
numerics; ``_override`` restores them on exit like MegEngine's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Module-level names with MegEngine's spelling (double-underscore names are plain module globals).
__compute_mode = "default"
__conv_format = "default"
__bn_format = "dim_1c11"
_benchmark_kernel = False
_deterministic_kernel = False
_async_level = 2
_auto_format_convert = False

_SETTINGS = ("compute_mode", "conv_format", "bn_format", "benchmark_kernel", "deterministic_kernel")


def _global_name(key: str) -> str:
    return f"__{key}" if key in ("compute_mode", "conv_format", "bn_format") else f"_{key}"


def _get(key: str) -> Any:
    if key not in _SETTINGS:
        raise KeyError(f"unknown config {key!r}; expected one of {list(_SETTINGS)}")
    return globals()[_global_name(key)]


def _set(key: str, value: Any) -> None:
    if key not in _SETTINGS:
        raise KeyError(f"unknown config {key!r}; expected one of {list(_SETTINGS)}")
    globals()[_global_name(key)] = value


@contextmanager
def _override(**settings: Any) -> Iterator[None]:
    """Temporarily set configs, e.g. ``with _override(compute_mode="float32"): ...``."""
    previous = {k: _get(k) for k in settings}
    for k, v in settings.items():
        _set(k, v)
    try:
        yield
    finally:
        for k, v in previous.items():
            _set(k, v)


def _get_actual_op_param(op_param: Any, config_param: Any) -> Any:
    """An op's own parameter unless it is ``"default"``, then the global config's."""
    return op_param if op_param != "default" else config_param


def set_auto_format_convert(option: bool) -> bool:
    """MegEngine's switch for converting NHWC-tagged tensors (``amp.convert_tensor_format``) back
    to NCHW results automatically; xmge's tagged tensors keep NCHW values, so results are the same
    either way. Returns the previous setting."""
    global _auto_format_convert
    prev, _auto_format_convert = _auto_format_convert, bool(option)
    return prev


def get_auto_format_convert() -> bool:
    return _auto_format_convert
