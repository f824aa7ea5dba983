"""MegEngine's ``megengine.distributions`` (experimental there): probability distributions that draw
samples with :mod:`compiler.random` and give densities with functional ops."""

from compiler.distributions.distribution import Distribution
from compiler.distributions.exponential import Exponential

__all__ = ["Distribution", "Exponential"]
