"""The pass registry: every built-in pass keyed by its ``name``, and plugin discovery.

A pass's name lives on its class (``ModulePass.name``); this module only lists the classes.
Third-party passes come from the entry-point group ``xmge.passes`` (the entry point's name is the
pass name, its value the ``ModulePass`` subclass; loaded only when the pass is used) or from a
Python file or module given to ``xmge-opt --load-plugin``. A plugin pass may not reuse the name of
a pass that already exists: that is a :class:`PluginError` naming both.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from types import ModuleType

from xdsl.passes import ModulePass, get_pass_option_infos

from dialects.errors import XmgeError
from passes.canonicalize import MgbCanonicalizePass
from passes.dce import MgbDeadCodeEliminationPass
from passes.inference import INFERENCE_PASSES
from passes.layout import LAYOUT_PASSES
from passes.lowering import LOWERING_PASSES

ENTRY_POINT_GROUP = "xmge.passes"

PassFactory = Callable[[], type[ModulePass]]

BUILTIN_PASSES: tuple[type[ModulePass], ...] = (
    MgbCanonicalizePass,
    MgbDeadCodeEliminationPass,
    *INFERENCE_PASSES,
    *LAYOUT_PASSES,
    *LOWERING_PASSES,
)


class PluginError(XmgeError):
    """A plugin could not be loaded, or it defines a pass whose name is already taken."""


def builtin_passes() -> dict[str, type[ModulePass]]:
    """Name -> class of every pass xmge ships."""
    table: dict[str, type[ModulePass]] = {}
    for cls in BUILTIN_PASSES:
        if cls.name in table:
            raise PluginError(
                f"two built-in passes are named {cls.name!r}: {_origin(table[cls.name])} and {_origin(cls)}"
            )
        table[cls.name] = cls
    return table


def _origin(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def describe(cls: type[ModulePass]) -> str:
    """The first line of the pass's docstring."""
    doc = inspect.getdoc(cls) or ""
    return doc.splitlines()[0] if doc else "(no description)"


def describe_options(cls: type[ModulePass]) -> list[str]:
    """``name: type = default`` per option, in the spelling ``-p`` accepts (``-`` for ``_``)."""
    if not dataclasses.is_dataclass(cls):
        return []
    return [
        f"{info.name.replace('_', '-')}: {info.expected_type.strip(chr(39))}"
        + (f" = {info.default_value}" if info.default_value is not None else "")
        for info in get_pass_option_infos(cls)
    ]


class PassTable:
    """Name -> lazy factory, with the origin of each name for clash messages."""

    def __init__(self) -> None:
        self.factories: dict[str, PassFactory] = {}
        self.origins: dict[str, str] = {}
        self.builtin: set[str] = set()

    def add(self, name: str, factory: PassFactory, origin: str, *, builtin: bool = False) -> None:
        """Register ``name``; a name that is already taken is a :class:`PluginError` naming both."""
        if name in self.factories:
            kind = "built-in" if name in self.builtin else "plugin"
            raise PluginError(
                f"plugin pass {name!r} from {origin} clashes with the {kind} pass {name!r} "
                f"from {self.origins[name]}; rename the plugin pass"
            )
        self.factories[name] = factory
        self.origins[name] = origin
        if builtin:
            self.builtin.add(name)

    def add_class(self, cls: type[ModulePass], origin: str | None = None, *, builtin: bool = False) -> None:
        self.add(cls.name, lambda cls=cls: cls, origin or _origin(cls), builtin=builtin)


def entry_point_passes(table: PassTable, group: str = ENTRY_POINT_GROUP) -> None:
    """Add the passes of installed packages (entry points in ``group``) to ``table``, lazily."""
    for ep in importlib.metadata.entry_points(group=group):
        table.add(ep.name, _entry_point_factory(ep), f"entry point '{ep.name} = {ep.value}' ({group})")


def _entry_point_factory(ep: importlib.metadata.EntryPoint) -> PassFactory:
    def load() -> type[ModulePass]:
        try:
            cls = ep.load()
        except Exception as exc:  # a broken plugin must not look like an xmge bug
            raise PluginError(f"cannot load plugin pass {ep.name!r} ({ep.value}): {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, ModulePass)):
            raise PluginError(f"entry point {ep.name!r} ({ep.value}) is not a ModulePass subclass")
        if cls.name != ep.name:
            raise PluginError(f"entry point {ep.name!r} ({ep.value}) loads a pass named {cls.name!r}")
        return cls

    return load


def import_plugin(spec: str) -> ModuleType:
    """Import ``spec``: a path to a ``.py`` file, or a dotted module name."""
    if spec.endswith(".py") or os.sep in spec:
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise PluginError(f"plugin file {spec} does not exist")
        name = "xmge_plugin_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(path)[0])
        module_spec = importlib.util.spec_from_file_location(name, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise PluginError(f"cannot load plugin {spec}: {type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(spec)
    except Exception as exc:
        raise PluginError(f"cannot import plugin module {spec!r}: {type(exc).__name__}: {exc}") from exc


def plugin_module_passes(module: ModuleType) -> list[type[ModulePass]]:
    """The passes a plugin module offers: its ``PASSES`` list if it has one, else every
    ``ModulePass`` subclass defined in it."""
    declared: Iterable[object] | None = getattr(module, "PASSES", None)
    if declared is None:
        declared = [v for v in vars(module).values() if getattr(v, "__module__", None) == module.__name__]
    found = [c for c in declared if isinstance(c, type) and issubclass(c, ModulePass) and c is not ModulePass]
    if not found:
        raise PluginError(f"plugin {module.__name__} defines no ModulePass subclass (or an empty PASSES)")
    return found


def load_plugin(table: PassTable, spec: str) -> list[str]:
    """Import the plugin ``spec`` and add its passes to ``table``; returns their names."""
    module = import_plugin(spec)
    names = []
    for cls in plugin_module_passes(module):
        table.add_class(cls, f"plugin {spec} ({cls.__qualname__})")
        names.append(cls.name)
    return names
