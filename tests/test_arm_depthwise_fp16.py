"""The NCHW44 depthwise 3x3 kernels (``backends/c/templates/arm/neon_depthwise.py``) under qemu against the
reference interpreter: strides 1 and 2, padding 0, 1 and 2, odd and tiny spatial sizes (rows shorter
than a register tile, all-border rows), channel counts that are not multiples of 8 (and one not of 4,
which stays in plain NCHW), batch 2, bias, ReLU, a fused ReLU6. float32 to 1e-4, float16 (computed in
float16) to 1% of each output's range. Skips without the cross compiler or qemu."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.cross import toolchain_problem
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import compile_fn, conv_families, run_emulated

_problem = toolchain_problem()
pytestmark = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")

# input shape (N, C, H, W), stride, padding, epilogue
DW_CASES = [
    ((1, 8, 9, 11), 1, 1, "relu"),
    ((1, 12, 16, 16), 2, 1, "identity"),
    ((2, 20, 7, 13), 1, 1, "relu6"),
    ((1, 8, 13, 17), 2, 1, "relu6"),
    ((1, 4, 4, 4), 1, 1, "relu"),  # a row shorter than a float16 tile
    ((1, 16, 2, 2), 1, 1, "identity"),  # every column a border column
    ((1, 12, 10, 19), 1, 0, "relu"),
    ((1, 8, 11, 9), 2, 0, "identity"),
    ((1, 8, 8, 21), 1, 2, "relu"),
    ((2, 4, 9, 23), 2, 2, "relu6"),
    ((1, 6, 9, 10), 1, 1, "relu"),  # 6 channels: not NCHW44
]


def _data() -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(44)
    weights = [
        (
            (rng.standard_normal((s[1], 1, 1, 3, 3)) * 0.4).astype(np.float32),
            (rng.standard_normal(s[1]) * 0.5).astype(np.float32),
        )
        for s, *_ in DW_CASES
    ]
    return [(rng.standard_normal(s) * 2).astype(np.float32) for s, *_ in DW_CASES], weights


def depthwise_model(weights: list[tuple[np.ndarray, np.ndarray]]) -> Callable[..., Any]:
    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for (shape, stride, pad, act), x, (w, b) in zip(DW_CASES, xs, weights, strict=True):
            c = shape[1]
            y = F.conv2d(x, Tensor(w), Tensor(b.reshape(1, c, 1, 1)), stride=stride, padding=pad, groups=c)
            outs.append({"identity": y, "relu": F.relu(y), "relu6": F.relu6(y)}[act])
        return tuple(outs)

    return f


@pytest.mark.parametrize(("target", "isa", "tol"), [("arm-nchw44", "neon", 1e-4), ("arm-fp16", "fp16", 1e-2)])
def test_arm_depthwise3x3_nchw44(target: str, isa: str, tol: float) -> None:
    # the unit declares its epilogue (relu6 included), so the fusion hands it the relu6 after the conv
    inputs, weights = _data()
    c = compile_fn(depthwise_model(weights), inputs, target)
    # 6 channels stay in plain NCHW (the layout pass pads no channel-wise conv)
    assert conv_families(c) == {("conv2d_nchw44_dw3x3", isa), ("conv2d_depthwise", "generic")}
    if isa == "neon":
        assert "RELU6" in c.source  # fused into the kernel, not a separate elementwise call
    else:
        assert "vld2q_u64" in c.source and "vextq_f16" in c.source
    # float16: against the reference run of the same float16 graph
    want = run_module(c._stages["inference" if isa == "fp16" else "tensor"], inputs)
    for i, (g, w) in enumerate(zip(run_emulated(c, inputs), want, strict=True)):
        w = np.asarray(w, np.float32)
        np.testing.assert_allclose(
            g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())), err_msg=f"output {i}"
        )


# float16 elementwise and pooling (backends/c/templates/arm/neon_fp16.py): odd sizes (tails of 4 and of 1
# lanes), broadcasts along inner and outer dimensions, a scalar, NCHW44 tensors after a convolution
EW_SHAPES = [(2, 3, 9, 11), (1, 12, 6, 7), (1, 4, 9, 3), (1, 5, 7, 3)]  # 594, 504, 108, 105 elements


def elementwise_model(conv_w: np.ndarray) -> Callable[..., Any]:
    def f(a: Tensor, b: Tensor, col: Tensor, z: Tensor, e: Tensor, g: Tensor) -> tuple[Tensor, ...]:
        y = F.conv2d(z, Tensor(conv_w), padding=1)  # NCHW44 activations: (1, 12/4, 6, 7, 4)
        return (
            F.relu6(a * 3),
            a + b,
            a * col,  # broadcast over the last two dimensions
            F.hswish(b * 4),
            F.relu(a - b),
            F.maximum(a, b) / (F.abs(b) + 1),
            F.relu6(e * 2),  # a tail of 4 lanes
            F.hswish(g) - 1,  # a tail of one lane
            F.relu6(y),
            F.hswish(y + 0.5),
            F.max_pool2d(y, 3, stride=2, padding=1),
            F.avg_pool2d(F.relu(y), 2, stride=2),
            F.avg_pool2d(y, 3, stride=2, padding=1, mode="average"),
        )

    return f


def test_arm_fp16_elementwise_and_pooling() -> None:
    rng = np.random.default_rng(16)
    a, b, z, e, g = ((rng.standard_normal(s) * 3).astype(np.float32) for s in (EW_SHAPES[0], *EW_SHAPES))
    inputs = [a, b, rng.standard_normal((1, 3, 1, 1)).astype(np.float32), z, e, g]
    conv_w = (rng.standard_normal((12, 12, 3, 3)) * 0.2).astype(np.float32)
    c = compile_fn(elementwise_model(conv_w), inputs, "arm-fp16")
    ir = c.ir("kernel-plan-memory")
    families = set(re.findall(r'= "(\w+)" \["(\w+)"\]', ir))
    assert {("elemwise_f16", "fp16"), ("pool2d_nchw44_f16", "fp16")} <= families
    assert not any(f == "elemwise" for f, _ in families)  # no elementwise op widened to float32
    want = run_module(c._stages["inference"], inputs)
    for i, (g, w) in enumerate(zip(run_emulated(c, inputs), want, strict=True)):
        w = np.asarray(w, np.float32)
        np.testing.assert_allclose(
            g, w, rtol=1e-2, atol=1e-2 * max(1.0, float(np.abs(w).max())), err_msg=f"output {i}"
        )


def shuffle_model(w1: np.ndarray, w2: np.ndarray) -> Callable[..., Any]:
    """ShuffleNetV2's data movement: NCHW44 convolutions around a channel shuffle (reshape, transpose),
    channel slices and a concatenation, in plain layout (relayouts both ways)."""

    def f(x: Tensor) -> tuple[Tensor, ...]:
        y = F.relu(F.conv2d(x, Tensor(w1), padding=1))  # (1, 16, 6, 9) NCHW44
        n, c, h, w = y.shape
        s = y.reshape(n, 2, c // 2, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
        left, right = s[:, : c // 2], s[:, c // 2 :]
        z = F.concat([F.conv2d(right, Tensor(w2)), left[:, :, 1:, :]], axis=2)
        return s, z, y[:, :, ::2, 1:6].transpose(0, 1, 3, 2)

    return f


@pytest.mark.parametrize(("target", "isa", "tol"), [("arm-nchw44", "neon", 1e-4), ("arm-fp16", "fp16", 1e-2)])
def test_arm_neon_relayout_and_copies(target: str, isa: str, tol: float) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 8, 6, 9)).astype(np.float32)  # 54 pixels: 8-, 4- and 1-pixel steps
    w1 = (rng.standard_normal((16, 8, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)
    c = compile_fn(shuffle_model(w1, w2), [x], target)
    families = set(re.findall(r'= "(\w+)" \["(\w+)"\]', c.ir("kernel-plan-memory")))
    assert {("relayout", isa), ("copy", isa)} <= families
    assert "vst4" in c.source and "vld4" in c.source
    want = run_module(c._stages["inference" if isa == "fp16" else "tensor"], [x])
    for i, (g, w) in enumerate(zip(run_emulated(c, [x]), want, strict=True)):
        w = np.asarray(w, np.float32)
        np.testing.assert_allclose(
            g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())), err_msg=f"output {i}"
        )


# float16 max pooling with clamped window taps (neon_fp16.PoolF16Nchw44.clamps_exactly): input shape,
# window, stride, padding; odd and tiny sizes (all-border rows), stride 1 and 2, batch 2, a 5x5 window
MAXPOOL_CASES = [
    ((2, 8, 9, 11), 3, 2, 1),
    ((1, 12, 7, 6), 3, 1, 1),
    ((1, 4, 5, 5), 2, 2, 0),
    ((1, 8, 3, 3), 3, 1, 1),
    ((1, 4, 6, 13), 5, 1, 2),
    ((1, 8, 10, 7), 3, 2, 0),
]


def _max_pool(y: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """numpy max pooling (out-of-range taps excluded): what the kernel must give on its own input."""
    p = np.pad(y, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    oh, ow = (y.shape[2] + 2 * pad - k) // stride + 1, (y.shape[3] + 2 * pad - k) // stride + 1
    taps = [
        p[:, :, r : r + stride * oh : stride, s : s + stride * ow : stride]
        for r in range(k)
        for s in range(k)
    ]
    return np.max(np.stack(taps), axis=0)


def test_arm_fp16_max_pooling_clamped_taps() -> None:
    rng = np.random.default_rng(23)
    inputs = [(rng.standard_normal(s) * 3).astype(np.float32) for s, *_ in MAXPOOL_CASES]
    inputs[0][1, 2, 0, 0] = np.nan  # a NaN in a corner window (read again through the clamped taps)
    weights = [(rng.standard_normal((s[1], s[1], 1, 1)) * 0.5).astype(np.float32) for s, *_ in MAXPOOL_CASES]

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for (_, k, stride, pad), x, w in zip(MAXPOOL_CASES, xs, weights, strict=True):
            y = F.conv2d(x, Tensor(w))  # NCHW44 activations
            outs += [y, F.max_pool2d(y, k, stride=stride, padding=pad)]
        return tuple(outs)

    c = compile_fn(f, inputs, "arm-fp16")
    assert c.source.count("static void pool2d_nchw44_f16_max") == len(MAXPOOL_CASES)
    assert "if ((unsigned)xx" not in c.source  # every case takes the clamped kernel, no per-tap checks
    got = run_emulated(c, inputs)
    want = run_module(c._stages["inference"], inputs)
    for i, (_, k, stride, pad) in enumerate(MAXPOOL_CASES):
        y, pooled = got[2 * i], got[2 * i + 1]
        # exact on the kernel's own input; within float16 rounding of the reference graph
        np.testing.assert_array_equal(pooled, _max_pool(y, k, stride, pad), err_msg=f"case {i}")
        w = np.asarray(want[2 * i + 1], np.float32)
        np.testing.assert_allclose(pooled, w, rtol=1e-2, atol=1e-2 * float(np.nanmax(np.abs(w))))
    assert np.isnan(got[1][1, :, 0, 0]).all()
