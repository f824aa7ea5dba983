"""F.nn.instance_norm checked against values recorded from real MegEngine 1.13 (issue 32); the input
is regenerated from a fixed numpy seed, so the test needs no MegEngine."""

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
from compiler.core import OpError

_PLAIN_SAMPLE0 = [
    [[0.5905, -1.3359], [-0.5187, 1.264]],
    [[1.3397, -1.2973], [0.4893, -0.5317]],
    [[-0.9773, -0.111], [-0.5604, 1.6487]],
]
_AFFINE_SAMPLE1 = [
    [[1.4983, -1.2706], [0.1247, -0.3525]],
    [[3.5379, -0.4114], [0.7931, -1.9196]],
    [[-3.6343, 3.4128], [3.8762, 0.3453]],
]


def _x() -> mge.Tensor:
    return mge.tensor(np.random.RandomState(0).randn(2, 3, 2, 2).astype("float32"))


def test_instance_norm_matches_megengine() -> None:
    out = F.nn.instance_norm(_x(), False)
    assert out.shape == (2, 3, 2, 2) and out.dtype == np.float32
    np.testing.assert_allclose(out.numpy()[0], _PLAIN_SAMPLE0, atol=1e-4)


def test_instance_norm_affine_matches_megengine() -> None:
    w = mge.tensor(np.array([1.0, 2.0, 3.0], "float32"))
    b = mge.tensor(np.array([0.0, 0.5, 1.0], "float32"))
    out = F.nn.instance_norm(_x(), True, w, b)
    np.testing.assert_allclose(out.numpy()[1], _AFFINE_SAMPLE1, atol=1e-4)


def test_instance_norm_affine_needs_weight_and_bias() -> None:
    with pytest.raises(OpError, match="instance_norm"):
        F.nn.instance_norm(_x(), True)
