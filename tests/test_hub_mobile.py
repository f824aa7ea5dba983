"""MobileNetV2 and ShuffleNetV2 in the hub: MegEngine's module trees and parameter names, the
published parameter count of MobileNetV2 (torchvision's, which MegEngine's model ports), and eager
inference on small inputs. Compiled versions are checked in ``tests/test_compile.py``."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as xm
from compiler.hub.mobilenet_v2 import InvertedResidual, mobilenet_v2
from compiler.hub.shufflenet_v2 import ShuffleNetV2, ShuffleV2Block, shufflenet_v2_x1_0


def _count(net) -> int:  # type: ignore[no-untyped-def]
    return sum(int(np.prod(p.shape)) for p in net.parameters())


def test_mobilenet_v2_structure() -> None:
    net = mobilenet_v2()
    assert _count(net) == 3_504_872  # MobileNetV2 1.0 (Sandler et al.; torchvision)
    keys = set(net.state_dict())
    for k in ("features.0.0.weight", "features.1.conv.0.0.weight", "features.2.conv.1.1.running_var",
              "features.18.0.weight", "classifier.1.weight", "classifier.1.bias"):  # fmt: skip
        assert k in keys, k
    blocks = [m for m in net.modules() if isinstance(m, InvertedResidual)]
    assert len(blocks) == 17 and sum(b.use_res_connect for b in blocks) == 10
    net.eval()
    y = net(xm.tensor(np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)))
    assert y.shape == (1, 1000)


def test_shufflenet_v2_structure() -> None:
    net = shufflenet_v2_x1_0(num_classes=10)
    keys = set(net.state_dict())
    for k in ("first_conv.0.weight", "features.0.branch_proj.0.weight", "features.1.branch_main.3.weight",
              "conv_last.0.weight", "classifier.0.weight"):  # fmt: skip
        assert k in keys, k
    assert "classifier.0.bias" not in keys  # MegEngine's classifier has no bias
    blocks = [m for m in net.modules() if isinstance(m, ShuffleV2Block)]
    assert [b.stride for b in blocks].count(2) == 3 and len(blocks) == 16
    net.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32)
    assert net(xm.tensor(x)).shape == (2, 10)
    # channel shuffle: the even channels go one way, the odd ones the other
    t = xm.tensor(np.arange(2 * 6 * 1 * 1, dtype=np.float32).reshape(2, 6, 1, 1))
    a, b = ShuffleV2Block.channel_shuffle(t)
    np.testing.assert_array_equal(a.numpy().reshape(2, 3), [[0, 2, 4], [6, 8, 10]])
    np.testing.assert_array_equal(b.numpy().reshape(2, 3), [[1, 3, 5], [7, 9, 11]])


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="model_size"):
        ShuffleNetV2(model_size="3.0x")
    with pytest.raises(ValueError, match="stride"):
        InvertedResidual(8, 8, 3, 6)
