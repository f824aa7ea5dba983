"""Base of the vision datasets."""

from __future__ import annotations

from collections.abc import Sequence

from compiler.data.dataset.meta_dataset import Dataset

__all__ = ["VisionDataset"]


class VisionDataset(Dataset):
    """A dataset of images and annotations under ``root``; ``order`` names the fields each sample
    holds, a subset of ``supported_order`` (the same names the vision transforms use)."""

    supported_order: tuple[str, ...] = ()

    def __init__(
        self, root: str, *, order: Sequence[str] | None = None, supported_order: Sequence[str] | None = None
    ) -> None:
        super().__init__()
        self.root = root
        self.order = tuple(order) if order is not None else ("image",)
        supported = tuple(supported_order) if supported_order is not None else self.supported_order
        for key in self.order:
            if supported and key not in supported:
                raise NotImplementedError(f"{type(self).__name__}: field {key!r} is not one of {supported}")
        self.supported_order = supported

    def __getitem__(self, index: int):  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__}.__getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__}.__len__")
