"""The ResNet feature extractor the zoo's detection, segmentation and keypoint models build on.

The zoo takes ``official.vision.classification.resnet``'s ResNet and deletes its ``fc``; this is
that ResNet without the classifier (same parameter names: ``conv1``, ``bn1``, ``layer1``..``layer4``,
the blocks of :mod:`compiler.hub.resnet`) plus a ``width`` knob (64 in every zoo config) so tests
can build a small one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import compiler.functional as F
import compiler.module as M
from compiler.hub.resnet import DEPTHS, Block, Norm, _make_stage
from compiler.tensor import Tensor


class ResNetBackbone(M.Module):
    """ResNet stages ``res2``..``res5`` (strides 4..32) of ``width * 2**i * expansion`` channels."""

    def __init__(
        self,
        block: Block,
        layers: Sequence[int],
        width: int = 64,
        groups: int = 1,
        width_per_group: int = 64,
        replace_stride_with_dilation: Sequence[bool] | None = None,
        norm: Norm = M.BatchNorm2d,
    ) -> None:
        super().__init__()
        if len(layers) != 4:
            raise ValueError(f"a ResNet has 4 stages, got layers={list(layers)}")
        dilate = list(replace_stride_with_dilation or (False, False, False))
        if len(dilate) != 3:
            raise ValueError(f"replace_stride_with_dilation should have 3 entries, got {dilate}")
        self.block = block
        self.width = width
        self.groups = groups
        self.base_width = width_per_group
        self.in_channels = width
        self.dilation = 1
        self.conv1 = M.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = norm(width)
        self.maxpool = M.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = _make_stage(self, block, width, layers[0], 1, False, norm)
        self.layer2 = _make_stage(self, block, width * 2, layers[1], 2, dilate[0], norm)
        self.layer3 = _make_stage(self, block, width * 4, layers[2], 2, dilate[1], norm)
        self.layer4 = _make_stage(self, block, width * 8, layers[3], 2, dilate[2], norm)

    def channels(self, stage: str) -> int:
        """Channels of feature ``res2``..``res5``."""
        return self.width * 2 ** (int(stage[3:]) - 2) * self.block.expansion

    def extract_features(self, x: Tensor) -> dict[str, Tensor]:
        outputs = {}
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for i, layer in enumerate((self.layer1, self.layer2, self.layer3, self.layer4), start=2):
            x = layer(x)
            outputs[f"res{i}"] = x
        return outputs

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return self.extract_features(x)


def resnet_backbone(
    depth: int = 50, layers: Sequence[int] | None = None, width: int = 64, **kwargs: Any
) -> ResNetBackbone:
    """The zoo's ``resnet<depth>`` without ``fc``; ``layers`` overrides the blocks per stage."""
    if depth not in DEPTHS:
        raise ValueError(f"unknown ResNet depth {depth}; expected one of {sorted(DEPTHS)}")
    block, default_layers = DEPTHS[depth]
    return ResNetBackbone(block, layers if layers is not None else default_layers, width, **kwargs)
