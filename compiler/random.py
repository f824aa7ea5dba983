"""MegEngine's ``random``: one seeded generator for dropout, weight init and sampling.

``seed(n)`` makes everything that draws random numbers reproducible; ``get_state``/``set_state``
let a checkpoint store the generator so a resumed run draws the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def _shape(size: int | Sequence[int] | None) -> tuple[int, ...]:
    if size is None:
        return ()
    return (int(size),) if isinstance(size, int) else tuple(int(s) for s in size)


def uniform(low: float = 0.0, high: float = 1.0, size: int | Sequence[int] | None = None) -> Any:
    from compiler.tensor import Tensor

    return Tensor(_generator.uniform(low, high, _shape(size)).astype(np.float32))


def normal(mean: float = 0.0, std: float = 1.0, size: int | Sequence[int] | None = None) -> Any:
    from compiler.tensor import Tensor

    return Tensor(_generator.normal(mean, std, _shape(size)).astype(np.float32))


def permutation(n: int, dtype: str = "int32") -> Any:
    from compiler.tensor import Tensor

    return Tensor(_generator.permutation(int(n)), dtype=dtype)
