"""The abstract dataset kinds and the two generic concrete ones."""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["ArrayDataset", "ConcatDataset", "Dataset", "StreamDataset"]


class Dataset(ABC):
    """A map-style dataset: ``__getitem__(index)`` gives one sample, ``__len__`` their number.
    Abstract: subclasses define both (and ``__init__``)."""

    @abstractmethod
    def __init__(self) -> None:
        pass

    @abstractmethod
    def __getitem__(self, index: int) -> Any: ...

    @abstractmethod
    def __len__(self) -> int: ...


class StreamDataset(Dataset):
    """A dataset read as a stream: subclasses define ``__iter__``; it has no length and no index."""

    @abstractmethod
    def __init__(self) -> None:
        pass

    @abstractmethod
    def __iter__(self) -> Iterator[Any]: ...

    def __getitem__(self, index: int) -> Any:
        raise AssertionError(f"{type(self).__name__} is a StreamDataset: it cannot be indexed")

    def __len__(self) -> int:
        raise AssertionError(f"{type(self).__name__} is a StreamDataset: it has no length")


class ArrayDataset(Dataset):
    """Samples ``(a[i], b[i], ...)`` of arrays that share their first dimension."""

    def __init__(self, *arrays: Any) -> None:
        super().__init__()
        if not arrays:
            raise ValueError("ArrayDataset: give at least one array")
        lengths = [len(a) for a in arrays]
        if any(n != lengths[0] for n in lengths):
            raise ValueError(f"ArrayDataset: the arrays' lengths differ: {lengths}")
        self.arrays = arrays

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        return tuple(a[index] for a in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])


class ConcatDataset(Dataset):
    """The samples of several map-style datasets, one after another."""

    def __init__(self, datasets: Sequence[Dataset]) -> None:
        super().__init__()
        self.datasets = list(datasets)
        assert self.datasets, "ConcatDataset: datasets must not be empty"
        for d in self.datasets:
            assert not isinstance(d, StreamDataset), "ConcatDataset does not take a StreamDataset"
        self.cumulative_sizes: list[int] = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            if -index > len(self):
                raise ValueError(f"ConcatDataset: index {index} out of range for length {len(self)}")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]
