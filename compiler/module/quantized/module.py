"""``QuantizedModule``: the base of int8 inference modules built by ``quantize`` from QAT ones."""

from __future__ import annotations

from typing import Any

from compiler.core import user_location
from compiler.module.module import Module


class QuantizedModule(Module):
    def __repr__(self) -> str:
        return "Quantized." + super().__repr__()  # as MegEngine prints quantized modules

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.training:
            raise ValueError(
                f"{type(self).__name__}: quantized modules only run inference; call .eval() first "
                f"(at {user_location()})"
            )
        return super().__call__(*args, **kwargs)

    @classmethod
    def from_qat_module(cls, qat_module: Module) -> QuantizedModule:
        raise NotImplementedError(f"{cls.__name__} does not define from_qat_module()")
