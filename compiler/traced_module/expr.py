"""Graph expressions, MegEngine's kinds: Input, GetAttr, CallMethod, CallFunction, Constant, Apply.

Each expression turns the values of its ``inputs`` nodes into values for its ``outputs`` nodes
(``interpret``). Call arguments are stored as a spec (``pytree``) of ``(args, kwargs)`` whose leaves
are the expression's tensor inputs, so constants are kept in place and printed where they were.
Everything an expression calls is resolved through ``policy`` when it runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import compiler.traced_module.budget as budget
import compiler.traced_module.policy as policy
import compiler.traced_module.pytree as pytree
from compiler.traced_module.node import GraphMember, ModuleNode, Node

if TYPE_CHECKING:
    from compiler.traced_module.traced_module import InternalGraph


class Expr(GraphMember):
    _disable_remove = False  # compile() keeps the expression even when nothing reads it

    def __init__(self, expr_id: int, inputs: Sequence[Node]) -> None:
        self._id = expr_id
        self.inputs: list[Node] = list(inputs)
        self.outputs: list[Node] = []
        self._top_graph: InternalGraph | None = None
        for node in self.inputs:
            node.users.append(self)

    @property
    def args(self) -> tuple[Any, ...]:
        """The positional arguments of the call, nodes and constants (MegEngine's ``Expr.args``)."""
        return tuple(self.inputs)

    @property
    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the call, nodes and constants."""
        return {}

    def enable_remove(self) -> None:
        self._disable_remove = False

    def disable_remove(self) -> None:
        self._disable_remove = True

    def replace_inputs(self, repl_dict: dict[Node, Node]) -> None:
        """Read ``new`` instead of ``old`` for each ``{old: new}``; ``new`` must be a node of the same
        graph made before this expression."""
        graph = self._top_graph
        for old, new in list(repl_dict.items()):
            if type(old) is not type(new):
                raise policy.TracedModuleError(
                    f"replace_inputs: {old} is a {type(old).__name__} but {new} a {type(new).__name__}"
                )
            if old not in self.inputs:
                raise policy.TracedModuleError(f"replace_inputs: {old} is not an input of ({self!r})")
            if graph is None or new.top_graph is not graph:
                raise policy.TracedModuleError(f"replace_inputs: {new} is not in the graph of ({self!r})")
            if not graph._comes_before(new, self):
                raise policy.TracedModuleError(f"replace_inputs: {new} must be made before ({self!r})")
            for i, node in enumerate(self.inputs):
                if node is old:
                    self.inputs[i] = new
                    old.users.remove(self)
                    new.users.append(self)

    def interpret(self, *values: Any) -> list[Any]:
        raise NotImplementedError

    def _rhs(self) -> str:
        raise NotImplementedError

    def __format__(self, format_spec: str) -> str:
        saved = Node._format_spec
        Node._format_spec = format_spec or saved
        try:
            lhs = ", ".join(str(o) for o in self.outputs)
            return f"%{self._id}:\t" + (f"{lhs} = " if lhs else "") + self._rhs()
        finally:
            Node._format_spec = saved

    def __repr__(self) -> str:
        return format(self, "")


def _flatten_result(expr: Expr, result: Any, out_spec: pytree.Spec) -> list[Any]:
    from compiler.tensor import Tensor

    leaves, spec = pytree.flatten(result, lambda v: isinstance(v, Tensor))
    if not pytree.same_spec(spec, out_spec):
        raise policy.TracedModuleError(
            f"{expr!r}: the call now returns a different structure than when it was traced"
        )
    return leaves


class Input(Expr):
    """A graph argument (``self`` or a tensor)."""

    def __init__(self, expr_id: int, name: str) -> None:
        super().__init__(expr_id, [])
        self.name = name

    def _rhs(self) -> str:
        return "Input()"


class GetAttr(Expr):
    """``getattr(module, "a.b.0")``: a sub-module or a tensor attribute, by dotted path."""

    def __init__(self, expr_id: int, module: ModuleNode, name: str) -> None:
        super().__init__(expr_id, [module])
        self.name = name

    def interpret(self, *values: Any) -> list[Any]:
        policy.check_attr_path(self.name)
        obj = values[0]
        for part in self.name.split("."):
            obj = _step(obj, part)
        return [obj]

    def _rhs(self) -> str:
        out = self.outputs[0]
        kind = out.type_name.rpartition(".")[2] if isinstance(out, ModuleNode) else "Tensor"
        return f'getattr({self.inputs[0]}, "{self.name}") -> ({kind})'


def _step(obj: Any, part: str) -> Any:
    if isinstance(obj, list | tuple):
        return obj[int(part)]
    if isinstance(obj, dict):
        for key in obj:  # module attribute paths write dict keys with str()
            if str(key) == part:
                return obj[key]
        raise KeyError(part)
    return getattr(obj, part)


class _Call(Expr):
    def __init__(
        self, expr_id: int, inputs: Sequence[Node], arg_spec: pytree.Spec, out_spec: pytree.Spec
    ) -> None:
        super().__init__(expr_id, inputs)
        self.arg_spec = arg_spec
        self.out_spec = out_spec

    def _call_args(self, values: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args, kwargs = pytree.unflatten(self.arg_spec, iter(values))
        return tuple(args), dict(kwargs)

    def _arg_nodes(self) -> list[Node]:
        return self.inputs

    @property
    def args(self) -> tuple[Any, ...]:
        return self._call_args(self._arg_nodes())[0]

    @property
    def kwargs(self) -> dict[str, Any]:
        return self._call_args(self._arg_nodes())[1]

    def _callee(self) -> Callable[..., Any]:
        raise NotImplementedError

    def _bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        try:
            return inspect.signature(self._callee()).bind(*args, **kwargs)
        except (TypeError, ValueError) as exc:
            message = f"({self!r}): the arguments do not fit the callee: {exc}"
            raise policy.TracedModuleError(message) from None

    @property
    def named_args(self) -> dict[str, Any]:
        """Every argument by its parameter name (MegEngine's ``Expr.named_args``)."""
        return dict(self._bind(self.args, self.kwargs).arguments)

    def set_args_kwargs(self, *args: Any, **kwargs: Any) -> None:
        """Call with these arguments from now on: nodes of this graph made before this expression,
        or constants (for a CallMethod, ``args[0]`` is the object node, as in ``args``)."""
        self._bind(args, kwargs)
        if isinstance(self, CallMethod):
            obj, *args = args  # type: ignore[assignment]
            if obj is not self.inputs[0]:
                raise policy.TracedModuleError(f"({self!r}): set_args_kwargs keeps the called object")
        leaves, spec = pytree.flatten((tuple(args), dict(kwargs)), lambda v: isinstance(v, Node))
        graph = self._top_graph
        for node in leaves:
            if graph is None or node.top_graph is not graph or not graph._comes_before(node, self):
                raise policy.TracedModuleError(
                    f"({self!r}): argument {node} must be a node of its graph made before it"
                )
        head = self.inputs[:1] if isinstance(self, CallMethod) else []
        for node in self.inputs[len(head) :]:
            node.users.remove(self)
        self.inputs = [*head, *leaves]
        for node in leaves:
            node.users.append(self)
        self.arg_spec = spec

    def set_arg(self, name: str, value: Any) -> None:
        """Set the argument named ``name`` (MegEngine's ``Expr.set_arg``)."""
        bound = self._bind(self.args, self.kwargs)
        if name not in inspect.signature(self._callee()).parameters:
            raise policy.TracedModuleError(f"({self!r}): the callee has no argument named {name!r}")
        bound.arguments[name] = value
        self.set_args_kwargs(*bound.args, **bound.kwargs)

    def _arg_text(self, arg_nodes: Sequence[Node]) -> str:
        return pytree.format_call_args(self.arg_spec, iter(str(n) for n in arg_nodes))


class CallMethod(_Call):
    """``module(args)`` (method ``__call__`` of a module node) or ``tensor.method(args)``."""

    def __init__(
        self,
        expr_id: int,
        obj: Node,
        method: str,
        inputs: Sequence[Node],
        arg_spec: pytree.Spec,
        out_spec: pytree.Spec,
    ) -> None:
        super().__init__(expr_id, [obj, *inputs], arg_spec, out_spec)
        self.method = method

    def _arg_nodes(self) -> list[Node]:
        return self.inputs[1:]

    @property
    def args(self) -> tuple[Any, ...]:
        return (self.inputs[0], *super().args)

    def _callee(self) -> Callable[..., Any]:
        from compiler.tensor import Tensor

        obj = self.inputs[0]
        if isinstance(obj, ModuleNode) and self.method == "__call__":
            return type(obj.owner).forward  # unbound: ``args`` starts with the module node
        return getattr(Tensor, self.method)

    @property
    def graph(self) -> InternalGraph | None:
        """The graph of the traced module this expression calls (``None`` for layers and methods)."""
        from compiler.traced_module.traced_module import _called_graph

        return _called_graph(self)

    def interpret(self, *values: Any) -> list[Any]:
        from compiler.module.module import Module
        from compiler.tensor import Tensor

        obj = values[0]
        args, kwargs = self._call_args(values[1:])
        if isinstance(obj, Module) and self.method == "__call__":
            _preflight(type(obj).forward, type(obj).__name__, (obj, *args), kwargs, self, owner=obj)
            result = obj(*args, **kwargs)
        elif isinstance(obj, Tensor) and self.method == "__setitem__":
            # the update lands on a copy: the input value may be a module's own tensor
            from compiler.functional import copy

            result = copy(obj)  # an op, so a jit trace of this replay keeps the dependence on obj
            result[args[0]] = args[1]
        elif isinstance(obj, Tensor):
            policy.check_tensor_method(self.method)
            result = getattr(obj, self.method)(*args, **kwargs)
        else:
            raise policy.TracedModuleError(f"{self!r}: cannot call {self.method!r} on a {type(obj).__name__}")
        return _flatten_result(self, result, self.out_spec)

    def _rhs(self) -> str:
        obj = self.inputs[0]
        is_module_call = isinstance(obj, ModuleNode) and self.method == "__call__"
        callee = str(obj) if is_module_call else f"{obj}.{self.method}"
        return f"{callee}({self._arg_text(self.inputs[1:])})"


def _preflight(fn: Callable[..., Any], name: str, args: Sequence[Any], kwargs: dict[str, Any],
               expr: Expr, owner: Any = None) -> None:
    """Size the call under the shared budget before it allocates (see :mod:`budget`)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return  # the call itself reports the mismatch
    budget.check(name, dict(bound), place=" ".join(f"expr {expr!r}".split()), owner=owner)


class CallFunction(_Call):
    """A ``compiler.functional`` call (or of a function registered with ``wrap``); the graph names
    the function by ``(module, qualname)``, never holds the function object."""

    def __init__(
        self,
        expr_id: int,
        func: tuple[str, str],
        inputs: Sequence[Node],
        arg_spec: pytree.Spec,
        out_spec: pytree.Spec,
    ) -> None:
        super().__init__(expr_id, inputs, arg_spec, out_spec)
        self.func = func

    # The graph stores (and pickles) the ``(module, qualname)`` key; reading ``expr.func`` gives
    # the function it names, as in MegEngine (``expr.func == F.relu``)
    _func: tuple[str, str]

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "func" in state:  # pickled by an xmge that stored the key as ``func``
            state = dict(state)
            state["_func"] = tuple(state.pop("func"))
        vars(self).update(state)

    @property
    def func_key(self) -> tuple[str, str]:
        """``(module, qualname)`` of the function this expression calls."""
        return self._func

    @property
    def func(self) -> Callable[..., Any]:
        """The function called (resolved from :attr:`func_key`)."""
        fn = policy.resolve_function(*self.func_key)
        return getattr(fn, "__wrapped__", fn)

    @func.setter
    def func(self, value: Callable[..., Any] | tuple[str, str]) -> None:
        key = tuple(value) if isinstance(value, tuple | list) else function_key(value)
        if len(key) != 2 or not all(isinstance(k, str) for k in key):
            raise policy.TracedModuleError(
                f"CallFunction.func: expected a function or (module, qualname), got {value!r}"
            )
        self._func = key  # type: ignore[assignment]

    def _callee(self) -> Callable[..., Any]:
        return self.func

    def interpret(self, *values: Any) -> list[Any]:
        fn = policy.resolve_function(*self.func_key)
        args, kwargs = self._call_args(values)
        _preflight(getattr(fn, "__wrapped__", fn), self.func_key[1].rpartition(".")[2], args, kwargs, self)
        return _flatten_result(self, fn(*args, **kwargs), self.out_spec)

    def _rhs(self) -> str:
        module, qualname = self.func_key
        return f"{module.rpartition('.')[2]}.{qualname}({self._arg_text(self.inputs)})"


class Constant(Expr):
    """A value the graph holds itself: a tensor created in ``forward`` or a module that is no
    attribute of the traced module."""

    def __init__(self, expr_id: int, value: Any) -> None:
        super().__init__(expr_id, [])
        self.value = value

    def interpret(self, *values: Any) -> list[Any]:
        return [self.value]

    def _rhs(self) -> str:
        return f"Constant() -> ({type(self.value).__name__})"


class Apply(Expr):
    """One ``mgb`` op applied directly (an op reached without a recorded functional call, e.g. a
    function imported before tracing began). ``op`` is the op class name; params are plain data."""

    def __init__(self, expr_id: int, op: str, inputs: Sequence[Node], params: dict[str, Any]) -> None:
        super().__init__(expr_id, inputs)
        self.op = op
        self.params = params

    def interpret(self, *values: Any) -> list[Any]:
        from compiler.core import apply

        op_cls = policy.resolve_op(self.op)
        params = {k: policy.decode_param(v) for k, v in self.params.items()}
        return list(apply(op_cls, list(values), label=self.op, **params))

    def _rhs(self) -> str:
        params = ", ".join(
            f"{k}={v[2] if isinstance(v, tuple) and v[:1] == ('enum',) else v}"
            for k, v in self.params.items()
        )
        return f"{self.op}({params})(" + "".join(f"{n}, " for n in self.inputs) + ")"


# MegEngine's expression predicates (``megengine.traced_module.expr.is_*``)


def is_call_module(expr: Expr, module_cls: type | None = None) -> bool:
    return (
        isinstance(expr, CallMethod)
        and isinstance(expr.inputs[0], ModuleNode)
        and expr.method == "__call__"
        and (module_cls is None or isinstance(expr.inputs[0].owner, module_cls))
    )


def is_call_tensor_method(expr: Expr, method: str | Sequence[str] | None = None) -> bool:
    methods = (method,) if isinstance(method, str) else method
    return (
        isinstance(expr, CallMethod)
        and not is_call_module(expr)
        and (methods is None or expr.method in methods)
    )


def is_call_function(
    expr: Expr, func: Callable[..., Any] | Sequence[Callable[..., Any]] | None = None
) -> bool:
    if not isinstance(expr, CallFunction):
        return False
    if func is None:
        return True
    funcs = func if isinstance(func, Sequence) else (func,)
    return any(expr.func_key == function_key(f) for f in funcs)


def function_key(func: Callable[..., Any]) -> tuple[str, str]:
    """How a CallFunction names ``func``: ``(module, qualname)`` of the undecorated function."""
    func = getattr(func, "__wrapped__", func)
    return (func.__module__, func.__qualname__)


def is_constant(expr: Expr) -> bool:
    return isinstance(expr, Constant)


def is_getattr(expr: Expr) -> bool:
    return isinstance(expr, GetAttr)


def is_apply_def(expr: Expr, op: str | None = None) -> bool:
    return isinstance(expr, Apply) and (op is None or expr.op == op)


def is_input(expr: Expr) -> bool:
    return isinstance(expr, Input)
