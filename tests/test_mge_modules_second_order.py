"""Behaviour 3: nested GradManagers. The backward of an inner manager is recorded by the managers
entered before it, so they differentiate it again (second-order gradients, jvp through a gradient
w.r.t. an attached output gradient); managers entered after it do not see it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
from compiler.autodiff import GradManager

X = np.random.default_rng(0).random(10).astype(np.float32)


def test_second_order_through_nested_managers() -> None:
    x = mge.tensor(X)
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm:
        with gm2:
            gm2.backward(F.cos(x))
        np.testing.assert_allclose(x.grad.numpy(), -np.sin(X), rtol=1e-6)
        gm.backward(x.grad)
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(X) - np.cos(X), rtol=1e-5)


def test_inner_manager_does_not_see_outer_backward() -> None:
    x = mge.tensor(X)
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm2:
        with gm:
            gm2.backward(F.cos(x))
            gm.backward(x.grad)
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(X), rtol=1e-6)


@pytest.mark.parametrize("name", ["cos", "sin", "affine", "tanh_mul"])
def test_jvp_by_reverse_of_reverse_matches_torch(name: str) -> None:
    fns = {
        "cos": (F.cos, torch.cos),
        "sin": (F.sin, torch.sin),
        "affine": (lambda t: t * 2 + 1, lambda t: t * 2 + 1),
        "tanh_mul": (lambda t: F.tanh(t) * t, lambda t: torch.tanh(t) * t),
    }
    ours, theirs = fns[name]
    inp = mge.tensor(X)
    with GradManager() as gm:
        with GradManager().attach([inp]) as gm2:
            out = ours(inp)
            out_grad = F.zeros_like(out)
            gm.attach(out_grad)
            gm2.backward(out, out_grad)
        gm.backward(inp.grad)
    t = torch.tensor(X, requires_grad=True)
    (want,) = torch.autograd.grad(theirs(t).sum(), t)  # the jvp with tangent ones is the derivative
    np.testing.assert_allclose(out_grad.grad.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_second_derivative_of_polynomial_matches_torch() -> None:
    x = mge.tensor(X)
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm:
        with gm2:
            gm2.backward(F.sum(x * x * x + F.exp(x) / (x + 1)))
        first = x.grad
        x.grad = None
        gm.backward(first)
    t = torch.tensor(X, requires_grad=True)
    (g,) = torch.autograd.grad((t * t * t + torch.exp(t) / (t + 1)).sum(), t, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), t)
    np.testing.assert_allclose(x.grad.numpy(), h.numpy(), rtol=1e-4)


def test_group_managers_do_not_see_each_other() -> None:
    x = mge.tensor(X)
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm | gm2:
        y = F.cos(x)
        gm.backward(y)
        gm2.backward(y)
    np.testing.assert_allclose(x.grad.numpy(), -2 * np.sin(X), rtol=1e-6)
    x = mge.tensor(X)
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm | gm2:
        gm2.backward(F.cos(x))
        gm.backward(x.grad)  # gm2's backward is not part of gm's history
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(X), rtol=1e-6)


def test_function_custom_gradient_and_its_second_order() -> None:
    from compiler.autodiff import Function

    class MySin(Function):
        def forward(self, x):
            self.inp = x
            return F.sin(mge.tensor(x.numpy()))

        def backward(self, dy):
            return F.cos(self.inp) * dy

    class MyCos(Function):
        def forward(self, x):
            self.inp = x
            return F.cos(mge.tensor(x.numpy()))

        def backward(self, dy):
            return None if dy is None else -MySin()(self.inp) * dy

    x = mge.tensor(X)
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm:
        with gm2:
            gm2.backward(MyCos()(x))
        np.testing.assert_allclose(x.grad.numpy(), -np.sin(X), rtol=1e-6)
        gm.backward(x.grad)
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(X) - np.cos(X), rtol=1e-5)

    class Twice(Function):
        def forward(self, a, b):
            return a * 2, b * 3

        def backward(self, da, db):
            return da * 10, None  # a deliberately different gradient: the rule is the user's

    a, b = mge.tensor([1.0]), mge.tensor([1.0])
    gm = GradManager().attach([a, b])
    with gm:
        p, q = Twice()(a, b)
        gm.backward(p + q)
    assert a.grad.numpy().tolist() == [10.0] and b.grad is None
