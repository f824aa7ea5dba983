"""Every ARM kernel under qemu against the reference interpreter: convolutions of random shapes (odd
sizes, padding, stride, dilation, groups, depthwise, first layers, channels not divisible by 4) with
pooling, elementwise and data-movement ops around them, in float32 (``arm-nchw44``), int8
(``arm-nchw44-dot``, exact), float16 (``arm-fp16``, ``+io16xc32``), each also rendered as portable C
(``+plain-c``). One model per target holds all cases (one cross build each; builds are cached).
Skips when the cross compiler or qemu is missing."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.cross import toolchain_problem
from compiler import dtype as D
from compiler.driver.compile import CompiledModel
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import compile_fn, run_emulated

_problem = toolchain_problem()
pytestmark = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")

# name, input shape (N, C, H, W), output channels, kernel, stride, padding, dilation, groups
CASES = [
    ("dense3x3_odd", (1, 8, 7, 9), 12, 3, 1, 1, 1, 1),
    ("dense5x5_s2", (1, 4, 11, 10), 8, 5, 2, 2, 1, 1),
    ("pointwise_n2", (2, 12, 5, 5), 4, 1, 1, 0, 1, 1),
    ("group2", (1, 16, 6, 7), 8, 3, 1, 1, 1, 2),
    ("depthwise_s2", (1, 8, 9, 9), 8, 3, 2, 1, 1, 8),
    ("depthwise5x5", (1, 12, 7, 6), 12, 5, 1, 2, 1, 12),
    ("first_layer", (1, 3, 13, 13), 8, 3, 2, 1, 1, 1),
    ("odd_channels", (1, 6, 8, 8), 10, 3, 1, 1, 1, 1),
    ("dilated", (1, 4, 9, 9), 4, 3, 1, 2, 2, 1),
]
# the NCHW44 kernel variants the cases must reach (a layout pass that stops converting fails here)
FLOAT_MODES = {"dense", "group", "chan", "hybrid"}


def _weights(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for _, (_, ic, _, _), oc, k, *_rest, g in CASES:
        shape = (oc, ic, k, k) if g == 1 else (g, oc // g, ic // g, k, k)
        out.append(
            (
                (rng.standard_normal(shape) * 0.3).astype(np.float32),
                rng.standard_normal(oc).astype(np.float32),
            )
        )
    return out


def _inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(shape).astype(np.float32) for _, shape, *_ in CASES]


def float_model(weights: list[tuple[np.ndarray, np.ndarray]]) -> Callable[..., Any]:
    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for (_, _, oc, _, s, p, d, g), x, (w, b) in zip(CASES, xs, weights, strict=True):
            y = F.conv2d(
                x, Tensor(w), Tensor(b.reshape(1, oc, 1, 1)), stride=s, padding=p, dilation=d, groups=g
            )
            outs.append(F.relu(y))
        a, b2 = outs[0], outs[3]
        outs.append(F.max_pool2d(a, 3, 2, 1))  # pooling, NCHW44 and odd sizes
        outs.append(F.avg_pool2d(outs[7], 2, 2))  # pooling of an NCHW (10-channel) tensor
        outs.append(F.relu(b2 + F.max_pool2d(b2, 3, 1, 1)))  # elementwise on blocked tensors
        outs.append(F.concat([a, a * 0.5], axis=1))
        return tuple(outs)

    return f


def int8_model(weights: list[tuple[np.ndarray, np.ndarray]]) -> Callable[..., Any]:
    from semantics.quant_kernels import quantize

    sx = 1 / 40
    params = []
    for w, b in weights:
        sw = float(np.abs(w).max()) / 127
        wq = quantize(w, D.qint8(sw))
        bq = quantize(b.reshape(1, -1, 1, 1), D.qint32(np.float32(sx) * np.float32(sw)))
        params.append((Tensor(wq, dtype=D.qint8(sw)), Tensor(bq, dtype=D.qint32(float(sx * sw)))))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, _, _, _, s, p, d, g), x, (wq, bq)) in enumerate(zip(CASES, xs, params, strict=True)):
            y = F.quantized.conv_bias_activation(
                x.astype(D.qint8(sx)), wq, bq, dtype=D.qint8(0.05 + 0.01 * i), stride=s, padding=p,
                dilation=d, groups=g, nonlinear_mode="relu" if i % 2 == 0 else "identity",
            )  # fmt: skip
            outs.append(y)
        pooled = F.max_pool2d(outs[0], 3, 2, 1)
        avg = F.avg_pool2d(outs[4], 2, 2, 0, mode="average")
        added = F.quantized.elemwise_multi_type(outs[3], outs[3], mode="qfuse_add_relu", dtype=D.qint8(0.1))
        return tuple(t.astype("float32") for t in (*outs, pooled, avg, added))

    return f


def _modes(c: CompiledModel, *families: str) -> set[str]:
    ir = c.ir("kernel-plan-memory")
    return {m for f in families for m in re.findall(rf'= "{f}" \["\w+"\] {{mode = "(\w+)"', ir)}


# dense and first layers run the register-blocked GEMM families on NEON (neon_gemm.py, neon_int8.py)
FLOAT_FAMILIES = ("conv2d_nchw44", "conv2d_nchw44_gemm")


@pytest.fixture(scope="module")
def data() -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(44)
    return _inputs(rng), _weights(rng)


@pytest.mark.parametrize("target", ["arm-nchw44", "arm-nchw44+plain-c"])
def test_float32_kernels(data: Any, target: str) -> None:
    inputs, weights = data
    c = compile_fn(float_model(weights), inputs, target)
    assert _modes(c, *FLOAT_FAMILIES) == FLOAT_MODES
    isa = "generic" if "plain-c" in target else "neon"
    assert f'"conv2d_nchw44" ["{isa}"]' in c.ir("kernel-plan-memory")
    want = run_module(c._stages["tensor"], inputs)
    for i, (g, w) in enumerate(zip(run_emulated(c, inputs), want, strict=True)):
        w = np.asarray(w)
        np.testing.assert_allclose(
            g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())), err_msg=f"output {i}"
        )


# int8 dense and first layers: sdot GEMMs (neon_int8.py, neon_i8mm.py), smmla with i8mm
DOT_FAMILIES = (
    "conv2d_nchw44_dot", "conv2d_nchw44_dot_gemm", "conv2d_nchw44_dot_im2col", "conv2d_nchw44_mmla",
)  # fmt: skip


@pytest.mark.parametrize("target", ["arm-nchw44-dot", "arm-nchw44-dot-i8mm", "arm-nchw44-dot+plain-c"])
def test_int8_kernels_exact(data: Any, target: str) -> None:
    inputs, weights = data
    c = compile_fn(int8_model(weights), inputs, target)
    ir = c.ir("kernel-plan-memory")
    assert _modes(c, *DOT_FAMILIES) >= {"dense", "group"}
    assert "chan" in _modes(c, "conv2d_nchw44_q8")
    assert _modes(c, *DOT_FAMILIES, "conv2d_nchw44_q8") == FLOAT_MODES
    assert '"conv2d_q8"' in ir  # the odd-channel conv stays NCHW
    want = run_module(c._stages["tensor"], inputs)
    for i, (g, w) in enumerate(zip(run_emulated(c, inputs), want, strict=True)):
        np.testing.assert_array_equal(g, np.asarray(w), err_msg=f"output {i}")


@pytest.mark.parametrize("target", ["arm-fp16", "arm-fp16+io16xc32", "arm-fp16+plain-c"])
def test_float16_kernels(data: Any, target: str) -> None:
    """Against the reference on the same float16 graph: within 1% of each output's range (float16
    keeps 11 significant bits; sums of up to 200 products round differently in another order)."""
    inputs, weights = data
    c = compile_fn(float_model(weights), inputs, target)
    assert _modes(c, *FLOAT_FAMILIES) == FLOAT_MODES
    want = run_module(c._stages["inference"], inputs)
    for i, (g, w) in enumerate(zip(run_emulated(c, inputs), want, strict=True)):
        w = np.asarray(w, np.float32)
        np.testing.assert_allclose(
            g, w, rtol=1e-2, atol=1e-2 * max(1.0, float(np.abs(w).max())), err_msg=f"output {i}"
        )
