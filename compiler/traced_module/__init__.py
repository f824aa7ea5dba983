"""MegEngine's ``traced_module``: ``trace_module`` records a Module's forward as a graph of
module/function-level expressions; the resulting ``TracedModule`` is a Module that replays it,
saves to ``.tm`` files with ``compiler.save`` and loads back with the default (restricted)
``compiler.load``. ``load_megengine_tm`` rebuilds MegEngine's own ``.tm`` files without megengine."""

from compiler.traced_module.expr import Apply, CallFunction, CallMethod, Constant, Expr, GetAttr, Input
from compiler.traced_module.megengine_tm import MegEngineTMError, load_megengine_tm
from compiler.traced_module.node import ModuleNode, Node, TensorNode
from compiler.traced_module.policy import TracedModuleError
from compiler.traced_module.traced_module import InternalGraph, TracedModule, trace_module

__all__ = [
    "Apply",
    "CallFunction",
    "CallMethod",
    "Constant",
    "Expr",
    "GetAttr",
    "Input",
    "InternalGraph",
    "ModuleNode",
    "Node",
    "TensorNode",
    "TracedModule",
    "TracedModuleError",
    "MegEngineTMError",
    "load_megengine_tm",
    "trace_module",
]
