"""Graph values: ``ModuleNode`` (a module) and ``TensorNode`` (a tensor), as in MegEngine.

Inside ``graph.insert_exprs()`` a ``TensorNode`` stands for a Tensor (its operators and Tensor
methods record new expressions) and a ``ModuleNode`` for its Module (attribute reads and calls
record ``getattr`` and call expressions). Outside that block they are plain graph data: the same
operations raise an error saying where they are allowed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

import compiler.traced_module.policy as policy

if TYPE_CHECKING:
    from compiler.traced_module.expr import Expr
    from compiler.traced_module.traced_module import InternalGraph


class GraphMember:
    """What nodes and expressions share: an id (unique in the traced module) and the graph that
    holds them."""

    _id: int
    _top_graph: InternalGraph | None

    # MegEngine numbers nodes and expressions from process-wide counters; xmge numbers them per
    # traced module (the graph's ``_total_ids``), so this counter is only what code reads back
    _next_id_hint = 0

    @property
    def id(self) -> int:
        return self._id

    @classmethod
    def _get_next_id(cls) -> int:
        return cls._next_id_hint

    @classmethod
    def _set_next_id(cls, id: int = 0) -> None:
        if not isinstance(id, int):
            raise TypeError(f"_set_next_id: expected an int, got {type(id).__name__}")
        cls._next_id_hint = id

    @property
    def top_graph(self) -> InternalGraph | None:
        """The graph this node or expression belongs to."""
        return self._top_graph


class Node(GraphMember):
    """A value of a graph: produced by one expression (``expr``), read by its ``users``."""

    _format_spec = ""  # the format graphs and expressions print their nodes in (see __format__)

    def __init__(self, expr: Expr | None, name: str, qualname: str, node_id: int) -> None:
        self.expr = expr
        self.users: list[Expr] = []
        self._name = name
        self._qualname = qualname
        self._id = node_id
        self._top_graph: InternalGraph | None = None

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, new_name: str) -> None:
        """Rename the node; the name must be free in its graph (MegEngine's rule)."""
        graph = self.top_graph
        if graph is None:
            raise policy.TracedModuleError(f"{self._name}: a node outside any graph cannot be renamed")
        graph._rename(self, new_name)

    @property
    def qualname(self) -> str:
        return self._qualname

    def __format__(self, format_spec: str) -> str:
        """MegEngine's node formats: ``i`` prefixes ``%id_``, ``p`` the graph name."""
        format_spec = format_spec or Node._format_spec
        name = self._name or ""
        if format_spec and set(format_spec) <= {"i", "p"}:
            if "p" in format_spec and self._top_graph is not None:
                name = f"{self._top_graph.name}_{name}"
            if "i" in format_spec:
                name = f"%{self._id}_{name}"
            return name
        return name or f"{self._id}"

    def __repr__(self) -> str:
        return format(self, "")


class ModuleNode(Node):
    """A module: ``self`` of a graph or a sub-module read with ``getattr``. ``owner`` is the module it
    stands for (replays look modules up again, so replacing an attribute takes effect); ``type_name``
    is the dotted name of the class it was traced from."""

    def __init__(
        self, expr: Expr | None, name: str, qualname: str, node_id: int, type_name: str, owner: Any = None
    ) -> None:
        super().__init__(expr, name, qualname, node_id)
        self.type_name = type_name
        self.owner = owner

    @property
    def module_type(self) -> type | str:
        """The class of the module, for built-in layers and traced modules; a user class the graph
        does not reference (it is never imported from a file) is given by its dotted name."""
        return policy.module_class(self.type_name) or self.type_name

    def __getattr__(self, name: str) -> Any:
        # only reached for names the node does not have: inside insert_exprs, the module's attribute
        if name.startswith("_") or name in ("owner", "type_name", "expr", "users"):
            raise AttributeError(name)
        from compiler.traced_module.surgery import active_surgery

        session = active_surgery()
        if session is None:
            raise AttributeError(
                f"ModuleNode {self._name!r} has no attribute {name!r} (a module's attributes are "
                "read through the node only inside graph.insert_exprs())"
            )
        return session.module_attr(self, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from compiler.traced_module.surgery import active_surgery

        session = active_surgery()
        if session is None:
            raise TypeError(
                f"ModuleNode {self._name!r} is callable only inside graph.insert_exprs(); call its "
                "owner module to run it"
            )
        return session.call_module(self, args, kwargs)


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

    _value: Any = None  # class default: graphs pickled before nodes held values load unchanged

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def value(self) -> Any:
        """The Tensor bound to this node (MegEngine's ``TensorNode.value``); ``None`` unless set."""
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        self._value = value

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)


def _surgery_method(method: str) -> Any:
    def call(self: TensorNode, *args: Any, **kwargs: Any) -> Any:
        from compiler.traced_module.surgery import active_surgery

        session = active_surgery()
        if session is None:
            raise policy.TracedModuleError(
                f"TensorNode {self._name!r}: Tensor method {method!r} records an expression and is "
                "only available inside graph.insert_exprs()"
            )
        return session.call_tensor_method(self, method, args, kwargs)

    call.__name__ = method
    return call


# TensorNode takes the Tensor methods a graph may call; == and != stay identity (nodes are dict keys)
for _method in sorted(policy.TENSOR_METHODS - {"__eq__", "__ne__"}):
    setattr(TensorNode, _method, _surgery_method(_method))
