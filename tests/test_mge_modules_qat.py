"""Behaviour 9: a QAT net with fake quantization disabled computes exactly what the float net
computes (MegEngine fake-quantizes the bias only while both fake quantizers are enabled)."""

from __future__ import annotations

import numpy as np

from compiler import Parameter, Tensor
from compiler import module as M
from compiler.quantization import min_max_fakequant_qconfig
from compiler.quantization.quantize import (
    disable_fake_quant,
    disable_observer,
    enable_fake_quant,
    enable_observer,
    quantize_qat,
)


class FloatNet(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = M.QuantStub()
        self.linear = M.Sequential(M.Linear(3, 3), M.Linear(3, 3))
        self.dequant = M.DequantStub()
        rng = np.random.default_rng(0)
        self.linear[0].bias[...] = Parameter(rng.random(3))  # float64 data, as MegEngine's test assigns
        self.linear[1].bias[...] = Parameter(rng.random(3))

    def forward(self, x: Tensor) -> Tensor:
        return self.dequant(self.linear(self.quant(x)))


def test_qat_with_fake_quant_disabled_equals_float_net() -> None:
    x = Tensor(np.random.default_rng(1).integers(1, 10, size=(3, 3)).astype(np.float32))
    net = FloatNet()
    y_float = net(x).numpy()
    net = quantize_qat(net, qconfig=min_max_fakequant_qconfig)
    enable_observer(net)
    disable_fake_quant(net)
    net(x)
    disable_observer(net)
    enable_fake_quant(net)
    y_fake = net(x).numpy()
    disable_fake_quant(net)
    np.testing.assert_array_equal(net(x).numpy(), y_float)
    enable_fake_quant(net)
    np.testing.assert_array_equal(net(x).numpy(), y_fake)
    assert not np.array_equal(y_fake, y_float)  # fake quantization does change the result


def test_apply_easy_quant_searches_scales_within_the_interval() -> None:
    from compiler.quantization import passive_qconfig
    from compiler.quantization.observer import PassiveObserver
    from compiler.quantization.quantize import apply_easy_quant, reset_qconfig

    x = Tensor(np.random.default_rng(2).standard_normal((8, 3)).astype(np.float32))
    net = quantize_qat(FloatNet(), qconfig=min_max_fakequant_qconfig)
    enable_observer(net)
    net(x)
    disable_observer(net)
    eq = reset_qconfig(net, passive_qconfig, inplace=False)
    observers = [eq.linear[i].weight_observer for i in (0, 1)] + [eq.linear[i].act_observer for i in (0, 1)]
    assert all(isinstance(o, PassiveObserver) for o in observers)
    orig = [o.orig_scale for o in observers]
    apply_easy_quant(eq, x, 0.8, 1.2, 9)
    for o, s0 in zip(observers, orig, strict=True):
        s = float(o.scale.numpy())
        grid = np.linspace(0.8 * s0, 1.2 * s0, 9)
        assert np.min(np.abs(grid - s)) <= 1e-6 * s0  # one of the searched scales
    assert np.isfinite(eq(x).numpy()).all()
    same = reset_qconfig(net, passive_qconfig, inplace=False)
    apply_easy_quant(same, x, 1.0, 1.0, 1)  # a one-point search keeps every scale
    for o, s0 in zip(
        [same.linear[0].weight_observer, same.linear[1].act_observer], [orig[0], orig[3]], strict=True
    ):
        assert abs(float(o.scale.numpy()) - s0) <= 1e-6 * s0
