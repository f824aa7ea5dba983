"""The x86 instruction-set extensions beyond AVX-512 F/BW/VL/DQ that xmge's kernels use: the target
feature naming each, the template ISA it adds to the search order, the CPU flags it needs and the
emitter (compiler flags) its templates render with. One table, read by the x86 backend and
``backends/targets.py``; kept apart from the templates because the emitters import the registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backends.c.emitter import CEmitter, X86Avx512Emitter
from backends.c.isa_facts import AMX, AMX_BF16, AVX512BF16, AVX512FP16, AVX512VBMI, AVX512VNNI
from backends.c.templates.x86.x86_amx_os import amx_permitted
from passes.target import TargetError


class X86Avx512VnniEmitter(X86Avx512Emitter):
    facts = AVX512VNNI


class X86Avx512Fp16Emitter(X86Avx512Emitter):
    facts = AVX512FP16


class X86AmxEmitter(X86Avx512VnniEmitter):
    """AMX tiles; the kernels keep a VNNI path for a process the kernel refuses tile data."""

    facts = AMX


class X86Avx512VbmiEmitter(X86Avx512VnniEmitter):
    """AVX512-VBMI byte permutes (``vpermi2b``) beside the VNNI kernels they serve."""

    facts = AVX512VBMI


class X86Avx512Bf16Emitter(X86Avx512Emitter):
    """AVX512-BF16 (``vdpbf16ps``, ``vcvtne2ps2bf16``) for ``+bf16`` on a CPU without AMX tiles."""

    facts = AVX512BF16


class X86AmxBf16Emitter(X86AmxEmitter):
    """AMX-BF16 tiles for ``+bf16`` (float32 convolutions and matrix products on bfloat16 inputs); the
    kernels keep an AVX512-BF16 path for a process the kernel refuses tile data."""

    facts = AMX_BF16


@dataclass(frozen=True)
class Extension:
    feature: str  # the target word (``x86-avx512-nchw88-vnni``)
    isa: str  # the template ISA searched ahead of ``avx512``
    cpu_flags: frozenset[str]  # /proc/cpuinfo flags the code needs
    emitter: type[CEmitter]
    description: str
    # what the operating system must allow beyond the CPU flags (asked by host_target only)
    permitted: Callable[[], bool] = lambda: True


EXTENSIONS: tuple[Extension, ...] = (
    Extension(
        "vnni", "avx512vnni", frozenset({"avx512_vnni"}), X86Avx512VnniEmitter,
        "AVX512-VNNI int8 kernels (vpdpbusd)",
    ),
    Extension(
        "fp16", "avx512fp16", frozenset({"avx512_fp16"}), X86Avx512Fp16Emitter,
        "AVX512-FP16 float16 kernels (vfmadd231ph) for +ioc16",
    ),
    Extension(
        "amx", "amx", frozenset({"amx_tile", "amx_int8", "avx512_vnni"}), X86AmxEmitter,
        "AMX-INT8 tile convolutions (tdpbsud), a VNNI path where Linux refuses tile data",
        amx_permitted,
    ),
    Extension(
        "vbmi", "avx512vbmi", frozenset({"avx512vbmi", "avx512_vnni"}), X86Avx512VbmiEmitter,
        "AVX512-VBMI byte-table ReLU6 islands (vpermi2b) in the int8 convolutions' epilogues",
    ),
)  # fmt: skip


@dataclass(frozen=True)
class OptionExtension:
    """An extension a target *option* turns on (``+bf16``): a different numeric contract, so never
    implied by the host's CPU flags the way a feature row is. An option may have several rows, most
    capable first: the first whose ``feature`` the target names serves it (:func:`option_rows`)."""

    option: str  # the target option word (``x86-avx512-amx+bf16``)
    isa: str  # the template ISA searched ahead of the feature rows' ISAs
    feature: str  # the target feature it builds on (its kernels' fallback and tile set-up)
    cpu_flags: frozenset[str]
    emitter: type[CEmitter]
    description: str


OPTION_EXTENSIONS: tuple[OptionExtension, ...] = (
    OptionExtension(
        "bf16", "amxbf16", "amx", frozenset({"amx_bf16", "avx512_bf16"}), X86AmxBf16Emitter,
        "float32 convolutions and matrix products on AMX-BF16 tiles (tdpbf16ps): inputs rounded to "
        "bfloat16, float32 accumulation",
    ),
    OptionExtension(
        "bf16", "avx512bf16", "avx512", frozenset({"avx512_bf16"}), X86Avx512Bf16Emitter,
        "float32 convolutions and matrix products with AVX512-BF16 (vdpbf16ps) where the target has no "
        "amx: the same contract as the AMX-BF16 tiles",
    ),
)  # fmt: skip


def option_rows(
    features: tuple[str, ...] | list[str], options: tuple[str, ...] | list[str]
) -> tuple[OptionExtension, ...]:
    """The row serving each of ``options`` that has rows: its first row whose feature the target
    names. An option with rows but none matching is a :class:`passes.target.TargetError`."""
    chosen: list[OptionExtension] = []
    for option in dict.fromkeys(o.option for o in OPTION_EXTENSIONS):
        if option not in options:
            continue
        rows = [o for o in OPTION_EXTENSIONS if o.option == option]
        row = next((o for o in rows if o.feature in features), None)
        if row is None:
            needs = " or ".join(o.feature for o in rows)
            raise TargetError(f"x86 +{option} needs the {needs} feature (e.g. x86-avx512+{option})")
        chosen.append(row)
    return tuple(chosen)


def extension_isas(
    features: tuple[str, ...] | list[str], options: tuple[str, ...] | list[str] = ()
) -> tuple[str, ...]:
    """The extension ISAs a target's options and features add, most specific first (a later row
    builds on the earlier ones: AMX kernels keep a VNNI path)."""
    chosen = tuple(o.isa for o in option_rows(features, options))
    return (*chosen, *(e.isa for e in reversed(EXTENSIONS) if e.feature in features))


def extension_cflags(isas: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Compiler flags every extension ISA in ``isas`` needs (one translation unit holds them all)."""
    flags: list[str] = []
    for e in (*EXTENSIONS, *OPTION_EXTENSIONS):
        if e.isa in isas:
            flags += [f for f in e.emitter.cflags if f not in flags]
    return tuple(flags)
