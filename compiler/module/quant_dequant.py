"""MegEngine's ``module.quant_dequant``: where a quantized model's int8 region begins and ends.
In a float model both are identities."""

from __future__ import annotations

from compiler.module.module import Module
from compiler.tensor import Tensor


class QuantStub(Module):
    def forward(self, inp: Tensor) -> Tensor:
        return inp


class DequantStub(Module):
    def forward(self, inp: Tensor) -> Tensor:
        return inp


__all__ = ["DequantStub", "QuantStub"]
