"""Loss functions checked against values recorded from real MegEngine 1.13 (issue 32); the inputs
are regenerated from a fixed numpy seed, so the test needs no MegEngine."""

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
from compiler.core import OpError


def _inputs() -> tuple[mge.Tensor, mge.Tensor]:
    rng = np.random.RandomState(0)
    rng.randn(3, 4)
    rng.randn(2, 3, 4)
    pred = rng.randn(3, 4).astype("float32")
    rng.rand(3, 4)
    label = np.sign(rng.randn(3, 4)).astype("float32")
    return mge.tensor(pred), mge.tensor(label)


@pytest.mark.parametrize(
    ("norm", "reduction", "expected"),
    [
        ("L1", "mean", 4.3178),
        ("L2", "mean", 8.6976),
        ("L1", "none", [4.9199, 2.9508, 5.0826]),
    ],
)
def test_hinge_loss_matches_megengine(norm: str, reduction: str, expected: object) -> None:
    pred, label = _inputs()
    out = F.nn.hinge_loss(pred, label, norm=norm, reduction=reduction)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-4)


def test_hinge_loss_rejects_unknown_norm() -> None:
    pred, label = _inputs()
    with pytest.raises(OpError, match="norm"):
        F.nn.hinge_loss(pred, label, norm="L3")
