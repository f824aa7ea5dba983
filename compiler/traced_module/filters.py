"""MegEngine's ``ExprFilter`` / ``NodeFilter``: lists of expressions or nodes whose filter methods
chain (``graph.exprs().call_function(F.relu).as_list()``)."""

from __future__ import annotations

import fnmatch
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from compiler.traced_module.expr import CallFunction, CallMethod, GetAttr, function_key, is_call_module
from compiler.traced_module.node import ModuleNode, Node
from compiler.traced_module.policy import TracedModuleError


def _ids(ids: int | Sequence[int]) -> set[int]:
    return {ids} if isinstance(ids, int) else set(ids)


class _Filter(list):  # type: ignore[type-arg]
    def as_list(self) -> list[Any]:
        return list(self)

    def as_dict(self) -> OrderedDict[int, Any]:
        """``{id: item}`` in order."""
        return OrderedDict((item.id, item) for item in self)

    def as_count(self) -> int:
        return len(self)

    def as_unique(self) -> Any:
        if len(self) != 1:
            kind = "expression" if type(self) is ExprFilter else "node"
            raise TracedModuleError(f"expected exactly one {kind}, found {len(self)}: {list(self)}")
        return self[0]


class ExprFilter(_Filter):
    """Expressions with MegEngine's filter helpers."""

    def call_function(self, func: Callable[..., Any] | None = None) -> ExprFilter:
        """``CallFunction`` expressions (of ``func``, e.g. ``F.relu``, if given)."""
        key = None if func is None else function_key(func)
        return ExprFilter(
            e for e in self if isinstance(e, CallFunction) and (key is None or e.func_key == key)
        )

    def call_method(self, method: str | None = None) -> ExprFilter:
        """``CallMethod`` expressions (of ``method``, e.g. ``"__add__"`` or ``"__call__"``, if given)."""
        return ExprFilter(e for e in self if isinstance(e, CallMethod) and method in (None, e.method))

    def call_module(self, module_cls: type | None = None) -> ExprFilter:
        """Calls of a module (an instance of ``module_cls``, e.g. ``M.Conv2d``, if given)."""
        return ExprFilter(e for e in self if is_call_module(e, module_cls))

    def get_attr(self) -> ExprFilter:
        return ExprFilter(e for e in self if isinstance(e, GetAttr))

    def type(self, kind: type) -> ExprFilter:  # noqa: A003 - MegEngine's name
        """Expressions of an expression class (``CallFunction``, ``GetAttr``, ...)."""
        return ExprFilter(e for e in self if isinstance(e, kind))

    def expr_id(self, expr_id: int | Sequence[int]) -> ExprFilter:
        wanted = _ids(expr_id)
        return ExprFilter(e for e in self if e.id in wanted)


class NodeFilter(_Filter):
    """Nodes with MegEngine's filter helpers."""

    def type(self, kind: type) -> NodeFilter:  # noqa: A003 - MegEngine's name
        """Nodes of a node class (``TensorNode``/``ModuleNode``), or, for a Module class, the module
        nodes whose module is one (MegEngine's ``NodeFilter.type(M.Conv2d)``)."""
        if isinstance(kind, type) and issubclass(kind, Node):
            return NodeFilter(n for n in self if isinstance(n, kind))
        return NodeFilter(n for n in self if isinstance(n, ModuleNode) and _is_module_of(n, kind))

    def node_id(self, node_id: int | Sequence[int]) -> NodeFilter:
        wanted = _ids(node_id)
        return NodeFilter(n for n in self if n.id in wanted)

    def name(self, pattern: str, ignorecase: bool = True) -> NodeFilter:
        """Nodes whose full name ``<graph name>_<node name>`` matches a glob ``pattern``."""
        if not isinstance(pattern, str):
            raise TracedModuleError(f"get_node_by_name: the pattern must be a str, got {pattern!r}")
        regex = re.compile(fnmatch.translate(pattern), re.IGNORECASE if ignorecase else 0)
        return NodeFilter(n for n in self if _full_name(n) == pattern or regex.match(_full_name(n)))


def _full_name(node: Node) -> str:
    graph = node.top_graph
    return f"{graph.name}_{node.name}" if graph is not None else node.name


def _is_module_of(node: ModuleNode, kind: type) -> bool:
    if node.owner is not None and isinstance(node.owner, kind):
        return True
    module_type = node.module_type
    return isinstance(module_type, type) and issubclass(module_type, kind)
