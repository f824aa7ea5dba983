"""MegEngine's ``module.quantized``: int8 inference modules."""

from compiler.module.quantized.layers import (
    Concat,
    Conv2d,
    ConvBn2d,
    ConvBnRelu2d,
    ConvRelu2d,
    DequantStub,
    Elemwise,
    Linear,
    QuantStub,
)
from compiler.module.quantized.module import QuantizedModule

__all__ = [
    "Concat",
    "Conv2d",
    "ConvBn2d",
    "ConvBnRelu2d",
    "ConvRelu2d",
    "DequantStub",
    "Elemwise",
    "Linear",
    "QuantStub",
    "QuantizedModule",
]
