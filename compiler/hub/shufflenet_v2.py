"""ShuffleNetV2 (Ma et al., 2018) as in MegEngine's model hub (``megengine/models``'
``shufflenet/model.py``, from Megvii's ShuffleNet-Series): the same module tree and parameter names
(``first_conv``, ``features.N.branch_main``/``branch_proj``, ``conv_last``, ``classifier``), so
MegEngine state dicts load unchanged.

The only departure: the global pool covers whatever spatial extent is left (7x7 for a 224x224
input, exactly MegEngine's ``AvgPool2d(7)``), so smaller inputs work in tests.
"""

from __future__ import annotations

from typing import Any

import compiler.functional as F
import compiler.module as M
from compiler.tensor import Tensor

STAGE_OUT_CHANNELS = {
    "0.5x": (-1, 24, 48, 96, 192, 1024),
    "1.0x": (-1, 24, 116, 232, 464, 1024),
    "1.5x": (-1, 24, 176, 352, 704, 1024),
    "2.0x": (-1, 24, 244, 488, 976, 2048),
}


class ShuffleV2Block(M.Module):
    """ShuffleNetV2's unit. At stride 1 the channels are split in half (channel shuffle), one half
    passes unchanged and the other goes through 1x1, ksize x ksize depthwise and 1x1 convolutions; at
    stride 2 both the input (through a depthwise + 1x1 projection) and the main branch are
    downsampled. The halves are concatenated to ``oup`` channels."""

    def __init__(self, inp: int, oup: int, mid_channels: int, *, ksize: int, stride: int) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"ShuffleV2Block: stride must be 1 or 2, got {stride}")
        self.stride = stride
        self.mid_channels = mid_channels
        self.ksize = ksize
        pad = ksize // 2
        self.pad = pad
        self.inp = inp
        outputs = oup - inp
        self.branch_main = M.Sequential(
            M.Conv2d(inp, mid_channels, 1, 1, 0, bias=False),  # pw
            M.BatchNorm2d(mid_channels),
            M.ReLU(),
            M.Conv2d(mid_channels, mid_channels, ksize, stride, pad, groups=mid_channels, bias=False),  # dw
            M.BatchNorm2d(mid_channels),
            M.Conv2d(mid_channels, outputs, 1, 1, 0, bias=False),  # pw-linear
            M.BatchNorm2d(outputs),
            M.ReLU(),
        )
        self.branch_proj: M.Module | None = None
        if stride == 2:
            self.branch_proj = M.Sequential(
                M.Conv2d(inp, inp, ksize, stride, pad, groups=inp, bias=False),  # dw
                M.BatchNorm2d(inp),
                M.Conv2d(inp, inp, 1, 1, 0, bias=False),  # pw-linear
                M.BatchNorm2d(inp),
                M.ReLU(),
            )

    def forward(self, old_x: Tensor) -> Tensor:
        if self.branch_proj is None:
            x_proj, x = self.channel_shuffle(old_x)
            return F.concat((x_proj, self.branch_main(x)), 1)
        return F.concat((self.branch_proj(old_x), self.branch_main(old_x)), 1)

    @staticmethod
    def channel_shuffle(x: Tensor) -> tuple[Tensor, Tensor]:
        """Split the channels into the even and the odd ones (MegEngine's reshape/transpose form)."""
        batchsize, num_channels, height, width = x.shape
        x = x.reshape(batchsize * num_channels // 2, 2, height * width)
        x = F.transpose(x, (1, 0, 2))
        x = x.reshape(2, -1, num_channels // 2, height, width)
        return x[0], x[1]


class ShuffleNetV2(M.Module):
    """ShuffleNetV2 image classification at ``model_size`` 0.5x, 1.0x, 1.5x or 2.0x (the stage widths):
    a 3x3 stride-2 stem and max pool, three stages of ShuffleV2Blocks, a 1x1 convolution, global
    pooling and a linear classifier. (N, 3, input_size, input_size) images give (N, num_classes)
    logits."""

    def __init__(self, input_size: int = 224, num_classes: int = 1000, model_size: str = "1.5x") -> None:
        super().__init__()
        if model_size not in STAGE_OUT_CHANNELS:
            raise ValueError(
                f"ShuffleNetV2: model_size must be one of {sorted(STAGE_OUT_CHANNELS)}, got {model_size!r}"
            )
        self.stage_repeats = (4, 8, 4)
        self.model_size = model_size
        self.stage_out_channels = STAGE_OUT_CHANNELS[model_size]
        input_channel = self.stage_out_channels[1]
        self.first_conv = M.Sequential(
            M.Conv2d(3, input_channel, 3, 2, 1, bias=False), M.BatchNorm2d(input_channel), M.ReLU()
        )
        self.maxpool = M.MaxPool2d(kernel_size=3, stride=2, padding=1)
        features: list[M.Module] = []
        for stage, repeats in enumerate(self.stage_repeats):
            output_channel = self.stage_out_channels[stage + 2]
            for i in range(repeats):
                if i == 0:
                    block = ShuffleV2Block(
                        input_channel, output_channel, output_channel // 2, ksize=3, stride=2
                    )
                else:
                    block = ShuffleV2Block(
                        input_channel // 2, output_channel, output_channel // 2, ksize=3, stride=1
                    )
                features.append(block)
                input_channel = output_channel
        self.features = M.Sequential(*features)
        last = self.stage_out_channels[-1]
        self.conv_last = M.Sequential(
            M.Conv2d(input_channel, last, 1, 1, 0, bias=False), M.BatchNorm2d(last), M.ReLU()
        )
        if model_size == "2.0x":
            self.dropout = M.Dropout(0.2)
        self.classifier = M.Sequential(M.Linear(last, num_classes, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.first_conv(x))
        x = self.conv_last(self.features(x))
        x = F.avg_pool2d(x, x.shape[2:])
        if self.model_size == "2.0x":
            x = self.dropout(x)
        x = x.reshape(-1, self.stage_out_channels[-1])
        return self.classifier(x)


def _shufflenet(model_size: str, pretrained: bool, **kwargs: Any) -> ShuffleNetV2:
    if pretrained:
        raise NotImplementedError(
            "xmge's hub has no pretrained weights; load a state dict with load_state_dict"
        )
    return ShuffleNetV2(model_size=model_size, **kwargs)


def shufflenet_v2_x0_5(pretrained: bool = False, **kwargs: Any) -> ShuffleNetV2:
    """ShuffleNetV2 with 0.5x output channels, from "ShuffleNet V2" (Ma et al., 2018)."""
    return _shufflenet("0.5x", pretrained, **kwargs)


def shufflenet_v2_x1_0(pretrained: bool = False, **kwargs: Any) -> ShuffleNetV2:
    """ShuffleNetV2 with 1.0x output channels, from "ShuffleNet V2" (Ma et al., 2018)."""
    return _shufflenet("1.0x", pretrained, **kwargs)


def shufflenet_v2_x1_5(pretrained: bool = False, **kwargs: Any) -> ShuffleNetV2:
    """ShuffleNetV2 with 1.5x output channels, from "ShuffleNet V2" (Ma et al., 2018)."""
    return _shufflenet("1.5x", pretrained, **kwargs)


def shufflenet_v2_x2_0(pretrained: bool = False, **kwargs: Any) -> ShuffleNetV2:
    """ShuffleNetV2 with 2.0x output channels, from "ShuffleNet V2" (Ma et al., 2018)."""
    return _shufflenet("2.0x", pretrained, **kwargs)
