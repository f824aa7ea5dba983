"""ResNeXt (Xie et al., 2017) as in MegEngine's model zoo: ResNet's bottleneck with grouped 3x3
convolutions (``groups`` x ``width_per_group``), from :mod:`compiler.hub.resnet`."""

from __future__ import annotations

from typing import Any

from compiler.hub.resnet import Bottleneck, ResNet, _resnet


def resnext50_32x4d(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNeXt-50 32x4d; ``layers=[...]`` overrides the depth (e.g. ``[1, 1, 1, 1]`` in tests)."""
    layers = kwargs.pop("layers", [3, 4, 6, 3])
    kwargs.setdefault("groups", 32)
    kwargs.setdefault("width_per_group", 4)
    return _resnet(Bottleneck, layers, pretrained, **kwargs)


def resnext101_32x8d(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNeXt-101 32x8d from "Aggregated Residual Transformations for Deep Neural Networks"
    (Xie et al., 2016)."""
    layers = kwargs.pop("layers", [3, 4, 23, 3])
    kwargs.setdefault("groups", 32)
    kwargs.setdefault("width_per_group", 8)
    return _resnet(Bottleneck, layers, pretrained, **kwargs)


__all__ = ["resnext50_32x4d", "resnext101_32x8d"]
