# ruff: noqa: F822
"""MegEngine's ``megengine.amp``: automatic mixed precision.

Inside :class:`autocast` (or with ``amp.enabled = True``) the ops MegEngine runs in low precision
(convolution, its data gradient, matrix products) take their float inputs converted to
``low_prec_dtype`` and accumulate in float32 (``compute_mode=FLOAT32``); batch normalization reads
its input in low and its statistics in high precision; layer/group normalization and the
transcendental elementwise modes run in ``high_prec_dtype``. Every other op keeps its inputs' dtypes,
so results of mixed dtypes promote as usual. :class:`GradScaler` scales losses so low-precision
gradients do not underflow. The settings are module attributes (``amp.enabled``,
``amp.high_prec_dtype``, ``amp.low_prec_dtype``), shared with ``core.tensor.amp``.
"""

from __future__ import annotations

import sys

from compiler.amp.autocast import autocast
from compiler.amp.convert_format import convert_module_format, convert_tensor_format
from compiler.amp.grad_scaler import GradScaler
from compiler.core.tensor import amp as _state

__all__ = [
    "GradScaler",
    "autocast",
    "convert_module_format",
    "convert_tensor_format",
    "enabled",
    "high_prec_dtype",
    "low_prec_dtype",
]


sys.modules[__name__].__class__ = _state.AmpSettings
