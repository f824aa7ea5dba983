"""The ResNet feature extractor the zoo's detection, segmentation and keypoint models build on.

The zoo takes ``official.vision.classification.resnet``'s ResNet and deletes its ``fc``; this is
that ResNet without the classifier (same parameter names: ``conv1``, ``bn1``, ``layer1``..``layer4``,
the blocks of :mod:`compiler.hub.resnet`) plus a ``width`` knob (64 in every zoo config) so tests
can build a small one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compiler.hub.resnet import DEPTHS, _ResNetTrunk
from compiler.tensor import Tensor


class ResNetBackbone(_ResNetTrunk):
    """ResNet stages ``res2``..``res5`` (strides 4..32) of ``width * 2**i * expansion`` channels."""

    def channels(self, stage: str) -> int:
        """Channels of feature ``res2``..``res5``."""
        return self.width * 2 ** (int(stage[3:]) - 2) * self.block.expansion

    def extract_features(self, x: Tensor) -> dict[str, Tensor]:
        return {name: feature for name, feature in self._features(x) if name != "stem"}

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
