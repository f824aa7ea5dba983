"""The CUDA backend's kernel registry (explicit list, no import side effects).

ISAs (searched in the target's order, see :meth:`backends.cuda.backend.CudaBackend.isas`): ``mma``
(tensor cores: int8 NCHW32 and float16 WMMA, sm_75+), ``dp4a`` (int8 blocked layouts), ``generic``
(portable CUDA, every op). Priorities among the families of one op:

* convolutions: NCHW32 int8 tensor cores 220, blocked int8 dp4a (NCHW4 / NCHW32 / CHWN4 / NCHW64)
  200, float16 WMMA 150, float32 depthwise 110, float32 direct 100, NCHW int8 90;
* pooling: blocked int8 200, float32 100, NCHW int8 90;
* elementwise, matrix multiplication, data movement: float32 100, other element types 90;
* one family per op (priority 100): modify_subtensor, indexing, linspace (the C units' rules).
"""

from __future__ import annotations

from backends.cuda.templates import indexing, int8, portable
from passes.lowering.kernels import KernelRegistry

KERNELS = KernelRegistry((*portable.KERNEL_UNITS, *int8.KERNEL_UNITS, *indexing.KERNEL_UNITS))
