"""``conv2d_nchw88_dw3x3`` (float32 depthwise 3x3 NCHW88, stride 1 and 2, padding 0 and 1, no padded
copy) against PyTorch, bit-identical results on 1 and 2 threads, its register blocks. Odd spatial
sizes, rows narrower than a register block, batch 2 and every fused epilogue are the unit's
``examples`` (tests/test_kernel_conformance.py, also under ASan/UBSan).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.c.templates.x86.x86_f32_dw import interior_columns
from tests.codegen_util import assert_threads_agree, check, compile_fn, require
from tests.test_codegen_conv import _conv_model

TARGETS = ["x86-avx2-nchw88", "x86-avx512-nchw88"]
FAMILY = "conv2d_nchw88_dw3x3"


def _depthwise_model(cases: list[tuple], seed: int):  # type: ignore[no-untyped-def]
    return _conv_model(cases, np.random.default_rng(seed))


def test_depthwise_3x3_matches_torch() -> None:
    """The same layer as torch's conv2d (groups = channels) with the fused bias and ReLU6."""
    require(TARGETS[-1])
    import compiler as xm
    import compiler.functional as F

    rng = np.random.default_rng(1)
    for stride, pad in ((1, 1), (2, 1), (2, 0)):
        w = rng.standard_normal((40, 1, 1, 3, 3)).astype(np.float32)
        b = rng.standard_normal((1, 40, 1, 1)).astype(np.float32)
        x = rng.standard_normal((2, 40, 19, 25)).astype(np.float32)
        wt, bt = xm.tensor(w), xm.tensor(b)

        def fn(v, wt=wt, bt=bt, stride=stride, pad=pad):  # type: ignore[no-untyped-def]
            return F.clip(F.conv2d(v, wt, bt, stride=stride, padding=pad, groups=40), 0, 6)

        compiled = compile_fn(fn, [x], TARGETS[-1])
        assert FAMILY in compiled.ir("c")
        got = compiled.run([x])[0]
        want = torch.nn.functional.conv2d(
            torch.from_numpy(x), torch.from_numpy(w.reshape(40, 1, 3, 3)), torch.from_numpy(b.reshape(40)),
            stride=stride, padding=pad, groups=40,
        ).clamp(0, 6).numpy()  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_depthwise_3x3_identical_on_1_and_2_threads(target: str) -> None:
    # large enough for a parallel region (2 x MIN_WORK_PER_THREAD multiply-adds and more)
    cases = [
        (1, 72, 29, 31, 72, 3, 1, 1, 1, 72, "relu"),
        (2, 48, 31, 29, 48, 3, 2, 1, 1, 48, "residual"),
    ]
    fn, inputs = _depthwise_model(cases, 2)
    two = assert_threads_agree(fn, inputs, target, check(fn, inputs, target, threads=1))
    assert "#pragma omp parallel for" in two.ir("c")


def test_interior_columns() -> None:
    assert interior_columns(112, 56, 2, 1) == (1, 56)  # 112 even: the last column's taps in range
    assert interior_columns(111, 56, 2, 1) == (1, 55)
    assert interior_columns(56, 56, 1, 1) == (1, 55)
    assert interior_columns(10, 8, 1, 0) == (0, 8)
    assert interior_columns(3, 3, 1, 1) == (1, 2)
    assert interior_columns(2, 1, 1, 0) == (0, 0)  # narrower than the window: no interior
