"""``jit.trace``: record a function's ops into a tensor-dialect module, then replay it.

The first call with a given input signature runs the function eagerly while a :class:`Trace`
recorder builds ``func.func @main``: positional (and keyword) tensor arguments become block
arguments, every other tensor the function touches (module parameters, buffers, constants) is
captured as an ``mgb.const``. Later calls with the same signature run the recorded IR on the
reference interpreter.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint

import compiler.dump as dump_module
from compiler.core import AppliedOp, XmgeError, pop_recorder, push_recorder, tensor_type_of
from compiler.module.module import Module, current_scope, tensor_var_name
from compiler.tensor import Tensor
from dialects import tensor as T
from dialects.dtypes import element_type
from dialects.tensor import to_attr

__all__ = [
    "GraphOptimizationConfig",
    "TraceError",
    "exclude_from_trace",
    "is_tracing",
    "set_symbolic_shape",
    "trace",
]


class TraceError(XmgeError, TypeError, RuntimeError):
    """A function cannot be traced as written (e.g. it returns something that is not a Tensor), or a
    later call ran other operations than the recorded ones. A RuntimeError too, as MegEngine's."""


TRAINING_ONLY_ATTR = "xmge.training_only"
"""On a traced ``func.func``: the training-only computations the trace ran (``dump`` refuses it)."""


INPUT_VAR_NAMES_ATTR = "xmge.input_var_names"
"""On a traced ``func.func``: each input tensor's own name ("" for none)."""


_Ref = tuple[str, Any]  # ("int", n) | ("arg", i) | ("ext", tensor)


@dataclass(frozen=True)
class _Instr:
    op_cls: type[T.MgbOp]
    params: dict[str, Any]
    inputs: list[_Ref]
    n_outputs: int


def _params_key(params: dict[str, Any]) -> dict[str, Any]:
    """Params in a form that compares with ``==`` (attributes; numpy arrays are not)."""
    return {k: to_attr(v) for k, v in params.items()}


def _mismatch(reason: str) -> TraceError:
    return TraceError(f"trace error because {reason}")


class _Checker:
    """A later call of a traced function: the body runs again (as MegEngine runs it, so Python side
    effects happen every call) and each applied op is checked against the recording; the first
    difference raises ``TraceError("trace error because <reason>")`` with MegEngine's reasons."""

    def __init__(self, trace: Trace, inputs: Sequence[Tensor]) -> None:
        self.trace = trace
        self.pos = 0
        self.ids: dict[int, _Ref] = {id(t): ("arg", i) for i, t in enumerate(inputs)}
        self.keepalive: list[Tensor] = list(inputs)

    def ref_of(self, t: Tensor) -> _Ref:
        return self.ids.get(id(t), ("ext", t))

    def rebind(self, t: Tensor, src: Tensor) -> None:
        self.ids[id(t)] = self.ref_of(src)
        self.keepalive.append(t)

    def _check_input(self, want: _Ref, got: _Ref) -> None:
        if got[0] == "ext" and _is_excluded(got[1]):
            return  # computed outside the trace (exclude_from_trace, random samples): stands in for any value
        if want[0] == "int" and got[0] != "int":
            raise _mismatch("expect internal node, got external")
        if want[0] != "int" and got[0] == "int":
            raise _mismatch("expect external node, got internal")
        if want[0] == "ext" and got[0] == "ext":
            a, b = want[1], got[1]
            if _is_excluded(a) or _is_excluded(b):
                return  # computed in exclude_from_trace: a value that may change from call to call
            if a is not b and not (a.dtype == b.dtype and np.array_equal(a._data, b._data)):
                raise _mismatch("tensors not equals")
        elif want != got:
            raise _mismatch("input id mismatch")

    def record(self, applied: AppliedOp) -> None:
        instrs = self.trace.instrs
        if self.pos >= len(instrs):
            raise _mismatch("too many instructions")
        want = instrs[self.pos]
        if want.op_cls is not applied.op_cls or want.params != _params_key(applied.params):
            raise _mismatch("operator mismatch")
        if len(want.inputs) != len(applied.inputs):
            raise _mismatch("operator mismatch")
        for w, t in zip(want.inputs, applied.inputs, strict=True):
            self._check_input(w, self.ref_of(t))
        first = sum(i.n_outputs for i in instrs[: self.pos])
        for k, t in enumerate(applied.outputs):
            self.ids[id(t)] = ("int", first + k)
            self.keepalive.append(t)
        self.pos += 1

    def finish(self, outputs: Sequence[Tensor]) -> None:
        if self.pos < len(self.trace.instrs):
            raise _mismatch("mismature end")
        want = self.trace.output_refs
        if len(want) != len(outputs):
            raise _mismatch("mismature end")
        for w, t in zip(want, outputs, strict=True):
            got = self.ref_of(t)
            if w[0] == "int" and got[0] == "int" and w != got:
                raise _mismatch("data unreadable")
            self._check_input(w, got)


class Trace:
    """A recorder that turns applied ops into ``mgb`` ops in one block."""

    def __init__(self, inputs: Sequence[Tensor], input_names: Sequence[str], param_names: dict[int, str]):
        self.block = Block(arg_types=[tensor_type_of(t) for t in inputs])
        self.builder = Builder(InsertPoint.at_end(self.block))
        self.values: dict[int, SSAValue] = {}
        self.keepalive: list[Tensor] = []
        self.param_names = param_names
        self.input_names = list(input_names)
        self.inputs = list(inputs)
        # each op's first result tensor: a name the user gives it (x.name = ...) names its var
        self.first_results: list[tuple[Tensor, Operation]] = []
        for t, arg, name in zip(inputs, self.block.args, input_names, strict=True):
            self._bind(t, arg)
            arg.name_hint = _name_hint(name)
        self.training_only: list[str] = []  # "what (scope)" of each training-only computation
        self.n_args = len(inputs)
        # what later calls are checked against (see _Checker): per applied op its kind, params and
        # where each input came from; produced values are numbered in order
        self.instrs: list[_Instr] = []
        self.internal: dict[int, int] = {}  # id(SSA value) -> produced-value number
        self.output_refs: list[_Ref] = []

    def note_training_only(self, what: str) -> None:
        scope = current_scope()
        self.training_only.append(f"{what} in {scope}" if scope else what)

    def _bind(self, t: Tensor, value: SSAValue) -> None:
        self.values[id(t)] = value
        self.keepalive.append(t)

    def value_of(self, t: Tensor) -> SSAValue:
        v = self.values.get(id(t))
        if v is None:
            const = T.ConstOp.from_numpy(t._data, element_type(t.dtype))
            name = tensor_var_name(t) or self.param_names.get(id(t))
            if name:
                const.attributes["name"] = StringAttr(name)
                const.output.name_hint = _name_hint(name)
            self.builder.insert(const)
            v = const.output
            self._bind(t, v)
        return v

    def ref_of(self, t: Tensor) -> _Ref:
        """Where ``t`` comes from: a produced value, an argument, or an external tensor."""
        v = self.values.get(id(t))
        if v is not None and id(v) in self.internal:
            return ("int", self.internal[id(v)])
        if v is not None and isinstance(v, BlockArgument):
            return ("arg", v.index)
        return ("ext", t)

    def record(self, applied: AppliedOp) -> None:
        refs = [self.ref_of(t) for t in applied.inputs]
        self.keepalive.extend(r[1] for r in refs if r[0] == "ext")
        operands = [self.value_of(t) for t in applied.inputs]
        op = applied.op_cls.make(operands, list(applied.result_types), **applied.params)
        scope = current_scope()
        if scope:
            op.attributes["scope"] = StringAttr(scope)
        self.builder.insert(op)
        if applied.outputs:
            self.first_results.append((applied.outputs[0], op))
        for t, r in zip(applied.outputs, op.results, strict=True):
            self._bind(t, r)
            self.internal[id(r)] = len(self.internal)
        self.instrs.append(_Instr(applied.op_cls, _params_key(applied.params), refs, len(applied.outputs)))

    def finish(self, outputs: Sequence[Tensor], output_names: Sequence[str] | None = None) -> ModuleOp:
        self.output_refs = [self.ref_of(t) for t in outputs]
        results = [self.value_of(t) for t in outputs]
        for t, op in self.first_results:
            if t.name and self.values.get(id(t)) is op.results[0]:
                op.attributes["name"] = StringAttr(tensor_var_name(t))
        self.builder.insert(func.ReturnOp(*results))
        fn = func.FuncOp(
            "main", ([a.type for a in self.block.args], [r.type for r in results]), Region(self.block)
        )
        fn.attributes["input_names"] = ArrayAttr([StringAttr(n) for n in self.input_names])
        # the inputs' own names (Tensor(..., name="data")), which dump prefers to arg_N
        fn.attributes[INPUT_VAR_NAMES_ATTR] = ArrayAttr([StringAttr(t.name or "") for t in self.inputs])
        if output_names is not None:
            fn.attributes["output_names"] = ArrayAttr([StringAttr(n) for n in output_names])
        if self.training_only:
            fn.attributes[TRAINING_ONLY_ATTR] = ArrayAttr([StringAttr(w) for w in self.training_only])
        module = ModuleOp([fn])
        module.verify()
        return module


def _name_hint(name: str) -> str | None:
    cleaned = "".join(c if c.isalnum() or c in "_.$-" else "_" for c in name)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "v" + cleaned
    return cleaned


def _collect_param_names(objs: Sequence[Any]) -> dict[int, str]:
    names: dict[int, str] = {}
    for obj in objs:
        if isinstance(obj, Module):
            for name, t in obj.named_tensors():
                names.setdefault(id(t), name)
    return names


def _closure_modules(fn: Callable[..., Any]) -> list[Module]:
    found: list[Module] = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, Module):
            found.append(v)
    globals_ = getattr(fn, "__globals__", {})
    for name in getattr(getattr(fn, "__code__", None), "co_names", ()):
        v = globals_.get(name)
        if isinstance(v, Module):
            found.append(v)
    self_obj = getattr(fn, "__self__", None)
    if isinstance(self_obj, Module):
        found.append(self_obj)
    return found


def _flatten_outputs(fn_name: str, out: Any) -> tuple[list[Tensor], Callable[[list[Any]], Any]]:
    """The tensors a traced function returned (nested in tuples, lists and dicts, in order) and a
    function rebuilding the same structure from new tensors; other values (None, numbers, strings)
    are returned as they were, as MegEngine's trace does."""
    if isinstance(out, np.ndarray):
        raise TraceError(f"traced function {fn_name} returned a numpy array; return compiler.Tensor values")
    leaves: list[Tensor] = []

    def spec(v: Any) -> Any:
        if isinstance(v, Tensor):
            leaves.append(v)
            return _LEAF
        if type(v) in (tuple, list):
            return (type(v), [spec(x) for x in v])
        if type(v) is dict:
            return (dict, [(k, spec(x)) for k, x in v.items()])
        return ("const", v)

    tree = spec(out)

    def build(t: Any, it: Iterator[Any]) -> Any:
        if t is _LEAF:
            return next(it)
        kind, body = t
        if kind == "const":
            return body
        if kind is dict:
            return {k: build(x, it) for k, x in body}
        return kind(build(x, it) for x in body)

    return leaves, lambda xs: build(tree, iter(xs))


_LEAF = object()


def _check_dumpable_outputs(fn_name: str, out: Any) -> None:
    """With ``capture_as_const`` the outputs become the graph's outputs: only tensors (a Tensor,
    a non-empty tuple/list of them, or a dict of them), as MegEngine requires."""
    if isinstance(out, Tensor):
        return
    values = list(out.values()) if isinstance(out, dict) else out if isinstance(out, tuple | list) else None
    if values and all(isinstance(o, Tensor) for o in values):
        return
    what = type(out).__name__
    if values is not None:
        bad = sorted({type(o).__name__ for o in values if not isinstance(o, Tensor)})
        what = f"{what} containing {', '.join(bad) or 'nothing'}"
    raise TraceError(
        f"traced function {fn_name} must return a Tensor or a non-empty tuple/list/dict of Tensors, "
        f"got {what} (only tensors can be outputs with capture_as_const=True)"
    )


class trace:  # noqa: N801 - MegEngine's name
    """MegEngine's ``jit.trace``; usable as ``@trace(symbolic=True, capture_as_const=True)`` or
    ``trace(fn, symbolic=True, capture_as_const=True)``."""

    def __new__(cls, function: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        if function is None:
            return functools.partial(cls, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        function: Callable[..., Any],
        symbolic: bool = False,
        capture_as_const: bool = False,
        record_only: bool = False,
        sublinear_memory_config: Any = None,
        dtr_config: Any = None,
        profiling: bool = False,
        opt_level: int = 2,
        symbolic_shape: bool = True,
        without_host: bool = False,
        imperative: bool = False,
        graph_opt_config: GraphOptimizationConfig | None = None,
    ) -> None:
        if not callable(function):
            raise TypeError(f"trace: expected a function, got {type(function).__name__}")
        self.function = function
        self.symbolic = symbolic
        self.capture_as_const = capture_as_const
        self.record_only = record_only
        self.without_host = without_host
        self.opt_level = opt_level  # >= 1: dumps carry MegEngine's elementwise simplifications
        # while the body runs, x.shape in user code is a Tensor computed in the graph (MegEngine's
        # default), so a dump runs on other input shapes (compiler.core.symbolic_shape)
        self.symbolic_shape = symbolic_shape
        self.profiling = profiling
        self._profile_inputs: list[np.ndarray] | None = None  # the last call's, with profiling
        # both select how MegEngine executes the recorded graph; xmge's results do not depend on them
        self.imperative = imperative
        self.graph_opt_config = graph_opt_config
        self._cache: dict[tuple[Any, ...], tuple[ModuleOp, Callable[[list[Any]], Any], Trace]] = {}
        # per signature: the graph as opt_level >= 1 simplifies it, where that changed it
        self._optimized: dict[tuple[Any, ...], ModuleOp | None] = {}
        self._last: tuple[ModuleOp, Callable[[list[Any]], Any]] | None = None
        self._last_arg_count = 0
        self.__name__ = getattr(function, "__name__", "<fn>")
        self.__doc__ = getattr(function, "__doc__", None)

    def _split_args(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[Tensor], list[str]]:
        tensors, names = [], []
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                tensors.append(a)
                names.append(f"arg_{i}")
            elif isinstance(a, np.ndarray):
                raise TraceError(
                    f"argument {i} of {self.__name__} is a numpy array; pass compiler.Tensor inputs"
                )
        for k in sorted(kwargs):
            if isinstance(kwargs[k], Tensor):
                tensors.append(kwargs[k])
                names.append(k)
        return tensors, names

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.capture_as_const and not all(isinstance(a, Tensor) for a in args):
            raise TraceError("Only support tensor type args when capture_as_const is enabled")
        tensors, names = self._split_args(args, kwargs)
        if self.profiling:
            self._profile_inputs = [t._data for t in tensors]
        key = tuple((t._tuple_shape, str(t.dtype)) for t in tensors) + tuple(
            (k, id(v)) for k, v in sorted(kwargs.items()) if not isinstance(v, Tensor)
        )
        cached = self._cache.get(key)
        if cached is not None and self.without_host:
            # without_host: Python runs on the first call only, later calls run the recorded graph
            module, rebuild, _ = cached
            from semantics import run_module

            outs = run_module(module, [t._data for t in tensors])
            self._last = (module, rebuild)
            return rebuild([Tensor._from_array(o) for o in outs])
        if cached is not None:
            checker = _Checker(cached[2], tensors)
            push_recorder(checker)  # type: ignore[arg-type]
            try:
                out = self._run_body(args, kwargs)
            finally:
                pop_recorder(checker)  # type: ignore[arg-type]
            flat, rebuild = _flatten_outputs(self.__name__, out)
            checker.finish(flat)
            self._last = cached[:2]
            return self._graph_outputs(key, tensors, rebuild, out)
        holders = [*args, *kwargs.values(), *_closure_modules(self.function)]
        recorder = Trace(tensors, names, _collect_param_names(holders))
        push_recorder(recorder)
        try:
            out = self._run_body(args, kwargs)
        finally:
            pop_recorder(recorder)
        if self.capture_as_const and out is not None:
            _check_dumpable_outputs(self.__name__, out)
        self._returned_none = out is None
        flat, rebuild = _flatten_outputs(self.__name__, out)
        module = recorder.finish(flat)
        self._cache[key] = (module, rebuild, recorder)
        self._last = (module, rebuild)
        self._last_arg_count = len(tensors)
        if self.symbolic and self.opt_level >= 1 and flat:
            self._optimized[key] = _simplified(module)
        return self._graph_outputs(key, tensors, rebuild, out)

    def _graph_outputs(
        self, key: tuple[Any, ...], tensors: Sequence[Tensor], rebuild: Callable[[list[Any]], Any], out: Any
    ) -> Any:
        """What a symbolic trace returns: MegEngine computes it with the compiled graph, whose
        ``opt_level >= 1`` simplifications (``elemwise-simplify``: ``y / y`` is 1, ``log(exp(x))``
        is ``x`` even where the eager ops overflow) can change values; where they changed the
        graph its outputs replace the eager ones."""
        optimized = self._optimized.get(key)
        if optimized is None:
            return out
        from semantics import run_module

        return rebuild([Tensor._from_array(o) for o in run_module(optimized, [t._data for t in tensors])])

    def _run_body(self, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """The Python body with this trace's ``symbolic_shape`` setting, restored afterwards."""
        from compiler.core import _trace_option

        previous = _trace_option.set_symbolic_shape(self.symbolic_shape)
        try:
            return self.function(*args, **kwargs)
        finally:
            _trace_option.set_symbolic_shape(previous)

    # -- inspection ---------------------------------------------------------------------------
    def get_profile(self) -> dict[str, Any]:
        """With ``profiling=True``: per operator of the traced graph, its kind and how long its
        kernel ran, MegEngine's profile layout (``{"profiler": {"host": ..., "opr_footprint":
        ...}}``) with xmge's reference kernels timed on the last call's inputs."""
        import time

        from semantics.interpreter import run_function

        if not self.profiling:
            raise TraceError(f"{self.__name__} was traced without profiling=True: there is no profile")
        if self._profile_inputs is None or self._last is None:
            raise TraceError(f"{self.__name__} has not been called yet: there is no profile")
        fn = next(op for op in self._last[0].ops if isinstance(op, func.FuncOp))
        host: dict[str, dict[str, float]] = {}
        footprint: dict[str, dict[str, Any]] = {}
        start = time.perf_counter()

        def observe(op: Any, results: list[np.ndarray], seconds: float) -> None:
            key = str(len(host))
            end = time.perf_counter() - start
            host[key] = {"start": end - seconds, "kern": seconds, "end": end}
            footprint[key] = {
                "type": op.name,
                "name": op.attributes["name"].data if "name" in op.attributes else op.name,
                "out_shapes": [list(r.shape) for r in results],
            }

        run_function(fn, self._profile_inputs, observe)
        return {"profiler": {"host": host, "opr_footprint": footprint}}

    @property
    def module(self) -> ModuleOp:
        """The tensor-dialect module of the most recent trace."""
        if self._last is None:
            raise TraceError(f"{self.__name__} has not been traced yet: call it once with example inputs")
        return self._last[0]

    def ir(self, full_weights: bool = False) -> str:
        """The traced IR as text; weights are elided unless ``full_weights``."""
        from dialects.weights import full_weights as _full

        with _full(full_weights):
            return str(self.module)

    def dump(self, file: Any, **kwargs: Any) -> Any:
        if getattr(self, "_returned_none", False):
            raise ValueError(
                "the traced function without return values cannot be dumped, the traced function should "
                "return List[Tensor] or Dict[str, Tensor]"
            )
        return dump_module.dump(self, file, **kwargs)

    # help(trace.dump) shows MegEngine's parameters: the signature and text of the one definition
    dump.__doc__ = dump_module.dump.__doc__
    dump.__signature__ = inspect.signature(
        dump_module.dump
    ).replace(  # type: ignore[attr-defined]
        parameters=[
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            *list(inspect.signature(dump_module.dump).parameters.values())[1:],
        ]
    )


def _simplified(module: ModuleOp) -> ModuleOp | None:
    """A copy of ``module`` with MegEngine's opt_level >= 1 elementwise simplifications, or None
    where none applies."""
    from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker

    from passes.inference import ElemwiseSimplifyPass

    copy = module.clone()
    walker = PatternRewriteWalker(GreedyRewritePatternApplier(list(ElemwiseSimplifyPass().patterns())))
    return copy if walker.rewrite_module(copy) else None


def rebind_traced(t: Tensor, src: Tensor) -> None:
    """From now on the traces see ``t`` as ``src`` (an in-place update recorded as a new value)."""
    from compiler.core import active_recorders

    for rec in active_recorders():
        if isinstance(rec, Trace):
            rec._bind(t, rec.value_of(src))
        elif isinstance(rec, _Checker):
            rec.rebind(t, src)


def set_symbolic_shape(option: bool) -> bool:
    """Whether ``Tensor.shape`` in user code is an int32 Tensor computed in the graph (True) or a
    tuple (MegEngine's ``core._trace_option``; ``trace(symbolic_shape=...)`` sets it while a traced
    body runs). Returns the previous setting."""
    from compiler.core import _trace_option

    return _trace_option.set_symbolic_shape(option)


# by id, not a WeakSet: a WeakSet compares members with ==, which is an elementwise op on tensors
_excluded: dict[int, weakref.ref[Tensor]] = {}


def mark_varying(t: Tensor) -> Tensor:
    """Tell traces that ``t``'s value changes from call to call by design (a random sample), so
    a later call that reads a different value is not a mismatch."""
    key = id(t)
    _excluded[key] = weakref.ref(t, lambda _, key=key: _excluded.pop(key, None))
    return t


def _is_excluded(t: Tensor) -> bool:
    r = _excluded.get(id(t))
    return r is not None and r() is t


class _ExcludedMarker:
    """Marks what is computed inside ``exclude_from_trace`` (see ``_Checker._check_input``)."""

    def record(self, applied: AppliedOp) -> None:
        for t in applied.outputs:
            mark_varying(t)


@contextlib.contextmanager
def exclude_from_trace() -> Iterator[None]:
    """Inside a traced function: run this block eagerly on every call without recording it; its
    results enter the trace as values that may change between calls (MegEngine's
    ``exclude_from_trace``). Outside a trace it does nothing."""
    from compiler.core import active_recorders

    hidden = [r for r in active_recorders() if isinstance(r, Trace | _Checker)]
    if not hidden:
        yield
        return
    for r in hidden:
        pop_recorder(r)  # type: ignore[arg-type]
    marker = _ExcludedMarker()
    push_recorder(marker)
    try:
        yield
    finally:
        pop_recorder(marker)
        for r in hidden:
            push_recorder(r)  # type: ignore[arg-type]


class GraphOptimizationConfig:
    """MegEngine's JIT fusion switches for a traced graph (``None``: decided by ``opt_level``).
    xmge's kernels are chosen by its own passes, so the switches are recorded on the trace only."""

    def __init__(self) -> None:
        self.jit_fuse_dimshuffle: bool | None = None
        self.jit_fuse_reduce: bool | None = None

    def __repr__(self) -> str:
        word = {None: "UNSET", False: "OFF", True: "ON"}
        return (
            f"GraphOptimizationConfig {{ jit_fuse_dimshuffle = {word[self.jit_fuse_dimshuffle]}, "
            f"jit_fuse_reduce = {word[self.jit_fuse_reduce]} }}"
        )


def is_tracing() -> bool:
    from compiler.core import active_recorders

    return any(isinstance(r, Trace | _Checker) for r in active_recorders())
