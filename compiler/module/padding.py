"""MegEngine's ``module.padding``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor


class Pad(Module):
    """``F.nn.pad`` with fixed ``pad_width``, ``mode`` and constant value."""

    def __init__(
        self,
        pad_width: Sequence[Sequence[int]],
        mode: str = "constant",
        constant_val: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.pad_width, self.mode, self.pad_val = pad_width, mode, constant_val

    def forward(self, src: Tensor) -> Tensor:
        return F.nn.pad(src, pad_width=self.pad_width, mode=self.mode, constant_value=self.pad_val)


__all__ = ["Pad"]
