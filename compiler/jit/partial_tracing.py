"""MegEngine's ``jit.partial_trace``: trace one function (typically a module's ``forward``) on its
first call and, on later calls, run the recorded ops without running its Python body again
(MegEngine's ``without_host`` mode), inside or outside a ``GradManager``.

The recording is the sequence of ops the body applied, with each operand named by where it came
from: an input of the call, the result of an earlier op, or a tensor from outside (a parameter, a
buffer, a constant made in the body). Replay applies the same ops to this call's inputs through
``compiler.core.apply``, so a ``GradManager`` around the call records them and differentiates the
traced function as it would the eager one (xmge's backward is its autodiff tape, so the backward
needs no graph of its own). Tensors from outside are read when the call runs: a parameter updated by
an optimizer is seen with its new value; a tensor the body made and dropped is the value it had
when traced. One recording is kept per input signature (tensor shapes and dtypes, and the other
arguments).

As in MegEngine's ``without_host`` mode, what the body computes on the host is fixed at the first
call: Python control flow, values read with ``.numpy()``/``.item()``, random numbers drawn with
numpy, and in-place updates of module state (a training-mode batch norm's running statistics)
happen on the first call only.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.core import AppliedOp, apply, pop_recorder, push_recorder
from compiler.jit.tracing import TraceError, _flatten_outputs, trace
from compiler.tensor import Tensor

__all__ = ["partial_trace"]

_BACKENDS = ("default",)
_TRACE_OPTIONS = frozenset(inspect.signature(trace.__init__).parameters) - {
    "self",
    "function",
    "without_host",
}


class _Tape:
    """Records the ops applied while the traced body runs (a ``compiler.core`` recorder)."""

    def __init__(self) -> None:
        self.ops: list[AppliedOp] = []

    def record(self, applied: AppliedOp) -> None:
        self.ops.append(applied)


# an operand's origin: ("arg", i) | ("op", k, j) | ("ext", index into the externals)
_Slot = tuple[Any, ...]


class _External:
    """A tensor from outside the traced inputs: the object itself while it lives (its current value
    is read at each call), else the value it had when traced."""

    def __init__(self, t: Tensor) -> None:
        self.ref = weakref.ref(t)
        self.snapshot = np.array(t._data, copy=True)
        self.fallback: Tensor | None = None

    def get(self) -> Tensor:
        t = self.ref()
        if t is not None:
            return t
        if self.fallback is None:
            self.fallback = Tensor._from_array(self.snapshot)
        return self.fallback


class _Recording:
    def __init__(
        self, tape: _Tape, inputs: Sequence[Tensor], outputs: Sequence[Tensor], rebuild: Any
    ) -> None:
        slots: dict[int, _Slot] = {id(t): ("arg", i) for i, t in enumerate(inputs)}
        self.externals: list[_External] = []
        self.steps: list[tuple[AppliedOp, list[_Slot]]] = []

        def slot_of(t: Tensor) -> _Slot:
            found = slots.get(id(t))
            if found is None:
                found = ("ext", len(self.externals))
                self.externals.append(_External(t))
                slots[id(t)] = found
            return found

        for k, op in enumerate(tape.ops):
            operands = [slot_of(t) for t in op.inputs]
            # the op keeps only what replay needs: its class, parameters and result types
            self.steps.append(
                (AppliedOp(op.op_cls, (), (), dict(op.params), list(op.result_types)), operands)
            )
            for j, t in enumerate(op.outputs):
                slots[id(t)] = ("op", k, j)
        self.outputs = [slot_of(t) for t in outputs]
        self.rebuild = rebuild

    def replay(self, inputs: Sequence[Tensor]) -> Any:
        results: list[list[Tensor]] = []

        def value(slot: _Slot) -> Tensor:
            if slot[0] == "arg":
                return inputs[slot[1]]
            if slot[0] == "op":
                return results[slot[1]][slot[2]]
            return self.externals[slot[1]].get()

        for op, operands in self.steps:
            label = op.op_cls.__name__
            results.append(
                apply(
                    op.op_cls,
                    [value(s) for s in operands],
                    label=label,
                    result_types=op.result_types,
                    **op.params,
                )
            )
        return self.rebuild([value(s) for s in self.outputs])


def _flatten_tensors(value: Any, out: list[Tensor]) -> Any:
    """A hashable description of ``value``'s structure, with its tensors appended to ``out``."""
    if isinstance(value, Tensor):
        out.append(value)
        return ("T", tuple(value.shape), str(value.dtype))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_flatten_tensors(v, out) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _flatten_tensors(value[k], out)) for k in sorted(value, key=repr)))
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return ("v", type(value).__name__, value)
    return ("id", id(value))  # other objects (a module as ``self``): by identity, as trace's kwargs


def partial_trace(
    func: Callable[..., Any] | None = None,
    *,
    backend: str = "default",
    without_host: bool = True,
    trace_gmcallback: bool = True,
    **trace_options: Any,
) -> Any:
    """Decorate ``func`` (a function or a method such as a module's ``forward``) so that its ops
    are recorded on the first call and replayed on later calls; gradients flow through it under a
    ``GradManager`` as through the eager function. ``backend`` must be "default" (xmge has no XLA)
    and ``without_host`` True, as in MegEngine; ``trace_gmcallback`` and the ``jit.trace`` options
    are accepted (GradManager callbacks run on the gradients in any case)."""
    if backend not in _BACKENDS:
        raise TraceError(f"partial_trace: backend {backend!r} is not available; xmge has {list(_BACKENDS)}")
    if not without_host:
        raise TraceError("partial_trace only support without_host mode currently!")
    unknown = sorted(set(trace_options) - _TRACE_OPTIONS)
    if unknown:
        raise TypeError(f"partial_trace: unknown trace option(s) {', '.join(unknown)}")
    del trace_gmcallback

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        recordings: dict[Any, _Recording] = {}
        name = getattr(fn, "__name__", "<fn>")

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            inputs: list[Tensor] = []
            key = _flatten_tensors((args, kwargs), inputs)
            recording = recordings.get(key)
            if recording is not None:
                return recording.replay(inputs)
            tape = _Tape()
            push_recorder(tape)
            try:
                out = fn(*args, **kwargs)
            finally:
                pop_recorder(tape)
            if out is None:
                return out
            flat, rebuild = _flatten_outputs(name, out)
            recordings[key] = _Recording(tape, inputs, flat, rebuild)
            return out

        return wrapped

    return wrap if func is None else wrap(func)
