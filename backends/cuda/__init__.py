"""The CUDA backend: the C emitter's CUDA subclass, CUDA kernel units, nvcc builds and a runtime loaded
with ctypes; a CPU execution harness (``runtime/cuda_cpu.h``) runs the same source without a GPU."""
