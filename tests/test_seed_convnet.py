"""The seed ConvNet runs with `megengine` replaced by `compiler` and matches MegEngine's output."""

from __future__ import annotations

import numpy as np

import compiler as xm
from compiler import jit
from compiler.hub.convnet import ConvNet
from tests.conftest import data_path


def _golden_net() -> ConvNet:
    net = ConvNet()
    weights = np.load(data_path("convnet", "weights.npz"))
    net.load_state_dict({k: weights[k] for k in weights})
    return net.eval()  # type: ignore[return-value]


def test_eager_matches_megengine() -> None:
    net = _golden_net()
    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    expected = np.load(data_path("convnet", "expected_plain.npz"))["fc2.ADD"]
    out = net(xm.tensor(x)).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_trace_replay_matches_eager_exactly() -> None:
    net = _golden_net()
    x = xm.tensor(np.load(data_path("convnet", "inputs.npz"))["data"])

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data, *, net):
        return net(data)

    eager = net(x).numpy()
    infer(x, net=net)
    replay = infer(x, net=net).numpy()
    assert np.array_equal(replay, eager)
    text = infer.ir()
    assert text.count("mgb.convolution") == 2 and text.count("mgb.matrix_mul") == 2
    assert 'name = "conv1.weight"' in text
