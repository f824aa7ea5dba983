"""Graph surgery: the ``InternalGraph.insert_exprs()`` block and ``TracedModule.flatten()``.

Inside ``insert_exprs`` the tracing hooks of ``trace_module`` are installed with a frame that adds
to the existing graph. A TensorNode used as an argument stands for a placeholder tensor (zeros of
its traced shape and dtype) bound to that node, so a functional call, Tensor method or module call
on it is recorded as usual, reading the node; tensors the call returns are handed back as their new
nodes. Module nodes read attributes of their module (``self_node.conv``: a ``getattr`` from
``self``), and calling one records a call; a user module called this way is traced into a new
TracedModule that replaces the attribute when the block ends, as MegEngine does. The new
expressions go into the graph when the block ends without an error (and are dropped otherwise),
after ``expr`` or after the last expression their inputs come from.
"""

from __future__ import annotations

import contextlib
import copy
from types import TracebackType
from typing import Any

import numpy as np

from compiler.module.module import Module
from compiler.tensor import Tensor
from compiler.traced_module import pytree
from compiler.traced_module import traced_module as tm
from compiler.traced_module.expr import Expr, GetAttr, _step
from compiler.traced_module.node import ModuleNode, Node, TensorNode
from compiler.traced_module.policy import TracedModuleError

_session: InsertExprs | None = None


def active_surgery() -> InsertExprs | None:
    """The ``insert_exprs`` block being run, if any."""
    return _session


class InsertExprs(contextlib.AbstractContextManager["InsertExprs"]):
    def __init__(self, graph: tm.InternalGraph, after: Expr | None) -> None:
        self.graph = graph
        self.after = after
        self._new: list[Expr] = []
        self._placeholders: dict[Node, Tensor] = {}
        self._stack = contextlib.ExitStack()

    # -- the block -----------------------------------------------------------------------------------
    def __enter__(self) -> InsertExprs:
        global _session
        if _session is not None or tm._active is not None:
            raise TracedModuleError("insert_exprs cannot be nested, nor used while trace_module runs")
        self_node = self.graph.inputs[0]
        module = getattr(self_node, "owner", None)
        if not isinstance(module, Module):
            raise TracedModuleError(f"insert_exprs: the self node of {self.graph.qualname} has no module")
        tracer = tm._Tracer(self.graph._total_ids, surgery=True)
        tracer.session = self
        self._frame = tm._Frame(self.graph, module, self_node=self_node, exprs=self._new)
        tracer.frames.append(self._frame)
        self._tracer = tracer
        self._stack.enter_context(tm._hooks_installed(tracer))
        self._stack.enter_context(np.errstate(all="ignore"))  # placeholders are zeros: x / x is fine
        _session = self
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        global _session
        _session = None
        self._stack.close()
        self._tracer.frames.clear()
        if exc_type is not None:
            self._discard()
        else:
            self._commit()
        return False

    # -- nodes <-> values ------------------------------------------------------------------------------
    def _check_member(self, node: Node) -> None:
        if node.top_graph is not self.graph:
            where = node.top_graph.qualname if node.top_graph is not None else "no graph"
            raise TracedModuleError(
                f"insert_exprs on {self.graph.qualname}: node {node} belongs to {where}; use the nodes "
                "of the graph being edited"
            )

    def _placeholder(self, node: TensorNode) -> Tensor:
        self._check_member(node)
        value = self._placeholders.get(node)
        if value is None:
            value = Tensor(np.zeros(node.shape, dtype=node.dtype))
            self._placeholders[node] = value
            self._frame.bind(value, node)
        return value

    def to_values(self, tree: Any) -> Any:
        """``tree`` with each TensorNode replaced by its placeholder and each ModuleNode by its
        module."""
        leaves, spec = pytree.flatten(tree, lambda v: isinstance(v, Node))
        values = [
            self._placeholder(n) if isinstance(n, TensorNode) else self._module_of(n)  # type: ignore[arg-type]
            for n in leaves
        ]
        return pytree.unflatten(spec, iter(values))

    def _module_of(self, node: ModuleNode) -> Any:
        self._check_member(node)
        return node.owner

    def to_nodes(self, tree: Any) -> Any:
        """``tree`` with each tensor replaced by the node that stands for it."""
        leaves, spec = pytree.flatten(tree, lambda v: isinstance(v, Tensor))
        return pytree.unflatten(spec, iter(self._frame.node_for(t) for t in leaves))

    def _module_path(self, node: ModuleNode) -> str:
        """The attribute path of ``node``'s module from the graph's ``self``."""
        if node is self.graph.inputs[0]:
            return ""
        expr = node.expr
        if isinstance(expr, GetAttr) and isinstance(expr.inputs[0], ModuleNode):
            base = self._module_path(expr.inputs[0])
            return f"{base}.{expr.name}" if base else expr.name
        raise TracedModuleError(
            f"insert_exprs: module node {node} is not reached from self by attribute reads, so its "
            "attributes cannot be addressed"
        )

    # -- what nodes do inside the block ------------------------------------------------------------------
    def module_attr(self, node: ModuleNode, name: str) -> Any:
        self._check_member(node)
        value = getattr(node.owner, name)
        path = self._module_path(node)
        path = f"{path}.{name}" if path else name
        if isinstance(value, Module):
            return self._frame.module_node(value, path)
        if isinstance(value, Tensor):
            return self._frame.node_for(value, path)
        return value

    def call_module(self, node: ModuleNode, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._check_member(node)
        module = node.owner
        if not isinstance(module, Module):
            raise TracedModuleError(f"insert_exprs: module node {node} has no module to call")
        path = self._module_path(node) if isinstance(node.expr, GetAttr) else None
        values, kwvalues = self.to_values((args, kwargs))
        out = self._tracer.call_module(module, values, kwvalues, node=node, path=path)
        return self.to_nodes(out)

    def call_tensor_method(
        self, node: TensorNode, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        value = self._placeholder(node)
        values, kwvalues = self.to_values((args, kwargs))
        out = getattr(value, method)(*values, **kwvalues)  # the recording Tensor method
        return out if out is NotImplemented else self.to_nodes(out)

    # -- ending the block ------------------------------------------------------------------------------
    def _discard(self) -> None:
        for expr in self._new:
            for node in expr.inputs:
                while expr in node.users:
                    node.users.remove(expr)
            for node in expr.outputs:
                self.graph._used_names.pop(node.name, None)
        self._new.clear()

    def _commit(self) -> None:
        graph, new = self.graph, self._new
        mirrors = tm.mirror_traced(self._tracer)
        owner = graph.inputs[0].owner  # type: ignore[attr-defined]
        for module_id, path in self._tracer.new_paths.items():
            _set_path(owner, path, mirrors[module_id])
        for expr in new:
            for node in expr.outputs:
                if isinstance(node, ModuleNode) and id(node.owner) in mirrors:
                    node.owner = mirrors[id(node.owner)]
        position = {id(e): i for i, e in enumerate(graph._exprs)}
        index = position[id(self.after)] + 1 if self.after is not None else 0
        for expr in new:
            for node in expr.inputs:
                if node.expr is not None and id(node.expr) in position:
                    index = max(index, position[id(node.expr)] + 1)
        graph._exprs[index:index] = new
        graph._claim()
        for module_id in self._tracer.new_paths:
            mirrors[module_id]._update_ref(graph)


def _set_path(root: Module, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    obj: Any = root
    for part in parents:
        obj = _step(obj, part)
    if isinstance(obj, list):
        obj[int(last)] = value
    elif isinstance(obj, dict):
        key = next((k for k in obj if str(k) == last), last)
        obj[key] = value
    else:
        setattr(obj, last, value)


# ---------------------------------------------------------------------------------------------------
# flatten


def flatten(module: tm.TracedModule) -> tm.TracedModule:
    new = copy.deepcopy(module)
    new._update_ref()
    graph = new.graph
    # inlined graphs are copied per call; what they reference (modules, graphs) is shared
    keep: dict[int, Any] = {id(m): m for m in new.modules()}
    keep.update((id(g), g) for g in [graph, *graph._subgraphs()])
    subst: dict[Node, Node] = {}
    graph._exprs[:] = _inline(graph, list(graph._exprs), "", subst, keep, set())
    graph._outputs[:] = [_resolve(subst, n) for n in graph._outputs]
    _rebuild_users(graph)
    graph._claim()
    graph.compile()
    _renumber(graph)
    new._update_ref()
    return new


def _resolve(subst: dict[Node, Node], node: Node) -> Node:
    while node in subst:
        node = subst[node]
    return node


def _inline(
    top: tm.InternalGraph,
    exprs: list[Expr],
    prefix: str,
    subst: dict[Node, Node],
    keep: dict[int, Any],
    call_outputs: set[Node],
) -> list[Expr]:
    out: list[Expr] = []
    for expr in exprs:
        expr.inputs[:] = [_resolve(subst, n) for n in expr.inputs]
        sub = tm._called_graph(expr)
        if sub is not None and getattr(getattr(expr.inputs[0], "owner", None), "is_qat", False):
            sub = None  # a QAT module's graph stays whole, so quantization tools still find it
        if sub is None:
            if prefix:
                for node in expr.outputs:
                    if node not in call_outputs:
                        node._name = top._unique_name(f"{prefix}_{node.name}")
            out.append(expr)
            continue
        inputs, body, outputs = copy.deepcopy((sub._inputs, sub._exprs, sub._outputs), dict(keep))
        subst.update(zip(inputs, expr.inputs, strict=True))  # self -> the called module's node
        made = {id(e) for e in body}
        for inner, outer in zip(outputs, expr.outputs, strict=True):
            producer = inner.expr
            if producer is not None and id(producer) in made:
                producer.outputs[producer.outputs.index(inner)] = outer
                outer.expr = producer
                call_outputs.add(outer)
            else:  # the callee returns one of its inputs
                subst[outer] = _resolve(subst, inner)
        out += _inline(top, body, expr.inputs[0].name, subst, keep, call_outputs)
    return out


def _rebuild_users(graph: tm.InternalGraph) -> None:
    nodes = [*graph._inputs, *(n for e in graph._exprs for n in (*e.inputs, *e.outputs))]
    for node in nodes:
        node.users = []
    for expr in graph._exprs:
        for node in expr.inputs:
            node.users.append(expr)


def _renumber(graph: tm.InternalGraph) -> None:
    exprs = graph.exprs(recursive=False)
    for i, expr in enumerate(exprs):
        expr._id = i
    nodes = graph.nodes(recursive=False)
    for i, node in enumerate(nodes):
        node._id = i
    graph._total_ids = [len(nodes), len(exprs)]
