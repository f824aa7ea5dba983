"""The kernel registry of the C backends: every template of every ISA, listed explicitly (no import
side effects). Both C backends hand it to the lowering passes; a target's ISA order picks its units.

Priorities order the families that serve one op (higher first). Families of different layouts or
element types never accept the same op, so their relative order only matters within a group:

* convolutions: NCHW88 channel-wise 300, Winograd 290, NCHW88 direct 280; NCHW44 int8 ``smmla``
  packed GEMM 210 (neon_i8mm, ``i8mm`` targets), NCHW44 int8 dot-product
  register-blocked GEMM 205 (neon_int8), NCHW44 int8 dot product 200, NCHW44 float register-blocked
  GEMM 195 (neon_gemm), NCHW44 float depthwise 3x3 192 (neon_depthwise), NCHW44 float 190, NCHW44
  int8 180; NCHW float32 depthwise 110, GEMM 100;
  NCHW int8: x86 AMX few-channel first layers 98 (x86_int8_stem), x86 AMX dense 97 (x86_amx), x86
  depthwise 96, x86 dense 95, portable 90;
  NCHW float32 with +bf16: AMX-BF16 dense 107 (x86_amx_bf16), behind the float32 depthwise 110;
  NCHW44 float Winograd 197 (neon_winograd: 3x3 stride 1 where its cost model beats the GEMM);
* float32 NCHW convolutions whose filter is computed at run time (conv_runtime_weight, direct): 10,
  behind every family that packs a constant filter;
* float32 depthwise 3x3 NCHW88 convolutions, stride 1 or 2 (x86_f32_dw): 305, ahead of the
  NCHW88 channel-wise 300; on AVX-512 with the 1x1 expand convolution before them as one kernel
  (x86_f32_expand_dw): 306, ahead of the depthwise alone, and that kernel with the 1x1 project
  convolution after it (serving the project): 307;
* float32 3x3 stride-2 first layers (plain input, NCHW88 output) on AVX-512 (x86_f32_dw_stem): 285,
  ahead of the NCHW88 direct 280 (its hybrid mode);
* pooling: NCHW88 300, NCHW44 float16 210 (neon_fp16), NCHW44 200, NCHW float32 100, NCHW int8 x86
  95, portable 90;
* elementwise, matrix multiplication, data movement: float32 100, float16 NEON elementwise 97
  (neon_fp16), int8 x86 95, other element types 90;
* float32 matrix multiplication with +bf16: AMX-BF16 106 (x86_amx_bf16), ahead of the matvec and the GEMM;
* int8 matrix multiplication with a constant right operand: AMX-INT8 96 (x86_amx_matmul);
* one-row float32 matrix products with constant weights (classifier heads): NEON matvec 105
  (neon_matvec) and its AVX2 / AVX-512 units (x86_f32_matvec), ahead of the float32 GEMM;
* int8 NEON (neon_int8): NCHW44 max pooling 205, same-shape Q-mode elementwise 94; float32 / int32
  <-> int8 typecvt (``neon``) and the ``sdot`` int8 matmul (``dot``) are their families' units on
  those ISAs (neon_int8_ends);
* integer / bool element types the float32 and int32 families leave out (int_elemwise): elementwise
  arithmetic and comparisons on int8 / int16 / uint8 / uint16 (and integer max, min, mod, pow,
  floor_div on int32), max pooling, bool min / max reductions: 89;
* one family per op (priority 100): resize, deconv2d, layer_norm, batch_norm, arg_reduce, pad,
  modify_subtensor (set / incr of a static slice), indexing (advanced indexing: get, set, incr),
  linspace.
* float16 compute on AVX512-FP16 (x86_fp16.py, NCHW): small-output convolution 109
  (x86_fp16_pixrows.py, declining what the others keep), depthwise convolution 108, Winograd 3x3 106
  (x86_fp16_winograd.py), first-layer direct 105 (x86_fp16_stem.py), GEMM convolution 104,
  pooling 105, matrix multiplication 99, elementwise 97 (the elemwise_f16 family of neon_fp16);
* typecvt: an x86 int8 convolution with its ReLU6 float island (typecvt, relu6, typecvt) 102 (dense)
  and 101 (depthwise), ahead of typecvt 100 (x86_int8.py); 103 for the AMX one (x86_int8_amx_island),
  104 for the AMX first layer's (x86_int8_stem).
"""

from __future__ import annotations

from backends.c.templates import (
    conv_runtime_weight,
    depthwise_x86,
    gemm,
    generic,
    indexing,
    int_elemwise,
    nchw88,
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
    portable,
    typed,
    winograd,
    x86_amx,
    x86_amx_bf16,
    x86_amx_matmul,
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
        *x86_int8.KERNEL_UNITS,
        *x86_fp16.KERNEL_UNITS,
        *x86_amx.KERNEL_UNITS,
        *x86_int8_gemm.KERNEL_UNITS,
        *x86_int8_avx2.KERNEL_UNITS,
        *x86_fp16_winograd.KERNEL_UNITS,
        *x86_fp16_stem.KERNEL_UNITS,
        *x86_fp16_pixrows.KERNEL_UNITS,
        *x86_amx_bf16.KERNEL_UNITS,
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
    )
)
