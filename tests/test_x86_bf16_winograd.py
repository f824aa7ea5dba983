"""The float32 F(4x4, 3x3) Winograd kernel between bfloat16 layers on ``x86-avx512-nchw88+bf16``
(``conv2d_winograd_nchw88`` on ISA ``avx512bf16``, a ``Bf16ActivationUnit``): it reads its input and
stores its result as bfloat16 tensors where ``kernel-bf16-activations`` chooses so; transforms, GEMM
and epilogue stay float32.

Network: a bfloat16 1x1 conv, the 3x3 conv reading its result as input and residual (18x17
outputs: F(4, 3) with partial border tiles; 40 channels: a partial filter panel) and a bfloat16 1x1
conv reading its result. Numerics against the contract in float64 (the bfloat16 convs' inputs and
filters rounded, the two bfloat16 activations rounded once, the Winograd conv's filters float32),
against float32, and 1 against 2 threads (bit-identical: no reduction is split between threads)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch

import compiler.functional as F
from backends.c.templates.x86.x86_amx_bf16 import round_bfloat16
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import compile_fn
from tests.test_x86_bf16 import require_avx512_bf16

TARGET = "x86-avx512-nchw88+bf16"
SHAPE = (1, 16, 18, 17)


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(oc: int, ic: int, k: int) -> np.ndarray:
        return (rng.standard_normal((oc, ic, k, k)) * (1.5 / np.sqrt(ic * k * k))).astype(np.float32)

    return {
        "a": w(40, 16, 1), "b": w(40, 40, 3), "c": w(32, 40, 1),
        "ba": rng.uniform(-0.1, 0.1, 40).astype(np.float32),
        "bb": rng.uniform(-0.1, 0.1, 40).astype(np.float32),
    }  # fmt: skip


def _net(ws: dict[str, np.ndarray]) -> Any:
    def f(x: Tensor) -> Tensor:
        a = F.relu(F.conv2d(x, Tensor(ws["a"]), Tensor(ws["ba"].reshape(1, -1, 1, 1))))
        b = F.relu(F.conv2d(a, Tensor(ws["b"]), Tensor(ws["bb"].reshape(1, -1, 1, 1)), padding=1) + a)
        return F.conv2d(b, Tensor(ws["c"]))

    return f


def _contract(x: np.ndarray, ws: dict[str, np.ndarray]) -> np.ndarray:
    """The network in float64 as the ``+bf16`` contract with bfloat16 activations computes it."""

    def t(v: np.ndarray) -> torch.Tensor:
        return torch.tensor(v, dtype=torch.float64)

    def r(v: torch.Tensor) -> torch.Tensor:  # a bfloat16 tensor: its float32 value rounded once
        return t(round_bfloat16(v.numpy().astype(np.float32)))

    conv = torch.nn.functional.conv2d
    rb = round_bfloat16
    a = r(torch.relu(conv(t(rb(x)), t(rb(ws["a"])), t(ws["ba"]))))
    b = r(torch.relu(conv(a, t(ws["b"]), t(ws["bb"]), padding=1) + a))  # float32 Winograd: filters as given
    return conv(b, t(rb(ws["c"]))).numpy()


@pytest.fixture(scope="module")
def case() -> tuple[Any, list[np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(43)
    ws = _weights(rng)
    return _net(ws), [rng.standard_normal(SHAPE).astype(np.float32)], ws


def test_winograd_reads_and_stores_bf16(case: tuple[Any, list[np.ndarray], dict[str, np.ndarray]]) -> None:
    """The 3x3 conv is the Winograd kernel on avx512bf16 and takes (input, residual) and gives
    bfloat16 tensors; both 1x1 convs are bfloat16 ones. Needs gcc only."""
    fn, inputs, _ = case
    ir = compile_fn(fn, inputs, TARGET).ir("kernel-bf16-activations")
    calls = re.findall(r"kernel\.call @(\w+)\((.*)\) : \((.*)\) -> (.*)", ir)
    wino = [c for c in calls if c[0].startswith("conv2d_winograd_nchw88_f4")]
    assert len(wino) == 1 and wino[0][0].endswith("_res_RELU_xb_rb_yb"), calls
    assert wino[0][2].startswith("tensor<1x5x18x17x8xbf16") and wino[0][2].count("xbf16") == 2, wino
    assert "xbf16" in wino[0][3], wino
    assert re.search(
        r'kernel\.def @conv2d_winograd_nchw88_f4\w*_xb_rb_yb = "conv2d_winograd_nchw88" \["avx512bf16"\]', ir
    )
    direct = [c[0] for c in calls if c[0].startswith("conv2d_nchw88_bf16")]
    assert [s.endswith(("_yb", "_xb")) for s in direct] == [True, True], direct


def test_float32_target_unchanged(case: tuple[Any, list[np.ndarray], dict[str, np.ndarray]]) -> None:
    """Without ``+bf16`` the same conv is the avx512 Winograd kernel on float32 tensors."""
    fn, inputs, _ = case
    ir = compile_fn(fn, inputs, "x86-avx512-nchw88").ir("kernel-plan-memory")
    assert "xbf16" not in ir and "avx512bf16" not in ir
    assert re.search(
        r'kernel\.def @conv2d_winograd_nchw88_f4\w*_res_RELU = "conv2d_winograd_nchw88" \["avx512"\]', ir
    )


def _error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_bf16_winograd_numerics(case: tuple[Any, list[np.ndarray], dict[str, np.ndarray]]) -> None:
    require_avx512_bf16(TARGET)
    fn, inputs, ws = case
    one = compile_fn(fn, inputs, TARGET, threads=1)
    got = np.asarray(one.run(inputs)[0], np.float64)
    # F(4, 3)'s float32 transforms (~1e-5 of the scale) and a float32 sum now and then landing on
    # the other side of a bfloat16 rounding (2^-8 of one activation)
    assert _error(got, _contract(inputs[0], ws)) < 1e-4, _error(got, _contract(inputs[0], ws))
    f32 = np.asarray(run_module(one._stages["tensor"], inputs)[0], np.float64)  # type: ignore[arg-type]
    assert _error(got, f32) < 1e-2
    two = compile_fn(fn, inputs, TARGET, threads=2)
    np.testing.assert_array_equal(two.run(inputs)[0], one.run(inputs)[0])


def test_bf16_winograd_sanitized(case: tuple[Any, list[np.ndarray], dict[str, np.ndarray]]) -> None:
    require_avx512_bf16(TARGET)
    fn, inputs, _ = case
    compiled = compile_fn(fn, inputs, TARGET)
    for g, w in zip(compiled.run_runner(inputs, sanitize=True), compiled.run(inputs), strict=True):
        np.testing.assert_array_equal(g, w)
