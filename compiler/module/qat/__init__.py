"""MegEngine's ``module.qat``: quantization-aware-training modules."""

from compiler.module.qat.layers import (
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
from compiler.module.qat.module import QATModule

__all__ = [
    "Concat",
    "Conv2d",
    "ConvBn2d",
    "ConvBnRelu2d",
    "ConvRelu2d",
    "DequantStub",
    "Elemwise",
    "Linear",
    "QATModule",
    "QuantStub",
]
