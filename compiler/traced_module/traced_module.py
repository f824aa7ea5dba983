"""``InternalGraph``, ``TracedModule`` and ``trace_module``: MegEngine's TracedModule for xmge.

``trace_module(net, *inputs)`` runs ``net`` once and records its forward at the module/function
level, not the op level that ``jit.trace`` records:

* built-in layers (``compiler.module.layers`` classes other than ``Sequential``) stay calls:
  ``%4: conv1_out = conv1(x, )``;
* every other module that is an attribute of the traced one (user-defined modules, ``Sequential``)
  is traced into a nested ``TracedModule`` with its own graph, as MegEngine does, so the result has
  the same attribute tree, parameter names and ``state_dict`` as the original (and shares its
  tensors); a user module that is no attribute (made inside ``forward``) is inlined;
* ``compiler.functional`` calls become ``CallFunction`` with every argument bound (defaults
  included, as MegEngine prints them), Tensor operators and methods ``CallMethod`` on the tensor,
  module tensors ``GetAttr`` and other tensors ``Constant``; an op reached any other way is kept
  as ``Apply``.

Hooks are installed only while ``trace_module`` runs, by wrapping ``Module.__call__``, the public
functions of ``compiler.functional`` and the Tensor methods in ``policy.TENSOR_METHODS``; each
wrapper records its call and runs the original with recording suppressed, so what happens inside
a recorded call is not recorded again. Python values (shapes, flags) are baked in as constants.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from compiler.core import pop_recorder, push_recorder
from compiler.module.module import Module
from compiler.tensor import Tensor
from compiler.traced_module import policy, pytree
from compiler.traced_module.expr import Apply, CallFunction, CallMethod, Constant, Expr, GetAttr, Input
from compiler.traced_module.node import ModuleNode, Node, TensorNode
from compiler.traced_module.policy import TracedModuleError


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor)


class ExprFilter(list):  # type: ignore[type-arg]
    """A list of expressions with MegEngine's filter helpers."""

    def as_list(self) -> list[Expr]:
        return list(self)

    def as_unique(self) -> Expr:
        if len(self) != 1:
            raise TracedModuleError(f"expected exactly one expression, found {len(self)}")
        return self[0]

    def call_function(self, func: Callable[..., Any]) -> ExprFilter:
        func = getattr(func, "__wrapped__", func)
        key = (func.__module__, func.__qualname__)
        return ExprFilter(e for e in self if isinstance(e, CallFunction) and tuple(e.func) == key)

    def call_method(self, method: str = "__call__") -> ExprFilter:
        return ExprFilter(e for e in self if isinstance(e, CallMethod) and e.method == method)

    def get_attr(self) -> ExprFilter:
        return ExprFilter(e for e in self if isinstance(e, GetAttr))


class NodeFilter(list):  # type: ignore[type-arg]
    def as_list(self) -> list[Node]:
        return list(self)

    def as_unique(self) -> Node:
        if len(self) != 1:
            raise TracedModuleError(f"expected exactly one node, found {len(self)}")
        return self[0]

    def type(self, kind: type) -> NodeFilter:  # noqa: A003 - MegEngine's name
        return NodeFilter(n for n in self if isinstance(n, kind))


class InternalGraph:
    """The expressions of one traced ``forward``: inputs (``self`` first), exprs, outputs."""

    def __init__(self, name: str, qualname: str) -> None:
        self._name = name
        self._qualname = qualname
        self._exprs: list[Expr] = []
        self._inputs: list[Node] = []
        self._outputs: list[Node] = []
        self._in_spec: pytree.Spec = ("tuple", ("tuple",), ("dict", ()))
        self._out_spec: pytree.Spec = ("tuple",)
        self._used_names: dict[str, int] = {}
        self._total_ids = [0, 0]  # next expression id, next node id (MegEngine's _total_ids)

    # -- building ----------------------------------------------------------------------------------
    def _next_expr_id(self) -> int:
        self._total_ids[0] += 1
        return self._total_ids[0] - 1

    def _next_node_id(self) -> int:
        self._total_ids[1] += 1
        return self._total_ids[1] - 1

    def _unique_name(self, base: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base) or "node"
        if base[0].isdigit():
            base = "_" + base
        if base not in self._used_names:
            self._used_names[base] = 0
            return base
        while True:
            self._used_names[base] += 1
            name = f"{base}_{self._used_names[base]}"
            if name not in self._used_names:
                self._used_names[name] = 0
                return name

    def _tensor_node(self, expr: Expr, base: str, value: Tensor) -> TensorNode:
        name = self._unique_name(base)
        node = TensorNode(
            expr, name, f"{self._qualname}.[{name}]", self._next_node_id(), value.shape, value.dtype
        )
        expr.outputs.append(node)
        return node

    def _module_node(self, expr: Expr, base: str, module: Any, qualname: str) -> ModuleNode:
        cls = type(module)
        module_type = f"{cls.__module__}.{cls.__qualname__}"
        if isinstance(module, TracedModule):  # re-traced: keep the class it was first traced from
            module_type = module.graph._inputs[0].module_type  # type: ignore[attr-defined]
        node = ModuleNode(
            expr,
            self._unique_name(base),
            qualname,
            self._next_node_id(),
            module_type,
            module,
        )
        expr.outputs.append(node)
        return node

    # -- inspection ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def qualname(self) -> str:
        return self._qualname

    @property
    def inputs(self) -> list[Node]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[Node]:
        return list(self._outputs)

    def exprs(self, recursive: bool = True) -> ExprFilter:
        """Expressions in order (Input expressions excluded, as in MegEngine); with ``recursive``,
        each call of a nested TracedModule is followed by that module's expressions."""
        return ExprFilter(e for e, _ in self._walk(recursive))

    def nodes(self, recursive: bool = True) -> NodeFilter:
        out: list[Node] = []
        graphs = [self] + ([g for g in self._subgraphs()] if recursive else [])
        for g in graphs:
            out += g._inputs
            for e in g._exprs:
                out += e.outputs
        return NodeFilter(dict.fromkeys(out))

    def _walk(self, recursive: bool) -> Iterator[tuple[Expr, InternalGraph]]:
        for e in self._exprs:
            yield e, self
            sub = _called_graph(e) if recursive else None
            if sub is not None:
                yield from sub._walk(True)

    def _subgraphs(self) -> list[InternalGraph]:
        found: dict[int, InternalGraph] = {}
        for _, g in self._walk(True):
            if g is not self:
                found.setdefault(id(g), g)
        return list(found.values())

    def __repr__(self) -> str:
        lines = [f"{self._qualname}.Graph ({', '.join(n.name for n in self._inputs)}) {{"]
        lines += [f"\t{e!r}" for e in self._exprs]
        lines.append("\treturn " + ", ".join(n.name for n in self._outputs))
        return "\n".join(lines) + "\n}"

    # -- replay ----------------------------------------------------------------------------------------
    def interpret(self, module: Module, *args: Any, **kwargs: Any) -> Any:
        leaves, spec = pytree.flatten((args, kwargs), _is_tensor)
        if not pytree.same_spec(spec, self._in_spec):
            raise TracedModuleError(
                f"{self._qualname} was traced with arguments "
                f"{pytree.format_spec(self._in_spec, iter(n.name for n in self._inputs[1:]))}, got "
                f"{pytree.format_spec(spec, iter('<Tensor>' for _ in leaves))}"
            )
        env: dict[Node, Any] = {self._inputs[0]: module}
        env.update(zip(self._inputs[1:], leaves, strict=True))
        for expr in self._exprs:
            values = expr.interpret(*[env[n] for n in expr.inputs])
            if len(values) != len(expr.outputs):
                raise TracedModuleError(
                    f"{expr!r} produced {len(values)} values, expected {len(expr.outputs)}"
                )
            env.update(zip(expr.outputs, values, strict=True))
        return pytree.unflatten(self._out_spec, iter(env[n] for n in self._outputs))


def _called_graph(expr: Expr) -> InternalGraph | None:
    if isinstance(expr, CallMethod) and expr.method == "__call__" and isinstance(expr.inputs[0], ModuleNode):
        owner = expr.inputs[0].owner
        if isinstance(owner, TracedModule):
            return owner.graph
    return None


class TracedModule(Module):
    """A module whose forward replays a recorded graph (see the module docstring). Its attributes
    mirror the traced module's: built-in layers and tensors are shared with it, traced sub-modules
    are nested TracedModules."""

    def __init__(self, graph: InternalGraph) -> None:
        super().__init__()
        self._graph = graph  # underscore: not part of state_dict or named_children

    @property
    def graph(self) -> InternalGraph:
        return self._graph

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._graph.interpret(self, *args, **kwargs)

    def __repr__(self) -> str:
        graphs = [self._graph, *self._graph._subgraphs()]
        return "\n".join(repr(g) for g in graphs)


# ---------------------------------------------------------------------------------------------------
# Tracing

_ORIG_CALL = Module.__call__
_active: _Tracer | None = None


class _Frame:
    """The graph being recorded for one module call, and which of its tensors have nodes."""

    def __init__(self, graph: InternalGraph, module: Module) -> None:
        self.graph = graph
        self.module = module
        self.nodes: dict[int, Node] = {}
        self.keep: list[Any] = []  # keeps recorded tensors alive so their ids stay unique
        self.module_nodes: dict[int, ModuleNode] = {}
        self.module_paths: dict[int, str] = {}
        for path, m in module.named_modules():
            if path:
                self.module_paths.setdefault(id(m), path)
        self.tensor_paths = {id(t): path for path, t in module.named_tensors()}
        expr = Input(graph._next_expr_id(), "self")
        self.self_node = graph._module_node(expr, "self", module, graph.qualname)
        graph._inputs.append(self.self_node)

    def bind(self, t: Any, node: Node) -> None:
        self.nodes[id(t)] = node
        self.keep.append(t)

    def add(self, expr: Expr) -> Expr:
        self.graph._exprs.append(expr)
        return expr

    def node_for(self, t: Tensor) -> Node:
        node = self.nodes.get(id(t))
        if node is not None:
            return node
        g = self.graph
        path = self.tensor_paths.get(id(t))
        if path is not None:
            expr: Expr = self.add(GetAttr(g._next_expr_id(), self.self_node, path))
            node = g._tensor_node(expr, path.replace(".", "_"), t)
        else:
            expr = self.add(Constant(g._next_expr_id(), t))
            node = g._tensor_node(expr, "const_tensor", t)
        self.bind(t, node)
        return node

    def module_node(self, module: Module) -> ModuleNode:
        node = self.module_nodes.get(id(module))
        if node is None:
            g = self.graph
            path = self.module_paths.get(id(module))
            if path is not None:
                expr: Expr = self.add(GetAttr(g._next_expr_id(), self.self_node, path))
                node = g._module_node(expr, path.replace(".", "_"), module, f"{g.qualname}.{path}")
            else:
                expr = self.add(Constant(g._next_expr_id(), module))
                node = g._module_node(expr, type(module).__name__.lower(), module, g.qualname)
            self.module_nodes[id(module)] = node
            self.keep.append(module)
        return node

    def record_call(
        self,
        make: Callable[[int, list[Node], pytree.Spec, pytree.Spec], Expr],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        out: Any,
        base: str,
    ) -> None:
        leaves, arg_spec = pytree.flatten((tuple(args), dict(kwargs)), _is_tensor)
        inputs = [self.node_for(t) for t in leaves]  # may add GetAttr/Constant exprs, before the call
        out_leaves, out_spec = pytree.flatten(out, _is_tensor)
        g = self.graph
        expr = self.add(make(g._next_expr_id(), inputs, arg_spec, out_spec))
        for i, t in enumerate(out_leaves):
            self.bind(t, g._tensor_node(expr, f"{base}_out" + (f"_{i}" if len(out_leaves) > 1 else ""), t))


class _Tracer:
    def __init__(self) -> None:
        self.frames: list[_Frame] = []
        self.suppress = 0
        self.graphs: dict[int, tuple[Module, InternalGraph]] = {}

    @contextlib.contextmanager
    def suppressed(self) -> Iterator[None]:
        self.suppress += 1
        try:
            yield
        finally:
            self.suppress -= 1

    @property
    def recording(self) -> bool:
        return not self.suppress and bool(self.frames)

    def trace_into(
        self, module: Module, args: Sequence[Any], kwargs: dict[str, Any], qualname: str
    ) -> tuple[InternalGraph, Any]:
        graph = InternalGraph(_class_name(module), qualname)
        frame = _Frame(graph, module)
        leaves, graph._in_spec = pytree.flatten((tuple(args), dict(kwargs)), _is_tensor)
        names = _arg_names(module, args, kwargs)
        for t in leaves:
            expr = Input(graph._next_expr_id(), names.get(id(t), "arg"))
            node = graph._tensor_node(expr, expr.name, t)
            expr.name = node.name
            graph._inputs.append(node)
            frame.bind(t, node)
        self.frames.append(frame)
        try:
            out = _ORIG_CALL(module, *args, **kwargs)
        finally:
            self.frames.pop()
        out_leaves, graph._out_spec = pytree.flatten(out, _is_tensor)
        graph._outputs = [frame.node_for(t) for t in out_leaves]
        return graph, out

    def call_module(self, module: Module, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        frame = self.frames[-1]
        builtin = policy.is_builtin_layer(module)
        if not builtin and id(module) not in frame.module_paths:
            # a user module that is no attribute (made in forward, or the module itself): inline it
            return _ORIG_CALL(module, *args, **kwargs)
        node = frame.module_node(module)
        if builtin:
            with self.suppressed():
                out = _ORIG_CALL(module, *args, **kwargs)
        elif id(module) in self.graphs:
            # a shared sub-module called again: one graph per module, so the call must look the same
            _, spec = pytree.flatten((tuple(args), dict(kwargs)), _is_tensor)
            if not pytree.same_spec(spec, self.graphs[id(module)][1]._in_spec):
                raise TracedModuleError(
                    f"{node.qualname} is called with differently structured arguments; trace_module "
                    "keeps one graph per module"
                )
            with self.suppressed():
                out = _ORIG_CALL(module, *args, **kwargs)
        else:
            path = frame.module_paths[id(module)]
            graph, out = self.trace_into(module, args, kwargs, f"{frame.graph.qualname}.{path}")
            self.graphs[id(module)] = (module, graph)

        def make(i: int, inputs: list[Node], arg_spec: pytree.Spec, out_spec: pytree.Spec) -> Expr:
            return CallMethod(i, node, "__call__", inputs, arg_spec, out_spec)

        frame.record_call(make, args, kwargs, out, node.name)
        return out

    def record_function(
        self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], out: Any
    ) -> None:
        try:  # every parameter, defaults included, as MegEngine records (and prints) them
            bound = inspect.signature(fn).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        except (TypeError, ValueError):
            pass
        if not pytree.flatten(out, _is_tensor)[0]:
            return  # nothing for the graph to hold: the value is baked into later calls
        func = (fn.__module__, fn.__qualname__)

        def make(i: int, inputs: list[Node], arg_spec: pytree.Spec, out_spec: pytree.Spec) -> Expr:
            return CallFunction(i, func, inputs, arg_spec, out_spec)

        self.frames[-1].record_call(make, args, kwargs, out, fn.__name__)

    def record_method(
        self, obj: Tensor, method: str, args: Sequence[Any], kwargs: dict[str, Any], out: Any
    ) -> None:
        frame = self.frames[-1]
        obj_node = frame.node_for(obj)

        def make(i: int, inputs: list[Node], arg_spec: pytree.Spec, out_spec: pytree.Spec) -> Expr:
            return CallMethod(i, obj_node, method, inputs, arg_spec, out_spec)

        frame.record_call(make, args, kwargs, out, method.strip("_"))

    # core recorder: ops no wrapper saw (called through a function object taken before tracing)
    def record(
        self,
        op_cls: type,
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        params: dict[str, Any],
        result_types: Sequence[Any],
    ) -> None:
        if not self.recording:
            return
        frame = self.frames[-1]
        nodes = [frame.node_for(t) for t in inputs]
        g = frame.graph
        expr = frame.add(
            Apply(
                g._next_expr_id(),
                op_cls.__name__,
                nodes,
                {k: policy.encode_param(v) for k, v in params.items()},
            )
        )
        base = op_cls.__name__.removesuffix("Op").lower()
        for i, t in enumerate(outputs):
            frame.bind(t, g._tensor_node(expr, f"{base}_out" + (f"_{i}" if len(outputs) > 1 else ""), t))


def _class_name(module: Module) -> str:
    return module.graph.name if isinstance(module, TracedModule) else type(module).__name__


def _arg_names(module: Module, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[int, str]:
    """Input node names: the forward's parameter names (``x``), indexed when one holds several."""
    if isinstance(module, TracedModule):  # forward(*args): the names its graph was traced with
        leaves, _ = pytree.flatten((tuple(args), dict(kwargs)), _is_tensor)
        return {id(t): n.name for t, n in zip(leaves, module.graph._inputs[1:], strict=False)}
    try:
        items = list(inspect.signature(module.forward).bind(*args, **kwargs).arguments.items())
    except (TypeError, ValueError):
        items = [(f"arg_{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    names: dict[int, str] = {}
    for pname, value in items:
        leaves, _ = pytree.flatten(value, _is_tensor)
        for i, t in enumerate(leaves):
            names.setdefault(id(t), pname if len(leaves) == 1 else f"{pname}_{i}")
    return names


# -- the hooks, installed only while tracing -----------------------------------------------------------


def _traced_call(self: Module, *args: Any, **kwargs: Any) -> Any:
    tracer = _active
    if tracer is None or not tracer.recording:
        return _ORIG_CALL(self, *args, **kwargs)
    return tracer.call_module(self, args, kwargs)


def _wrap_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tracer = _active
        if tracer is None or not tracer.recording:
            return fn(*args, **kwargs)
        with tracer.suppressed():
            out = fn(*args, **kwargs)
        tracer.record_function(fn, args, kwargs, out)
        return out

    return wrapper


def _wrap_method(method: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        tracer = _active
        if tracer is None or not tracer.recording:
            return fn(self, *args, **kwargs)
        with tracer.suppressed():
            out = fn(self, *args, **kwargs)
        if out is not NotImplemented:
            tracer.record_method(self, method, args, kwargs, out)
        return out

    return wrapper


@contextlib.contextmanager
def _hooks_installed(tracer: _Tracer) -> Iterator[None]:
    global _active
    if _active is not None:
        raise TracedModuleError("trace_module cannot be nested")
    patches: list[tuple[Any, str, Any]] = [(Module, "__call__", Module.__dict__["__call__"])]
    wrappers: dict[int, Callable[..., Any]] = {}
    for modname in policy.FUNCTION_MODULES:
        mod = importlib.import_module(modname)
        for name, value in list(vars(mod).items()):
            if (
                isinstance(value, types.FunctionType)
                and not name.startswith("_")
                and value.__module__.startswith("compiler.functional")
            ):
                patches.append((mod, name, value))
    for method in policy.TENSOR_METHODS:
        if method in Tensor.__dict__:
            patches.append((Tensor, method, Tensor.__dict__[method]))
    try:
        for owner, name, original in patches:
            if owner is Module:
                new: Any = _traced_call
            elif owner is Tensor:
                new = _wrap_method(name, original)
            else:  # one wrapper per function, wherever it is re-exported
                new = wrappers.setdefault(id(original), _wrap_function(original))
            setattr(owner, name, new)
        push_recorder(tracer)
        _active = tracer
        yield
    finally:
        _active = None
        with contextlib.suppress(ValueError):
            pop_recorder(tracer)
        for owner, name, original in reversed(patches):
            setattr(owner, name, original)


def trace_module(module: Module, *inputs: Any, **kwinputs: Any) -> TracedModule:
    """Run ``module(*inputs, **kwinputs)`` once and return a :class:`TracedModule` that replays it."""
    if not isinstance(module, Module):
        raise TypeError(f"trace_module: expected a Module, got {type(module).__name__}")
    for i, leaf in enumerate(pytree.flatten((inputs, kwinputs), lambda v: hasattr(v, "__array__"))[0]):
        if not isinstance(leaf, Tensor):
            raise TypeError(
                f"trace_module: input {i} is a {type(leaf).__name__}; pass compiler.Tensor inputs"
            )
    tracer = _Tracer()
    with _hooks_installed(tracer):
        graph, _ = tracer.trace_into(module, inputs, kwinputs, _class_name(module))
        tracer.graphs[id(module)] = (module, graph)
    memo: dict[int, TracedModule] = {}
    top = _mirror(module, tracer.graphs, memo)
    assert isinstance(top, TracedModule)
    # graphs point at the modules they were traced on; point them at the mirrors instead, so a
    # TracedModule references (and pickles) no user class
    for _, g in tracer.graphs.values():
        for node in g.nodes(recursive=False):
            if isinstance(node, ModuleNode) and id(node.owner) in memo:
                node.owner = memo[id(node.owner)]  # module_type keeps the traced class's name
    return top


_SKIP = object()


def _mirror(
    module: Module, graphs: dict[int, tuple[Module, InternalGraph]], memo: dict[int, TracedModule]
) -> Module:
    entry = graphs.get(id(module))
    if entry is None:
        return module  # a built-in layer (shared) or a module never called
    if id(module) in memo:
        return memo[id(module)]
    tm = TracedModule(entry[1])
    memo[id(module)] = tm
    for key, value in vars(module).items():
        mirrored = _mirror_value(value, graphs, memo)
        if mirrored is not _SKIP and key not in vars(tm):
            setattr(tm, key, mirrored)
    tm.training = module.training
    return tm


def _mirror_value(
    value: Any, graphs: dict[int, tuple[Module, InternalGraph]], memo: dict[int, TracedModule]
) -> Any:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, Module):
        return _mirror(value, graphs, memo)
    if isinstance(value, list | tuple | dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        mirrored = {k: _mirror_value(v, graphs, memo) for k, v in items}
        if all(v is _SKIP for v in mirrored.values()):
            return _SKIP
        # keep non-module items of a mixed container as they were
        fixed = {k: (value[k] if v is _SKIP else v) for k, v in mirrored.items()}
        if isinstance(value, dict):
            return type(value)(fixed) if type(value) is dict else dict(fixed)
        return type(value)(fixed.values()) if type(value) in (list, tuple) else list(fixed.values())
    return _SKIP
