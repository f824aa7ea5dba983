"""MegEngine's ``core._trace_option``: whether traced graphs use symbolic shapes.

With it on, ``Tensor.shape`` read by user code is an int32 Tensor computed in the graph
(``compiler.core.symbolic_shape``); ``jit.trace`` turns it on while a traced body runs unless
``symbolic_shape=False``."""

from __future__ import annotations

import os

_use_symbolic_shape = bool(os.environ.get("MEGENGINE_USE_SYMBOLIC_SHAPE"))


def use_symbolic_shape() -> bool:
    """The current setting: False unless ``MEGENGINE_USE_SYMBOLIC_SHAPE`` is set (whether
    ``Tensor.shape`` is a tensor)."""
    return _use_symbolic_shape


def set_symbolic_shape(option: bool) -> bool:
    """Set the option; returns the previous one."""
    global _use_symbolic_shape
    prev, _use_symbolic_shape = _use_symbolic_shape, bool(option)
    return prev
