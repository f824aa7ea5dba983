"""Generated convolution kernels against the reference interpreter: odd sizes, padding, stride,
dilation, groups, depthwise, channels not divisible by the register blocking, batch > 1, every B-packing
mode (gather, output-row panels, 1x1 copy) and fused epilogues (bias, residual, activations).

The default suite compiles all representative variants into one model per ISA (one build each, cached);
``-m slow`` adds random shapes, one model per ISA again.
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from tests.codegen_util import X86_TARGETS, check

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue)
CASES = [
    (1, 3, 11, 13, 5, 3, 1, 1, 1, 1, "relu"),  # gather panels, OC < MR
    (2, 7, 17, 9, 13, 5, 2, 2, 1, 1, "none"),  # batch 2, stride 2, odd everything
    (1, 6, 15, 15, 10, 3, 1, 2, 2, 2, "relu"),  # dilation 2, 2 groups
    (1, 9, 13, 12, 9, 3, 1, 1, 1, 9, "relu"),  # depthwise
    (2, 12, 14, 17, 12, 3, 2, 1, 1, 12, "sigmoid"),  # depthwise, stride 2, batch 2
    (1, 5, 11, 10, 5, 5, 1, 2, 2, 5, "hswish"),  # depthwise, dilation
    (1, 16, 9, 40, 33, 1, 1, 0, 1, 1, "relu"),  # 1x1 copy packing, OC not a multiple of 8/16
    (1, 16, 9, 11, 20, 1, 2, 0, 1, 1, "none"),  # 1x1 stride 2
    (1, 5, 16, 32, 7, 3, 1, 1, 1, 1, "residual"),  # row-aligned panels + residual
    (2, 3, 64, 64, 8, 7, 2, 3, 1, 1, "relu"),  # 7x7 stem, row panels, stride 2
    (1, 4, 18, 33, 6, 3, 1, 0, 1, 1, "none"),  # valid padding
    (1, 20, 7, 7, 70, 3, 1, 1, 1, 1, "residual"),  # K > KC? no; OC > MR with remainder
    (1, 300, 6, 5, 24, 1, 1, 0, 1, 1, "relu"),  # K = 300 > KC = 256: two K blocks
    (1, 8, 10, 10, 12, 3, 1, 1, 1, 4, "residual"),  # 4 groups, residual
]


def _conv_model(cases: list[tuple], rng: np.random.Generator):  # type: ignore[no-untyped-def]
    params = []
    inputs = []
    for n, ic, h, w, oc, k, s, p, d, g, epi in cases:
        params.append(
            (
                xm.tensor(
                    rng.standard_normal((oc, ic // g, k, k)).astype(np.float32) / np.sqrt(ic // g * k * k)
                ),
                xm.tensor(rng.standard_normal((1, oc, 1, 1)).astype(np.float32)),
            )
        )
        inputs.append(rng.standard_normal((n, ic, h, w)).astype(np.float32))
        if epi == "residual":
            oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
            ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
            inputs.append(rng.standard_normal((n, oc, oh, ow)).astype(np.float32))

    def fn(*xs):  # type: ignore[no-untyped-def]
        outs, it = [], iter(xs)
        for (wt, b), (_, _, _, _, _, _, s, p, d, g, epi) in zip(params, cases, strict=True):
            y = F.conv2d(next(it), wt, b, stride=s, padding=p, dilation=d, groups=g)
            if epi == "relu":
                y = F.relu(y)
            elif epi == "sigmoid":
                y = F.sigmoid(y)
            elif epi == "hswish":
                y = F.hswish(y)
            elif epi == "residual":
                y = F.relu(y + next(it))
            outs.append(y)
        return tuple(outs)

    return fn, inputs


@pytest.mark.parametrize("target", X86_TARGETS)
def test_conv_variants(target: str) -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(0))
    compiled = check(fn, inputs, target)
    source = compiled.ir("c")
    # every packing mode and both conv families were exercised
    for word in ("_gather_", "_rows_", "_copy_", "conv2d_dw_", "_bias_res_RELU", "SIGMOID", "HSWISH"):
        assert word in source, word


def test_conv_threads_match_single_thread() -> None:
    fn, inputs = _conv_model(CASES[:4] + CASES[8:10], np.random.default_rng(1))
    check(fn, inputs, "x86-avx2", threads=2)


@pytest.mark.slow
@pytest.mark.parametrize("target", X86_TARGETS)
def test_conv_random_shapes(target: str) -> None:
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(24):
        k = int(rng.choice([1, 3, 5]))
        d = int(rng.choice([1, 1, 2]))
        s = int(rng.choice([1, 2]))
        p = int(rng.integers(0, k))
        g = int(rng.choice([1, 1, 2, 3]))
        icg, ocg = int(rng.integers(1, 9)), int(rng.integers(1, 21))
        dw = rng.random() < 0.25
        ic, oc = (g * icg, g * ocg) if not dw else (g * 3, g * 3)
        if dw:
            g = ic
        h = int(rng.integers(d * (k - 1) + 1, 40))
        w = int(rng.integers(d * (k - 1) + 1, 40))
        epi = str(rng.choice(["none", "relu", "residual", "hswish"]))
        cases.append((int(rng.integers(1, 3)), ic, h, w, oc, k, s, p, d, g, epi))
    fn, inputs = _conv_model(cases, rng)
    check(fn, inputs, target)
