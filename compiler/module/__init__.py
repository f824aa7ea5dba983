"""MegEngine 1.13's ``module`` API."""

# MegEngine's sub-module layout (``megengine.module.init``, ``.normalization``, ``.qat``, ...)
from compiler.module import (  # noqa: F401 - also importable as compiler.module.<name>
    activation,
    batchnorm,
    concat,
    conv,
    conv_bn,
    dropout,
    elemwise,
    embedding,
    identity,
    init,
    linear,
    normalization,
    pooling,
    qat,
    quant_dequant,
    quantized,
    sequential,
)
from compiler.module.activation import PReLU
from compiler.module.batchnorm import SyncBatchNorm
from compiler.module.concat import Concat
from compiler.module.conv import Conv1d, Conv3d, ConvRelu2d, ConvTranspose3d
from compiler.module.conv_bn import ConvBn2d, ConvBnRelu2d
from compiler.module.conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d, ConvTransposeRelu2d
from compiler.module.elemwise import Elemwise
from compiler.module.embedding import Embedding
from compiler.module.layers import (
    GELU,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    ConvTranspose2d,
    Dropout,
    Flatten,
    Hsigmoid,
    Hswish,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    MaxPool2d,
    ReLU,
    ReLU6,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from compiler.module.linear_bn import LinearBn1d, LinearBnRelu1d, LinearRelu
from compiler.module.module import Module, StateDictError
from compiler.module.normalization import GroupNorm, InstanceNorm
from compiler.module.quant_dequant import DequantStub, QuantStub

__all__ = [
    "SyncBatchNorm",
    "LinearBn1d",
    "LinearBnRelu1d",
    "LinearRelu",
    "ConvTransposeRelu2d",
    "Concat",
    "Conv1d",
    "Conv3d",
    "ConvTranspose3d",
    "ConvBn2d",
    "ConvBnRelu2d",
    "ConvTransposeBn2d",
    "ConvTransposeBnRelu2d",
    "ConvRelu2d",
    "DequantStub",
    "Elemwise",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "PReLU",
    "QuantStub",
    "init",
    "qat",
    "quantized",
    "GELU",
    "AdaptiveAvgPool2d",
    "AdaptiveMaxPool2d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "ConvTranspose2d",
    "Dropout",
    "Flatten",
    "Hsigmoid",
    "Hswish",
    "Identity",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "MaxPool2d",
    "Module",
    "ReLU",
    "ReLU6",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "StateDictError",
    "Tanh",
]
