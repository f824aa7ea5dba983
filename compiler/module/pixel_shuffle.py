"""MegEngine's ``module.pixel_shuffle``."""

from __future__ import annotations

from typing import Any

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor


class PixelShuffle(Module):
    """``F.nn.pixel_shuffle`` by a fixed factor."""

    def __init__(self, upscale_factor: int, **kwargs: Any) -> None:
        super().__init__(kwargs.get("name"))
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.nn.pixel_shuffle(x, self.upscale_factor)


__all__ = ["PixelShuffle"]
