"""MegEngine's ``module.quantized.conv_bn``. The classes are defined in
:mod:`compiler.module.quantized.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.quantized.layers import ConvBn2d, ConvBnRelu2d

__all__ = ["ConvBn2d", "ConvBnRelu2d"]
