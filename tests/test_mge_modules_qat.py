"""Behaviour 9: a QAT net with fake quantization disabled computes exactly what the float net
computes (MegEngine fake-quantizes the bias only while both fake quantizers are enabled)."""

from __future__ import annotations

import numpy as np

import compiler.functional as F
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


class LinearReluNet(M.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.fused = fused
        self.quant = M.QuantStub()
        self.linear = M.LinearRelu(4, 3) if fused else M.Linear(4, 3)
        self.dequant = M.DequantStub()
        rng = np.random.RandomState(0)
        self.linear.weight[...] = Tensor(rng.randn(3, 4).astype(np.float32))
        self.linear.bias[...] = Tensor(rng.randn(3).astype(np.float32))

    def forward(self, x: Tensor) -> Tensor:
        y = self.linear(self.quant(x))
        return self.dequant(y if self.fused else F.relu(y))


def test_linear_relu_converts_to_qat_and_int8() -> None:
    """MegEngine's module.qat/quantized.linear.LinearRelu: the ReLU is applied before the output's
    fake quantization (QAT) and on the int8 output (quantized), so both equal Linear then ReLU."""
    import io

    from backends.mge.reader import read_mge
    from compiler import jit
    from compiler.module import qat, quantized
    from compiler.quantization.quantize import quantize
    from semantics import run_module

    x = Tensor(np.random.RandomState(1).randn(5, 4).astype(np.float32))
    fused, plain = LinearReluNet(True), LinearReluNet(False)
    for net in (fused, plain):
        quantize_qat(net, qconfig=min_max_fakequant_qconfig)
        net(x)
    assert type(fused.linear) is qat.LinearRelu
    np.testing.assert_array_equal(fused(x).numpy(), plain(x).numpy())
    for net in (fused, plain):
        quantize(net)
        net.eval()
    assert type(fused.linear) is quantized.LinearRelu
    y = fused(x).numpy()
    np.testing.assert_array_equal(y, plain(x).numpy())
    assert (y >= 0).all() and (y > 0).any()

    traced = jit.trace(lambda t: fused(t), symbolic=True, capture_as_const=True)
    np.testing.assert_array_equal(traced(x).numpy(), y)
    buf = io.BytesIO()
    traced.dump(buf, arg_names=["data"])
    np.testing.assert_array_equal(run_module(read_mge(buf.getvalue()), [x.numpy()])[0], y)
