"""The NEON one-row matmul (``backends/c/templates/arm/neon_matvec.py``) under qemu against the reference:
float16 models through ``kernel-widen-f16``; two-row products stay with the GEMM. Column counts with
and without a partial last panel, K not a multiple of 4 and the fused epilogues are the unit's
``examples`` (tests/test_kernel_conformance.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.c.cross import toolchain_problem
from compiler.driver.compile import CompiledModel, EmulationWarning, compile
from compiler.tensor import Tensor
from semantics import run_module

_problem = toolchain_problem()
pytestmark = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")


def _compiled(rows: int, k: int, n: int, bias: bool, relu: bool, target: str) -> tuple[CompiledModel, list]:
    rng = np.random.default_rng(k * 1000 + n)
    w = Tensor(rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k))
    b = Tensor(rng.standard_normal(n).astype(np.float32))

    def head(x: Tensor) -> Tensor:
        y = F.linear(x, w, b if bias else None)
        return F.relu(y) if relu else y

    x = rng.standard_normal((rows, k)).astype(np.float32)
    traced = xm.jit.trace(head, symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    return compile(traced, target), [x]


def _check(c: CompiledModel, inputs: list, rtol: float) -> None:
    want = run_module(c._stages["inference"], inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        got = c.run(inputs)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w, np.float32)
        np.testing.assert_allclose(
            np.asarray(g, np.float32), w, rtol=rtol, atol=rtol * float(np.abs(w).max())
        )


def test_matvec_float16_model() -> None:
    c, inputs = _compiled(1, 517, 40, True, False, "arm-fp16")
    assert '"matmul_matvec" ["neon"]' in c.ir("kernel-plan-memory")
    _check(c, inputs, 2e-3)


def test_two_rows_stay_with_the_gemm() -> None:
    c, inputs = _compiled(2, 64, 40, True, False, "arm-nchw44")
    ir = c.ir("kernel-plan-memory")
    assert '"matmul_matvec"' not in ir and '"matmul_gemm"' in ir
    _check(c, inputs, 1e-5)
