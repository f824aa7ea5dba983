"""MegEngine's ``module.qat.conv_bn``. The classes are defined in
:mod:`compiler.module.qat.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.qat.layers import ConvBn2d, ConvBnRelu2d
from compiler.module.qat.layers import _ConvBnActivation2d as _ConvBnActivation2d

__all__ = ["ConvBn2d", "ConvBnRelu2d"]
