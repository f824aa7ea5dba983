"""The NCHW44 Winograd convolutions (``backends/c/templates/arm/neon_winograd.py``): the transform
matrices exactly (1-D correlation identity, the planner's sharing against the plain product), the
cost rule's choices, and under qemu against the reference interpreter: channel counts that are not
multiples of 4 (padded by the layout pass), odd spatial sizes (partial border tiles), padding 0 and
1, batch 2, tile blocks of several sizes, with each epilogue (none, bias, ReLU, ReLU6, a fused
residual). float32 to 1e-4 of each output's range, float16 (computed in float16) to 1%."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.cross import toolchain_problem
from backends.c.templates.arm.neon_winograd import winograd_tile
from backends.c.templates.x86.winograd_transforms import TRANSFORMS, plan_rows
from compiler.driver.compile import EmulationWarning
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import compile_fn

_problem = toolchain_problem()
needs_arm = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")


@pytest.mark.parametrize("m", sorted(TRANSFORMS))
def test_transforms_compute_the_correlation_exactly(m: int) -> None:
    bt, g, at = TRANSFORMS[m]
    rng = np.random.default_rng(m)
    for _ in range(5):
        d = [Fraction(int(v)) for v in rng.integers(-9, 10, m + 2)]
        w = [Fraction(int(v)) for v in rng.integers(-9, 10, 3)]
        u = [sum(row[k] * w[k] for k in range(3)) for row in g]
        v = [sum(row[k] * d[k] for k in range(m + 2)) for row in bt]
        y = [sum(row[k] * u[k] * v[k] for k in range(m + 2)) for row in at]
        assert y == [sum(w[k] * d[i + k] for k in range(3)) for i in range(m)]


@pytest.mark.parametrize("which", [0, 2])
@pytest.mark.parametrize("m", sorted(TRANSFORMS))
def test_planned_transforms_equal_the_matrix_product(m: int, which: int) -> None:
    mat = TRANSFORMS[m][which]
    srcs = [f"x{k}" for k in range(len(mat[0]))]
    rng = np.random.default_rng(7)
    values = {s: Fraction(int(rng.integers(-50, 50)), int(rng.integers(1, 9))) for s in srcs}
    plan = plan_rows(mat, srcs, [f"y{i}" for i in range(len(mat))])
    for combo in plan:
        values[combo.dst] = sum(c * values[s] for c, s in combo.terms)
    for i, row in enumerate(mat):
        assert values[f"y{i}"] == sum(c * values[s] for c, s in zip(row, srcs, strict=True))
    naive = sum(sum(1 for c in row if c) for row in mat)
    assert sum(c.ops for c in plan) < naive  # the +- point pairs are shared


def _conv(dtype: str, ic: int, oc: int, hw: int, **kw: int) -> dict[str, Any]:
    return {"mode": "dense", "dtype": dtype, "fh": 3, "fw": 3, "sh": 1, "sw": 1, "dh": 1, "dw": 1,
            "ic": ic, "oc": oc, "oh": hw, "ow": hw, **kw}  # fmt: skip


def test_cost_rule() -> None:
    # ResNet-18's 3x3 layers at 224 (56x56x64: F(6, 3)), at 64 (16x16 .. 2x2: F(4, 3), F(2, 3))
    assert winograd_tile(_conv("f32", 64, 64, 56)) == 6
    assert winograd_tile(_conv("f32", 128, 128, 8)) == 4
    assert winograd_tile(_conv("f32", 512, 512, 2)) == 2
    assert winograd_tile(_conv("f16", 64, 64, 56)) == 2  # float16: F(2, 3) only (precision)
    assert winograd_tile(_conv("f16", 8, 8, 7)) is None  # too few channels to pay for the transforms
    assert winograd_tile(_conv("f32", 64, 64, 56, sh=2, sw=2)) is None
    assert winograd_tile(_conv("f32", 64, 64, 56, dh=2, dw=2)) is None


# input shape (N, C, H, W), channels of a 1x1 conv in front (odd counts: the layout pass pads them;
# a graph input of other than 4k channels would stay NCHW), output channels, padding, epilogue
CASES = [
    ((1, 8, 25, 23), 13, 19, 1, "relu"),  # odd channels and sizes, F(6, 3) in float32
    ((2, 32, 9, 11), 0, 28, 0, "bias"),  # batch 2, no padding, F(4, 3) in float32
    ((1, 32, 2, 3), 0, 40, 1, "relu6"),  # 2x3 outputs: F(2, 3), a partial tile
    ((1, 16, 12, 12), 0, 24, 1, "none"),  # no bias
    ((1, 20, 40, 38), 0, 16, 1, "relu"),  # several tile blocks with a partial last one
]


def _weights() -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(19)
    return [
        (
            (rng.standard_normal((max(mid, 1), s[1], 1, 1)) * 0.3).astype(np.float32),
            (rng.standard_normal((oc, mid or s[1], 3, 3)) * 0.3).astype(np.float32),
            rng.standard_normal(oc).astype(np.float32),
        )
        for s, mid, oc, *_ in CASES
    ]


def _model(weights: list[tuple[np.ndarray, np.ndarray, np.ndarray]], extra: np.ndarray) -> Callable[..., Any]:
    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for (_, mid, oc, pad, epi), x, (w1, w, b) in zip(CASES, xs, weights, strict=True):
            if mid:
                x = F.conv2d(x, Tensor(w1))
            bias = None if epi == "none" else Tensor(b.reshape(1, oc, 1, 1))
            y = F.conv2d(x, Tensor(w), bias, padding=pad)
            outs.append(F.relu(y) if epi == "relu" else F.relu6(y) if epi == "relu6" else y)
        # a residual add fused into the conv (fuse-conv-bias-with-z)
        outs.append(F.relu(outs[3] + F.conv2d(outs[3], Tensor(extra), padding=1)))
        return tuple(outs)

    return f


@needs_arm
@pytest.mark.parametrize(
    ("target", "isa", "tol", "tiles"),
    [("arm-nchw44+fuse-z", "neon", 1e-4, {"f6", "f4", "f2"}), ("arm-fp16+fuse-z", "fp16", 1e-2, {"f2"})],
)
def test_arm_winograd_convolutions(target: str, isa: str, tol: float, tiles: set[str]) -> None:
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(s).astype(np.float32) for s, *_ in CASES]
    extra = (rng.standard_normal((24, 24, 3, 3)) * 0.2).astype(np.float32)
    c = compile_fn(_model(_weights(), extra), inputs, target)
    plan = c.ir("kernel-plan-memory")
    families = set(re.findall(r'"(conv2d\w*)" \["(\w+)"\] {[^}]*fh = 3 : i64', plan))
    assert families == {("conv2d_nchw44_winograd", isa)}  # every 3x3 conv
    assert "winograd_neon_f6_n1_ic16_25x23_oc20" in plan or isa == "fp16"  # 13 -> 16, 19 -> 20 channels
    assert set(re.findall(rf"conv2d_nchw44_winograd_{isa}_(f\d)_", c.source)) == tiles
    assert "_res" in c.source and "RELU6" in c.source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        got = c.run(inputs)
    # float16: against the reference run of the same float16 graph
    want = run_module(c._stages["inference" if isa == "fp16" else "tensor"], inputs)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w, np.float32)
        np.testing.assert_allclose(
            g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())), err_msg=f"output {i}"
        )
