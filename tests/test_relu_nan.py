"""ReLU keeps NaN, as MegEngine defines it (``dnn/src/common/elemwise/kern_defs.cuh`` v1.13:
``RELU: x <= 0 ? 0 : x``, so NaN, which is not <= 0, passes through) and as ``torch.relu`` does.
The reference interpreter is checked against PyTorch; the compiled targets against the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import compiler as xm
import compiler.functional as F
import compiler.module as M
from tests.codegen_util import compile_fn, require

SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, -1.5, 2.5], np.float32)


def _input() -> np.ndarray:
    x = np.random.default_rng(7).standard_normal((1, 8, 4, 4)).astype(np.float32)
    x[0, :, 1, 0] = np.nan  # one NaN per channel, in the same pixel
    x[0, 0, 2:, :] = SPECIALS.reshape(2, 4)
    return x


def _same_nans(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN positions differ")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # assert_allclose: NaN == NaN


def _relu(d: Any) -> Any:
    return F.relu(d)


def _conv_relu_model() -> Callable[[Any], Any]:
    conv = M.Conv2d(8, 8, 1)
    conv.eval()
    return lambda d: F.relu(conv(d))  # a 1x1 conv keeps each NaN in its own pixel


def test_reference_relu_keeps_nan_like_torch() -> None:
    x = _input()
    want = torch.relu(torch.from_numpy(x)).numpy()
    _same_nans(F.relu(xm.tensor(x)).numpy(), want)
    _same_nans(F.relu(xm.tensor(x) + xm.tensor(x)).numpy(), torch.relu(torch.from_numpy(x) * 2).numpy())
    assert np.isnan(want).sum() == 8 + 2  # the data really has NaNs to keep


X86_BUG = (
    "bug: the C backends' ReLU maps NaN to 0 (reference and MegEngine keep it): generic "
    "'(a > 0.f ? a : 0.f)' in backends/c/templates/generic.py and xm_act_relu in "
    "backends/c/runtime/xm_kernels.h, and _mm256_max_ps(v, zero) in backends/c/templates/nchw88.py "
    "(maxps returns its second operand when either is NaN); fix: 'a <= 0.f ? 0.f : a' and "
    "_mm256_max_ps(zero, v)"
)


@pytest.mark.xfail(strict=True, reason=X86_BUG)
@pytest.mark.parametrize("target", ["x86-avx2", "x86-avx2-nchw88"])
@pytest.mark.parametrize("model", ["relu", "conv_relu"])
def test_x86_relu_keeps_nan(target: str, model: str) -> None:
    require(target)
    fn = _relu if model == "relu" else _conv_relu_model()
    x = _input()
    c = compile_fn(fn, [x], target)
    _same_nans(c(x), fn(xm.tensor(x)).numpy())
