"""The x86 one-row float32 matmul (``backends/c/templates/x86/x86_f32_matvec.py``) against PyTorch, the
plain weight layout; two-row and run-time-weight products stay with the GEMM; bit-identical on 1 and 2
threads. Partial last panels and groups of fewer than 4 panels, tiny K and N and every fused epilogue
are the unit's ``examples`` (tests/test_kernel_conformance.py, also under ASan/UBSan)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as xm
import compiler.functional as F
from compiler.driver.compile import CompiledModel, compile
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import require

TARGETS = ["x86-avx2", "x86-avx512", "x86-avx512-nchw88"]
FAMILY = "matmul_matvec"


def _head(rows: int, k: int, n: int, epilogue: str, target: str, threads: int = 1, seed: int = 0):  # type: ignore[no-untyped-def]
    """A Linear head ``(rows, k) -> (rows, n)`` with the given fused epilogue, compiled for target."""
    require(target)
    rng = np.random.default_rng(seed + k * 1000 + n)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    r = rng.standard_normal((rows, n)).astype(np.float32)
    wt, bt, rt = Tensor(w), Tensor(b), Tensor(r)

    def head(x: Tensor) -> Tensor:
        y = F.linear(x, wt, None if epilogue == "none" else bt)
        if epilogue == "residual":
            y = y + rt
        if epilogue == "relu6":
            y = F.relu6(y)
        if epilogue == "hswish":
            y = F.hswish(y)
        return y

    x = rng.standard_normal((rows, k)).astype(np.float32)
    traced = xm.jit.trace(head, symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    return compile(traced, target, threads=threads), [x], (w, b, r)


def _check(c: CompiledModel, inputs: list) -> list[np.ndarray]:
    want = run_module(c._stages["inference"], inputs)
    got = c.run(inputs)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w, np.float32)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
    return got


def test_matvec_matches_torch() -> None:
    c, inputs, (w, b, r) = _head(1, 1280, 1000, "residual", TARGETS[1])
    got = c.run(inputs)[0]
    want = torch.nn.functional.linear(torch.from_numpy(inputs[0]), torch.from_numpy(w), torch.from_numpy(b))
    np.testing.assert_allclose(got, (want + torch.from_numpy(r)).numpy(), rtol=1e-5, atol=1e-5)


def test_plain_weight_layout() -> None:
    """``x @ W`` with W stored (K, N) (no transpose) packs to the same panels."""
    target = TARGETS[1]
    require(target)
    rng = np.random.default_rng(7)
    w = Tensor(rng.standard_normal((70, 33)).astype(np.float32))
    x = rng.standard_normal((1, 70)).astype(np.float32)
    traced = xm.jit.trace(lambda v: F.matmul(v, w), symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    c = compile(traced, target)
    assert FAMILY in c.ir("c")
    got = _check(c, [x])
    np.testing.assert_allclose(got[0], x @ w.numpy(), rtol=1e-5, atol=1e-5)


def test_two_rows_and_runtime_weights_stay_with_the_gemm() -> None:
    c, inputs, _ = _head(2, 64, 40, "bias", TARGETS[1])
    assert FAMILY not in c.ir("c") and "matmul_gemm" in c.ir("c")
    _check(c, inputs)
    require(TARGETS[1])
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((1, 20)).astype(np.float32), rng.standard_normal((20, 9)).astype(np.float32)
    traced = xm.jit.trace(lambda u, v: F.matmul(u, v), symbolic=True, capture_as_const=True)
    traced(xm.tensor(a), xm.tensor(b))
    c = compile(traced, TARGETS[1])
    assert FAMILY not in c.ir("c")
    _check(c, [a, b])


@pytest.mark.parametrize("target", TARGETS[:2])
def test_matvec_identical_on_1_and_2_threads(target: str) -> None:
    one, inputs, _ = _head(1, 1280, 1000, "bias", target, threads=1)
    two, _, _ = _head(1, 1280, 1000, "bias", target, threads=2)
    assert "#pragma omp parallel for" in two.ir("c")
    np.testing.assert_array_equal(one.run(inputs)[0], two.run(inputs)[0])


def test_bf16_target_keeps_its_one_row_products() -> None:
    """``+bf16`` asks for bfloat16 matrix products: its AMX-BF16 unit (106) stays ahead of the matvec."""
    target = "x86-avx512-vnni-amx+bf16"
    c, inputs, _ = _head(1, 64, 40, "bias", target)
    families = c.ir("kernel-plan-memory")
    assert '"matmul_bf16_amx"' in families and f'"{FAMILY}"' not in families
