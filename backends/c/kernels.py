"""The kernel registry of the C backends: every template of every ISA, listed explicitly (no import
side effects). Both C backends hand it to the lowering passes; a target's ISA order picks its units.

Priorities order the families that serve one op (higher first); families of different layouts or
element types never accept the same op, so their relative order only matters within such a group.
``xmge-opt --list-kernels`` prints every unit with its family, ISA, priority and file (read off this
registry); where the order is subtle, the family's template says why next to its ``priority``.
"""

from __future__ import annotations

from backends.c.templates.arm import (
    neon,
    neon_depthwise,
    neon_fp16,
    neon_gemm,
    neon_i8mm,
    neon_int8,
    neon_int8_ends,
    neon_matvec,
    neon_move,
    neon_winograd,
)
from backends.c.templates.portable import (
    conv_runtime_weight,
    generic,
    image,
    indexing,
    int_elemwise,
    moves,
    portable,
    typed,
    vision,
)
from backends.c.templates.x86 import (
    depthwise_x86,
    gemm,
    nchw88,
    winograd,
    x86_amx,
    x86_amx_bf16,
    x86_amx_matmul,
    x86_avx512_bf16,
    x86_f32_dw,
    x86_f32_dw_stem,
    x86_f32_expand_dw,
    x86_f32_matvec,
    x86_fp16,
    x86_fp16_pixrows,
    x86_fp16_stem,
    x86_fp16_winograd,
    x86_int8,
    x86_int8_amx_island,
    x86_int8_avx2,
    x86_int8_gemm,
    x86_int8_stem,
    x86_int8_vbmi,
)
from passes.lowering.kernels import KernelRegistry

KERNELS = KernelRegistry(
    (
        *generic.KERNEL_UNITS,
        *depthwise_x86.KERNEL_UNITS,
        *x86_f32_dw.KERNEL_UNITS,
        *x86_f32_expand_dw.KERNEL_UNITS,
        *x86_f32_dw_stem.KERNEL_UNITS,
        *x86_f32_matvec.KERNEL_UNITS,
        *gemm.KERNEL_UNITS,
        *typed.KERNEL_UNITS,
        *nchw88.KERNEL_UNITS,
        *winograd.KERNEL_UNITS,
        *neon.KERNEL_UNITS,
        *portable.KERNEL_UNITS,
        *indexing.KERNEL_UNITS,
        *int_elemwise.KERNEL_UNITS,
        *conv_runtime_weight.KERNEL_UNITS,
        *vision.KERNEL_UNITS,
        *image.KERNEL_UNITS,
        *x86_int8.KERNEL_UNITS,
        *x86_fp16.KERNEL_UNITS,
        *x86_amx.KERNEL_UNITS,
        *x86_int8_gemm.KERNEL_UNITS,
        *x86_int8_avx2.KERNEL_UNITS,
        *x86_fp16_winograd.KERNEL_UNITS,
        *x86_fp16_stem.KERNEL_UNITS,
        *x86_fp16_pixrows.KERNEL_UNITS,
        *x86_amx_bf16.KERNEL_UNITS,
        *x86_avx512_bf16.KERNEL_UNITS,
        *x86_int8_amx_island.KERNEL_UNITS,
        *x86_int8_vbmi.KERNEL_UNITS,
        *x86_int8_stem.KERNEL_UNITS,
        *x86_amx_matmul.KERNEL_UNITS,
        *neon_gemm.KERNEL_UNITS,
        *neon_int8.KERNEL_UNITS,
        *neon_i8mm.KERNEL_UNITS,
        *neon_int8_ends.KERNEL_UNITS,
        *neon_matvec.KERNEL_UNITS,
        *neon_depthwise.KERNEL_UNITS,
        *neon_fp16.KERNEL_UNITS,
        *neon_move.KERNEL_UNITS,
        *neon_winograd.KERNEL_UNITS,
        *moves.KERNEL_UNITS,
    ),
    examples_from="backends.c.examples",
)
