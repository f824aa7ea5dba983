"""Argument structures as plain data: which leaves are tensors and which are constants.

A spec is a nested tuple whose first item is a tag, so that it pickles as builtins only (the default
restricted loader rebuilds it without any extra allow-listed class):

* ``("leaf",)``: a Tensor (an expression input or output)
* ``("const", value)``: anything else, kept as is
* ``("tuple", *children)``, ``("list", *children)``, ``("dict", keys, *children)``
* ``("user", (module, qualname), context, *children)``: a container type registered with
  ``register_supported_type`` (its class is named, never stored, and is found again only in the
  registry of the process that loads the spec)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Spec = tuple[Any, ...]

LEAF: Spec = ("leaf",)

# container types registered by users: (module, qualname) -> (type, flatten_fn, unflatten_fn)
_CONTAINERS: dict[tuple[str, str], tuple[type, Callable[[Any], Any], Callable[[list[Any], Any], Any]]] = {}
_CONTAINER_KEYS: dict[type, tuple[str, str]] = {}
# leaf types registered by users: values of these types are graph constants, as any non-tensor is
_LEAF_TYPES: set[type] = set()


def register_supported_type(
    type_: type,
    flatten_fn: Callable[[Any], tuple[list[Any], Any]] | None = None,
    unflatten_fn: Callable[[list[Any], Any], Any] | None = None,
) -> None:
    """Let ``type_`` appear in a traced module's inputs and outputs (MegEngine's
    ``register_supported_type``). With both functions it is a container: ``flatten_fn(obj)``
    returns ``(values, context)`` and ``unflatten_fn(values, context)`` rebuilds it, so tensors
    inside become graph inputs/outputs; without them it is a leaf held as a constant."""
    if not isinstance(type_, type):
        raise TypeError(f"register_supported_type: expected a type, got {type_!r}")
    if (flatten_fn is None) != (unflatten_fn is None):
        raise TypeError("register_supported_type: give both flatten_fn and unflatten_fn, or neither")
    if flatten_fn is None:
        _LEAF_TYPES.add(type_)
        return
    assert unflatten_fn is not None
    key = (type_.__module__, type_.__qualname__)
    _CONTAINERS[key] = (type_, flatten_fn, unflatten_fn)
    _CONTAINER_KEYS[type_] = key


def child_start(tag: str) -> int:
    """Where a spec's children begin after its tag (and keys, or class and context)."""
    return {"dict": 2, "user": 3}.get(tag, 1)


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
    key = _CONTAINER_KEYS.get(type(value))
    if key is not None:
        values, context = _CONTAINERS[key][1](value)
        return ("user", key, context, *(_flatten(v, is_leaf, leaves) for v in values))
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
    if tag == "user":
        entry = _CONTAINERS.get(tuple(spec[1]))
        if entry is None:
            raise ValueError(
                f"argument type {spec[1][0]}.{spec[1][1]} is not registered here "
                "(traced_module.register_supported_type)"
            )
        return entry[2]([unflatten(s, leaves) for s in spec[3:]], spec[2])
    raise ValueError(f"unknown argument spec tag {tag!r}")


def num_leaves(spec: Spec) -> int:
    tag = spec[0]
    if tag == "leaf":
        return 1
    if tag == "const":
        return 0
    return sum(num_leaves(s) for s in spec[child_start(tag) :])


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
    if a[0] in ("dict", "user") and a[1] != b[1]:
        return False
    if a[0] == "user" and not same_spec(("const", a[2]), ("const", b[2])):
        return False
    start = child_start(a[0])
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
    if tag == "user":
        return f"{spec[1][1]}(" + ", ".join(format_spec(s, leaves) for s in spec[3:]) + ")"
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
    start = child_start(tag)
    children = list(spec[start:])
    for i, child in enumerate(children):
        if child[0] == "leaf" and counter[0] == 0:
            if tag == "user":
                raise ValueError(f"cannot remove a value from a {spec[1][1]} (a registered container)")
            keys = spec[1][:i] + spec[1][i + 1 :] if tag == "dict" else None
            rest = tuple(children[:i] + children[i + 1 :])
            return True, ((tag, keys, *rest) if tag == "dict" else (tag, *rest))
        dropped, new_child = _drop(child, counter)
        if dropped:
            children[i] = new_child
            return True, (spec[:start] + tuple(children))
    return False, spec
