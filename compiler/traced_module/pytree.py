"""Argument structures as plain data: which leaves are tensors and which are constants.

A spec is a nested tuple whose first item is a tag, so that it pickles as builtins only (the default
restricted loader rebuilds it without any extra allow-listed class):

* ``("leaf",)``: a Tensor (an expression input or output)
* ``("const", value)``: anything else, kept as is
* ``("tuple", *children)``, ``("list", *children)``, ``("dict", keys, *children)``
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Spec = tuple[Any, ...]

LEAF: Spec = ("leaf",)


def flatten(value: Any, is_leaf: Callable[[Any], bool]) -> tuple[list[Any], Spec]:
    """``value``'s leaves in depth-first order and its spec."""
    leaves: list[Any] = []
    return leaves, _flatten(value, is_leaf, leaves)


def _flatten(value: Any, is_leaf: Callable[[Any], bool], leaves: list[Any]) -> Spec:
    if is_leaf(value):
        leaves.append(value)
        return LEAF
    # exact types only: a namedtuple or an OrderedDict subclass would come back as its base type
    if type(value) is tuple:
        return ("tuple", *(_flatten(v, is_leaf, leaves) for v in value))
    if type(value) is list:
        return ("list", *(_flatten(v, is_leaf, leaves) for v in value))
    if type(value) is dict:
        keys = tuple(value)
        return ("dict", keys, *(_flatten(value[k], is_leaf, leaves) for k in keys))
    return ("const", value)


def unflatten(spec: Spec, leaves: Iterator[Any]) -> Any:
    """Rebuild a structure of ``spec`` taking its leaves, in order, from ``leaves``."""
    tag = spec[0]
    if tag == "leaf":
        return next(leaves)
    if tag == "const":
        return spec[1]
    if tag == "tuple":
        return tuple(unflatten(s, leaves) for s in spec[1:])
    if tag == "list":
        return [unflatten(s, leaves) for s in spec[1:]]
    if tag == "dict":
        keys = spec[1]
        return {k: unflatten(s, leaves) for k, s in zip(keys, spec[2:], strict=True)}
    raise ValueError(f"unknown argument spec tag {tag!r}")


def num_leaves(spec: Spec) -> int:
    tag = spec[0]
    if tag == "leaf":
        return 1
    if tag == "const":
        return 0
    return sum(num_leaves(s) for s in spec[2 if tag == "dict" else 1 :])


def same_spec(a: Spec, b: Spec) -> bool:
    """Structural equality; constants compare with ``==`` and anything that cannot is unequal."""
    if a[0] != b[0] or len(a) != len(b):
        return False
    if a[0] == "leaf":
        return True
    if a[0] == "const":
        try:
            return type(a[1]) is type(b[1]) and bool(a[1] == b[1])
        except Exception:  # e.g. numpy arrays: ambiguous truth value
            return a[1] is b[1]
    if a[0] == "dict" and a[1] != b[1]:
        return False
    start = 2 if a[0] == "dict" else 1
    return all(same_spec(x, y) for x, y in zip(a[start:], b[start:], strict=True))


def format_spec(spec: Spec, leaves: Iterator[str]) -> str:
    """Text of a structure with leaf names taken from ``leaves`` (constants as ``str``, as MegEngine
    prints them: ``nn.avg_pool2d(x, 4, None, 0, average_count_exclude_padding, )``)."""
    tag = spec[0]
    if tag == "leaf":
        return next(leaves)
    if tag == "const":
        return str(spec[1])
    if tag == "tuple":
        items = [format_spec(s, leaves) for s in spec[1:]]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if tag == "list":
        return "[" + ", ".join(format_spec(s, leaves) for s in spec[1:]) + "]"
    keys = spec[1]
    return (
        "{" + ", ".join(f"{k!r}: {format_spec(s, leaves)}" for k, s in zip(keys, spec[2:], strict=True)) + "}"
    )


def format_call_args(spec: Spec, leaves: Iterator[str]) -> str:
    """``a, b, k=v, `` for the spec of an ``(args, kwargs)`` pair (MegEngine's trailing comma)."""
    assert spec[0] == "tuple" and len(spec) == 3, spec
    args, kwargs = spec[1], spec[2]
    parts = [format_spec(s, leaves) + ", " for s in args[1:]]
    parts += [f"{k}={format_spec(s, leaves)}, " for k, s in zip(kwargs[1], kwargs[2:], strict=True)]
    return "".join(parts)


def drop_leaf(spec: Spec, index: int) -> Spec:
    """``spec`` without its ``index``-th leaf (depth-first order): the item holding it is removed
    from its tuple, list or dict."""
    dropped, remaining = _drop(spec, [index])
    if not dropped:
        raise IndexError(f"spec has no leaf {index}")
    return remaining


def _drop(spec: Spec, counter: list[int]) -> tuple[bool, Spec]:
    tag = spec[0]
    if tag == "leaf":
        counter[0] -= 1
        return counter[0] == -1, spec
    if tag == "const":
        return False, spec
    start = 2 if tag == "dict" else 1
    children = list(spec[start:])
    for i, child in enumerate(children):
        if child[0] == "leaf" and counter[0] == 0:
            keys = spec[1][:i] + spec[1][i + 1 :] if tag == "dict" else None
            rest = tuple(children[:i] + children[i + 1 :])
            return True, ((tag, keys, *rest) if tag == "dict" else (tag, *rest))
        dropped, new_child = _drop(child, counter)
        if dropped:
            children[i] = new_child
            return True, (spec[:start] + tuple(children))
    return False, spec
