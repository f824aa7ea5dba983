"""The parts of MegEngine's ``megengine.core.tensor.megbrain_graph`` that users load, build, run and
dump graphs with; the vars are :class:`compiler.utils.network_node.VarNode` objects.

A :class:`Graph` runs the graph ending at the vars it compiles on xmge's reference interpreter:
:class:`InputNode` vars take the value given with ``set_value`` (or returned by the callback of
:func:`input_callback`) for one execution, and :class:`OutputNode`/:class:`ValueOutputNode`/
:class:`AttrOutputNode` (or the callback of :func:`output_callback`) receive the results. MegEngine
executes asynchronously and waits for inputs; xmge runs an execution as soon as every input has its
value (at ``execute``, or else at the first ``get_value``/``wait``). Not thread-safe."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import IO, Any, NamedTuple

import numpy as np

from compiler.utils.network_node import OpNode, VarNode
from dialects.errors import XmgeError

__all__ = [
    "AttrOutputNode",
    "CompGraphDumpResult",
    "Graph",
    "InputNode",
    "OutputNode",
    "TensorAttr",
    "ValueOutputNode",
    "apply_normal_varnode",
    "input_callback",
    "output_callback",
    "CompGraphLoadResult",
    "OpNode",
    "VarNode",
    "deserialize_infer_option",
    "dump_graph",
    "load_graph",
    "set_priority_to_id",
]


class CompGraphLoadResult(NamedTuple):
    graph: Any
    output_vars_dict: dict[str, VarNode]
    output_vars_list: list[VarNode]
    metadata: Any


def load_graph(fpath: str | os.PathLike[str] | IO[bytes]) -> CompGraphLoadResult:
    """Load the first graph of a ``.mge`` file: its output vars (by name and in order) and its
    metadata record. ``graph`` is the :class:`~compiler.utils.network.Network` holding the vars."""
    from compiler.utils.network import Network

    net = Network.load(fpath)
    outs = list(net.output_vars)
    return CompGraphLoadResult(net, {v.name: v for v in outs if v.name}, outs, net._metadata)


from compiler.dump import DumpResult as CompGraphDumpResult  # noqa: E402 - MegEngine's namedtuple, one definition


def dump_graph(output_vars: Sequence[VarNode] | dict[str, VarNode], **kwargs: Any) -> tuple[bytes, Any]:
    """Serialize the graph ending at ``output_vars`` (a dict names them); returns the bytes and
    the dump information. Keywords are :meth:`Network.dump`'s (no graph optimization unless
    ``optimize_for_inference=True``)."""
    import io

    from compiler.utils.network import Network

    if isinstance(output_vars, dict):
        named = []
        for name, var in output_vars.items():
            var.name = name
            named.append(var)
        output_vars = named
    net = Network()
    net.add_output(*output_vars)
    kwargs.setdefault("optimize_for_inference", False)
    buf = io.BytesIO()
    info = net.dump(buf, **kwargs)
    return buf.getvalue(), info


def set_priority_to_id(dest_vars: Sequence[VarNode]) -> None:
    """Give every operator the graph ending at ``dest_vars`` depends on whose priority is 0 its id
    as priority (MegEngine does this before dumping so the execution order is kept)."""
    from compiler.utils.network import _deps

    for opr in _deps(dest_vars):
        if opr.priority == 0:
            opr.priority = opr.id


def deserialize_infer_option(x: int) -> dict[str, bool]:
    """The ``optimize_for_inference`` keywords encoded in a metadata ``optimize_options`` word
    (only those that are on)."""
    from passes.inference.options import keywords_from_word

    return {k: v for k, v in keywords_from_word(int(x)).items() if v}


# ----------------------------------------------------------------------------------------------
# Building and running graphs


class GraphError(XmgeError, RuntimeError):
    """A graph that cannot run: an input without a value, nothing compiled, a var of another graph."""


class _GraphOptions:
    """``Graph.options``: MegEngine's execution settings. xmge's graphs run synchronously on the
    reference interpreter, so these are recorded for code that sets them and change nothing."""

    def __init__(self) -> None:
        self.async_exec_level = 1
        self.graph_opt_level = 2
        self.seq_opt = None
        self.comp_node_seq_record_level = 0
        self.no_force_inplace = False
        self.force_dynamic_alloc = False


class Graph:
    """A computing graph: ``make_const``/``make_h2d``/``make_input`` make source vars, functional
    calls and :func:`apply_normal_varnode` add operators, ``compile(vars)`` then ``execute()`` (or
    calling the graph) runs it."""

    def __init__(self) -> None:
        self.options = _GraphOptions()
        self._sinks: list[_CallbackNode] | None = None
        self._pending = False

    # -- sources ----------------------------------------------------------------------------------
    def make_const(
        self, data: Any, dtype: Any = None, device: Any = None, name: str | None = None
    ) -> VarNode:
        from compiler.utils.network_node import ImmutableTensor

        arr = np.asarray(data.numpy() if hasattr(data, "numpy") else data, dtype=dtype)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64:
            arr = arr.astype(np.int32)
        var = ImmutableTensor(arr, name=name, device=None if device is None else str(device)).outputs[0]
        var._graph = self
        return var

    def make_h2d(self, *, dtype: Any, device: Any, shape: Sequence[int] | None = None,
                 name: str | None = None) -> VarNode:
        return InputNode(device=device, dtype=dtype, shape=shape, graph=self, name=name).outputs[0]

    def make_input(self, *args: VarNode, device: Any = None, dtype: Any = None,
                   shape: Sequence[int] | None = None) -> VarNode:
        return InputNode(*args, device=device, dtype=dtype, shape=shape, graph=self).outputs[0]

    # -- running ----------------------------------------------------------------------------------
    def compile(self, *args: Any) -> Graph:
        """Prepare to compute ``args`` (vars or lists of vars): the outputs of output nodes, or any
        var (computed for its dependencies' sake, as MegEngine does for a plain var)."""
        sinks: list[_CallbackNode] = []
        for var in _flatten(args):
            owner = getattr(var, "owner", None)
            if isinstance(owner, _CallbackNode):
                sinks.append(owner)
            elif isinstance(var, VarNode):
                sinks.append(_CallbackNode(var, graph=self))  # computed, its value unused
            else:
                raise GraphError(f"Graph.compile: expected graph vars, got {type(var).__name__}")
        self._sinks = sinks
        self._pending = False
        return self

    def execute(self, *args: Any) -> None:
        """Run once; when an input has no value yet, the run waits for it (until ``get_value``)."""
        if self._sinks is None:
            raise GraphError("Graph.execute: compile the graph first")
        self._pending = True
        for sink in self._sinks:
            sink._graph_run = self
        if all(i._ready() for i in _inputs_of(self._sinks)):
            self._run()

    def wait(self) -> None:
        if self._pending:
            self._run()

    def __call__(self, *args: Any) -> None:
        self.execute(*args)
        self.wait()

    def _run(self) -> None:
        from compiler.tensor import Tensor
        from compiler.utils.network import Network
        from semantics.interpreter import run_function

        assert self._sinks is not None
        self._pending = False
        inputs = _inputs_of(self._sinks)
        for node in inputs:
            if not node._ready():
                raise GraphError(f"{node!r}: the input has no value for this execution")
        values = [node._take() for node in inputs]
        for node, value in zip(inputs, values, strict=True):
            node.shape = value.shape  # the vars after it are inferred again for this shape
        targets = [sink.inputs[0] for sink in self._sinks]
        net = Network()
        net.input_vars = [node.outputs[0] for node in inputs]
        net.output_vars = list(targets)
        fn = net._to_func()
        order = [v.owner for v in net.input_vars]
        # _to_func puts the inputs it reaches first; feed them in its order
        by_id = {id(node): value for node, value in zip(inputs, values, strict=True)}
        arrays = [by_id[id(o)] for o in order]
        outs = run_function(fn, arrays)
        for sink, out in zip(self._sinks, outs, strict=True):
            sink._deliver(Tensor(np.asarray(out), dtype=np.asarray(out).dtype))


_SHARED: list[Graph] = []


def shared_graph() -> Graph:
    """The graph of vars made without one (by :class:`~compiler.utils.network.Network` or by
    functional calls on them)."""
    if not _SHARED:
        _SHARED.append(Graph())
    return _SHARED[0]


def _flatten(args: Any) -> list[Any]:
    out: list[Any] = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.extend(_flatten(a))
        else:
            out.append(a)
    return out


def _inputs_of(sinks: Sequence[_CallbackNode]) -> list[InputNode]:
    from compiler.utils.network import _deps

    found = []
    for opr in _deps([s.inputs[0] for s in sinks]):
        if isinstance(opr, Host2DeviceCopy) and not isinstance(opr, InputNode):
            raise GraphError(f"{opr!r}: a graph input without a value (use InputNode or input_callback)")
        if isinstance(opr, InputNode):
            found.append(opr)
    return found


from compiler.utils.network_node import Host2DeviceCopy  # noqa: E402 - the base of InputNode


class InputNode(Host2DeviceCopy):
    """A graph input whose value is given per execution with ``set_value`` (or by ``callback``)."""

    def __init__(self, *args: VarNode, device: Any = None, dtype: Any = None,
                 shape: Sequence[int] | None = None, graph: Graph | None = None,
                 use_static_shape: bool = False, name: str | None = None,
                 callback: Any = None) -> None:
        # without a shape the var gets a one-element placeholder until a value arrives
        super().__init__((1,) if shape is None else tuple(shape), dtype, name,
                         None if device is None else str(device))
        self.outputs[0]._graph = graph
        self._callback = callback
        self._value: Any = None

    def set_value(self, value: Any) -> None:
        from compiler.tensor import Tensor

        self._value = value if isinstance(value, Tensor) else Tensor(value)

    def reset(self) -> None:
        self._value = None

    def _ready(self) -> bool:
        return self._value is not None or self._callback is not None

    def _take(self) -> Any:
        value = self._callback() if self._value is None else self._value
        self._value = None  # one value per execution, as MegEngine's rendezvous
        return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


class _CallbackNode(OpNode):
    """Receives the value of its input var at each execution (MegEngine's output callback)."""

    type = "OutputCallback"

    def __init__(self, var: VarNode, *args: VarNode, graph: Graph | None = None,
                 callback: Any = None) -> None:
        super().__init__()
        if not isinstance(var, VarNode):
            raise GraphError(f"{type(self).__name__}: expected a graph var, got {type(var).__name__}")
        self.inputs = [var, *args]
        dummy = VarNode._make(np.zeros((), np.float32), self, None)
        dummy._graph = graph if graph is not None else var.graph
        self.outputs = [dummy]
        self._callback = callback
        self._value: Any = None
        self._graph_run: Graph | None = None

    @property
    def graph(self) -> Graph:
        return self.outputs[0].graph

    def _deliver(self, value: Any) -> None:
        self._value = value
        if self._callback is not None:
            self._callback(value)

    def get_value(self) -> Any:
        if self._graph_run is not None and self._graph_run._pending:
            self._graph_run._run()
        if self._value is None:
            raise GraphError(f"{type(self).__name__}: no value; compile and execute the graph first")
        return self._value

    def drop_value(self) -> None:
        self._value = None

    def reset(self) -> None:
        self._value = None


class OutputNode(_CallbackNode):
    """Holds its var's value (a Tensor) after each execution."""


class ValueOutputNode(_CallbackNode):
    """Holds its var's value as a numpy array after each execution."""

    def get_value(self) -> Any:
        return super().get_value().numpy()


class TensorAttr:
    """The shape, dtype and device of a var's value."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, device: Any) -> None:
        self.shape = shape
        self.dtype = dtype
        self.device = device


class AttrOutputNode(_CallbackNode):
    """Holds its var's shape, dtype and device after each execution."""

    def get_value(self) -> TensorAttr:
        value = super().get_value()
        return TensorAttr(tuple(value.shape), value.dtype, value.device)


def apply_normal_varnode(op: Any, *args: VarNode) -> list[VarNode]:
    """Apply a :mod:`compiler.core.ops.builtin` OpDef to graph vars; returns its output vars."""
    from compiler.core._imperative_rt.core2 import apply

    outs = apply(op, *args)
    graph = next((a._graph for a in args if getattr(a, "_graph", None) is not None), None)
    for o in outs:
        if graph is not None:
            o._graph = graph
    return outs


def input_callback(callback: Any, *args: VarNode, device: Any = None, dtype: Any = None,
                   shape: Sequence[int] | None = None, graph: Graph | None = None) -> tuple[VarNode, VarNode]:
    """An input var whose value ``callback()`` returns at each execution; returns it and a dummy var
    (MegEngine's pair)."""
    node = InputNode(*args, device=device, dtype=dtype, shape=shape, graph=graph, callback=callback)
    return node.outputs[0], node.outputs[0]


def output_callback(callback: Any, var: VarNode, *args: VarNode) -> VarNode:
    """A dummy var that, once compiled and executed, calls ``callback(value)`` with ``var``'s value."""
    return _CallbackNode(var, *args, callback=callback).outputs[0]
