"""compiler.random: seeding makes dropout and weight init reproducible; state round-trips."""

from __future__ import annotations

import numpy as np

import compiler as xm
import compiler.functional as F
import compiler.module as M


def test_seed_makes_init_and_dropout_reproducible() -> None:
    x = xm.tensor(np.ones((4, 8), np.float32))
    xm.random.seed(7)
    w1 = M.Linear(8, 3).weight.numpy()
    d1 = F.dropout(x, 0.5).numpy()
    xm.random.seed(7)
    w2 = M.Linear(8, 3).weight.numpy()
    d2 = F.dropout(x, 0.5).numpy()
    assert np.array_equal(w1, w2) and np.array_equal(d1, d2)
    assert not np.array_equal(d1, F.dropout(x, 0.5).numpy())


def test_state_round_trip_resumes_the_same_stream() -> None:
    xm.random.seed(3)
    state = xm.random.get_state()
    a = xm.random.normal(size=(5,)).numpy()
    xm.random.set_state(state)
    b = xm.random.normal(size=(5,)).numpy()
    assert np.array_equal(a, b)


def test_setitem_under_grad_manager_and_under_trace() -> None:
    import pytest

    from compiler import jit
    from compiler.autodiff import GradManager
    from compiler.core import OpError

    p = xm.Parameter(np.ones((3,), np.float32))
    gm = GradManager().attach([p])
    other = xm.tensor(np.zeros((3,), np.float32))
    with gm:
        other[1] = 5.0
        loss = F.sum(p * other)
        gm.backward(loss)
    assert other.numpy()[1] == 5.0
    assert np.array_equal(p.grad.numpy(), [0.0, 5.0, 0.0])

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(a):
        a[0] = 1.0
        return a

    assert np.array_equal(f(xm.tensor(np.zeros((2,), np.float32))).numpy(), [1.0, 0.0])

    @jit.trace(symbolic=True, capture_as_const=True)
    def g(a):
        a[0] = xm.tensor(np.ones((3,), np.float32))  # three values for one element
        return a

    with pytest.raises(OpError, match="setitem: cannot assign"):
        g(xm.tensor(np.zeros((2,), np.float32)))
