"""Each C template ISA and the emitter whose knobs (vector type, intrinsics, GEMM register blocking)
its templates render with: the one table the shared generators and the backends read."""

from __future__ import annotations

from backends.c.arm import ArmDotEmitter, ArmFp16Emitter, ArmI8mmEmitter, ArmNeonEmitter
from backends.c.emitter import CEmitter, X86Avx2Emitter, X86Avx512Emitter

ISA_EMITTERS: dict[str, type[CEmitter]] = {
    "generic": CEmitter,
    "avx2": X86Avx2Emitter,
    "avx512": X86Avx512Emitter,
    "neon": ArmNeonEmitter,
    "dot": ArmDotEmitter,
    "fp16": ArmFp16Emitter,
    "i8mm": ArmI8mmEmitter,
}

from backends.c.templates.x86.x86_isa import EXTENSIONS, OPTION_EXTENSIONS  # noqa: E402 - emitters first

ISA_EMITTERS.update({e.isa: e.emitter for e in (*EXTENSIONS, *OPTION_EXTENSIONS)})
