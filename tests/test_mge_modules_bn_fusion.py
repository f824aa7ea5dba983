"""utils.bn_fusion and module.linear_bn: fusing a layer with its batch norm keeps the outputs."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
import compiler.module as M
from compiler.utils.bn_fusion import FusionError, fuse_conv_bn_relu_module, fuse_linear_bn_relu_module

RNG = np.random.default_rng(0)


def _randomize(bn) -> None:  # type: ignore[no-untyped-def]
    shape = bn.running_mean.shape
    bn.running_mean._reset(RNG.random(shape).astype(np.float32))
    bn.running_var._reset(RNG.random(shape).astype(np.float32) + 0.5)
    bn.weight._reset(RNG.random(shape).astype(np.float32) + 0.5)
    bn.bias._reset(RNG.random(shape).astype(np.float32))


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("groups", [1, 2])
def test_conv_bn_relu_fusion(training: bool, relu: bool, groups: int) -> None:
    conv, bn, act = M.Conv2d(4, 6, 3, padding=1, groups=groups), M.BatchNorm2d(6), M.ReLU() if relu else None
    _randomize(bn)
    for m in (conv, bn):
        m.train(training)
    x = mge.tensor(RNG.standard_normal((2, 4, 5, 5)).astype(np.float32))
    ref = bn(conv(x))
    ref = act(ref) if act is not None else ref
    _randomize(bn)  # training mode moved the statistics: start both from the same state
    bn2 = bn
    fused = fuse_conv_bn_relu_module(conv, bn2, act)
    assert fused.training == training
    if not training:
        want = (act(bn(conv(x))) if act is not None else bn(conv(x))).numpy()
        np.testing.assert_allclose(fused(x).numpy(), want, rtol=1e-4, atol=1e-5)
        assert type(fused) is (M.ConvRelu2d if relu else M.Conv2d)
    else:
        assert type(fused) is (M.ConvBnRelu2d if relu else M.ConvBn2d)
        assert ref.shape == fused(x).shape


@pytest.mark.parametrize("relu", [False, True])
def test_linear_bn_fusion_and_transpose(relu: bool) -> None:
    lin, bn = M.Linear(3, 4), M.BatchNorm1d(4)
    _randomize(bn)
    lin.eval()
    bn.eval()
    x = mge.tensor(RNG.standard_normal((5, 3)).astype(np.float32))
    if relu:
        fused = fuse_linear_bn_relu_module(lin, bn, M.ReLU())
        assert type(fused) is M.LinearRelu
        np.testing.assert_allclose(fused(x).numpy(), np.maximum(bn(lin(x)).numpy(), 0), rtol=1e-5, atol=1e-5)
        lin.train()
        bn.train()
        assert type(fuse_linear_bn_relu_module(lin, bn, M.ReLU())) is M.LinearBnRelu1d
        return
    fused = fuse_linear_bn_relu_module(lin, bn, None)
    np.testing.assert_allclose(fused(x).numpy(), bn(lin(x)).numpy(), rtol=1e-5, atol=1e-5)
    ct, bn2 = M.ConvTranspose2d(3, 4, 3, stride=2), M.BatchNorm2d(4)
    _randomize(bn2)
    ct.eval()
    bn2.eval()
    y = mge.tensor(RNG.standard_normal((1, 3, 4, 4)).astype(np.float32))
    np.testing.assert_allclose(
        fuse_conv_bn_relu_module(ct, bn2, None)(y).numpy(), bn2(ct(y)).numpy(), rtol=1e-4, atol=1e-5
    )
    with pytest.raises(FusionError, match="num_features"):
        fuse_conv_bn_relu_module(M.Conv2d(3, 5, 1).eval(), bn2, None)
