"""Tensor-level behaviour found different from MegEngine 1.13 by running its unit tests: results
stay on their operands' device, concat refuses mixed devices unless told where, ``eye`` takes a
shape, ``_tuple_shape``."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F


def test_results_stay_on_their_operands_device():
    a = mge.tensor(np.ones((2, 2), np.float32), device="cpu1")
    b = mge.tensor(np.ones((2, 2), np.float32), device="cpu1")
    for out in (a + b, a * 2, F.concat([a, b]), F.stack([a, b]), F.exp(a), F.sum(a)):
        assert str(out.device).split(":")[0] == "cpu1"
    assert str((mge.tensor([1.0]) + 1).device) == str(mge.tensor([1.0]).device)  # default stays default


def test_concat_of_mixed_devices_needs_a_device():
    a = mge.tensor([1.0], device="cpu0")
    b = mge.tensor([2.0], device="cpu1")
    assert str(F.concat([a, b], device="cpu1").device).split(":")[0] == "cpu1"
    with pytest.raises(RuntimeError, match="different devices"):
        F.concat([a, b])


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.int32])
@pytest.mark.parametrize("shape", [[10, 20], [30], (4, 3)])
def test_eye_takes_sizes_or_a_shape(dtype, shape):
    want = np.eye(*shape).astype(dtype)
    for got in (
        F.eye(shape, dtype=dtype),
        F.eye(*shape, dtype=dtype),
        F.eye(mge.Tensor(list(shape)), dtype=dtype),
    ):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(ValueError, match="one or two sizes"):
        F.eye([2, 3, 4])


def test_tuple_shape():
    assert mge.tensor(np.zeros((2, 0, 3), np.float32))._tuple_shape == (2, 0, 3)


def test_one_element_tensors_of_any_shape_convert_to_python_numbers():
    assert int(mge.tensor([2])) == 2 and float(mge.tensor([[2.5]])) == 2.5
    assert bool(mge.tensor([0])) is False and ["a", "b"][mge.tensor([1])] == "b"
    # a shape given as one-element tensors (MegEngine's trace tests do this)
    out = F.broadcast_to(mge.tensor(np.ones((1, 1), np.float32)), (mge.tensor([2]), mge.tensor([3])))
    assert out.shape == (2, 3)
    with pytest.raises(TypeError):
        int(mge.tensor([1, 2]))
