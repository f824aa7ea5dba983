"""Builds of generated CUDA: ``nvcc`` for the GPU (sm_80 and sm_90, warnings as errors, ptxas resource
usage recorded) and ``g++`` for the CPU execution harness (``runtime/cuda_cpu.h``), each cached by the
hash of everything that determines it, like the C backend's builds (``backends/c/build.py``).

A build directory holds ``lib<prefix>.so`` and ``runner`` (the C backends' runner and runtime API,
so the same loader and runner serve both) and, for nvcc, ``resources.json``: per architecture and
kernel, registers, spill stores / loads and shared memory from ``-Xptxas -v``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from backends.c.build import (
    cache_key,
    cached_dir,
    library_name,
    prefix_flags,
    run_tool,
    symbol_prefix,
    write_sources,
)
from backends.c.build import runtime_sources as c_runtime_sources

RUNTIME_DIR = os.path.join(os.path.dirname(__file__), "runtime")
RUNTIME_FILES = ("xm_kernels.h", "cuda_cpu.h", "xm_cuda_runtime.cu")
# the C backends' API headers, variant selection and runner, unchanged
SHARED_FILES = ("xm_api.h", "xm_runtime.h", "xm_select.h", "runner.c")
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
    prefix = symbol_prefix(model_cu)
    flags = [*flags, *prefix_flags(prefix)]
    nv_flags = [*flags, "-Werror", "all-warnings", "-Xptxas", "-v"]
    lib = library_name(prefix)

    def fill(work: str) -> None:
        rt = nvcc_runtime_objects(cc, flags, prefix)
        xm_runtime, runner = (os.path.join(rt, o) for o in NVCC_RUNTIME_OBJECTS)
        write_sources(work, sources)
        log = run_tool([cc, *nv_flags, "-c", "model.cu", "-o", "model.o"], work)
        run_tool([cc, *flags, "-shared", "model.o", xm_runtime, "-o", lib], work)
        run_tool([cc, *flags, "model.o", xm_runtime, runner, "-o", "runner"], work)
        with open(os.path.join(work, "resources.json"), "w") as f:
            json.dump(parse_ptxas(log), f, indent=1)
        os.remove(os.path.join(work, "model.o"))

    return cached_dir(cache_key("cuda-", cc, nv_flags, sources), (lib, "runner", "resources.json"), fill)


NVCC_RUNTIME_OBJECTS = ("xm_cuda_runtime.o", "runner.o")


def nvcc_runtime_objects(cc: str, flags: Sequence[str], prefix: str) -> str:
    """The cache folder holding the runtime (``xm_cuda_runtime.o``) and the runner's ``runner.o``
    compiled by nvcc with ``flags`` (which carry the symbol prefix): they do not depend on the model,
    so every model of a prefix and flag set links the same ones (about half of a small model's nvcc
    time otherwise)."""
    sources = runtime_sources()

    def fill(work: str) -> None:
        write_sources(work, sources)
        run_tool([cc, *flags, "-c", "xm_cuda_runtime.cu", "-o", NVCC_RUNTIME_OBJECTS[0]], work)
        runner_flags = ["-O2", "-Xcompiler", "-fPIC", *prefix_flags(prefix)]
        run_tool([cc, *runner_flags, "-c", "runner.c", "-o", NVCC_RUNTIME_OBJECTS[1]], work)
        for name in sources:
            os.remove(os.path.join(work, name))

    final, _ = cached_dir(cache_key("cudart-", cc, flags, sources), NVCC_RUNTIME_OBJECTS, fill)
    return final


def harness_build(model_cu: str, cxx: str = "g++") -> tuple[str, bool]:
    """The CPU-harness build directory of ``model_cu`` (``lib<prefix>_cpu.so``)."""
    sources = {"model.cu": model_cu, **runtime_sources()}
    prefix = symbol_prefix(model_cu)
    flags = [*HARNESS_FLAGS, *prefix_flags(prefix)]
    lib = harness_library_name(prefix)

    def fill(work: str) -> None:
        write_sources(work, sources)
        run_tool([cxx, *flags, "-shared", "model.cu", "xm_cuda_runtime.cu", "-o", lib, "-pthread"], work)

    return cached_dir(cache_key("cudacpu-", cxx, flags, sources), (lib,), fill)


def harness_library_name(prefix: str) -> str:
    return library_name(prefix).removesuffix(".so") + "_cpu.so"


def build(model_cu: str, flags: Sequence[str], *, native: bool = True) -> CudaBuild:
    """The harness build, and the nvcc build when ``native`` and nvcc exists."""
    cpu_dir, cpu_cached = harness_build(model_cu)
    prefix = symbol_prefix(model_cu)
    cpu_lib = os.path.join(cpu_dir, harness_library_name(prefix))
    if not native or nvcc() is None:
        return CudaBuild(None, None, None, cpu_lib, cpu_cached, {})
    d, cached = nvcc_build(model_cu, flags)
    with open(os.path.join(d, "resources.json")) as f:
        resources = json.load(f)
    return CudaBuild(
        d,
        os.path.join(d, library_name(prefix)),
        os.path.join(d, "runner"),
        cpu_lib,
        cached and cpu_cached,
        resources,
    )
