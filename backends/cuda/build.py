"""Builds of generated CUDA: ``nvcc`` for the GPU (sm_80 and sm_90, warnings as errors, ptxas resource
usage recorded) and ``g++`` for the CPU execution harness (``runtime/cuda_cpu.h``), each cached by the
hash of everything that determines it, like the C backend's builds (``backends/c/build.py``).

A build directory holds ``libxmge_model.so`` and ``runner`` (the C backends' runner and runtime API,
so the same loader and runner serve both) and, for nvcc, ``resources.json``: per architecture and
kernel, registers, spill stores / loads and shared memory from ``-Xptxas -v``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from backends.c.build import BuildError, cache_root, compiler_version
from backends.c.build import runtime_sources as c_runtime_sources

RUNTIME_DIR = os.path.join(os.path.dirname(__file__), "runtime")
RUNTIME_FILES = ("xm_kernels.h", "cuda_cpu.h", "xm_cuda_runtime.cu")
SHARED_FILES = ("xm_runtime.h", "runner.c")  # the C backends' API header and runner, unchanged
HARNESS_FLAGS = ("-O1", "-std=c++17", "-fPIC", "-ffp-contract=off", "-fno-strict-aliasing", "-x", "c++")


def runtime_sources() -> dict[str, str]:
    out = {}
    for name in RUNTIME_FILES:
        with open(os.path.join(RUNTIME_DIR, name)) as f:
            out[name] = f.read()
    c_files = c_runtime_sources()
    return {**out, **{name: c_files[name] for name in SHARED_FILES}}


@cache
def nvcc() -> str | None:
    """The nvcc on the PATH (or under /usr/local/cuda), None without one."""
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )


@dataclass(frozen=True)
class CudaBuild:
    """``library``/``runner``: the nvcc build (None without nvcc); ``cpu_library``: the harness build."""

    directory: str | None
    library: str | None
    runner: str | None
    cpu_library: str
    cached: bool
    resources: dict[str, dict[str, dict[str, int]]]
    launcher: tuple[str, ...] = ()


def _key(prefix: str, compiler: str, flags: Sequence[str], sources: dict[str, str]) -> str:
    h = hashlib.sha256(compiler_version(compiler).encode())
    h.update("\0".join(flags).encode())
    for name in sorted(sources):
        h.update(name.encode() + b"\0" + sources[name].encode() + b"\0")
    return prefix + h.hexdigest()[:24]


def _cached(key: str, outputs: Sequence[str], fill: callable) -> tuple[str, bool]:  # type: ignore[valid-type]
    """The cache directory ``key`` holding ``outputs``, filled by ``fill(workdir)`` if missing
    (in a temporary sibling renamed into place, so concurrent builds never see half a build)."""
    root = cache_root()
    final = os.path.join(root, key)
    if all(os.path.isfile(os.path.join(final, o)) for o in outputs):
        return final, True
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix=key + ".", dir=root)
    try:
        fill(work)
        try:
            os.rename(work, final)
        except OSError:  # another process finished the same build first
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return final, False


def _write_sources(work: str, sources: dict[str, str]) -> None:
    for name, text in sources.items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)


def _run(cmd: list[str], cwd: str) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed in {cwd}:\n{(proc.stderr + proc.stdout)[-6000:]}")
    return proc.stdout + proc.stderr


PTXAS_FUNCTION = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+)'")
PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_USAGE = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, dict[str, dict[str, int]]]:
    """``-Xptxas -v`` output as {arch: {kernel: {registers, spill_stores, spill_loads, smem}}}."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    current: dict[str, int] | None = None
    for line in log.splitlines():
        if m := PTXAS_FUNCTION.search(line):
            current = out.setdefault(m.group(2), {}).setdefault(
                m.group(1), {"registers": 0, "spill_stores": 0, "spill_loads": 0, "smem": 0}
            )
        elif current is not None and (m := PTXAS_SPILLS.search(line)):
            current["spill_stores"], current["spill_loads"] = int(m.group(1)), int(m.group(2))
        elif current is not None and (m := PTXAS_USAGE.search(line)):
            current["registers"] = int(m.group(1))
            current["smem"] = int(m.group(2) or 0)
    return out


def nvcc_build(model_cu: str, flags: Sequence[str]) -> tuple[str, bool]:
    """The nvcc build directory of ``model_cu`` (library, runner, resources.json)."""
    cc = nvcc()
    assert cc is not None
    sources = {"model.cu": model_cu, **runtime_sources()}
    nv_flags = [*flags, "-Werror", "all-warnings", "-Xptxas", "-v"]

    def fill(work: str) -> None:
        _write_sources(work, sources)
        log = _run([cc, *nv_flags, "-c", "model.cu", "-o", "model.o"], work)
        _run([cc, *flags, "-c", "xm_cuda_runtime.cu", "-o", "xm_cuda_runtime.o"], work)
        _run([cc, "-O2", "-Xcompiler", "-fPIC", "-c", "runner.c", "-o", "runner.o"], work)
        _run([cc, *flags, "-shared", "model.o", "xm_cuda_runtime.o", "-o", "libxmge_model.so"], work)
        _run([cc, *flags, "model.o", "xm_cuda_runtime.o", "runner.o", "-o", "runner"], work)
        with open(os.path.join(work, "resources.json"), "w") as f:
            json.dump(parse_ptxas(log), f, indent=1)
        for obj in ("model.o", "xm_cuda_runtime.o", "runner.o"):
            os.remove(os.path.join(work, obj))

    return _cached(
        _key("cuda-", cc, nv_flags, sources), ("libxmge_model.so", "runner", "resources.json"), fill
    )


def harness_build(model_cu: str, cxx: str = "g++") -> tuple[str, bool]:
    """The CPU-harness build directory of ``model_cu`` (``libxmge_model_cpu.so``)."""
    sources = {"model.cu": model_cu, **runtime_sources()}

    def fill(work: str) -> None:
        _write_sources(work, sources)
        _run(
            [cxx, *HARNESS_FLAGS, "-shared", "model.cu", "xm_cuda_runtime.cu", "-o", "libxmge_model_cpu.so"],
            work,
        )

    return _cached(_key("cudacpu-", cxx, HARNESS_FLAGS, sources), ("libxmge_model_cpu.so",), fill)


def build(model_cu: str, flags: Sequence[str], *, native: bool = True) -> CudaBuild:
    """The harness build, and the nvcc build when ``native`` and nvcc exists."""
    cpu_dir, cpu_cached = harness_build(model_cu)
    cpu_lib = os.path.join(cpu_dir, "libxmge_model_cpu.so")
    if not native or nvcc() is None:
        return CudaBuild(None, None, None, cpu_lib, cpu_cached, {})
    d, cached = nvcc_build(model_cu, flags)
    with open(os.path.join(d, "resources.json")) as f:
        resources = json.load(f)
    return CudaBuild(
        d,
        os.path.join(d, "libxmge_model.so"),
        os.path.join(d, "runner"),
        cpu_lib,
        cached and cpu_cached,
        resources,
    )
