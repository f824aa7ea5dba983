"""Tables filled by decorators: a reference kernel per op class, a backward rule per op class or
elementwise mode, an ONNX import handler per ONNX op type. Each table's decorator is
:func:`registering` over it."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

Key = TypeVar("Key", bound=Hashable)
Fn = TypeVar("Fn", bound=Callable[..., Any])


def registering(table: dict[Key, Fn], *keys: Key) -> Callable[[Fn], Fn]:
    """A decorator that files the function it decorates in ``table`` under each of ``keys`` and
    returns it unchanged."""

    def register(fn: Fn) -> Fn:
        for key in keys:
            table[key] = fn
        return fn

    return register


__all__ = ["registering"]
