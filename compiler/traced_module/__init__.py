"""MegEngine's ``traced_module``: ``trace_module`` records a Module's forward as a graph of
module/function-level expressions; the resulting ``TracedModule`` is a Module that replays it, can
be edited in place (graph surgery: ``insert_exprs``, ``replace_node``, ``compile``, ``flatten``,
watch and end points), saves to ``.tm`` files with ``compiler.save`` and loads back with the
default (restricted) ``compiler.load``. ``load_megengine_tm`` rebuilds MegEngine's own ``.tm``
files without megengine."""

from compiler.traced_module.expr import (
    Apply,
    CallFunction,
    CallMethod,
    Constant,
    Expr,
    GetAttr,
    Input,
    is_apply_def,
    is_call_function,
    is_call_module,
    is_call_tensor_method,
    is_constant,
    is_getattr,
    is_input,
)
from compiler.traced_module.filters import ExprFilter, NodeFilter
from compiler.traced_module.megengine_tm import MegEngineTMError, load_megengine_tm
from compiler.traced_module.node import ModuleNode, Node, TensorNode
from compiler.traced_module.optimization import optimize
from compiler.traced_module.policy import (
    TracedModuleError,
    disable_default_checker,
    enable_expr_checker,
    register_as_builtin,
    wrap,
)
from compiler.traced_module.pytree import register_supported_type
from compiler.traced_module.traced_module import InternalGraph, TracedModule, trace_module

__all__ = [
    "Apply",
    "CallFunction",
    "CallMethod",
    "Constant",
    "Expr",
    "ExprFilter",
    "NodeFilter",
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
    "optimize",
    "disable_default_checker",
    "enable_expr_checker",
    "register_as_builtin",
    "register_supported_type",
    "wrap",
    "is_apply_def",
    "is_call_function",
    "is_call_module",
    "is_call_tensor_method",
    "is_constant",
    "is_getattr",
    "is_input",
]
