"""ResNet (He et al., 2015) as in MegEngine's model hub (``megengine.vision``'s ``resnet.py``):
the same module tree and parameter names, so MegEngine state dicts load unchanged.

The only departure: the final average pool covers whatever spatial extent is left (7x7 for a
224x224 input, exactly MegEngine's ``avg_pool2d(x, 7)``), so smaller inputs work in tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import compiler.functional as F
import compiler.module as M
from compiler.tensor import Tensor

Norm = Callable[[int], M.Module]


class BasicBlock(M.Module):
    """ResNet's two-layer block (ResNet-18/34): two 3x3 convolutions with BatchNorm, ReLU between them
    and after the residual addition; the shortcut is a strided 1x1 convolution + norm where the shape
    changes."""

    expansion = 1

    def __init__(
        self,
        in_channels: int,
        channels: int,
        stride: int = 1,
        groups: int = 1,
        base_width: int = 64,
        dilation: int = 1,
        norm: Norm = M.BatchNorm2d,
    ) -> None:
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        self.conv1 = M.Conv2d(in_channels, channels, 3, stride, padding=dilation, bias=False)
        self.bn1 = norm(channels)
        self.conv2 = M.Conv2d(channels, channels, 3, 1, padding=1, bias=False)
        self.bn2 = norm(channels)
        self.downsample = _downsample(in_channels, channels, stride, norm)

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        return F.relu(x + self.downsample(identity))


class Bottleneck(M.Module):
    """ResNet's three-layer block (ResNet-50 and deeper, ResNeXt): 1x1 reduce, 3x3 (grouped for ResNeXt,
    possibly dilated) and 1x1 expand to ``channels * 4``, each with BatchNorm, ReLU after the
    residual addition; the shortcut is a strided 1x1 convolution + norm where the shape changes."""

    expansion = 4

    def __init__(
        self,
        in_channels: int,
        channels: int,
        stride: int = 1,
        groups: int = 1,
        base_width: int = 64,
        dilation: int = 1,
        norm: Norm = M.BatchNorm2d,
    ) -> None:
        super().__init__()
        width = int(channels * (base_width / 64.0)) * groups
        self.conv1 = M.Conv2d(in_channels, width, 1, 1, bias=False)
        self.bn1 = norm(width)
        self.conv2 = M.Conv2d(
            width, width, 3, stride, padding=dilation, groups=groups, dilation=dilation, bias=False
        )
        self.bn2 = norm(width)
        self.conv3 = M.Conv2d(width, channels * self.expansion, 1, 1, bias=False)
        self.bn3 = norm(channels * self.expansion)
        self.downsample = _downsample(in_channels, channels * self.expansion, stride, norm)

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        return F.relu(x + self.downsample(identity))


def _downsample(in_channels: int, out_channels: int, stride: int, norm: Norm) -> M.Module:
    if in_channels == out_channels and stride == 1:
        return M.Identity()
    return M.Sequential(M.Conv2d(in_channels, out_channels, 1, stride, bias=False), norm(out_channels))


Block = type[BasicBlock] | type[Bottleneck]

# depth -> (block, blocks per stage): resnet18 .. resnet152
DEPTHS: dict[int, tuple[Block, tuple[int, int, int, int]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


class _ResNetTrunk(M.Module):
    """What ResNet and the zoo's detection backbone share: the stem (``conv1``, ``bn1``,
    ``maxpool``) and the stages ``layer1``..``layer4`` of ``width * 2**i`` base channels, each
    block stride 2 but the first (a dilated stage trades its stride for dilation)."""

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
        self.layer1 = self._make_layer(block, width, layers[0], norm=norm)
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2, dilate=dilate[0], norm=norm)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2, dilate=dilate[1], norm=norm)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2, dilate=dilate[2], norm=norm)

    def _make_layer(
        self,
        block: Block,
        channels: int,
        blocks: int,
        stride: int = 1,
        dilate: bool = False,
        norm: Norm = M.BatchNorm2d,
    ) -> M.Sequential:
        """One stage, advancing the running ``in_channels`` and ``dilation``."""
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        layers: list[M.Module] = [
            block(self.in_channels, channels, stride, self.groups, self.base_width, previous_dilation, norm)
        ]
        self.in_channels = channels * block.expansion
        for _ in range(1, blocks):
            layers.append(
                block(self.in_channels, channels, 1, self.groups, self.base_width, self.dilation, norm)
            )
        return M.Sequential(*layers)

    def _features(self, x: Tensor) -> Iterator[tuple[str, Tensor]]:
        """``("stem", ...)`` then ``("res2", ...)``..``("res5", ...)``, strides 4..32."""
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        yield "stem", x
        for i, layer in enumerate((self.layer1, self.layer2, self.layer3, self.layer4), start=2):
            x = layer(x)
            yield f"res{i}", x


class ResNet(_ResNetTrunk):
    """A ResNet of ``block`` (BasicBlock or Bottleneck) with ``layers`` blocks in each of its four
    stages: a 7x7 stride-2 stem and max pool, the stages (stride 2 from the second, or dilated with
    ``replace_stride_with_dilation``), global average pooling and a linear classifier.
    ``extract_features(x)`` gives the stage outputs res2..res5."""

    def __init__(
        self,
        block: Block,
        layers: Sequence[int],
        num_classes: int = 1000,
        zero_init_residual: bool = False,
        groups: int = 1,
        width_per_group: int = 64,
        replace_stride_with_dilation: Sequence[bool] | None = None,
        norm: Norm = M.BatchNorm2d,
    ) -> None:
        super().__init__(block, layers, 64, groups, width_per_group, replace_stride_with_dilation, norm)
        self.fc = M.Linear(512 * block.expansion, num_classes)
        if zero_init_residual:
            for m in self.modules():
                last_bn = getattr(m, "bn3" if isinstance(m, Bottleneck) else "bn2", None)
                if isinstance(m, BasicBlock | Bottleneck) and last_bn is not None:
                    last_bn.weight._reset(last_bn.weight.numpy() * 0)

    def extract_features(self, x: Tensor) -> dict[str, Tensor]:
        return dict(self._features(x))

    def forward(self, x: Tensor) -> Tensor:
        x = self.extract_features(x)["res5"]
        x = F.avg_pool2d(x, x.shape[2:])
        x = F.flatten(x, 1)
        return self.fc(x)


def _resnet(block: Block, layers: Sequence[int], pretrained: bool, **kwargs: Any) -> ResNet:
    if pretrained:
        raise NotImplementedError(
            "xmge's hub has no pretrained weights; load a state dict with load_state_dict"
        )
    return ResNet(block, layers, **kwargs)


def resnet18(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-18 image classification, from "Deep Residual Learning for Image Recognition" (He et al.,
    2015): (N, 3, H, W) images to (N, num_classes) logits (1000 ImageNet classes by default);
    keywords go to ResNet. ImageNet weights: ``hub.load("megengine/models", "resnet18",
    pretrained=True)`` reads resnet18.pkl from the local hub cache (a direct call refuses
    ``pretrained=True``)."""
    return _resnet(*DEPTHS[18], pretrained, **kwargs)


def resnet34(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-34 image classification, from "Deep Residual Learning for Image Recognition" (He et al.,
    2015): (N, 3, H, W) images to (N, num_classes) logits (1000 ImageNet classes by default);
    keywords go to ResNet. ImageNet weights: ``hub.load("megengine/models", "resnet34",
    pretrained=True)`` reads resnet34.pkl from the local hub cache (a direct call refuses
    ``pretrained=True``)."""
    return _resnet(*DEPTHS[34], pretrained, **kwargs)


def resnet50(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-50 image classification, from "Deep Residual Learning for Image Recognition" (He et al.,
    2015): (N, 3, H, W) images to (N, num_classes) logits (1000 ImageNet classes by default);
    keywords go to ResNet. ImageNet weights: ``hub.load("megengine/models", "resnet50",
    pretrained=True)`` reads resnet50.pkl from the local hub cache (a direct call refuses
    ``pretrained=True``)."""
    return _resnet(*DEPTHS[50], pretrained, **kwargs)


def resnet101(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-101 image classification, from "Deep Residual Learning for Image Recognition" (He et al.,
    2015): (N, 3, H, W) images to (N, num_classes) logits (1000 ImageNet classes by default);
    keywords go to ResNet. ImageNet weights: ``hub.load("megengine/models", "resnet101",
    pretrained=True)`` reads resnet101.pkl from the local hub cache (a direct call refuses
    ``pretrained=True``)."""
    return _resnet(*DEPTHS[101], pretrained, **kwargs)
