"""AArch64 emitters: thin subclasses of :class:`backends.c.emitter.CEmitter` (tinygrad's shape).

Only knobs differ from x86: NEON intrinsic spellings and register blocking for the shared GEMM
micro-kernel generator (8x12 on NEON: 24 accumulators of the 32 vector registers) and the
cross-compiler flags. Building goes through :mod:`backends.c.cross` (cross gcc,
static runner, qemu) because the code cannot run on the x86 host.

* ``neon``  float32 NEON (``arm``, ``arm-nchw44``)
* ``dot``   + ARMv8.2 dot product, ``vdotq_s32`` (``arm-nchw44-dot``)
* ``fp16``  + ARMv8.2 FP16 arithmetic (``arm-fp16``)
* ``i8mm``  + int8 matrix multiply, ``vmmlaq_s32`` (``arm-nchw44-dot-i8mm``; searched before ``dot``)
* ``generic`` on ARM (``+plain-c``): the same kernels from the same templates rendered as portable
  scalar C and compiled with auto-vectorisation off: the baseline of ``bench/bench_arm.py``.
"""

from __future__ import annotations

from backends.c.emitter import CEmitter

# every ARM build targets ARMv8.2-A with the dot-product and FP16 extensions (``-cpu max`` in qemu);
# kernels only use what their ISA allows, so the neon build also runs on v8.2 cores without them
ARM_MARCH = "-march=armv8.2-a+dotprod+fp16"
ARM_CFLAGS: tuple[str, ...] = ("-O2", "-std=gnu11", "-fPIC", "-fopenmp", ARM_MARCH)


# NEON has no masked loads: partial vectors of the GEMM's edge tiles go through a small buffer
NEON_HEADER = """#include <arm_neon.h>
static inline float32x4_t xm_vld1q_f32_n(const float* p, int n) {
  float t[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < n && i < 4; ++i) t[i] = p[i];
  return vld1q_f32(t);
}
static inline void xm_vst1q_f32_n(float* p, int n, float32x4_t v) {
  float t[4];
  vst1q_f32(t, v);
  for (int i = 0; i < n && i < 4; ++i) p[i] = t[i];
}"""


class ArmNeonEmitter(CEmitter):
    name = "arm-neon"
    vec = 4
    vtype = "float32x4_t"
    header = NEON_HEADER
    load = "vld1q_f32({p})"
    loadu = "vld1q_f32({p})"
    store = "vst1q_f32({p}, {v})"
    storeu = "vst1q_f32({p}, {v})"
    set1 = "vdupq_n_f32({x})"
    zero = "vdupq_n_f32(0.f)"
    fma = "vfmaq_f32({c}, {a}, {b})"
    mask_type = "int"
    mask_make = "({n})"
    maskload = "xm_vld1q_f32_n({p}, {m})"
    maskstore = "xm_vst1q_f32_n({p}, {m}, {v})"
    cflags = ARM_CFLAGS
    gemm_mr = 8
    gemm_nr = 12


class ArmDotEmitter(ArmNeonEmitter):
    name = "arm-dot"


class ArmFp16Emitter(ArmNeonEmitter):
    name = "arm-fp16"


class ArmI8mmEmitter(ArmNeonEmitter):
    """+ the ARMv8.6 int8 matrix multiply (``smmla``, ``vmmlaq_s32``; ``arm-nchw44-dot-i8mm``)."""

    name = "arm-i8mm"
    cflags = (*ARM_CFLAGS[:-1], ARM_MARCH + "+i8mm")


class ArmPlainEmitter(CEmitter):
    """Portable C for AArch64 with gcc's auto-vectoriser off: the scalar baseline."""

    name = "arm-plain"
    header = "#include <arm_neon.h>"  # for the float16 scalar type only
    load = "({p})[0]"
    loadu = "({p})[0]"
    store = "({p})[0] = {v}"
    storeu = "({p})[0] = {v}"
    cflags = (*ARM_CFLAGS, "-fno-tree-vectorize")



__all__ = [
    "ARM_CFLAGS",
    "ArmDotEmitter",
    "ArmFp16Emitter",
    "ArmI8mmEmitter",
    "ArmNeonEmitter",
    "ArmPlainEmitter",
]
