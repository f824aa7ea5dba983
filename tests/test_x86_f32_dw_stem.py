"""``conv2d_nchw88_stem3x3`` (AVX-512 float32 3x3 stride-2 first layer: plain input channels, NCHW88
output, no padded copy) against PyTorch and bit-identical on 1 and 2 threads. 1 to 4 input channels,
8 to 40 output channels (a half-used last zmm), odd and even sizes, padding 0 and 1, rows narrower
than a register tile, batch 2 and every fused epilogue are the unit's ``examples``
(tests/test_kernel_conformance.py, also under ASan/UBSan).
"""

from __future__ import annotations

import numpy as np
import torch

from backends.c.templates.x86.x86_f32_dw_stem import tile_columns
from tests.codegen_util import assert_threads_agree, check, compile_fn, require
from tests.test_codegen_conv import _conv_model

TARGET = "x86-avx512-nchw88"
FAMILY = "conv2d_nchw88_stem3x3"


def test_stem_matches_torch() -> None:
    """MobileNetV2's stem shape (RGB -> 32 channels, bias, ReLU6) as torch computes it."""
    require(TARGET)
    import compiler as xm
    import compiler.functional as F

    rng = np.random.default_rng(1)
    w = rng.standard_normal((32, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal((1, 32, 1, 1)).astype(np.float32)
    x = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    wt, bt = xm.tensor(w), xm.tensor(b)

    def fn(v):  # type: ignore[no-untyped-def]
        return F.clip(F.conv2d(v, wt, bt, stride=2, padding=1), 0, 6)

    compiled = compile_fn(fn, [x], TARGET)
    assert FAMILY in compiled.ir("c")
    want = torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b.reshape(32)), stride=2, padding=1
    ).clamp(0, 6)
    np.testing.assert_allclose(compiled.run([x])[0], want.numpy(), rtol=1e-5, atol=1e-5)


def test_stem_identical_on_1_and_2_threads() -> None:
    require(TARGET)
    cases = [(2, 3, 61, 59, 32, 3, 2, 1, 1, 1, "relu")]  # above two threads' worth of work
    fn, inputs = _conv_model(cases, np.random.default_rng(2))
    two = assert_threads_agree(fn, inputs, TARGET, check(fn, inputs, TARGET, threads=1))
    assert "#pragma omp parallel for" in two.ir("c")


def test_tile_columns() -> None:
    assert [tile_columns(oc) for oc in (8, 16, 24, 32, 40, 64)] == [12, 12, 12, 12, 7, 4]
