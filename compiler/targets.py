"""Compilation targets: strings ``ARCH[-FEATURE...][+OPTION...]`` parsed by a small lark grammar.

    ref                  the reference interpreter (numpy), no code generation
    x86-avx2-nchw88      x86 with AVX2 + FMA, NCHW88 blocked layout (+io16xc32: float16 storage, F16C)
    x86-avx512           x86 with AVX-512 (F, BW, VL, DQ), plain NCHW, packed-GEMM convolutions
    x86-avx512-nchw88    AVX-512 micro-kernels (16 output channels per register) on NCHW88
    arm-nchw44           AArch64 NEON, NCHW44 layout, float32
    arm-nchw44-dot       AArch64 NEON, NCHW44 layout, int8 dot-product instructions
    arm-fp16+ioc16       AArch64, NCHW44, float16 compute with ARMv8.2 FP16 arithmetic (+io16xc32:
                         float16 storage, float32 compute)
    arm-nchw44+plain-c   the same kernels as portable scalar C (a baseline for instruction counts)
    cuda-nchw4+ioc16     CUDA, NCHW4 layout, float16 I/O and compute

A target names the pass pipeline (layout, fusions) and the backend with its ISA search order. Unknown
words are errors listing the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from lark import Lark, LarkError, Token, Tree

GRAMMAR = r"""
target: ARCH features options
features: ("-" FEATURE)*
options: ("+" OPTION)*
ARCH: /[a-z][a-z0-9_]*/
FEATURE: /[a-z0-9][a-z0-9_]*/
OPTION: /[a-z0-9][a-z0-9_]*(-[a-z0-9_]+)*/
"""

ARCHES: dict[str, str] = {
    "ref": "the reference interpreter",
    "x86": "x86-64 C kernels",
    "arm": "AArch64 NEON C kernels",
    "cuda": "CUDA kernels",
}
FEATURES: dict[str, tuple[str, ...]] = {
    "ref": (),
    "x86": ("avx2", "avx512", "nchw88"),
    "arm": ("nchw44", "dot", "fp16"),
    "cuda": ("nchw4", "nchw32", "chwn4", "nchw64"),
}
OPTIONS = ("ioc16", "io16xc32", "fuse-z", "plain-c")
LAYOUT_FEATURES = ("nchw88", "nchw44", "nchw4", "nchw32", "chwn4", "nchw64")


class TargetError(ValueError):
    """A target string that does not parse or names something unknown."""


@dataclass(frozen=True)
class Target:
    arch: str
    features: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.arch + "".join("-" + f for f in self.features) + "".join("+" + o for o in self.options)

    @property
    def backend(self) -> str:
        return {"ref": "reference", "x86": "c", "arm": "c", "cuda": "cuda"}[self.arch]

    @property
    def isas(self) -> tuple[str, ...]:
        """Template ISAs in order of preference (empty: no code generation)."""
        if self.arch == "x86":
            return ("avx512", "avx2", "generic") if "avx512" in self.features else ("avx2", "generic")
        if self.arch == "arm":
            if "plain-c" in self.options:
                return ("generic",)
            extension = tuple(f for f in ("dot", "fp16") if f in self.features)
            return (*extension, "neon", "generic")
        if self.arch == "cuda":
            return ("cuda",)
        return ()

    def inference_options(self) -> dict[str, bool]:
        """MegEngine's ``optimize_for_inference`` options this target compiles with (layout and
        float16 mode): ARM targets run NCHW44 (int8 convs in NCHW44_DOT with ``dot``); ``arm-fp16``
        computes in float16 (``+ioc16``, the default) or only stores in it (``+io16xc32``)."""
        opts: dict[str, bool] = {}
        if self.arch == "arm" and {"nchw44", "dot", "fp16"} & set(self.features):
            opts["enable_nchw44_dot" if "dot" in self.features else "enable_nchw44"] = True
        if self.arch == "x86" and "nchw88" in self.features:
            opts["enable_nchw88"] = True
        if "fp16" in self.features or "ioc16" in self.options or "io16xc32" in self.options:
            opts["enable_io16xc32" if "io16xc32" in self.options else "enable_ioc16"] = True
        return opts

    @property
    def layout(self) -> str:
        for f in self.features:
            if f in LAYOUT_FEATURES:
                return f
        return "nchw"

    def emitter(self) -> type:
        """The backend's emitter class for this target."""
        from backends.c.emitter import EMITTERS

        if self.arch == "arm":
            from backends.c.arm import arm_emitter

            return arm_emitter(self.isas)
        if self.backend != "c" or self.isas[0] not in EMITTERS:
            raise TargetError(f"target {self}: no C emitter for {self.arch} yet")
        return EMITTERS[self.isas[0]]


@cache
def _parser() -> Lark:
    return Lark(GRAMMAR, start="target", parser="lalr")


def parse_target(text: str) -> Target:
    """Parse ``ARCH[-FEATURE...][+OPTION...]``; an unknown word is a :class:`TargetError` that lists
    the valid words in its place."""
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
    features = tuple(str(t) for t in feats.children)
    for f in features:
        if f not in FEATURES[arch]:
            valid = ", ".join(FEATURES[arch]) or "none"
            raise TargetError(f"unknown feature {f!r} for {arch} in target {text!r}; valid: {valid}")
    if len(set(features)) != len(features):
        raise TargetError(f"target {text!r} repeats a feature")
    if len([f for f in features if f in LAYOUT_FEATURES]) > 1:
        raise TargetError(f"target {text!r} names more than one layout")
    options = tuple(str(t) for t in opts.children)
    for o in options:
        if o not in OPTIONS:
            raise TargetError(f"unknown option {o!r} in target {text!r}; valid: {', '.join(OPTIONS)}")
    return Target(arch, features, options)


def host_target() -> Target:
    """The best x86 target this machine runs (from /proc/cpuinfo), or ``ref`` elsewhere: NCHW88 with
    AVX-512 micro-kernels where the CPU has AVX-512, else AVX2 with NCHW88 (``bench/bench_x86.py``
    measures every x86 target; the blocked layout wins on ResNet-18 and MobileNetV2, plain NCHW with
    AVX-512 GEMMs on ResNet-50 and ShuffleNetV2, so ``x86-avx512`` stays a target of its own)."""
    flags = cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return Target("x86", ("avx512", "nchw88"))
    if {"avx2", "fma"} <= flags:
        return Target("x86", ("avx2", "nchw88"))
    return Target("ref")


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
    if target.backend == "reference":
        return True
    if target.arch != "x86":
        return False
    need = {"avx2", "fma"} | (
        {"avx512f", "avx512bw", "avx512vl", "avx512dq"} if "avx512" in target.features else set()
    )
    return need <= cpu_flags()


__all__ = ["Target", "TargetError", "cpu_flags", "host_target", "parse_target", "runs_here"]
