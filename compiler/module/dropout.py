"""MegEngine's ``module.dropout`` (defined in :mod:`compiler.module.layers`)."""

from compiler.module.layers import Dropout

__all__ = ["Dropout"]
