"""MegEngine's ``traced_module.utils`` helpers for attribute paths (``"block.0.conv.weight"``)."""

from __future__ import annotations

from typing import Any

from compiler.module.module import Module

__all__ = ["assign_attr", "get_subattr"]


def _step(obj: Any, item: str) -> Any:
    from compiler.traced_module.node import ModuleNode

    nxt = getattr(obj, item)
    if not isinstance(nxt, Module | ModuleNode):
        raise AttributeError(f"`{item}` is not an Module")
    return nxt


def get_subattr(module: Any, target: str) -> Any:
    """The attribute at the dotted path ``target`` below ``module`` (``module`` itself for "")."""
    if target == "":
        return module
    *prefix, name = target.split(".")
    for item in prefix:
        module = _step(module, item)
    return getattr(module, name)


def assign_attr(obj: Any, module: Module, target: str) -> None:
    """Set the attribute at the dotted path ``target`` below ``module`` to ``obj``."""
    *prefix, name = target.split(".")
    for item in prefix:
        module = getattr(module, item)
        if not isinstance(module, Module):
            raise AttributeError(f"`{item}` is not an Module")
    setattr(module, name, obj)
