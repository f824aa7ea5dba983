"""MegEngine's remaining elementwise and small math functions (acos ... right_shift, sign, isnan,
isinf, dot, logsigmoid, prelu): values against torch on the CPU, gradients against torch's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.autodiff as ad
import compiler.functional as F

RNG = np.random.default_rng(7)
UNIT = RNG.uniform(-0.9, 0.9, (3, 5)).astype(np.float32)  # inside (-1, 1): asin, acos, atanh
WIDE = RNG.uniform(-3, 3, (3, 5)).astype(np.float32)
ABOVE_ONE = RNG.uniform(1.1, 4, (3, 5)).astype(np.float32)  # acosh

UNARY: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], np.ndarray]] = [
    ("acos", F.acos, torch.acos, UNIT),
    ("asin", F.asin, torch.asin, UNIT),
    ("atan", F.atan, torch.atan, WIDE),
    ("tan", F.tan, torch.tan, UNIT),
    ("sinh", F.sinh, torch.sinh, WIDE),
    ("cosh", F.cosh, torch.cosh, WIDE),
    ("asinh", F.asinh, torch.asinh, WIDE),
    ("acosh", F.acosh, torch.acosh, ABOVE_ONE),
    ("atanh", F.atanh, torch.atanh, UNIT),
    ("erf", F.erf, torch.erf, WIDE),
    ("logsigmoid", F.logsigmoid, torch.nn.functional.logsigmoid, WIDE * 10),
    ("sign", F.sign, torch.sign, np.array([-2.0, 0.0, 3.5], np.float32)),
]


@pytest.mark.parametrize(("name", "ours", "theirs", "x"), UNARY, ids=[u[0] for u in UNARY])
def test_unary_values_and_gradients_match_torch(
    name: str, ours: Callable[[Any], Any], theirs: Callable[[Any], Any], x: np.ndarray
) -> None:
    t = mge.tensor(x)
    gm = ad.GradManager().attach([t])
    with gm:
        y = ours(t)
        gm.backward(F.sum(y * y))
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=2e-5, atol=2e-6)
    if name != "sign":
        np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=2e-4, atol=2e-5)


def test_integer_operands_compute_in_float32() -> None:
    y = F.acos(mge.tensor([0, 1], dtype="int32"))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), np.arccos([0.0, 1.0]), rtol=1e-6)


def test_binary_functions() -> None:
    a, b = WIDE, RNG.uniform(-3, 3, (3, 5)).astype(np.float32)
    ta, tb = mge.tensor(a), mge.tensor(b)
    gm = ad.GradManager().attach([ta, tb])
    with gm:
        y = F.atan2(ta, tb)
        gm.backward(F.sum(y))
    pa, pb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.atan2(pa, pb).sum().backward()
    np.testing.assert_allclose(y.numpy(), np.arctan2(a, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ta.grad.numpy(), pa.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tb.grad.numpy(), pb.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        F.logaddexp(ta, tb).numpy(), torch.logaddexp(pa, pb).detach().numpy(), rtol=1e-5
    )
    x = mge.tensor([1, 2, -8], dtype="int32")
    assert F.left_shift(x, 2).numpy().tolist() == [4, 8, -32]
    assert F.right_shift(x, 1).numpy().tolist() == [0, 1, -4]
    with pytest.raises(mge.XmgeError, match="left_shift: needs integer tensors"):
        F.left_shift(mge.tensor([1.0]), 1)


def test_nan_inf_dot_prelu() -> None:
    x = mge.tensor([1.0, np.nan, np.inf, -np.inf])
    assert F.isnan(x).numpy().tolist() == [False, True, False, False]
    assert F.isinf(x).numpy().tolist() == [False, False, True, True]
    assert F.isnan(mge.tensor([1, 2])).numpy().tolist() == [False, False]
    d = F.dot(mge.tensor([1.0, 2.0, 3.0]), mge.tensor([4.0, 5.0, 6.0]))
    assert d.shape == () and float(d.numpy()) == 32.0
    with pytest.raises(mge.XmgeError, match="dot: needs two vectors of one length"):
        F.dot(mge.tensor([1.0, 2.0]), mge.tensor([1.0]))
    v = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    w = np.array([0.1, 0.2, 0.3], np.float32)
    want = torch.nn.functional.prelu(torch.tensor(v), torch.tensor(w)).numpy()
    np.testing.assert_allclose(F.prelu(mge.tensor(v), mge.tensor(w)).numpy(), want, rtol=1e-6)
    assert F.logsoftmax is F.log_softmax
