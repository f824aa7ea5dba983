"""MegEngine's ``module.qat.elemwise``. The classes are defined in
:mod:`compiler.module.qat.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.qat.layers import Elemwise

__all__ = ["Elemwise"]
