"""The budget of ONNX import: what evaluating a file's constant subgraphs may cost.

The importer folds every node whose inputs are known (``reader._Importer._fold``), so a hostile or
broken file could ask it for a huge constant (``ConstantOfShape`` of 10^10 elements, an ``Expand``
or a ``MatMul`` of outer products) or an endless computation (a ``Loop`` of 10^12 iterations). Each
limit is checked *before* the work where the output size can be predicted, and after every folded
node otherwise; a refusal is an ``OnnxImportError`` naming the limit, its environment variable,
the file and the node.

The byte limits share the ``.mge`` reader's variables (``backends.mge.read_context``): one budget
for every loader.
"""

from __future__ import annotations

import os

from backends.mge.read_context import (
    DEFAULT_MAX_FOLDED_BYTES,
    DEFAULT_MAX_TENSOR_BYTES,
    MAX_FOLDED_BYTES_ENV,
    MAX_TENSOR_BYTES_ENV,
)
from dialects.errors import XmgeError

MAX_LOOP_ITERATIONS_ENV = "XMGE_MAX_LOOP_ITERATIONS"
DEFAULT_MAX_LOOP_ITERATIONS = 100_000
"""A ``Loop`` (or ``Scan``) evaluated while importing may run at most this many iterations."""
MAX_FOLD_SECONDS_ENV = "XMGE_MAX_FOLD_SECONDS"
DEFAULT_MAX_FOLD_SECONDS = 60.0
"""Evaluating constants while importing one model may take at most this long (wall time, all
nodes together); on the main thread a single node is interrupted when it runs past it."""

__all__ = [
    "MAX_FOLDED_BYTES_ENV",
    "MAX_FOLD_SECONDS_ENV",
    "MAX_LOOP_ITERATIONS_ENV",
    "MAX_TENSOR_BYTES_ENV",
    "LimitError",
    "max_fold_seconds",
    "max_folded_bytes",
    "max_loop_iterations",
    "max_tensor_bytes",
]


class LimitError(XmgeError, ValueError):
    """A bad value in one of the limit variables (the importer reports it as an OnnxImportError)."""


def _number(env: str, default: float) -> float:
    raw = os.environ.get(env)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise LimitError(f"{env}={raw!r} is not a number") from None
    if not value > 0:
        raise LimitError(f"{env}={raw!r} must be positive")
    return value


def max_tensor_bytes() -> int:
    """One tensor (a folded constant, an initializer): ``XMGE_MAX_TENSOR_BYTES``, default 4 GiB."""
    return int(_number(MAX_TENSOR_BYTES_ENV, DEFAULT_MAX_TENSOR_BYTES))


def max_folded_bytes() -> int:
    """All values evaluated while importing, together: ``XMGE_MAX_FOLDED_BYTES``, default 256 MiB."""
    return int(_number(MAX_FOLDED_BYTES_ENV, DEFAULT_MAX_FOLDED_BYTES))


def max_loop_iterations() -> int:
    return int(_number(MAX_LOOP_ITERATIONS_ENV, DEFAULT_MAX_LOOP_ITERATIONS))


def max_fold_seconds() -> float:
    return _number(MAX_FOLD_SECONDS_ENV, DEFAULT_MAX_FOLD_SECONDS)
