"""MegEngine's ``module.qat.linear``. The classes are defined in
:mod:`compiler.module.qat.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.qat.layers import Linear, LinearRelu

__all__ = ["Linear", "LinearRelu"]
