"""MobileNetV2 (Sandler et al., 2018) as in MegEngine's model hub (``megengine/models``'
``mobilenet_v2.py``, a port of torchvision's): the same module tree and parameter names
(``features.N.conv.M...``, ``classifier.1``), so MegEngine state dicts load unchanged.

The only departure: the final average pool covers whatever spatial extent is left (7x7 for a
224x224 input, exactly MegEngine's ``avg_pool2d(x, 7)``), so smaller inputs work in tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import compiler.functional as F
import compiler.module as M
from compiler.tensor import Tensor


def _make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round ``v`` to a multiple of ``divisor`` without going below 90% of it."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNRelu(M.Sequential):
    """Convolution (padding keeps the size at stride 1, no bias), BatchNorm2d and ReLU6: MobileNetV2's
    basic layer; ``groups=in_planes`` makes it depthwise."""

    def __init__(
        self, in_planes: int, out_planes: int, kernel_size: int = 3, stride: int = 1, groups: int = 1
    ) -> None:
        padding = (kernel_size - 1) // 2
        super().__init__(
            M.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
            M.BatchNorm2d(out_planes),
            M.ReLU6(),
        )


class InvertedResidual(M.Module):
    """MobileNetV2's block: a 1x1 expansion to ``inp * expand_ratio`` channels (left out at ratio 1), a
    3x3 depthwise convolution with ``stride`` (1 or 2), and a linear 1x1 projection to ``oup``; the
    input is added back when the stride is 1 and ``inp == oup``."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: float) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"InvertedResidual: stride must be 1 or 2, got {stride}")
        self.stride = stride
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[M.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNRelu(inp, hidden_dim, kernel_size=1))  # pointwise
        layers.extend(
            [
                ConvBNRelu(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),  # depthwise
                M.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),  # pointwise-linear
                M.BatchNorm2d(oup),
            ]
        )
        self.conv = M.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


DEFAULT_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class MobileNetV2(M.Module):
    """MobileNetV2 image classification: a stride-2 3x3 stem, the inverted-residual stages of
    ``inverted_residual_setting`` (rows of expansion, channels, repeats, stride), a 1x1 convolution
    to 1280 channels, global average pooling, dropout and a linear classifier; ``width_mult`` scales
    every width (rounded to ``round_nearest``). (N, 3, H, W) images give (N, num_classes) logits."""

    def __init__(
        self,
        num_classes: int = 1000,
        width_mult: float = 1.0,
        inverted_residual_setting: Sequence[Sequence[int]] | None = None,
        round_nearest: int = 8,
    ) -> None:
        super().__init__()
        input_channel = 32
        last_channel = 1280
        setting = DEFAULT_SETTING if inverted_residual_setting is None else inverted_residual_setting
        if len(setting) == 0 or any(len(s) != 4 for s in setting):
            raise ValueError(
                f"inverted_residual_setting should be a non-empty list of 4-tuples, got {setting}"
            )
        input_channel = _make_divisible(input_channel * width_mult, round_nearest)
        self.last_channel = _make_divisible(last_channel * max(1.0, width_mult), round_nearest)
        features: list[M.Module] = [ConvBNRelu(3, input_channel, stride=2)]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                stride = s if i == 0 else 1
                features.append(InvertedResidual(input_channel, output_channel, stride, expand_ratio=t))
                input_channel = output_channel
        features.append(ConvBNRelu(input_channel, self.last_channel, kernel_size=1))
        self.features = M.Sequential(*features)
        self.classifier = M.Sequential(M.Dropout(0.2), M.Linear(self.last_channel, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)
        x = F.avg_pool2d(x, x.shape[2:])
        x = F.flatten(x, 1)
        return self.classifier(x)


def mobilenet_v2(pretrained: bool = False, **kwargs: Any) -> MobileNetV2:
    """MobileNetV2 from "MobileNetV2: Inverted Residuals and Linear Bottlenecks" (Sandler et al., 2018)."""
    if pretrained:
        raise NotImplementedError(
            "xmge's hub has no pretrained weights; load a state dict with load_state_dict"
        )
    return MobileNetV2(**kwargs)
