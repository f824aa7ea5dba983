"""``save``/``load`` with MegEngine's signature, plus two safety properties MegEngine lacks.

* ``load`` is safe on untrusted files by default. A pickle is a program: every class or function
  it names is called while loading (``os.system`` included). The default unpickler therefore only
  resolves an allow-list of names that rebuild data: numpy arrays, dtypes and scalars,
  ``collections.OrderedDict``, a few builtin containers, and xmge's ``Tensor``/``Parameter``. That is
  all a ``state_dict`` or a MegEngine checkpoint needs. Anything else, e.g. a whole pickled model of
  a user class, is refused with an error naming it; loading one takes an explicit opt-in,
  ``allowed_classes=[MyNet]`` or ``trusted=True``.
* ``save`` to a path is atomic: the pickle goes to a temporary file that replaces the target only
  once it is complete, so an exception (or a crash) mid-write leaves an earlier file intact.
"""

from __future__ import annotations

import _compat_pickle
import collections
import copyreg
import importlib
import io
import os
import pickle
import tempfile
from collections.abc import Iterable
from typing import IO, Any

import numpy as np

from compiler.core import XmgeError

DEFAULT_PROTOCOL = pickle.DEFAULT_PROTOCOL


class UnsafePickleError(XmgeError, pickle.UnpicklingError):
    """``load`` refused a pickle that names something outside its allow-list; nothing of it ran."""


def atomic_write(path: str | os.PathLike[str], write: Any, mode: str = "wb") -> None:
    """Call ``write(file)`` on a temporary file beside ``path`` and rename it over ``path`` only
    when ``write`` succeeded, so a failure leaves any earlier file intact."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".xmge-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save(
    obj: Any,
    f: str | os.PathLike[str] | IO[bytes],
    pickle_module: Any = pickle,
    pickle_protocol: int = DEFAULT_PROTOCOL,
) -> None:
    """Pickle ``obj`` to a path (atomically) or a binary file object."""
    if isinstance(f, str | os.PathLike):
        atomic_write(f, lambda fh: pickle_module.dump(obj, fh, protocol=pickle_protocol))
    else:
        pickle_module.dump(obj, f, protocol=pickle_protocol)


# ----------------------------------------------------------------------------------------------
# The restricted unpickler


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    # protocol-2 pickles of numpy arrays carry their bytes as `_codecs.encode(str, "latin1")`;
    # only that use is let through, not arbitrary codecs
    if encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(f"xmge.load: refusing _codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


def _safe_globals() -> dict[tuple[str, str], Any]:
    from compiler.tensor import Parameter, Tensor

    core = getattr(np, "_core", None) or np.core  # numpy 2 moved numpy.core to numpy._core
    table: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("builtins", "set"): set,
        ("builtins", "frozenset"): frozenset,
        ("builtins", "complex"): complex,
        ("builtins", "slice"): slice,
        ("builtins", "range"): range,
        ("builtins", "bytearray"): bytearray,
        # protocols 0 and 1 rebuild plain objects as _reconstructor(cls, object, state); cls is
        # itself resolved through this table, so this admits nothing new
        ("copyreg", "_reconstructor"): copyreg._reconstructor,
        ("builtins", "object"): object,
        ("compiler.tensor", "Tensor"): Tensor,
        ("compiler.tensor", "Parameter"): Parameter,
    }
    # arrays and scalars are pickled under numpy.core (numpy 1, MegEngine's files) or numpy._core
    for package in ("numpy.core", "numpy._core"):
        table[(f"{package}.multiarray", "_reconstruct")] = core.multiarray._reconstruct
        table[(f"{package}.multiarray", "scalar")] = core.multiarray.scalar
        if hasattr(core.numeric, "_frombuffer"):
            table[(f"{package}.numeric", "_frombuffer")] = core.numeric._frombuffer
    return table


_SAFE: dict[tuple[str, str], Any] | None = None


def _class_key(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__qualname__


def _refusal(module: str, name: str) -> UnsafePickleError:
    hint = ""
    if module.split(".")[0] == "megengine":
        hint = (
            " This looks like a file saved by MegEngine itself: compiler.traced_module.load_megengine_tm"
            "(path) reads MegEngine's .tm files without running code, and state dicts and checkpoints "
            "of plain arrays load as they are."
        )
    return UnsafePickleError(
        f"xmge.load: refusing to load '{module}.{name}', which the file names to be called while "
        "loading. By default load only rebuilds numpy arrays and dtypes, plain containers and scalars, "
        "and xmge Tensor/Parameter, so an untrusted file cannot run code. Loading anything else, such "
        "as a whole pickled model of a user Module class, needs an explicit opt-in: "
        f"load(f, allowed_classes=['{module}.{name}']) (or the class object) if it is a class you "
        "trust, or load(f, trusted=True) for a file you trust as much as code. Nothing from the file "
        "was executed." + hint
    )


class _RestrictedFinder:
    """Resolves the names a pickle asks for, against the allow-list only; never imports what a file
    names, except xmge's own Module classes once the caller has opted in to loading modules."""

    def __init__(self, allowed_classes: Iterable[type | str]) -> None:
        global _SAFE
        if _SAFE is None:
            _SAFE = _safe_globals()
        self.extra: dict[tuple[str, str], Any] = {}
        self.extra_names: set[tuple[str, str]] = set()
        for cls in allowed_classes:
            if isinstance(cls, str):
                module, _, name = cls.rpartition(".")
                self.extra_names.add((module, name))
            elif isinstance(cls, type):
                self.extra[_class_key(cls)] = cls
            else:
                raise TypeError(f"allowed_classes takes classes or 'module.Name' strings, got {cls!r}")
        self.modules_opted_in = bool(self.extra or self.extra_names)
        self.traced_module_seen = False

    def find(self, module: str, name: str) -> Any:
        assert _SAFE is not None
        # overriding find_class skips pickle's own renaming of Python 2 names (protocols 0-2)
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        key = (module, name)
        if key in _SAFE:
            return _SAFE[key]
        # a TracedModule (.tm) loads by default: its graph classes are data, replays only call
        # allow-listed xmge functions, and built-in layers become loadable once such a class is named
        from compiler.traced_module.policy import loadable_classes

        graph_classes, layer_classes = loadable_classes()
        if key in graph_classes:
            self.traced_module_seen = True
            return graph_classes[key]
        if self.traced_module_seen and key in layer_classes:
            return layer_classes[key]
        if key in self.extra:
            return self.extra[key]
        if key in self.extra_names or (self.modules_opted_in and module.split(".")[0] == "compiler"):
            return self._import_class(module, name, explicitly_allowed=key in self.extra_names)
        raise _refusal(module, name)

    def _import_class(self, module: str, name: str, *, explicitly_allowed: bool) -> Any:
        from compiler.module.module import Module

        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        # xmge's own code is only loadable as Module classes (a layer of the opted-in model), never
        # as a function; an explicitly allowed name must at least be a class
        if not isinstance(obj, type) or (not explicitly_allowed and not issubclass(obj, Module)):
            raise _refusal(module, name)
        return obj


def _restricted_unpickler(pickle_module: Any) -> type:
    base = getattr(pickle_module, "Unpickler", None)
    if not (isinstance(base, type) and issubclass(base, pickle.Unpickler | pickle._Unpickler)):
        raise XmgeError(
            f"xmge.load: pickle_module {getattr(pickle_module, '__name__', pickle_module)!r} has no "
            "Unpickler the restricted loader can build on; pass trusted=True if you trust the file"
        )

    class RestrictedUnpickler(base):  # type: ignore[misc, valid-type]
        finder: _RestrictedFinder

        def find_class(self, module: str, name: str) -> Any:
            return self.finder.find(module, name)

    return RestrictedUnpickler


def load(
    f: str | os.PathLike[str] | IO[bytes],
    map_location: Any = None,
    pickle_module: Any = pickle,
    *,
    allowed_classes: Iterable[type | str] = (),
    trusted: bool = False,
) -> Any:
    """Unpickle an object saved by :func:`save` (or by MegEngine's ``save``).

    By default only data is rebuilt (see the module docstring) and anything else raises
    :class:`UnsafePickleError` before it runs. ``allowed_classes`` lets specific classes through
    (a class object or ``"module.Name"``); naming any class also admits xmge's own Module classes,
    so ``load(f, allowed_classes=[MyNet])`` rebuilds a pickled ``MyNet`` made of xmge layers.
    ``trusted=True`` unpickles with no restriction: only for files you would run as code.
    ``map_location`` is accepted for MegEngine compatibility; xmge tensors live on the CPU.
    """
    if isinstance(f, str | os.PathLike):
        with open(f, "rb") as fh:
            return _load(fh, pickle_module, allowed_classes, trusted)
    return _load(f, pickle_module, allowed_classes, trusted)


def _load(fh: IO[bytes], pickle_module: Any, allowed_classes: Iterable[type | str], trusted: bool) -> Any:
    if trusted:
        return pickle_module.load(fh)
    unpickler = _restricted_unpickler(pickle_module)(fh)
    unpickler.finder = _RestrictedFinder(allowed_classes)
    return unpickler.load()


def loads(data: bytes, **kwargs: Any) -> Any:
    """:func:`load` from bytes."""
    return load(io.BytesIO(data), **kwargs)


__all__: list[str] = ["DEFAULT_PROTOCOL", "UnsafePickleError", "atomic_write", "load", "loads", "save"]
