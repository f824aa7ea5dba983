"""The float32 pointwise (1x1 stride-1) convolutions of the x86 NCHW88 targets on the shapes issue 14
profiles (few input channels over many pixels, many channels over 7x7, input-channel chunks with
partial sums, residual epilogues), batch 2, odd sizes and channel counts: against the reference,
bit-identical on 1 and 2 threads, and once under ASan / UBSan."""

from __future__ import annotations

import numpy as np
import pytest

from tests.codegen_util import assert_threads_agree, check, check_sanitized
from tests.test_codegen_conv import _conv_model

TARGETS = ["x86-avx2-nchw88", "x86-avx512-nchw88"]

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue)
CASES = [
    (2, 16, 23, 21, 40, 1, 1, 0, 1, 1, "relu"),  # few input channels, a partial 32-channel tile
    (1, 24, 29, 31, 72, 1, 1, 0, 1, 1, "none"),  # 899 pixels: a partial column tile
    (1, 200, 7, 7, 328, 1, 1, 0, 1, 1, "residual"),  # 7x7, two input-channel chunks
    (2, 1032, 5, 5, 48, 1, 1, 0, 1, 1, "hswish"),  # many chunks, 25 pixels
    (1, 20, 9, 11, 44, 1, 1, 0, 1, 1, "residual"),  # channels not multiples of 8
]
DENSE_1X1 = "static void conv2d_nchw88_dense_"


@pytest.mark.parametrize("target", TARGETS)
def test_pointwise_match_reference_and_threads(target: str) -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(41))
    one = check(fn, inputs, target)
    assert one.ir("c").count(DENSE_1X1) >= 4  # every case with whole 8-channel blocks is NCHW88
    assert_threads_agree(fn, inputs, target, one)


def test_pointwise_sanitized() -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(42))
    check_sanitized(check(fn, inputs, TARGETS[1], threads=2), inputs)
