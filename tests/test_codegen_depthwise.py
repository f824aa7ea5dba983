"""SIMD depthwise convolution for plain NCHW (:mod:`backends.c.templates.x86.depthwise_x86`) against the
reference: stride 1 and 2 (even-lane loads), rows wide enough for vector columns plus scalar borders
and remainders, padding 0 / 1 / 2, dilation 2, 5x5 windows, batch 2 and every epilogue; also under
ASan/UBSan (the stride-2 loads read 16 floats and must stay inside the row)."""

from __future__ import annotations

import numpy as np
import pytest

from semantics import run_module
from tests.codegen_util import X86_TARGETS, check, compile_fn, require
from tests.test_codegen_conv import _conv_model

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue), groups == channels
CASES = [
    (1, 5, 9, 37, 5, 3, 1, 1, 1, 5, "relu"),
    (2, 4, 11, 40, 4, 3, 2, 1, 1, 4, "residual"),
    (1, 3, 8, 35, 3, 3, 2, 0, 1, 3, "hswish"),
    (1, 6, 13, 41, 6, 5, 1, 2, 2, 6, "sigmoid"),
    (1, 3, 12, 53, 3, 5, 2, 2, 1, 3, "none"),
]


@pytest.mark.parametrize("target", X86_TARGETS)
def test_depthwise_simd(target: str) -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(0))
    source = check(fn, inputs, target).ir("c")
    assert source.count("static void conv2d_dw_") == len(CASES)
    assert "_mm256_shuffle_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8), 0x88)" in source


def test_depthwise_simd_sanitized() -> None:
    require("x86-avx2")
    fn, inputs = _conv_model(CASES, np.random.default_rng(1))
    compiled = compile_fn(fn, inputs, "x86-avx2")
    got = compiled.run_runner(inputs, sanitize=True)
    for g, w in zip(got, run_module(compiled._stages["tensor"], inputs), strict=True):  # type: ignore[arg-type]
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
