"""AArch64 emitters: thin subclasses of :class:`backends.c.emitter.CEmitter` (tinygrad's shape).

Only knobs differ from x86, read off :mod:`backends.c.isa_facts`: NEON intrinsic spellings and
register blocking for the shared GEMM micro-kernel generator (8x12 on NEON: 24 accumulators of the
32 vector registers) and the cross-compiler flags. Building goes through :mod:`backends.c.cross` (cross gcc,
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
from backends.c.isa_facts import ARM_CFLAGS, ARM_PLAIN, DOT, FP16, I8MM, NEON


class ArmNeonEmitter(CEmitter):
    facts = NEON


class ArmDotEmitter(ArmNeonEmitter):
    facts = DOT


class ArmFp16Emitter(ArmNeonEmitter):
    facts = FP16


class ArmI8mmEmitter(ArmNeonEmitter):
    """+ the ARMv8.6 int8 matrix multiply (``smmla``, ``vmmlaq_s32``; ``arm-nchw44-dot-i8mm``)."""

    facts = I8MM


class ArmPlainEmitter(CEmitter):
    """Portable C for AArch64 with gcc's auto-vectoriser off: the scalar baseline."""

    facts = ARM_PLAIN


__all__ = [
    "ARM_CFLAGS",
    "ArmDotEmitter",
    "ArmFp16Emitter",
    "ArmI8mmEmitter",
    "ArmNeonEmitter",
    "ArmPlainEmitter",
]
