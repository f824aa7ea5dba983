"""The MegEngine API the model zoo needs, checked against PyTorch (CPU) and MegEngine's formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler import jit
from compiler.core import OpError

RNG = np.random.default_rng(7)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def traced_equals_eager(fn, *inputs: np.ndarray) -> np.ndarray:
    eager = fn(*[xm.tensor(x) for x in inputs]).numpy()
    traced = jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(x) for x in inputs])
    np.testing.assert_array_equal(traced(*[xm.tensor(x) for x in inputs]).numpy(), eager)  # replay
    return eager


@pytest.mark.parametrize("groups,affine", [(1, True), (4, True), (8, False)])
def test_group_norm_matches_torch(groups: int, affine: bool) -> None:
    x = randn(2, 8, 5, 3)
    gn = M.GroupNorm(groups, 8, eps=1e-5, affine=affine)
    if affine:
        M.init.normal_(gn.weight)
        M.init.normal_(gn.bias)
    y = traced_equals_eager(gn, x)
    w = torch.from_numpy(gn.weight.numpy()) if affine else None
    b = torch.from_numpy(gn.bias.numpy()) if affine else None
    ref = TF.group_norm(torch.from_numpy(x), groups, w, b, 1e-5).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert [k for k in gn.state_dict()] == (["bias", "weight"] if affine else [])


def test_group_norm_rejects_bad_groups() -> None:
    with pytest.raises(OpError, match="cannot be split into 3 groups"):
        M.GroupNorm(3, 8)
    with pytest.raises(OpError, match="expected 8 channels"):
        M.GroupNorm(2, 8)(xm.tensor(randn(1, 4, 2, 2)))


def test_embedding_matches_torch_and_traces() -> None:
    emb = M.Embedding(11, 6)
    ids = RNG.integers(0, 11, size=(3, 4)).astype(np.int32)
    y = traced_equals_eager(emb, ids)
    ref = TF.embedding(torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(emb.weight.numpy())).numpy()
    np.testing.assert_array_equal(y, ref)
    assert y.shape == (3, 4, 6)
    with pytest.raises(OpError, match=r"indices must be in \[0, 11\)"):
        emb(xm.tensor(np.array([11], np.int32)))
    pre = M.Embedding.from_pretrained(emb.weight.numpy())
    np.testing.assert_array_equal(pre(xm.tensor(ids)).numpy(), y)


def test_linear_compute_mode_and_bias() -> None:
    x, w, b = randn(2, 3, 5), randn(4, 5), randn(4)
    y = F.linear(xm.tensor(x), xm.tensor(w), xm.tensor(b), "float32").numpy()
    ref = TF.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(OpError, match="compute_mode"):
        F.linear(xm.tensor(x), xm.tensor(w), None, "half")


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_repeat_matches_numpy(axis: int | None) -> None:
    x = randn(2, 3, 4)
    y = traced_equals_eager(lambda t: F.repeat(t, 3, axis=axis), x)
    np.testing.assert_array_equal(y, np.repeat(x, 3, axis=axis))
    np.testing.assert_array_equal(y, torch.repeat_interleave(torch.from_numpy(x), 3, dim=axis).numpy())


def test_tile_matches_numpy() -> None:
    x = randn(2, 3)
    for reps in [(2,), (2, 1), (3, 2, 2)]:
        np.testing.assert_array_equal(F.tile(xm.tensor(x), reps).numpy(), np.tile(x, reps))


def test_one_hot_and_indexing_one_hot() -> None:
    idx = np.array([[0, 3], [2, 1]], np.int32)
    oh = F.one_hot(xm.tensor(idx), 4).numpy()
    np.testing.assert_array_equal(oh, TF.one_hot(torch.from_numpy(idx.astype(np.int64)), 4).numpy())
    assert oh.dtype == np.int32
    src = randn(2, 5, 3)
    pick = np.array([[4, 0, 2], [1, 1, 3]], np.int32)
    y = traced_equals_eager(lambda s, i: F.indexing_one_hot(s, i, axis=1), src, pick)
    ref = torch.gather(torch.from_numpy(src), 1, torch.from_numpy(pick.astype(np.int64))[:, None, :])
    np.testing.assert_array_equal(y, ref.numpy()[:, 0, :])


def test_conv1d_matches_torch() -> None:
    x = randn(2, 4, 9)
    conv = M.Conv1d(4, 6, 3, stride=2, padding=1, groups=2)
    y = traced_equals_eager(conv, x)
    w = torch.from_numpy(conv.weight.numpy())
    ref = TF.conv1d(torch.from_numpy(x), w, torch.from_numpy(conv.bias.numpy().reshape(-1)), 2, 1, 1, 2)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5)


def test_var_std_normalize() -> None:
    x = randn(3, 7)
    t = torch.from_numpy(x)
    np.testing.assert_allclose(F.var(xm.tensor(x), 1).numpy(), t.var(1, unbiased=False).numpy(), rtol=1e-5)
    np.testing.assert_allclose(F.std(xm.tensor(x)).numpy(), t.std(unbiased=False).numpy(), rtol=1e-5)
    np.testing.assert_allclose(
        F.normalize(xm.tensor(x), axis=1).numpy(), TF.normalize(t, dim=1).numpy(), rtol=1e-5, atol=1e-6
    )


def test_prelu_matches_torch() -> None:
    x = randn(2, 3, 4, 4)
    m = M.PReLU(3)
    M.init.uniform_(m.weight, 0.1, 0.5)
    ref = TF.prelu(torch.from_numpy(x), torch.from_numpy(m.weight.numpy().reshape(-1))).numpy()
    np.testing.assert_allclose(m(xm.tensor(x)).numpy(), ref, rtol=1e-6, atol=1e-6)


# -- module.init -----------------------------------------------------------------------------------


def test_fill_zeros_ones() -> None:
    p = xm.Parameter(np.zeros((2, 3), np.float32))
    M.init.fill_(p, 2.5)
    assert (p.numpy() == 2.5).all() and p.dtype == np.float32
    M.init.ones_(p)
    assert (p.numpy() == 1).all()
    M.init.zeros_(p)
    assert (p.numpy() == 0).all()


def test_fans_follow_megengine() -> None:
    fan = M.init.calculate_fan_in_and_fan_out
    assert fan(xm.tensor(np.zeros((10, 20), np.float32))) == (20, 10)
    assert fan(xm.tensor(np.zeros((8, 4, 3, 3), np.float32))) == (36, 72)
    assert fan(xm.tensor(np.zeros((2, 8, 4, 3, 3), np.float32))) == (36, 72)  # groups axis ignored
    with pytest.raises(ValueError, match="fewer than 2"):
        fan(xm.tensor(np.zeros((3,), np.float32)))
    assert M.init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert M.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))


@pytest.mark.parametrize(
    "init,expected_std",
    [
        (lambda p: M.init.normal_(p, 1.0, 0.5), 0.5),
        (lambda p: M.init.uniform_(p, -2.0, 2.0), 4 / math.sqrt(12)),
        (lambda p: M.init.xavier_uniform_(p), math.sqrt(2 / (64 * 9 + 32 * 9))),
        (lambda p: M.init.xavier_normal_(p), math.sqrt(2 / (64 * 9 + 32 * 9))),
        (lambda p: M.init.msra_normal_(p, mode="fan_out", nonlinearity="relu"), math.sqrt(2 / (64 * 9))),
        (lambda p: M.init.msra_uniform_(p), math.sqrt(2 / (1 + 0**2) / (32 * 9))),
    ],
)
def test_random_initialisers_have_the_documented_statistics(init, expected_std: float) -> None:
    p = xm.Parameter(np.zeros((64, 32, 3, 3), np.float32))
    init(p)
    values = p.numpy()
    assert values.std() == pytest.approx(expected_std, rel=0.03)
    # the same laws as torch.nn.init's counterparts
    t = torch.empty(64, 32, 3, 3)
    torch.nn.init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu")
    assert t.std().item() == pytest.approx(math.sqrt(2 / (64 * 9)), rel=0.03)


# -- tensors and config ------------------------------------------------------------------------------


def test_setitem_eager_with_masks_and_traced() -> None:
    t = xm.tensor(np.arange(6, dtype=np.float32))
    t[t > 3.0] = 0.0
    t[xm.tensor(np.array([0, 1], np.int32))] = 9.0
    np.testing.assert_array_equal(t.numpy(), [9, 9, 2, 3, 0, 0])

    @jit.trace(symbolic=True, capture_as_const=True)
    def assign(x: xm.Tensor) -> xm.Tensor:
        y = x * 2
        y[0] = 1.0
        return y

    np.testing.assert_array_equal(assign(xm.tensor(np.ones(3, np.float32))).numpy(), [1, 2, 2])


def test_arange_with_traced_stop_is_a_linspace() -> None:
    np.testing.assert_array_equal(F.arange(xm.tensor(4.0)).numpy(), np.arange(4, dtype=np.float32))

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(n: xm.Tensor) -> xm.Tensor:
        return F.arange(n)

    np.testing.assert_array_equal(f(xm.tensor(4.0)).numpy(), np.arange(4, dtype=np.float32))


def test_core_config_is_settable_like_megengine() -> None:
    from compiler.core import _config

    before = _config._get("compute_mode")
    _config.__compute_mode = "float32"  # what CLIP's model source does
    assert _config._get("compute_mode") == "float32"
    with _config._override(compute_mode="default"):
        assert _config._get("compute_mode") == "default"
    assert _config._get("compute_mode") == "float32"
    _config._set("compute_mode", before)
