"""Graph expressions, MegEngine's kinds: Input, GetAttr, CallMethod, CallFunction, Constant, Apply.

Each expression turns the values of its ``inputs`` nodes into values for its ``outputs`` nodes
(``interpret``). Call arguments are stored as a spec (``pytree``) of ``(args, kwargs)`` whose leaves
are the expression's tensor inputs, so constants are kept in place and printed where they were.
Everything an expression calls is resolved through ``policy`` when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compiler.traced_module import policy, pytree
from compiler.traced_module.node import ModuleNode, Node


class Expr:
    def __init__(self, expr_id: int, inputs: Sequence[Node]) -> None:
        self._id = expr_id
        self.inputs: list[Node] = list(inputs)
        self.outputs: list[Node] = []
        for node in self.inputs:
            node.users.append(self)

    @property
    def id(self) -> int:
        return self._id

    @property
    def args(self) -> list[Node]:
        return self.inputs

    def interpret(self, *values: Any) -> list[Any]:
        raise NotImplementedError

    def _lhs(self) -> str:
        return ", ".join(o.name for o in self.outputs)

    def _rhs(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        lhs = self._lhs()
        return f"%{self._id}:\t" + (f"{lhs} = " if lhs else "") + self._rhs()


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
        return f"Input({self.name})"


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
        kind = out.module_type.rpartition(".")[2] if isinstance(out, ModuleNode) else "Tensor"
        return f'getattr({self.inputs[0].name}, "{self.name}") -> ({kind})'


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

    def _arg_text(self, arg_nodes: Sequence[Node]) -> str:
        return pytree.format_call_args(self.arg_spec, iter(n.name for n in arg_nodes))


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

    def interpret(self, *values: Any) -> list[Any]:
        from compiler.module.module import Module
        from compiler.tensor import Tensor

        obj = values[0]
        args, kwargs = self._call_args(values[1:])
        if isinstance(obj, Module) and self.method == "__call__":
            result = obj(*args, **kwargs)
        elif isinstance(obj, Tensor):
            policy.check_tensor_method(self.method)
            result = getattr(obj, self.method)(*args, **kwargs)
        else:
            raise policy.TracedModuleError(f"{self!r}: cannot call {self.method!r} on a {type(obj).__name__}")
        return _flatten_result(self, result, self.out_spec)

    def _rhs(self) -> str:
        obj = self.inputs[0]
        callee = (
            obj.name
            if isinstance(obj, ModuleNode) and self.method == "__call__"
            else f"{obj.name}.{self.method}"
        )
        return f"{callee}({self._arg_text(self.inputs[1:])})"


class CallFunction(_Call):
    """A ``compiler.functional`` call; ``func`` is ``(module, qualname)``, never a function object."""

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

    def interpret(self, *values: Any) -> list[Any]:
        fn = policy.resolve_function(*self.func)
        args, kwargs = self._call_args(values)
        return _flatten_result(self, fn(*args, **kwargs), self.out_spec)

    def _rhs(self) -> str:
        module, qualname = self.func
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
        return f"{self.op}({params})(" + "".join(f"{n.name}, " for n in self.inputs) + ")"
