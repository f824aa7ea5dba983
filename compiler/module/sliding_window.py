"""MegEngine's ``module.sliding_window``: ``F.sliding_window`` as a module."""

from __future__ import annotations

from collections.abc import Sequence

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor

__all__ = ["SlidingWindow"]


class SlidingWindow(Module):
    """The (KH, KW) windows of an NCHW input as (N, C, OH, OW, KH, KW)."""

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        padding: int | Sequence[int] = 0,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.kernel_size, self.padding, self.stride, self.dilation = kernel_size, padding, stride, dilation

    def forward(self, inp: Tensor) -> Tensor:
        return F.sliding_window(inp, self.kernel_size, self.padding, self.stride, self.dilation)
