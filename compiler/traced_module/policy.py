"""What a traced graph may call when it is replayed.

A loaded ``.tm`` file is data, but replaying it calls functions, methods and ops that its expressions
name. Every such name is resolved here, against fixed lists, so a file can only ask for xmge's own
functional API, a fixed set of Tensor methods, built-in layers and ``mgb`` ops: never an arbitrary
callable, even though the file is loaded by the restricted unpickler.
"""

from __future__ import annotations

import importlib
import types
from enum import Enum
from typing import Any

from compiler.core import XmgeError


class TracedModuleError(XmgeError, ValueError):
    """A traced module cannot be built, replayed or loaded as asked."""


class NameInUseError(TracedModuleError, AssertionError):
    """A node or graph renamed to a name its graph already uses (an AssertionError too, as
    MegEngine checks it with an assertion)."""


# the modules whose public functions CallFunction may name (where their __module__ points)
FUNCTION_MODULES = (
    "compiler.functional",
    "compiler.functional.elemwise",
    "compiler.functional.math",
    "compiler.functional.nn",
    "compiler.functional.tensor",
    "compiler.functional.loss",
    "compiler.functional.quantized",
    "compiler.functional.vision",
    "compiler.functional.metric",
    "compiler.functional.utils",
)


def _is_functional_module(module: str) -> bool:
    """A public module of ``compiler.functional`` (where a function a graph names is defined:
    ``F.nn.instance_norm`` lives in ``compiler.functional.norms``)."""
    parts = module.split(".")
    return parts[:2] == ["compiler", "functional"] and not any(p.startswith("_") for p in parts)

# Tensor methods recorded as CallMethod on a tensor node (and the only ones a graph may call)
TENSOR_METHODS = frozenset(
    """__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__
    __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __lt__ __le__ __gt__ __ge__ __eq__ __ne__
    __and__ __rand__ __or__ __ror__ __xor__ __rxor__ __invert__ __neg__ __abs__ __matmul__
    __rmatmul__ __getitem__ __setitem__ reshape transpose flatten astype sum mean max min prod""".split()
)


# functions registered with ``wrap``: (module, qualname) -> the function, and where to patch its
# name while tracing (the globals of the module that called ``wrap``)
_USER_FUNCTIONS: dict[tuple[str, str], types.FunctionType] = {}
_USER_FUNCTION_SITES: list[tuple[dict[str, Any], str]] = []


def wrap(func: Any) -> Any:
    """Register ``func`` as a built-in function (MegEngine's ``traced_module.wrap``): while
    ``trace_module`` runs, calls to it through the name it has in the module that called ``wrap``
    become one ``CallFunction`` instead of the ops inside it. Call it at the top level of a
    module, or use it as a decorator there. A graph naming a wrapped function replays (or loads)
    only in a process that has wrapped it, so a ``.tm`` file cannot name arbitrary code."""
    import inspect

    if not isinstance(func, types.FunctionType):
        raise TypeError(f"wrap: expected a Python function, got {func!r}")
    caller = inspect.currentframe()
    caller = caller.f_back if caller is not None else None
    if caller is None or caller.f_code.co_name != "<module>":
        raise TracedModuleError("wrap must be called at the top level of a module")
    _USER_FUNCTIONS[(func.__module__, func.__qualname__)] = func
    site = (caller.f_globals, func.__code__.co_name)
    if not any(g is site[0] and n == site[1] for g, n in _USER_FUNCTION_SITES):
        _USER_FUNCTION_SITES.append(site)
    return func


def wrapped_function_sites() -> list[tuple[dict[str, Any], str]]:
    return list(_USER_FUNCTION_SITES)


def resolve_function(module: str, qualname: str) -> Any:
    """The xmge function a CallFunction names, or an error: only public functions of
    ``compiler.functional`` modules and functions registered with ``wrap`` are reachable."""
    user = _USER_FUNCTIONS.get((module, qualname))
    if user is not None:
        return user
    if not _is_functional_module(module) or not qualname.isidentifier() or qualname.startswith("_"):
        raise TracedModuleError(
            f"traced graph names function {module}.{qualname}, which is not xmge functional API"
        )
    fn = getattr(importlib.import_module(module), qualname, None)
    original = getattr(fn, "__wrapped__", fn)  # a tracing wrapper while trace_module runs
    if not isinstance(original, types.FunctionType) or not original.__module__.startswith(
        "compiler.functional"
    ):
        raise TracedModuleError(f"traced graph names {module}.{qualname}, which is not an xmge function")
    return fn


def check_tensor_method(method: str) -> None:
    if method not in TENSOR_METHODS:
        raise TracedModuleError(f"traced graph calls Tensor method {method!r}, which is not allowed")


def check_attr_path(path: str) -> None:
    # GetAttr walks attributes, list indices and dict keys; dunder names would reach Python internals
    if not path or any(not part or part.startswith("__") for part in path.split(".")):
        raise TracedModuleError(f"traced graph reads attribute {path!r}, which is not allowed")


def resolve_op(name: str) -> type:
    """An ``mgb`` op class by name, for ``Apply`` expressions."""
    from dialects import tensor as T

    cls = getattr(T, name, None)
    if not (isinstance(cls, type) and issubclass(cls, T.MgbOp)):
        raise TracedModuleError(f"traced graph applies op {name!r}, which is not an mgb op")
    return cls


def encode_param(value: Any) -> Any:
    """Op parameters as plain data: enum members (dynamic StrEnums, not picklable by reference)
    become ``("enum", EnumName, MEMBER)``."""
    if isinstance(value, Enum):
        return ("enum", type(value).__name__, value.name)
    if isinstance(value, list | tuple):
        return type(value)(encode_param(v) for v in value)
    return value


def decode_param(value: Any) -> Any:
    from dialects import enums

    if isinstance(value, tuple) and len(value) == 3 and value[0] == "enum":
        enum_cls = getattr(enums, value[1], None)
        if not (isinstance(enum_cls, type) and issubclass(enum_cls, Enum)):
            raise TracedModuleError(f"traced graph names enum {value[1]!r}, which is not an mgb enum")
        return enum_cls[value[2]]
    if isinstance(value, list | tuple):
        return type(value)(decode_param(v) for v in value)
    return value


_USER_BUILTINS: set[type] = set()
_default_checker = True


def register_as_builtin(mod_cls: type) -> None:
    """Treat ``mod_cls`` (a Module subclass) as a built-in layer: its calls stay calls in the graph
    instead of being traced into (MegEngine's ``register_as_builtin``). A ``.tm`` holding such a
    call loads only where the class is allowed (``compiler.load(..., allowed_classes=[mod_cls])``)."""
    from compiler.module.module import Module

    if not (isinstance(mod_cls, type) and issubclass(mod_cls, Module)):
        raise TypeError(f"register_as_builtin: expected a Module subclass, got {mod_cls!r}")
    _USER_BUILTINS.add(mod_cls)


def disable_default_checker() -> None:
    """Skip ``trace_module``'s check that the traced module reproduces the eager outputs."""
    global _default_checker
    _default_checker = False


def default_checker_enabled() -> bool:
    return _default_checker


_expr_checker = False


def enable_expr_checker() -> None:
    """Make ``trace_module`` also check, expression by expression, that replaying the traced
    module's top-level graph reproduces each value the eager run computed (the first differing
    node is named)."""
    global _expr_checker
    _expr_checker = True


def expr_checker_enabled() -> bool:
    return _expr_checker


_BUILTIN_CLASSES: frozenset[type] | None = None


def _builtin_classes() -> frozenset[type]:
    """As MegEngine: every Module class that ``module``, ``module.qat`` and ``module.quantized``
    export (but ``Sequential``), and the observers and fake quantizers. Exact classes only: a
    user's subclass is the user's code, traced into."""
    global _BUILTIN_CLASSES
    if _BUILTIN_CLASSES is None:
        import compiler.module as M
        from compiler.module import qat, quantized
        from compiler.module.module import Module
        from compiler.quantization import fake_quant, observer

        found: set[type] = set()
        for namespace in (M, qat, quantized, observer, fake_quant):
            for value in vars(namespace).values():
                if isinstance(value, type) and issubclass(value, Module):
                    found.add(value)
        found.discard(M.Sequential)
        found.discard(Module)
        _BUILTIN_CLASSES = frozenset(found)
    return _BUILTIN_CLASSES


def is_builtin_layer(module: Any) -> bool:
    """Built-in layers stay calls in the graph; everything else (user modules, ``Sequential``, whose
    forward is Python control flow over its children) is traced into a nested TracedModule.
    Observers and fake quantizers, a user's subclasses included, are always calls (as in
    MegEngine: quantization reads their state, never their graph)."""
    from compiler.quantization.fake_quant import _FakeQuantize
    from compiler.quantization.observer import Observer

    if type(module) in _USER_BUILTINS or type(module) in _builtin_classes():
        return True
    return isinstance(module, Observer | _FakeQuantize)


def builtin_layer_classes() -> list[type]:
    return sorted(_builtin_classes(), key=lambda c: (c.__module__, c.__qualname__))


def _family(module: str) -> str:
    parts = module.split(".")
    return "qat" if "qat" in parts else "quantized" if "quantized" in parts else ""


def module_class(type_name: str) -> type | None:
    """The class a ModuleNode's ``type_name`` names, where it is one this package can name safely: a
    built-in layer (xmge's or MegEngine's dotted name: the exact class, else the one of that class
    name in the same family, float/qat/quantized) or ``TracedModule``. ``None`` for user classes,
    which a graph never imports."""
    module, _, cls_name = type_name.rpartition(".")
    packages = ("compiler.module", "megengine.module", "compiler.quantization", "megengine.quantization")
    if module.startswith(packages):
        named = [c for c in _builtin_classes() if c.__name__ == cls_name]
        for cls in named:
            if cls.__module__ == module:
                return cls
        for cls in named:
            if _family(cls.__module__) == _family(module):
                return cls
    if type_name == "compiler.traced_module.traced_module.TracedModule":
        from compiler.traced_module.traced_module import TracedModule

        return TracedModule
    return None


_LOADABLE: tuple[dict[tuple[str, str], type], dict[tuple[str, str], type]] | None = None


def loadable_classes() -> tuple[dict[tuple[str, str], type], dict[tuple[str, str], type]]:
    """What the default restricted ``compiler.load`` admits for ``.tm`` files: the traced-module
    classes, and the built-in layers (only inside a pickle that named one of the former)."""
    global _LOADABLE
    if _LOADABLE is None:
        from compiler.traced_module import expr, node, traced_module

        graph = [
            traced_module.TracedModule,
            traced_module.InternalGraph,
            expr.Input,
            expr.GetAttr,
            expr.CallMethod,
            expr.CallFunction,
            expr.Constant,
            expr.Apply,
            node.ModuleNode,
            node.TensorNode,
        ]
        _LOADABLE = (
            {(c.__module__, c.__qualname__): c for c in graph},
            {(c.__module__, c.__qualname__): c for c in builtin_layer_classes()},
        )
    return _LOADABLE
