"""``save``/``load`` with MegEngine's signature and file format, plus safety MegEngine lacks.

* Files are exchanged with MegEngine 1.13 both ways. ``save`` writes ``Tensor``/``Parameter`` in
  MegEngine's own pickle form (``megengine.tensor.Tensor`` rebuilt from ``(array, dtype, device)``)
  and numpy arrays under the ``numpy.core`` names that numpy 1.x and 2.x both resolve (numpy 2 itself
  writes ``numpy._core``, which the numpy 1.2x beside MegEngine lacks). ``load`` takes those files,
  MegEngine's, and the older xmge form back as xmge tensors, honouring ``map_location``.
* ``load`` is safe on untrusted files by default. A pickle is a program: every class or function
  it names is called while loading (``os.system`` included), and its BUILD opcode sets attributes
  on whatever object is on its stack, a class included. The default unpickler therefore resolves
  only an allow-list of names that rebuild data (numpy arrays, dtypes and scalars,
  ``collections.OrderedDict``, a few builtin containers, Tensor/Parameter) and runs every opcode
  that calls or mutates under a check: only allow-listed constructors are called, what they build
  must be an instance, and state is applied only to instances of allow-listed classes, never to a
  class, module or function. Anything else is refused with :class:`UnsafePickleError` naming it;
  loading e.g. a whole pickled model takes an explicit opt-in, ``allowed_classes=[MyNet]`` or
  ``trusted=True``.
* ``save`` to a path is atomic (:func:`atomic_write`): the pickle goes to a temporary file that
  replaces the target only once complete, with the target's permissions (an existing file's mode,
  or the umask's for a new one); temporary files a killed process left behind are removed by the
  next write into the same directory.
"""

from __future__ import annotations

import _compat_pickle
import collections
import dis
import functools
import importlib
import inspect
import io
import math
import os
import pickle
import re
import secrets
import stat
import struct
import time
import types
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import numpy as np

from compiler.core import XmgeError
from dialects import limits

# MegEngine's default (pickle.DEFAULT_PROTOCOL of the Pythons it ships for): readable by all of them
DEFAULT_PROTOCOL = 4


class UnsafePickleError(XmgeError, pickle.UnpicklingError):
    """``load`` refused a pickle that names or does something outside its allow-list; nothing of it ran."""


# ----------------------------------------------------------------------------------------------
# Atomic writes

# Our temporary files: ".xmge-<random>.tmp" (also mkstemp's 8-character names of earlier versions).
# Only names of exactly this form are ever cleaned up.
_TMP_PREFIX, _TMP_SUFFIX = ".xmge-", ".tmp"
_TMP_NAME = re.compile(r"\.xmge-[A-Za-z0-9_]{8,32}\.tmp")
# A temporary file untouched this long belongs to a killed writer (a live one keeps writing to it).
STALE_TMP_SECONDS = 15 * 60


def _current_umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no race-free way to read it elsewhere
    os.umask(mask)
    return mask


def _remove_stale_temporaries(directory: str) -> None:
    """Delete our own temporary files that a killed writer left in ``directory``: our name pattern
    only, regular files owned by this user, not modified for :data:`STALE_TMP_SECONDS`."""
    cutoff = time.time() - STALE_TMP_SECONDS
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not _TMP_NAME.fullmatch(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_mtime > cutoff or (uid is not None and st.st_uid != uid):
                continue
            os.unlink(entry.path)
        except OSError:
            continue  # gone already, or not ours to remove


def _with_user_path(exc: OSError, path: str) -> OSError:
    """The same kind of error, naming the user's path rather than our temporary file."""
    return type(exc)(exc.errno, exc.strerror, path)


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[Any]], Any], mode: str = "wb") -> None:
    """Call ``write(file)`` on a temporary file beside ``path`` and rename it over ``path`` only
    when ``write`` succeeded, so a failure (or a kill) leaves any earlier file intact.

    The result has the permissions a plain ``open(path, "w")`` would give: an existing file keeps
    its mode, a new one gets ``0o666`` less the umask. Stale temporaries of killed writers in the
    same directory are removed first. The project's one atomic writer: use it for every file."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    _remove_stale_temporaries(directory)
    try:
        existing_mode: int | None = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        existing_mode = None
    except OSError as exc:
        raise _with_user_path(exc, path) from None
    while True:
        tmp = os.path.join(directory, f"{_TMP_PREFIX}{secrets.token_hex(8)}{_TMP_SUFFIX}")
        try:
            # 0o666: the kernel applies the umask, as for any new file
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise _with_user_path(exc, path) from None
    try:
        if existing_mode is not None:
            os.chmod(tmp, existing_mode)
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise _with_user_path(exc, path) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ----------------------------------------------------------------------------------------------
# Writing: MegEngine's tensor form and numpy-version-neutral names


def _numpy_core() -> Any:
    return getattr(np, "_core", None) or np.core  # numpy 2 moved numpy.core to numpy._core


class _ForeignClass:
    """A class of another package (MegEngine) that a pickle names; only ever written, never called."""

    def __init__(self, module: str, qualname: str) -> None:
        self.module, self.qualname = module, qualname


_MGE_TENSOR = _ForeignClass("megengine.tensor", "Tensor")
_MGE_PARAMETER = _ForeignClass("megengine.tensor", "Parameter")


def _neutral_numpy_names() -> dict[Any, tuple[str, str]]:
    """The numpy functions arrays and scalars pickle through, under the ``numpy.core`` names that
    numpy 1.x has and numpy 2.x still resolves (without a deprecation warning)."""
    core = _numpy_core()
    names: dict[Any, tuple[str, str]] = {
        core.multiarray._reconstruct: ("numpy.core.multiarray", "_reconstruct"),
        core.multiarray.scalar: ("numpy.core.multiarray", "scalar"),
    }
    if hasattr(core.numeric, "_frombuffer"):  # protocol 5
        names[core.numeric._frombuffer] = ("numpy.core.numeric", "_frombuffer")
    return names


_NEUTRAL_NAMES: dict[Any, tuple[str, str]] | None = None


def _fresh_device_name(t: Any) -> str:
    # MegEngine writes each tensor's device (its logical name) as a string of its own, never a memo
    # reference: a fresh str object each time
    return "".join((t.device.logical_name,))


class _InteropPickler(pickle._Pickler):  # type: ignore[name-defined, misc]
    """The standard pickler, except that Tensors are written as MegEngine writes them and numpy's
    functions under their numpy-1/2-neutral names: the file loads in MegEngine 1.13 as it is."""

    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def save_global(self, obj: Any, name: str | None = None) -> None:
        assert _NEUTRAL_NAMES is not None
        if isinstance(obj, _ForeignClass):
            neutral: tuple[str, str] | None = (obj.module, obj.qualname)
        else:
            neutral = _NEUTRAL_NAMES.get(obj)
        if neutral is None:
            super().save_global(obj, name)
            return
        module, qualname = neutral
        if self.proto >= 4:
            self.save(module)
            self.save(qualname)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + f"{module}\n{qualname}\n".encode("ascii"))
        self.memoize(obj)

    def _save_tensor(self, t: Any) -> None:
        from compiler.tensor import Parameter

        cls = _MGE_PARAMETER if type(t) is Parameter else _MGE_TENSOR
        memo = self.memo.get(id(cls))
        if memo is not None:
            self.write(self.get(memo[0]))
        else:
            self.save_global(cls)
        data = t._data
        # MegEngine's Tensor.__getnewargs__: (numpy(), dtype, device.logical_name)
        self.save((data, data.dtype, _fresh_device_name(t)))
        # protocols 0 and 1 have no NEWOBJ: call the class, Tensor(data, dtype, device), instead
        self.write(pickle.NEWOBJ if self.proto >= 2 else pickle.REDUCE)
        self.memoize(t)
        # MegEngine's __getstate__ is {} (its __setstate__ ignores other keys, so a name rides along)
        self.save({"name": t.name} if t.name else {})
        self.write(pickle.BUILD)


def _interop_pickler_class() -> type:
    global _NEUTRAL_NAMES
    if _NEUTRAL_NAMES is None:
        from compiler.tensor import Parameter, Tensor

        _NEUTRAL_NAMES = _neutral_numpy_names()
        # the base class's table holds its own save_global for functions (numpy's _frombuffer)
        _InteropPickler.dispatch[types.FunctionType] = _InteropPickler.save_global
        _InteropPickler.dispatch[Tensor] = _InteropPickler._save_tensor
        _InteropPickler.dispatch[Parameter] = _InteropPickler._save_tensor
    return _InteropPickler


def dumps(obj: Any, protocol: int = DEFAULT_PROTOCOL) -> bytes:
    """The bytes :func:`save` writes."""
    buf = io.BytesIO()
    _interop_pickler_class()(buf, protocol).dump(obj)
    return buf.getvalue()


def save(
    obj: Any,
    f: str | os.PathLike[str] | IO[bytes],
    pickle_module: Any = pickle,
    pickle_protocol: int = DEFAULT_PROTOCOL,
) -> None:
    """Pickle ``obj`` to a path (atomically) or a binary file object, in a form MegEngine 1.13
    loads as well (with the default ``pickle_module``; another one pickles as it pleases)."""

    def write(fh: IO[bytes]) -> None:
        if pickle_module is pickle:
            _interop_pickler_class()(fh, pickle_protocol).dump(obj)
        else:
            pickle_module.dump(obj, fh, protocol=pickle_protocol)

    if isinstance(f, str | os.PathLike):
        atomic_write(f, write)
    else:
        write(f)


# ----------------------------------------------------------------------------------------------
# The allow-list


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    # protocol-2 pickles carry bytes as `_codecs.encode(str, "latin1")`; only that use is let
    # through, not arbitrary codecs
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(f"xmge.load: refusing _codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


def _plain_reconstructor(cls: Any, base: Any, state: Any) -> Any:
    # protocols 0 and 1 rebuild plain objects as copyreg._reconstructor(cls, object, None); cls is
    # an allow-listed class (the only classes a file can name); other bases run other constructors
    if not isinstance(cls, type) or base is not object or state is not None:
        raise UnsafePickleError(
            "xmge.load: refusing copyreg._reconstructor other than (allowed class, object, None)"
        )
    return object.__new__(cls)


# builtins a state dict or checkpoint may hold (object: protocols 0/1 name it for plain objects)
_SAFE_BUILTINS = (set, frozenset, complex, slice, range, bytearray, object)
# numpy scalar types, which MegEngine's older files pass as a tensor's dtype
_NUMPY_SCALAR_TYPES = (
    "bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 complex64 complex128"
).split()


def _safe_globals() -> dict[tuple[str, str], Any]:
    from compiler.tensor import Parameter, Tensor

    core = _numpy_core()
    table: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("copyreg", "_reconstructor"): _plain_reconstructor,
    }
    for builtin in _SAFE_BUILTINS:
        table[("builtins", builtin.__name__)] = builtin
    # MegEngine's tensors become xmge's (MegEngine's pickle form is rebuilt explicitly below)
    for tensor_module in ("compiler.tensor", "megengine.tensor"):
        table[(tensor_module, "Tensor")], table[(tensor_module, "Parameter")] = Tensor, Parameter
    for name in _NUMPY_SCALAR_TYPES:
        table[("numpy", name)] = getattr(np, name)
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


class _MegEngineTracedModule(Exception):
    """The file is a ``.tm`` written by MegEngine: ``load`` reads it with the TracedModule reader,
    which rebuilds MegEngine's records as data and runs nothing from the file."""


def _refusal(module: str, name: str) -> UnsafePickleError:
    hint = ""
    if module.split(".")[0] == "megengine":
        hint = (
            " This looks like a file saved by MegEngine itself: its state dicts and checkpoints (arrays, "
            "Tensors, Parameters, optimizer states) load as they are, and load reads MegEngine's .tm "
            "files (compiler.traced_module.load_megengine_tm) without running code."
        )
    return UnsafePickleError(
        f"xmge.load: refusing to load '{module}.{name}', which the file names to be called while "
        "loading. By default load only rebuilds numpy arrays and dtypes, plain containers and scalars, "
        "and Tensor/Parameter, so an untrusted file cannot run code. Loading anything else, such "
        "as a whole pickled model of a user Module class, needs an explicit opt-in: "
        f"load(f, allowed_classes=['{module}.{name}']) (or the class object) if it is a class you "
        "trust, or load(f, trusted=True) for a file you trust as much as code. Nothing from the file "
        "was executed." + hint
    )


_IDENTIFIER_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _is_plain_name(module: str, name: str) -> bool:
    """A module path and a class name without dunder parts (``Tensor.__dict__``, ``__builtins__``)."""
    parts = module.split(".") + name.split(".")
    return (
        _IDENTIFIER_PATH.fullmatch(module) is not None
        and _IDENTIFIER_PATH.fullmatch(name) is not None
        and not any(p.startswith("__") and p.endswith("__") for p in parts)
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
        if not isinstance(module, str) or not isinstance(name, str):
            raise UnsafePickleError(
                f"xmge.load: refusing a global named by non-strings ({type(module).__name__}, "
                f"{type(name).__name__}). Nothing from the file was executed."
            )
        # overriding find_class skips pickle's own renaming of Python 2 names (protocols 0-2)
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        key = (module, name)
        if key in _SAFE:
            return _SAFE[key]
        if key == ("megengine.traced_module.traced_module", "TracedModule"):
            raise _MegEngineTracedModule()
        if not _is_plain_name(module, name):
            raise _refusal(module, name)
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

        if module.split(".")[0] == "megengine":
            raise UnsafePickleError(
                f"xmge.load: the file holds an object of MegEngine's own class {module}.{name} (a whole "
                "module pickled by MegEngine), which xmge cannot rebuild: save its state_dict() with "
                "MegEngine and call load_state_dict() on the xmge model, or trace and dump it to .mge. "
                "Nothing from the file was executed."
            )
        try:
            obj: Any = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise UnsafePickleError(
                f"xmge.load: the file names the class {module}.{name}, which cannot be found here "
                f"({type(exc).__name__}: {exc}). Nothing from the file was executed."
            ) from None
        # xmge's own code is only loadable as Module classes (a layer of the opted-in model), never
        # as a function; an explicitly allowed name must at least be a class
        if not isinstance(obj, type) or (not explicitly_allowed and not issubclass(obj, Module)):
            raise _refusal(module, name)
        return obj


# ----------------------------------------------------------------------------------------------
# map_location, as megengine.load documents it

_DEVICE_NAME = re.compile(r"([cxg]pu|rocm|multithread)(x|\d+)(:\d+)?")


def _device_mapper(map_location: Any) -> Callable[[str], str]:
    """MegEngine's ``map_location`` as a function from a saved tensor's device name to the device
    to load it on: None keeps it, a str replaces it, a dict maps its first four characters
    (``{"gpu0": "cpu0"}``), a callable is called with it. xmge tensors all live in host memory,
    so the result is validated (a clear error for a bad mapping) but places nothing elsewhere."""
    if map_location is None:
        return lambda device: device
    if isinstance(map_location, str):
        if not _DEVICE_NAME.fullmatch(map_location):
            raise XmgeError(f"xmge.load: map_location {map_location!r} is not a device name like 'cpu0'")
        return lambda device: map_location
    if isinstance(map_location, dict):
        for key, value in map_location.items():
            for what in (key, value):
                if not (isinstance(what, str) and _DEVICE_NAME.fullmatch(what)):
                    raise XmgeError(
                        f"xmge.load: map_location {{{key!r}: {value!r}}}: {what!r} is not a device name "
                        "like 'gpu0' or 'cpu0'"
                    )
        return lambda device: map_location.get(device[:4], device)
    if callable(map_location):

        def mapped(device: str) -> str:
            result = map_location(device)
            if not (isinstance(result, str) and _DEVICE_NAME.fullmatch(result)):
                raise XmgeError(
                    f"xmge.load: map_location({device!r}) returned {result!r}, not a device name like 'cpu0'"
                )
            return result

        return mapped
    raise XmgeError(
        "xmge.load: map_location must be a device name, a dict or a callable, "
        f"not {type(map_location).__name__}"
    )


# ----------------------------------------------------------------------------------------------
# The restricted unpickler


def _refuse(what: str) -> UnsafePickleError:
    return UnsafePickleError(f"xmge.load: refusing {what}. Nothing from the file was executed.")


def behaviour_attribute(cls: type, key: str) -> str | None:
    """Why restoring instance state named ``key`` onto a ``cls`` would change its behaviour (a dunder,
    or a method, property or other descriptor the class defines), else None. Loaders restore data,
    never behaviour: a file's state that names ``forward`` would otherwise replace the method."""
    if key.startswith("__") and key.endswith("__"):
        return "a special (dunder) name"
    found = inspect.getattr_static(cls, key, _ABSENT)
    if found is _ABSENT:
        return None
    if isinstance(found, staticmethod | classmethod | property) or inspect.isfunction(found):
        return f"{type(found).__name__} {cls.__name__}.{key}"
    if hasattr(type(found), "__get__") and not isinstance(found, type):
        return f"a descriptor {cls.__name__}.{key}"
    if callable(found):
        return f"the callable class attribute {cls.__name__}.{key}"
    return None


def _stored_attributes(code: types.CodeType) -> Iterator[str]:
    """Attribute names ``code`` (and the functions nested in it) assigns: ``x.name = ...``."""
    for ins in dis.get_instructions(code):
        if ins.opname == "STORE_ATTR":
            yield ins.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _stored_attributes(const)


@functools.cache
def declared_fields(cls: type) -> frozenset[str]:
    """The attribute names ``cls`` declares for its instances: annotations, ``__slots__`` and every
    attribute its own methods (and its bases') assign, ``__init__`` first among them. What a file
    may restore onto an instance besides parameters, buffers and submodules."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        namespace = vars(klass)
        names.update(namespace.get("__annotations__", {}))
        slots = namespace.get("__slots__", ())
        names.update([slots] if isinstance(slots, str) else slots)
        for member in namespace.values():
            funcs: tuple[Any, ...] = (member,)
            if isinstance(member, staticmethod | classmethod):
                funcs = (member.__func__,)
            elif isinstance(member, property):
                funcs = (member.fget, member.fset, member.fdel)
            for fn in funcs:
                code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
                if isinstance(code, types.CodeType):
                    names.update(_stored_attributes(code))
    return frozenset(n for n in names if not (n.startswith("__") and n.endswith("__")))


def _holds_code(value: Any, depth: int = 0) -> bool:
    """A class or function in ``value`` (or in its lists, tuples and dicts, a few levels deep): a
    file must not install one where the instance will call it (``_forward_hooks``)."""
    if _is_code_object(value):
        return True
    if depth < 4 and isinstance(value, list | tuple):
        return any(_holds_code(v, depth + 1) for v in value)
    if depth < 4 and isinstance(value, dict):
        return any(_holds_code(v, depth + 1) for v in value.values())
    return False


def _is_module_data(value: Any) -> bool:
    """Parameters, buffers and submodules: what a module holds under names of its caller's choosing
    (``Sequential``'s ``"0"``, a user model's ``conv1``), recognised by their type."""
    from compiler.module.module import Module
    from compiler.tensor import Tensor

    if isinstance(value, list | tuple):
        return len(value) > 0 and all(_is_module_data(v) for v in value)
    if isinstance(value, dict):
        return len(value) > 0 and all(_is_module_data(v) for v in value.values())
    return isinstance(value, Module | Tensor | np.ndarray)


def check_instance_state(
    inst: Any, state: Any, source: str = "xmge.load", *, declared_only: bool = True
) -> None:
    """Refuse (one line, naming the attribute, the class and ``source``: the loader and file) state
    that is not data ``inst``'s class declares. A key that names a method, property, other descriptor,
    dunder or class attribute is refused first; otherwise a key must be a declared field
    (:func:`declared_fields`) or hold parameters, buffers or submodules. ``state`` is a dict (or,
    from callers that check names only, an iterable of keys: those must be declared).
    ``declared_only=False`` checks behaviour only (for keys a loader reads but does not restore)."""
    cls = type(inst)
    items = state.items() if isinstance(state, dict) else ((k, _ABSENT) for k in state)
    for key, value in items:
        why = behaviour_attribute(cls, key) if isinstance(key, str) else "a non-string name"
        if why is None and declared_only and key not in declared_fields(cls) and not _is_module_data(value):
            why = f"not a field {cls.__name__} declares, nor a parameter, buffer or submodule"
        if why is None and _holds_code(value):
            why = "its value holds a class or function (hooks, callbacks): behaviour, not data"
        if why is not None:
            raise UnsafePickleError(
                f"{source}: refusing state that sets attribute {key!r} of {cls.__name__} "
                f"({why}): a file restores data, never methods. Nothing from the file was executed."
            )


_ABSENT = object()


def _is_code_object(obj: Any) -> bool:
    """Classes, modules and functions: what state must never be applied to or returned by a call."""
    return isinstance(
        obj,
        type
        | types.ModuleType
        | types.FunctionType
        | types.BuiltinFunctionType
        | types.MethodType
        | types.MethodWrapperType
        | types.WrapperDescriptorType
        | types.MethodDescriptorType
        | types.ClassMethodDescriptorType
        | types.GetSetDescriptorType
        | types.MemberDescriptorType
        | types.MappingProxyType
        | classmethod
        | staticmethod
        | property,
    )


def _describe(obj: Any) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    return f"a {type(obj).__module__}.{type(obj).__qualname__}"


SIZED_BUILTINS = (bytearray, set, frozenset, complex, slice, range, object)


def builtin_call_bytes(func: Any, args: tuple[Any, ...]) -> int:
    """About how many bytes calling the allow-listed builtin ``func(*args)`` builds. A file can ask
    for huge objects in a few bytes (``bytearray(1 << 34)``, ``set(range(10**9))``): every loader sizes
    such a call under the shared budget before making it."""
    if func not in SIZED_BUILTINS:
        return 0
    nbytes = 0
    for i, arg in enumerate(args):
        if isinstance(arg, bool):
            continue
        if isinstance(arg, int) and func is bytearray:
            nbytes += max(arg, 0)
        elif i == 0 and isinstance(arg, bytes | str) and func is bytearray:
            nbytes += len(arg)  # a copy of data the file carries still counts towards the total
        elif isinstance(arg, range):
            # a set entry costs ~ 8-byte slot x2 plus an int object; a bytearray entry one byte
            nbytes += len(arg) * (1 if func is bytearray else 64)
    return nbytes


def _check_ndarray_state(state: Any) -> None:
    """An ndarray's pickled state ``(version, shape, dtype, is_fortran, data)`` must be consistent
    before numpy applies it: numpy fails half-way on some inconsistent states (a list of objects for
    a float32 array) and leaves an array it cannot even free."""
    if not isinstance(state, tuple) or len(state) not in (4, 5):
        raise _refuse(f"an ndarray state that is a {type(state).__name__}, not a tuple of 4 or 5 items")
    shape, dtype, data = state[-4], state[-3], state[-1]
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise _refuse(f"an ndarray state whose dtype {dtype!r:.60} holds Python objects")
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise _refuse(f"an ndarray state whose shape is {shape!r:.60}")
    if not isinstance(data, bytes | bytearray):
        raise _refuse(f"an ndarray state whose data is a {type(data).__name__}, not bytes")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise _refuse(
            f"an ndarray of shape {shape} and dtype {dtype} with {len(data)} bytes of data, not {expected}"
        )


def _field_ok(f: Any) -> bool:
    return isinstance(f, tuple) and len(f) in (2, 3) and isinstance(f[0], np.dtype) and type(f[1]) is int


def _check_dtype_state(dt: np.dtype, state: Any) -> None:
    """A dtype's pickled state ``(version, byte order, subarray, names, fields, itemsize, alignment,
    flags[, metadata])`` must have that form before numpy applies it: numpy's ``__setstate__`` crashes
    the process on some malformed tuples (a fuzzed state one item short segfaulted). A plain dtype's
    state must be the one numpy writes for it, but for its byte order."""
    if not isinstance(state, tuple) or len(state) not in (8, 9):
        got = f"{len(state)} items" if isinstance(state, tuple) else f"a {type(state).__name__}"
        raise _refuse(f"a numpy dtype state that is not a tuple of 8 or 9 items ({got})")
    version, order, subarray, names, fields, *ints = state[:8]
    well_formed = (
        version in (3, 4)
        and order in ("<", ">", "|", "=")
        and all(type(v) is int for v in ints)
        and (len(state) == 8 or state[8] is None or isinstance(state[8], dict | tuple))
        and (names is None) == (fields is None)
        and (subarray is None or (isinstance(subarray, tuple) and len(subarray) == 2
                                  and isinstance(subarray[0], np.dtype) and isinstance(subarray[1], tuple)))
        and (names is None or (isinstance(names, tuple) and all(type(n) is str for n in names)
                               and isinstance(fields, dict) and set(fields) == set(names)
                               and all(_field_ok(f) for f in fields.values())))
    )  # fmt: skip
    if not well_formed:
        raise _refuse(f"a malformed numpy dtype state ({str(state)[:80]})")
    if subarray is None and names is None and tuple(state[2:8]) != tuple(dt.__reduce__()[2][2:8]):
        raise _refuse(f"a numpy {dt} whose pickled state disagrees with its type ({str(state)[:80]})")


def _check_dtype(dt: np.dtype) -> None:
    """A dtype rebuilt from pickled state must equal the one numpy makes from its own description:
    numpy accepts flags in the state that disagree with the type (a float32 flagged as holding
    objects), and an array of such a dtype cannot be freed."""
    try:
        canonical = np.dtype(dt.descr if dt.fields else dt.str)
        same = canonical == dt and canonical.flags == dt.flags and canonical.itemsize == dt.itemsize
    except (TypeError, ValueError):
        same = False
    if not same:
        raise _refuse(f"a numpy dtype whose pickled state is inconsistent ({dt.str!r:.40}, flags {dt.flags})")


class _SafeUnpickler(pickle._Unpickler):  # type: ignore[name-defined, misc]
    """The standard (pure-Python) unpickler with every opcode that calls or mutates checked.

    Invariant: the only classes and functions on the stack are those :meth:`find_class` handed out
    from the allow-list; calls (REDUCE, NEWOBJ) may only call those, and must build an instance;
    state (BUILD) only goes to instances of handed-out classes (or numpy's arrays and dtypes), with
    plain attribute names. Opcodes no Python 3 pickler of data writes (INST, OBJ, the extension
    registry, persistent ids) are refused outright."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: IO[bytes], finder: _RestrictedFinder, map_device: Callable[[str], str]) -> None:
        super().__init__(file)
        self._file = file
        self._budget = limits.Budget(file=_file_name(file))
        self._finder = finder
        self._map_device = map_device
        self._callables: dict[int, Any] = {}  # id -> the globals handed out (kept alive, so ids stay unique)
        self._classes: list[type] = [np.ndarray, np.dtype, np.generic]
        self._class_tuple: tuple[type, ...] = tuple(self._classes)

    # -- names --------------------------------------------------------------------------------
    def find_class(self, module: str, name: str) -> Any:
        obj = self._finder.find(module, name)
        self._callables[id(obj)] = obj
        if isinstance(obj, type) and obj is not object and obj not in self._classes:
            self._classes.append(obj)
            self._class_tuple = tuple(self._classes)
        return obj

    def persistent_load(self, pid: Any) -> Any:
        raise _refuse(f"a persistent id ({pid!r:.60}): xmge files never reference objects outside the pickle")

    def _load_stack_global(self) -> None:
        name = self.stack.pop()
        module = self.stack.pop()
        if type(name) is not str or type(module) is not str:
            kinds = f"{type(module).__name__}, {type(name).__name__}"
            raise _refuse(f"STACK_GLOBAL of non-string names ({kinds})")
        self.append(self.find_class(module, name))

    def _load_mark(self) -> None:
        # MARK opens a nested tuple/list/dict/set or a call's arguments: its depth is the file's nesting
        limits.check_depth(len(self.metastack) + 1, file=self._budget.file, place=self.place("MARK"))
        pickle._Unpickler.load_mark(self)  # type: ignore[attr-defined]

    def _load_ext(self) -> None:
        raise _refuse("an EXT opcode (a name from copyreg's extension registry)")

    def _load_inst_or_obj(self) -> None:
        raise _refuse("an INST/OBJ opcode (no Python 3 pickler of data writes one)")

    # -- calls --------------------------------------------------------------------------------
    def _check_callable(self, func: Any, opcode: str) -> None:
        if self._callables.get(id(func)) is not func:
            raise _refuse(f"{opcode} calling {_describe(func)}, which is not an allow-listed constructor")

    def _build(self, func: Any, args: Any, opcode: str) -> Any:
        from compiler.tensor import Tensor

        self._check_callable(func, opcode)
        if not isinstance(args, tuple):
            raise _refuse(f"{opcode} with arguments of type {type(args).__name__}")
        if isinstance(func, type) and issubclass(func, Tensor):
            return self._tensor(func, args)
        self._check_size(func, args, opcode)
        if opcode == "NEWOBJ":
            if not isinstance(func, type):
                raise _refuse(f"NEWOBJ of {_describe(func)}, which is not a class")
            result = func.__new__(func, *args)
        else:
            result = func(*args)
        if _is_code_object(result) or (isinstance(func, type) and not isinstance(result, func)):
            raise _refuse(f"{opcode} of {_describe(func)} returning {_describe(result)}")
        return result

    def place(self, opcode: str) -> str:
        try:
            return f"{opcode} before byte {self._file.tell()}"
        except (OSError, AttributeError, ValueError):
            return opcode

    def _check_size(self, func: Any, args: tuple[Any, ...], opcode: str) -> None:
        nbytes = builtin_call_bytes(func, args)
        if nbytes:
            place = self.place(f"{opcode} {func.__name__}()")
            self._budget.add_tensor(nbytes, place=place, what=f"a {func.__name__}")

    def _tensor(self, cls: type, args: tuple[Any, ...]) -> Any:
        """xmge's Tensor from MegEngine's ``(array, dtype, device)`` (empty for xmge's older form,
        whose state then carries the array)."""
        if not args:
            t = cls.__new__(cls)
            t.name, t.grad = "", None
            return t
        data, dtype, device = (list(args) + [None, None])[:3]
        if len(args) > 3 or not isinstance(data, np.ndarray):
            raise _refuse(f"a {cls.__name__} built from {len(args)} arguments, not (array, dtype, device)")
        if device is not None and not isinstance(device, str):
            raise _refuse(f"a {cls.__name__} whose device is a {type(device).__name__}")
        t = _tensor_from(cls, data, dtype)
        _place(t, device, self._map_device)
        return t

    def _load_reduce(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self._build(self.stack[-1], args, "REDUCE")

    def _load_newobj(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self._build(self.stack[-1], args, "NEWOBJ")

    def _load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        if kwargs != {}:
            raise _refuse("NEWOBJ_EX with keyword arguments")
        self.stack[-1] = self._build(self.stack[-1], args, "NEWOBJ")

    # -- state and items ------------------------------------------------------------------------
    def _load_build(self) -> None:
        from compiler.tensor import Tensor

        state = self.stack.pop()
        inst = self.stack[-1]
        if _is_code_object(inst) or not isinstance(inst, self._class_tuple):
            raise _refuse(f"state for {_describe(inst)}: state only goes to instances of allowed classes")
        if isinstance(inst, Tensor):
            _set_tensor_state(inst, state, self._map_device)
            return
        if isinstance(inst, np.ndarray | np.dtype):
            if isinstance(inst, np.ndarray):
                _check_ndarray_state(state)
            else:
                _check_dtype_state(inst, state)
            try:
                inst.__setstate__(state)  # numpy validates the rest of its own state
            except (SystemError, TypeError, ValueError) as exc:  # numpy can fail without a message
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise _refuse(f"malformed state for a numpy {type(inst).__name__} ({why:.80})") from None
            if isinstance(inst, np.dtype):
                _check_dtype(inst)
            if isinstance(inst, np.ndarray):
                # every array counts towards the whole load's total, not only its own size
                self._budget.add_tensor(int(inst.nbytes), place=self.place("BUILD ndarray"), what="an array")
            return
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        for part in (state, slots):
            if part is None:
                continue
            if not isinstance(part, dict) or not all(type(k) is str for k in part):
                raise _refuse(f"state for {_describe(inst)} that is not a dict of plain attribute names")
        for part in (state, slots):
            if part:
                check_instance_state(inst, part, f"xmge.load({self._budget.file}, {self.place('BUILD')})")
        if getattr(type(inst), "__setstate__", None) is not None:
            inst.__setstate__(state if slots is None else (state, slots))
            return
        if state:
            inst.__dict__.update(state)
        for key, value in (slots or {}).items():
            setattr(inst, key, value)

    def _target(self, kind: type, opcode: str) -> Any:
        target = self.stack[-1]
        if not isinstance(target, kind) or _is_code_object(target):
            raise _refuse(f"{opcode} into {_describe(target)}")
        return target

    def _load_append(self) -> None:
        value = self.stack.pop()
        self._target(list, "APPEND").append(value)

    def _load_appends(self) -> None:
        items = self.pop_mark()
        self._target(list, "APPENDS").extend(items)

    def _load_setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        self._target(dict, "SETITEM")[key] = value

    def _load_setitems(self) -> None:
        items = self.pop_mark()
        target = self._target(dict, "SETITEMS")
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]

    def _load_additems(self) -> None:
        items = self.pop_mark()
        self._target(set, "ADDITEMS").update(items)


for _opcode, _handler in {
    pickle.STACK_GLOBAL: _SafeUnpickler._load_stack_global,
    pickle.EXT1: _SafeUnpickler._load_ext,
    pickle.EXT2: _SafeUnpickler._load_ext,
    pickle.EXT4: _SafeUnpickler._load_ext,
    pickle.INST: _SafeUnpickler._load_inst_or_obj,
    pickle.OBJ: _SafeUnpickler._load_inst_or_obj,
    pickle.REDUCE: _SafeUnpickler._load_reduce,
    pickle.NEWOBJ: _SafeUnpickler._load_newobj,
    pickle.NEWOBJ_EX: _SafeUnpickler._load_newobj_ex,
    pickle.BUILD: _SafeUnpickler._load_build,
    pickle.MARK: _SafeUnpickler._load_mark,
    pickle.APPEND: _SafeUnpickler._load_append,
    pickle.APPENDS: _SafeUnpickler._load_appends,
    pickle.SETITEM: _SafeUnpickler._load_setitem,
    pickle.SETITEMS: _SafeUnpickler._load_setitems,
    pickle.ADDITEMS: _SafeUnpickler._load_additems,
}.items():
    _SafeUnpickler.dispatch[_opcode[0]] = _handler


def _tensor_from(cls: type, data: np.ndarray, dtype: Any) -> Any:
    if dtype is not None:
        if not (isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic))):
            raise _refuse(f"a {cls.__name__} whose dtype is {_describe(dtype)}")
        dtype = np.dtype(dtype)
    try:
        return cls(data, dtype=dtype)
    except TypeError as exc:  # a dtype xmge has no element type for
        raise XmgeError(f"xmge.load: cannot rebuild a saved {cls.__name__}: {exc}") from None


def _place(t: Any, device: str | None, map_device: Callable[[str], str]) -> None:
    """Put a loaded tensor on its saved device after ``map_location`` (all of xmge's devices are
    host memory; the name is what ``Tensor.device`` reports, as in MegEngine)."""
    if device is None:
        return
    from compiler.device import DeviceError, device_name

    mapped = map_device(device)
    try:
        t._device = device_name(mapped)
    except DeviceError:
        pass  # a device name of a MegEngine build xmge does not know: the default device


def _none_or_empty_qparams(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(v is None for v in value.values()))


def _set_tensor_state(t: Any, state: Any, map_device: Callable[[str], str]) -> None:
    """A Tensor's state, in any of the forms its writers used:
    MegEngine 1.13 ``{}`` / ``{"qparams": None}``; MegEngine 1.1 ``{"data", "device", "dtype", "qdict"}``;
    xmge ``{"name"}``; earlier xmge ``{"_data", "name", "grad"}``; ``"_device"`` where a tensor
    was pickled as a plain object after it was placed on a device."""
    from compiler.tensor import Tensor

    if not isinstance(state, dict) or not all(type(k) is str for k in state):
        raise _refuse(f"Tensor state of type {type(state).__name__}")
    state = dict(state)
    for key in ("qparams", "qdict"):
        if not _none_or_empty_qparams(state.pop(key, None)):
            raise _refuse(
                "a MegEngine tensor with quantization parameters (qparams), which xmge keeps in the dtype"
            )
    if "data" in state:  # MegEngine's pre-1.2 tensors
        data, dtype, device = state.pop("data"), state.pop("dtype", None), state.pop("device", None)
        if not isinstance(data, np.ndarray):
            raise _refuse(f"Tensor data of type {type(data).__name__}")
        t._data = _tensor_from(type(t), data, dtype)._data
        _place(t, device if isinstance(device, str) else None, map_device)
    if "_data" in state:  # xmge's earlier form
        data = state.pop("_data")
        if not isinstance(data, np.ndarray) or data.dtype == object:
            raise _refuse(f"Tensor data of type {type(data).__name__}")
        t._data = data
    if "name" in state:
        name = state.pop("name")
        if name is not None and not isinstance(name, str):
            raise _refuse(f"a Tensor name of type {type(name).__name__}")
        t.name = name
    if "_device" in state:  # xmge's tensor pickled as a plain object (its device name, or None)
        device = state.pop("_device")
        if device is not None and not isinstance(device, str):
            raise _refuse(f"a Tensor device of type {type(device).__name__}")
        _place(t, device, map_device)
    if "grad" in state:
        grad = state.pop("grad")
        if grad is not None and not isinstance(grad, Tensor):
            raise _refuse(f"a Tensor grad of type {type(grad).__name__}")
        t.grad = grad
    for key in ("_name", "_prefix", "_short_name"):  # the names a module gave it (Module.__setattr__)
        if key in state:
            value = state.pop(key)
            if value is not None and not isinstance(value, str):
                raise _refuse(f"a Tensor {key} of type {type(value).__name__}")
            setattr(t, key, value)
    if state:
        raise _refuse(f"Tensor state with unknown keys {sorted(state)}")
    if not hasattr(t, "_data"):
        raise _refuse("a Tensor without data")


def _check_pickle_module(pickle_module: Any) -> None:
    base = getattr(pickle_module, "Unpickler", None)
    if pickle_module is not pickle and base not in (pickle.Unpickler, pickle._Unpickler):  # type: ignore[attr-defined]
        raise XmgeError(
            f"xmge.load: pickle_module {getattr(pickle_module, '__name__', pickle_module)!r} does not read "
            "the standard pickle format the restricted loader checks opcode by opcode; pass trusted=True "
            "if you trust the file"
        )


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
    ``trusted=True`` unpickles with ``pickle_module`` and no restriction: only for files you would
    run as code. ``map_location`` takes MegEngine's forms (a device name, a ``{"gpu0": "cpu0"}``
    dict, or a callable given each saved tensor's device name); xmge tensors live in host memory.
    """
    map_device = _device_mapper(map_location)
    if isinstance(f, str | os.PathLike):
        with open(f, "rb") as fh:
            return _load(fh, map_device, pickle_module, allowed_classes, trusted)
    return _load(f, map_device, pickle_module, allowed_classes, trusted)


def _load(
    fh: IO[bytes],
    map_device: Callable[[str], str],
    pickle_module: Any,
    allowed_classes: Iterable[type | str],
    trusted: bool,
) -> Any:
    _refuse_model_files(fh)
    if trusted:
        return _trusted_load(fh, map_device, pickle_module)
    _check_pickle_module(pickle_module)
    start = fh.tell() if fh.seekable() else None
    unpickler = _SafeUnpickler(fh, _RestrictedFinder(allowed_classes), map_device)
    try:
        return unpickler.load()
    except _MegEngineTracedModule:
        if start is None:
            raise UnsafePickleError(
                "xmge.load: this is a .tm written by MegEngine; read it from a file or a seekable stream, "
                "or with compiler.traced_module.load_megengine_tm(data)"
            ) from None
        from compiler.traced_module.megengine_tm import load_megengine_tm

        fh.seek(start)
        return load_megengine_tm(fh)
    except XmgeError:
        raise
    except limits.LimitExceeded:
        raise
    except (
        EOFError,
        IndexError,
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        OverflowError,
        MemoryError,
        RecursionError,
        UnicodeDecodeError,
        struct.error,
        pickle.UnpicklingError,
    ) as exc:
        raise CorruptPickleError(_corrupt_message(fh, exc)) from None


class CorruptPickleError(XmgeError, pickle.UnpicklingError):
    """A file that is not a well-formed pickle (truncated, an unknown opcode, a broken stack)."""


def _file_name(fh: Any) -> str:
    name = getattr(fh, "name", None)
    return str(name) if isinstance(name, str | os.PathLike) else "<pickle data>"


def _corrupt_message(fh: IO[bytes], exc: BaseException) -> str:
    try:
        where = f" (near byte {fh.tell()})"
    except (OSError, AttributeError, ValueError):
        where = ""
    if isinstance(exc, EOFError):
        why = "it ends in the middle (truncated or empty)"
    elif isinstance(exc, KeyError) and isinstance(exc.args[0] if exc.args else None, int):
        why = f"unknown pickle opcode 0x{exc.args[0]:02x}"
    elif isinstance(exc, IndexError):
        why = "an opcode takes more values than the pickle stack holds"
    elif isinstance(exc, RecursionError):
        why = "it nests too deeply"
    else:
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'}"
    return f"{_file_name(fh)}: not a valid pickle{where}: {why}. Nothing from the file was executed."


class NotAPickleError(XmgeError, pickle.UnpicklingError):
    """``load`` was given a model file of another kind (a ``.mge`` graph), not a pickle."""


def _refuse_model_files(fh: IO[bytes]) -> None:
    """A ``.mge`` graph handed to ``load`` (the guide warns about mixing them up) gets a one-line
    pointer to the loader that reads it, not an unpickler error about its bytes."""
    if not (hasattr(fh, "seekable") and fh.seekable()):
        return
    pos = fh.tell()
    head = fh.read(16)
    fh.seek(pos)
    name = getattr(fh, "name", "the file")
    is_mge = (
        head[:4] in (b"MGBC", b"MGBS")
        or head[8:12] == b"mgv2"
        or head.startswith((b"mgbtest0", b"packed_model"))
    )
    if is_mge:
        raise NotAPickleError(
            f"{name} is a MegEngine .mge graph, not a pickle: run it with compiler.lite.LiteNetwork"
            f"({name!r}) (or xmge run), or compile it with compiler.compile({name!r})"
        )


def _trusted_load(fh: IO[bytes], map_device: Callable[[str], str], pickle_module: Any) -> Any:
    """Unrestricted unpickling, except that MegEngine's tensors (the form :func:`save` writes)
    become xmge's rather than needing megengine importable."""
    base = getattr(pickle_module, "Unpickler", None)
    if not isinstance(base, type):
        return pickle_module.load(fh)
    from compiler.tensor import Parameter, Tensor

    def tensor_class(cls: type) -> type:
        class MegEngineTensor:  # NEWOBJ and REDUCE call it with (array, dtype, device)
            def __new__(_: type, data: Any = None, dtype: Any = None, device: Any = None) -> Any:  # type: ignore[misc]
                if isinstance(device, str):
                    map_device(device)
                return _tensor_from(cls, np.asarray(data), dtype)

        return MegEngineTensor

    tensors = {"Tensor": tensor_class(Tensor), "Parameter": tensor_class(Parameter)}

    class TrustedUnpickler(base):  # type: ignore[misc, valid-type]
        def find_class(self, module: str, name: str) -> Any:
            if module == "megengine.tensor" and name in tensors:
                return tensors[name]
            if module.split(".")[0] == "megengine":
                # MegEngine's other names: xmge's object of the same name where it is data (a dtype,
                # an enum); never a MegEngine Module, whose pickled state is MegEngine's, not ours
                from compiler.module.module import Module

                try:
                    obj = super().find_class("compiler" + module[len("megengine") :], name)
                except (ImportError, AttributeError):
                    obj = None
                if obj is None or (isinstance(obj, type) and issubclass(obj, Module)):
                    raise UnsafePickleError(
                        f"xmge.load: the file holds an object of MegEngine's class {module}.{name}, which "
                        "xmge cannot rebuild (a whole module pickled by MegEngine): save its state_dict() "
                        "with MegEngine and call load_state_dict() on the xmge model instead."
                    )
                return obj
            return super().find_class(module, name)

    return TrustedUnpickler(fh).load()


def loads(data: bytes, **kwargs: Any) -> Any:
    """:func:`load` from bytes."""
    return load(io.BytesIO(data), **kwargs)


__all__: list[str] = [
    "DEFAULT_PROTOCOL",
    "CorruptPickleError",
    "STALE_TMP_SECONDS",
    "UnsafePickleError",
    "atomic_write",
    "dumps",
    "load",
    "loads",
    "save",
]
