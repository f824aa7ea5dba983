"""MegEngine's ``module.padding``: ``F.nn.pad`` as a module."""

from __future__ import annotations

from collections.abc import Sequence

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor

__all__ = ["Pad"]


class Pad(Module):
    """Pads its input by ``pad_width`` ((front, back) per leading axis) in ``mode`` "constant"
    (with ``constant_val``), "reflect", "replicate" or "edge"."""

    def __init__(
        self,
        pad_width: Sequence[Sequence[int]],
        mode: str = "constant",
        constant_val: float = 0.0,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.pad_width = pad_width
        self.mode = mode
        self.pad_val = constant_val

    def forward(self, src: Tensor) -> Tensor:
        return F.nn.pad(src, pad_width=self.pad_width, mode=self.mode, constant_value=self.pad_val)
