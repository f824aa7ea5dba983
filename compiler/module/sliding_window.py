"""MegEngine's ``module.sliding_window``: the window extraction and its adjoint as modules."""

from __future__ import annotations

from typing import Any

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor


class SlidingWindow(Module):
    """``F.nn.sliding_window``: (N, C, H, W) to its (N, C, OH, OW, kh, kw) windows."""

    def __init__(
        self, kernel_size: Any, padding: Any = 0, stride: Any = 1, dilation: Any = 1, **kwargs: Any
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.kernel_size, self.padding, self.stride, self.dilation = kernel_size, padding, stride, dilation

    def forward(self, inp: Tensor) -> Tensor:
        return F.nn.sliding_window(inp, self.kernel_size, self.padding, self.stride, self.dilation)


class SlidingWindowTranspose(Module):
    """``F.nn.sliding_window_transpose``: windows summed back into an ``output_size`` image."""

    def __init__(
        self,
        output_size: Any,
        kernel_size: Any,
        padding: Any = 0,
        stride: Any = 1,
        dilation: Any = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.output_size, self.kernel_size = output_size, kernel_size
        self.padding, self.stride, self.dilation = padding, stride, dilation

    def forward(self, inp: Tensor) -> Tensor:
        return F.nn.sliding_window_transpose(
            inp, self.output_size, self.kernel_size, self.padding, self.stride, self.dilation
        )


__all__ = ["SlidingWindow", "SlidingWindowTranspose"]
