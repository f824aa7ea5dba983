"""``amp.autocast``: a context manager and decorator that switches mixed precision on."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from compiler.core.tensor import amp as _state


class autocast:  # noqa: N801 - MegEngine's name
    """Run the block (or the decorated function) with automatic mixed precision; the previous
    settings come back on exit. ``enabled=False`` leaves the settings alone."""

    def __init__(
        self, enabled: bool = True, low_prec_dtype: str = "float16", high_prec_dtype: str = "float32"
    ):
        self.enabled = enabled
        self.high_prec_dtype = high_prec_dtype
        self.low_prec_dtype = low_prec_dtype
        self._saved: list[tuple[bool, str, str]] = []  # a stack: the same object may be re-entered

    def __enter__(self) -> autocast:
        if self.enabled:
            self._saved.append((_state._enabled, _state._high_prec_dtype, _state._low_prec_dtype))
            _state._set_amp_high_prec_dtype(self.high_prec_dtype)
            _state._set_amp_low_prec_dtype(self.low_prec_dtype)
            _state._set_amp_dtype_autocast(True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            enabled, high, low = self._saved.pop()
            _state._set_amp_dtype_autocast(enabled)
            _state._set_amp_high_prec_dtype(high)
            _state._set_amp_low_prec_dtype(low)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapper
