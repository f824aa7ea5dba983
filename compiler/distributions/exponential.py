"""The exponential distribution."""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Number

import compiler.functional as F
from compiler.distributions.distribution import Distribution
from compiler.random import rng
from compiler.tensor import Tensor

__all__ = ["Exponential"]


class Exponential(Distribution):
    """Exponential(rate): density ``rate * exp(-rate * x)`` for x >= 0; ``rate`` is a number or a
    tensor of rates (its shape is the batch shape)."""

    def __init__(self, rate: Tensor | float) -> None:
        self.rate = Tensor(rate)
        super().__init__(batch_shape=() if isinstance(rate, Number) else tuple(self.rate.shape))

    @property
    def mean(self) -> Tensor:
        return 1.0 / self.rate

    @property
    def stddev(self) -> Tensor:
        return 1.0 / self.rate

    @property
    def variance(self) -> Tensor:
        return F.pow(self.rate, -2)

    def sample(self, sample_shape: Iterable[int] = ()) -> Tensor:
        """Samples of shape ``sample_shape + batch_shape``."""
        return rng.exponential(self.rate, tuple(sample_shape))

    def log_prob(self, value: Tensor) -> Tensor:
        return F.log(self.rate) - self.rate * value

    def cdf(self, value: Tensor) -> Tensor:
        return 1.0 - F.exp(-self.rate * value)

    def icdf(self, value: Tensor) -> Tensor:
        return -F.log1p(-value) / self.rate
