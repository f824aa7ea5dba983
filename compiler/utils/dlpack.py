"""MegEngine's ``utils.dlpack``: exchange tensors with other frameworks through DLPack. xmge's
tensors are host arrays, so only CPU DLPack tensors are exchanged; the memory is shared."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.core import XmgeError
from compiler.tensor import Tensor

__all__ = ["from_dlpack", "to_dlpack"]


class DLPackError(XmgeError, RuntimeError):
    """A DLPack tensor xmge cannot take (not on the CPU, or of an unsupported dtype)."""


def to_dlpack(tensor: Tensor, stream: Any = None) -> Any:
    """A DLPack capsule (``PyCapsule`` named "dltensor") sharing ``tensor``'s memory."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_dlpack: expected a Tensor, got {type(tensor).__name__}")
    return tensor.__dlpack__(stream)


class _Capsule:
    """A bare capsule presented as a DLPack producer (numpy takes producers, not capsules)."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # a capsule that is not on the CPU is refused by numpy when it is read


def from_dlpack(ext_tensor: Any, stream: Any = None) -> Tensor:
    """A Tensor sharing the memory of ``ext_tensor``: a DLPack capsule or an object with
    ``__dlpack__`` (a torch tensor, a numpy array, ...). ``stream`` must be None: CPU only.
    64-bit data is converted to 32 bits (a copy), as ``Tensor()`` converts it."""
    if stream is not None:
        raise DLPackError(f"from_dlpack: xmge tensors are on the CPU, which has no stream {stream!r}")
    producer = ext_tensor if hasattr(ext_tensor, "__dlpack__") else _Capsule(ext_tensor)
    if hasattr(ext_tensor, "__dlpack_device__") and ext_tensor.__dlpack_device__()[0] != 1:
        raise DLPackError(
            f"from_dlpack: the tensor is on device {ext_tensor.__dlpack_device__()}, xmge reads CPU tensors"
        )
    try:
        array = np.from_dlpack(producer)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise DLPackError(f"from_dlpack: cannot read the DLPack tensor: {exc}") from None
    if array.dtype in (np.int64, np.uint64, np.float64):
        return Tensor(array)  # converted to xmge's (MegEngine's) 32-bit dtypes, as Tensor() does
    return Tensor._from_array(array)
