"""MegEngine's ``module.pooling`` (defined in :mod:`compiler.module.layers`)."""

from compiler.module.layers import AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool2d, MaxPool2d

__all__ = ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "AvgPool2d", "MaxPool2d"]
