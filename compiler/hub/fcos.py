"""FCOS (Tian et al., 2019) as in the zoo's ``official/vision/detection``: ResNet + FPN (P3-P7, P6/P7
from P5) and an anchor-free point head whose towers are conv3x3 + GroupNorm(32) + ReLU. Inference
stops at the raw head outputs concatenated over levels: class logits ``(N, points, num_classes)``,
box distances ``(N, points, 4)`` (left, top, right, bottom in pixels: relu(pred * scale_l) *
stride_l, as the zoo) and centerness logits ``(N, points, 1)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import compiler.functional as F
import compiler.module as M
from compiler import hub
from compiler.hub._fpn import OneStageDetector, init_head
from compiler.tensor import Parameter, Tensor

__all__ = [
    "FCOS",
    "fcos_res18_coco_3x_800size",
    "fcos_res34_coco_3x_800size",
    "fcos_res50_coco_3x_800size",
    "fcos_res101_coco_3x_800size",
]

_WEIGHTS = "https://data.megengine.org.cn/models/weights/"
STRIDES = (8, 16, 32, 64, 128)


class PointHead(M.Module):
    """Class tower -> logits; box tower -> distances and centerness; a learnt scale per level."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        strides: Sequence[int] = STRIDES,
        num_convs: int = 4,
        num_groups: int = 32,
    ) -> None:
        super().__init__()
        self.strides = list(strides)
        cls_subnet: list[M.Module] = []
        bbox_subnet: list[M.Module] = []
        for _ in range(num_convs):
            for tower in (cls_subnet, bbox_subnet):
                tower += [
                    M.Conv2d(in_channels, in_channels, 3, 1, 1),
                    M.GroupNorm(num_groups, in_channels),
                    M.ReLU(),
                ]
        self.cls_subnet = M.Sequential(*cls_subnet)
        self.bbox_subnet = M.Sequential(*bbox_subnet)
        self.cls_score = M.Conv2d(in_channels, num_classes, 3, 1, 1)
        self.bbox_pred = M.Conv2d(in_channels, 4, 3, 1, 1)
        self.ctrness = M.Conv2d(in_channels, 1, 3, 1, 1)
        init_head(self, self.cls_score)
        self.scale_list = Parameter(np.ones(len(self.strides), np.float32))

    def forward(self, features: list[Tensor]) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        if len(features) != len(self.strides):
            raise ValueError(f"PointHead has {len(self.strides)} levels, got {len(features)} features")
        logits, offsets, ctrness = [], [], []
        for level, (feature, stride) in enumerate(zip(features, self.strides, strict=True)):
            logits.append(self.cls_score(self.cls_subnet(feature)))
            box_features = self.bbox_subnet(feature)
            offsets.append(F.relu(self.bbox_pred(box_features) * self.scale_list[level]) * stride)
            ctrness.append(self.ctrness(box_features))
        return logits, offsets, ctrness


class FCOS(OneStageDetector):
    """Outputs: class logits ``(N, points, num_classes)``, ltrb distances ``(N, points, 4)`` and
    centerness logits ``(N, points, 1)``."""

    def __init__(
        self,
        depth: int = 50,
        layers: list[int] | None = None,
        width: int = 64,
        fpn_channels: int = 256,
        num_classes: int = 80,
        num_convs: int = 4,
        num_groups: int = 32,
    ) -> None:
        super().__init__(depth, layers, width, fpn_channels, num_classes, p6_from="p5")
        self.head = PointHead(fpn_channels, num_classes, STRIDES, num_convs, num_groups)

    def output_channels(self) -> tuple[int, ...]:
        return (self.num_classes, 4, 1)

    def scores(self, image: Tensor) -> tuple[Tensor, Tensor]:
        """The zoo's test-time score sqrt(sigmoid(logit) * sigmoid(centerness)) and distances."""
        logits, offsets, ctrness = self(image)
        return F.sqrt(F.sigmoid(logits) * F.sigmoid(ctrness)), offsets


@hub.pretrained(_WEIGHTS + "fcos_res18_coco_3x_800size_37dot6_adab0136.pkl")
def fcos_res18_coco_3x_800size(**kwargs: Any) -> FCOS:
    """FCOS (anchor-free detection) with a ResNet-18 + FPN backbone for COCO (80 classes), the zoo's 3x
    schedule at 800-pixel images (COCO AP 37.6 there). ``pretrained=True`` loads the zoo's weights
    from the local hub cache; other keywords go to FCOS."""
    return FCOS(**{"depth": 18, **kwargs})


@hub.pretrained(_WEIGHTS + "fcos_res34_coco_3x_800size_41dot0_8ba4633f.pkl")
def fcos_res34_coco_3x_800size(**kwargs: Any) -> FCOS:
    """FCOS (anchor-free detection) with a ResNet-34 + FPN backbone for COCO (80 classes), the zoo's 3x
    schedule at 800-pixel images (COCO AP 41.0 there). ``pretrained=True`` loads the zoo's weights
    from the local hub cache; other keywords go to FCOS."""
    return FCOS(**{"depth": 34, **kwargs})


@hub.pretrained(_WEIGHTS + "fcos_res50_coco_3x_800size_42dot2_b16f9c8b.pkl")
def fcos_res50_coco_3x_800size(**kwargs: Any) -> FCOS:
    """FCOS (anchor-free detection) with a ResNet-50 + FPN backbone for COCO (80 classes), the zoo's 3x
    schedule at 800-pixel images (COCO AP 42.2 there). ``pretrained=True`` loads the zoo's weights
    from the local hub cache; other keywords go to FCOS."""
    return FCOS(**{"depth": 50, **kwargs})


@hub.pretrained(_WEIGHTS + "fcos_res101_coco_3x_800size_44dot3_f38e8df1.pkl")
def fcos_res101_coco_3x_800size(**kwargs: Any) -> FCOS:
    """FCOS (anchor-free detection) with a ResNet-101 + FPN backbone for COCO (80 classes), the zoo's 3x
    schedule at 800-pixel images (COCO AP 44.3 there). ``pretrained=True`` loads the zoo's weights
    from the local hub cache; other keywords go to FCOS."""
    return FCOS(**{"depth": 101, **kwargs})
