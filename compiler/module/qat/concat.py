"""MegEngine's ``module.qat.concat``. The classes are defined in
:mod:`compiler.module.qat.layers`, so pickles and traced modules that name them there keep loading."""

from compiler.module.qat.layers import Concat

__all__ = ["Concat"]
