"""M.SyncBatchNorm (a world of one process) and M.ConvTransposeBn2d / ConvTransposeBnRelu2d."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.module as M

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_sync_batch_norm_matches_torch_per_channel(shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    sbn = M.SyncBatchNorm(3)
    tbn = torch.nn.BatchNorm1d(3) if len(shape) < 4 else torch.nn.BatchNorm2d(3)
    tbn.momentum = 0.1  # MegEngine's momentum 0.9 keeps 90 % of the running statistics
    for _ in range(2):
        y = sbn(mge.tensor(x)).numpy()
        ty = tbn(torch.tensor(x)).detach().numpy()
        np.testing.assert_allclose(y, ty, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        sbn.running_mean.numpy().ravel(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(sbn.running_var.numpy().ravel(), tbn.running_var.numpy(), rtol=1e-5)
    sbn.eval()
    tbn.eval()
    np.testing.assert_allclose(
        sbn(mge.tensor(x)).numpy(), tbn(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5
    )


def test_sync_batch_norm_rejects_bad_ndim() -> None:
    with pytest.raises(ValueError, match="expected 2D, 3D or 4D input"):
        M.SyncBatchNorm(3)(mge.tensor(np.zeros((1, 3, 1, 1, 1), np.float32)))


@pytest.mark.parametrize("relu", [False, True])
def test_conv_transpose_bn_matches_torch(relu: bool) -> None:
    cls = M.ConvTransposeBnRelu2d if relu else M.ConvTransposeBn2d
    m = cls(3, 4, 3, stride=2, padding=1, output_padding=1)
    x = RNG.standard_normal((2, 3, 5, 5)).astype(np.float32)
    tconv = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
    with torch.no_grad():
        tconv.weight.copy_(torch.tensor(m.conv_transpose2d.weight.numpy()))
        tconv.bias.copy_(torch.tensor(m.conv_transpose2d.bias.numpy().ravel()))
    tbn = torch.nn.BatchNorm2d(4)
    want = tbn(tconv(torch.tensor(x)))
    if relu:
        want = torch.relu(want)
    got = m(mge.tensor(x)).numpy()
    assert got.shape == (2, 4, 10, 10)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-4, atol=1e-4)
