"""MegEngine's ``module.quantized.conv``. The classes are defined in
:mod:`compiler.module.quantized.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.quantized.layers import Conv2d, ConvRelu2d

__all__ = ["Conv2d", "ConvRelu2d"]
