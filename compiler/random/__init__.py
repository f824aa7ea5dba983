"""MegEngine's ``random``: one seeded generator for dropout, weight init and sampling.

``seed(n)`` makes everything that draws random numbers reproducible; ``get_state``/``set_state``
let a checkpoint store the generator so a resumed run draws the same numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_generator = np.random.default_rng(0)


def seed(value: int) -> None:
    global _generator
    _generator = np.random.default_rng(int(value))


def generator() -> np.random.Generator:
    """The process-wide generator (read it at each use: ``seed`` replaces it)."""
    return _generator


def get_state() -> dict[str, Any]:
    return _generator.bit_generator.state


def set_state(state: dict[str, Any]) -> None:
    _generator.bit_generator.state = state


# the distributions (module-level functions on the process-wide generator, and RNG objects)
from compiler.random.rng import (  # noqa: E402 - rng reads generator() defined above
    RNG,
    beta,
    exponential,
    gamma,
    multinomial,
    normal,
    permutation,
    poisson,
    shuffle,
    uniform,
)

__all__ = [
    "RNG",
    "beta",
    "exponential",
    "gamma",
    "get_state",
    "multinomial",
    "normal",
    "permutation",
    "poisson",
    "seed",
    "set_state",
    "shuffle",
    "uniform",
]
