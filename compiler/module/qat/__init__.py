"""MegEngine's ``module.qat``: quantization-aware-training modules."""

from compiler.module.qat import layers as _layers
from compiler.module.qat.layers import *  # noqa: F403

__all__ = list(_layers.__all__)
