"""Compilation targets: strings ``ARCH[-FEATURE...][+OPTION...]`` parsed by a small lark grammar, and
the table of architectures with the backend object of each.

    ref                  the reference interpreter (numpy), no code generation
    x86-avx2-nchw88      x86 with AVX2 + FMA, NCHW88 blocked layout (+io16xc32: float16 storage, F16C)
    x86-avx512           x86 with AVX-512 (F, BW, VL, DQ), plain NCHW, packed-GEMM convolutions
    x86-avx512-nchw88    AVX-512 micro-kernels (16 output channels per register) on NCHW88
    x86-avx512-...-vnni  + AVX512-VNNI int8 kernels (plain NCHW int8 graphs); the host target names
                         every extension feature its CPU has (backends/c/templates/x86/x86_isa.py)
    x86-avx512-fp16+ioc16  float16 storage and AVX512-FP16 arithmetic, plain NCHW (the fp16 feature alone
                         keeps float32; +ioc16 without it is an error)
    x86-avx512-...-amx   + AMX-INT8 tile convolutions (a VNNI path where Linux refuses tile data)
    x86-avx512-amx+bf16  float32 convolutions and matrix products on AMX-BF16 tiles: inputs rounded to
                         bfloat16, float32 accumulation (opt-in: a looser numeric contract)
    x86-avx512+bf16      the same contract with AVX512-BF16 (vdpbf16ps) on a CPU without AMX
    x86-avx512-nchw88+bf16  the same on the NCHW88 graph (no AMX): bfloat16 NCHW88 convolutions, the
                         float32 NCHW88 depthwise, pooling and F(4x4, 3x3) Winograd layers
    arm-nchw44           AArch64 NEON, NCHW44 layout, float32
    arm-nchw44-dot       AArch64 NEON, NCHW44 layout, int8 dot-product instructions
    arm-nchw44-dot-i8mm  + ARMv8.6 int8 matrix multiply (smmla) for the int8 convolutions
    arm-fp16+ioc16       AArch64, NCHW44, float16 compute with ARMv8.2 FP16 arithmetic (+io16xc32:
                         float16 storage, float32 compute)
    arm-nchw44+plain-c   the same kernels as portable scalar C (a baseline for instruction counts)
    cuda                 CUDA, float32 NCHW (+ioc16 / +io16xc32: float16 with tensor cores)
    cuda-nchw4           CUDA, int8 NCHW4 convolutions with __dp4a
    cuda-nchw32          CUDA, int8 NCHW32 convolutions on tensor cores (WMMA, sm_75+)
    cuda-chwn4           CUDA, int8 CHWN4 convolutions with __dp4a
    cuda-nchw64          CUDA, NCHW64 layout pass (int8 convs NCHW32 / NCHW4 with __dp4a)

A target names the pass pipeline (layout, fusions) and the backend with its ISA search order. Unknown
words are errors listing the valid ones. Importing this module installs :func:`parse_target` as the
parser of the passes' ``target`` options (:func:`passes.target.resolve_target`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from lark import Lark, LarkError, Token, Tree

from backends.c.backend import ARM, X86
from backends.c.templates.x86.x86_isa import EXTENSIONS as X86_EXTENSIONS
from backends.cuda.backend import CUDA
from backends.reference.backend import REFERENCE
from passes.target import LAYOUT_FEATURES, Backend, Target, TargetError, float16_options, install_parser

GRAMMAR = r"""
target: ARCH features options
features: ("-" FEATURE)*
options: ("+" OPTION)*
ARCH: /[a-z][a-z0-9_]*/
FEATURE: /[a-z0-9][a-z0-9_]*/
OPTION: /[a-z0-9][a-z0-9_]*(-[a-z0-9_]+)*/
"""


@dataclass(frozen=True)
class Arch:
    description: str
    features: tuple[str, ...]
    backend: Backend | None  # None: parsed, but nothing compiles for it yet


ARCHES: dict[str, Arch] = {
    "ref": Arch("the reference interpreter", (), REFERENCE),
    "x86": Arch("x86-64 C kernels", ("avx2", "avx512", "nchw88", *(e.feature for e in X86_EXTENSIONS)), X86),
    "arm": Arch("AArch64 NEON C kernels", ("nchw44", "dot", "fp16", "i8mm"), ARM),
    "cuda": Arch(
        "CUDA kernels (nvcc; a CPU harness without a GPU)", ("nchw4", "nchw32", "chwn4", "nchw64"), CUDA
    ),
}
OPTIONS = ("ioc16", "io16xc32", "fuse-z", "plain-c", "bf16")


@cache
def _parser() -> Lark:
    return Lark(GRAMMAR, start="target", parser="lalr")


def parse_target(text: str) -> Target:
    """Parse ``ARCH[-FEATURE...][+OPTION...]``; an unknown word is a :class:`TargetError` that lists
    the valid words in its place."""
    if not isinstance(text, str):
        raise TargetError(
            f"a target is a string such as 'x86-avx2' or 'arm-nchw44-dot' (or a Target), "
            f"got {type(text).__name__} {text!r}"
        )
    if text.strip() == "host":  # the word the CLI and compile() default to: this machine's best
        return host_target()
    try:
        tree = _parser().parse(text.strip())
    except LarkError as exc:
        raise TargetError(
            f"cannot parse target {text!r}: expected ARCH[-FEATURE...][+OPTION...], "
            f"e.g. x86-avx2-nchw88 or arm-nchw44-dot+io16xc32 ({str(exc).splitlines()[0]})"
        ) from None
    assert isinstance(tree, Tree)
    arch_tok, feats, opts = tree.children
    assert isinstance(arch_tok, Token) and isinstance(feats, Tree) and isinstance(opts, Tree)
    arch = str(arch_tok)
    if arch not in ARCHES:
        raise TargetError(f"unknown architecture {arch!r} in target {text!r}; valid: {', '.join(ARCHES)}")
    spec = ARCHES[arch]
    features = tuple(str(t) for t in feats.children)
    for f in features:
        if f not in spec.features:
            valid = ", ".join(spec.features) or "none"
            raise TargetError(f"unknown feature {f!r} for {arch} in target {text!r}; valid: {valid}")
    if len(set(features)) != len(features):
        raise TargetError(f"target {text!r} repeats a feature")
    if len([f for f in features if f in LAYOUT_FEATURES]) > 1:
        raise TargetError(f"target {text!r} names more than one layout")
    options = tuple(str(t) for t in opts.children)
    for o in options:
        if o not in OPTIONS:
            raise TargetError(f"unknown option {o!r} in target {text!r}; valid: {', '.join(OPTIONS)}")
    backend = spec.backend
    isas = backend.isas(features, options) if backend is not None else ()
    dump = backend.inference_options(features, options) if backend else float16_options(features, options)
    return Target(arch, features, options, isas, tuple(dump), backend)


def host_target() -> Target:
    """The best x86 target this machine runs (from /proc/cpuinfo), or ``ref`` elsewhere: NCHW88 with
    AVX-512 micro-kernels where the CPU has AVX-512 (plus the extension features it has, e.g.
    ``-vnni`` for the int8 kernels, ``-amx`` where Linux also grants AMX tile data), else AVX2 with
    NCHW88 (``bench/bench_x86.py`` measures every x86 target; the blocked layout wins on ResNet-18
    and MobileNetV2, plain NCHW with AVX-512 GEMMs on ResNet-50 and ShuffleNetV2, so ``x86-avx512``
    stays a target of its own)."""
    for text in ("x86-avx512-nchw88", "x86-avx2-nchw88"):
        if runs_here(parse_target(text)):
            if "avx512" in text:
                text += "".join(
                    f"-{e.feature}" for e in X86_EXTENSIONS if e.cpu_flags <= cpu_flags() and e.permitted()
                )
            return parse_target(text)
    return parse_target("ref")


@cache
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def runs_here(target: Target) -> bool:
    """Whether code for ``target`` can execute on this machine."""
    return target.backend is not None and target.backend.runs_here(target)


install_parser(parse_target)

__all__ = [
    "ARCHES",
    "OPTIONS",
    "Target",
    "TargetError",
    "cpu_flags",
    "host_target",
    "parse_target",
    "runs_here",
]
