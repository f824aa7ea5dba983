"""Building generated C with gcc, cached by content hash, and loading the result with ctypes.

A build directory is named after the hash of everything that determines the binaries (the generated
source, the runtime sources, the compiler and its flags), under ``$XMGE_CACHE_DIR`` or
``~/.cache/xmge/c``. Weights are not compiled in, so models that differ only in their weights share one
build. Directories are filled in a temporary sibling (``<key>.<pid>.tmp<random>``) and renamed into
place, so concurrent builds of the same model never see a half-written one; the next build removes the
temporaries of builds that died. Each entry records the sha256 of its outputs (``xmge-cache.json``), checked
before every reuse: a damaged entry is built again, never loaded.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from dialects.dtypes import QUANTIZED_STORAGE, DTypeError, element_type, numpy_dtype
from dialects.errors import XmgeError

RUNTIME_DIR = os.path.join(os.path.dirname(__file__), "runtime")
RUNTIME_FILES = ("xm_runtime.h", "xm_kernels.h", "xm_runtime.c", "runner.c")
logger = logging.getLogger("xmge.build")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all")


# the runner's exit status and stderr prefix when xm_run fails (runtime/runner.c)
RUN_FAILED_STATUS = 3
RUN_FAILED_PREFIX = "runner: run failed: "


class RunError(XmgeError):
    """A compiled model's run failed (``xm_run`` returned nonzero): a kernel met an index out of range
    (the message names the kernel, the index and the axis size; the reference interpreter raises on
    the same input), or a CUDA runtime call failed. The outputs are not the model's answer."""

    def __init__(self, reason: str):
        super().__init__(f"the compiled model's run failed: {reason}")


class BuildError(XmgeError, RuntimeError):
    pass


def cache_root() -> str:
    return os.environ.get("XMGE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "xmge", "c")


@cache
def compiler_version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"C compiler {cc!r} is not usable: {exc}") from exc


def runtime_sources() -> dict[str, str]:
    out = {}
    for name in RUNTIME_FILES:
        with open(os.path.join(RUNTIME_DIR, name)) as f:
            out[name] = f.read()
    return out


@dataclass(frozen=True)
class Build:
    directory: str
    library: str
    runner: str
    cached: bool
    launcher: tuple[str, ...] = ()  # what runs the runner (e.g. qemu for a cross build)


def build(model_c: str, cflags: Sequence[str], *, cc: str = "gcc", sanitize: bool = False) -> Build:
    """Compile ``model_c`` with the runtime into ``libxmge_model.so`` and the ``runner`` program."""
    flags = [*cflags, *(SANITIZE_FLAGS if sanitize else ())]
    if sanitize:
        flags = [f if f != "-O3" else "-O1" for f in flags]  # sanitizer builds: fast to build, exact reports
    return cached_build(model_c, flags, cc=cc)


def cached_build(
    model_c: str,
    flags: Sequence[str],
    *,
    cc: str,
    salt: bytes = b"",
    prefix: str = "",
    runner_flags: Sequence[str] = (),
    launcher: tuple[str, ...] = (),
) -> Build:
    """Build (or find in the cache) the library and runner of ``model_c``, keyed by the hash of
    ``salt``, the compiler's version, ``flags`` and every source; ``runner_flags`` link the runner
    (``-static`` for qemu) and ``launcher`` is what runs it."""
    sources = {"model.c": model_c, **runtime_sources()}

    def fill(work: str) -> None:
        write_sources(work, sources)
        objs = []
        for src in ("model.c", "xm_runtime.c", "runner.c"):
            obj = src[:-2] + ".o"
            run_tool([cc, *flags, "-c", src, "-o", obj], work)
            objs.append(obj)
        link = [*flags, "-lm"]
        run_tool([cc, "-shared", "model.o", "xm_runtime.o", "-o", "libxmge_model.so", *link], work)
        run_tool([cc, *runner_flags, "model.o", "xm_runtime.o", "runner.o", "-o", "runner", *link], work)
        for obj in objs:
            os.remove(os.path.join(work, obj))

    final, cached = cached_dir(
        cache_key(prefix, cc, flags, sources, salt), ("libxmge_model.so", "runner"), fill
    )
    return Build(
        final, os.path.join(final, "libxmge_model.so"), os.path.join(final, "runner"), cached, launcher
    )


def cache_key(
    prefix: str, compiler: str, flags: Sequence[str], sources: dict[str, str], salt: bytes = b""
) -> str:
    """A build's cache directory name: ``prefix`` and the hash of ``salt``, the compiler's version,
    ``flags`` and every source (name and text)."""
    h = hashlib.sha256(salt)
    h.update(compiler_version(compiler).encode())
    h.update("\0".join(flags).encode())
    for name in sorted(sources):
        h.update(name.encode() + b"\0" + sources[name].encode() + b"\0")
    return prefix + h.hexdigest()[:24]


CACHE_MANIFEST = "xmge-cache.json"
# a build's temporary folder is ``<key>.<pid>.<random>``: a folder whose writer is gone is removed by the
# next build; one whose pid is alive (or reused) only once it is this old
STALE_BUILD_SECONDS = 6 * 3600
# folders of the earlier ``<key>.<random>`` naming carry no pid: removed once this old
STALE_LEGACY_SECONDS = 60 * 60
_BUILD_TMP = re.compile(r"(?P<key>[\w.-]+?)\.(?P<pid>\d+)\.tmp[\w]+")
_LEGACY_TMP = re.compile(r"[\w-]*?[0-9a-f]{24}\.[\w]{8}")


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _record_outputs(work: str, outputs: Sequence[str]) -> None:
    """Write the cache entry's manifest (the sha256 of each output, checked before every reuse) and
    flush the entry to disk before it is renamed into place."""
    digests = {o: file_sha256(os.path.join(work, o)) for o in outputs}
    with open(os.path.join(work, CACHE_MANIFEST), "w") as f:
        json.dump({"outputs": digests}, f)
    for name in (*outputs, CACHE_MANIFEST):
        fd = os.open(os.path.join(work, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def cache_entry_problem(directory: str, outputs: Sequence[str]) -> str | None:
    """Why the cache entry ``directory`` cannot be reused (a file missing, or not what was built:
    truncated, overwritten), or ``None`` when every output matches the hash recorded at build time."""
    try:
        with open(os.path.join(directory, CACHE_MANIFEST)) as f:
            recorded = json.load(f)["outputs"]
    except FileNotFoundError:
        return f"{CACHE_MANIFEST} is missing"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{CACHE_MANIFEST} is unreadable ({exc})"
    for o in outputs:
        path = os.path.join(directory, o)
        if not isinstance(recorded, dict) or o not in recorded:
            return f"{CACHE_MANIFEST} records no hash for {o}"
        try:
            if file_sha256(path) != recorded[o]:
                return f"{o} does not match the hash recorded when it was built"
        except OSError as exc:
            return f"{o} cannot be read ({exc.strerror})"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_stale_temporaries(root: str) -> list[str]:
    """Remove the temporary folders of builds that died in ``root`` (their writer's pid is gone, or
    they are older than :data:`STALE_BUILD_SECONDS`, or of the pid-less earlier naming and older than
    :data:`STALE_LEGACY_SECONDS`); the names removed."""
    now = time.time()
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        m = _BUILD_TMP.fullmatch(entry.name)
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if m is not None:
            stale = int(m.group("pid")) != os.getpid() and not _pid_alive(int(m.group("pid")))
            stale = stale or age > STALE_BUILD_SECONDS
        else:
            stale = _LEGACY_TMP.fullmatch(entry.name) is not None and age > STALE_LEGACY_SECONDS
        if stale:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed


_CLEANED: set[str] = set()


def _discard(final: str) -> None:
    """Move a damaged entry out of the way (atomically, so a concurrent reader sees it whole or not
    at all) and delete it."""
    trash = f"{final}.{os.getpid()}.tmp{secrets.token_hex(4)}"
    try:
        os.rename(final, trash)
    except OSError:  # another process moved it first
        return
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.unlink(trash)


def cached_dir(key: str, outputs: Sequence[str], fill: Callable[[str], None]) -> tuple[str, bool]:
    """(the cache directory ``key`` holding ``outputs``, whether it was there already), filled by
    ``fill(workdir)`` if missing (in a temporary sibling renamed into place, so concurrent builds never
    see half a build). An entry is reused only when its outputs match the sha256 recorded when it was
    built; a damaged one (truncated, overwritten, missing its record) is discarded and built again."""
    root = cache_root()
    final = os.path.join(root, key)
    if root not in _CLEANED:  # once per process even when every build is found, on every miss
        _CLEANED.add(root)
        remove_stale_temporaries(root)
    if os.path.lexists(final):
        problem = cache_entry_problem(final, outputs) if os.path.isdir(final) else "not a folder"
        if problem is None:
            return final, True
        logger.warning("rebuilding the damaged cache entry %s: %s", final, problem)
        _discard(final)
    os.makedirs(root, exist_ok=True)
    remove_stale_temporaries(root)
    work = tempfile.mkdtemp(prefix=f"{key}.{os.getpid()}.tmp", dir=root)
    try:
        fill(work)
        _record_outputs(work, outputs)
        try:
            os.rename(work, final)
        except OSError:  # another process finished the same build first
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return final, False


def write_sources(work: str, sources: dict[str, str]) -> None:
    for name, text in sources.items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)


def run_tool(cmd: list[str], cwd: str) -> str:
    """Run a compiler or linker in ``cwd``; its output, or a :class:`BuildError` with the tail of it."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed in {cwd}:\n{(proc.stderr + proc.stdout)[-6000:]}")
    return proc.stdout + proc.stderr


def storage_dtype(name: str, shape: Sequence[int], nbytes: int) -> np.dtype:
    """The numpy dtype one model input or output is stored in, from the runtime's table: its dtype
    name (``dialects.dtypes.dtype_name``: a plain dtype, or a quantized kind stored as its storage
    integers), checked against its byte count."""
    try:
        dt = QUANTIZED_STORAGE[name] if name in QUANTIZED_STORAGE else numpy_dtype(element_type(name))
    except DTypeError as exc:
        raise BuildError(f"the model's tensor table names an unknown dtype {name!r}") from exc
    if dt.itemsize * math.prod(shape) != nbytes:
        raise BuildError(
            f"the model's tensor table gives {nbytes} bytes for {name} {list(shape)} "
            f"({dt.itemsize * math.prod(shape)} expected)"
        )
    return np.dtype(dt)


class _Info(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_long * 8),
        ("nbytes", ctypes.c_ulong),
    ]


class LoadedModel:
    """A built model in this process: ``run(inputs) -> outputs`` on numpy arrays."""

    def __init__(self, library: str, weights: bytes, threads: int):
        self.lib = ctypes.CDLL(library)
        lib = self.lib
        lib.xm_create.restype = ctypes.c_void_p
        lib.xm_create.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_int]
        lib.xm_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.xm_run.restype = ctypes.c_int
        lib.xm_destroy.argtypes = [ctypes.c_void_p]
        lib.xm_last_error.restype = ctypes.c_char_p
        lib.xm_get_input.restype = ctypes.POINTER(_Info)
        lib.xm_get_output.restype = ctypes.POINTER(_Info)
        lib.xm_get_arena_size.restype = ctypes.c_ulong
        self.inputs = [self._info(lib.xm_get_input(i)) for i in range(lib.xm_get_num_inputs())]
        self.outputs = [self._info(lib.xm_get_output(i)) for i in range(lib.xm_get_num_outputs())]
        self.input_dtypes = self._dtypes(lib.xm_get_input, len(self.inputs))
        self.output_dtypes = self._dtypes(lib.xm_get_output, len(self.outputs))
        self.arena_size = int(lib.xm_get_arena_size())
        self.handle = lib.xm_create(weights, len(weights), threads)
        if not self.handle:
            raise BuildError(f"xm_create failed: {lib.xm_last_error().decode()}")

    @staticmethod
    def _info(p: ctypes._Pointer) -> tuple[str, tuple[int, ...]]:  # type: ignore[type-arg]
        i = p.contents
        return i.name.decode(), tuple(i.shape[: i.ndim])

    def _dtypes(self, getter: Any, count: int) -> list[np.dtype]:
        """The storage dtype of each input or output (:func:`storage_dtype`)."""
        out = []
        for k in range(count):
            info = getter(k).contents
            out.append(storage_dtype(info.dtype.decode(), tuple(info.shape[: info.ndim]), info.nbytes))
        return out

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise ValueError(f"the model takes {len(self.inputs)} inputs, got {len(inputs)}")
        arrays = []
        for (name, shape), dt, x in zip(self.inputs, self.input_dtypes, inputs, strict=True):
            a = np.ascontiguousarray(x, dtype=dt)
            if a.shape != shape:
                raise ValueError(f"input {name} must have shape {shape}, got {a.shape}")
            arrays.append(a)
        outs = [np.empty(shape, dt) for (_, shape), dt in zip(self.outputs, self.output_dtypes, strict=True)]
        in_ptrs = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        out_ptrs = (ctypes.c_void_p * max(1, len(outs)))(*[o.ctypes.data for o in outs])
        if self.lib.xm_run(self.handle, in_ptrs, out_ptrs) != 0:
            raise RunError(self.lib.xm_last_error().decode(errors="replace"))
        return outs

    def close(self) -> None:
        if getattr(self, "handle", None):
            self.lib.xm_destroy(self.handle)
            self.handle = None

    def __del__(self) -> None:
        self.close()
