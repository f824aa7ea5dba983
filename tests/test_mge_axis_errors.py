"""Axis checks raise what MegEngine code catches: MegEngine asserts on an out-of-range or repeated
axis (``_normalize_axis``), so xmge's AxisError is an AssertionError as well as an OpError."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
from compiler.core import AxisError, OpError


@pytest.mark.parametrize("fn", [F.sum, F.mean, F.prod, F.max, F.min])
@pytest.mark.parametrize("axis", [(-1, 1), (0, -2, 1), 2, -3])
def test_bad_reduction_axes_are_assertion_errors(fn, axis):
    x = mge.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(AssertionError) as info:
        fn(x, axis=axis)
    assert isinstance(info.value, AxisError) and isinstance(info.value, OpError)


def test_good_negative_axes_still_reduce():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    for axis in (-1, -2, (-2, 1), (-1, 0)):
        np.testing.assert_allclose(F.sum(mge.tensor(data), axis=axis).numpy(), data.sum(axis=axis))


def test_expand_dims_repeated_axis():
    with pytest.raises(AssertionError, match="repeated axis"):
        F.expand_dims(mge.tensor(np.ones(3, np.float32)), (0, 0))


@pytest.mark.parametrize("axis", [-1, -2, 0, 1])
@pytest.mark.parametrize("keepdim", [True, False, None])
def test_builtin_reduce_keepdim_and_negative_axes(axis, keepdim):
    from compiler.core._imperative_rt.core2 import apply
    from compiler.core.ops import builtin

    data = np.random.default_rng(0).random((2, 3, 3, 2)).astype(np.float32)
    op = builtin.Reduce(mode="sum", axis=axis) if keepdim is None else builtin.Reduce("sum", axis, keepdim)
    (got,) = apply(op, mge.tensor(data))
    np.testing.assert_allclose(got.numpy(), data.sum(axis=axis, keepdims=keepdim is not False), rtol=1e-6)
    with pytest.raises(AssertionError, match="out of range"):
        apply(builtin.Reduce(mode="sum", axis=4), mge.tensor(data))
