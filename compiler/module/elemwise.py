"""MegEngine's ``module.elemwise``: one elementwise mode as a module (a quantization unit)."""

from __future__ import annotations

from typing import Any

from compiler.core import op_error
from compiler.functional.elemwise import _elemwise
from compiler.module.module import Module
from compiler.tensor import Tensor
from dialects.enums import ElemwiseMode


class Elemwise(Module):
    """``Elemwise("ADD")(a, b)``; ``method`` is an ElemwiseMode name such as ADD, MUL,
    FUSE_ADD_RELU (case-insensitive)."""

    def __init__(self, method: str, **kwargs: Any) -> None:
        super().__init__(kwargs.get("name"))
        if str(method).upper() not in ElemwiseMode.__members__:
            raise op_error("Elemwise", f"unknown method {method!r}")
        self.method = str(method).upper()

    def forward(self, *inps: Any) -> Tensor:
        return _elemwise(self.method, *inps, label=self.method.lower())


__all__ = ["Elemwise"]
