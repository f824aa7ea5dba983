"""``traced_module.optimize``: inference-time rewrites of a TracedModule (MegEngine's passes).

``FuseAddMul`` and ``BackwardFoldScale`` (scalar constant folding) live in ``scale_passes.py``.
``FuseConvBn`` folds an eval-mode ``BatchNorm2d`` that is the only reader of a ``Conv2d``'s result
into that convolution's weight and bias (``w * g / sqrt(v + eps)``, ``(b - m) * g / sqrt(v + eps) +
beta``) and drops the batch-norm call. The module is deep-copied first; the original is unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.module.layers import BatchNorm2d, Conv2d
from compiler.tensor import Parameter, Tensor
from compiler.traced_module.expr import CallFunction, CallMethod, Constant, Expr, GetAttr
from compiler.traced_module.node import ModuleNode, Node
from compiler.traced_module.policy import TracedModuleError
from compiler.traced_module.traced_module import InternalGraph, TracedModule

__all__ = ["optimize"]

PASSES = ("FuseConvBn", "FuseAddMul", "BackwardFoldScale")


def _module_call(expr: Expr, cls: type) -> object | None:
    if isinstance(expr, CallMethod) and expr.method == "__call__":
        obj = expr.inputs[0]
        if isinstance(obj, ModuleNode) and isinstance(obj.owner, cls):
            return obj.owner
    return None


def _node_value(node: Any) -> Tensor | None:
    """The tensor a node holds when it is a module attribute or a constant; None otherwise."""
    expr = node.expr
    if isinstance(expr, Constant) and isinstance(expr.value, Tensor):
        return expr.value
    if isinstance(expr, GetAttr) and isinstance(expr.inputs[0], ModuleNode):
        owner = expr.inputs[0].owner
        if owner is not None:
            value = expr.interpret(owner)[0]
            return value if isinstance(value, Tensor) else None
    return None


def _fold_arrays(
    w: np.ndarray,
    b: np.ndarray | None,
    mean: np.ndarray,
    var: np.ndarray,
    gamma: np.ndarray | None,
    beta: np.ndarray | None,
    eps: float,
) -> tuple[np.ndarray, np.ndarray]:
    mean, var = mean.reshape(-1).astype(np.float32), var.reshape(-1).astype(np.float32)
    gamma = np.ones_like(mean) if gamma is None else gamma.reshape(-1)
    beta = np.zeros_like(mean) if beta is None else beta.reshape(-1)
    factor = (gamma / np.sqrt(var + np.float32(eps))).astype(np.float32)
    oc_shape = (-1,) + (1,) * (w.ndim - 1) if w.ndim == 4 else (w.shape[0], w.shape[1]) + (1,) * (w.ndim - 2)
    bias = np.zeros_like(mean) if b is None else b.reshape(-1)
    return (
        (w * factor.reshape(oc_shape)).astype(w.dtype),
        ((bias - mean) * factor + beta).reshape(1, -1, 1, 1).astype(np.float32),
    )


def _arr(v: Any) -> np.ndarray | None:
    return None if v is None else v.numpy()


def _bn_params(
    e: Expr,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, float, Node] | None:
    """(mean, var, gamma, beta, eps, input node) of an eval-mode batch norm, module or function."""
    import compiler.functional as F
    from compiler.traced_module.filters import function_key

    bn = _module_call(e, BatchNorm2d)
    if bn is not None:
        if bn.training or not bn.track_running_stats or len(e.inputs) != 2:  # type: ignore[attr-defined]
            return None
        return (
            _arr(bn.running_mean),
            _arr(bn.running_var),
            _arr(bn.weight),
            _arr(bn.bias),  # type: ignore[attr-defined,return-value]
            float(bn.eps),
            e.inputs[1],
        )  # type: ignore[attr-defined]
    if not (isinstance(e, CallFunction) and e.func_key == function_key(F.batch_norm)):
        return None
    args = e.named_args
    if args.get("training", False) or not isinstance(args.get("inp"), Node):
        return None
    vals = [_value(args.get(k)) for k in ("running_mean", "running_var", "weight", "bias")]
    if any(v is _UNKNOWN for v in vals) or vals[0] is None or vals[1] is None:
        return None
    mean, var, gamma, beta = (_arr(v) for v in vals)  # type: ignore[arg-type]
    return mean, var, gamma, beta, float(args.get("eps", 1e-5)), args["inp"]  # type: ignore[return-value]


_UNKNOWN = object()


def _value(v: Any) -> Any:
    if v is None or isinstance(v, Tensor):
        return v
    got = _node_value(v) if isinstance(v, Node) else None
    return _UNKNOWN if got is None else got


def _fuse_conv_bn(graph: InternalGraph) -> int:
    """Fold eval-mode batch norms into the convolution whose result only they read. Either side
    may be a module call (``Conv2d``/``BatchNorm2d``) or the functional call a subclass is traced
    into (``F.conv2d``/``F.batch_norm``)."""
    import compiler.functional as F
    from compiler.traced_module.filters import function_key

    calls: dict[int, int] = {}
    for e in graph._exprs:
        owner = _module_call(e, Conv2d)
        if owner is not None:
            calls[id(owner)] = calls.get(id(owner), 0) + 1
    fused = 0
    for e in list(graph._exprs):
        bn = _bn_params(e) if len(e.outputs) == 1 else None
        if bn is None:
            continue
        mean, var, gamma, beta, eps, inp = bn
        conv_expr = inp.expr
        if conv_expr is None or len(inp.users) != 1:
            continue
        conv = _module_call(conv_expr, Conv2d)
        if conv is not None:
            if calls.get(id(conv)) != 1:
                continue  # the module is called elsewhere too: folding would change that call
            w, b = _fold_arrays(conv.weight.numpy(), _arr(conv.bias), mean, var, gamma, beta, eps)  # type: ignore[attr-defined]
            conv.weight = Parameter(w)  # type: ignore[attr-defined]
            conv.bias = Parameter(b)  # type: ignore[attr-defined]
        elif isinstance(conv_expr, CallFunction) and conv_expr.func_key == function_key(F.conv2d):
            args = conv_expr.named_args
            wv, bv = _value(args.get("weight")), _value(args.get("bias"))
            if wv is _UNKNOWN or bv is _UNKNOWN or wv is None:
                continue
            w, b = _fold_arrays(wv.numpy(), _arr(bv), mean, var, gamma, beta, eps)
            args["weight"], args["bias"] = Tensor(w), Tensor(b)
            conv_expr.set_args_kwargs(**args)
        else:
            continue
        graph.replace_node({e.outputs[0]: inp})
        fused += 1
    if fused:
        graph.compile()
    return fused


def optimize(module: TracedModule, enabled_pass: str | Sequence[str] = ("FuseConvBn",)) -> TracedModule:
    """A copy of ``module`` with the ``enabled_pass`` rewrites applied (MegEngine's ``optimize``)."""
    if not isinstance(module, TracedModule):
        raise TypeError(f"optimize: expected a TracedModule, got {type(module).__name__}")
    names = [enabled_pass] if isinstance(enabled_pass, str) else list(enabled_pass)
    for name in names:
        if name not in PASSES:
            raise TracedModuleError(f"optimize: unknown pass {name!r}; available: {', '.join(PASSES)}")
    if "BackwardFoldScale" in names and "FuseConvBn" not in names:
        names.append("FuseConvBn")  # as MegEngine: scales fold into the convolutions batch norms left
    from compiler.traced_module.scale_passes import backward_fold_scale, fuse_add_mul

    # MegEngine's order: FuseConvBn, FuseAddMul, then BackwardFoldScale and FuseAddMul again
    order: list[tuple[str, Any]] = [("FuseConvBn", _fuse_conv_bn), ("FuseAddMul", fuse_add_mul)]
    if "BackwardFoldScale" in names:
        order += [("BackwardFoldScale", backward_fold_scale), ("FuseAddMul", fuse_add_mul)]
    out = copy.deepcopy(module)
    for name, run in order:
        if name in names:
            for g in [out.graph, *out.graph._subgraphs()]:
                run(g)
    return out
