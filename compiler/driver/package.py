"""Saved compiled models: a package folder written atomically, read back without a C compiler.

    compiled.save("resnet/")                  # or: xmge compile model.mge -t x86-avx2 -o resnet/
    model = xm.load_compiled("resnet/")       # hashes and CPU checked; no compiler runs
    y = model(x)

A package holds the library, the runner, the weights, the generated and runtime sources, a Makefile, a
CMakeLists.txt, a README.md and the manifest ``model.json``: the model's name (its C prefix), the
inputs and outputs of every shape variant (names, dtypes, shapes), the target and the CPU flags its
code needs, the thread count, the sha256 of every other file, the xmge version and the format version.

Writing is atomic: the package is built in a hidden sibling folder (``.NAME.xmge-tmp.PID.RANDOM``),
flushed to disk, then swapped with the old package in one ``renameat2(RENAME_EXCHANGE)`` (two renames
where the kernel lacks it: the old package aside, the new one in), and the old one deleted. A writer
killed at any moment leaves the previous package or, between the two fallback renames, none; never
part of one. The next write in the same folder removes what dead writers left behind.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dialects.errors import XmgeError

FORMAT = "xmge-package"
FORMAT_VERSION = 1
MANIFEST = "model.json"
# a temporary or set-aside folder older than this is removed even when its writer's pid is alive
# (pids are reused)
STALE_SECONDS = 6 * 3600
_WORK = re.compile(r"\.(?P<name>.+)\.xmge-(?P<kind>tmp|old)\.(?P<pid>\d+)\.[0-9a-f]+")


class PackageError(XmgeError, ValueError):
    """A package that cannot be written or loaded: damaged, incomplete, for another CPU, or a shape
    it does not hold. The message is one line naming the file or the shape."""


# ----------------------------------------------------------------------------------------------
# Names


def c_identifier(name: str) -> str:
    """``name`` as a symbol prefix (``backends.c.symbols.prefix_from_name``: lower case, other
    characters ``_``, a leading digit guarded, at most 64 characters; empty: ``xmge_model``)."""
    from backends.c.symbols import prefix_from_name

    return prefix_from_name(name)


def default_name(model: Any) -> str:
    """The prefix a model gets without ``name=``: a file's stem, a Module's class name, a function's
    name, else ``xmge_model``."""
    from compiler.jit import trace

    if isinstance(model, str | os.PathLike):
        stem = os.path.basename(os.fspath(model)).split(".", 1)[0]
        return c_identifier(stem)
    if isinstance(model, trace):
        inner = getattr(model, "__wrapped__", None) or getattr(model, "function", None)
        return c_identifier(getattr(inner, "__name__", "xmge_model"))
    from compiler.module.module import Module

    if isinstance(model, Module):
        return c_identifier(type(model).__name__)
    name = getattr(model, "__name__", None)
    if isinstance(name, str) and name != "<lambda>":
        return c_identifier(name)
    return "xmge_model"


# ----------------------------------------------------------------------------------------------
# Writing


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(root: str) -> list[str]:
    """Every regular file under ``root``, as sorted paths relative to it (``/``-separated)."""
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), root)
            out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_work(parent: str) -> list[str]:
    """Clean up after package writers that died in ``parent``: a temporary folder (``tmp``) is
    deleted; a set-aside old package (``old``) goes back in place when its package is absent (the
    writer died between its two renames), else is deleted. Only folders whose writer's pid is gone,
    or older than :data:`STALE_SECONDS`. The names handled."""
    handled = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return handled
    now = time.time()
    for entry in entries:
        m = _WORK.fullmatch(entry.name)
        if m is None:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            old_enough = now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS
        except OSError:
            continue
        if _pid_alive(int(m.group("pid"))) and not old_enough:
            continue
        target = os.path.join(parent, m.group("name"))
        if m.group("kind") == "old" and not os.path.lexists(target):
            try:
                os.rename(entry.path, target)
                handled.append(entry.name)
                continue
            except OSError:
                pass
        shutil.rmtree(entry.path, ignore_errors=True)
        handled.append(entry.name)
    return handled


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False
    where the C library or the file system lacks it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _check_replaceable(directory: str) -> None:
    if not os.path.lexists(directory):
        return
    if os.path.islink(directory) or not os.path.isdir(directory):
        raise PackageError(f"{directory}: exists and is not a folder; refusing to replace it with a package")
    if os.listdir(directory) and not os.path.isfile(os.path.join(directory, MANIFEST)):
        raise PackageError(
            f"{directory}: a folder that is not an xmge package (no {MANIFEST}); refusing to replace it"
        )


def write_package(directory: str | os.PathLike[str], fill: Callable[[str], dict[str, Any]]) -> str:
    """Write a package to ``directory`` atomically: ``fill(work)`` writes every file into a temporary
    sibling and returns the manifest, which gains the sha256 of each file and is written as
    ``model.json``; everything is
    flushed to disk, and the folder replaces any earlier package in one rename. An existing folder
    that is not a package (no ``model.json``, not empty) is refused rather than deleted."""
    final = os.path.abspath(os.fspath(directory))
    parent, base = os.path.dirname(final), os.path.basename(final)
    os.makedirs(parent, exist_ok=True)
    remove_stale_work(parent)
    _check_replaceable(final)
    tag = f"{os.getpid()}.{secrets.token_hex(6)}"
    work = os.path.join(parent, f".{base}.xmge-tmp.{tag}")
    os.mkdir(work)
    try:
        manifest = fill(work)
        files = {rel: sha256_file(os.path.join(work, rel)) for rel in _files(work) if rel != MANIFEST}
        with open(os.path.join(work, MANIFEST), "w") as f:
            json.dump({**manifest, "files": files}, f, indent=2)
            f.write("\n")
        for rel in [*files, MANIFEST]:
            _fsync_path(os.path.join(work, rel))
        for d, _, _ in os.walk(work):
            _fsync_path(d)
        if os.path.lexists(final) and _exchange(work, final):
            leftover = work  # the previous package, now under the temporary name
        elif os.path.lexists(final):
            leftover = os.path.join(parent, f".{base}.xmge-old.{tag}")
            os.rename(final, leftover)
            os.rename(work, final)
        else:
            os.rename(work, final)
            leftover = ""
        _fsync_path(parent)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if leftover:
        shutil.rmtree(leftover, ignore_errors=True)
    return final


# ----------------------------------------------------------------------------------------------
# Reading


def read_manifest(directory: str) -> dict[str, Any]:
    """``model.json`` of the package ``directory``, checked to be one this xmge reads."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        what = "no such folder" if not os.path.isdir(directory) else "missing: not a complete xmge package"
        raise PackageError(f"{path}: {what}") from None
    except (OSError, ValueError) as exc:
        raise PackageError(f"{path}: unreadable manifest ({str(exc).splitlines()[0]})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PackageError(f'{path}: not an xmge package manifest (no "format": "{FORMAT}")')
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise PackageError(
            f"{path}: package format version {version}, this xmge reads version {FORMAT_VERSION}: "
            "compile the model again"
        )
    for key, kind in (("files", dict), ("variants", list), ("target", str)):
        if not isinstance(manifest.get(key), kind):
            raise PackageError(f"{path}: the manifest has no {key!r} {kind.__name__}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in manifest["files"].items()):
        raise PackageError(f"{path}: 'files' must map each file to its sha256")
    if any(os.path.isabs(k) or ".." in k.split("/") for k in manifest["files"]):
        raise PackageError(f"{path}: 'files' names a file outside the package")
    return manifest


def verify_files(directory: str, manifest: dict[str, Any], *, keep: Sequence[str] = ()) -> dict[str, bytes]:
    """Check every file the manifest lists against its sha256 (a :class:`PackageError` naming the
    first that is missing or differs); the contents of the files named in ``keep``, read once."""
    kept = {}
    for rel, digest in manifest["files"].items():
        path = os.path.join(directory, *rel.split("/"))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise PackageError(f"{path}: missing from the package (model.json lists it)") from None
        except OSError as exc:
            raise PackageError(f"{path}: cannot be read ({exc.strerror})") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise PackageError(
                f"{path}: damaged ({len(data)} bytes whose sha256 is not the one model.json records)"
            )
        if rel in keep:
            kept[rel] = data
    return kept


def check_cpu(directory: str, manifest: dict[str, Any]) -> Any:
    """The package's :class:`Target`, after checking this machine can run its code (architecture
    and CPU flags); a :class:`PackageError` naming what is missing otherwise."""
    from backends.targets import cpu_flags, parse_target

    path = os.path.join(directory, MANIFEST)
    try:
        target = parse_target(manifest["target"])
    except XmgeError as exc:
        raise PackageError(f"{path}: target {manifest['target']!r}: {exc}") from None
    if target.arch != "x86":
        raise PackageError(
            f"{path}: a {target.arch} package ({target}) is built and run on its device "
            "(make, then ./runner); this process loads x86 packages"
        )
    host = platform.machine().lower()
    arch = manifest.get("machine", "x86_64")
    if arch != host and not (arch == "x86_64" and host == "amd64"):
        raise PackageError(
            f"{path}: the package is for {arch} ({target}), this machine is {host}: "
            "copy it there and load it, or build it from its sources with make"
        )
    missing = sorted(set(manifest.get("cpu_features", [])) - cpu_flags())
    if missing:
        raise PackageError(
            f"{path}: the package's code ({target}) needs CPU features this machine lacks: "
            + ", ".join(missing)
        )
    if target.backend is None or target.backend.kernels is None or target.backend.emulated:
        raise PackageError(f"{path}: target {target} builds no library this process can load")
    return target


def _dtype(name: str) -> np.dtype:
    from dialects.dtypes import element_type, numpy_dtype

    return numpy_dtype(element_type(name))


def shapes_text(shapes: Sequence[Sequence[Sequence[int]]]) -> str:
    """``[(1, 3, 8, 8)], [(4, 3, 8, 8)]``: input-shape signatures for an error message."""
    return ", ".join("[" + ", ".join(str(tuple(s)) for s in sig) + "]" for sig in shapes)


class Variant:
    """One input-shape signature a package serves: its inputs' and outputs' names, shapes and dtypes."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.inputs = [
            (io.get("name", f"input{i}"), tuple(io["shape"]), io["dtype"])
            for i, io in enumerate(entry["inputs"])
        ]
        self.outputs = [
            (io.get("name", f"output{i}"), tuple(io["shape"]), io["dtype"])
            for i, io in enumerate(entry["outputs"])
        ]
        self.weights_offset = int(entry.get("weights_offset", 0))
        self.input_dtypes = [_dtype(dt) for _, _, dt in self.inputs]
        self.output_dtypes = [_dtype(dt) for _, _, dt in self.outputs]

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(s for _, s, _ in self.inputs)


class PackagedModel:
    """A package loaded into this process: call it on numpy arrays, like the :class:`CompiledModel`
    it was saved from (bit-identical results). Safe to call from several threads at once."""

    def __init__(
        self, directory: str, manifest: dict[str, Any], target: Any, loaded: Any, threads: int
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        self.target = target
        self.name: str = manifest.get("name", "xmge_model")
        self.threads = threads
        self.variants = variants_of(manifest)
        self._loaded = loaded  # backends.c.build.LoadedModel: one instance, every variant, any thread
        # compiler.tuning.TuningFile of a tuned compile measured on this machine (else None)
        self.tuning: Any = None

    @property
    def shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        """The input-shape signature of every variant the package holds."""
        return [v.input_shapes for v in self.variants]

    def variant_for(self, shapes: Sequence[Sequence[int]]) -> int:
        """The index of the variant serving inputs of ``shapes`` (a one-line :class:`PackageError`
        listing the shapes held otherwise)."""
        want = tuple(tuple(int(d) for d in s) for s in shapes)
        for i, v in enumerate(self.variants):
            if v.input_shapes == want:
                return i
        raise PackageError(
            f"{self.name}: no variant for input shapes {shapes_text([want])}; the package holds "
            f"{shapes_text(self.shapes)}"
        )

    def with_threads(self, threads: int) -> PackagedModel:
        """This package loaded once more, run on ``threads`` threads per call (its own instance)."""
        return load_compiled(self.directory, threads=threads)

    def loaded(self) -> Any:
        """The package's library loaded into this process (``backends.c.build.LoadedModel``)."""
        return self._loaded

    def run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Outputs for ``inputs`` (numpy arrays or Tensors), as a list of arrays."""
        arrays = [np.asarray(getattr(x, "numpy", lambda x=x: x)()) for x in inputs]
        n = len(self.variants[0].inputs)
        if len(arrays) != n:
            raise PackageError(f"{self.name}: the model takes {n} input(s), got {len(arrays)}")
        index = self.variant_for([a.shape for a in arrays])
        variant = self.variants[index]
        arrays = [
            input_array(a, dt, name)
            for a, dt, (name, _, _) in zip(arrays, variant.input_dtypes, variant.inputs, strict=True)
        ]
        outs = self._loaded.run(arrays)
        return [_as_dtype(o, dt) for o, dt in zip(outs, variant.output_dtypes, strict=True)]

    def __call__(self, *inputs: Any) -> Any:
        outs = self.run(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def save(self, directory: str | os.PathLike[str]) -> str:
        """Copy the package to ``directory`` (atomically, verified again)."""
        src = self.directory

        def fill(work: str) -> dict[str, Any]:
            for rel in self.manifest["files"]:
                dst = os.path.join(work, *rel.split("/"))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy2(os.path.join(src, *rel.split("/")), dst)
            return {k: v for k, v in self.manifest.items() if k != "files"}

        out = write_package(directory, fill)
        verify_files(out, read_manifest(out))
        return out

    def __repr__(self) -> str:
        return f"PackagedModel({self.directory!r}, target={self.target}, shapes={shapes_text(self.shapes)})"


def variants_of(manifest: dict[str, Any]) -> list[Variant]:
    return [Variant(v) for v in manifest["variants"]]


def input_array(x: Any, want: np.dtype, name: str = "input") -> np.ndarray:
    """A run-time input in the dtype a compiled library takes for an input declared ``want``: the
    model's own integer or bool dtype for integer inputs, float32 for float (and quantized) ones,
    which the library converts itself. The conversion is checked, never a silent cast: an int64
    2^32 + 1 into an int32 input or 1.7 into an integer input is an ``InputError`` naming ``name``."""
    from backends.c.build import checked_input

    if want.kind in "iub" and getattr(want, "metadata", None) is None:
        return checked_input(name, x, want)
    return checked_input(name, x, np.dtype(np.float32))


def _as_dtype(a: np.ndarray, dt: np.dtype) -> np.ndarray:
    return a.view(dt) if dt.itemsize == a.dtype.itemsize and dt.kind == a.dtype.kind else a


def load_compiled(directory: str | os.PathLike[str], *, threads: int | None = None) -> PackagedModel:
    """Load the package ``directory`` (written by ``CompiledModel.save`` or ``xmge compile -o``)
    without compiling anything: the manifest's format, every file's sha256 and this machine's CPU
    are checked first, each failure a one-line :class:`PackageError` naming the file. ``threads``
    overrides the thread count the model was compiled with."""
    from backends.c.build import LoadedModel

    directory = os.path.abspath(os.fspath(directory))
    manifest = read_manifest(directory)
    target = check_cpu(directory, manifest)
    path = os.path.join(directory, MANIFEST)
    if not isinstance(manifest.get("library"), str):
        raise PackageError(f"{path}: the manifest names no library")
    try:
        variants = variants_of(manifest)
    except (KeyError, TypeError, ValueError, XmgeError) as exc:
        raise PackageError(f"{path}: a variant's description is invalid ({exc})") from None
    if not variants:
        raise PackageError(f"{path}: the manifest lists no variant")
    library, weights = manifest["library"], manifest.get("weights", "weights.bin")
    for rel in (library, weights):
        if rel not in manifest["files"]:
            raise PackageError(f"{path}: lists no hash for {rel}")
    kept = verify_files(directory, manifest, keep=[weights])
    count = manifest.get("threads", 1) if threads is None else threads
    if not isinstance(count, int) or count < 1:
        raise PackageError(f"threads must be >= 1, got {count}")
    lib_path = os.path.join(directory, *library.split("/"))
    try:
        loaded = LoadedModel(lib_path, kept[weights], count, prefix=manifest.get("prefix"))
    except XmgeError as exc:
        raise PackageError(f"{lib_path}: {str(exc).splitlines()[0]}") from None
    held = [tuple(s for _, s, _ in v.inputs) for v in loaded.variants]
    if held != [v.input_shapes for v in variants]:
        raise PackageError(
            f"{path}: lists variants {shapes_text([v.input_shapes for v in variants])}, "
            f"the library holds {shapes_text(held)}"
        )
    model = PackagedModel(directory, manifest, target, loaded, count)
    model.tuning = _package_tuning(directory, manifest, target)
    return model


def _package_tuning(directory: str, manifest: dict[str, Any], target: Any) -> Any:
    """The package's ``tuning.json`` when it was measured on this machine (CPU model and ISA set);
    made elsewhere, a one-line warning says so and it is ignored: the library still runs, with
    kernels chosen for the other CPU (compile the model again with ``tune=True`` to choose here)."""
    import warnings

    from compiler.tuning import TuningFile, TuningFileError, TuningWarning, cpu_model

    rel = manifest.get("tuning")
    if not isinstance(rel, str) or rel not in manifest["files"]:
        return None
    path = os.path.join(directory, *rel.split("/"))
    try:
        with open(path, encoding="utf-8") as f:
            tf = TuningFile.from_json(f.read(), path)
    except (OSError, TuningFileError) as exc:
        raise PackageError(f"{path}: {str(exc).splitlines()[0]}") from None
    here = (cpu_model(), tuple(target.isas))
    if (tf.key.cpu, tf.key.isa) != here:
        what = f"CPU {tf.key.cpu!r}" if tf.key.cpu != here[0] else f"ISA features {'+'.join(tf.key.isa)}"
        warnings.warn(
            f"{path}: the package's kernel choices were measured on {what}, not this machine's: ignored "
            "(the package runs; compile with tune=True to choose kernels here)",
            TuningWarning,
            stacklevel=3,
        )
        return None
    return tf


__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "PackageError",
    "PackagedModel",
    "c_identifier",
    "default_name",
    "load_compiled",
    "read_manifest",
    "remove_stale_work",
    "verify_files",
    "write_package",
]
