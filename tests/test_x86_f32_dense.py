"""The float32 NCHW88 dense paths tuned for issue 14, on odd shapes against the reference and
bit-identical on 1 and 2 threads: strided 1x1 convolutions run on a subsampled copy of their input
as one row of ``OH * OW`` columns (the copy is the first worksharing loop of the kernel's region),
and Winograd ``F(2, 3)`` below 16x16 outputs with tiles per register tile balanced over each block."""

from __future__ import annotations

import numpy as np
import pytest

from tests.codegen_util import assert_threads_agree, check
from tests.test_codegen_conv import _conv_model

TARGETS = ["x86-avx2-nchw88", "x86-avx512-nchw88"]

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue), each above two threads' worth of work
CASES = [
    (2, 40, 29, 27, 72, 1, 2, 0, 1, 1, "residual"),  # 1x1 stride 2, batch 2, odd sizes
    (1, 64, 28, 28, 96, 1, 2, 0, 1, 1, "relu"),  # ResNet-50's downsampling shape, smaller
    (1, 48, 15, 15, 48, 1, 3, 0, 1, 1, "none"),  # stride 3: 5x5 of 15x15
    (2, 40, 14, 13, 56, 3, 1, 1, 1, 1, "residual"),  # 14 x 13: F(2, 3), 49 tiles balanced
    (1, 64, 20, 20, 80, 3, 1, 1, 1, 1, "relu"),  # 20 x 20: F(4, 3), 25 tiles
]


@pytest.mark.parametrize("target", TARGETS)
def test_dense_paths_match_reference_and_threads(target: str) -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(23))
    one = check(fn, inputs, target)
    source = one.ir("c")
    assert source.count("static void conv2d_nchw88_dense_") == 3
    assert source.count("static void conv2d_winograd_nchw88_f2_") == 1
    assert source.count("static void conv2d_winograd_nchw88_f4_") == 1
    assert_threads_agree(fn, inputs, target, one)
