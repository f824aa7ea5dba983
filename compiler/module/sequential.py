"""MegEngine's ``module.sequential`` (defined in :mod:`compiler.module.layers`)."""

from compiler.module.layers import Sequential

__all__ = ["Sequential"]
