"""jit.partial_trace (MegEngine 1.13, without_host mode): the body runs once, later calls replay its
ops; results and gradients equal the eager function's, parameters are read live."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
import compiler.module as M
import compiler.optimizer as optim
from compiler.autodiff import GradManager
from compiler.jit import TraceError, partial_trace


class Simple(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = mge.Parameter(np.array([1.0], np.float32))
        self.b = mge.Parameter(np.array([2.0], np.float32))
        self.body_runs = 0

    @partial_trace
    def forward(self, x):
        self.body_runs += 1
        x = x * self.a + x / self.b
        return F.exp(x)


def _torch_grads(a: float, b: float, x: float):
    ta = torch.tensor([a], requires_grad=True)
    tb = torch.tensor([b], requires_grad=True)
    y = torch.exp(x * 3 * ta + x * 3 / tb) * 2
    y.sum().backward()
    return ta.grad.numpy(), tb.grad.numpy()


def test_megengine_fwd_bwd_case_runs_the_body_once_and_matches_torch():
    m = Simple()
    gm = GradManager().attach(m.parameters())

    @partial_trace
    def fwd_only(a, b):
        return a * b + a / b

    def step(x):
        with gm:
            y = m(x * 3) * 2
            gm.backward(y)
        a, b = m.a.grad, m.b.grad
        m.a.grad = m.b.grad = None
        return fwd_only(a, b) + a + b, a, b

    first, a0, b0 = step(mge.tensor(1.0))
    ga, gb = _torch_grads(1.0, 2.0, 1.0)
    np.testing.assert_allclose(a0.numpy(), ga, rtol=1e-6)
    np.testing.assert_allclose(b0.numpy(), gb, rtol=1e-6)
    for _ in range(3):
        out, a, b = step(mge.tensor(1.0))
        np.testing.assert_array_equal(out.numpy(), first.numpy())
        np.testing.assert_array_equal(a.numpy(), a0.numpy())
    assert m.body_runs == 1  # later calls replay the recorded ops


def test_parameters_are_read_live_while_training():
    m = Simple()
    gm = GradManager().attach(m.parameters())
    opt = optim.SGD(m.parameters(), lr=0.01)
    x = mge.tensor(np.array([0.5, -1.0], np.float32))
    for _ in range(3):
        with gm:
            loss = F.sum(m(x))
            gm.backward(loss)
        opt.step().clear_grad()
    ta = torch.tensor([1.0], requires_grad=True)
    tb = torch.tensor([2.0], requires_grad=True)
    topt = torch.optim.SGD([ta, tb], lr=0.01)
    tx = torch.tensor([0.5, -1.0])
    for _ in range(3):
        topt.zero_grad()
        torch.exp(tx * ta + tx / tb).sum().backward()
        topt.step()
    np.testing.assert_allclose(m.a.numpy(), ta.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(m.b.numpy(), tb.detach().numpy(), rtol=1e-5)
    assert m.body_runs == 1


def test_a_new_input_signature_is_traced_again():
    m = Simple()
    m(mge.tensor(np.ones(2, np.float32)))
    out = m(mge.tensor(np.ones((2, 2), np.float32)))
    assert out.shape == (2, 2) and m.body_runs == 2
    np.testing.assert_allclose(out.numpy(), np.full((2, 2), np.exp(1.5), np.float32), rtol=1e-6)


def test_structured_outputs_and_options():
    @partial_trace
    def pair(x, y):
        return {"sum": x + y, "prod": [x * y]}

    x, y = mge.tensor([1.0, 2.0]), mge.tensor([3.0, 4.0])
    pair(x, y)
    out = pair(y, x)
    np.testing.assert_array_equal(out["sum"].numpy(), [4.0, 6.0])
    np.testing.assert_array_equal(out["prod"][0].numpy(), [3.0, 8.0])
    with pytest.raises(TraceError, match="without_host"):
        partial_trace(without_host=False)
    with pytest.raises(TraceError, match="backend"):
        partial_trace(backend="xla")
    with pytest.raises(TypeError, match="unknown trace option"):
        partial_trace(nope=1)
