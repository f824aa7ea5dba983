"""MegEngine's ``module.qat.conv``. The classes are defined in
:mod:`compiler.module.qat.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.qat.layers import Conv2d, ConvRelu2d

__all__ = ["Conv2d", "ConvRelu2d"]
