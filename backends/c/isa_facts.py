"""The facts of each C template ISA as data: vector type and lane count, the float32 intrinsic
spellings the shared generators render with, the GEMM register blocking and the compiler flags.

A leaf module (it imports nothing from ``backends/c``): the emitters (:mod:`backends.c.emitter`,
:mod:`backends.c.arm`, the x86 extension levels of ``templates/x86/x86_isa.py``) are views of one
record each, so a fact such as AVX2's FMA spelling or NEON's GEMM tile lives in one place. Spellings
are ``str.format`` patterns over ``{p}`` (pointer), ``{v}`` (vector), ``{x}`` (scalar), ``{a} {b} {c}``
(``a * b + c``), ``{m}`` (mask) and ``{n}`` (lane count).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class IsaFacts:
    """One ISA's knobs. ``name`` is the emitter's name (``x86-avx2``), not the ISA key (``avx2``)."""

    name: str
    vec: int = 1  # float32 lanes of one vector (1: no explicit SIMD)
    vtype: str = "float"
    header: str = ""
    load: str = "({p})[0]"
    loadu: str = "({p})[0]"
    store: str = "({p})[0] = {v}"
    storeu: str = "({p})[0] = {v}"
    set1: str = "({x})"
    zero: str = "0.f"
    fma: str = "({a} * {b} + {c})"
    # masked access for partial tiles: mask type, mask of the first {n} lanes, masked load / store
    mask_type: str = "int"
    mask_make: str = "({n})"
    maskload: str = "({m} > 0 ? ({p})[0] : 0.f)"
    maskstore: str = "if ({m} > 0) ({p})[0] = {v}"
    cflags: tuple[str, ...] = ("-O3", "-std=gnu11", "-fPIC", "-fopenmp")
    # GEMM register blocking (rows of A held in registers x columns of B as vectors)
    gemm_mr: int = 4
    gemm_nr: int = 4
    gemm_kc: int = 256

    def extended(self, name: str, *cflags: str) -> IsaFacts:
        """The same vector knobs under ``name`` with ``cflags`` added (an ISA extension level)."""
        return replace(self, name=name, cflags=(*self.cflags, *cflags))


KNOBS: tuple[str, ...] = tuple(f.name for f in fields(IsaFacts))

GENERIC = IsaFacts("c")

AVX2 = IsaFacts(
    "x86-avx2",
    vec=8,
    vtype="__m256",
    header="#include <immintrin.h>\n#include <stdint.h>",
    load="_mm256_load_ps({p})",
    loadu="_mm256_loadu_ps({p})",
    store="_mm256_store_ps({p}, {v})",
    storeu="_mm256_storeu_ps({p}, {v})",
    set1="_mm256_set1_ps({x})",
    zero="_mm256_setzero_ps()",
    fma="_mm256_fmadd_ps({a}, {b}, {c})",
    mask_type="__m256i",
    mask_make="_mm256_cmpgt_epi32(_mm256_set1_epi32({n}), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))",
    maskload="_mm256_maskload_ps({p}, {m})",
    maskstore="_mm256_maskstore_ps({p}, {m}, {v})",
    cflags=(*GENERIC.cflags, "-mavx2", "-mfma", "-mf16c"),
    gemm_mr=6,
    gemm_nr=16,
)

AVX512 = replace(
    AVX2,
    name="x86-avx512",
    vec=16,
    vtype="__m512",
    load="_mm512_load_ps({p})",
    loadu="_mm512_loadu_ps({p})",
    store="_mm512_store_ps({p}, {v})",
    storeu="_mm512_storeu_ps({p}, {v})",
    set1="_mm512_set1_ps({x})",
    zero="_mm512_setzero_ps()",
    fma="_mm512_fmadd_ps({a}, {b}, {c})",
    mask_type="__mmask16",
    mask_make="(__mmask16)(({n}) >= 16 ? 0xFFFF : ({n}) <= 0 ? 0 : (1u << ({n})) - 1)",
    maskload="_mm512_maskz_loadu_ps({m}, {p})",
    maskstore="_mm512_mask_storeu_ps({p}, {m}, {v})",
    cflags=(*AVX2.cflags, "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq"),
    gemm_mr=12,
    gemm_nr=32,
)

# the AVX-512 extension levels (``templates/x86/x86_isa.py`` says which target feature enables each)
AVX512VNNI = AVX512.extended("x86-avx512vnni", "-mavx512vnni")
AVX512FP16 = AVX512.extended("x86-avx512fp16", "-mavx512fp16")
AMX = AVX512VNNI.extended("x86-amx", "-mamx-tile", "-mamx-int8")
AVX512VBMI = AVX512VNNI.extended("x86-avx512vbmi", "-mavx512vbmi")
AVX512BF16 = AVX512.extended("x86-avx512bf16", "-mavx512bf16")
AMX_BF16 = AMX.extended("x86-amx-bf16", "-mamx-bf16", "-mavx512bf16")

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

NEON = IsaFacts(
    "arm-neon",
    vec=4,
    vtype="float32x4_t",
    header=NEON_HEADER,
    load="vld1q_f32({p})",
    loadu="vld1q_f32({p})",
    store="vst1q_f32({p}, {v})",
    storeu="vst1q_f32({p}, {v})",
    set1="vdupq_n_f32({x})",
    zero="vdupq_n_f32(0.f)",
    fma="vfmaq_f32({c}, {a}, {b})",
    maskload="xm_vld1q_f32_n({p}, {m})",
    maskstore="xm_vst1q_f32_n({p}, {m}, {v})",
    cflags=ARM_CFLAGS,
    gemm_mr=8,
    gemm_nr=12,
)
DOT = replace(NEON, name="arm-dot")
FP16 = replace(NEON, name="arm-fp16")
# + the ARMv8.6 int8 matrix multiply (``smmla``, ``vmmlaq_s32``; ``arm-nchw44-dot-i8mm``)
I8MM = replace(NEON, name="arm-i8mm", cflags=(*ARM_CFLAGS[:-1], ARM_MARCH + "+i8mm"))
# portable C for AArch64 with gcc's auto-vectoriser off: the scalar baseline (``+plain-c``)
ARM_PLAIN = replace(
    GENERIC,
    name="arm-plain",
    header="#include <arm_neon.h>",  # for the float16 scalar type only
    cflags=(*ARM_CFLAGS, "-fno-tree-vectorize"),
)

# every template ISA key (the ``isa`` of kernel units, a target's search order) to its record
ISA_FACTS: dict[str, IsaFacts] = {
    "generic": GENERIC,
    "avx2": AVX2,
    "avx512": AVX512,
    "avx512vnni": AVX512VNNI,
    "avx512fp16": AVX512FP16,
    "amx": AMX,
    "avx512vbmi": AVX512VBMI,
    "avx512bf16": AVX512BF16,
    "amxbf16": AMX_BF16,
    "neon": NEON,
    "dot": DOT,
    "fp16": FP16,
    "i8mm": I8MM,
}
