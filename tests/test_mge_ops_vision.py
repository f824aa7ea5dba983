"""conv3d / M.Conv3d and F.vision's warp_perspective, roi_align, roi_pooling, nms and correlation:
against torch where torch has the op, against straightforward numpy written from MegEngine's
documented definitions where it does not (torchvision is not a dependency), against the outputs
MegEngine's own docstrings print, with gradients checked by finite differences; the C kernels
against the reference interpreter; the .mge rows written and read back."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
import compiler.module as M
from compiler import Tensor
from dialects.errors import XmgeError


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randn(*shape).astype("float32")


def check_grad(fn: Callable[..., Tensor], arrays: list[np.ndarray], wrt: int, picks: int = 10,
               eps: float = 1e-3, tol: float = 2e-2, seed: int = 0) -> None:  # fmt: skip
    """xmge's gradient of sum(fn(*arrays) * g) w.r.t. arrays[wrt] (a random g) against central
    differences at ``picks`` random elements, within ``tol`` of the gradient's largest magnitude."""
    rng = np.random.RandomState(seed)
    out_shape = fn(*[mge.tensor(a) for a in arrays]).shape
    g = rng.randn(*out_shape)
    params = [mge.Parameter(a) if i == wrt else mge.tensor(a) for i, a in enumerate(arrays)]
    gm = mge.autodiff.GradManager().attach([params[wrt]])
    with gm:
        gm.backward((fn(*params) * mge.tensor(g.astype("float32"))).sum())
    analytic = params[wrt].grad.numpy()
    scale = max(1.0, float(np.abs(analytic).max()))
    base = arrays[wrt]
    for _ in range(picks):
        pos = tuple(int(rng.randint(s)) for s in base.shape)
        sums = []
        for sign in (1, -1):
            a = base.copy()
            a[pos] += sign * eps
            args = [mge.tensor(a if i == wrt else x) for i, x in enumerate(arrays)]
            sums.append(float((fn(*args).numpy().astype(np.float64) * g).sum()))
        numeric = (sums[0] - sums[1]) / (2 * eps)
        assert abs(numeric - analytic[pos]) <= tol * scale, (pos, numeric, analytic[pos])


# ----------------------------------------------------------------------------------------------
# conv3d


@pytest.mark.parametrize(
    "stride,padding,dilation,groups",
    [(1, 0, 1, 1), ((1, 2, 1), (1, 0, 2), (2, 1, 1), 2), (2, 1, 1, 3)],
)
def test_conv3d_matches_torch(stride: object, padding: object, dilation: object, groups: int) -> None:
    x, w, b = _data(2, 6, 5, 6, 7), _data(6, 6 // groups, 3, 2, 3, seed=1), _data(6, seed=2)
    y = F.conv3d(mge.tensor(x), mge.tensor(w), mge.tensor(b), stride, padding, dilation, groups)
    t = torch.nn.functional.conv3d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride, padding,
                                   dilation, groups)  # fmt: skip
    assert y.shape == tuple(t.shape)
    np.testing.assert_allclose(y.numpy(), t.numpy(), rtol=1e-5, atol=1e-5)


def test_conv3d_gradients_match_torch() -> None:
    x, w = _data(2, 4, 4, 5, 5), _data(4, 2, 2, 3, 2, seed=1)
    px, pw = mge.Parameter(x), mge.Parameter(w)
    gm = mge.autodiff.GradManager().attach([px, pw])
    with gm:
        y = F.conv3d(px, pw, stride=(1, 2, 1), padding=1, dilation=(1, 1, 2), groups=2)
        gm.backward((y * y).sum())
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv3d(tx, tw, None, (1, 2, 1), 1, (1, 1, 2), 2)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(px.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv3d_module_shapes_and_errors() -> None:
    m = M.Conv3d(4, 6, (1, 3, 3), padding=(0, 1, 1), groups=2)
    assert m.weight.shape == (2, 3, 2, 1, 3, 3) and m.bias.shape == (1, 6, 1, 1, 1)
    y = m(mge.tensor(_data(1, 4, 3, 5, 5)))
    assert y.shape == (1, 6, 3, 5, 5)
    m2 = M.Conv3d(3, 2, 2, bias=False)
    assert m2.weight.shape == (2, 3, 2, 2, 2) and m2.bias is None
    with pytest.raises(XmgeError, match="conv3d"):
        F.conv3d(mge.tensor(_data(1, 3, 4, 4)), mge.tensor(_data(2, 3, 1, 1, 1)))
    with pytest.raises(XmgeError, match="channels"):
        F.conv3d(mge.tensor(_data(1, 3, 4, 4, 4)), mge.tensor(_data(2, 2, 1, 1, 1)))
    with pytest.raises(XmgeError, match="Conv3d"):
        M.Conv3d(3, 4, 3, groups=2)
