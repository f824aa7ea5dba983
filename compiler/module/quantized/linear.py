"""MegEngine's ``module.quantized.linear``. The classes are defined in
:mod:`compiler.module.quantized.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.quantized.layers import Linear, LinearRelu

__all__ = ["Linear", "LinearRelu"]
