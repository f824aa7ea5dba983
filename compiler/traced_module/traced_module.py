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

The graphs of one traced module share one id counter, so expression and node ids are unique across
them, as in MegEngine. Graph surgery (``insert_exprs``, which reuses these hooks, and ``flatten``)
lives in ``surgery.py``; ``replace_node``, ``compile``, the input/output edits and watch/end points
are methods of ``InternalGraph`` and ``TracedModule`` here.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

import compiler.traced_module.policy as policy
import compiler.traced_module.pytree as pytree
from compiler.core import AppliedOp, pop_recorder, push_recorder
from compiler.module.module import Module
from compiler.tensor import Tensor
from compiler.traced_module.expr import Apply, CallFunction, CallMethod, Constant, Expr, GetAttr, Input
from compiler.traced_module.filters import ExprFilter, NodeFilter
from compiler.traced_module.node import ModuleNode, Node, TensorNode
from compiler.traced_module.policy import TracedModuleError
from dialects.errors import XmgeError


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor)


def _safe_text(obj: Any, limit: int) -> str:
    """``obj``'s text on one line for an error message; a malformed loaded object whose repr or str
    fails itself is named by its type."""
    try:
        text = " ".join(str(obj).split())
    except Exception:  # noqa: BLE001 - the message must not fail in turn
        text = f"<a {type(obj).__name__}>"
    return text[:limit]


class _Namespace:
    """The names a graph has handed out, as MegEngine's ``_namespace`` shows them."""

    def __init__(self, used: dict[str, int]) -> None:
        self.used_names = used


class InternalGraph:
    """The expressions of one traced ``forward``: inputs (``self`` first), exprs, outputs.

    Expression and node ids are unique across all the graphs of one traced module (MegEngine's
    numbering): the graphs share one ``_total_ids`` counter, ``[next node id, next expr id]``.
    """

    def __init__(self, name: str, qualname: str, total_ids: list[int] | None = None) -> None:
        self._name = name
        self._qualname = qualname
        self._exprs: list[Expr] = []
        self._inputs: list[Node] = []
        self._outputs: list[Node] = []
        self._in_spec: pytree.Spec = ("tuple", ("tuple",), ("dict", ()))
        self._out_spec: pytree.Spec = ("tuple",)
        self._used_names: dict[str, int] = {}
        self._total_ids = [0, 0] if total_ids is None else total_ids
        self._top_graph: InternalGraph | None = None
        self._init_run_state()

    def _init_run_state(self) -> None:
        # set_watch_points / set_end_points: what a run records or stops at (never saved)
        self._watch_points: list[Node] = []
        self._end_points: list[Node] = []
        self._watch_values: dict[Node, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(vars(self))
        for key in ("_watch_points", "_end_points", "_watch_values"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        from compiler.traced_module.serialization import run_loaders

        vars(self).update(state)
        self._init_run_state()
        run_loaders(self._exprs)

    # -- building ----------------------------------------------------------------------------------
    def _next_node_id(self) -> int:
        self._total_ids[0] += 1
        return self._total_ids[0] - 1

    def _next_expr_id(self) -> int:
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

    @property
    def _namespace(self) -> _Namespace:
        """MegEngine's name table of the graph (``graph._namespace.used_names``)."""
        return _Namespace(self._used_names)

    def _rename(self, node: Node, new_name: str) -> None:
        if not new_name.isidentifier():
            raise TracedModuleError(f"{new_name!r} is not a valid node name")
        if any(n.name == new_name for n in self.nodes(recursive=False) if n is not node):
            raise policy.NameInUseError(
                f"the name {new_name!r} is already used in {self._name}; choose another"
            )
        self._used_names.pop(node._name, None)
        self._used_names.setdefault(new_name, 0)
        node._name = new_name

    def _tensor_node(self, expr: Expr, base: str, value: Tensor) -> TensorNode:
        node = self._new_tensor_node(expr, base, value.shape, value.dtype)
        if _eager_values is not None:  # enable_expr_checker: keep what the eager run computed
            _eager_values.append((node, np.array(value._data)))
        return node

    def _new_tensor_node(self, expr: Expr, base: str, shape: Sequence[int], dtype: Any) -> TensorNode:
        name = self._unique_name(base)
        node = TensorNode(expr, name, f"{self._qualname}.[{name}]", self._next_node_id(), tuple(shape), dtype)
        self._attach(expr, node)
        return node

    def _module_node(self, expr: Expr, base: str, module: Any, qualname: str) -> ModuleNode:
        cls = type(module)
        type_name = f"{cls.__module__}.{cls.__qualname__}"
        if isinstance(module, TracedModule):  # re-traced: keep the class it was first traced from
            type_name = module.graph._inputs[0].type_name  # type: ignore[attr-defined]
        node = ModuleNode(expr, self._unique_name(base), qualname, self._next_node_id(), type_name, module)
        self._attach(expr, node)
        return node

    def _attach(self, expr: Expr, node: Node) -> None:
        expr.outputs.append(node)
        expr._top_graph = node._top_graph = self

    def _claim(self) -> None:
        """Point every expression and node of this graph at it (``top_graph``)."""
        for node in self._inputs:
            node._top_graph = self
            if node.expr is not None:
                node.expr._top_graph = self
        for expr in self._exprs:
            expr._top_graph = self
            for node in expr.outputs:
                node._top_graph = self

    def _comes_before(self, node: Node, expr: Expr) -> bool:
        """Whether ``node`` is available to ``expr``: a graph input, or made by an earlier expr."""
        if node in self._inputs:
            return True
        return (
            node.expr in self._exprs
            and expr in self._exprs
            and (
                self._exprs.index(node.expr) < self._exprs.index(expr)  # type: ignore[arg-type]
            )
        )

    def _check_own(self, node: Node, what: str) -> None:
        if not isinstance(node, Node) or node.top_graph is not self:
            raise TracedModuleError(f"{what}: {node!r} is not a node of {self._qualname}")

    def _check_top(self, what: str) -> None:
        if self._top_graph is not None:
            raise TracedModuleError(
                f"{what} only works on the top graph; {self._qualname} is the graph of a sub-module"
            )

    # -- inspection ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, new_name: str) -> None:
        """Rename the graph (node names are matched as ``<graph name>_<node name>``); a sub-module's
        graph name must be free among the names of the graph that calls it."""
        if not isinstance(new_name, str) or not new_name:
            raise TracedModuleError(f"graph name must be a non-empty str, got {new_name!r}")
        parent = self._top_graph
        if parent is not None:
            if new_name != self._name and new_name in parent._used_names:
                raise policy.NameInUseError(
                    f"the name {new_name!r} is already used in {parent._name}; choose another"
                )
            parent._used_names.setdefault(new_name, 0)
        self._name = new_name

    @property
    def qualname(self) -> str:
        return self._qualname

    def _reset_ids(self) -> None:
        """Number this graph's expressions and nodes (its sub-graphs' included) from 0 in order,
        and the shared counter after them (MegEngine's ``_reset_ids``)."""
        exprs = self.exprs(recursive=True).as_list()
        nodes = self.nodes(recursive=True).as_list()
        for i, expr in enumerate(exprs):
            expr._id = i
        for i, node in enumerate(nodes):
            node._id = i
        self._total_ids[0] = len(nodes)
        self._total_ids[1] = len(exprs)

    @property
    def top_graph(self) -> InternalGraph | None:
        """The graph that calls this one (``None`` for the top graph)."""
        return self._top_graph

    @property
    def inputs(self) -> list[Node]:
        """The input nodes, ``self`` first (MegEngine's list itself)."""
        return self._inputs

    @property
    def outputs(self) -> list[Node]:
        return self._outputs

    def exprs(self, recursive: bool = True) -> ExprFilter:
        """Expressions in order, ``Input`` ones first (as MegEngine lists them); with ``recursive``,
        each first call of a nested TracedModule is followed by that module's expressions."""
        return ExprFilter(self._walk(recursive, set()))

    def nodes(self, recursive: bool = True) -> NodeFilter:
        """Every node the expressions make, in expression order."""
        return NodeFilter(dict.fromkeys(n for e in self._walk(recursive, set()) for n in e.outputs))

    def _walk(self, recursive: bool, seen: set[int]) -> Iterator[Expr]:
        seen.add(id(self))
        for node in self._inputs:
            if node.expr is not None:
                yield node.expr
        for e in self._exprs:
            yield e
            sub = _called_graph(e) if recursive else None
            if sub is not None and id(sub) not in seen:
                yield from sub._walk(True, seen)

    def _subgraphs(self) -> list[InternalGraph]:
        found: dict[int, InternalGraph] = {}
        for e in self._walk(True, set()):
            g = e.top_graph
            if g is not None and g is not self:
                found.setdefault(id(g), g)
        return list(found.values())

    def get_function_by_type(
        self, func: Callable[..., Any] | None = None, recursive: bool = True
    ) -> ExprFilter:
        return self.exprs(recursive).call_function(func)

    def get_method_by_type(self, method: str | None = None, recursive: bool = True) -> ExprFilter:
        return self.exprs(recursive).call_method(method)

    def get_expr_by_id(self, expr_id: int | Sequence[int], recursive: bool = True) -> ExprFilter:
        return self.exprs(recursive).expr_id(expr_id)

    def get_module_by_type(self, module_cls: type, recursive: bool = True) -> NodeFilter:
        return self.nodes(recursive).type(module_cls)

    def get_node_by_id(self, node_id: int | Sequence[int], recursive: bool = True) -> NodeFilter:
        return self.nodes(recursive).node_id(node_id)

    def get_node_by_name(self, name: str, ignorecase: bool = True, recursive: bool = True) -> NodeFilter:
        """Nodes whose ``<graph name>_<node name>`` matches the glob ``name``."""
        return self.nodes(recursive).name(name, ignorecase)

    def get_dep_exprs(self, nodes: Node | Sequence[Node]) -> list[Expr]:
        """The expressions ``nodes`` are computed from (``Input`` ones included)."""
        stack = [nodes] if isinstance(nodes, Node) else list(nodes)
        seen: set[Node] = set()
        found: dict[Expr, None] = {}
        while stack:
            node = stack.pop()
            if node in seen or node.expr is None:
                continue
            seen.add(node)
            found.setdefault(node.expr)
            stack.extend(node.expr.inputs)
        return list(found)

    def __repr__(self) -> str:
        return format(self, "")

    def __format__(self, format_spec: str) -> str:
        """MegEngine's text form; ``"{:i}".format(graph)`` shows node ids, ``:p`` graph names."""
        saved = Node._format_spec
        Node._format_spec = format_spec
        try:
            lines = [f"{self._qualname}.Graph ({', '.join(str(n) for n in self._inputs)}) {{"]
            lines += [f"\t{e!r}" for e in self._exprs]
            lines.append("\treturn " + ", ".join(str(n) for n in self._outputs))
            return "\n".join(lines) + "\n}"
        finally:
            Node._format_spec = saved

    # -- surgery -------------------------------------------------------------------------------------
    def insert_exprs(self, expr: Expr | None = None) -> contextlib.AbstractContextManager[Any]:
        """A ``with`` block in which TensorNodes act as Tensors and ModuleNodes as Modules: the
        functional calls, Tensor methods and module calls made on them become new expressions,
        inserted after ``expr`` (or after the last expression their inputs need)."""
        from compiler.traced_module.surgery import InsertExprs

        if expr is not None and expr.top_graph is not self:
            raise TracedModuleError(f"insert_exprs: ({expr!r}) is not an expression of {self._qualname}")
        return InsertExprs(self, expr)

    def replace_node(self, repl_dict: dict[Node, Node]) -> None:
        """For each ``{old: new}``, make the expressions after ``new`` that read ``old`` (and the
        graph outputs) read ``new``; a use that ``new`` itself depends on is left alone."""
        for old, new in list(repl_dict.items()):
            if type(old) is not type(new):
                raise TracedModuleError(
                    f"replace_node: {old} is a {type(old).__name__} but {new} a {type(new).__name__}"
                )
            self._check_own(old, "replace_node")
            self._check_own(new, "replace_node")
            self._outputs[:] = [new if n is old else n for n in self._outputs]
            start = -1 if new in self._inputs else self._exprs.index(new.expr)  # type: ignore[arg-type]
            deps = set(self.get_dep_exprs(new))
            for user in list(old.users):
                if user in deps or (user in self._exprs and self._exprs.index(user) <= start):
                    continue  # would make a loop, or comes before new exists
                user.inputs[:] = [new if n is old else n for n in user.inputs]
                while user in old.users:
                    old.users.remove(user)
                    new.users.append(user)

    def compile(self) -> None:
        """Drop the expressions the outputs do not need (and read each attribute path once)."""
        self._merge_getattrs()
        pinned = [e for e in self._exprs if e._disable_remove]
        needed = set(self.get_dep_exprs([*self._outputs, *(n for e in pinned for n in e.inputs)]))
        needed.update(pinned)
        kept: list[Expr] = []
        for expr in self._exprs:
            if expr in needed:
                kept.append(expr)
                continue
            for node in expr.inputs:
                while expr in node.users:
                    node.users.remove(expr)
            for node in expr.outputs:
                self._used_names.pop(node.name, None)
        self._exprs[:] = kept

    def _merge_getattrs(self) -> None:
        """``getattr(getattr(self, "a"), "b")`` becomes ``getattr(self, "a.b")``, and a path read
        twice is read once."""
        self_node = self._inputs[0]
        path_of: dict[Node, str] = {self_node: ""}
        first: dict[str, Node] = {}
        for expr in self._exprs:
            if not isinstance(expr, GetAttr) or expr.inputs[0] not in path_of:
                continue
            base = expr.inputs[0]
            if base is not self_node:
                expr.name = f"{path_of[base]}.{expr.name}"
                base.users.remove(expr)
                expr.inputs[0] = self_node
                self_node.users.append(expr)
            out = expr.outputs[0]
            if expr.name in first:
                self._redirect(out, first[expr.name])
                continue
            first[expr.name] = out
            if isinstance(out, ModuleNode):
                path_of[out] = expr.name

    def _redirect(self, old: Node, new: Node) -> None:
        # every use of ``old`` reads ``new`` (which is made no later than old)
        for user in list(old.users):
            user.inputs[:] = [new if n is old else n for n in user.inputs]
            new.users.append(user)
        old.users.clear()
        self._outputs[:] = [new if n is old else n for n in self._outputs]

    def add_input_node(self, shape: Sequence[int], dtype: Any = "float32", name: str = "args") -> TensorNode:
        """A new tensor input, the last positional argument of the top graph."""
        self._check_top("add_input_node")
        expr = Input(self._next_expr_id(), name)
        node = self._new_tensor_node(expr, name, tuple(shape), np.dtype(dtype))
        expr.name = node.name
        _, args_spec, kwargs_spec = self._in_spec
        self._inputs.insert(1 + pytree.num_leaves(args_spec), node)
        self._in_spec = ("tuple", (*args_spec, pytree.LEAF), kwargs_spec)
        return node

    def remove_input(self, node: Node) -> None:
        """Remove an unused tensor input of the top graph (an xmge addition: the inverse of
        ``add_input_node``)."""
        self._check_top("remove_input")
        self._check_own(node, "remove_input")
        if node not in self._inputs[1:]:
            raise TracedModuleError(f"remove_input: {node} is not a tensor input of {self._qualname}")
        if node.users or node in self._outputs:
            raise TracedModuleError(
                f"remove_input: {node} is still used by {[*node.users] or 'the graph outputs'}"
            )
        index = self._inputs.index(node)
        self._in_spec = pytree.drop_leaf(self._in_spec, index - 1)
        del self._inputs[index]
        self._used_names.pop(node.name, None)

    def add_output_node(self, node: TensorNode) -> None:
        """Return ``(old outputs, node)`` from now on."""
        self._check_top("add_output_node")
        self._check_own(node, "add_output_node")
        self._out_spec = ("tuple", self._out_spec, pytree.LEAF)
        self._outputs.append(node)

    def reset_outputs(self, outputs: Any) -> None:
        """Return ``outputs``, a structure (tuple/list/dict) of this graph's TensorNodes."""
        self._check_top("reset_outputs")
        leaves, spec = pytree.flatten(outputs, lambda v: isinstance(v, TensorNode))
        consts = _constants(spec)
        if consts:
            raise TracedModuleError(f"reset_outputs: outputs must be TensorNodes, got {consts[0]!r}")
        for node in leaves:
            self._check_own(node, "reset_outputs")
        self._outputs[:] = leaves
        self._out_spec = spec

    # -- running -------------------------------------------------------------------------------------
    def interpret(self, module: Module, *args: Any, **kwargs: Any) -> Any:
        with self._replay_errors("its argument structure"):
            leaves, spec = pytree.flatten((args, kwargs), _is_tensor)
            if not pytree.same_spec(spec, self._in_spec):
                raise TracedModuleError(
                    f"{self._qualname} was traced with arguments "
                    f"{pytree.format_spec(self._in_spec, iter(n.name for n in self._inputs[1:]))}, got "
                    f"{pytree.format_spec(spec, iter('<Tensor>' for _ in leaves))}"
                )
        values = self._run([module, *leaves])
        if self._end_points:
            return values
        with self._replay_errors("its output structure"):
            return pytree.unflatten(self._out_spec, iter(values))

    @contextlib.contextmanager
    def _replay_errors(self, what: str) -> Iterator[None]:
        """A graph (possibly loaded from a file) whose structure is inconsistent (a node list that is
        not one, an attribute its module lacks, a malformed spec) fails as one TracedModuleError
        naming the graph, not as a Python error from deep inside the replay."""
        try:
            yield
        except XmgeError:
            raise
        except (AssertionError, AttributeError, IndexError, KeyError, TypeError, ValueError, RuntimeError) as exc:  # noqa: E501
            # RuntimeError: a generator of a malformed spec raised StopIteration (RecursionError too)
            raise TracedModuleError(
                f"{self._qualname}: replaying {what} failed ({type(exc).__name__}: {_safe_text(exc, 160)})"
            ) from exc

    def eval(self, *inputs: Any) -> list[Any]:
        """Run the graph on tensors for ``inputs[1:]`` (``self`` is its module); the outputs as a
        flat list."""
        if len(inputs) != len(self._inputs) - 1:
            raise TracedModuleError(
                f"eval: {self._qualname} takes {len(self._inputs) - 1} inputs "
                f"({', '.join(n.name for n in self._inputs[1:])}), got {len(inputs)}"
            )
        owner = getattr(self._inputs[0], "owner", None)
        if owner is None:
            raise TracedModuleError(f"eval: {self._qualname} has no module to run on")
        return self._run([owner, *inputs])

    def _run(self, values: list[Any]) -> list[Any]:
        """Values of the outputs (or of the end points, once all are known)."""
        from compiler.traced_module.budget import call_budget, nested

        with call_budget(f"replay of {self._qualname}"), nested(f"replay of {self._qualname}"):
            with self._replay_errors("its expressions"):
                return self._run_exprs(values)

    def _run_exprs(self, values: list[Any]) -> list[Any]:
        env: dict[Node, Any] = {}
        pending = set(self._end_points)

        def bind(node: Node, value: Any) -> bool:
            env[node] = value
            if node in self._watch_points:
                self._watch_values[node] = value
            pending.discard(node)
            return bool(self._end_points) and not pending

        for node, value in zip(self._inputs, values, strict=True):
            if bind(node, value):
                return [env[n] for n in self._end_points]
        for expr in self._exprs:
            missing = [n for n in expr.inputs if n not in env]
            if missing:
                raise TracedModuleError(
                    f"{self._qualname}: {expr!r} uses {missing[0]}, which no earlier expression computes"
                )
            try:
                results = expr.interpret(*[env[n] for n in expr.inputs])
            except RecursionError:
                raise TracedModuleError(
                    f"{self._qualname}: {expr!r} nests modules too deeply (a module that calls itself?)"
                ) from None
            except StopIteration:
                raise TracedModuleError(
                    f"{self._qualname}: {expr!r} returned fewer values than its output structure lists"
                ) from None
            except XmgeError:
                raise
            except (AssertionError, AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
                raise TracedModuleError(
                    f"{self._qualname}: replaying {_safe_text(expr, 120)} failed "
                    f"({type(exc).__name__}: {_safe_text(exc, 160)})"
                ) from exc
            if len(results) != len(expr.outputs):
                raise TracedModuleError(
                    f"{expr!r} produced {len(results)} values, expected {len(expr.outputs)}"
                )
            done = False
            for node, value in zip(expr.outputs, results, strict=True):
                done = bind(node, value) or done
            if done:
                return [env[n] for n in self._end_points]
        if self._end_points:
            missing = ", ".join(str(n) for n in pending)
            raise TracedModuleError(f"end points {missing} were never computed by {self._qualname}")
        return [env[n] for n in self._outputs]


def _constants(spec: pytree.Spec) -> list[Any]:
    tag = spec[0]
    if tag == "const":
        return [spec[1]]
    if tag == "leaf":
        return []
    return [c for s in spec[pytree.child_start(tag) :] for c in _constants(s)]


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

    # the traced module of a QAT module keeps what quantization tools read (MegEngine does too):
    # its flags and its observers and fake quantizers (None where it has none)
    is_qat: bool
    with_act: bool
    with_weight: bool
    act_observer: Any
    act_fake_quant: Any
    weight_observer: Any
    weight_fake_quant: Any

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        graph = state.get("_graph")
        if isinstance(graph, InternalGraph):
            # MegEngine numbers a loaded graph's expressions and nodes afresh, in graph order (its
            # sub-graphs' included); the outermost module is built last and numbers them all
            graph._reset_ids()

    def __init__(self, graph: InternalGraph) -> None:
        super().__init__()
        self._graph = graph  # underscore: not part of state_dict or named_children
        self.is_qat = False
        self.watch_points: list[Node] = []
        self.watch_node_value: dict[Node, Any] = {}
        self.end_points: list[Node] = []

    @property
    def graph(self) -> InternalGraph:
        return self._graph

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self._graph.interpret(self, *args, **kwargs)
        if self.watch_points:
            self.watch_node_value = {
                n: n.top_graph._watch_values.pop(n)
                for n in self.watch_points
                if n.top_graph is not None and n in n.top_graph._watch_values
            }
        return out

    def __repr__(self) -> str:
        graphs = [self._graph, *self._graph._subgraphs()]
        return "\n".join(repr(g) for g in graphs)

    # -- watch and end points --------------------------------------------------------------------------
    def set_watch_points(self, nodes: Node | Sequence[Node]) -> None:
        """Keep the values ``nodes`` (of any graph of this module) take in each run, in
        ``watch_node_value``."""
        self.clear_watch_points()
        self.watch_points = [nodes] if isinstance(nodes, Node) else list(nodes)
        graphs = {id(g): g for g in [self._graph, *self._graph._subgraphs()]}
        for node in self.watch_points:
            if node.top_graph is None or id(node.top_graph) not in graphs:
                raise TracedModuleError(f"set_watch_points: {node!r} is not a node of this module")
            node.top_graph._watch_points.append(node)

    def clear_watch_points(self) -> None:
        for node in self.watch_points:
            if node.top_graph is not None:
                node.top_graph._watch_points = []
                node.top_graph._watch_values = {}
        self.watch_points = []
        self.watch_node_value = {}

    def set_end_points(self, nodes: Node | Sequence[Node]) -> None:
        """Stop each run as soon as ``nodes`` (of the top graph) are computed and return their
        values, as a list."""
        nodes = [nodes] if isinstance(nodes, Node) else list(nodes)
        for node in nodes:
            if node.top_graph is not self._graph:
                raise TracedModuleError(f"set_end_points: {node!r} is not a node of the top graph")
        self.end_points = nodes
        self._graph._end_points = list(nodes)

    def clear_end_points(self) -> None:
        self.end_points = []
        self._graph._end_points = []

    # -- structure -----------------------------------------------------------------------------------
    def _update_ref(self, top: InternalGraph | None = None, seen: set[int] | None = None) -> None:
        """Point graphs, expressions and nodes at their graph and module nodes at their modules
        (after tracing, loading or surgery)."""
        seen = set() if seen is None else seen
        seen.add(id(self))
        graph = self._graph
        graph._top_graph = top
        graph._claim()
        graph._inputs[0].owner = self  # type: ignore[attr-defined]
        env: dict[Node, Any] = {graph._inputs[0]: self}
        for expr in graph._exprs:
            out = expr.outputs[0] if expr.outputs else None
            if not isinstance(out, ModuleNode):
                continue
            if isinstance(expr, GetAttr) and expr.inputs[0] in env:
                with contextlib.suppress(AttributeError, KeyError, IndexError, TracedModuleError):
                    env[out] = out.owner = expr.interpret(env[expr.inputs[0]])[0]
            elif isinstance(expr, Constant):
                env[out] = out.owner = expr.value
        for obj in env.values():
            if isinstance(obj, TracedModule) and id(obj) not in seen:
                obj._update_ref(graph, seen)

    def flatten(self) -> TracedModule:
        """A copy whose graph calls no traced sub-module: their graphs are inlined (attribute paths
        become ``getattr(self, "a.b.conv")``), then compiled and renumbered."""
        from compiler.traced_module.surgery import flatten

        return flatten(self)


# ---------------------------------------------------------------------------------------------------
# Tracing

_ORIG_CALL = Module.__call__
_active: _Tracer | None = None


def _apply_tensor_names(frame: _Frame, inputs: Sequence[Any]) -> None:
    """A name the module's code gave a computed tensor (``x.name = "out"``) names its node, as in
    MegEngine, where the name is free (a name in use keeps the node's own)."""
    skip = {id(t) for t in inputs} | set(frame.tensor_paths)
    for t in frame.keep:
        node = frame.nodes.get(id(t))
        name = getattr(t, "name", "") if isinstance(t, Tensor) else ""
        if not name or id(t) in skip or not isinstance(node, TensorNode) or node.name == name:
            continue
        if name.isidentifier() and name not in frame.graph._used_names:
            frame.graph._rename(node, name)


class _Frame:
    """The graph being recorded for one module call, and which of its tensors have nodes. A
    surgery frame (``self_node`` given) adds to an existing graph, collecting its new expressions
    in ``exprs`` rather than in the graph."""

    def __init__(
        self,
        graph: InternalGraph,
        module: Module,
        self_node: ModuleNode | None = None,
        exprs: list[Expr] | None = None,
    ) -> None:
        self.graph = graph
        self.module = module
        self.exprs = graph._exprs if exprs is None else exprs
        self.nodes: dict[int, Node] = {}
        self.keep: list[Any] = []  # keeps recorded tensors alive so their ids stay unique
        self.module_nodes: dict[int, ModuleNode] = {}
        self.refresh_paths()
        if self_node is None:
            expr = Input(graph._next_expr_id(), "self")
            self_node = graph._module_node(expr, "self", module, graph.qualname)
            graph._inputs.append(self_node)
        self.self_node = self_node

    def refresh_paths(self) -> None:
        """Attribute paths of the module's sub-modules and tensors (again, after a surgery script
        attached new ones)."""
        self.module_paths: dict[int, str] = {}
        for path, m in self.module.named_modules():
            if path:
                self.module_paths.setdefault(id(m), path)
        self.tensor_paths = {id(t): path for path, t in self.module.named_tensors()}

    def bind(self, t: Any, node: Node) -> None:
        self.nodes[id(t)] = node
        self.keep.append(t)

    def add(self, expr: Expr) -> Expr:
        expr._top_graph = self.graph
        self.exprs.append(expr)
        return expr

    def node_for(self, t: Tensor, path: str | None = None) -> Node:
        node = self.nodes.get(id(t))
        if node is not None:
            return node
        g = self.graph
        path = path or self.tensor_paths.get(id(t))
        if path is not None:
            expr: Expr = self.add(GetAttr(g._next_expr_id(), self.self_node, path))
            node = g._tensor_node(expr, path.replace(".", "_"), t)
        else:
            expr = self.add(Constant(g._next_expr_id(), t))
            node = g._tensor_node(expr, "const_tensor", t)
        self.bind(t, node)
        return node

    def module_node(self, module: Module, path: str | None = None) -> ModuleNode:
        node = self.module_nodes.get(id(module))
        if node is None:
            g = self.graph
            path = path or self.module_paths.get(id(module))
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
        expr_id: int | None = None,
    ) -> None:
        leaves, arg_spec = pytree.flatten((tuple(args), dict(kwargs)), _is_tensor)
        inputs = [self.node_for(t) for t in leaves]  # may add GetAttr/Constant exprs, before the call
        out_leaves, out_spec = pytree.flatten(out, _is_tensor)
        g = self.graph
        expr = self.add(make(g._next_expr_id() if expr_id is None else expr_id, inputs, arg_spec, out_spec))
        for i, t in enumerate(out_leaves):
            self.bind(t, g._tensor_node(expr, f"{base}_out" + (f"_{i}" if len(out_leaves) > 1 else ""), t))


class _Tracer:
    """Records calls into frames. ``surgery``: the first frame edits an existing graph, whose
    traced sub-modules are called rather than traced again."""

    def __init__(self, total_ids: list[int], surgery: bool = False) -> None:
        self.frames: list[_Frame] = []
        self.suppress = 0
        self.graphs: dict[int, tuple[Module, InternalGraph]] = {}
        self.new_paths: dict[int, str] = {}  # surgery: where each newly traced module is attached
        self.total_ids = total_ids
        self.surgery = surgery
        self.session: Any = None  # surgery: the insert_exprs block that converts nodes and tensors

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

    @property
    def at_surgery_level(self) -> bool:
        """Recording straight into the graph under surgery (not inside a module traced for it)."""
        return self.surgery and len(self.frames) == 1 and not self.suppress

    def trace_into(
        self, module: Module, args: Sequence[Any], kwargs: dict[str, Any], qualname: str
    ) -> tuple[InternalGraph, Any]:
        graph = InternalGraph(_class_name(module), qualname, self.total_ids)
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
        _apply_tensor_names(frame, leaves)
        return graph, out

    def call_module(
        self,
        module: Module,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        node: ModuleNode | None = None,
        path: str | None = None,
    ) -> Any:
        frame = self.frames[-1]
        builtin = policy.is_builtin_layer(module)
        # under surgery, a module that already has a graph is called as it is, not traced again
        replay = builtin or (self.at_surgery_level and isinstance(module, TracedModule))
        if not replay and path is None and id(module) not in frame.module_paths:
            if self.surgery:
                frame.refresh_paths()
            if id(module) not in frame.module_paths:
                # a user module that is no attribute (made in forward, or the module itself): inline it
                return _ORIG_CALL(module, *args, **kwargs)
        node = node or frame.module_node(module, path)
        expr_id = None
        if replay:
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
            path = path or frame.module_paths[id(module)]
            expr_id = frame.graph._next_expr_id()  # the call is numbered before what it calls
            graph, out = self.trace_into(module, args, kwargs, f"{frame.graph.qualname}.{path}")
            self.graphs[id(module)] = (module, graph)
            if self.at_surgery_level:
                self.new_paths[id(module)] = path
        call_node = node

        def make(i: int, inputs: list[Node], arg_spec: pytree.Spec, out_spec: pytree.Spec) -> Expr:
            return CallMethod(i, call_node, "__call__", inputs, arg_spec, out_spec)

        frame.record_call(make, args, kwargs, out, node.name, expr_id)
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

    def record_setitem(self, obj: Tensor, args: Sequence[Any], setitem: Callable[..., Any]) -> None:
        """``obj[index] = value``: a ``__setitem__`` call whose output node stands for ``obj`` from
        here on (MegEngine's in-place update, as a new value in the graph)."""
        frame = self.frames[-1]
        if id(obj) not in frame.nodes and id(obj) not in frame.tensor_paths:
            # a tensor made in forward: the graph keeps its value from before the update
            frame.bind(obj, frame.node_for(Tensor(obj)))
        obj_node = frame.node_for(obj)
        with self.suppressed():
            setitem(obj, *args)

        def make(i: int, inputs: list[Node], arg_spec: pytree.Spec, out_spec: pytree.Spec) -> Expr:
            return CallMethod(i, obj_node, "__setitem__", inputs, arg_spec, out_spec)

        frame.record_call(make, args, {}, obj, "setitem")

    # core recorder: ops no wrapper saw (called through a function object taken before tracing)
    def record(self, applied: AppliedOp) -> None:
        if not self.recording:
            return
        frame = self.frames[-1]
        nodes = [frame.node_for(t) for t in applied.inputs]
        g = frame.graph
        op_name = applied.op_cls.__name__
        expr = frame.add(
            Apply(
                g._next_expr_id(),
                op_name,
                nodes,
                {k: policy.encode_param(v) for k, v in applied.params.items()},
            )
        )
        base = op_name.removesuffix("Op").lower()
        outputs = applied.outputs
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
    session = tracer.session if tracer.at_surgery_level else None
    if session is None:
        return tracer.call_module(self, args, kwargs)
    args, kwargs = session.to_values((args, kwargs))  # a module called directly in insert_exprs
    return session.to_nodes(tracer.call_module(self, args, kwargs))


def _wrap_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tracer = _active
        if tracer is None or not tracer.recording:
            return fn(*args, **kwargs)
        session = tracer.session if tracer.at_surgery_level else None
        if session is not None:  # graph surgery: nodes stand for tensors, results become nodes
            args, kwargs = session.to_values((args, kwargs))
        with tracer.suppressed():
            out = fn(*args, **kwargs)
        tracer.record_function(fn, args, kwargs, out)
        return out if session is None else session.to_nodes(out)

    return wrapper


def _wrap_method(method: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        tracer = _active
        if tracer is None or not tracer.recording:
            return fn(self, *args, **kwargs)
        session = tracer.session if tracer.at_surgery_level else None
        if session is not None:
            args, kwargs = session.to_values((args, kwargs))
        if method == "__setitem__":
            tracer.record_setitem(self, args, fn)
            return None
        with tracer.suppressed():
            out = fn(self, *args, **kwargs)
        if out is NotImplemented:
            return out
        tracer.record_method(self, method, args, kwargs, out)
        return out if session is None else session.to_nodes(out)

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
    user_sites = []  # names of functions registered with wrap(), in the modules that wrapped them
    for namespace, name in policy.wrapped_function_sites():
        value = namespace.get(name)
        if isinstance(value, types.FunctionType):
            user_sites.append((namespace, name, value))
    try:
        for owner, name, original in patches:
            if owner is Module:
                new: Any = _traced_call
            elif owner is Tensor:
                new = _wrap_method(name, original)
            else:  # one wrapper per function, wherever it is re-exported
                new = wrappers.setdefault(id(original), _wrap_function(original))
            setattr(owner, name, new)
        for namespace, name, original in user_sites:
            namespace[name] = wrappers.setdefault(id(original), _wrap_function(original))
        push_recorder(tracer)
        _active = tracer
        yield
    finally:
        _active = None
        with contextlib.suppress(ValueError):
            pop_recorder(tracer)
        for namespace, name, original in user_sites:
            namespace[name] = original
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
    global _eager_values
    tracer = _Tracer([0, 0])
    _eager_values = [] if policy.expr_checker_enabled() else None
    try:
        with _hooks_installed(tracer):
            graph, eager = tracer.trace_into(module, inputs, kwinputs, _class_name(module))
            tracer.graphs[id(module)] = (module, graph)
        recorded, _eager_values = _eager_values, None
    finally:
        _eager_values = None
    top = mirror_traced(tracer)[id(module)]
    top._update_ref()
    if recorded is not None:
        _check_exprs(module, top, inputs, kwinputs, recorded)
    if policy.default_checker_enabled():
        _check_outputs(module, top, inputs, kwinputs, eager)
    return top


_eager_values: list[tuple[Node, np.ndarray]] | None = None


def _check_exprs(
    module: Module, top: TracedModule, inputs: Any, kwinputs: Any, recorded: list[tuple[Node, np.ndarray]]
) -> None:
    """``enable_expr_checker``: replay with every top-level tensor node watched and compare."""
    nodes = [(n, v) for n, v in recorded if n.top_graph is top.graph]
    saved = [(t, t._data.copy()) for _, t in module.named_tensors()]
    top.set_watch_points([n for n, _ in nodes])
    try:
        top(*inputs, **kwinputs)
        got = dict(top.watch_node_value)
    finally:
        top.clear_watch_points()
        for t, data in saved:
            t._data = data
    for node, want in nodes:
        value = got.get(node)
        if value is None:
            continue
        arr = np.asarray(value._data if isinstance(value, Tensor) else value)
        if arr.shape != want.shape or not np.allclose(arr, want, rtol=1e-5, atol=1e-6, equal_nan=True):
            raise TracedModuleError(
                f"trace_module expression check: {node} ({node.expr!r}) replays to other values than "
                "the eager run computed"
            )


def _check_outputs(module: Module, top: TracedModule, inputs: Any, kwinputs: Any, eager: Any) -> None:
    """MegEngine's default checker: the traced module run on the example inputs gives the eager
    outputs. The module's state (batch-norm statistics) is restored after the check run."""
    saved = [(t, t._data.copy()) for _, t in module.named_tensors()]
    try:
        replay = top(*inputs, **kwinputs)
    finally:
        for t, data in saved:
            t._data = data
    want, _ = pytree.flatten(eager, _is_tensor)
    got, _ = pytree.flatten(replay, _is_tensor)
    if len(want) != len(got):
        raise TracedModuleError(f"trace_module check: {len(got)} outputs replayed, {len(want)} traced")
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        a, b = np.asarray(w._data), np.asarray(g._data)
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True):
            raise TracedModuleError(
                f"trace_module check: output {i} of the traced module differs from the eager run (the "
                "forward depends on something the trace cannot replay, e.g. randomness or Python state); "
                "call traced_module.disable_default_checker() to skip this check"
            )


def mirror_traced(tracer: _Tracer) -> dict[int, TracedModule]:
    """A TracedModule for each module ``tracer`` traced, by the id of that module."""
    memo: dict[int, TracedModule] = {}
    for module, _ in tracer.graphs.values():
        _mirror(module, tracer.graphs, memo)
    # graphs point at the modules they were traced on; point them at the mirrors instead, so a
    # TracedModule references (and pickles) no user class
    for _, g in tracer.graphs.values():
        for node in g.nodes(recursive=False):
            if isinstance(node, ModuleNode) and id(node.owner) in memo:
                node.owner = memo[id(node.owner)]  # type_name keeps the traced class's name
    return memo


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
    from compiler.module.qat.module import QATModule

    if isinstance(module, QATModule):
        tm.is_qat = True
        tm.with_act, tm.with_weight = module.with_act, module.with_weight
        for key in ("act_observer", "act_fake_quant", "weight_observer", "weight_fake_quant"):
            if key not in vars(tm):
                setattr(tm, key, None)
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
