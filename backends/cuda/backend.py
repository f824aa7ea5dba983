"""The CUDA backend object (:class:`passes.target.Backend`) of targets ``cuda``, ``cuda-nchw4``,
``cuda-nchw32``, ``cuda-chwn4``, ``cuda-nchw64`` and their ``+ioc16`` / ``+io16xc32`` float16 modes.

Emission is :class:`backends.cuda.emitter.CudaEmitter`; a build is the nvcc build (sm_80 + sm_90)
plus the CPU-harness build of the same source. Loading picks the nvcc library where a GPU is present
(libcudart loads and reports a device) and the harness library otherwise, through the C backends'
ctypes loader (the runtime API is the same). Per-kernel profiles and the runner need a GPU.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from backends.c.backend import CBackendBase, _write
from backends.c.build import LoadedModel, library_name, prefix_flags
from backends.c.symbols import DEFAULT_PREFIX
from backends.cuda.build import HARNESS_FLAGS, CudaBuild, build, harness_library_name, runtime_sources
from backends.cuda.emitter import CudaEmitter
from backends.cuda.kernels import KERNELS
from passes.lowering.kernels import KernelRegistry
from passes.target import BackendError, KernelTime, Target, float16_options

CUDART_NAMES = ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so")


@cache
def gpu_problem() -> str | None:
    """Why no CUDA GPU can run code here (None when one can): libcudart must load and
    ``cudaGetDeviceCount`` report a device."""
    lib = None
    for name in CUDART_NAMES:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return "libcudart is not installed"
    count = ctypes.c_int(0)
    err = lib.cudaGetDeviceCount(ctypes.byref(count))
    if err != 0:
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        return f"cudaGetDeviceCount failed: {lib.cudaGetErrorString(err).decode()} (error {err})"
    return None if count.value > 0 else "no CUDA device"


class CudaBackend(CBackendBase):
    """CUDA kernels; ISAs searched ``mma`` (tensor cores), ``dp4a``, ``generic`` as the layout allows."""

    name = "cuda"
    options: tuple[str, ...] = ("ioc16", "io16xc32")
    kernels: KernelRegistry = KERNELS

    @property
    def emulated(self) -> bool:  # type: ignore[override]
        """Without a GPU the CPU harness runs the kernels: results exact, timings meaningless."""
        return gpu_problem() is not None

    def isas(self, features: Sequence[str], options: Sequence[str]) -> tuple[str, ...]:
        isas: tuple[str, ...] = ("generic",)
        if {"nchw4", "nchw32", "chwn4", "nchw64"} & set(features):
            isas = ("dp4a", *isas)
        if {"nchw32", "nchw64"} & set(features) or float16_options(features, options):
            isas = ("mma", *isas)
        return isas

    def inference_options(self, features: Sequence[str], options: Sequence[str]) -> dict[str, bool]:
        layout = {f"enable_{f}": True for f in features if f in ("nchw4", "nchw32", "chwn4", "nchw64")}
        return {**layout, **float16_options(features, options)}

    def runs_here(self, target: Target) -> bool:
        return True  # on the GPU, or through the CPU harness

    def emitter(self, target: Target) -> type[CudaEmitter]:  # type: ignore[override]
        return CudaEmitter

    def build(  # type: ignore[override]
        self, target: Target, source: str, cflags: Sequence[str], *, sanitize: bool = False
    ) -> CudaBuild:
        if sanitize:
            raise BackendError(
                "sanitizer builds are for the C backends; CUDA code runs under compute-sanitizer"
            )
        return build(source, cflags)

    def load(self, artifact: CudaBuild, weights: bytes, threads: int) -> LoadedModel:  # type: ignore[override]
        if gpu_problem() is None and artifact.library is not None:
            return LoadedModel(artifact.library, weights, threads)
        return LoadedModel(artifact.cpu_library, weights, threads)

    def run_runner(  # type: ignore[override]
        self,
        artifact: Any,
        weights: bytes,
        inputs: Sequence[np.ndarray],
        output_shapes: Sequence[tuple[int, ...]],
        *,
        threads: int,
        iters: int = 1,
    ) -> list[np.ndarray]:
        problem = gpu_problem()
        if problem is not None or artifact.runner is None:
            raise BackendError(f"the CUDA runner needs a GPU ({problem or 'no nvcc build'})")
        return super().run_runner(artifact, weights, inputs, output_shapes, threads=threads, iters=iters)

    def profile(self, model: Any, inputs: Sequence[Any], iters: int) -> list[KernelTime]:
        problem = gpu_problem()
        if problem is not None:
            raise BackendError(f"target {model.target}: per-kernel times need a GPU ({problem})")
        return super().profile(model, inputs, iters)

    def save(self, model: Any, directory: str) -> dict[str, Any]:
        """``model.cu``, the runtime sources and a Makefile for nvcc (``make cpu``: the CPU harness)."""
        from backends.c.build import symbol_prefix

        prefix = symbol_prefix(model.source)
        _write(os.path.join(directory, "model.cu"), model.source)
        for name, text in {**runtime_sources(), "Makefile": makefile(model.cflags, prefix)}.items():
            _write(os.path.join(directory, name), text)
        return {
            "library": library_name(prefix),
            "build": "make  (nvcc; `make cpu` builds the CPU harness library with g++)",
        }


def makefile(cflags: Sequence[str], prefix: str = DEFAULT_PREFIX) -> str:
    """The package's Makefile: ``lib<prefix>.so`` and the runner with nvcc, ``lib<prefix>_cpu.so``
    (the CPU harness) with g++; every source compiled with the model's symbol prefix."""
    define = " ".join(prefix_flags(prefix))
    flags = " ".join([*cflags, define])
    harness = " ".join([*HARNESS_FLAGS, define])
    lib, cpu = library_name(prefix), harness_library_name(prefix)
    return f"""# generated by xmge: builds the model with nvcc (no GPU needed to build)
NVCC ?= nvcc
CXX ?= g++
NVFLAGS ?= {flags}

all: {lib} runner

model.o: model.cu xm_kernels.h xm_runtime.h xm_api.h
\t$(NVCC) $(NVFLAGS) -Werror all-warnings -Xptxas -v -c model.cu -o model.o
xm_cuda_runtime.o: xm_cuda_runtime.cu xm_kernels.h xm_runtime.h xm_api.h
\t$(NVCC) $(NVFLAGS) -c xm_cuda_runtime.cu -o xm_cuda_runtime.o
runner.o: runner.c xm_runtime.h xm_api.h
\t$(NVCC) -O2 -Xcompiler -fPIC {define} -c runner.c -o runner.o
{lib}: model.o xm_cuda_runtime.o
\t$(NVCC) $(NVFLAGS) -shared model.o xm_cuda_runtime.o -o $@
runner: model.o xm_cuda_runtime.o runner.o
\t$(NVCC) $(NVFLAGS) model.o xm_cuda_runtime.o runner.o -o $@

# the same source on the CPU (cuda_cpu.h): results without a GPU
cpu: {cpu}
{cpu}: model.cu xm_cuda_runtime.cu xm_kernels.h cuda_cpu.h xm_runtime.h xm_api.h
\t$(CXX) {harness} -shared model.cu xm_cuda_runtime.cu -o $@ -pthread

clean:
\trm -f *.o {lib} {cpu} runner

.PHONY: all cpu clean
"""


CUDA = CudaBackend()
