"""``Module``: MegEngine's container of parameters, buffers and sub-modules."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from compiler.core import XmgeError
from compiler.tensor import Parameter, Tensor

_scope: list[str] = []  # full names of the modules being called, innermost last


def current_scope() -> str:
    return _scope[-1] if _scope else ""


class StateDictError(XmgeError, KeyError):
    """``load_state_dict`` found missing, unexpected or mis-shaped keys."""

    def __str__(self) -> str:
        return str(self.args[0])


class Module:
    """Base class of layers and models. Attributes that are Tensors, Modules, or lists/tuples/dicts of
    them are discovered by name, in sorted order, as MegEngine does."""

    def __init__(self, name: str | None = None) -> None:
        self.training = True
        self.name = name
        self._forward_hooks: list[Callable[..., Any]] = []
        self._short_name: str | None = None
        self._full_name: str = ""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _scope.append(self._full_name)
        try:
            out = self.forward(*args, **kwargs)
        finally:
            _scope.pop()
        for hook in self._forward_hooks:
            result = hook(self, args, out)
            if result is not None:
                out = result
        return out

    def register_forward_hook(self, hook: Callable[..., Any]) -> Callable[[], None]:
        self._forward_hooks.append(hook)
        return lambda: self._forward_hooks.remove(hook)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if not name.startswith("_") and isinstance(value, Module | list | tuple | dict):
            if isinstance(value, Module):
                value._short_name = name
            if "_full_name" in vars(self):
                self._assign_names()

    def _assign_names(self, prefix: str | None = None) -> None:
        base = self._full_name if prefix is None else prefix
        for key, child in self._flatten_items(Module):
            child._full_name = f"{base}.{key}" if base else key
            child._assign_names()

    # -- discovery ------------------------------------------------------------------------------
    def _flatten_items(self, kind: type) -> Iterator[tuple[str, Any]]:
        for key in sorted(k for k in vars(self) if not k.startswith("_")):
            yield from _flatten(key, vars(self)[key], kind)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from self._flatten_items(Module)

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str | None = None) -> Iterator[tuple[str, Module]]:
        base = prefix or ""
        yield base, self
        for key, child in self.named_children():
            yield from child.named_modules(f"{base}.{key}" if base else key)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def _named_tensors(self, predicate: Callable[[Tensor], bool], prefix: str | None, recursive: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        modules = self.named_modules(prefix) if recursive else iter([(prefix or "", self)])
        for mod_name, mod in modules:
            for key, t in mod._flatten_items(Tensor):
                if predicate(t) and id(t) not in seen:
                    seen.add(id(t))
                    yield (f"{mod_name}.{key}" if mod_name else key), t

    def named_parameters(self, prefix: str | None = None, recursive: bool = True) -> Iterator[tuple[str, Parameter]]:
        yield from self._named_tensors(lambda t: isinstance(t, Parameter), prefix, recursive)  # type: ignore[misc]

    def parameters(self, recursive: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recursive=recursive):
            yield p

    def named_buffers(self, prefix: str | None = None, recursive: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_tensors(lambda t: not isinstance(t, Parameter), prefix, recursive)

    def buffers(self, recursive: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recursive=recursive):
            yield b

    def named_tensors(self, prefix: str | None = None, recursive: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_tensors(lambda t: True, prefix, recursive)

    # -- modes ------------------------------------------------------------------------------------
    def train(self, mode: bool = True, recursive: bool = True) -> Module:
        for m in self.modules() if recursive else [self]:
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def apply(self, fn: Callable[[Module], Any]) -> None:
        for m in self.modules():
            fn(m)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self, rst: dict[str, Any] | None = None, prefix: str = "", keep_var: bool = False) -> OrderedDict[str, Any]:
        out: OrderedDict[str, Any] = OrderedDict() if rst is None else rst  # type: ignore[assignment]
        for name, t in sorted(self.named_tensors(), key=lambda kv: kv[0]):
            out[prefix + name] = t if keep_var else t.numpy()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any] | Callable[[str, Tensor], Any], strict: bool = True) -> None:
        own = dict(self.named_tensors())
        if callable(state_dict) and not isinstance(state_dict, Mapping):
            for name, t in own.items():
                value = state_dict(name, t)
                if value is not None:
                    t._reset(_as_array(value))
            return
        missing = sorted(k for k in own if k not in state_dict)
        unexpected = sorted(k for k in state_dict if k not in own)
        mis_shaped = []
        for k in sorted(own):
            if k in state_dict:
                v = _as_array(state_dict[k])
                if tuple(v.shape) != own[k].shape:
                    mis_shaped.append(f"{k}: expected {own[k].shape}, got {tuple(v.shape)}")
        problems = []
        if mis_shaped:
            problems.append("mis-shaped keys: " + "; ".join(mis_shaped))
        if strict and missing:
            problems.append("missing keys: " + ", ".join(missing))
        if strict and unexpected:
            problems.append("unexpected keys: " + ", ".join(unexpected))
        if problems:
            raise StateDictError(f"load_state_dict for {type(self).__name__} failed: " + " | ".join(problems))
        for k, t in own.items():
            if k in state_dict:
                t._reset(_as_array(state_dict[k]).astype(t.dtype))

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for key, child in self.named_children():
            lines.append(f"  ({key}): " + repr(child).replace("\n", "\n  "))
        return "\n".join(lines) + ")" if len(lines) > 1 else f"{type(self).__name__}({self._extra_repr()})"

    def _extra_repr(self) -> str:
        return ""


def _as_array(value: Any) -> np.ndarray:
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def _flatten(key: str, value: Any, kind: type) -> Iterable[tuple[str, Any]]:
    if isinstance(value, kind):
        yield key, value
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _flatten(f"{key}.{i}", v, kind)
    elif isinstance(value, dict):
        for k in sorted(value, key=str):
            yield from _flatten(f"{key}.{k}", value[k], kind)
