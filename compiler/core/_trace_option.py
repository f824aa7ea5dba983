"""MegEngine's ``core._trace_option``: whether traced graphs use symbolic shapes.

xmge's traces record static shapes (each new input shape is traced again), so the setting is
remembered and reported, and changes no result."""

from __future__ import annotations

import os

_use_symbolic_shape = bool(os.environ.get("MEGENGINE_USE_SYMBOLIC_SHAPE"))


def use_symbolic_shape() -> bool:
    """The current setting: False unless ``MEGENGINE_USE_SYMBOLIC_SHAPE`` is set (MegEngine: whether
    ``Tensor.shape`` is a tensor; xmge's shapes are always tuples)."""
    return _use_symbolic_shape


def set_symbolic_shape(option: bool) -> bool:
    """Set the option; returns the previous one."""
    global _use_symbolic_shape
    prev, _use_symbolic_shape = _use_symbolic_shape, bool(option)
    return prev
