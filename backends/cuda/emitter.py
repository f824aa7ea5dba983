"""CUDA source from the kernel dialect: the C emitter with CUDA knobs (tinygrad's renderer shape).

The model translation unit, ``xm_model_run_impl`` (one launcher call per ``kernel.call`` on device
pointers into the arena, the weights and the I/O buffers) and the metadata are the base emitter's;
what differs is the kernel registry the templates come from and the nvcc flags.
"""

from __future__ import annotations

from typing import ClassVar

from backends.c.emitter import CEmitter, EmitError
from backends.c.templates import Template
from backends.cuda.kernels import KERNELS
from backends.cuda.templates import CudaRender
from dialects import kernel as K

# every kernel family is built for these (sm_80: A100 and later Ampere/Ada by binary compatibility;
# sm_90: Hopper); PTX of the newest for the JIT on later GPUs
ARCHS: tuple[str, ...] = ("80", "90")


class CudaEmitter(CEmitter):
    name = "cuda"
    header = ""  # the runtime's xm_kernels.h is the CUDA one (backends/cuda/runtime)
    # --fmad=false: no implicit FMA contraction, so quantized kernels round exactly as the reference;
    # float32 kernels use fmaf explicitly
    cflags: ClassVar[tuple[str, ...]] = (
        "-O3",
        "-std=c++17",
        "--fmad=false",
        "-Xcompiler",
        "-fPIC",
        *(f"-gencode=arch=compute_{a},code=sm_{a}" for a in ARCHS),
        f"-gencode=arch=compute_{ARCHS[-1]},code=compute_{ARCHS[-1]}",
    )

    def template(self, d: K.KernelDefOp) -> Template:
        t = KERNELS.unit(d.family.data, d.isa.data)
        if not isinstance(t, CudaRender):
            raise EmitError(f"no CUDA kernel for family {d.family.data!r} on ISA {d.isa.data!r}")
        return t  # type: ignore[return-value]
