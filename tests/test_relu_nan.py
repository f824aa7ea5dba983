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


@pytest.mark.parametrize("target", ["x86-avx2", "x86-avx2-nchw88", "x86-avx512-nchw88"])
@pytest.mark.parametrize("model", ["relu", "conv_relu"])
def test_x86_relu_keeps_nan(target: str, model: str) -> None:
    require(target)
    fn = _relu if model == "relu" else _conv_relu_model()
    x = _input()
    c = compile_fn(fn, [x], target)
    _same_nans(c(x), fn(xm.tensor(x)).numpy())


def special_model(small: bool) -> tuple[Callable[..., Any], list[np.ndarray]]:
    """Every float elementwise mode of the reference (test_codegen_coverage's table), every reduce
    mode, softmax and argmax, and convolution / matrix multiplication epilogues (relu, relu6,
    sigmoid, h_swish, bias, residual) on inputs holding NaN, +-Inf and signed zeros."""
    from tests.test_codegen_coverage import BOOL_RESULT, DOMAIN, FLOAT_MODES, LOGICAL, _arity

    rng = np.random.default_rng(9)
    shape = (1, 8, 5, 7) if small else (2, 16, 7, 9)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=flat.size // 4, replace=False)
    flat[picks] = np.resize(SPECIALS, picks.size)
    c = shape[1]
    w1 = xm.tensor((rng.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32))
    wd = xm.tensor((rng.standard_normal((c, 1, 1, 3, 3)) * 0.3).astype(np.float32))
    w3 = xm.tensor((rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32))
    b = xm.tensor(rng.standard_normal((1, c, 1, 1)).astype(np.float32))
    wfc = xm.tensor(rng.standard_normal((5, shape[3])).astype(np.float32))
    chan = xm.tensor(rng.standard_normal((1, c, 1, 1)).astype(np.float32))

    def fn(a):  # type: ignore[no-untyped-def]
        from compiler.functional.elemwise import _elemwise

        pool = {"any": a, "unit": F.tanh(a) * 0.9, "above1": F.abs(a) + 1.0, "pos": F.abs(a) + 0.1}
        outs = []
        for mode in FLOAT_MODES:
            operands = [pool[DOMAIN.get(mode, "any")], a * 0.5 * chan + 0.25, F.sigmoid(a), a - 1.0]
            y = _elemwise(mode.name, *operands[: _arity(mode)])
            outs.append(y.astype("float32") if mode in BOOL_RESULT else y)
        for mode in LOGICAL:
            outs.append(_elemwise(mode.name, *[a > 0, a < 0.5][: _arity(mode)]).astype("float32"))
        for axis in (1, 3):
            outs += [F.sum(a, axis=axis), F.mean(a, axis=axis), F.max(a, axis=axis), F.min(a, axis=axis),
                     F.prod(a, axis=axis), F.norm(a, ord=2, axis=axis), F.softmax(a, axis=axis),
                     F.argmax(a, axis=axis).astype("float32")]  # fmt: skip
        conv = F.conv2d(a, w1) + b
        outs += [F.relu(conv), F.relu6(conv), F.sigmoid(conv), F.hswish(conv), F.relu(conv + a)]
        outs += [F.relu(F.conv2d(a, wd, padding=1, groups=c) + b), F.relu(F.conv2d(a, w3, padding=1))]
        # (max pooling is left out: its kernels skip NaN where the reference keeps it)
        outs.append(F.relu(F.linear(a.reshape(-1, shape[3]), wfc)))
        return tuple(outs)

    return fn, [x]


@pytest.mark.parametrize(
    "target",
    ["x86-avx2", "x86-avx2-nchw88", "x86-avx512", "x86-avx512-nchw88", "arm-nchw44", "arm-nchw44+plain-c"],
)
def test_nan_and_inf_agree_with_the_reference(target: str) -> None:
    """Compiled elementwise modes, reductions and epilogues map NaN, +-Inf and -0 as the reference."""
    from backends.c.cross import toolchain_problem
    from tests.test_codegen_coverage import _run_compare

    if target.startswith("arm"):
        if toolchain_problem() is not None:
            pytest.skip(f"ARM toolchain: {toolchain_problem()}")
    else:
        require(target)
    fn, inputs = special_model(small=target.startswith("arm"))
    _run_compare(compile_fn(fn, inputs, target), inputs, target)
