"""MegEngine 1.13's ``module`` API."""

from compiler.module.layers import (
    GELU,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Flatten,
    Hsigmoid,
    Hswish,
    Identity,
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
from compiler.module.module import Module, StateDictError

__all__ = [name for name in dir() if not name.startswith("_")]
