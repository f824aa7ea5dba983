"""``+bf16`` on a CPU with AVX512-BF16 but no AMX tiles (ISA ``avx512bf16``, target
``x86-avx512[-vnni]+bf16``): the AMX-BF16 kernels' operands and numeric contract
(:mod:`backends.c.templates.x86_amx_bf16`: inputs rounded to bfloat16 to nearest even, exact
products, float32 sums and epilogue), multiplied by ``vdpbf16ps`` alone. The filters are packed at
compile time into the same ``[OC/16][K/32][16][32]`` bfloat16 blocks, the activations converted
(``vcvtne2ps2bf16``) into interleaved k pairs while they are packed; no tile instruction is
compiled, so the library runs on an AMD EPYC (Zen 4) as on a Xeon. Depthwise convolutions stay
float32 (no GEMM to feed).

The units are the ``conv2d_bf16_amx`` / ``matmul_bf16_amx`` families on another ISA (the registry's
one family per rule and priority: the AMX-tile operand layout is what the family names; the target's
ISA order picks the instructions)."""

from __future__ import annotations

from backends.c.templates.x86_amx_bf16 import Conv2dBf16Amx, MatmulBf16Amx

ISA = "avx512bf16"


class Conv2dBf16(Conv2dBf16Amx):
    """Dense and grouped float32 NCHW convolution on bfloat16 operands with ``vdpbf16ps``."""

    isa = ISA
    tiles = False


class MatmulBf16(MatmulBf16Amx):
    """float32 matrix products (batched too) on bfloat16 operands with ``vdpbf16ps``."""

    isa = ISA
    tiles = False


KERNEL_UNITS = (Conv2dBf16(), MatmulBf16())

__all__ = ["ISA", "KERNEL_UNITS"]
