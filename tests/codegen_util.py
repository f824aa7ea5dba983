"""Helpers for the code-generation tests: compile a traced function for a target and compare every
output with the reference interpreter on the same inputs."""

from __future__ import annotations

import re
import subprocess
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

import numpy as np
import pytest

import compiler as xm
from compiler import dtype as D
from compiler.driver.compile import CompiledModel, EmulationWarning, compile
from compiler.driver.targets import parse_target, runs_here
from semantics import run_module
from semantics.quant_kernels import quantize

X86_TARGETS = ["x86-avx2", "x86-avx512"]


def require(target: str) -> None:
    """Skip when this machine cannot run code for ``target`` (e.g. no AVX-512 in /proc/cpuinfo)."""
    if not runs_here(parse_target(target)):
        pytest.skip(f"this CPU cannot run {target}")


def compile_fn(
    fn: Callable[..., object], inputs: Sequence[np.ndarray], target: str, threads: int = 1
) -> CompiledModel:
    traced = xm.jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(x) for x in inputs])
    return compile(traced, target, threads=threads)


def check(
    fn: Callable[..., object],
    inputs: Sequence[np.ndarray],
    target: str,
    *,
    threads: int = 1,
    rtol: float = 1e-4,
    atol: float = 1e-4,
) -> CompiledModel:
    """Compile ``fn`` for ``target``, run it, and compare with the reference interpreter (for more
    than 1 thread on the 1-thread build, ``compile_fn_threads``)."""
    require(target)
    compiled = compile_fn_threads(fn, inputs, target, threads)
    want = run_module(compiled._stages["tensor"], list(inputs))  # type: ignore[arg-type]
    got = compiled.run(inputs)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w, np.float32)
        assert g.shape == w.shape, f"output {i}: shape {g.shape} != {w.shape}"
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale, err_msg=f"output {i} ({target})")
    return compiled


def assert_threads_agree(
    fn: Callable[..., object], inputs: Sequence[np.ndarray], target: str, one: CompiledModel
) -> CompiledModel:
    """Compile ``fn`` for 2 threads and check its outputs equal ``one``'s (1 thread) bit for bit;
    the 2-thread model is returned for checks on its code."""
    two = compile_fn_threads(fn, inputs, target, 2)
    for a, b in zip(one.run(inputs), two.run(inputs), strict=True):
        np.testing.assert_array_equal(a, b)
    return two


def compile_fn_threads(
    fn: Callable[..., object], inputs: Sequence[np.ndarray], target: str, threads: int
) -> CompiledModel:
    """``compile_fn`` for ``threads`` whose library is built from its C with the variants' default
    thread count set to 1: the kernels take the count at run time (a load and the runner pass
    ``threads``), so where nothing else differs, the 1-thread compile's build is found in the cache
    and the same kernels run on ``threads`` threads without a second gcc build. ``source`` and
    ``ir("c")`` stay the ``threads`` compile's own; do not ``save`` such a model."""
    with _unbuilt(target):
        compiled = compile_fn(fn, inputs, target, threads)
    neutral = _DEFAULT_THREADS.sub(r"\g<1>1\2", compiled.source)
    compiled.build = compiled.backend.build(compiled.target, neutral, compiled.cflags)
    return compiled


# a variant's default thread count in the generated descriptor table (backends/c/emitter.py)
_DEFAULT_THREADS = re.compile(r"(UL, )\d+(, xm_model_run_impl_v\d+\},)$", re.M)


@contextmanager
def _unbuilt(target: str, build: Callable[..., object] | None = None) -> Iterator[None]:
    """Within the block, compiles for ``target`` call ``build(target, source, cflags)`` in place of
    the backend's build (None: no build, the model's ``build`` stays None). Not reentrant."""
    backend = parse_target(target).backend
    assert backend is not None

    def replaced(tgt: object, source: str, cflags: Sequence[str], *, sanitize: bool = False) -> object:
        return build(tgt, source, cflags) if build is not None else None

    backend.build = replaced  # type: ignore[method-assign]
    try:
        yield
    finally:
        del backend.build


def source_only(target: str) -> AbstractContextManager[None]:
    """Within the block, compiles for ``target`` stop at the generated C (``source``, ``ir``): no gcc
    build, for checks on the code alone; the model cannot run."""
    return _unbuilt(target)


def check_sanitized(
    compiled: CompiledModel,
    inputs: Sequence[np.ndarray],
    *,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    scaled: bool = True,
) -> None:
    """Run ``compiled``'s standalone runner built with ASan / UBSan and compare every output with the
    reference interpreter (``atol`` times the output's magnitude, at least 1, when ``scaled``)."""
    got = compiled.run_runner(inputs, sanitize=True)
    want = run_module(compiled._stages["tensor"], list(inputs))  # type: ignore[arg-type]
    for g, w in zip(got, want, strict=True):
        scale = max(1.0, float(np.abs(w).max())) if scaled else 1.0
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale)


def compile_sanitized(
    fn: Callable[..., object], inputs: Sequence[np.ndarray], target: str, threads: int = 1
) -> CompiledModel:
    """``compile_fn`` for a model only ever run by ``run_runner(sanitize=True)`` (``check_sanitized``):
    its one build is the ASan/UBSan one, which ``run_runner`` then finds in the build cache, so no
    -O3 build nobody runs (about half of such a test's gcc time). Its ``run`` cannot load the
    sanitized library into Python: do not call it."""
    require(target)
    backend = parse_target(target).backend
    assert backend is not None
    real = type(backend).build

    def sanitized(tgt: object, source: str, cflags: Sequence[str]) -> object:
        return real(backend, tgt, source, cflags, sanitize=True)  # type: ignore[arg-type]

    with _unbuilt(target, sanitized):
        return compile_fn(fn, inputs, target, threads)


def assert_instructions(compiled: CompiledModel, instructions: Sequence[str]) -> None:
    """Each of ``instructions`` appears in the disassembly of ``compiled``'s library."""
    disassembly = subprocess.run(["objdump", "-d", compiled.build.library], capture_output=True, text=True)
    for instruction in instructions:
        assert instruction in disassembly.stdout, instruction


def kernel_families(compiled: CompiledModel) -> set[tuple[str, str]]:
    """The (family, ISA) pairs of the kernel units a compiled model's calls were lowered by."""
    return set(re.findall(r'= "(\w+)" \["(\w+)"\]', compiled.ir("kernel-plan-memory")))


def conv_families(compiled: CompiledModel) -> set[tuple[str, str]]:
    """The (family, ISA) pairs of the convolution units among ``kernel_families``."""
    return {(family, isa) for family, isa in kernel_families(compiled) if family.startswith("conv2d")}


def run_emulated(compiled: CompiledModel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``compiled.run`` without the warning that a cross-compiled model runs under an emulator."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        return compiled.run(list(inputs))


def quantized_conv_params(
    rng: np.random.Generator, shape: tuple[int, ...], oc: int, sx: float
) -> tuple[xm.Tensor, xm.Tensor]:
    """Random int8 filters of ``shape`` (scaled by their own maximum) and an int32 bias of ``oc``
    channels at the scale ``sx * sw`` a quantized convolution of an input of scale ``sx`` expects."""
    w = (rng.standard_normal(shape) * 0.3).astype(np.float32)
    sw = float(np.abs(w).max()) / 127
    b = rng.standard_normal((1, oc, 1, 1)).astype(np.float32)
    sb = np.float32(sx) * np.float32(sw)
    return (
        xm.Tensor(quantize(w, D.qint8(sw)), dtype=D.qint8(sw)),
        xm.Tensor(quantize(b, D.qint32(sb)), dtype=D.qint32(float(sx * sw))),
    )
