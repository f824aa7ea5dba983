"""``FuseAddMul`` and ``BackwardFoldScale``: MegEngine's constant-folding passes of
``traced_module.optimize``, on xmge's traced graphs.

Both look at *scalar steps*: an expression whose output is its one non-constant float input plus,
or times, a scalar constant (``x + c``, ``c + x``, ``x - c``, ``x * c``, ``x / c``, ``-x``, as Tensor
operators or ``F.add``/``sub``/``mul``/``div``/``neg``; the constant a Python number or a
one-element constant tensor that does not change the output's shape).

* ``FuseAddMul`` folds a step into the step of the same kind that produces its input
  (``(x + 1) + 2`` is ``x + 3``; ``(x * 4) * 0.25`` is ``x``).
* ``BackwardFoldScale`` removes ``y * s`` by carrying ``s`` backwards into the convolution(s) that
  produce ``y``: through ops that commute with a scaling (``relu``/``leaky_relu``/max pooling only
  for ``s > 0``; reshapes, transposes, slicing, average pooling, concatenation and sums of two
  scaled tensors for any ``s``), multiplying the constants of ``+ c`` steps on the way by ``s``
  and the convolutions' weights and biases by ``s``. It rewrites only when every use of every
  value on the way is part of the fold and none is a graph input or output, so the graph's outputs
  are unchanged up to float rounding.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.tensor import Parameter, Tensor
from compiler.traced_module.expr import CallFunction, CallMethod, Constant, Expr, GetAttr, function_key
from compiler.traced_module.node import ModuleNode, Node, TensorNode
from compiler.traced_module.policy import TracedModuleError
from compiler.traced_module.traced_module import InternalGraph


@dataclass(frozen=True)
class ScalarStep:
    """``out = x + c`` (kind "add") or ``out = x * c`` (kind "mul")."""

    x: TensorNode
    kind: str
    c: float


# how many expressions deep a value computed only from constants is evaluated (``self.scale[0]``)
_CONST_DEPTH = 4


def _const_value(v: Any, depth: int = _CONST_DEPTH) -> Any:
    """The value of a node every input of which is constant: a Constant, a module's tensor, or a
    Tensor method or function of such values (``self.scale[0]``); ``None`` for anything else."""
    if isinstance(v, Node):
        expr = v.expr
        if isinstance(expr, Constant):
            return expr.value
        if (
            isinstance(expr, GetAttr)
            and isinstance(expr.inputs[0], ModuleNode)
            and expr.inputs[0].owner is not None
        ):
            return expr.interpret(expr.inputs[0].owner)[0]
        if depth > 0 and isinstance(expr, CallMethod | CallFunction) and len(expr.outputs) == 1:
            if isinstance(expr, CallMethod) and not isinstance(expr.inputs[0], TensorNode):
                return None  # a module call: its state may change between calls
            values = [_const_value(n, depth - 1) for n in expr.inputs]
            if any(val is None for val in values):
                return None
            return expr.interpret(*values)[0]
        return None
    return v


def _scalar(v: Any) -> float | None:
    """A Python number or a one-element float or integer constant tensor as a float; None
    otherwise."""
    value = _const_value(v)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Tensor) and value.shape in ((), (1,)) and value.dtype.kind in "fiu":
        return float(value.numpy().reshape(-1)[0])
    return None


def _is_variable(v: Any) -> bool:
    return isinstance(v, TensorNode) and _const_value(v) is None


def _functions() -> dict[tuple[str, str], str]:
    import compiler.functional as F

    return {
        function_key(F.add): "add",
        function_key(F.sub): "sub",
        function_key(F.mul): "mul",
        function_key(F.div): "div",
        function_key(F.neg): "neg",
    }


_METHODS = {
    "__add__": "add",
    "__radd__": "add",
    "__sub__": "sub",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__truediv__": "div",
    "__neg__": "neg",
}


def _operands(expr: Expr) -> tuple[str, list[Any]] | None:
    """The arithmetic an expression does and its operands in order (``x - y`` as ``sub, [x, y]``)."""
    if isinstance(expr, CallMethod) and isinstance(expr.inputs[0], TensorNode) and expr.method in _METHODS:
        args = list(expr.args)
        if expr.kwargs or len(args) != (1 if expr.method == "__neg__" else 2):
            return None
        return _METHODS[expr.method], args
    if isinstance(expr, CallFunction):
        op = _functions().get(expr.func_key)  # type: ignore[arg-type]
        if op is None:
            return None
        named = expr.named_args
        return op, [named["x"]] if op == "neg" else [named["x"], named["y"]]
    return None


def scalar_step(expr: Expr) -> ScalarStep | None:
    """``expr`` as a scalar step, if it is one."""
    if len(expr.outputs) != 1 or not isinstance(expr.outputs[0], TensorNode):
        return None
    found = _operands(expr)
    if found is None:
        return None
    op, args = found
    out = expr.outputs[0]
    if op == "neg":
        x, kind, c = args[0], "mul", -1.0
    else:
        a, b = args
        if _is_variable(a) and (cb := _scalar(b)) is not None:
            x, c = a, cb
        elif op in ("add", "mul") and _is_variable(b) and (ca := _scalar(a)) is not None:
            x, c = b, ca  # c + x, c * x
        else:
            return None
        if op == "div" and c == 0:
            return None
        kind = "add" if op in ("add", "sub") else "mul"
        c = -c if op == "sub" else (1.0 / c if op == "div" else c)
    if not _is_variable(x) or x.dtype.kind != "f" or x.shape != out.shape or x.dtype != out.dtype:
        return None
    return ScalarStep(x, kind, c)


def _insert_step(graph: InternalGraph, after: Expr, x: TensorNode, kind: str, c: float) -> TensorNode:
    with graph.insert_exprs(after):
        return x + c if kind == "add" else x * c  # type: ignore[return-value,operator]


def fuse_add_mul(graph: InternalGraph) -> int:
    """Fold chains of scalar steps of one kind (MegEngine's ``FuseAddMul``); returns how many."""
    folded = 0
    changed = True
    while changed:
        changed = False
        for expr in list(graph._exprs):
            if expr not in graph._exprs:
                continue
            outer = scalar_step(expr)
            if outer is None or outer.x.expr is None:
                continue
            inner = scalar_step(outer.x.expr)
            if inner is None or inner.kind != outer.kind:
                continue
            c = inner.c + outer.c if outer.kind == "add" else inner.c * outer.c
            old = expr.outputs[0]
            identity = c == (0.0 if outer.kind == "add" else 1.0)
            new = inner.x if identity else _insert_step(graph, expr, inner.x, outer.kind, c)
            if old in graph._outputs and (new in graph._inputs or new in graph._outputs):
                continue  # an output would become an input (or another output) itself
            name = old.name
            graph.replace_node({old: new})
            graph.compile()
            if not identity:
                with contextlib.suppress(TracedModuleError):
                    new.name = name  # the folded value keeps its name, as MegEngine's pass does
            folded += 1
            changed = True
            break
    return folded


# -- BackwardFoldScale ------------------------------------------------------------------------------


def _module_of(expr: Expr) -> Any:
    if isinstance(expr, CallMethod) and expr.method == "__call__" and isinstance(expr.inputs[0], ModuleNode):
        return expr.inputs[0].owner
    return None


def _transparent(expr: Expr, s: float) -> list[TensorNode] | None:
    """The inputs that carry the scale through ``expr`` (its output scaled by ``s`` equals ``expr``
    of those inputs scaled by ``s``), or None when it does not commute with that scaling."""
    import compiler.functional as F
    import compiler.module.layers as L

    positive_only = {function_key(f) for f in (F.relu, F.leaky_relu, F.max_pool2d, F.adaptive_max_pool2d)}
    any_sign = {
        function_key(f)
        for f in (
            F.reshape,
            F.transpose,
            F.flatten,
            F.expand_dims,
            F.squeeze,
            F.avg_pool2d,
            F.adaptive_avg_pool2d,
        )
    }
    module = _module_of(expr)
    if module is not None:
        kinds_pos = (L.ReLU, L.LeakyReLU, L.MaxPool2d, L.AdaptiveMaxPool2d)
        kinds_any = (L.AvgPool2d, L.AdaptiveAvgPool2d, L.Flatten, L.Identity)
        if type(module) in kinds_pos and s <= 0:
            return None
        if type(module) not in kinds_pos + kinds_any or len(expr.inputs) != 2:
            return None
        return [expr.inputs[1]] if isinstance(expr.inputs[1], TensorNode) else None
    if isinstance(expr, CallMethod) and isinstance(expr.inputs[0], TensorNode):
        obj = expr.inputs[0]
        if expr.method in ("reshape", "transpose", "flatten", "__getitem__"):
            return [obj]
        if expr.method in ("__add__", "__radd__"):
            other = expr.args[1]
            return [obj, other] if _is_variable(other) else None
        return None
    if isinstance(expr, CallFunction):
        key = expr.func_key
        named = expr.named_args
        if key in positive_only and s > 0 or key in any_sign:
            return [named["inp"] if "inp" in named else named["x"]]
        if key == function_key(F.add) and _is_variable(named["x"]) and _is_variable(named["y"]):
            return [named["x"], named["y"]]
        if key == function_key(F.concat):
            inps = list(named["inps"])
            return inps if all(_is_variable(v) for v in inps) else None
    return None


def _conv_target(expr: Expr, module_calls: dict[int, int]) -> Any:
    """The convolution whose weight and bias can absorb a scale, or None."""
    import compiler.functional as F
    import compiler.module.layers as L

    module = _module_of(expr)
    if module is not None:
        if type(module) is L.Conv2d and module_calls.get(id(module)) == 1:
            return module
        return None
    if isinstance(expr, CallFunction) and expr.func_key == function_key(F.conv2d):
        named = expr.named_args
        w, b = _const_value(named.get("weight")), named.get("bias")
        if isinstance(w, Tensor) and (b is None or isinstance(_const_value(b), Tensor)):
            return expr
    return None


def _plan(
    graph: InternalGraph, mul: Expr, step: ScalarStep, module_calls: dict[int, int]
) -> tuple[list[Expr], list[Expr]] | None:
    """The scalar ``+ c`` steps and convolutions a fold of ``mul``'s scale touches, or None when
    some value on the way has a use outside the fold (or is a graph input/output)."""
    s = step.c
    order = {e: i for i, e in enumerate(graph._exprs)}
    in_fold: set[tuple[int, int]] = {(id(mul), id(step.x))}  # (user expr, node) uses that scale
    pending: dict[int, TensorNode] = {id(step.x): step.x}
    adds: list[Expr] = []
    convs: list[Expr] = []
    while pending:
        # producers in reverse graph order: every use of a node is settled before the node itself
        node = max(pending.values(), key=lambda n: order.get(n.expr, -1))  # type: ignore[arg-type]
        del pending[id(node)]
        producer = node.expr
        if producer is None or producer not in order or node in graph._outputs or node in graph._inputs:
            return None
        if any((id(u), id(node)) not in in_fold for u in node.users):
            return None
        if len(producer.outputs) != 1:
            return None
        if _conv_target(producer, module_calls) is not None:
            convs.append(producer)
            continue
        add = scalar_step(producer)
        carried = [add.x] if add is not None and add.kind == "add" else _transparent(producer, s)
        if carried is None:
            return None
        if add is not None and add.kind == "add":
            adds.append(producer)
        for n in carried:
            in_fold.add((id(producer), id(n)))
            pending[id(n)] = n
    return (adds, convs) if convs else None


def _scale_add(graph: InternalGraph, expr: Expr, s: float) -> None:
    step = scalar_step(expr)
    assert step is not None and step.kind == "add"
    c = step.c * s
    if isinstance(expr, CallMethod) and expr.inputs[0] is not step.x:
        # ``c + x`` called on the constant: a new ``x + c * s`` takes its place
        graph.replace_node({expr.outputs[0]: _insert_step(graph, expr, step.x, "add", c)})
        return
    if isinstance(expr, CallMethod):
        expr.set_args_kwargs(expr.inputs[0], -c if expr.method == "__sub__" else c)
        return
    named = expr.named_args
    var_name = "x" if named["x"] is step.x else "y"
    const_name = "y" if var_name == "x" else "x"
    is_sub = expr.func_key[1] == "sub"  # type: ignore[attr-defined]
    expr.set_arg(const_name, -c if is_sub else c)


def _scale_conv(expr: Expr, s: float) -> None:
    module = _module_of(expr)
    if module is not None:
        module.weight = Parameter((module.weight.numpy() * np.float32(s)).astype(module.weight.dtype))
        if module.bias is not None:
            module.bias = Parameter((module.bias.numpy() * np.float32(s)).astype(module.bias.dtype))
        return
    named = expr.named_args
    w = _const_value(named["weight"])
    expr.set_arg("weight", Tensor((w.numpy() * np.float32(s)).astype(w.dtype)))
    if named.get("bias") is not None:
        b = _const_value(named["bias"])
        expr.set_arg("bias", Tensor((b.numpy() * np.float32(s)).astype(b.dtype)))


def backward_fold_scale(graph: InternalGraph) -> int:
    """Carry scalar multiplications back into convolutions (MegEngine's ``BackwardFoldScale``);
    returns how many multiplications were removed."""
    module_calls: dict[int, int] = {}
    for e in graph._exprs:
        m = _module_of(e)
        if m is not None:
            module_calls[id(m)] = module_calls.get(id(m), 0) + 1
    folded = 0
    changed = True
    while changed:
        changed = False
        for expr in reversed(list(graph._exprs)):
            step = scalar_step(expr)
            if step is None or step.kind != "mul":
                continue
            plan = _plan(graph, expr, step, module_calls)
            if plan is None:
                continue
            adds, convs = plan
            for add in adds:
                _scale_add(graph, add, step.c)
            for conv in convs:
                _scale_conv(conv, step.c)
            graph.replace_node({expr.outputs[0]: step.x})
            graph.compile()
            folded += 1
            changed = True
            break
    return folded
