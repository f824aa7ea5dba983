"""Vision datasets read from their standard files on disk."""

from compiler.data.dataset.vision.meta_vision import VisionDataset

__all__ = ["VisionDataset"]
