# ruff: noqa: F822
"""MegEngine's ``megengine.config``: process-wide execution settings read and set as attributes,
``mge.config.benchmark_kernel = True``.

The values live in :mod:`compiler.core._config` (MegEngine's ``core._config``, which model code also
reads), so both spellings see one setting. xmge's eager kernels are the deterministic reference
kernels and its compiled kernels are chosen at compile time, so these settings are recorded and read
back like MegEngine's but change no numerics.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from compiler.core import _config

# the settings are properties of the module class below, not module globals
__all__ = [
    "_auto_format_convert",
    "_compute_mode",
    "_override",
    "async_level",
    "benchmark_kernel",
    "benchmark_with_subprocess",
    "deterministic_kernel",
    "disable_memory_forwarding",
]

_state: dict[str, Any] = {"benchmark_with_subprocess": False, "disable_memory_forwarding": False}


@contextmanager
def _override(
    benchmark_kernel: bool | None = None,
    deterministic_kernel: bool | None = None,
    async_level: int | None = None,
    compute_mode: str | None = None,
) -> Iterator[None]:
    """Set some configs for the ``with`` block (or a decorated function) and restore them after."""
    mod = sys.modules[__name__]
    wanted = {
        "benchmark_kernel": benchmark_kernel,
        "deterministic_kernel": deterministic_kernel,
        "async_level": async_level,
        "_compute_mode": compute_mode,
    }
    previous = {k: getattr(mod, k) for k, v in wanted.items() if v is not None}
    for k, v in wanted.items():
        if v is not None:
            setattr(mod, k, v)
    try:
        yield
    finally:
        for k, v in previous.items():
            setattr(mod, k, v)


def _get_actual_op_param(function_param: Any, config_param: Any) -> Any:
    return function_param if config_param == "default" else config_param


class _ConfigModule(types.ModuleType):
    """The module's class: its settings are properties, so assignments are checked and shared."""

    @property
    def benchmark_kernel(self) -> bool:
        """Whether to time candidate algorithms and keep the fastest (MegEngine's fast-run)."""
        return bool(_config._get("benchmark_kernel"))

    @benchmark_kernel.setter
    def benchmark_kernel(self, option: bool) -> None:
        _config._set("benchmark_kernel", bool(option))

    @property
    def deterministic_kernel(self) -> bool:
        return bool(_config._get("deterministic_kernel"))

    @deterministic_kernel.setter
    def deterministic_kernel(self, option: bool) -> None:
        _config._set("deterministic_kernel", bool(option))

    @property
    def benchmark_with_subprocess(self) -> bool:
        return bool(_state["benchmark_with_subprocess"])

    @benchmark_with_subprocess.setter
    def benchmark_with_subprocess(self, option: bool) -> None:
        _state["benchmark_with_subprocess"] = bool(option)

    @property
    def async_level(self) -> int:
        """0: errors raise at the op that made them; 1, 2: MegEngine may defer them. xmge runs
        eagerly and synchronously, so every level raises at the op."""
        return int(_config._async_level)

    @async_level.setter
    def async_level(self, level: int) -> None:
        assert 0 <= level <= 2, "async_level should be 0, 1 or 2"
        _config._async_level = int(level)

    @property
    def disable_memory_forwarding(self) -> bool:
        return bool(_state["disable_memory_forwarding"])

    @disable_memory_forwarding.setter
    def disable_memory_forwarding(self, disable: bool) -> None:
        _state["disable_memory_forwarding"] = bool(disable)

    @property
    def _compute_mode(self) -> str:
        return str(_config._get("compute_mode"))

    @_compute_mode.setter
    def _compute_mode(self, mode: str) -> None:
        _config._set("compute_mode", mode)

    @property
    def _bn_format(self) -> str:
        return str(_config._get("bn_format"))

    @_bn_format.setter
    def _bn_format(self, fmt: str) -> None:
        _config._set("bn_format", fmt)

    @property
    def _conv_format(self) -> str:
        return str(_config._get("conv_format"))

    @_conv_format.setter
    def _conv_format(self, fmt: str) -> None:
        _config._set("conv_format", fmt)

    @property
    def _auto_format_convert(self) -> bool:
        return bool(_config._auto_format_convert)

    @_auto_format_convert.setter
    def _auto_format_convert(self, option: bool) -> None:
        _config._auto_format_convert = bool(option)


sys.modules[__name__].__class__ = _ConfigModule
