"""The ``smmla`` int8 kernels of ``backends/c/templates/arm/neon_i8mm.py`` (``arm-nchw44-dot-i8mm``)
under ``qemu-aarch64 -cpu max``: bit-exact against the reference interpreter on odd shapes (channels
4 mod 8, pixel counts that leave partial tiles and pairs, rows narrower than 4 pixels, stride 2,
padding, dilation, batch 2, first layers with 3 input channels) and on rounding ties, and the
instruction counts of a layer. The same packed-input GEMM on ``sdot`` (``arm-nchw44-dot``) runs the
same cases."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.c.cross import count_instructions, defined_functions, toolchain_problem
from backends.targets import parse_target
from compiler import dtype as D
from compiler.driver.compile import CompiledModel, EmulationWarning, compile
from compiler.tensor import Tensor
from passes.target import TargetError
from semantics import run_module
from semantics.quant_kernels import quantize

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


def _compile(fn: Callable[..., Any], inputs: list[np.ndarray], target: str = TARGET) -> CompiledModel:
    traced = xm.jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(x) for x in inputs])
    return compile(traced, target)


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


# (batch, in channels, out channels, height, width, kernel, stride, padding, dilation, relu)
DENSE = [
    (1, 8, 8, 6, 6, 1, 1, 0, 1, False),  # one full pixel tile (36 = 3 x 12), quads only
    (1, 12, 20, 5, 7, 3, 1, 1, 1, True),  # ic 4 mod 8, oc 4 mod 8, rows of 7: quads and pairs
    (2, 16, 8, 9, 11, 3, 2, 1, 1, False),  # batch 2, stride 2 from the padded copy
    (1, 4, 12, 7, 9, 1, 2, 0, 1, True),  # stride 2 without copy: pairs by lanes
    (1, 8, 16, 2, 2, 3, 1, 1, 1, True),  # rows of 2 (the last ResNet stage's shape)
    (1, 8, 8, 9, 9, 3, 1, 2, 2, False),  # dilation 2
    (1, 20, 4, 3, 13, 5, 1, 2, 1, True),  # one output block: the 4-channel panel only
]


MMLA = (TARGET, '"conv2d_nchw44_mmla" ["i8mm"]')
DOT_IM2COL = ("arm-nchw44-dot", '"conv2d_nchw44_dot_im2col" ["dot"]')


@needs_toolchain
@pytest.mark.parametrize("n, ic, oc, h, w, k, s, p, d, relu", DENSE)
@pytest.mark.parametrize("target, family", [MMLA, DOT_IM2COL])
def test_dense_exact(n: int, ic: int, oc: int, h: int, w: int, k: int, s: int, p: int, d: int,
                     relu: bool, target: str, family: str) -> None:  # fmt: skip
    def f(x: Tensor) -> Tensor:
        xq = _conv(x.astype(D.qint8(S_X)), ic, 1, 1 / 8)  # NCHW44 from here on
        return _conv(xq, oc, 2, 1 / 4, k, s, p, d, relu).astype("float32")

    inputs = _inputs((n, 4, h, w), 3)
    c = _compile(f, inputs, target)
    if target != TARGET and (k, s, p) == (1, 1, 0):
        family = '"conv2d_nchw44_dot_gemm" ["dot"]'  # already a GEMM over NCHW44 rows: no packing
    assert family in c.ir("kernel-plan-memory")
    _exact(c, inputs)


# first layers: plain NCHW int8 input, 1-3 channels, 7x7/2 (ResNet), 3x3/2, 5x5/1, odd sizes
FIRST = [
    (1, 3, 16, 19, 17, 7, 2, 3),
    (2, 3, 8, 9, 10, 3, 2, 1),
    (1, 1, 12, 7, 5, 5, 1, 2),
    (1, 2, 8, 6, 6, 3, 1, 0),
]


@needs_toolchain
@pytest.mark.parametrize("n, ic, oc, h, w, k, s, p", FIRST)
@pytest.mark.parametrize("target, family", [MMLA, DOT_IM2COL])
def test_first_layer_exact(
    n: int, ic: int, oc: int, h: int, w: int, k: int, s: int, p: int, target: str, family: str
) -> None:
    def f(x: Tensor) -> Tensor:
        # two input channels: identity, the int32 bias in the accumulators
        return _conv(x.astype(D.qint8(S_X)), oc, 4, 1 / 4, k, s, p, relu=ic != 2).astype("float32")

    inputs = _inputs((n, ic, h, w), 5)
    c = _compile(f, inputs, target)
    assert family in c.ir("kernel-plan-memory")
    _exact(c, inputs)


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
    mmla = _kernel_instructions(_compile(f, inputs), inputs, "conv2d_nchw44_mmla_i8mm_n1_ic64")
    dot = _kernel_instructions(
        _compile(f, inputs, "arm-nchw44-dot"), inputs, "conv2d_nchw44_dot_im2col_dot_n1_ic64"
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
    c = _compile(f, inputs)
    ir = c.ir("kernel-plan-memory")
    assert ir.count('"typecvt" ["neon"]') >= 3, ir
    _exact(c, inputs)


@needs_toolchain
@pytest.mark.parametrize("m, n, k", [(1, 10, 512), (3, 7, 37), (2, 4, 16)])
def test_matmul_q8_dot_exact(m: int, n: int, k: int) -> None:
    """``a @ b^T`` int8 with sdot (rows of 4, K in 16-byte steps and a scalar rest): the int32
    accumulators themselves, and requantized as a classifier head's."""
    from compiler.core import apply
    from dialects import tensor as T

    rng = np.random.default_rng(k)
    w = rng.integers(-127, 128, (n, k)).astype(np.float32)
    wq = Tensor(quantize(w, D.qint8(1.0)), dtype=D.qint8(1.0))

    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        (acc,) = apply(T.MatrixMulOp, [x.astype(D.qint8(S_X)), wq], label="linear", transpose_b=True)
        return acc.astype("float32"), acc.astype(D.qint8(k / 4)).astype("float32")

    inputs = [(rng.integers(-127, 128, (m, k)) * S_X).astype(np.float32)]
    c = _compile(f, inputs, "arm-nchw44-dot")
    assert '"matmul_q8" ["dot"]' in c.ir("kernel-plan-memory")
    _exact(c, inputs)
