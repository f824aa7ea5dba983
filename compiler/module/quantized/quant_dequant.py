"""MegEngine's ``module.quantized.quant_dequant``. The classes are defined in
:mod:`compiler.module.quantized.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.quantized.layers import DequantStub, QuantStub

__all__ = ["DequantStub", "QuantStub"]
