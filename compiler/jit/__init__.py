"""MegEngine's ``megengine.jit``: ``trace`` records a function into IR (see :mod:`.tracing`)."""

from compiler.jit.partial_tracing import partial_trace
from compiler.jit.tracing import (
    TRAINING_ONLY_ATTR,
    GraphOptimizationConfig,
    Trace,
    TraceError,
    exclude_from_trace,
    is_tracing,
    rebind_traced,
    set_symbolic_shape,
    trace,
)

__all__ = [
    "TRAINING_ONLY_ATTR",
    "GraphOptimizationConfig",
    "Trace",
    "TraceError",
    "exclude_from_trace",
    "is_tracing",
    "partial_trace",
    "rebind_traced",
    "set_symbolic_shape",
    "trace",
]
