"""MegEngine 1.13's ``data`` API: datasets, samplers, transforms, a collator and a DataLoader that
combines them (serially, or with worker processes).

Everything here works on numpy arrays on the host; a batch becomes a :class:`~compiler.Tensor`
only when the loader is asked to ``preload`` it (or the user converts it)."""

from compiler.data import dataset, sampler, transform  # noqa: F401 - MegEngine's sub-module layout
from compiler.data.collator import Collator
from compiler.data.dataloader import DataLoader, get_worker_info
from compiler.data.sampler import (
    Infinite,
    MapSampler,
    RandomSampler,
    ReplacementSampler,
    Sampler,
    SequentialSampler,
    StreamSampler,
)

__all__ = [
    "Collator",
    "DataLoader",
    "Infinite",
    "MapSampler",
    "RandomSampler",
    "ReplacementSampler",
    "Sampler",
    "SequentialSampler",
    "StreamSampler",
    "get_worker_info",
]
