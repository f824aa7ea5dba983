"""``traced_module.optimize``: inference-time rewrites of a TracedModule (MegEngine's passes).

``FuseConvBn`` folds an eval-mode ``BatchNorm2d`` that is the only reader of a ``Conv2d``'s result
into that convolution's weight and bias (``w * g / sqrt(v + eps)``, ``(b - m) * g / sqrt(v + eps) +
beta``) and drops the batch-norm call. The module is deep-copied first; the original is unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from compiler.module.layers import BatchNorm2d, Conv2d
from compiler.tensor import Parameter
from compiler.traced_module.expr import CallMethod, Expr
from compiler.traced_module.node import ModuleNode
from compiler.traced_module.policy import TracedModuleError
from compiler.traced_module.traced_module import InternalGraph, TracedModule

__all__ = ["optimize"]

PASSES = ("FuseConvBn",)
# MegEngine's other passes, named so a request for one fails with a clear message
_NOT_PROVIDED = {
    "FuseAddMul": "folding adjacent constant add/mul",
    "BackwardFoldScale": "folding constant scales backwards into convolution weights",
}


def _module_call(expr: Expr, cls: type) -> object | None:
    if isinstance(expr, CallMethod) and expr.method == "__call__":
        obj = expr.inputs[0]
        if isinstance(obj, ModuleNode) and isinstance(obj.owner, cls):
            return obj.owner
    return None


def _fold(conv: Conv2d, bn: BatchNorm2d) -> None:
    assert bn.running_mean is not None and bn.running_var is not None
    mean = bn.running_mean.numpy().reshape(-1).astype(np.float32)
    var = bn.running_var.numpy().reshape(-1).astype(np.float32)
    gamma = bn.weight.numpy().reshape(-1) if bn.weight is not None else np.ones_like(mean)
    beta = bn.bias.numpy().reshape(-1) if bn.bias is not None else np.zeros_like(mean)
    factor = (gamma / np.sqrt(var + np.float32(bn.eps))).astype(np.float32)
    w = conv.weight.numpy()
    # output channels are axis 0 (dense) or axes 0-1 (grouped: G, OC/G, ...)
    oc_shape = (-1,) + (1,) * (w.ndim - 1) if w.ndim == 4 else (w.shape[0], w.shape[1]) + (1,) * (w.ndim - 2)
    conv.weight = Parameter((w * factor.reshape(oc_shape)).astype(w.dtype))
    b = conv.bias.numpy().reshape(-1) if conv.bias is not None else np.zeros_like(mean)
    conv.bias = Parameter(((b - mean) * factor + beta).reshape(1, -1, 1, 1).astype(np.float32))


def _fuse_conv_bn(graph: InternalGraph) -> int:
    calls: dict[int, int] = {}
    for e in graph._exprs:
        owner = _module_call(e, Conv2d)
        if owner is not None:
            calls[id(owner)] = calls.get(id(owner), 0) + 1
    fused = 0
    for e in list(graph._exprs):
        bn = _module_call(e, BatchNorm2d)
        if bn is None or bn.training or not bn.track_running_stats or len(e.inputs) != 2:
            continue
        inp = e.inputs[1]
        conv_expr = inp.expr
        conv = _module_call(conv_expr, Conv2d) if conv_expr is not None else None
        if conv is None or calls.get(id(conv)) != 1 or len(inp.users) != 1 or len(e.outputs) != 1:
            continue  # the convolution's result (or the module) is used elsewhere: folding would change it
        _fold(conv, bn)  # type: ignore[arg-type]
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
        if name in _NOT_PROVIDED:
            raise TracedModuleError(
                f"optimize: pass {name!r} ({_NOT_PROVIDED[name]}) is not provided by xmge; available: "
                f"{', '.join(PASSES)}"
            )
        if name not in PASSES:
            raise TracedModuleError(f"optimize: unknown pass {name!r}; available: {', '.join(PASSES)}")
    out = copy.deepcopy(module)
    if "FuseConvBn" in names:
        for g in [out.graph, *out.graph._subgraphs()]:
            _fuse_conv_bn(g)
    return out
