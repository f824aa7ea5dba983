"""Quantizable classification models written as MegEngine's quantization zoo writes them: fused
``ConvBnRelu2d``/``ConvBn2d`` units, residual adds as ``Elemwise`` modules, concatenations as
``Concat`` modules, the int8 region between ``QuantStub`` and ``DequantStub``.

Each entry function returns the float model; ``quantize_qat`` then ``quantize`` turn it into an
int8 model (``quantized=True`` does both, observing one random calibration batch of
``calibration_shape``). Width and depth knobs keep test-sized variants small.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import compiler.functional as F
import compiler.module as M
from compiler.hub.mobilenet_v2 import DEFAULT_SETTING, _make_divisible
from compiler.tensor import Tensor


def _init_weights(model: M.Module) -> None:
    for m in model.modules():
        if isinstance(m, M.Conv2d):
            M.init.msra_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                M.init.zeros_(m.bias)
        elif isinstance(m, M.BatchNorm2d):
            M.init.ones_(m.weight)
            M.init.zeros_(m.bias)
        elif isinstance(m, M.Linear):
            M.init.normal_(m.weight, 0, 0.01)
            M.init.zeros_(m.bias)


class _Classifier(M.Module):
    """QuantStub -> features -> global average pool -> Linear -> DequantStub."""

    def _head(self, channels: int, num_classes: int) -> None:
        self.quant = M.QuantStub()
        self.fc = M.Linear(channels, num_classes)
        self.dequant = M.DequantStub()

    def features(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(self.quant(x))
        x = F.flatten(F.avg_pool2d(x, x.shape[2:]), 1)
        return self.dequant(self.fc(x))


# -- ResNet-18 -------------------------------------------------------------------------------------


class BasicBlock(M.Module):
    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv_bn_relu1 = M.ConvBnRelu2d(in_channels, channels, 3, stride, padding=1, bias=False)
        self.conv_bn2 = M.ConvBn2d(channels, channels, 3, 1, padding=1, bias=False)
        self.downsample = (
            M.ConvBn2d(in_channels, channels, 1, stride, bias=False)
            if stride != 1 or in_channels != channels
            else M.Identity()
        )
        self.add_relu = M.Elemwise("FUSE_ADD_RELU")

    def forward(self, x: Tensor) -> Tensor:
        return self.add_relu(self.conv_bn2(self.conv_bn_relu1(x)), self.downsample(x))


class ResNet(_Classifier):
    def __init__(
        self, layers: Sequence[int] = (2, 2, 2, 2), width: int = 64, num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.conv_bn_relu1 = M.ConvBnRelu2d(3, width, 7, 2, padding=3, bias=False)
        self.maxpool = M.MaxPool2d(3, 2, padding=1)
        stages, c = [], width
        for i, n in enumerate(layers):
            out = width * 2**i
            blocks = [BasicBlock(c, out, 1 if i == 0 else 2)] + [
                BasicBlock(out, out, 1) for _ in range(n - 1)
            ]
            stages.append(M.Sequential(*blocks))
            c = out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self._head(c, num_classes)
        _init_weights(self)

    def features(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.conv_bn_relu1(x))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


# -- MobileNetV2 -----------------------------------------------------------------------------------


class InvertedResidual(M.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[M.Module] = []
        if expand_ratio != 1:
            layers.append(M.ConvBnRelu2d(inp, hidden, 1, bias=False))
        layers += [
            M.ConvBnRelu2d(hidden, hidden, 3, stride, padding=1, groups=hidden, bias=False),
            M.ConvBn2d(hidden, oup, 1, bias=False),
        ]
        self.conv = M.Sequential(*layers)
        self.add = M.Elemwise("ADD")

    def forward(self, x: Tensor) -> Tensor:
        return self.add(x, self.conv(x)) if self.use_res_connect else self.conv(x)


class MobileNetV2(_Classifier):
    # (expand ratio, channels, repeats, stride)
    SETTINGS = DEFAULT_SETTING

    def __init__(
        self, num_classes: int = 1000, width_mult: float = 1.0, depth: int = 7, last_channel: int = 1280
    ) -> None:
        super().__init__()
        c = _make_divisible(32 * width_mult)
        last = _make_divisible(last_channel * max(1.0, width_mult))
        blocks: list[M.Module] = [M.ConvBnRelu2d(3, c, 3, 2, padding=1, bias=False)]
        for t, ch, n, s in self.SETTINGS[:depth]:
            out = _make_divisible(ch * width_mult)
            for i in range(n):
                blocks.append(InvertedResidual(c, out, s if i == 0 else 1, t))
                c = out
        blocks.append(M.ConvBnRelu2d(c, last, 1, bias=False))
        self.features_ = M.Sequential(*blocks)
        self._head(last, num_classes)
        _init_weights(self)

    def features(self, x: Tensor) -> Tensor:
        return self.features_(x)


# -- ShuffleNetV1 ----------------------------------------------------------------------------------


def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    n, c, h, w = x.shape
    x = F.transpose(F.reshape(x, (n, groups, c // groups, h, w)), (0, 2, 1, 3, 4))
    return F.reshape(x, (n, c, h, w))


class ShuffleV1Block(M.Module):
    """Grouped 1x1 -> shuffle -> depthwise 3x3 -> grouped 1x1; stride 2 concatenates an average
    pooled shortcut (``Concat``), stride 1 adds it (``Elemwise``)."""

    def __init__(self, inp: int, oup: int, groups: int, stride: int, first_group: bool) -> None:
        super().__init__()
        self.stride, self.groups = stride, groups
        mid = oup // 4
        branch_out = oup - inp if stride == 2 else oup
        self.conv1 = M.ConvBnRelu2d(inp, mid, 1, groups=1 if first_group else groups, bias=False)
        self.dwconv = M.ConvBn2d(mid, mid, 3, stride, padding=1, groups=mid, bias=False)
        self.conv2 = M.ConvBn2d(mid, branch_out, 1, groups=groups, bias=False)
        if stride == 2:
            self.shortcut = M.AvgPool2d(3, 2, padding=1)
            self.concat = M.Concat()
            self.relu = M.ReLU()
        else:
            self.add_relu = M.Elemwise("FUSE_ADD_RELU")

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv1(x)
        if self.groups > 1:
            y = channel_shuffle(y, self.groups)
        y = self.conv2(self.dwconv(y))
        if self.stride == 2:
            return self.relu(self.concat([self.shortcut(x), y], 1))
        return self.add_relu(y, x)


class ShuffleNetV1(_Classifier):
    def __init__(
        self,
        num_classes: int = 1000,
        groups: int = 3,
        stage_repeats: Sequence[int] = (4, 8, 4),
        stage_channels: Sequence[int] = (240, 480, 960),
        stem: int = 24,
    ) -> None:
        super().__init__()
        self.first_conv = M.ConvBnRelu2d(3, stem, 3, 2, padding=1, bias=False)
        self.maxpool = M.MaxPool2d(3, 2, padding=1)
        blocks: list[M.Module] = []
        c = stem
        for stage, (n, out) in enumerate(zip(stage_repeats, stage_channels, strict=True)):
            for i in range(n):
                blocks.append(ShuffleV1Block(c, out, groups, 2 if i == 0 else 1, stage == 0 and i == 0))
                c = out
        self.stages = M.Sequential(*blocks)
        self._head(c, num_classes)
        _init_weights(self)

    def features(self, x: Tensor) -> Tensor:
        return self.stages(self.maxpool(self.first_conv(x)))


# -- entry points ----------------------------------------------------------------------------------


def _maybe_quantize(model: M.Module, kwargs: dict[str, Any]) -> M.Module:
    if not kwargs.get("quantized", False):
        return model
    from compiler import tensor
    from compiler.quantization import enable_observer, quantize, quantize_qat

    shape = kwargs.get("calibration_shape", (2, 3, 64, 64))
    quantize_qat(model)
    model.eval()  # calibrate with the running statistics, as MegEngine's calibration script does
    enable_observer(model)
    model(tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32)))
    quantize(model)
    return model.eval()


def _pick(kwargs: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k in names}


def quantized_resnet18(**kwargs: Any) -> M.Module:
    """ResNet-18 written for MegEngine's quantization flow (fused ConvBnRelu2d/ConvBn2d units, residual
    adds as Elemwise modules, QuantStub/DequantStub around the int8 region); keywords ``layers``
    (default (2, 2, 2, 2)), ``width`` (64) and ``num_classes`` (1000). With ``quantized=True`` the
    model is made int8 (quantize_qat, one calibration batch of random ``calibration_shape`` inputs,
    default (2, 3, 64, 64), then quantize); otherwise it is the float model to quantize yourself."""
    model = ResNet(**_pick(kwargs, ("layers", "width", "num_classes")))
    return _maybe_quantize(model, kwargs)


def quantized_mobilenet_v2(**kwargs: Any) -> M.Module:
    """MobileNetV2 written for MegEngine's quantization flow (fused ConvBnRelu2d units, residual adds as
    Elemwise modules); keywords ``num_classes`` (1000), ``width_mult`` (1.0), ``depth`` (the number
    of inverted-residual stages kept, 7) and ``last_channel`` (1280). With ``quantized=True`` the
    model is made int8 (quantize_qat, one calibration batch of random ``calibration_shape`` inputs,
    default (2, 3, 64, 64), then quantize); otherwise it is the float model to quantize yourself."""
    model = MobileNetV2(**_pick(kwargs, ("num_classes", "width_mult", "depth", "last_channel")))
    return _maybe_quantize(model, kwargs)


def quantized_shufflenet_v1(**kwargs: Any) -> M.Module:
    """ShuffleNetV1 written for MegEngine's quantization flow (grouped 1x1 convolutions, channel
    shuffle, Concat and Elemwise modules for the shortcuts); keywords ``num_classes`` (1000),
    ``groups`` (3), ``stage_repeats`` ((4, 8, 4)), ``stage_channels`` ((240, 480, 960)) and ``stem``
    (24). With ``quantized=True`` the model is made int8 (quantize_qat, one calibration batch of
    random ``calibration_shape`` inputs, default (2, 3, 64, 64), then quantize); otherwise it is the
    float model to quantize yourself."""
    model = ShuffleNetV1(
        **_pick(kwargs, ("num_classes", "groups", "stage_repeats", "stage_channels", "stem"))
    )
    return _maybe_quantize(model, kwargs)


__all__ = ["quantized_mobilenet_v2", "quantized_resnet18", "quantized_shufflenet_v1"]
