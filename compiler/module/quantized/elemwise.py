"""MegEngine's ``module.quantized.elemwise``. The classes are defined in
:mod:`compiler.module.quantized.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.quantized.layers import Elemwise

__all__ = ["Elemwise"]
