"""Quantization behaviour as in MegEngine 1.13: abstract observers, QAT and quantized modules'
printed form (``QAT.``/``Quantized.`` prefixes, the activation quantizers first)."""

from __future__ import annotations

import pytest

import compiler.module as M
from compiler.quantization import quantize, quantize_qat
from compiler.quantization.observer import MinMaxObserver, Observer


def test_observer_is_abstract() -> None:
    with pytest.raises(TypeError):
        Observer("qint8")
    assert isinstance(MinMaxObserver(), Observer)


def test_printed_qat_and_quantized_nets() -> None:
    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv_bn = M.ConvBnRelu2d(3, 3, 3)
            self.linear = M.Linear(3, 3)

        def forward(self, x):  # noqa: ANN001, ANN201
            return x

    net = Net()
    quantize_qat(net)
    text = repr(net)
    assert "(conv_bn): QAT.ConvBnRelu2d(\n" in text and "(linear): QAT.Linear(\n" in text
    parts = ["act_observer", "act_fake_quant", "weight_observer", "weight_fake_quant"]
    positions = [text.index(f"({p}):") for p in parts]
    assert positions == sorted(positions)
    quantize(net)
    assert repr(net) == (
        "Net(\n  (conv_bn): Quantized.ConvBnRelu2d(3, 3, kernel_size=(3, 3))\n"
        "  (linear): Quantized.Linear()\n)"
    )
