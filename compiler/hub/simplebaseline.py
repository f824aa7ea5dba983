"""SimpleBaseline (Xiao et al., 2018) human-pose estimator as in the zoo's
``official/vision/keypoints``: a ResNet's ``res5`` followed by stride-2 transposed convolutions
(each + BatchNorm + ReLU) and a 3x3 conv to one heatmap per keypoint. A 256x192 input gives 64x48
heatmaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import compiler.module as M
from compiler import hub
from compiler.hub._backbone import resnet_backbone
from compiler.tensor import Tensor

__all__ = ["SimpleBaseline", "simplebaseline_res50", "simplebaseline_res101", "simplebaseline_res152"]

_WEIGHTS = "https://data.megengine.org.cn/models/weights/keypoint_models/"
COCO_KEYPOINTS = 17


class DeconvLayers(M.Module):
    """``ConvTranspose2d(k, stride 2) + BN + ReLU`` per layer; padding k // 3 doubles H and W for
    k = 2 (no output padding needed), 3 (with output_padding 1) and 4."""

    def __init__(
        self, in_channels: int, channels: Sequence[int], kernel_sizes: Sequence[int], bias: bool = False
    ) -> None:
        super().__init__()
        if len(channels) != len(kernel_sizes):
            raise ValueError(f"one kernel size per deconv layer: {list(channels)} vs {list(kernel_sizes)}")
        body: list[M.Module] = []
        for out_channels, kernel in zip(channels, kernel_sizes, strict=True):
            if kernel not in (2, 3, 4):
                raise ValueError(f"deconv kernel size must be 2, 3 or 4, got {kernel}")
            body += [
                M.ConvTranspose2d(
                    in_channels, out_channels, kernel, 2, kernel // 3, int(kernel == 3), bias=bias
                ),
                M.BatchNorm2d(out_channels),
                M.ReLU(),
            ]
            in_channels = out_channels
        self.body = M.Sequential(*body)

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


class SimpleBaseline(M.Module):
    """SimpleBaseline pose estimation: a ResNet backbone (depth 18-152, or layers=[...]) whose last
    stage feeds stride-2 transposed convolutions (deconv_channels / deconv_kernel_sizes) and a 3x3
    convolution to one heatmap per keypoint; ``model(x)`` maps (N, 3, H, W) to (N, keypoint_num, H/4,
    W/4)."""

    def __init__(
        self,
        depth: int = 50,
        layers: list[int] | None = None,
        width: int = 64,
        deconv_channels: Sequence[int] = (256, 256, 256),
        deconv_kernel_sizes: Sequence[int] = (4, 4, 4),
        deconv_with_bias: bool = False,
        keypoint_num: int = COCO_KEYPOINTS,
    ) -> None:
        super().__init__()
        self.backbone = resnet_backbone(depth, layers, width)
        self.deconv_layers = DeconvLayers(
            self.backbone.channels("res5"), deconv_channels, deconv_kernel_sizes, deconv_with_bias
        )
        self.last_layer = M.Conv2d(deconv_channels[-1], keypoint_num, 3, 1, 1)
        for module in [*self.deconv_layers.modules(), self.last_layer]:
            if isinstance(module, M.Conv2d | M.ConvTranspose2d):
                M.init.normal_(module.weight, std=0.001)
                if module.bias is not None:
                    M.init.zeros_(module.bias)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: (N, 3, H, W) -> keypoint heatmaps (N, keypoint_num, H/4, W/4)."""
        return self.last_layer(self.deconv_layers(self.backbone.extract_features(x)["res5"]))

    def predict(self, images: Tensor) -> Tensor:
        return self(images)


@hub.pretrained(_WEIGHTS + "simplebaseline_res50_256x192_0to255_71dot1_2c0de7.pkl")
def simplebaseline_res50(**kwargs: Any) -> SimpleBaseline:
    """SimpleBaseline on a ResNet-50 for the 17 COCO keypoints, trained on 256x192 person crops with
    pixel values 0-255 (COCO keypoint AP 71.1 in the zoo); gives 64x48 heatmaps. ``pretrained=True``
    loads the zoo's weights from the local hub cache; other keywords go to SimpleBaseline."""
    return SimpleBaseline(**{"depth": 50, **kwargs})


@hub.pretrained(_WEIGHTS + "simplebaseline_res101_256x192_0to255_71dot8_df6304.pkl")
def simplebaseline_res101(**kwargs: Any) -> SimpleBaseline:
    """SimpleBaseline on a ResNet-101 for the 17 COCO keypoints, trained on 256x192 person crops with
    pixel values 0-255 (COCO keypoint AP 71.8 in the zoo); gives 64x48 heatmaps. ``pretrained=True``
    loads the zoo's weights from the local hub cache; other keywords go to SimpleBaseline."""
    return SimpleBaseline(**{"depth": 101, **kwargs})


@hub.pretrained(_WEIGHTS + "simplebaseline_res152_256x192_0to255_72dot3_18ba8e.pkl")
def simplebaseline_res152(**kwargs: Any) -> SimpleBaseline:
    """SimpleBaseline on a ResNet-152 for the 17 COCO keypoints, trained on 256x192 person crops with
    pixel values 0-255 (COCO keypoint AP 72.3 in the zoo); gives 64x48 heatmaps. ``pretrained=True``
    loads the zoo's weights from the local hub cache; other keywords go to SimpleBaseline."""
    return SimpleBaseline(**{"depth": 152, **kwargs})
