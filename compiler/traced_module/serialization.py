"""MegEngine's ``traced_module.serialization``: loaders that rewrite expressions of a saved
TracedModule while it is loaded (to keep old ``.tm`` files working after an API change).

``register_functional_loader(("megengine.functional.nn", "conv2d"))`` (or ``compiler.…``: the two
package names are the same API), ``register_module_loader((module, class_name))``,
``register_tensor_method_loader("astype")`` and ``register_opdef_loader(op_class)`` register a
function that receives each matching expression when a graph is unpickled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "FUNCTIONAL_LOADER",
    "MODULE_LOADER",
    "OPDEF_LOADER",
    "TENSORMETHOD_LOADER",
    "load_apply_expr",
    "load_call_module_expr",
    "load_call_tensor_method_expr",
    "load_functional",
    "register_functional_loader",
    "register_module_loader",
    "register_opdef_loader",
    "register_tensor_method_loader",
]

Loader = Callable[[Any], None]
OPDEF_LOADER: dict[Any, Loader] = {}
FUNCTIONAL_LOADER: dict[tuple[str, str], Loader] = {}
TENSORMETHOD_LOADER: dict[str, Loader] = {}
MODULE_LOADER: dict[tuple[str, str], Loader] = {}


def _canon(key: Any) -> Any:
    """``megengine.x`` and ``compiler.x`` name the same module."""
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
        mod = key[0]
        if mod == "megengine" or mod.startswith("megengine."):
            mod = "compiler" + mod[len("megengine") :]
        return (mod, key[1])
    if isinstance(key, type):
        return _canon((key.__module__, key.__qualname__))
    return key


def _registrar(table: dict[Any, Loader], what: str) -> Callable[..., Callable[[Loader], Loader]]:
    def register(*keys: Any) -> Callable[[Loader], Loader]:
        def callback(loader: Loader) -> Loader:
            for key in keys:
                k = _canon(key)
                if k in table:
                    raise ValueError(f"a {what} loader for {key!r} is already registered")
                table[k] = loader
            return loader

        return callback

    return register


register_opdef_loader = _registrar(OPDEF_LOADER, "opdef")
register_functional_loader = _registrar(FUNCTIONAL_LOADER, "functional")
register_module_loader = _registrar(MODULE_LOADER, "module")
register_tensor_method_loader = _registrar(TENSORMETHOD_LOADER, "tensor method")


def load_functional(expr: Any) -> None:
    loader = FUNCTIONAL_LOADER.get(_canon(expr.func_key))
    if loader is not None:
        loader(expr)


def load_call_module_expr(expr: Any) -> None:
    owner = getattr(expr.inputs[0], "owner", None)
    if owner is not None:
        loader = MODULE_LOADER.get(_canon(type(owner)))
        if loader is not None:
            loader(expr)


def load_call_tensor_method_expr(expr: Any) -> None:
    loader = TENSORMETHOD_LOADER.get(expr.method)
    if loader is not None:
        loader(expr)


def load_apply_expr(expr: Any) -> None:
    op = getattr(expr, "op_cls", None) or getattr(expr, "opdef", None)
    loader = OPDEF_LOADER.get(op) if op is not None else None
    if loader is not None:
        loader(expr)


def run_loaders(exprs: list[Any]) -> None:
    """Apply the registered loaders to a just-unpickled graph's expressions."""
    if not (OPDEF_LOADER or FUNCTIONAL_LOADER or TENSORMETHOD_LOADER or MODULE_LOADER):
        return
    from compiler.traced_module.expr import Apply, CallFunction, CallMethod
    from compiler.traced_module.node import ModuleNode

    for e in list(exprs):
        if isinstance(e, CallFunction):
            load_functional(e)
        elif isinstance(e, CallMethod):
            if isinstance(e.inputs[0], ModuleNode) and e.method == "__call__":
                load_call_module_expr(e)
            else:
                load_call_tensor_method_expr(e)
        elif isinstance(e, Apply):
            load_apply_expr(e)
