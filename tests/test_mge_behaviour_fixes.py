"""MegEngine behaviours: frozen BatchNorm keeps its affine parameters and statistics,
``track_running_stats`` switched off after construction stops updating the statistics, GradManager
holds attached tensors weakly and refuses integer tensors, op errors are RuntimeErrors as MegEngine's."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.autodiff as ad
import compiler.functional as F
import compiler.module as M
import compiler.optimizer as optim

X = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)


def test_frozen_batchnorm_trains_nothing_and_uses_running_stats() -> None:
    bn = M.BatchNorm2d(3, freeze=True)
    bn.running_mean._reset(np.array([0.1, -0.2, 0.3], np.float32).reshape(1, 3, 1, 1))
    bn.running_var._reset(np.array([1.5, 0.5, 2.0], np.float32).reshape(1, 3, 1, 1))
    gm = ad.GradManager().attach(bn.parameters())
    opt = optim.SGD(bn.parameters(), lr=1.0)
    with gm:
        y = bn(mge.tensor(X))
        gm.backward(F.sum(y))
    opt.step()
    assert bn.weight.numpy().ravel().tolist() == [1, 1, 1]
    assert bn.bias.numpy().ravel().tolist() == [0, 0, 0]
    assert bn.running_mean.numpy().ravel().tolist() == pytest.approx([0.1, -0.2, 0.3])
    ref = torch.nn.functional.batch_norm(
        torch.tensor(X),
        torch.tensor([0.1, -0.2, 0.3]),
        torch.tensor([1.5, 0.5, 2.0]),
        training=False,
        eps=1e-5,
    )
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(AssertionError, match="track_running_stats must be initilized to True"):
        M.BatchNorm2d(3, freeze=True, track_running_stats=False)


def test_track_running_stats_switched_off_later() -> None:
    bn = M.BatchNorm2d(3)
    bn.track_running_stats = False
    y = bn(mge.tensor(X))
    assert bn.running_mean.numpy().ravel().tolist() == [0, 0, 0]
    assert bn.running_var.numpy().ravel().tolist() == [1, 1, 1]
    ref = torch.nn.functional.batch_norm(torch.tensor(X), None, None, training=True, eps=1e-5)
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    off = M.BatchNorm2d(3, track_running_stats=False)
    off.track_running_stats = True
    with pytest.raises(AssertionError, match="can not be initilized to False and changed to True later"):
        off(mge.tensor(X))
    bn.track_running_stats = True
    bn(mge.tensor(X))
    assert bn.running_mean.numpy().ravel().tolist() != [0, 0, 0]
    bn.reset_running_stats()
    assert bn.running_mean.numpy().ravel().tolist() == [0, 0, 0]


def test_grad_manager_holds_attached_tensors_weakly() -> None:
    gm = ad.GradManager()
    x = mge.tensor([1.0, 2.0])
    with gm:
        gm.attach(x)
        gm.backward(F.sum(x * x))
    assert x.grad.numpy().tolist() == [2.0, 4.0]
    assert gm.attached_tensors() == [x]
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None and gm.attached_tensors() == []


def test_grad_manager_refuses_integer_tensors() -> None:
    with pytest.raises(AssertionError, match="Only tensors of floating point dtype can be attached"):
        ad.GradManager().attach([mge.tensor([1, 2], dtype="int32")])


def test_op_errors_are_runtime_errors() -> None:
    with pytest.raises(RuntimeError, match="out of range"):
        F.sum(mge.tensor([[1.0]]), axis=-3)
    with pytest.raises(ValueError):
        F.reshape(mge.tensor([1.0, 2.0]), (3,))


def test_trace_dump_returns_megengines_namedtuple() -> None:
    import io

    from compiler import jit

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: mge.Tensor) -> mge.Tensor:
        return F.relu(x) * 2

    f(mge.tensor(np.ones((2, 3), np.float32)))
    result = f.dump(io.BytesIO(), arg_names=["data"])
    assert isinstance(result, tuple) and len(result) == 7
    assert result[4] == ["data"] and result.inputs == ["data"]
    nr_opr, tot_bytes, value_bytes, content_hash, inputs, outputs, params = result
    assert nr_opr == result.nr_opr > 0 and tot_bytes > 0 and len(outputs) == 1
