"""RetinaNet (Lin et al., 2017) as in the zoo's ``official/vision/detection``: ResNet + FPN
(P3-P7, P6/P7 from res5) and a shared box head of four conv+ReLU towers. Inference stops at the raw
head outputs, concatenated over levels: class logits ``(N, anchors, num_classes)`` and box offsets
``(N, anchors, 4)`` (anchor generation, decoding and NMS are post-processing outside the graph).

The zoo's backbone uses a frozen BatchNorm; at inference that is exactly an eval-mode
BatchNorm2d, which is what this file uses (same parameter and buffer names).
"""

from __future__ import annotations

from typing import Any

import compiler.functional as F
import compiler.module as M
from compiler import hub
from compiler.hub._fpn import OneStageDetector, init_head
from compiler.tensor import Tensor

__all__ = [
    "RetinaNet",
    "retinanet_res18_coco_3x_800size",
    "retinanet_res34_coco_3x_800size",
    "retinanet_res50_coco_3x_800size",
    "retinanet_res101_coco_3x_800size",
]

_WEIGHTS = "https://data.megengine.org.cn/models/weights/"
# the zoo's anchors: 3 scales x 3 aspect ratios at every level
ANCHORS_PER_LOCATION = 9


class BoxHead(M.Module):
    """Class and box towers (``num_convs`` conv3x3+ReLU each) shared by all levels."""

    def __init__(self, in_channels: int, num_classes: int, num_anchors: int, num_convs: int = 4) -> None:
        super().__init__()
        cls_subnet: list[M.Module] = []
        bbox_subnet: list[M.Module] = []
        for _ in range(num_convs):
            cls_subnet += [M.Conv2d(in_channels, in_channels, 3, 1, 1), M.ReLU()]
            bbox_subnet += [M.Conv2d(in_channels, in_channels, 3, 1, 1), M.ReLU()]
        self.cls_subnet = M.Sequential(*cls_subnet)
        self.bbox_subnet = M.Sequential(*bbox_subnet)
        self.cls_score = M.Conv2d(in_channels, num_anchors * num_classes, 3, 1, 1)
        self.bbox_pred = M.Conv2d(in_channels, num_anchors * 4, 3, 1, 1)
        init_head(self, self.cls_score)

    def forward(self, features: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        logits = [self.cls_score(self.cls_subnet(f)) for f in features]
        offsets = [self.bbox_pred(self.bbox_subnet(f)) for f in features]
        return logits, offsets


class RetinaNet(OneStageDetector):
    """Outputs: class logits ``(N, anchors, num_classes)`` and box offsets ``(N, anchors, 4)``."""

    def __init__(
        self,
        depth: int = 50,
        layers: list[int] | None = None,
        width: int = 64,
        fpn_channels: int = 256,
        num_classes: int = 80,
        num_anchors: int = ANCHORS_PER_LOCATION,
        num_convs: int = 4,
    ) -> None:
        super().__init__(depth, layers, width, fpn_channels, num_classes, p6_from="res5")
        self.head = BoxHead(fpn_channels, num_classes, num_anchors, num_convs)

    def output_channels(self) -> tuple[int, ...]:
        return (self.num_classes, 4)

    def scores(self, image: Tensor) -> tuple[Tensor, Tensor]:
        """Per-anchor class probabilities (sigmoid, as the zoo's test path) and box offsets."""
        logits, offsets = self(image)
        return F.sigmoid(logits), offsets


@hub.pretrained(_WEIGHTS + "retinanet_res18_coco_3x_800size_35dot3_0c4956c8.pkl")
def retinanet_res18_coco_3x_800size(**kwargs: Any) -> RetinaNet:
    """RetinaNet (anchor-based detection) with a ResNet-18 + FPN backbone for COCO (80 classes), the
    zoo's 3x schedule at 800-pixel images (COCO AP 35.3 there). ``pretrained=True`` loads the zoo's
    weights from the local hub cache; other keywords go to RetinaNet."""
    return RetinaNet(**{"depth": 18, **kwargs})


@hub.pretrained(_WEIGHTS + "retinanet_res34_coco_3x_800size_38dot4_3485f9ec.pkl")
def retinanet_res34_coco_3x_800size(**kwargs: Any) -> RetinaNet:
    """RetinaNet (anchor-based detection) with a ResNet-34 + FPN backbone for COCO (80 classes), the
    zoo's 3x schedule at 800-pixel images (COCO AP 38.4 there). ``pretrained=True`` loads the zoo's
    weights from the local hub cache; other keywords go to RetinaNet."""
    return RetinaNet(**{"depth": 34, **kwargs})


@hub.pretrained(_WEIGHTS + "retinanet_res50_coco_3x_800size_39dot3_8eaec532.pkl")
def retinanet_res50_coco_3x_800size(**kwargs: Any) -> RetinaNet:
    """RetinaNet (anchor-based detection) with a ResNet-50 + FPN backbone for COCO (80 classes), the
    zoo's 3x schedule at 800-pixel images (COCO AP 39.3 there). ``pretrained=True`` loads the zoo's
    weights from the local hub cache; other keywords go to RetinaNet."""
    return RetinaNet(**{"depth": 50, **kwargs})


@hub.pretrained(_WEIGHTS + "retinanet_res101_coco_3x_800size_41dot4_73b01887.pkl")
def retinanet_res101_coco_3x_800size(**kwargs: Any) -> RetinaNet:
    """RetinaNet (anchor-based detection) with a ResNet-101 + FPN backbone for COCO (80 classes), the
    zoo's 3x schedule at 800-pixel images (COCO AP 41.4 there). ``pretrained=True`` loads the zoo's
    weights from the local hub cache; other keywords go to RetinaNet."""
    return RetinaNet(**{"depth": 101, **kwargs})
