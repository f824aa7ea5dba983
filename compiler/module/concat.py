"""MegEngine's ``module.concat``: ``F.concat`` as a module (a quantization unit)."""

from __future__ import annotations

from collections.abc import Sequence

import compiler.functional as F
from compiler.module.module import Module
from compiler.tensor import Tensor


class Concat(Module):
    def forward(self, inps: Sequence[Tensor], axis: int = 0) -> Tensor:
        return F.concat(inps, axis)


__all__ = ["Concat"]
