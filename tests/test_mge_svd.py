"""``F.svd`` (MegEngine's SVD operator): values and gradients against what real MegEngine 1.13
computed (tests/data/mge_names/svd*.npz, tests/data/mge_names/record.py) and against torch, and its
``.mge`` row both ways (xmge reads MegEngine's dump; MegEngine's outputs on xmge's dump are stored).

A singular vector's sign is not unique and MegEngine's naive kernel and LAPACK choose differently,
so vectors are compared after aligning each pair's sign; gradients of sign-dependent losses are
compared with the loss weights flipped the same way (the loss is then the same function)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
from compiler.autodiff import GradManager
from compiler.core import OpError
from compiler.jit import trace
from compiler.lite import Network
from dialects.errors import XmgeError

HERE = os.path.join(os.path.dirname(__file__), "data", "mge_names")
DATA = dict(np.load(os.path.join(HERE, "svd.npz")))
CASES = ("tall", "wide", "square")


def _signs(u: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """+1/-1 per column pair that turns ``u``'s columns into ``ref``'s."""
    return np.sign(np.sum(u * ref, axis=-2))


def _grad(x: np.ndarray, loss) -> np.ndarray:  # type: ignore[no-untyped-def]
    t = mge.tensor(x)
    gm = GradManager().attach([t])
    with gm:
        gm.backward(loss(t))
    return t.grad.numpy()


@pytest.mark.parametrize("case", CASES)
def test_factors_match_megengine(case: str) -> None:
    x = DATA[case]
    u, s, vh = (t.numpy() for t in F.svd(mge.tensor(x)))
    k = min(x.shape[-2:])
    assert u.shape == (*x.shape[:-1], k) and s.shape == (*x.shape[:-2], k)
    assert vh.shape == (*x.shape[:-2], k, x.shape[-1])
    np.testing.assert_allclose(s, DATA[case + ":s"], rtol=1e-6, atol=1e-6)
    d = _signs(u, DATA[case + ":u"])
    np.testing.assert_allclose(u * d[..., None, :], DATA[case + ":u"], atol=2e-6)
    np.testing.assert_allclose(vh * d[..., :, None], DATA[case + ":vh"], atol=2e-6)
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, x, atol=1e-5)
    # xmge's sign convention: the largest-magnitude entry of each column of u is positive
    top = np.take_along_axis(u, np.argmax(np.abs(u), axis=-2)[..., None, :], axis=-2)
    assert (top > 0).all()


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_megengine(case: str) -> None:
    x = DATA[case]
    ramp = mge.tensor(np.arange(1, min(x.shape[-2:]) + 1, dtype=np.float32))
    g = _grad(x, lambda t: (F.svd(t)[1] * ramp).sum())
    np.testing.assert_allclose(g, DATA[case + ":grad_s"], rtol=1e-5, atol=2e-6)
    d = _signs(F.svd(mge.tensor(x))[0].numpy(), DATA[case + ":u"])
    wu = mge.tensor(DATA[case + ":wu"] * d[..., None, :])
    wv = mge.tensor(DATA[case + ":wv"] * d[..., :, None])

    def loss(t: mge.Tensor) -> mge.Tensor:
        u, s, vh = F.svd(t)
        return (u * wu).sum() + (vh * wv).sum() + s.sum()

    want = DATA[case + ":grad_all"]
    np.testing.assert_allclose(_grad(x, loss), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 6), (4, 4)])
def test_against_torch(shape: tuple[int, ...]) -> None:
    x = np.random.RandomState(11).randn(*shape).astype(np.float32)
    u, s, vh = (t.numpy() for t in F.svd(mge.tensor(x)))
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    tu, ts, tvh = torch.linalg.svd(tx, full_matrices=False)
    np.testing.assert_allclose(s, ts.detach().numpy(), rtol=1e-5, atol=1e-6)
    d = _signs(u, tu.detach().numpy())
    np.testing.assert_allclose(u * d[..., None, :], tu.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(vh * d[..., :, None], tvh.detach().numpy(), atol=1e-5)
    rng = np.random.RandomState(12)
    wu, wv = rng.randn(*u.shape), rng.randn(*vh.shape)
    ((tu * torch.tensor(wu)).sum() + (tvh * torch.tensor(wv)).sum() + (ts * ts).sum()).backward()
    wu_x = mge.tensor((wu * d[..., None, :]).astype(np.float32))
    wv_x = mge.tensor((wv * d[..., :, None]).astype(np.float32))

    def loss(t: mge.Tensor) -> mge.Tensor:
        uu, ss, vv = F.svd(t)
        return (uu * wu_x).sum() + (vv * wv_x).sum() + (ss * ss).sum()

    want = tx.grad.numpy()
    np.testing.assert_allclose(_grad(x, loss), want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def test_full_matrices_and_compute_uv() -> None:
    x = np.random.RandomState(2).randn(2, 5, 3).astype(np.float32)
    u, s, vh = (t.numpy() for t in F.svd(mge.tensor(x), full_matrices=True))
    assert u.shape == (2, 5, 5) and s.shape == (2, 3) and vh.shape == (2, 3, 3)
    np.testing.assert_allclose(u @ np.swapaxes(u, -1, -2), np.broadcast_to(np.eye(5), (2, 5, 5)), atol=1e-5)
    np.testing.assert_allclose((u[..., :3] * s[..., None, :]) @ vh, x, atol=1e-5)
    only_s = F.svd(mge.tensor(x), compute_uv=False)
    assert isinstance(only_s, mge.Tensor)
    np.testing.assert_allclose(only_s.numpy(), np.linalg.svd(x, compute_uv=False), rtol=1e-5)
    t = mge.tensor(x)
    gm = GradManager().attach([t])
    with pytest.raises(XmgeError, match="full_matrices=True"), gm:
        gm.backward(F.svd(t, full_matrices=True)[0].sum())


def test_non_finite_matrices_get_nan_factors_without_hanging() -> None:
    """LAPACK loops forever on an infinite entry and MegEngine 1.13's naive SVD on a NaN one; xmge
    gives such a matrix NaN factors and the others of the batch their SVD."""
    x = np.random.RandomState(3).randn(3, 4, 3).astype(np.float32)
    x[0, 1, 1], x[2, 0, 0] = np.inf, np.nan
    u, s, vh = (t.numpy() for t in F.svd(mge.tensor(x)))
    assert np.isnan(s[[0, 2]]).all() and np.isnan(u[[0, 2]]).all() and np.isnan(vh[[0, 2]]).all()
    np.testing.assert_allclose(s[1], np.linalg.svd(x[1], compute_uv=False), rtol=1e-5)


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(OpError, match=r"svd: .*\(\.\.\., M, N\)"):
        F.svd(mge.tensor(np.ones(3, np.float32)))
    with pytest.raises(OpError, match="float32"):
        F.svd(mge.tensor(np.ones((2, 3), np.int32)))


def test_reads_megengines_svd_dump() -> None:
    want = dict(np.load(os.path.join(HERE, "svd_dump.npz")))
    got = Network(os.path.join(HERE, "svd.mge"))(data=want["data"])
    np.testing.assert_allclose(got["s"], want["s"], rtol=1e-6, atol=1e-6)
    d = _signs(got["u"], want["u"])
    np.testing.assert_allclose(got["u"] * d[..., None, :], want["u"], atol=2e-6)
    np.testing.assert_allclose(got["vh"] * d[..., :, None], want["vh"], atol=2e-6)


def test_xmge_dump_gives_what_megengine_computed(tmp_path: str) -> None:
    """MegEngine's Lite runtime ran this dump (made the same way) when the data was recorded."""

    @trace(symbolic=True, capture_as_const=True)
    def fwd(data: mge.Tensor) -> tuple[mge.Tensor, mge.Tensor, mge.Tensor]:
        u, s, vh = F.svd(data)
        return u, s, vh

    x = np.random.RandomState(7).randn(3, 5, 4).astype(np.float32)
    fwd(mge.tensor(x))
    path = os.path.join(tmp_path, "svd.mge")
    fwd.dump(path, arg_names=["data"], output_names=["u", "s", "vh"])
    got = Network(path)(data=x)
    want = dict(np.load(os.path.join(HERE, "svd_xmge_dump_by_mge.npz")))
    np.testing.assert_allclose(got["s"], want["s"], rtol=1e-6, atol=1e-6)
    d = _signs(got["u"], want["u"])
    np.testing.assert_allclose(got["u"] * d[..., None, :], want["u"], atol=3e-6)
    np.testing.assert_allclose(got["vh"] * d[..., :, None], want["vh"], atol=3e-6)
