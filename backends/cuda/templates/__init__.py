"""CUDA kernel units: each reuses a C kernel unit's availability rule, parameters, symbol and packing
(``backends/c/templates``) or the shared rule helpers (``backends/c/match.py``) and renders a
``__global__`` kernel plus the host launcher the generated ``xm_model_run_impl`` calls:

    static void sym(const void* in0, ..., void* out0, unsigned char* ws, int nt)

Launchers enqueue on the run's stream (``XM_LAUNCH``; ``XM_LAUNCH_SYNC`` for kernels with barriers,
which the CPU harness runs as fibers). Shapes are compile-time constants of each specialisation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

BLOCK = 256  # threads per block of the one-thread-per-output kernels


class CudaRender:
    """Mixin for CUDA units: ``render`` gives the kernel and its launcher."""

    def render(self, em: CEmitter, sym: str, params: dict[str, Any]) -> str:
        raise NotImplementedError

    def support(self, em: CEmitter) -> str:
        return ""


def unflatten(shape: Sequence[int], flat: str = "i") -> str:
    """Lines declaring ``i0..`` (row-major indices of ``shape``) from the flat index ``flat``; each
    marked used (nvcc -Werror: a one-element operand's index has stride 0 everywhere)."""
    nd = len(shape)
    used = " ".join(f"(void)i{k};" for k in range(nd))
    if nd == 1:
        return f"const long i0 = {flat}; {used}"
    lines = [f"long r_ = {flat};"]
    for k in range(nd - 1, 0, -1):
        lines.append(f"const long i{k} = r_ % {shape[k]}L; r_ /= {shape[k]}L;")
    lines.append(f"const long i0 = r_; {used}")
    return "\n    ".join(lines)


def kernel_args(args: Sequence[tuple[str, str]]) -> tuple[str, str, str]:
    """For kernel parameters ``args`` ((C type, name), inputs first, then outputs): the kernel's
    parameter list, its launcher's (each as ``const void* name_`` / ``void* name_`` by constness,
    then ``ws`` and ``nt``) and the casts with which the launcher passes them on."""
    params = ", ".join(f"{t} {n}" for t, n in args)
    launcher = ", ".join(
        [
            *(f"{'const void*' if t.startswith('const') else 'void*'} {n}_" for t, n in args),
            "unsigned char* ws",
            "int nt",
        ]
    )
    casts = ", ".join(f"({t}){n}_" for t, n in args)
    return params, launcher, casts


def thread_kernel(sym: str, params: str, threads: int, body: str) -> str:
    """The kernel ``<sym>_k(params)`` running ``body`` once per flat index ``i < threads``."""
    return f"""
extern "C" __global__ void __launch_bounds__({BLOCK}) {sym}_k({params}) {{
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= {threads}L) return;
  {{
    {body}
  }}
}}
"""


def pointwise(sym: str, args: Sequence[tuple[str, str]], total: int, body: str) -> str:
    """A kernel running ``body`` once per flat index ``i < total`` and its launcher (``args`` as
    :func:`kernel_args` takes them)."""
    params, launcher, casts = kernel_args(args)
    blocks = max(1, math.ceil(total / BLOCK))
    return thread_kernel(sym, params, total, body) + f"""static void {sym}({launcher}) {{
  (void)ws; (void)nt;
  XM_LAUNCH({sym}_k, dim3({blocks}), dim3({BLOCK}), {casts});
}}
"""
