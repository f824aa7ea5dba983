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
    lrn,
    normalization,
    padding,
    pixel_shuffle,
    pooling,
    qat,
    quant_dequant,
    quantized,
    sequential,
    sliding_window,
)
from compiler.module.activation import PReLU
from compiler.module.batchnorm import SyncBatchNorm
from compiler.module.concat import Concat
from compiler.module.conv import (
    Conv1d,
    Conv3d,
    ConvRelu2d,
    ConvTranspose3d,
    DeformableConv2d,
    RegionRestrictedConv,
)
from compiler.module.conv_bn import ConvBn2d, ConvBnRelu2d
from compiler.module.conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d, ConvTransposeRelu2d
from compiler.module.deformable_psroi_pooling import DeformablePSROIPooling
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
from compiler.module.lrn import LocalResponseNorm
from compiler.module.module import Module, StateDictError
from compiler.module.normalization import GroupNorm, InstanceNorm
from compiler.module.padding import Pad
from compiler.module.pixel_shuffle import PixelShuffle
from compiler.module.quant_dequant import DequantStub, QuantStub
from compiler.module.sliding_window import SlidingWindow

__all__ = [
    "SyncBatchNorm",
    "LinearBn1d",
    "LinearBnRelu1d",
    "LinearRelu",
    "ConvTransposeRelu2d",
    "Concat",
    "Conv1d",
    "Conv3d",
    "DeformableConv2d",
    "RegionRestrictedConv",
    "DeformablePSROIPooling",
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
    "LocalResponseNorm",
    "Pad",
    "PixelShuffle",
    "SlidingWindow",
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

# MegEngine 1.13 modules added in issue 32's second round, each in MegEngine's sub-module path
from compiler.module import batch_matmul_activation, rnn  # noqa: E402,F401,I001
from compiler.module.batch_matmul_activation import BatchMatMulActivation  # noqa: E402,I001
from compiler.module.local_conv import LocalConv2d  # noqa: E402,I001
from compiler.module.normalization import GeneralNorm  # noqa: E402,I001
from compiler.module.rnn import LSTM, RNN, LSTMCell, RNNCell  # noqa: E402,I001
from compiler.module.sliding_window import SlidingWindowTranspose  # noqa: E402,I001

__all__ += [
    "BatchMatMulActivation",
    "GeneralNorm",
    "LocalConv2d",
    "LocalResponseNorm",
    "Pad",
    "PixelShuffle",
    "LSTM",
    "LSTMCell",
    "RNN",
    "RNNCell",
    "SlidingWindow",
    "SlidingWindowTranspose",
]

from compiler.module import multiheadattn  # noqa: E402,F401,I001
from compiler.module.multiheadattn import MultiHeadAttention  # noqa: E402,I001

__all__ += ["MultiHeadAttention"]
