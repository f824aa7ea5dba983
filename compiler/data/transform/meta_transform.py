"""The transform base classes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

__all__ = ["CudaTransform", "PseudoTransform", "Transform"]


class Transform(ABC):
    """A per-sample transformation; subclasses define :meth:`apply`."""

    def apply_batch(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(self.apply(sample) for sample in inputs)

    @abstractmethod
    def apply(self, input: Any) -> Any: ...

    def __repr__(self) -> str:
        return type(self).__name__


class PseudoTransform(Transform):
    """The identity (what a DataLoader uses when given no transform)."""

    def apply(self, input: Any) -> Any:
        return input


class CudaTransform(Transform):
    """A transform of whole collated batches that a parallel DataLoader runs in the main process
    (where the device is), after its workers collate; a serial loader applies it per sample like
    any transform. The base class is the identity."""

    def apply(self, input: Any) -> Any:
        return input
