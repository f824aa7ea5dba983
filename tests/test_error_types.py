"""Every exception class xmge defines derives from ``XmgeError``: one base callers (and the CLI
tools, which print any of them as one line) can catch, as docs/ARCHITECTURE.md promises."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import pytest

from dialects.errors import XmgeError

PACKAGES = ("dialects", "semantics", "passes", "backends", "compiler")


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in PACKAGES:
            package = importlib.import_module(name)
            for info in pkgutil.walk_packages(package.__path__, f"{name}."):
                module = importlib.import_module(info.name)
                for cls_name, cls in inspect.getmembers(module, inspect.isclass):
                    if (
                        issubclass(cls, Exception)
                        and not issubclass(cls, Warning)
                        and cls.__module__ == info.name
                        and not cls_name.startswith("_")  # private control flow, never reaches a user
                    ):
                        found[f"{info.name}.{cls_name}"] = cls
    return [found[k] for k in sorted(found)]


def test_the_walk_finds_the_error_classes() -> None:
    names = {c.__name__ for c in _exception_classes()}
    assert {"MgeFormatError", "InterpreterError", "TargetError", "BuildError", "ShapeInferenceError"} <= names


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_error_class_derives_from_xmge_error(cls: type[BaseException]) -> None:
    assert issubclass(cls, XmgeError), f"{cls.__module__}.{cls.__name__} does not derive from XmgeError"
