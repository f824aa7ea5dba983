"""Datasets: map-style (:class:`Dataset`, indexed) and stream-style (:class:`StreamDataset`,
iterated), plus the vision datasets."""

from compiler.data.dataset.meta_dataset import ArrayDataset, ConcatDataset, Dataset, StreamDataset
from compiler.data.dataset.vision import *  # noqa: F403
from compiler.data.dataset.vision import __all__ as _vision_all

__all__ = ["ArrayDataset", "ConcatDataset", "Dataset", "StreamDataset", *_vision_all]
