"""The AMX-INT8 convolution (``x86_amx.Conv2dQ8Amx``) with the ReLU6 float island after it as one
kernel, like the VNNI convolutions' ``conv2d_q8_relu6_x86``: the island (``typecvt``, ``relu6``,
``typecvt``, which post-training quantization leaves after MobileNetV2's convolutions) runs in the
AMX kernel's requantization epilogue (``x86_int8._epilogue_value``), bit-exact with the three ops."""

from __future__ import annotations

from backends.c.templates.x86.x86_amx import Conv2dQ8Amx
from backends.c.templates.x86.x86_int8 import _Relu6Island


class Conv2dQ8Relu6Amx(_Relu6Island, Conv2dQ8Amx):
    family = "conv2d_q8_relu6_amx"
    conv_family = Conv2dQ8Amx.family
    priority = 103  # ahead of the VNNI island (102), as the AMX convolution is of the VNNI one


KERNEL_UNITS = (Conv2dQ8Relu6Amx(),)

__all__ = ["KERNEL_UNITS"]
