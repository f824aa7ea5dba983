"""The one budget every loader runs under (pickle, ``.tm``, ``.mge``, ONNX).

A file's numbers must never make xmge allocate or compute without bound. Each limit has a default
and an environment variable that overrides it; a refusal is a :class:`LimitExceeded` whose message
names the limit, its variable, the file and the place in the file (opcode offset, expr, operator,
node). It lives in the lowest layer so that ``compiler/`` and ``backends/`` share it.

Usage::

    from dialects import limits
    limits.check_tensor_bytes(n, file=path, place="operator #3 (Pad)")
    budget = limits.Budget(file=path)          # running totals for one load
    budget.add_total(n, place=...)            # all tensors together
    budget.add_folded(n, place=...)           # values evaluated while loading
    budget.check_time(place=...)              # constant-folding wall time
    limits.check_loop_iterations(k, file=path, place=...)
    limits.check_depth(d, file=path, place=...)
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from dialects.errors import XmgeError

MAX_TENSOR_BYTES_ENV = "XMGE_MAX_TENSOR_BYTES"
DEFAULT_MAX_TENSOR_BYTES = 4 << 30
"""One tensor (a weight, a folded constant, an intermediate the reference builds): 4 GiB."""
MAX_TOTAL_BYTES_ENV = "XMGE_MAX_TOTAL_BYTES"
DEFAULT_MAX_TOTAL_BYTES = 16 << 30
"""All tensors one load creates, together: 16 GiB."""
MAX_FOLDED_BYTES_ENV = "XMGE_MAX_FOLDED_BYTES"
DEFAULT_MAX_FOLDED_BYTES = 256 << 20
"""Values evaluated while loading (constant folding, shape arithmetic), together: 256 MiB."""
MAX_LOOP_ITERATIONS_ENV = "XMGE_MAX_LOOP_ITERATIONS"
DEFAULT_MAX_LOOP_ITERATIONS = 100_000
"""A loop evaluated while loading (ONNX ``Loop``/``Scan``) runs at most this many iterations."""
MAX_DEPTH_ENV = "XMGE_MAX_DEPTH"
DEFAULT_MAX_DEPTH = 200
"""Nesting depth of a loaded structure (pickle containers, ``.tm`` graphs, subgraphs)."""
MAX_FOLD_SECONDS_ENV = "XMGE_MAX_FOLD_SECONDS"
DEFAULT_MAX_FOLD_SECONDS = 60.0
"""Wall time of evaluating constants while loading one model."""

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FOLDED_BYTES",
    "DEFAULT_MAX_FOLD_SECONDS",
    "DEFAULT_MAX_LOOP_ITERATIONS",
    "DEFAULT_MAX_TENSOR_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "MAX_DEPTH_ENV",
    "MAX_FOLDED_BYTES_ENV",
    "MAX_FOLD_SECONDS_ENV",
    "MAX_LOOP_ITERATIONS_ENV",
    "MAX_TENSOR_BYTES_ENV",
    "MAX_TOTAL_BYTES_ENV",
    "Budget",
    "LimitError",
    "LimitExceeded",
    "check_depth",
    "check_loop_iterations",
    "check_tensor_bytes",
    "max_depth",
    "max_fold_seconds",
    "max_folded_bytes",
    "max_loop_iterations",
    "max_tensor_bytes",
    "max_total_bytes",
    "nbytes_of",
]


class LimitError(XmgeError, ValueError):
    """A bad value in one of the limit environment variables."""


class LimitExceeded(XmgeError, MemoryError):
    """A file asked for more than one of the limits allows. Loaders may re-raise it as their own
    error class (``raise MyError(str(e)) from e``); the message is complete on its own."""

    def __init__(self, message: str, *, limit: str, file: str | None, place: str | None) -> None:
        super().__init__(message)
        self.limit = limit
        self.file = file
        self.place = place


def _number(env: str, default: float) -> float:
    raw = os.environ.get(env)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise LimitError(f"{env}={raw!r} is not a number") from None
    if not value > 0:
        raise LimitError(f"{env}={raw!r} must be positive")
    return value


def max_tensor_bytes() -> int:
    return int(_number(MAX_TENSOR_BYTES_ENV, DEFAULT_MAX_TENSOR_BYTES))


def max_total_bytes() -> int:
    return int(_number(MAX_TOTAL_BYTES_ENV, DEFAULT_MAX_TOTAL_BYTES))


def max_folded_bytes() -> int:
    return int(_number(MAX_FOLDED_BYTES_ENV, DEFAULT_MAX_FOLDED_BYTES))


def max_loop_iterations() -> int:
    return int(_number(MAX_LOOP_ITERATIONS_ENV, DEFAULT_MAX_LOOP_ITERATIONS))


def max_depth() -> int:
    return int(_number(MAX_DEPTH_ENV, DEFAULT_MAX_DEPTH))


def max_fold_seconds() -> float:
    return _number(MAX_FOLD_SECONDS_ENV, DEFAULT_MAX_FOLD_SECONDS)


def nbytes_of(shape: Iterable[int], itemsize: int) -> int:
    """Bytes of a tensor of ``shape``; a negative dimension counts as 0 (the caller reports it)."""
    return math.prod(max(int(d), 0) for d in shape) * int(itemsize)


def _fmt(value: float) -> str:
    return f"{value:.3g}" if isinstance(value, float) and not value.is_integer() else str(int(value))


def _refuse(what: str, amount: float, cap: float, env: str, file: str | None, place: str | None,
            unit: str) -> LimitExceeded:
    where = ""
    if file:
        where += f"{file}: "
    if place:
        where += f"{place}: "
    return LimitExceeded(
        f"{where}{what} needs {_fmt(amount)} {unit}, more than the limit of {_fmt(cap)} ({env})",
        limit=env, file=file, place=place,
    )


def check_tensor_bytes(nbytes: int, *, file: str | None = None, place: str | None = None,
                       what: str = "a tensor") -> None:
    """Refuse one tensor of ``nbytes`` before it is allocated."""
    cap = max_tensor_bytes()
    if nbytes > cap:
        raise _refuse(what, nbytes, cap, MAX_TENSOR_BYTES_ENV, file, place, "bytes")


def check_loop_iterations(count: int, *, file: str | None = None, place: str | None = None) -> None:
    cap = max_loop_iterations()
    if count > cap:
        raise _refuse("a loop", count, cap, MAX_LOOP_ITERATIONS_ENV, file, place, "iterations")


def check_depth(depth: int, *, file: str | None = None, place: str | None = None) -> None:
    cap = max_depth()
    if depth > cap:
        raise _refuse("nesting", depth, cap, MAX_DEPTH_ENV, file, place, "levels")


@dataclass
class Budget:
    """Running totals of one load (one file). Not thread-safe: use one per load."""

    file: str | None = None
    total_bytes: int = 0
    folded_bytes: int = 0
    started: float = field(default_factory=time.monotonic)

    def add_tensor(self, nbytes: int, *, place: str | None = None, what: str = "a tensor") -> None:
        """One new tensor: checked against the per-tensor and the total cap."""
        check_tensor_bytes(nbytes, file=self.file, place=place, what=what)
        self.add_total(nbytes, place=place)

    def add_total(self, nbytes: int, *, place: str | None = None) -> None:
        cap = max_total_bytes()
        if self.total_bytes + nbytes > cap:
            raise _refuse("all tensors together", self.total_bytes + nbytes, cap,
                          MAX_TOTAL_BYTES_ENV, self.file, place, "bytes")
        self.total_bytes += nbytes

    def add_folded(self, nbytes: int, *, place: str | None = None) -> None:
        cap = max_folded_bytes()
        if self.folded_bytes + nbytes > cap:
            raise _refuse("folded constants together", self.folded_bytes + nbytes, cap,
                          MAX_FOLDED_BYTES_ENV, self.file, place, "bytes")
        self.folded_bytes += nbytes

    def seconds_left(self) -> float:
        return max_fold_seconds() - (time.monotonic() - self.started)

    def check_time(self, *, place: str | None = None) -> None:
        elapsed = time.monotonic() - self.started
        cap = max_fold_seconds()
        if elapsed > cap:
            raise _refuse("constant folding", elapsed, cap, MAX_FOLD_SECONDS_ENV, self.file,
                          place, "seconds")
