"""``+bf16`` on a CPU with AVX512-BF16 but no AMX tiles (ISA ``avx512bf16``, target
``x86-avx512[-vnni]+bf16``): the AMX-BF16 kernels' operands and numeric contract
(:mod:`backends.c.templates.x86.x86_amx_bf16`: inputs rounded to bfloat16 to nearest even, exact
products, float32 sums and epilogue), multiplied by ``vdpbf16ps`` alone. The filters are packed at
compile time into the same ``[OC/16][K/32][16][32]`` bfloat16 blocks, the activations converted
(``vcvtne2ps2bf16``) into interleaved k pairs while they are packed; no tile instruction is
compiled, so the library runs on an AMD EPYC (Zen 4) as on a Xeon. Depthwise convolutions stay
float32 (no GEMM to feed).

The units are the ``conv2d_bf16_amx`` / ``matmul_bf16_amx`` families on another ISA (the registry's
one family per rule and priority: the AMX-tile operand layout is what the family names; the target's
ISA order picks the instructions)."""

from __future__ import annotations

from xdsl.ir import Operation

from backends.c.templates.x86.x86_amx_bf16 import Conv2dBf16Amx, MatmulBf16Amx
from passes.lowering.kernels import Lowered

ISA = "avx512bf16"


class Conv2dBf16(Conv2dBf16Amx):
    """Dense and grouped float32 NCHW convolution on bfloat16 operands with ``vdpbf16ps``."""

    isa = ISA
    tiles = False


class MatmulBf16(MatmulBf16Amx):
    """float32 matrix products (batched too) on bfloat16 operands with ``vdpbf16ps``. A one-row
    product is left to the float32 matrix-vector kernel (``matmul_matvec``): the 16-row blocks would
    compute 15 rows of zeros (MobileNetV2's classifier, 1x1280 by 1280x1000: 0.33 ms here against
    0.23 for the float32 matvec, AMD EPYC, one thread)."""

    isa = ISA
    tiles = False

    def match(self, op: Operation) -> Lowered | None:
        got = super().match(op)
        if got is None or got.params["m"] == 1:
            return None
        return got


KERNEL_UNITS = (Conv2dBf16(), MatmulBf16())

__all__ = ["ISA", "KERNEL_UNITS"]
