"""MegEngine's ``traced_module.utils`` helpers for attribute paths (``"block.0.conv.weight"``) and
for normalising a call's arguments."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from compiler.module.module import Module

__all__ = ["assign_attr", "get_subattr"]


def _convert_kwargs_to_args(
    func: Callable[..., Any] | inspect.FullArgSpec, args: tuple[Any, ...], kwargs: dict[str, Any],
    is_bounded: bool = False,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call's arguments in a canonical form: every positional-or-keyword parameter in
    ``args`` (given by keyword or taking its default), every keyword-only one in ``kwargs`` (with
    defaults filled in), extra keywords kept only if ``func`` takes ``**kwargs``. ``is_bounded``:
    ``func`` is a method and ``args`` leaves out ``self``. Errors are the TypeErrors Python's own
    call would raise."""
    if callable(func):
        func = inspect.unwrap(func)
        name = getattr(func, "__qualname__", "function")
        spec = inspect.getfullargspec(func)
    else:
        name, spec = "function", func
    params = spec.args[1:] if is_bounded else spec.args
    defaults = list(spec.defaults or ())
    kw_defaults = dict(spec.kwonlydefaults or {})
    clash = sorted(set(params[: len(args)]) & set(kwargs))
    if clash:
        raise TypeError(f"{name} got multiple values for argument {', '.join(clash)}")
    new_args = list(args)
    first_default = len(params) - len(defaults)
    for i in range(len(args), len(params)):
        pname = params[i]
        if pname in kwargs:
            new_args.append(kwargs[pname])
        elif i >= first_default:
            new_args.append(defaults[i - first_default])
        else:
            raise TypeError(f"{name} missing required positional arguments: {pname}")
    new_kwargs: dict[str, Any] = {}
    for pname in spec.kwonlyargs:
        if pname in kwargs:
            new_kwargs[pname] = kwargs[pname]
        elif pname in kw_defaults:
            new_kwargs[pname] = kw_defaults[pname]
        else:
            raise TypeError(f"{name} missing required keyword-only argument: {pname}")
    for key, value in kwargs.items():
        if key not in params and key not in spec.kwonlyargs:
            if spec.varkw is None:
                raise TypeError(f"{name} got an unexpected keyword argument {key}")
            new_kwargs[key] = value
    return tuple(new_args), new_kwargs


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
