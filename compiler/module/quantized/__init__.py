"""MegEngine's ``module.quantized``: int8 inference modules."""

from compiler.module.quantized import layers as _layers
from compiler.module.quantized.layers import *  # noqa: F403
from compiler.module.quantized.module import QuantizedModule as QuantizedModule

__all__ = sorted([*_layers.__all__, "QuantizedModule"])
