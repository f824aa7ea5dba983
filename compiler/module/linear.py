"""MegEngine's ``module.linear`` (defined in :mod:`compiler.module.layers`)."""

from compiler.module.layers import Linear

__all__ = ["Linear"]
