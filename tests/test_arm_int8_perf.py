"""The NEON int8 kernels of ``backends/c/templates/arm/neon_int8.py`` under qemu: the residual add kept
in NCHW44, and instruction budgets (qemu's count of what the emulated core executes) that fail if a
kernel falls back to scalar code. Their odd shapes on rounding ties (pooling windows and strides,
elementwise modes with a vector tail) are the units' ``examples`` (tests/test_kernel_conformance.py)."""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import pytest

import compiler.functional as F
from backends.c.cross import count_instructions, defined_functions, toolchain_problem
from compiler import dtype as D
from compiler.driver.compile import CompiledModel, EmulationWarning
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import compile_fn

_problem = toolchain_problem()
pytestmark = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")

TARGET = "arm-nchw44-dot"
S_X = 1 / 16  # inputs on a grid of 1/16: sums of two at scale 1/8 land on ties


def _conv(x: Tensor, oc: int, seed: int, scale: float, relu: bool = False) -> Tensor:
    """An int8 1x1 conv_bias (NCHW44 on ARM) with integer-ish weights: outputs on rounding ties."""
    rng = np.random.default_rng(seed)
    ic = x.shape[1]
    w = rng.integers(-3, 4, (oc, ic, 1, 1)).astype(np.float32)
    wq = Tensor(quantize(w, D.qint8(1.0)), dtype=D.qint8(1.0))
    b = rng.integers(-20, 20, (1, oc, 1, 1)).astype(np.float32) * S_X
    bq = Tensor(quantize(b, D.qint32(S_X)), dtype=D.qint32(S_X))
    mode = "relu" if relu else "identity"
    return F.quantized.conv_bias_activation(x, wq, bq, dtype=D.qint8(scale), nonlinear_mode=mode)


def _exact(c: CompiledModel, inputs: list[np.ndarray]) -> None:
    want = run_module(c._stages["tensor"], inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        got = c.run(inputs)
    differing = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if not np.array_equal(g, w)]
    assert not differing, f"outputs {differing} differ from the reference"


def _families(c: CompiledModel) -> str:
    return c.ir("kernel-plan-memory")


def _inputs(shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(-40, 40, shape) * S_X).astype(np.float32)]


def test_residual_add_stays_nchw44() -> None:
    """MegEngine's EnableNchwxxPass converts ElemwiseMultiType: no relayout around the residual add."""

    def f(x: Tensor) -> Tensor:
        xq = x.astype(D.qint8(S_X))
        y = _conv(_conv(xq, 8, 6, 1 / 8, relu=True), 8, 7, 1 / 8)
        z = _conv(xq, 8, 8, 1 / 8)
        added = F.quantized.elemwise_multi_type(y, z, mode="qfuse_add_relu", dtype=D.qint8(1 / 4))
        return _conv(added, 8, 9, 1 / 8).astype("float32")

    inputs = _inputs((1, 4, 6, 6), 10)
    c = compile_fn(f, inputs, TARGET)
    inference = str(c._stages["inference"])
    (add,) = [line for line in inference.splitlines() if "mgb.elemwise_multi_type" in line]
    assert add.count("#layout.fmt<nchw44>") == 3, add  # both operands and the result
    # the only relayout out of NCHW44 feeds the output's typecvt
    out_of_nchw44 = [
        line for line in inference.splitlines() if "layout.relayout" in line and "nchw44>> ->" in line
    ]
    assert len(out_of_nchw44) == 1, inference
    _exact(c, inputs)


def _kernel_instructions(c: CompiledModel, inputs: list[np.ndarray]) -> dict[str, int]:
    """Instructions each generated function executes in one inference (two minus one)."""
    with tempfile.TemporaryDirectory(prefix="xmge-test-arm-int8-") as d:
        wpath, xpath = os.path.join(d, "w.bin"), os.path.join(d, "x.bin")
        with open(wpath, "wb") as fh:
            fh.write(c.weights)
        inputs[0].astype(np.float32).tofile(xpath)
        functions = defined_functions(c.source)

        def run(n: int) -> dict[str, int]:
            cmd = [c.build.runner, wpath, "-n", str(n), "-w", "0", "-t", "1", "-i", xpath]
            per: dict[str, int] = {}
            for name, count in count_instructions(cmd, functions).per_function.items():
                base = name.split(".", 1)[0]
                per[base] = per.get(base, 0) + count
            return per

        two, one = run(2), run(1)
    return {k: v - one.get(k, 0) for k, v in two.items()}


def test_instruction_budgets() -> None:
    """Per output byte: the residual add about 4.3 instructions (the portable loop: ~29), 3x3/2 max
    pooling about 10 (the scalar NCHW44 loop: ~105), the sdot GEMM's requantization not a lane loop."""

    def f(x: Tensor) -> Tensor:
        xq = x.astype(D.qint8(S_X))
        a, b = _conv(xq, 64, 11, 1 / 8, relu=True), _conv(xq, 64, 12, 1 / 8)
        added = F.quantized.elemwise_multi_type(a, b, mode="qfuse_add_relu", dtype=D.qint8(1 / 4))
        return F.max_pool2d(added, 3, 2, 1).astype("float32")

    inputs = _inputs((1, 16, 32, 32), 13)
    c = compile_fn(f, inputs, TARGET)
    counts = _kernel_instructions(c, inputs)
    add = sum(v for k, v in counts.items() if k.startswith("neon_elemwise_q_fuse_add_relu"))
    pool = sum(v for k, v in counts.items() if k.startswith("pool2d_nchw44_q8_neon"))
    conv = sum(v for k, v in counts.items() if k.startswith("conv2d_nchw44_dot_gemm"))
    size = 64 * 32 * 32
    assert 0 < add < 6 * size, add
    assert 0 < pool < 16 * size // 4, pool
    # two 1x1 convs, 16 input channels: 4 sdot blocks per 4 outputs, about 3 instructions per output
    # for the requantization; the old lane-by-lane epilogue alone cost ~10 per output plus calls
    assert 0 < conv < 2 * 6 * size, conv
    assert not any(k.startswith(("xm_qscaled", "xm_qpost", "xm_qround")) for k, v in counts.items() if v)
