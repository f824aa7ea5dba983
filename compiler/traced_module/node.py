"""Graph values: ``ModuleNode`` (a module) and ``TensorNode`` (a tensor), as in MegEngine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from compiler.traced_module.expr import Expr


class Node:
    """A value of a graph: produced by one expression (``expr``), read by its ``users``."""

    def __init__(self, expr: Expr | None, name: str, qualname: str, node_id: int) -> None:
        self.expr = expr
        self.users: list[Expr] = []
        self._name = name
        self._qualname = qualname
        self._id = node_id

    @property
    def name(self) -> str:
        return self._name

    @property
    def qualname(self) -> str:
        return self._qualname

    @property
    def id(self) -> int:
        return self._id

    def __repr__(self) -> str:
        return f"%{self._id}_{self._name}"


class ModuleNode(Node):
    """A module: ``self`` of a graph or a sub-module read with ``getattr``. ``owner`` is the module it
    stood for when traced (replays look modules up again, so replacing an attribute takes effect)."""

    def __init__(
        self, expr: Expr | None, name: str, qualname: str, node_id: int, module_type: str, owner: Any = None
    ) -> None:
        super().__init__(expr, name, qualname, node_id)
        self.module_type = module_type
        self.owner = owner


class TensorNode(Node):
    """A tensor, with the shape and dtype it had when traced."""

    def __init__(
        self,
        expr: Expr | None,
        name: str,
        qualname: str,
        node_id: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
    ) -> None:
        super().__init__(expr, name, qualname, node_id)
        self._shape = tuple(int(d) for d in shape)
        self._dtype = np.dtype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype
