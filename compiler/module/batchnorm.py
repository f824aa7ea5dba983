"""MegEngine's ``module.batchnorm`` (defined in :mod:`compiler.module.layers`)."""

from compiler.module.layers import BatchNorm1d, BatchNorm2d

__all__ = ["BatchNorm1d", "BatchNorm2d"]
