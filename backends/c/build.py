"""Building generated C with gcc, cached by content hash, and loading the result with ctypes.

A build directory is named after the hash of everything that determines the binaries (the generated
source, the runtime sources, the compiler and its flags), under ``$XMGE_CACHE_DIR`` or
``~/.cache/xmge/c``. Weights are not compiled in, so models that differ only in their weights share one
build. Directories are filled in a temporary sibling (``<key>.<pid>.tmp<random>``) and renamed into
place, so concurrent builds of the same model never see a half-written one; the next build removes the
temporaries of builds that died. Each entry records the sha256 of its outputs (``xmge-cache.json``), checked
before every reuse: a damaged entry is built again, never loaded.

The runtime (``xm_runtime.c``, ``xm_parallel.c``: the kernels' thread pool, ``runner.c``) does not
depend on the model: it is compiled once per
(compiler, flags, symbol prefix, runtime sources) into a cache entry of its own (``<prefix>rt-<hash>``)
and linked into every model built with those flags, so a model build runs gcc once on ``model.c``.

``$XMGE_OPT_LEVEL`` (``-O0``, ``-O1``, ``-O2``, ``-O3``, ``-Os``, ``-Og``), when set, replaces the
optimisation level of every C build but the sanitizer ones (the cache key follows the flags used).
The test suite sets ``-O1`` for correctness-only builds of whole models, where gcc's time at ``-O3``
dominates and the optimiser's output is not what is being tested; unset, the flags the emitter chose
stand (``-O3``).

``$XMGE_LIBGOMP=1`` links libgomp in place of the runtime's thread pool (``xm_parallel.c``), the
kernels' parallel regions then run on libgomp's teams: a comparison (``bench_x86.py --contended``)
and a way out; such builds are cached apart.
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

from backends.c.symbols import DEFAULT_PREFIX, check_prefix
from dialects.dtypes import QUANTIZED_STORAGE, DTypeError, element_type, numpy_dtype
from dialects.errors import XmgeError

RUNTIME_DIR = os.path.join(os.path.dirname(__file__), "runtime")
RUNTIME_FILES = (
    "xm_api.h",
    "xm_runtime.h",
    "xm_select.h",
    "xm_kernels.h",
    "xm_runtime.c",
    "xm_parallel.c",
    "runner.c",
    "xmge.hpp",
)
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


OPT_LEVEL_ENV = "XMGE_OPT_LEVEL"
# "1": link libgomp instead of the runtime's own thread pool (xm_parallel.c): for comparisons
LIBGOMP_ENV = "XMGE_LIBGOMP"
_OPT_FLAG = re.compile(r"-O[0-3sgz]?|-Ofast")
_OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os", "-Og")


def with_opt_level(flags: Sequence[str]) -> list[str]:
    """``flags`` with their optimisation level replaced by ``$XMGE_OPT_LEVEL`` when that is set (one
    ``-O`` flag then, where the first one stood); unchanged otherwise."""
    level = os.environ.get(OPT_LEVEL_ENV, "").strip()
    if not level:
        return list(flags)
    if level not in _OPT_LEVELS:
        raise BuildError(f"${OPT_LEVEL_ENV}={level!r} is not one of {', '.join(_OPT_LEVELS)}")
    out: list[str] = []
    placed = False
    for f in flags:
        if _OPT_FLAG.fullmatch(f):
            if not placed:
                out.append(level)
                placed = True
        else:
            out.append(f)
    return out if placed else [level, *out]


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
    symbols: str = DEFAULT_PREFIX  # the prefix of the library's exported symbols (``P_api``)


_PREFIX_DEFINE = re.compile(r"^#define XM_PREFIX (\w+)$", re.M)


def symbol_prefix(model_c: str) -> str:
    """The symbol prefix a generated ``model.c`` names (``#define XM_PREFIX``), else the default."""
    m = _PREFIX_DEFINE.search(model_c)
    return m.group(1) if m else DEFAULT_PREFIX


def prefix_flags(prefix: str) -> list[str]:
    """What compiles a model's sources (model.c, xm_runtime.c, runner.c) for symbol prefix ``prefix``."""
    return [f"-DXM_PREFIX={check_prefix(prefix)}"]


def library_name(prefix: str) -> str:
    return f"lib{prefix}.so"


def build(model_c: str, cflags: Sequence[str], *, cc: str = "gcc", sanitize: bool = False) -> Build:
    """Compile ``model_c`` with the runtime into ``lib<prefix>.so`` and the ``runner`` program (the
    prefix is the one ``model_c`` names)."""
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
    """Build (or find in the cache) the library ``lib<P>.so`` and runner of ``model_c`` (``P``: the
    symbol prefix ``model_c`` names), keyed by ``prefix`` and the hash of ``salt``, the compiler's
    version, ``flags`` and every source; ``runner_flags`` link the runner (``-static`` for qemu) and
    ``launcher`` is what runs it. gcc compiles ``model.c`` alone: the runtime's objects come from
    :func:`runtime_objects` (compiled once per flag set), and ``$XMGE_OPT_LEVEL`` may replace the
    optimisation level of ``flags`` (:func:`with_opt_level`)."""
    symbols = symbol_prefix(model_c)
    gomp = os.environ.get(LIBGOMP_ENV) == "1"
    salt += b"\0libgomp" if gomp else b""
    if not any(f.startswith("-fsanitize") for f in flags):  # sanitizer builds keep their -O1
        flags = with_opt_level(flags)
    flags = [*(f for f in flags if not f.startswith("-DXM_PREFIX=")), *prefix_flags(symbols)]
    runtime = runtime_sources()
    sources = {"model.c": model_c, **runtime}
    lib = library_name(symbols)

    def fill(work: str) -> None:
        rt = runtime_objects(cc, flags, runtime, salt=salt, prefix=prefix)
        write_sources(work, sources)
        run_tool([cc, *flags, "-c", "model.c", "-o", "model.o"], work)
        xm_runtime, xm_parallel, runner = (os.path.join(rt, o) for o in RUNTIME_OBJECTS)
        # no libgomp: xm_parallel.o serves the OpenMP calls, and one it lacks fails the link loudly
        # (the runner) instead of binding to libgomp's, whose threads know nothing of the pool's
        objs = ["model.o", xm_runtime] + ([] if gomp else [xm_parallel])
        link = [*(f for f in flags if f != "-fopenmp" or gomp), "-pthread", "-lm"]
        run_tool([cc, "-shared", *objs, "-o", lib, *link], work)
        run_tool([cc, *runner_flags, *objs, runner, "-o", "runner", *link], work)
        os.remove(os.path.join(work, "model.o"))

    final, cached = cached_dir(cache_key(prefix, cc, flags, sources, salt), (lib, "runner"), fill)
    return Build(final, os.path.join(final, lib), os.path.join(final, "runner"), cached, launcher, symbols)


RUNTIME_OBJECTS = ("xm_runtime.o", "xm_parallel.o", "runner.o")


def runtime_objects(
    cc: str, flags: Sequence[str], sources: dict[str, str], *, salt: bytes = b"", prefix: str = ""
) -> str:
    """The cache folder holding ``xm_runtime.o``, ``xm_parallel.o`` and ``runner.o`` compiled by ``cc``
    with ``flags`` (which carry the symbol prefix) from the runtime ``sources``: built on the first
    model of a flag set, then shared by every model linked with those flags (concurrent first builds
    race to rename the same entry into place; either one serves)."""

    def fill(work: str) -> None:
        write_sources(work, sources)
        for obj in RUNTIME_OBJECTS:
            run_tool([cc, *flags, "-c", obj[:-2] + ".c", "-o", obj], work)
        for name in sources:
            os.remove(os.path.join(work, name))

    final, _ = cached_dir(cache_key(f"{prefix}rt-", cc, flags, sources, salt), RUNTIME_OBJECTS, fill)
    return final


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


def pack_weights(blobs: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """One weights blob for the variants of a library (``CEmitter.emit``'s ``weights_offsets``): each
    variant's blob at a 64-byte multiple, byte-identical blobs stored once."""
    out = bytearray()
    offsets: list[int] = []
    seen: dict[bytes, int] = {}
    for b in blobs:
        if b not in seen:
            out += bytes(-len(out) % 64)
            seen[b] = len(out)
            out += b
        offsets.append(seen[b])
    return bytes(out), offsets


class InputError(XmgeError, ValueError):
    """A model input the compiled model cannot take as given: wrong count, shape, or a value its
    storage dtype cannot hold exactly (the message names the input)."""


class _Info(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_long * 8),
        ("nbytes", ctypes.c_ulong),
    ]


class _Shape(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int), ("dims", ctypes.c_long * 8)]


class _Variant(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("num_inputs", ctypes.c_int),
        ("num_outputs", ctypes.c_int),
        ("inputs", ctypes.POINTER(_Info)),
        ("outputs", ctypes.POINTER(_Info)),
        ("arena_size", ctypes.c_ulong),
        ("weights_offset", ctypes.c_ulong),
        ("weights_size", ctypes.c_ulong),
        ("default_threads", ctypes.c_int),
        ("impl", ctypes.c_void_p),
    ]


class _Api(ctypes.Structure):
    """``xm_api`` (runtime/xm_api.h) up to the variant table; the functions are called by their
    prefixed names."""

    _fields_ = [
        ("abi_version", ctypes.c_uint),
        ("prefix", ctypes.c_char_p),
        ("runtime", ctypes.c_char_p),
        ("weights_size", ctypes.c_ulong),
        ("num_variants", ctypes.c_int),
        ("variants", ctypes.POINTER(_Variant)),
    ]


ABI_VERSION = 2  # XM_ABI_VERSION of runtime/xm_api.h


@dataclass(frozen=True)
class Variant:
    """One compiled variant of a model in a library: its inputs and outputs as (name, shape, storage
    dtype), its arena size and its slice of the weights blob."""

    index: int
    inputs: tuple[tuple[str, tuple[int, ...], np.dtype], ...]
    quantized_inputs: tuple[bool, ...]
    outputs: tuple[tuple[str, tuple[int, ...], np.dtype], ...]
    arena_size: int
    weights_offset: int
    weights_size: int


def _table(p: Any, n: int) -> tuple[tuple[str, tuple[int, ...], np.dtype], ...]:
    out = []
    for k in range(n):
        i = p[k]
        shape = tuple(int(d) for d in i.shape[: i.ndim])
        out.append((i.name.decode(), shape, storage_dtype(i.dtype.decode(), shape, i.nbytes)))
    return tuple(out)


def checked_input(name: str, x: Any, dt: np.dtype, *, quantized: bool = False) -> np.ndarray:
    """``x`` as a C-contiguous array of storage dtype ``dt``, its shape kept (a 0-d input stays
    ``()``), or an :class:`InputError` naming input ``name`` when the conversion would change a value:
    integers out of ``dt``'s range, a float into an integer or bool input, an integer a float type
    cannot hold exactly, a finite float that overflows. Floats into a float input are rounded to it
    (float64 -> float32 is the usual way to feed a model), as numpy's ``astype`` rounds. A
    ``quantized`` input (stored as integers) also takes floats that are whole numbers in range: the
    driver hands quantized inputs over as float32 of their stored integers."""
    a = np.asarray(x)
    if a.dtype != dt:
        src, dst = a.dtype, np.dtype(dt)
        if src.kind not in "biuf" or dst.kind not in "biuf":
            raise InputError(f"input {name}: cannot take {src} values as {dst}")
        if quantized and src.kind == "f" and dst.kind in "iu":
            if a.size and not (np.isfinite(a).all() and (a == np.round(a)).all()):
                raise InputError(f"input {name}: non-integral values given for a quantized ({dst}) input")
            a = a.astype(np.float64)  # whole numbers: compared exactly against the range below
            if a.size:
                info = np.iinfo(dst)
                lo, hi = a.min(), a.max()
                if lo < info.min or hi > info.max:
                    raise InputError(
                        f"input {name}: values in [{lo:g}, {hi:g}] do not fit its storage dtype {dst} "
                        f"[{info.min}, {info.max}]"
                    )
            return a.astype(dst, order="C")
        if dst.kind in "biu" and src.kind == "f":
            raise InputError(
                f"input {name}: float values ({src}) given for a {dst} input; convert them explicitly"
            )
        if dst.kind == "b":
            if a.size and not np.isin(a, (0, 1)).all():
                raise InputError(f"input {name}: values other than 0 and 1 given for a bool input")
        elif dst.kind in "iu" and src.kind in "biu" and a.size:
            info = np.iinfo(dst)
            lo, hi = int(a.min()), int(a.max())
            if lo < info.min or hi > info.max:
                raise InputError(
                    f"input {name}: values in [{lo}, {hi}] do not fit its storage dtype {dst} "
                    f"[{info.min}, {info.max}]"
                )
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked next
            converted = a.astype(dst)
        if dst.kind == "f" and src.kind in "iu" and a.size and not (converted.astype(src) == a).all():
            raise InputError(
                f"input {name}: integers given for a {dst} input are not all exactly representable"
            )
        if dst.kind == "f" and src.kind == "f" and a.size:
            bad = np.isinf(converted) & np.isfinite(a)
            if bad.any():
                raise InputError(f"input {name}: finite values overflow its storage dtype {dst}")
        a = converted
    return a if a.flags.c_contiguous else a.copy(order="C")


class LoadedModel:
    """A built model's library in this process: ``run(inputs) -> outputs`` on numpy arrays.

    ``prefix``: the library's symbol prefix (default: from its file name, ``lib<prefix>.so``).
    With several variants in the library, ``run`` picks the one whose input shapes match the
    inputs'. ``run`` may be called from many threads at once (the runtime gives each call its own
    arena; ctypes releases the GIL); results are those of single-threaded runs, bit for bit. ``close``
    must not race with runs in flight."""

    def __init__(
        self, library: str, weights: bytes, threads: int, *, prefix: str | None = None, max_arenas: int = 0
    ):
        try:
            self.lib = ctypes.CDLL(library)
        except OSError as exc:
            raise BuildError(f"cannot load the compiled model {library}: {exc}") from exc
        self.prefix = self._find_prefix(library, prefix)
        api_fn = self.symbol("api")
        api_fn.restype = ctypes.POINTER(_Api)
        api = api_fn().contents
        if api.abi_version != ABI_VERSION:
            raise BuildError(
                f"{library} was built for runtime ABI {api.abi_version}, this xmge loads ABI {ABI_VERSION}"
            )
        self.weights_size = int(api.weights_size)
        self.variants = []
        for k in range(api.num_variants):
            v = api.variants[k]
            self.variants.append(
                Variant(
                    k,
                    _table(v.inputs, v.num_inputs),
                    tuple(v.inputs[i].dtype.decode() in QUANTIZED_STORAGE for i in range(v.num_inputs)),
                    _table(v.outputs, v.num_outputs),
                    int(v.arena_size),
                    int(v.weights_offset),
                    int(v.weights_size),
                )  # fmt: skip
            )
        self._by_shapes = {tuple(s for _, s, _ in v.inputs): v for v in self.variants}
        first = self.variants[0]
        self.inputs = [(n, s) for n, s, _ in first.inputs]
        self.outputs = [(n, s) for n, s, _ in first.outputs]
        self.input_dtypes = [d for _, _, d in first.inputs]
        self.output_dtypes = [d for _, _, d in first.outputs]
        self.arena_size = first.arena_size
        create = self.symbol("create")
        create.restype = ctypes.c_void_p
        create.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_int]
        self._run = self.symbol("run_variant")
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self._run.restype = ctypes.c_int
        self._find = self.symbol("find_variant")
        self._find.argtypes = [ctypes.c_int, ctypes.POINTER(_Shape)]
        self._find.restype = ctypes.c_int
        self._destroy = self.symbol("destroy")
        self._destroy.argtypes = [ctypes.c_void_p]
        self._error = self.symbol("last_error")
        self._error.restype = ctypes.c_char_p
        self._arenas = self.symbol("num_arenas")
        self._arenas.argtypes = [ctypes.c_void_p]
        self.handle = create(weights, len(weights), threads, max_arenas)
        if not self.handle:
            raise BuildError(f"{self.prefix}_create failed: {self._error().decode(errors='replace')}")

    def _find_prefix(self, library: str, prefix: str | None) -> str:
        base = os.path.basename(library)
        stem = base[3:].split(".so")[0] if base.startswith("lib") else base
        # the CUDA CPU harness of a model is lib<prefix>_cpu.so
        candidates = [prefix] if prefix is not None else [stem, stem.removesuffix("_cpu")]
        for p in candidates:
            if hasattr(self.lib, f"{check_prefix(p)}_api"):
                return p
        raise BuildError(f"{library} exports no {candidates[0]}_api: not an xmge model of that prefix")

    def symbol(self, name: str) -> Any:
        """The library's function ``<prefix>_<name>``."""
        return getattr(self.lib, f"{self.prefix}_{name}")

    def num_arenas(self) -> int:
        """Arenas the instance's pool holds (one per concurrent call it has met)."""
        return int(self._arenas(self.handle))

    def variant_for(self, shapes: Sequence[tuple[int, ...]]) -> Variant:
        """The variant whose inputs have ``shapes``; else an :class:`InputError` listing those held
        (the runtime's message)."""
        v = self._by_shapes.get(tuple(tuple(s) for s in shapes))
        if v is not None:
            return v
        arr = (_Shape * max(1, len(shapes)))()
        for k, s in enumerate(shapes):
            arr[k].ndim = min(len(s), 8)
            for d, n in enumerate(s[:8]):
                arr[k].dims[d] = n
        if len(shapes) != len(self.inputs):
            raise InputError(f"the model takes {len(self.inputs)} inputs, got {len(shapes)}")
        got = self._find(len(shapes), arr)
        if got >= 0:  # unreachable while _by_shapes mirrors the library's table
            return self.variants[got]
        raise InputError(self._error().decode(errors="replace"))

    def run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise InputError(f"the model takes {len(self.inputs)} inputs, got {len(inputs)}")
        raw = [np.asarray(x) for x in inputs]
        v = self._by_shapes.get(tuple(a.shape for a in raw))
        if v is None:
            if len(self.variants) == 1:
                name, shape = self.inputs[next(k for k, a in enumerate(raw) if a.shape != self.inputs[k][1])]
                got = next(a.shape for a, (_, s) in zip(raw, self.inputs, strict=True) if a.shape != s)
                raise InputError(f"input {name} must have shape {shape}, got {got}")
            v = self.variant_for([a.shape for a in raw])
        arrays = [
            checked_input(n, a, dt, quantized=q)
            for (n, _, dt), q, a in zip(v.inputs, v.quantized_inputs, raw, strict=True)
        ]
        outs = [np.empty(shape, dt) for _, shape, dt in v.outputs]
        in_ptrs = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        out_ptrs = (ctypes.c_void_p * max(1, len(outs)))(*[o.ctypes.data for o in outs])
        if self._run(self.handle, v.index, in_ptrs, out_ptrs) != 0:
            raise RunError(self._error().decode(errors="replace"))
        return outs

    def close(self) -> None:
        if getattr(self, "handle", None):
            self._destroy(self.handle)
            self.handle = None

    def __del__(self) -> None:
        self.close()
