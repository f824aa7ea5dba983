"""MegEngine's ``module.adaptive_pooling`` (defined in :mod:`compiler.module.layers`)."""

from compiler.module.layers import AdaptiveAvgPool2d, AdaptiveMaxPool2d

__all__ = ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d"]
