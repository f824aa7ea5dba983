"""core.ops.builtin OpDefs run with core._imperative_rt.core2.apply: the same numbers as the
functional calls, traced and differentiated like them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
from compiler.autodiff import GradManager
from compiler.core._imperative_rt.core2 import apply
from compiler.core.ops import builtin
from compiler.core.ops.builtin import Elemwise

RNG = np.random.default_rng(0)


def test_elemwise_modes_and_equality() -> None:
    x, y = mge.tensor([1.0, 2.0]), mge.tensor([3.0, 4.0])
    (s,) = apply(Elemwise(Elemwise.Mode.ADD), x, y)
    (p,) = apply(Elemwise(mode="mul"), x, y)
    assert s.numpy().tolist() == [4.0, 6.0] and p.numpy().tolist() == [3.0, 8.0]
    assert Elemwise(mode="add") == Elemwise(Elemwise.Mode.ADD) != Elemwise(mode="sub")
    with pytest.raises(ValueError, match="not one of"):
        Elemwise(mode="nope")
    with pytest.raises(TypeError, match="no parameter"):
        Elemwise(axis=1)


def test_conv_pool_matmul_match_torch() -> None:
    img = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    (c,) = apply(
        builtin.Convolution(pad_h=1, pad_w=1, stride_h=2, stride_w=2), mge.tensor(img), mge.tensor(w)
    )
    want = torch.nn.functional.conv2d(torch.tensor(img), torch.tensor(w), stride=2, padding=1)
    np.testing.assert_allclose(c.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    (m,) = apply(builtin.Pooling(mode="max", window_h=2, window_w=2, stride_h=2, stride_w=2), mge.tensor(img))
    np.testing.assert_array_equal(m.numpy(), torch.nn.functional.max_pool2d(torch.tensor(img), 2).numpy())
    a, b = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 4)).astype(np.float32)
    (mm,) = apply(builtin.MatrixMul(transposeA=True), mge.tensor(a), mge.tensor(b))
    np.testing.assert_allclose(mm.numpy(), a.T @ b, rtol=1e-5)
    (r,) = apply(builtin.Reduce(mode="sum", axis=1), mge.tensor(a))
    np.testing.assert_allclose(r.numpy(), a.sum(axis=1, keepdims=True), rtol=1e-6)
    (t,) = apply(builtin.TypeCvt(dtype="int32"), mge.tensor([1.7, -2.2]))
    assert t.dtype == np.int32


def test_apply_is_differentiable() -> None:
    x = mge.tensor([0.5, 1.5])
    gm = GradManager().attach(x)
    with gm:
        (y,) = apply(Elemwise(mode="sin"), x)
        gm.backward(F.sum(y))
    np.testing.assert_allclose(x.grad.numpy(), np.cos([0.5, 1.5]), rtol=1e-6)
    with pytest.raises(TypeError, match="OpDef"):
        apply("add", x)  # type: ignore[arg-type]
