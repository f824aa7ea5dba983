"""Sizing a replayed expression before it runs: a ``.tm`` file's constants (a shape argument, a
padding width, a layer's channel count) must not make replay allocate beyond the shared budget
(:mod:`dialects.limits`). Only the calls whose output size follows from their arguments are sized;
everything else is bounded by the tensors already checked. One call of a TracedModule (its top graph
and every graph it calls) sums its sized results under ``XMGE_MAX_TOTAL_BYTES`` (:func:`call_budget`):
many calls each under the per-tensor cap cannot add up to more than the total."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

from dialects import limits

_SHAPE_FUNCTIONS = {"zeros", "ones", "full", "broadcast_to", "empty"}
_REFERENCE_ITEMSIZE = 8  # the functional ops build float64 numpy arrays before casting
_CALL: contextvars.ContextVar[limits.Budget | None] = contextvars.ContextVar("tm_call_budget", default=None)


_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("tm_depth", default=0)


@contextlib.contextmanager
def nested(place: str, file: str | None = None) -> Iterator[None]:
    """One more level of graphs inside graphs (replaying, or rebuilding a file's nested
    TracedModules), refused past ``XMGE_MAX_DEPTH``."""
    depth = _DEPTH.get() + 1
    limits.check_depth(depth, file=file, place=place)
    token = _DEPTH.set(depth)
    try:
        yield
    finally:
        _DEPTH.reset(token)


@contextlib.contextmanager
def call_budget(name: str) -> Iterator[limits.Budget]:
    """The budget of one replay: a fresh one for an outermost call, the caller's for nested graphs."""
    current = _CALL.get()
    if current is not None:
        yield current
        return
    fresh = limits.Budget(file=name)
    token = _CALL.set(fresh)
    try:
        yield fresh
    finally:
        _CALL.reset(token)


def _shape_of(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
        return shape
    return None


def _as_shape(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        return tuple(value)
    shape = _shape_of(value)
    if shape is not None and len(shape) == 1 and shape[0] <= 8:
        try:
            return tuple(int(v) for v in value.numpy())
        except (AttributeError, TypeError, ValueError):
            return None
    return None


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    items = tuple(int(v) for v in value)
    return (items[0], items[-1]) if items else (0, 0)


def _conv_bytes(inp: Any, out_channels: int, kernel: tuple[int, int], stride: Any, padding: Any,
                dilation: Any) -> int:
    shape = _shape_of(inp)
    if shape is None or len(shape) != 4:
        return 0
    n, c, h, w = shape
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    oh = (h + 2 * ph - dh * (kernel[0] - 1) - 1) // max(sh, 1) + 1
    ow = (w + 2 * pw - dw * (kernel[1] - 1) - 1) // max(sw, 1) + 1
    out = limits.nbytes_of((n, out_channels, oh, ow), _REFERENCE_ITEMSIZE)
    padded = limits.nbytes_of((n, c, h + 2 * ph, w + 2 * pw), _REFERENCE_ITEMSIZE)
    return max(out, padded)


def estimate(name: str, bound: dict[str, Any], owner: Any = None) -> int:
    """Bytes the largest array of the call ``name(**bound)`` needs (0 when unknown)."""
    if name in _SHAPE_FUNCTIONS:
        shape = _as_shape(bound.get("shape"))
        return limits.nbytes_of(shape, _REFERENCE_ITEMSIZE) if shape is not None else 0
    if name == "pad":
        shape = _shape_of(bound.get("src"))
        widths = bound.get("pad_width")
        try:
            pairs = [_pair(w) for w in widths]
        except (TypeError, ValueError):
            return 0
        if shape is None or len(pairs) != len(shape):
            return 0
        padded = [d + a + b for d, (a, b) in zip(shape, pairs, strict=True)]
        return limits.nbytes_of(padded, _REFERENCE_ITEMSIZE)
    if name == "conv2d":
        wshape = _shape_of(bound.get("weight"))
        if wshape is None or len(wshape) not in (4, 5):
            return 0
        oc = wshape[0] * wshape[1] if len(wshape) == 5 else wshape[0]
        return _conv_bytes(bound.get("inp"), oc, (wshape[-2], wshape[-1]), bound.get("stride", 1),
                           bound.get("padding", 0), bound.get("dilation", 1))
    if name == "Conv2d" and owner is not None:
        try:
            oc = int(owner.out_channels)
            kernel = _pair(owner.kernel_size)
        except (AttributeError, TypeError, ValueError):
            return 0
        return _conv_bytes(bound.get("inp"), oc, kernel, owner.stride, owner.padding, owner.dilation)
    return 0


def check(name: str, bound: dict[str, Any], place: str, owner: Any = None) -> None:
    """Refuse (LimitExceeded naming ``place``) a call whose output would exceed the tensor budget."""
    try:
        nbytes = estimate(name, bound, owner)
    except (TypeError, ValueError, OverflowError):
        return  # the call itself reports malformed arguments
    if not nbytes:
        return
    current = _CALL.get()
    if current is None:
        limits.check_tensor_bytes(nbytes, place=place, what=f"{name}'s result")
    else:
        current.add_tensor(nbytes, place=place, what=f"{name}'s result")


__all__ = ["call_budget", "check", "estimate", "nested"]
