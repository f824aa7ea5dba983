"""MegEngine's ``utils.naming.AutoNaming``: the module-scope stack that names traced operators.

It is the stack ``compiler.module`` pushes while a module's ``forward`` runs (each module its
``name``, else the attribute key it was first assigned under, so a traced op inside ``layer1.conv``
is named ``layer1.conv.<Kind>``); pushing a scope here names what is traced inside it the same way.
``clear()`` empties the stack (MegEngine code calls it before tracing)."""

from __future__ import annotations

from typing import Any

from compiler.module import module as _module

__all__ = ["AutoNaming"]


class AutoNaming:
    @classmethod
    def clear(cls) -> None:
        _module._scope.clear()

    @classmethod
    def push_scope(cls, scope: str | None) -> None:
        """Enter a scope: what is traced until ``pop_scope`` is named under it (None: no level)."""
        _module._scope.append(scope)

    @classmethod
    def pop_scope(cls) -> str | None:
        if not _module._scope:
            raise IndexError("AutoNaming.pop_scope: no scope was pushed")
        return _module._scope.pop()

    @classmethod
    def get_scope(cls) -> str:
        return _module.current_scope()

    @classmethod
    def gen_name(cls, x: Any) -> str:
        """``scope.name`` for an object with a ``name`` (or its type's name) in the current scope."""
        name = getattr(x, "name", None) or type(x).__name__
        scope = cls.get_scope()
        return f"{scope}.{name}" if scope else name
