"""The register-blocked NCHW44 GEMM convolutions (``backends/c/templates/arm/neon_gemm.py``,
``neon_int8.py``) under qemu against the reference interpreter: first layers (plain NCHW input, 1 or
3 channels, strides 1 and 2, with and without padding), 1x1 and 3x3 layers with output channels that
leave partial panels (12, 20, 28, 36: not multiples of the 8 / 12 / 16-channel tiles), odd and small
spatial sizes (rows shorter than a tile, partial pixel tiles), stride 2, dilation, batch 2, bias,
ReLU and a fused residual. float32 to 1e-4, float16 (computed in float16) to 1% of each output's
range, int8 exactly. One model per target; skips without the cross compiler or qemu."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.cross import toolchain_problem
from backends.c.templates.arm import neon_winograd
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import compile_fn, conv_families, run_emulated

_problem = toolchain_problem()
pytestmark = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")

# input shape (N, C, H, W), output channels, kernel, stride, padding, dilation
CASES = [
    ((1, 3, 13, 13), 8, 3, 2, 1, 1),  # first layer, stride 2 from the padded copy
    ((1, 3, 16, 17), 12, 7, 2, 3, 1),  # ResNet's 7x7 first layer, partial panel
    ((1, 3, 9, 9), 8, 3, 1, 0, 1),  # first layer, stride 1, no padding
    ((1, 1, 10, 10), 4, 3, 2, 0, 1),  # first layer, stride 2 without a padded copy
    ((1, 8, 7, 9), 12, 3, 1, 1, 1),
    ((1, 16, 5, 6), 20, 1, 1, 0, 1),  # 1x1: flattened pixels, partial tile
    ((1, 8, 9, 10), 8, 3, 2, 1, 1),
    ((2, 12, 4, 5), 4, 1, 1, 0, 1),
    ((1, 8, 9, 9), 16, 3, 1, 2, 2),
    ((1, 20, 11, 13), 36, 1, 1, 0, 1),
    ((1, 16, 6, 14), 28, 3, 1, 1, 1),
]


def _data() -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(19)
    weights = [
        (
            (rng.standard_normal((oc, s[1], k, k)) * 0.3).astype(np.float32),
            rng.standard_normal(oc).astype(np.float32),
        )
        for s, oc, k, *_ in CASES
    ]
    return [rng.standard_normal(s).astype(np.float32) for s, *_ in CASES], weights


def float_model(weights: list[tuple[np.ndarray, np.ndarray]], extra: np.ndarray) -> Callable[..., Any]:
    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, oc, _, s, p, d), x, (w, b)) in enumerate(zip(CASES, xs, weights, strict=True)):
            y = F.conv2d(x, Tensor(w), Tensor(b.reshape(1, oc, 1, 1)), stride=s, padding=p, dilation=d)
            outs.append(F.relu(y) if i % 2 == 0 else y)
        # a residual add the graph fuses into the conv (fuse-conv-bias-with-z)
        outs.append(F.relu(outs[4] + F.conv2d(outs[4], Tensor(extra), padding=1)))
        return tuple(outs)

    return f


def int8_model(weights: list[tuple[np.ndarray, np.ndarray]]) -> Callable[..., Any]:
    sx = 1 / 40
    params = []
    for w, b in weights:
        sw = float(np.abs(w).max()) / 127
        wq = Tensor(quantize(w, D.qint8(sw)), dtype=D.qint8(sw))
        bq = quantize(b.reshape(1, -1, 1, 1), D.qint32(np.float32(sx) * np.float32(sw)))
        params.append((wq, Tensor(bq, dtype=D.qint32(float(sx * sw)))))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, _, _, s, p, d), x, (wq, bq)) in enumerate(zip(CASES, xs, params, strict=True)):
            y = F.quantized.conv_bias_activation(
                x.astype(D.qint8(sx)), wq, bq, dtype=D.qint8(0.05 + 0.01 * i), stride=s, padding=p,
                dilation=d, nonlinear_mode="relu" if i % 2 == 0 else "identity",
            )  # fmt: skip
            outs.append(y.astype("float32"))
        return tuple(outs)

    return f


@pytest.mark.parametrize(
    ("target", "isa", "tol"), [("arm-nchw44+fuse-z", "neon", 1e-4), ("arm-fp16+fuse-z", "fp16", 1e-2)]
)
def test_arm_gemm_float_convolutions(
    target: str, isa: str, tol: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the 3x3 stride-1 cases stay on the GEMM (Winograd has its own tests: test_arm_winograd.py)
    monkeypatch.setattr(neon_winograd, "winograd_tile", lambda p: None)
    inputs, weights = _data()
    extra = (np.random.default_rng(3).standard_normal((12, 12, 3, 3)) * 0.2).astype(np.float32)
    c = compile_fn(float_model(weights, extra), inputs, target)
    assert conv_families(c) == {("conv2d_nchw44_gemm", isa)}
    # float16: the by-element fmla as inline assembly (neon_gemm.fmla_f16_asm), never gcc's vfmaq_lane_f16
    assert "_res" in c.source and "vfmaq_lane_f16" not in c.source
    assert ("fmla %[a0_0].8h" in c.source) == (isa == "fp16")
    # float16: against the reference run of the same float16 graph
    want = run_module(c._stages["inference" if isa == "fp16" else "tensor"], inputs)
    for i, (g, w) in enumerate(zip(run_emulated(c, inputs), want, strict=True)):
        w = np.asarray(w, np.float32)
        np.testing.assert_allclose(
            g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())), err_msg=f"output {i}"
        )


def test_arm_gemm_int8_dot_convolutions_exact() -> None:
    inputs, weights = _data()
    c = compile_fn(int8_model(weights), inputs, "arm-nchw44-dot")
    # 1x1 stride-1 layers read NCHW44 rows (neon_int8.py), the others a packed input (neon_i8mm.py)
    families = conv_families(c)
    assert ("conv2d_nchw44_dot_im2col", "dot") in families, families
    assert families <= {("conv2d_nchw44_dot_gemm", "dot"), ("conv2d_nchw44_dot_im2col", "dot")}, families
    assert "vdotq_laneq_s32" in c.source
    want = run_module(c._stages["tensor"], inputs)
    for i, (g, w) in enumerate(zip(run_emulated(c, inputs), want, strict=True)):
        np.testing.assert_array_equal(g, np.asarray(w), err_msg=f"output {i}")
