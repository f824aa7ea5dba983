"""The base class of :mod:`compiler.distributions`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compiler.tensor import Tensor

__all__ = ["Distribution"]


class Distribution:
    """A probability distribution over tensors of ``batch_shape + event_shape``; subclasses define
    what they can (``sample``, ``log_prob``, ``mean``, ...), the rest raise NotImplementedError."""

    def __init__(self, batch_shape: Iterable[int] = (), event_shape: Iterable[int] = ()) -> None:
        self._batch_shape = tuple(batch_shape)
        self._event_shape = tuple(event_shape)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The shape the parameters are batched over."""
        return self._batch_shape

    @property
    def event_shape(self) -> tuple[int, ...]:
        """The shape of one sample, without batching."""
        return self._event_shape

    def expand(self, batch_shape: Iterable[int], _instance: Any = None) -> Distribution:
        raise NotImplementedError(f"{type(self).__name__} does not define expand()")

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define mean")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define variance")

    @property
    def stddev(self) -> Tensor:
        return self.variance**0.5

    def sample(self, sample_shape: Iterable[int] = ()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define sample()")

    def log_prob(self, value: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define log_prob()")

    def cdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define cdf()")

    def icdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define icdf()")

    def _extended_shape(self, sample_shape: Iterable[int] = ()) -> tuple[int, ...]:
        """The shape of ``sample(sample_shape)``."""
        return tuple(sample_shape) + self._batch_shape + self._event_shape
