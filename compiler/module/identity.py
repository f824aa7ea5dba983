"""MegEngine's ``module.identity`` (defined in :mod:`compiler.module.layers`)."""

from compiler.module.layers import Identity

__all__ = ["Identity"]
