"""MegEngine's ``module.pixel_shuffle``: ``F.pixel_shuffle`` as a module."""

from __future__ import annotations

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor

__all__ = ["PixelShuffle"]


class PixelShuffle(Module):
    """Rearranges (..., C * r * r, H, W) into (..., C, H * r, W * r) for ``upscale_factor`` r."""

    def __init__(self, upscale_factor: int, name: str | None = None) -> None:
        super().__init__(name)
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.pixel_shuffle(x, self.upscale_factor)
