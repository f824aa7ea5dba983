"""The ``smmla`` int8 kernels of ``backends/c/templates/arm/neon_i8mm.py`` (``arm-nchw44-dot-i8mm``)
under ``qemu-aarch64 -cpu max``: the target, the instruction counts of a layer, and the typecvt ends of
an int8 network on NaN, infinities and ties. Their odd shapes on rounding ties (channels 4 mod 8,
partial tiles and pairs, rows narrower than 4 pixels, stride 2, padding, dilation, batch 2, first
layers of 1-3 channels; the sdot matmul) are the units' ``examples``, run bit-exact by
tests/test_kernel_conformance.py on both the smmla and the sdot target."""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import pytest

import compiler.functional as F
from backends.c.cross import count_instructions, defined_functions, toolchain_problem
from backends.targets import parse_target
from compiler import dtype as D
from compiler.driver.compile import CompiledModel, EmulationWarning
from compiler.tensor import Tensor
from passes.target import TargetError
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import compile_fn

_problem = toolchain_problem()
needs_toolchain = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")

TARGET = "arm-nchw44-dot-i8mm"
S_X = 1 / 16  # inputs on a grid of 1/16, integer weights: sums land on rounding ties


def _conv(
    x: Tensor, oc: int, seed: int, scale: float, k: int = 1, stride: int = 1, pad: int = 0,
    dilation: int = 1, relu: bool = False, bias: bool = True,
) -> Tensor:  # fmt: skip
    rng = np.random.default_rng(seed)
    w = rng.integers(-3, 4, (oc, x.shape[1], k, k)).astype(np.float32)
    wq = Tensor(quantize(w, D.qint8(1.0)), dtype=D.qint8(1.0))
    b = rng.integers(-20, 20, (1, oc, 1, 1)).astype(np.float32) * S_X * (1 if bias else 0)
    bq = Tensor(quantize(b, D.qint32(S_X)), dtype=D.qint32(S_X))
    mode = "relu" if relu else "identity"
    return F.quantized.conv_bias_activation(
        x, wq, bq, stride=stride, padding=pad, dilation=dilation, dtype=D.qint8(scale), nonlinear_mode=mode
    )


def _exact(c: CompiledModel, inputs: list[np.ndarray]) -> None:
    want = run_module(c._stages["tensor"], inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        got = c.run(inputs)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(g, w), f"output {i}: {np.count_nonzero(g != w)} of {g.size} values differ"


def _inputs(shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(-40, 40, shape) * S_X).astype(np.float32)]


def test_i8mm_target() -> None:
    t = parse_target(TARGET)
    assert t.isas[:2] == ("i8mm", "dot")
    assert "+i8mm" in " ".join(t.backend.emitter(t).cflags)
    with pytest.raises(TargetError, match="i8mm"):
        parse_target("arm-nchw44-i8mm")


def _kernel_instructions(c: CompiledModel, inputs: list[np.ndarray], prefix: str) -> int:
    with tempfile.TemporaryDirectory(prefix="xmge-test-i8mm-") as d:
        wpath, xpath = os.path.join(d, "w.bin"), os.path.join(d, "x.bin")
        with open(wpath, "wb") as fh:
            fh.write(c.weights)
        inputs[0].astype(np.float32).tofile(xpath)
        cmd = [c.build.runner, wpath, "-n", "1", "-w", "0", "-t", "1", "-i", xpath]
        got = count_instructions(cmd, defined_functions(c.source))
    return sum(v for k, v in got.per_function.items() if k.startswith(prefix))


@needs_toolchain
def test_instruction_budgets() -> None:
    """A 64 -> 64 3x3 layer on 16x16: 9.4M multiply-adds, 295k smmla (~520k instructions with the
    loads, packing and requantization) against 590k sdot (~880k; the register-blocked sdot GEMM
    reading NCHW44 directly: ~925k)."""

    def f(x: Tensor) -> Tensor:
        xq = _conv(x.astype(D.qint8(S_X)), 64, 1, 1 / 8)
        return _conv(xq, 64, 2, 1 / 4, 3, 1, 1, relu=True).astype("float32")

    inputs = _inputs((1, 4, 16, 16), 7)
    mmla = _kernel_instructions(compile_fn(f, inputs, TARGET), inputs, "conv2d_nchw44_mmla_i8mm_n1_ic64")
    dot = _kernel_instructions(
        compile_fn(f, inputs, "arm-nchw44-dot"), inputs, "conv2d_nchw44_dot_im2col_dot_n1_ic64"
    )
    macs = 64 * 64 * 9 * 16 * 16
    assert 0 < mmla < macs / 32 * 1.9, mmla
    assert 0 < dot < macs / 16 * 1.6, dot
    assert mmla < 0.7 * dot, (mmla, dot)


# --- the ends of an int8 network (backends/c/templates/arm/neon_int8_ends.py) ----------------------


@needs_toolchain
@pytest.mark.parametrize("size", [1, 16, 45])
def test_typecvt_neon_exact(size: int) -> None:
    """float32 -> int8 on ties (x.5 after scaling), saturation, NaN and infinities; int8 -> float32;
    int32 accumulators -> int8; sizes below, at and past a 16-lane step."""

    def f(x: Tensor) -> tuple[Tensor, ...]:
        q = x.astype(D.qint8(0.5))
        acc = q.astype(D.qint32(0.5))
        return q.astype("float32"), acc.astype(D.qint8(1.5)).astype("float32")

    rng = np.random.default_rng(size)
    x = (rng.integers(-300, 300, size) * 0.25).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, 1e30], np.float32)
    x[: min(size, 4)] = specials[: min(size, 4)] if size > 1 else x[:1]
    inputs = [x.reshape(1, size)]
    c = compile_fn(f, inputs, TARGET)
    ir = c.ir("kernel-plan-memory")
    assert ir.count('"typecvt" ["neon"]') >= 3, ir
    _exact(c, inputs)
