"""MegEngine's ``module.qat.quant_dequant``. The classes are defined in
:mod:`compiler.module.qat.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.qat.layers import DequantStub, QuantStub

__all__ = ["DequantStub", "QuantStub"]
