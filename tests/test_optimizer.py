"""Optimizers: updates against torch.optim, MegEngine's state_dict layout, exact save/restore."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np
import pytest
import torch

import compiler as xm
from compiler.hub.convnet import ConvNet
from compiler.optimizer import SGD, Adam, AdamW, Optimizer
from tests.conftest import data_path

SHAPES = [(3, 4), (5,), (2, 1, 3)]


def _params(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _grads(step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _run_xmge(make: Callable[[list[xm.Parameter]], Optimizer], steps: int) -> list[np.ndarray]:
    params = [xm.Parameter(a) for a in _params()]
    opt = make(params)
    for k in range(steps):
        for p, g in zip(params, _grads(k), strict=True):
            p.grad = xm.tensor(g)
        opt.step().clear_grad()
        assert all(p.grad is None for p in params)
    return [p.numpy() for p in params]


def _run_torch(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer], steps: int) -> list[np.ndarray]:
    params = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in _params()]
    opt = make(params)
    for k in range(steps):
        for p, g in zip(params, _grads(k), strict=True):
            p.grad = torch.tensor(g.astype(np.float64))
        opt.step()
    return [p.detach().numpy() for p in params]


@pytest.mark.parametrize(
    ("name", "ours", "theirs"),
    [
        ("sgd", lambda p: SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
        (
            "sgd_momentum_wd",
            lambda p: SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-2),
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-2),
        ),
        (
            "sgd_nesterov",
            lambda p: SGD(p, lr=0.05, momentum=0.8, nesterov=True),
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
        ),
        ("adam", lambda p: Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
        (
            "adam_wd_betas",
            lambda p: Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
            lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
        ),
        ("adamw", lambda p: AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01)),
        (
            "adamw_wd",
            lambda p: AdamW(p, lr=0.01, weight_decay=0.3),
            lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.3),
        ),
    ],
)
def test_updates_match_torch(name: str, ours: Callable, theirs: Callable) -> None:
    got = _run_xmge(ours, steps=6)
    want = _run_torch(theirs, steps=6)
    start = _params()
    for g, w, s in zip(got, want, start, strict=True):
        assert not np.allclose(g, s)  # the parameters did move
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_parameters_without_grad_are_left_alone() -> None:
    a, b = xm.Parameter(np.ones(2, np.float32)), xm.Parameter(np.ones(2, np.float32))
    opt = SGD([a, b], lr=0.5, momentum=0.9)
    a.grad = xm.tensor(np.ones(2, np.float32))
    opt.step()
    np.testing.assert_array_equal(a.numpy(), [0.5, 0.5])
    np.testing.assert_array_equal(b.numpy(), [1.0, 1.0])


def test_param_groups_override_defaults() -> None:
    a, b = xm.Parameter(np.ones(1, np.float32)), xm.Parameter(np.ones(1, np.float32))
    opt = SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    a.grad = b.grad = xm.tensor(np.ones(1, np.float32))
    opt.step()
    np.testing.assert_allclose([a.item(), b.item()], [0.9, 0.5])


def test_bad_arguments_are_rejected() -> None:
    p = xm.Parameter(np.ones(1, np.float32))
    with pytest.raises(TypeError, match="only optimize Parameters"):
        SGD([xm.tensor([1.0])], lr=0.1)
    with pytest.raises(TypeError, match="not a set"):
        SGD([{"params": {p}}], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        Adam([p], lr=-1)
    with pytest.raises(ValueError, match="nesterov"):
        SGD([p], lr=0.1, nesterov=True)


def test_state_dict_layout_is_megengines() -> None:
    net = ConvNet()
    opt = SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    sd = opt.state_dict()
    assert sd["param_groups"] == [
        {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4, "params": list(range(8))}
    ]
    assert sorted(sd["state"]) == list(range(8))
    assert all(
        set(s) == {"momentum_buffer"} and isinstance(s["momentum_buffer"], np.ndarray)
        for s in sd["state"].values()
    )
    adam = Adam(net.parameters(), lr=1e-3).state_dict()
    assert set(adam["param_groups"][0]) == {"lr", "weight_decay", "betas", "eps", "params"}
    assert set(adam["state"][0]) == {"exp_avg", "exp_avg_sq", "step"}
    assert adam["state"][0]["step"].shape == () and adam["state"][0]["step"].dtype == np.float32
    assert SGD(net.parameters(), lr=0.1).state_dict()["state"] == {}  # no momentum, no buffers


def test_megengine_checkpoint_optimizer_state_loads() -> None:
    with open(data_path("convnet", "checkpoint.pkl"), "rb") as f:
        ckpt = pickle.load(f)
    net = ConvNet()
    opt = SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=0.0)
    opt.load_state_dict(ckpt["opt"])
    assert opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["weight_decay"] == 1e-4
    for i, p in enumerate(net.parameters()):
        np.testing.assert_array_equal(
            opt._state[p]["momentum_buffer"].numpy(), ckpt["opt"]["state"][i]["momentum_buffer"]
        )
    # and it writes the same layout back out
    again = opt.state_dict()
    assert again["param_groups"] == ckpt["opt"]["param_groups"]
    for i in range(8):
        np.testing.assert_array_equal(
            again["state"][i]["momentum_buffer"], ckpt["opt"]["state"][i]["momentum_buffer"]
        )


def test_load_state_dict_rejects_a_mismatch() -> None:
    net = ConvNet()
    sd = SGD(net.parameters(), lr=0.1, momentum=0.9).state_dict()
    with pytest.raises(ValueError, match="parameter group 0 has 2 parameters"):
        SGD(list(net.parameters())[:2], lr=0.1, momentum=0.9).load_state_dict(sd)
    with pytest.raises(ValueError, match="keys"):
        Adam(net.parameters(), lr=0.1).load_state_dict(sd)


@pytest.mark.parametrize(
    "make",
    [lambda p: SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3), lambda p: Adam(p, lr=0.01)],
    ids=["sgd", "adam"],
)
def test_restored_state_continues_bit_identically(make: Callable) -> None:
    """Steps 3..5 after pickling the state at step 3 equal steps 3..5 of an uninterrupted run."""
    full = _run_xmge(make, steps=6)
    params = [xm.Parameter(a) for a in _params()]
    opt = make(params)
    for k in range(3):
        for p, g in zip(params, _grads(k), strict=True):
            p.grad = xm.tensor(g)
        opt.step().clear_grad()
    blob = pickle.dumps({"params": [p.numpy() for p in params], "opt": opt.state_dict()})
    saved = xm.serialization.loads(blob)
    params2 = [xm.Parameter(a) for a in saved["params"]]
    opt2 = make(params2)
    opt2.load_state_dict(saved["opt"])
    for k in range(3, 6):
        for p, g in zip(params2, _grads(k), strict=True):
            p.grad = xm.tensor(g)
        opt2.step().clear_grad()
    for a, b in zip(full, params2, strict=True):
        assert np.array_equal(a, b.numpy())
