"""Adagrad, Adadelta and LAMB with MegEngine's update rules (Adagrad/Adadelta against torch's, which
compute the same formulas; LAMB against a float64 transcription of MegEngine's LAMBUpdate), the
MultiStepLR scheduler and gradient clipping."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.autodiff as ad
import compiler.functional as F
import compiler.module as M
import compiler.optimizer as optim

X = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
W0 = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
B0 = np.random.default_rng(5).standard_normal((2,)).astype(np.float32)


def _train_ours(make: Any, steps: int) -> list[np.ndarray]:
    net = M.Linear(4, 2)
    net.weight._reset(W0.copy())
    net.bias._reset(B0.copy())
    opt = make(net.parameters())
    gm = ad.GradManager().attach(net.parameters())
    for _ in range(steps):
        with gm:
            gm.backward(F.sum(net(mge.tensor(X)) ** 2) / 8)
        opt.step().clear_grad()
    return [net.weight.numpy(), net.bias.numpy()]


def _train_torch(make: Any, steps: int) -> list[np.ndarray]:
    w = torch.tensor(W0.copy(), requires_grad=True)
    b = torch.tensor(B0.copy(), requires_grad=True)
    opt = make([w, b])
    for _ in range(steps):
        opt.zero_grad()
        ((torch.tensor(X) @ w.T + b) ** 2).sum().div(8).backward()
        opt.step()
    return [w.detach().numpy(), b.detach().numpy()]


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda p: optim.Adagrad(p, lr=0.1), lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-10)),
        (
            lambda p: optim.Adagrad(p, lr=0.1, lr_decay=0.05, weight_decay=0.01),
            lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.05, weight_decay=0.01, eps=1e-10),
        ),
        (
            lambda p: optim.Adadelta(p, lr=1.0, rho=0.9),
            lambda p: torch.optim.Adadelta(p, lr=1.0, rho=0.9, eps=1e-6),
        ),
        (
            lambda p: optim.Adadelta(p, lr=0.5, rho=0.8, weight_decay=0.01),
            lambda p: torch.optim.Adadelta(p, lr=0.5, rho=0.8, eps=1e-6, weight_decay=0.01),
        ),
    ],
    ids=["adagrad", "adagrad-decay-wd", "adadelta", "adadelta-wd"],
)
def test_adagrad_adadelta_match_torch(ours: Any, theirs: Any) -> None:
    for got, want in zip(_train_ours(ours, 5), _train_torch(theirs, 5), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _lamb_reference(
    steps: int, lr: float, wd: float, betas: tuple[float, float], eps: float
) -> list[np.ndarray]:
    params = [W0.astype(np.float64), B0.astype(np.float64)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    x = X.astype(np.float64)
    for t in range(1, steps + 1):
        w, b = params
        y = x @ w.T + b
        gy = 2 * y / 8
        grads = [gy.T @ x, gy.sum(0)]
        for i, g in enumerate(grads):
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            r = (m[i] / (1 - betas[0] ** t)) / (np.sqrt(v[i] / (1 - betas[1] ** t)) + eps) + wd * params[i]
            pn, rn = np.linalg.norm(params[i]), np.linalg.norm(r)
            ratio = pn / rn if wd > 0 and pn > 0 and rn > 0 else 1.0
            params[i] = params[i] - lr * ratio * r
    return params


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_lamb_matches_the_update_rule(wd: float) -> None:
    got = _train_ours(lambda p: optim.LAMB(p, lr=0.01, weight_decay=wd), 4)
    want = _lamb_reference(4, 0.01, wd, (0.9, 0.999), 1e-8)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_optimizer_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="invalid learning rate decay: -1"):
        optim.Adagrad([mge.Parameter([1.0])], lr_decay=-1)
    with pytest.raises(ValueError, match="Invalid rho value"):
        optim.Adadelta([mge.Parameter([1.0])], rho=1.5)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        optim.LAMB([mge.Parameter([1.0])], lr=0.1, betas=(0.9, 1.0))


def test_multistep_lr() -> None:
    p = mge.Parameter([1.0])
    opt = optim.SGD([p], lr=1.0)
    sched = optim.MultiStepLR(opt, milestones=[2, 4], gamma=0.5)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    state = sched.state_dict()
    assert state == {"milestones": [2, 4], "gamma": 0.5, "current_epoch": 6}
    with pytest.raises(ValueError, match="increasing integers"):
        optim.MultiStepLR(opt, milestones=[3, 1])
    with pytest.raises(TypeError, match="should be Optimizer"):
        optim.MultiStepLR(object(), milestones=[1])  # type: ignore[arg-type]


def test_clip_grad() -> None:
    a, b = mge.Parameter([3.0, 0.0]), mge.Parameter([4.0])
    gm = ad.GradManager().attach([a, b])
    with gm:
        gm.backward(F.sum(a * mge.tensor([3.0, 0.0])) + F.sum(b * 4.0))
    total = optim.clip_grad_norm([a, b], max_norm=1.0)
    assert abs(float(total.numpy()) - 5.0) < 1e-5
    np.testing.assert_allclose(a.grad.numpy(), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [0.8], rtol=1e-5)
    optim.clip_grad_value([a, b], lower=-0.5, upper=0.7)
    np.testing.assert_allclose(b.grad.numpy(), [0.7], rtol=1e-6)
    assert float(optim.clip_grad_norm([mge.Parameter([1.0])], 1.0).numpy()) == 0.0
