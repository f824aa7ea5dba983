"""DeepLabV3+ (Chen et al., 2018) as in the zoo's ``official/vision/segmentation``: a ResNet with
its last stage dilated (output stride 16), ASPP (a 1x1 branch, three 3x3 branches dilated 6/12/18
and an image-level pooling branch) and a decoder that merges the upsampled ASPP output with
``res2`` before predicting per-pixel class logits at the input resolution (bilinear Resize).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import compiler.functional as F
import compiler.module as M
from compiler import hub
from compiler.hub._backbone import resnet_backbone
from compiler.tensor import Tensor

__all__ = [
    "ASPP",
    "DeepLabV3Plus",
    "deeplabv3plus_res101_cityscapes_768size",
    "deeplabv3plus_res101_voc_512size",
]

_WEIGHTS = "https://data.megengine.org.cn/models/weights/"
ASPP_RATES = (6, 12, 18)


def _conv_bn_relu(in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1) -> M.Sequential:
    padding = dilation * (kernel_size // 2)
    return M.Sequential(
        M.Conv2d(in_channels, out_channels, kernel_size, 1, padding, dilation=dilation, bias=False),
        M.BatchNorm2d(out_channels),
        M.ReLU(),
    )


class ASPP(M.Module):
    """Atrous spatial pyramid pooling; ``dilation_scale`` multiplies the rates (2 at stride 8)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        dilation_scale: int = 1,
        rates: Sequence[int] = ASPP_RATES,
    ) -> None:
        super().__init__()
        if len(rates) != 3:
            raise ValueError(f"ASPP has three dilated branches, got rates={list(rates)}")
        self.conv1 = _conv_bn_relu(in_channels, out_channels, 1)
        self.conv2 = _conv_bn_relu(in_channels, out_channels, 3, rates[0] * dilation_scale)
        self.conv3 = _conv_bn_relu(in_channels, out_channels, 3, rates[1] * dilation_scale)
        self.conv4 = _conv_bn_relu(in_channels, out_channels, 3, rates[2] * dilation_scale)
        self.conv_gp = _conv_bn_relu(in_channels, out_channels, 1)
        self.conv_out = _conv_bn_relu(out_channels * 5, out_channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        # image-level context: global average, 1x1 conv, broadcast back by resizing 1x1 -> HxW
        pooled = self.conv_gp(F.mean(x, [2, 3], True))
        pooled = F.vision.interpolate(pooled, x.shape[2:], mode="bilinear")
        branches = [self.conv1(x), self.conv2(x), self.conv3(x), self.conv4(x), pooled]
        return self.conv_out(F.concat(branches, axis=1))


class DeepLabV3Plus(M.Module):
    """DeepLabV3+ semantic segmentation: a ResNet backbone (depth 18/34/50/101/152, or layers=[...])
    with its last stage dilated to output_stride 16 (or 8), ASPP, and a decoder merging the upsampled
    context with the stride-4 features; ``model(x)`` maps (N, 3, H, W) to per-pixel class logits (N,
    num_classes, H, W)."""

    def __init__(
        self,
        num_classes: int = 21,
        depth: int = 101,
        layers: list[int] | None = None,
        width: int = 64,
        aspp_channels: int = 256,
        decoder_channels: int = 256,
        low_level_channels: int = 48,
        output_stride: int = 16,
    ) -> None:
        super().__init__()
        if output_stride not in (8, 16):
            raise ValueError(f"output_stride must be 8 or 16, got {output_stride}")
        self.num_classes = num_classes
        self.output_stride = output_stride
        # stride 16 dilates res5; stride 8 dilates res4 and res5
        self.backbone = resnet_backbone(
            depth, layers, width, replace_stride_with_dilation=[False, output_stride == 8, True]
        )
        self.aspp = ASPP(self.backbone.channels("res5"), aspp_channels, 16 // output_stride)
        self.dropout = M.Dropout(0.5)
        self.upstage1 = _conv_bn_relu(self.backbone.channels("res2"), low_level_channels, 1)
        self.upstage2 = M.Sequential(
            *_conv_bn_relu(aspp_channels + low_level_channels, decoder_channels, 3),
            M.Dropout(0.5),
            *_conv_bn_relu(decoder_channels, decoder_channels, 3),
            M.Dropout(0.1),
        )
        self.conv_out = M.Conv2d(decoder_channels, num_classes, 1)
        for module in self.modules():
            if isinstance(module, M.Conv2d) and not _inside(module, self.backbone):
                M.init.msra_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        """``x``: (N, 3, H, W) -> per-pixel class logits (N, num_classes, H, W)."""
        features = self.backbone.extract_features(x)
        low_level = features["res2"]
        context = self.dropout(self.aspp(features["res5"]))
        context = F.vision.interpolate(context, low_level.shape[2:], mode="bilinear")
        merged = F.concat([context, self.upstage1(low_level)], axis=1)
        logits = self.conv_out(self.upstage2(merged))
        return F.vision.interpolate(logits, x.shape[2:], mode="bilinear")


def _inside(module: M.Module, parent: M.Module) -> bool:
    return any(module is m for m in parent.modules())


@hub.pretrained(_WEIGHTS + "deeplabv3plus_res101_voc_512size_79dot5_7856dc84.pkl")
def deeplabv3plus_res101_voc_512size(**kwargs: Any) -> DeepLabV3Plus:
    """DeepLabV3+ on a ResNet-101 for PASCAL VOC 2012 (21 classes), trained on 512x512 inputs.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords go to
    DeepLabV3Plus."""
    return DeepLabV3Plus(**{"num_classes": 21, **kwargs})


@hub.pretrained(_WEIGHTS + "deeplabv3plus_res101_cityscapes_768size_78dot5_c45e0cb9.pkl")
def deeplabv3plus_res101_cityscapes_768size(**kwargs: Any) -> DeepLabV3Plus:
    """DeepLabV3+ on a ResNet-101 for Cityscapes (19 classes), trained on 768x768 crops.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords go to
    DeepLabV3Plus."""
    return DeepLabV3Plus(**{"num_classes": 19, **kwargs})
