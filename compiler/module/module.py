"""``Module``: MegEngine's container of parameters, buffers and sub-modules."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from compiler.core import XmgeError
from compiler.tensor import Parameter, Tensor

# MegEngine's naming scopes: per module being called, its ``name`` or else its short (attribute)
# name, innermost last; None (a module with neither) adds nothing to the joined scope
_scope: list[str | None] = []


def current_scope() -> str:
    """The dotted scope traced operators are named in (``simple.linear`` -> ``simple.linear.ADD``)."""
    return ".".join(s for s in _scope if s is not None)


class StateDictError(XmgeError, KeyError, ValueError):
    """``load_state_dict`` found missing, unexpected or mis-shaped keys. Both a KeyError and a
    ValueError, as MegEngine raises the former for key mismatches and the latter for shapes."""

    def __str__(self) -> str:
        return str(self.args[0])


class HookHandler:
    """What ``register_forward_hook`` / ``register_forward_pre_hook`` return: ``remove()`` (or calling
    it) takes the hook off again."""

    def __init__(self, hooks: list[Callable[..., Any]], hook: Callable[..., Any]) -> None:
        self._hooks, self._hook = hooks, hook
        hooks.append(hook)

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)

    def __call__(self) -> None:
        self.remove()


class Module:
    """Base class of layers and models. Attributes that are Tensors, Modules, or lists/tuples/dicts of
    them are discovered by name, in sorted order, as MegEngine does."""

    def __init__(self, name: str | None = None) -> None:
        # MegEngine's bookkeeping, which its pickles carry: the names of the attributes holding
        # modules (or lists, tuples, dicts), and whether quantize_qat/quantize skip this module
        self._modules: list[str] = []
        self.training = True
        self.quantize_disabled = False
        self.name = name
        self._forward_hooks: list[Callable[..., Any]] = []
        self._forward_pre_hooks: list[Callable[..., Any]] = []
        # MegEngine's automatic naming: the dotted name given when this module was first assigned
        # as an attribute (under its parent's name) and that attribute's key; see _set_name
        self._name: str | None = None
        self._short_name: str | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for pre_hook in list(vars(self).get("_forward_pre_hooks", ())):
            modified = pre_hook(self, args)
            if modified is not None:
                args = modified if isinstance(modified, tuple) else (modified,)
        name = vars(self).get("name")
        _scope.append(name if name is not None else vars(self).get("_short_name"))
        try:
            out = self.forward(*args, **kwargs)
        finally:
            _scope.pop()
        for hook in self._forward_hooks:
            result = hook(self, args, out)
            if result is not None:
                out = result
        return out

    def register_forward_pre_hook(self, hook: Callable[..., Any]) -> HookHandler:
        """``hook(module, inputs)`` runs before ``forward``; what it returns (if not None) replaces the
        inputs (a non-tuple becomes a one-element tuple)."""
        if "_forward_pre_hooks" not in vars(self):
            self._forward_pre_hooks = []
        return HookHandler(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: Callable[..., Any]) -> HookHandler:
        """``hook(module, inputs, outputs)`` runs after ``forward``; what it returns (if not None)
        replaces the outputs."""
        return HookHandler(self._forward_hooks, hook)

    def __setattr__(self, name: str, value: Any) -> None:
        modules = vars(self).get("_modules")
        if name != "_modules" and isinstance(modules, list):
            if isinstance(value, Module | list | tuple | dict):
                if name not in modules:
                    modules.append(name)
            elif name in modules:
                modules.remove(name)
        if isinstance(value, Tensor | Module | list | tuple | dict):
            attrs = vars(self)
            prefix = attrs.get("_name") or attrs.get("name")
            # xmge's own bookkeeping dicts may be keyed by IR values: named by str, never refused
            for key, leaf in _expand_structure(name, value, strict=False):
                _set_name(self, prefix, key, leaf)
        object.__setattr__(self, name, value)

    @property
    def _full_name(self) -> str:
        """The dotted name MegEngine gives this module (``block.conv``), "" for an unassigned one."""
        return vars(self).get("_name") or ""

    # -- discovery (MegEngine's ``Module._flatten``) ------------------------------------------------
    def _flatten_items(
        self, kind: type | tuple[type, ...], strict: bool = False
    ) -> Iterator[tuple[str, Any]]:
        """This module's own attributes of ``kind``: attribute names sorted as strings, lists and
        tuples expanded in order, dicts by sorted key, as MegEngine does. ``strict``: a non-str dict
        key leading to a Tensor or Module is MegEngine's AssertionError (else it is named by str)."""
        attrs = vars(self)
        for key in sorted(attrs):
            for expanded, leaf in _expand_structure(key, attrs[key], strict):
                if isinstance(leaf, kind):
                    yield expanded, leaf

    def _flatten(
        self,
        *,
        recursive: bool = True,
        with_key: bool = False,
        with_parent: bool = False,
        prefix: str | None = None,
        predicate: Callable[[Any], bool] = lambda _: True,
        seen: set[int] | None = None,
    ) -> Iterator[Any]:
        """Depth-first Tensors and Modules that satisfy ``predicate``, each object once: the objects,
        or ``(key, obj)`` with ``with_key``, ``(obj, parent)`` with ``with_parent``, ``(key, obj,
        parent)`` with both (MegEngine's ``Module._flatten``)."""
        if seen is None:
            seen = {id(self)}
        base = "" if prefix is None else prefix + "."
        for key, leaf in self._flatten_items((Tensor, Module), strict=True):
            if id(leaf) in seen:
                continue
            seen.add(id(leaf))
            if predicate(leaf):
                if with_key and with_parent:
                    yield base + key, leaf, self
                elif with_key:
                    yield base + key, leaf
                elif with_parent:
                    yield leaf, self
                else:
                    yield leaf
            if recursive and isinstance(leaf, Module):
                yield from leaf._flatten(
                    recursive=True, with_key=with_key, with_parent=with_parent,
                    prefix=base + key if with_key else None, predicate=predicate, seen=seen,
                )  # fmt: skip

    def named_children(self, **kwargs: Any) -> Iterator[tuple[str, Module]]:
        yield from self._flatten(with_key=True, recursive=False, predicate=_is_module, **kwargs)

    def children(self, **kwargs: Any) -> Iterator[Module]:
        yield from self._flatten(with_key=False, recursive=False, predicate=_is_module, **kwargs)

    def named_modules(self, prefix: str | None = None, **kwargs: Any) -> Iterator[Any]:
        """(dotted key, module) for this module ("" or ``prefix``) and every sub-module;
        ``with_parent=True`` adds each one's parent (None for this module)."""
        head = "" if prefix is None else prefix
        yield (head, self, None) if kwargs.get("with_parent") else (head, self)
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_module, **kwargs)

    def modules(self, **kwargs: Any) -> Iterator[Any]:
        """This module and every sub-module; ``with_parent=True`` gives (module, parent) pairs."""
        yield (self, None) if kwargs.get("with_parent") else self
        yield from self._flatten(with_key=False, predicate=_is_module, **kwargs)

    def named_parameters(
        self, prefix: str | None = None, recursive: bool = True, **kwargs: Any
    ) -> Iterator[tuple[str, Parameter]]:
        kwargs.pop("requires_grad", None)  # MegEngine accepts and ignores it
        yield from self._flatten(
            with_key=True, recursive=recursive, prefix=prefix, predicate=_is_parameter, **kwargs
        )

    def parameters(self, recursive: bool = True, **kwargs: Any) -> Iterator[Parameter]:
        kwargs.pop("requires_grad", None)
        yield from self._flatten(recursive=recursive, predicate=_is_parameter, **kwargs)

    def named_buffers(
        self, prefix: str | None = None, recursive: bool = True, **kwargs: Any
    ) -> Iterator[tuple[str, Tensor]]:
        yield from self._flatten(
            with_key=True, recursive=recursive, prefix=prefix, predicate=_is_buffer, **kwargs
        )

    def buffers(self, recursive: bool = True, **kwargs: Any) -> Iterator[Tensor]:
        yield from self._flatten(recursive=recursive, predicate=_is_buffer, **kwargs)

    def named_tensors(
        self, prefix: str | None = None, recursive: bool = True, **kwargs: Any
    ) -> Iterator[tuple[str, Tensor]]:
        yield from self._flatten(
            with_key=True, recursive=recursive, prefix=prefix, predicate=_is_tensor, **kwargs
        )

    def tensors(self, recursive: bool = True, **kwargs: Any) -> Iterator[Tensor]:
        yield from self._flatten(recursive=recursive, predicate=_is_tensor, **kwargs)

    # -- modes ------------------------------------------------------------------------------------
    def train(self, mode: bool = True, recursive: bool = True) -> Module:
        if not recursive:
            self.training = mode
            return self
        # each module's own train() runs, so overrides (observers pause in eval) take effect
        for m in list(self.modules()):
            m.train(mode, recursive=False)
        return self

    def eval(self) -> Module:
        return self.train(False)

    # -- quantization (MegEngine's ``quantize_qat`` skips disabled sub-trees) --------------------
    quantize_disabled = False

    def disable_quantize(self, value: bool = True) -> Module:
        """Keep this module and its sub-modules in float when ``quantize_qat`` converts a model."""
        for m in self.modules():
            m.quantize_disabled = value
        return self

    def apply(self, fn: Callable[[Module], Any]) -> None:
        for m in self.modules():
            fn(m)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    # -- state ------------------------------------------------------------------------------------
    def state_dict(
        self, rst: dict[str, Any] | None = None, prefix: str = "", keep_var: bool = False
    ) -> OrderedDict[str, Any]:
        """Parameters and buffers by dotted name, in MegEngine's order: a module's own tensors
        (sorted by attribute name) before its sub-modules'. Values are numpy arrays (the Tensors
        themselves with ``keep_var``); normalisation layers report their (1, C, 1, 1) tensors
        flattened to (C,), as MegEngine does."""
        out: OrderedDict[str, Any] = OrderedDict() if rst is None else rst  # type: ignore[assignment]
        for key, t, owner in self._states(prefix):
            if keep_var:
                out[key] = t
            else:
                value = t.numpy()
                out[key] = value.reshape(-1) if owner._FLAT_STATE else value
        return out

    # Normalisation layers keep (1, C, 1, 1) tensors but exchange (C,) arrays in state dicts.
    _FLAT_STATE = False

    def _states(self, prefix: str = "", seen: set[int] | None = None) -> Iterator[tuple[str, Tensor, Module]]:
        """(key, tensor, owning module) in MegEngine's ``state_dict`` order."""
        seen = {id(self)} if seen is None else seen
        submodules = []
        for key, leaf in self._flatten_items((Tensor, Module), strict=True):
            if id(leaf) in seen:
                continue
            seen.add(id(leaf))
            if isinstance(leaf, Tensor):
                yield prefix + key, leaf, self
            else:
                submodules.append((key, leaf))
        for key, sub in submodules:
            yield from sub._states(prefix + key + ".", seen)

    def load_state_dict(
        self, state_dict: Mapping[str, Any] | Callable[[str, Tensor], Any], strict: bool = True
    ) -> None:
        """Copy values into this module's tensors. A mapping must match exactly when ``strict``:
        the error lists every missing, unexpected and mis-shaped key at once. A callable
        ``(key, tensor) -> array | None`` is asked for each key (None skips it)."""
        from compiler.core import user_location

        if isinstance(state_dict, Mapping):
            mapping = state_dict

            def closure(key: str, _: Tensor) -> Any:
                return mapping.get(key)

            provided = set(mapping)
        elif callable(state_dict):
            closure, provided = state_dict, set()
        elif isinstance(state_dict, str | bytes | os.PathLike):
            path = os.fspath(state_dict)
            raise TypeError(
                f"load_state_dict: got the path {path!r}, not a state dict: load the file first, "
                f"model.load_state_dict(compiler.load({path!r})) (at {user_location()})"
            )
        else:
            raise TypeError(
                f"load_state_dict: expected a dict or a callable, got {type(state_dict).__name__} "
                f"(at {user_location()})"
            )
        own = list(self._states())
        updates: list[tuple[Tensor, np.ndarray]] = []
        missing, mis_shaped, bad = [], [], []
        for key, t, owner in own:
            value = closure(key, t)
            if value is None:
                missing.append(key)
                continue
            try:
                arr = _as_array(value)
            except (TypeError, ValueError):
                bad.append(f"{key}: {type(value).__name__} is not an array")
                continue
            if arr.shape != t.shape:
                if owner._FLAT_STATE and arr.size == t.size:
                    arr = arr.reshape(t.shape)  # (C,) from a state dict, (1, C, 1, 1) in the layer
                else:
                    mis_shaped.append(f"{key}: expected {t.shape}, got {arr.shape}")
                    continue
            if arr.dtype.kind not in "biuf":
                bad.append(f"{key}: unsupported dtype {arr.dtype}")
                continue
            updates.append((t, arr))
        unexpected = sorted(provided - {key for key, _, _ in own})
        problems = []
        if mis_shaped:
            problems.append("mis-shaped keys: " + "; ".join(mis_shaped))
        if bad:
            problems.append("bad values: " + "; ".join(bad))
        if strict and missing:
            problems.append("missing keys: " + ", ".join(missing))
        if strict and unexpected:
            problems.append("unexpected keys: " + ", ".join(unexpected))
        if problems:
            # nothing is loaded when anything is wrong, so a failed load leaves the module intact
            raise StateDictError(
                f"load_state_dict for {type(self).__name__} failed: "
                + " | ".join(problems)
                + f" (at {user_location()})"
            )
        for t, arr in updates:
            t._reset(arr.astype(t.dtype))

    def __repr__(self) -> str:
        """MegEngine's form: the class name, the one-line ``_module_info_string`` and the sub-modules
        in the order they were assigned (containers expanded as ``name.key``)."""
        info = self._module_info_string()
        extra_lines = info.split("\n") if info else []
        child_lines = [
            f"({key}): " + repr(child).replace("\n", "\n  ")
            for name, value in vars(self).items()
            if not name.startswith("_")
            for key, child in _expand_modules(name, value)
        ]
        text = type(self).__name__ + "("
        if len(extra_lines) == 1 and not child_lines:
            text += extra_lines[0]
        elif extra_lines or child_lines:
            text += "\n  " + "\n  ".join(extra_lines + child_lines) + "\n"
        return text + ")"

    def _module_info_string(self) -> str:
        """The module's settings on one line, as MegEngine's ``repr`` shows them."""
        return self._extra_repr()

    def _extra_repr(self) -> str:
        return ""


def _expand_modules(prefix: str, value: Any) -> list[tuple[str, Module]]:
    """(dotted key, module) for ``value`` and the modules inside its lists, tuples and dicts (dict
    keys in sorted order), as MegEngine's ``_expand_structure``."""
    if isinstance(value, Module):
        return [(prefix, value)]
    if isinstance(value, list | tuple):
        items: Iterable[tuple[Any, Any]] = enumerate(value)
    elif isinstance(value, dict):
        items = ((k, value[k]) for k in sorted(value, key=str))
    else:
        return []
    return [(f"{prefix}.{key}", m) for k, v in items for key, m in _expand_modules(str(k), v)]


def _as_array(value: Any) -> np.ndarray:
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def _is_module(obj: Any) -> bool:
    return isinstance(obj, Module)


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def _is_parameter(obj: Any) -> bool:
    return isinstance(obj, Parameter)


def _is_buffer(obj: Any) -> bool:
    return isinstance(obj, Tensor) and not isinstance(obj, Parameter)


def _set_name(parent: Module, prefix: str | None, name: str, obj: Tensor | Module) -> None:
    """MegEngine's ``Module.__setattr__`` naming: ``obj`` (a Tensor or Module assigned under key
    ``name``) is named ``prefix.name`` (a Tensor with a name of its own keeps that name as its key),
    a Module's members recursively below it. An object already assigned under another key keeps its
    first name, with MegEngine's warning."""
    if isinstance(obj, Tensor) and obj.name:
        name = obj.name
    full = f"{prefix}.{name}" if prefix else name
    short = getattr(obj, "_short_name", None)
    if short and short != name:
        from compiler.logger import get_logger

        get_logger(__name__).warning(
            "try setting the submodule `%s` to `%s`'s new attribute `%s`, "
            "its name `%s` will remain unchanged",
            short, type(parent), name, short,
        )  # fmt: skip
        return
    if isinstance(obj, Tensor):
        obj._prefix = prefix
        obj._name = full
        obj._short_name = name
        return
    obj._name = full
    obj._short_name = name
    for key, leaf in obj._flatten(recursive=False, with_key=True):
        _set_name(obj, full, key, leaf)


def tensor_var_name(t: Tensor) -> str:
    """The name MegEngine gives ``t``'s var in a traced graph: its own name under the prefix of the
    module it was assigned to (``simple.k``), its module path (``simple.linear.weight``), or ""."""
    prefix = getattr(t, "_prefix", None)
    if t.name:
        return f"{prefix}.{t.name}" if prefix else t.name
    return getattr(t, "_name", None) or ""


def _expand_structure(prefix: str, obj: Any, strict: bool = True) -> list[tuple[str, Any]]:
    """(dotted key, leaf) for each Tensor or Module in ``obj`` (lists and tuples in order, dicts by
    sorted key), as MegEngine's ``_expand_structure``; a dict key that is not a str but leads to a
    Tensor or Module is an AssertionError, as there."""
    if isinstance(obj, Tensor | Module):
        return [(prefix, obj)]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) or all(isinstance(k, int | float) for k in obj):
            keys = sorted(obj)
        else:  # keys of other types (xmge's own bookkeeping dicts, keyed by IR values or nodes)
            keys = sorted(obj, key=str)
        items: Iterable[tuple[Any, Any]] = ((k, obj[k]) for k in keys)
    elif isinstance(obj, list | tuple):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        return []
    out = []
    for key, value in items:
        inner = _expand_structure(str(key), value, strict)
        if inner and strict and not isinstance(key, str):
            raise AssertionError(f"keys for Tensor and Module must be str, error key: {key}")
        out.extend((f"{prefix}.{k}", leaf) for k, leaf in inner)
    return out


def _access_structure(obj: Any, key: str, callback: Callable[[Any, Any, Any], Any] | None = None) -> Any:
    """The object at dotted ``key`` inside ``obj`` (attributes, list/tuple indices, dict keys);
    with ``callback``, ``callback(parent, last_key, object)``."""
    parent, cur, k = None, obj, None
    for k in key.split("."):
        parent = cur
        if isinstance(cur, list | tuple):
            k = int(k)
            cur = cur[k]
        elif isinstance(cur, dict):
            cur = cur[k]
        else:
            cur = getattr(cur, k)
    return cur if callback is None else callback(parent, k, cur)
