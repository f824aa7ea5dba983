"""MegEngine's tensor functions built from existing ops: roll, swapaxes, copy, eye, diag, meshgrid,
and full's dtype from its value; values against numpy/torch, gradients through them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.autodiff as ad
import compiler.functional as F

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


@pytest.mark.parametrize(("shift", "axis"), [(1, 0), (-1, 1), (5, 2), ([1, 2], [0, 2]), (7, None), (0, 1)])
def test_roll_matches_torch(shift: int | list[int], axis: int | list[int] | None) -> None:
    want = torch.roll(torch.tensor(X), shift, axis if axis is not None else None).numpy()
    np.testing.assert_array_equal(F.roll(mge.tensor(X), shift, axis).numpy(), want)


def test_roll_gradient_rolls_back() -> None:
    x = mge.tensor(X)
    gm = ad.GradManager().attach([x])
    weights = np.random.default_rng(0).standard_normal(X.shape).astype(np.float32)
    with gm:
        gm.backward(F.sum(F.roll(x, 2, 2) * mge.tensor(weights)))
    np.testing.assert_array_equal(x.grad.numpy(), np.roll(weights, -2, 2))


def test_swapaxes_copy_eye() -> None:
    np.testing.assert_array_equal(F.swapaxes(mge.tensor(X), 0, -1).numpy(), np.swapaxes(X, 0, -1))
    c = F.copy(mge.tensor(X))
    assert c is not None and np.array_equal(c.numpy(), X)
    with pytest.raises(mge.XmgeError, match="copy: device gpu0 is not available"):
        F.copy(mge.tensor(X), "gpu0")
    np.testing.assert_array_equal(F.eye(3).numpy(), np.eye(3, dtype=np.float32))
    e = F.eye(2, 4, dtype="int32")
    assert e.dtype == np.int32 and e.numpy().tolist() == np.eye(2, 4).tolist()


@pytest.mark.parametrize("k", [0, 1, 2, -1, -3])
def test_diag_matches_torch(k: int) -> None:
    v = np.array([1.0, -2.0, 3.0], np.float32)
    np.testing.assert_array_equal(F.diag(mge.tensor(v), k).numpy(), torch.diag(torch.tensor(v), k).numpy())
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(F.diag(mge.tensor(m), k).numpy(), torch.diag(torch.tensor(m), k).numpy())


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid_matches_torch(indexing: str) -> None:
    a, b, c = np.arange(3.0), np.arange(4.0) * 2, np.arange(2.0) - 1
    for ins in ((a, b), (a, b, c)):
        got = F.meshgrid(*[mge.tensor(t) for t in ins], indexing=indexing)
        want = torch.meshgrid(*[torch.tensor(t) for t in ins], indexing=indexing)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g.numpy(), w.numpy().astype(np.float32))


def test_full_takes_the_values_dtype() -> None:
    assert F.full((2, 3), True).dtype == np.bool_
    assert F.full((2,), 3).dtype == np.int32
    assert F.full(2, 1.5).dtype == np.float32
    assert F.full((2,), 1, dtype="float16").dtype == np.float16
