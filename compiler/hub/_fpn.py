"""Pieces the zoo's one-stage detectors (RetinaNet, FCOS) share: the Feature Pyramid Network over a
ResNet, its extra P6/P7 levels, and the image preprocessing. Parameter names follow the zoo
(``backbone.bottom_up.*``, ``backbone.fpn_lateral3``, ``backbone.fpn_output3``, ...,
``backbone.top_block.p6``) so its state dicts load unchanged."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

import compiler.functional as F
import compiler.module as M
from compiler.hub._backbone import ResNetBackbone, resnet_backbone
from compiler.tensor import Tensor

# the zoo's detectors take BGR images in 0..255 and normalise them inside the model
IMG_MEAN = (103.530, 116.280, 123.675)
IMG_STD = (57.375, 57.120, 58.395)
SIZE_DIVISIBILITY = 32
# the focal-loss prior: every class output starts as background with probability 1 - prior
CLS_PRIOR_PROB = 0.01


class LastLevelP6P7(M.Module):
    """P6 = conv3x3/2 of ``in_feature``, P7 = conv3x3/2 of relu(P6)."""

    def __init__(self, in_channels: int, out_channels: int, in_feature: str = "res5") -> None:
        super().__init__()
        if in_feature == "p5" and in_channels != out_channels:
            raise ValueError(f"P6 from p5 needs in_channels == out_channels: {in_channels} != {out_channels}")
        self.num_levels = 2
        self.in_feature = in_feature
        self.p6 = M.Conv2d(in_channels, out_channels, 3, 2, 1)
        self.p7 = M.Conv2d(out_channels, out_channels, 3, 2, 1)

    def forward(self, x: Tensor) -> list[Tensor]:
        p6 = self.p6(x)
        return [p6, self.p7(F.relu(p6))]


class FPN(M.Module):
    """Top-down pathway: a 1x1 lateral conv per input stage plus the 2x-upsampled (bilinear Resize)
    coarser level, then a 3x3 output conv; P6/P7 from ``top_block``. Returns ``{"p3": ..., "p7": ...}``."""

    def __init__(
        self,
        bottom_up: ResNetBackbone,
        in_features: Sequence[str] = ("res3", "res4", "res5"),
        out_channels: int = 256,
        top_block: LastLevelP6P7 | None = None,
        strides: Sequence[int] = (8, 16, 32),
    ) -> None:
        super().__init__()
        self.bottom_up = bottom_up
        self.in_features = list(in_features)
        self.lateral_convs: list[M.Conv2d] = []
        self.output_convs: list[M.Conv2d] = []
        stages = [int(math.log2(s)) for s in strides]
        for feature, stage in zip(self.in_features, stages, strict=True):
            lateral = M.Conv2d(bottom_up.channels(feature), out_channels, 1)
            output = M.Conv2d(out_channels, out_channels, 3, 1, 1)
            for conv in (lateral, output):
                M.init.msra_normal_(conv.weight, mode="fan_in")
                M.init.zeros_(conv.bias)
            setattr(self, f"fpn_lateral{stage}", lateral)
            setattr(self, f"fpn_output{stage}", output)
            # coarsest level first: the order of the top-down pass
            self.lateral_convs.insert(0, lateral)
            self.output_convs.insert(0, output)
        self.top_block = top_block
        self.out_features = [f"p{s}" for s in stages]
        if top_block is not None:
            self.out_features += [f"p{stages[-1] + i}" for i in range(1, top_block.num_levels + 1)]

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        bottom_up = self.bottom_up.extract_features(x)
        inputs = [bottom_up[f] for f in reversed(self.in_features)]
        prev = self.lateral_convs[0](inputs[0])
        results = [self.output_convs[0](prev)]
        levels = zip(inputs[1:], self.lateral_convs[1:], self.output_convs[1:], strict=True)
        for feature, lateral, output in levels:
            top_down = F.vision.interpolate(prev, feature.shape[2:], mode="bilinear")
            prev = lateral(feature) + top_down
            results.insert(0, output(prev))
        if self.top_block is not None:
            source = bottom_up.get(self.top_block.in_feature)
            if source is None:
                source = results[self.out_features.index(self.top_block.in_feature)]
            results.extend(self.top_block(source))
        return dict(zip(self.out_features, results, strict=True))


def resnet_fpn_p3_p7(
    depth: int, layers: Sequence[int] | None, width: int, fpn_channels: int, p6_from: str
) -> FPN:
    """The detectors' backbone: a ResNet, P3-P5 from ``res3``..``res5`` and P6/P7 from ``p6_from``
    (RetinaNet: ``"res5"``, FCOS: ``"p5"``)."""
    bottom_up = resnet_backbone(depth, layers, width)
    p6_channels = fpn_channels if p6_from.startswith("p") else bottom_up.channels(p6_from)
    return FPN(
        bottom_up,
        in_features=("res3", "res4", "res5"),
        out_channels=fpn_channels,
        top_block=LastLevelP6P7(p6_channels, fpn_channels, p6_from),
        strides=(8, 16, 32),
    )


class OneStageDetector(M.Module):
    """What RetinaNet and FCOS share: the ResNet + FPN backbone (P3-P7), a ``head`` (set by the
    subclass) that maps the levels to lists of per-level outputs, and the forward that returns each
    output concatenated over the levels, one row per anchor or point."""

    head: M.Module

    def __init__(
        self,
        depth: int,
        layers: Sequence[int] | None,
        width: int,
        fpn_channels: int,
        num_classes: int,
        p6_from: str,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.backbone = resnet_fpn_p3_p7(depth, layers, width, fpn_channels, p6_from)
        self.in_features = list(self.backbone.out_features)

    def output_channels(self) -> tuple[int, ...]:
        """The channels per anchor or point of each head output, in the head's order."""
        raise NotImplementedError

    def forward(self, image: Tensor) -> tuple[Tensor, ...]:
        """``image``: (N, 3, H, W) BGR in 0..255 -> the head's outputs, each (N, rows, channels)."""
        features = self.backbone(preprocess_image(image))
        per_level = self.head([features[f] for f in self.in_features])
        return tuple(
            flatten_levels(levels, channels)
            for levels, channels in zip(per_level, self.output_channels(), strict=True)
        )


def init_head(head: M.Module, cls_score: M.Conv2d) -> None:
    """The zoo's detection-head init: every conv N(0, 0.01) with a zero bias, then the class
    scores' bias at the focal-loss prior."""
    for module in head.modules():
        if isinstance(module, M.Conv2d):
            M.init.normal_(module.weight, mean=0.0, std=0.01)
            M.init.zeros_(module.bias)
    M.init.fill_(cls_score.bias, -math.log((1 - CLS_PRIOR_PROB) / CLS_PRIOR_PROB))


def preprocess_image(image: Tensor) -> Tensor:
    """Zero-pad H and W up to a multiple of 32 and normalise with the zoo's BGR mean/std."""
    h, w = image.shape[2:]
    pad_h, pad_w = -h % SIZE_DIVISIBILITY, -w % SIZE_DIVISIBILITY
    if pad_h or pad_w:
        image = F.nn.pad(image, ((0, 0), (0, 0), (0, pad_h), (0, pad_w)))
    mean = np.array(IMG_MEAN, np.float32)[None, :, None, None]
    std = np.array(IMG_STD, np.float32)[None, :, None, None]
    return (image - mean) / std


def flatten_levels(per_level: Sequence[Tensor], channels: int) -> Tensor:
    """(N, A*C, H, W) per level -> (N, sum(H*W*A), C): one row per anchor, levels concatenated."""
    return F.concat([t.transpose(0, 2, 3, 1).reshape(t.shape[0], -1, channels) for t in per_level], axis=1)
