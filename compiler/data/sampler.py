"""Samplers: which sample indices make up each batch.

A :class:`MapSampler` draws from a map-style dataset's indices and yields lists of ``batch_size``
indices (the last one shorter unless ``drop_last``); in a distributed run each rank takes every
``world_size``-th index. A :class:`StreamSampler` only counts, for stream datasets."""

from __future__ import annotations

import collections.abc
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Infinite",
    "MapSampler",
    "RandomSampler",
    "ReplacementSampler",
    "Sampler",
    "SequentialSampler",
    "StreamSampler",
]


class Sampler(ABC):
    """Base of every sampler."""

    @abstractmethod
    def __init__(self) -> None:
        pass


def _world(world_size: int | None, rank: int | None) -> tuple[int, int]:
    from compiler import distributed as dist

    on = dist.is_distributed()
    return (
        world_size if world_size is not None else (dist.get_world_size() if on else 1),
        rank if rank is not None else (dist.get_rank() if on else 0),
    )


class MapSampler(Sampler):
    """Batches of indices of a map-style dataset; subclasses define :meth:`sample`, the order of
    all indices. ``num_samples`` (default: the dataset's length) is split over ``world_size``
    ranks; ``seed`` seeds this sampler's own random state (0 when distributed and not given, so
    every rank draws the same order)."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_samples: int | None = None,
        world_size: int | None = None,
        rank: int | None = None,
        seed: int | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"{type(self).__name__}: batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"{type(self).__name__}: drop_last must be a bool, got {drop_last!r}")
        if num_samples is not None and (
            not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0
        ):
            raise ValueError(
                f"{type(self).__name__}: num_samples must be a positive int, got {num_samples!r}"
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.world_size, self.rank = _world(world_size, rank)
        total = len(dataset) if num_samples is None else num_samples
        self.num_samples = int(math.ceil(total / self.world_size))
        if self.num_samples < self.batch_size:
            raise ValueError(
                f"{type(self).__name__}: {self.num_samples} samples per rank is fewer than "
                f"batch_size={self.batch_size}"
            )
        if seed is None and self.world_size > 1:
            seed = 0
        self.rng = np.random.RandomState(seed)

    def __iter__(self) -> Iterator[list[Any]]:
        return self.batch()

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return -(-self.num_samples // self.batch_size)

    def sample(self) -> Any:
        """All sample indices, in the order they are to be drawn."""
        raise NotImplementedError(f"{type(self).__name__}.sample")

    def scatter(self, indices: list[Any]) -> list[Any]:
        """This rank's share: indices padded (by wrapping) to ``num_samples * world_size``, then
        every ``world_size``-th from ``rank``."""
        total = self.num_samples * self.world_size
        while len(indices) < total:
            indices = indices + indices[: total - len(indices)]
        return indices[self.rank : total : self.world_size]

    def batch(self) -> Iterator[list[Any]]:
        """Yield the batches of indices."""
        indices = list(self.sample())
        if self.world_size > 1:
            indices = self.scatter(indices)
        for start in range(0, len(indices), self.batch_size):
            chunk = indices[start : start + self.batch_size]
            if len(chunk) == self.batch_size or not self.drop_last:
                yield chunk


class StreamSampler(Sampler):
    """Batches of ``batch_size`` consecutive counts, without end, for a :class:`StreamDataset`
    (the loader reads that many samples per batch)."""

    def __init__(self, batch_size: int = 1) -> None:
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[list[int]]:
        return self.batch()

    def sample(self) -> Iterator[int]:
        return itertools.count()

    def batch(self) -> Iterator[list[int]]:
        counter = self.sample()
        while True:
            yield list(itertools.islice(counter, self.batch_size))


def _check_indices(owner: str, indices: Any) -> Any:
    if indices is not None and not isinstance(indices, collections.abc.Sequence):
        raise ValueError(f"{owner}: indices must be None or a sequence, got {indices!r}")
    return indices


class SequentialSampler(MapSampler):
    """Indices in order (``indices`` if given, else ``0 .. len(dataset) - 1``)."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        indices: Sequence[Any] | None = None,
        world_size: int | None = None,
        rank: int | None = None,
    ) -> None:
        super().__init__(dataset, batch_size, drop_last, None, world_size, rank)
        self.indices = _check_indices(type(self).__name__, indices)

    def sample(self) -> Any:
        return iter(range(len(self.dataset))) if self.indices is None else self.indices


class RandomSampler(MapSampler):
    """A new random permutation (without replacement) at each pass."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        indices: Sequence[Any] | None = None,
        world_size: int | None = None,
        rank: int | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(dataset, batch_size, drop_last, None, world_size, rank, seed)
        self.indices = _check_indices(type(self).__name__, indices)

    def sample(self) -> list[Any]:
        if self.indices is None:
            return self.rng.permutation(len(self.dataset)).tolist()
        return self.rng.permutation(self.indices).tolist()


class ReplacementSampler(MapSampler):
    """``num_samples`` indices drawn with replacement, with probabilities proportional to
    ``weights`` (uniform when None)."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_samples: int | None = None,
        weights: Sequence[float] | None = None,
        world_size: int | None = None,
        rank: int | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(dataset, batch_size, drop_last, num_samples, world_size, rank, seed)
        self.weights: np.ndarray | None = None
        if weights is not None:
            if not isinstance(weights, collections.abc.Sequence):
                raise ValueError(f"ReplacementSampler: weights must be None or a sequence, got {weights!r}")
            if len(weights) != len(dataset):
                raise ValueError(
                    f"ReplacementSampler: {len(weights)} weights for a dataset of length {len(dataset)}"
                )
            self.weights = np.asarray(weights, dtype=np.float64) / float(sum(weights))

    def sample(self) -> list[int]:
        size = self.num_samples * self.world_size
        return self.rng.choice(len(self.dataset), size=size, replace=True, p=self.weights).tolist()


class Infinite(MapSampler):
    """Wraps a map sampler and restarts it whenever it is exhausted: an endless iterator of
    batches. Its other attributes (``batch_size``, ...) are the wrapped sampler's."""

    def __init__(self, sampler: MapSampler) -> None:
        self.sampler = sampler
        self.sampler_iter = iter(sampler)

    def sample(self) -> Any:
        raise NotImplementedError("Infinite has no sample(); it iterates its wrapped sampler")

    def __iter__(self) -> Infinite:
        return self

    def __next__(self) -> list[Any]:
        try:
            return next(self.sampler_iter)
        except StopIteration:
            self.sampler_iter = iter(self.sampler)
            return next(self.sampler_iter)

    def __len__(self) -> int:
        return int(np.iinfo(np.int64).max)

    def __getattr__(self, name: str) -> Any:
        if name in ("sampler", "sampler_iter"):
            raise AttributeError(name)
        return getattr(self.sampler, name)
