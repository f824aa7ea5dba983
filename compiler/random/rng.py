"""MegEngine's ``random.rng``: :class:`RNG` objects drawing tensors from the distributions MegEngine
offers, and the module-level functions on the process-wide generator that ``random.seed`` resets.

Samples are float32 tensors (int32 for ``permutation`` of an integer and ``multinomial``). A
distribution parameter given as a Tensor adds its shape after ``size``, as in MegEngine:
``gamma(shape=Tensor((k, v)), size=(m, n))`` has shape ``(m, n, k, v)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = [
    "RNG",
    "beta",
    "exponential",
    "gamma",
    "multinomial",
    "normal",
    "permutation",
    "poisson",
    "seed",
    "shuffle",
    "uniform",
]


def _size(size: int | Iterable[int] | None) -> tuple[int, ...]:
    if size is None:
        return ()
    return (int(size),) if isinstance(size, int | np.integer) else tuple(int(s) for s in size)


def _param(value: Any, what: str) -> np.ndarray:
    from compiler.tensor import Tensor

    arr = value.numpy() if isinstance(value, Tensor) else np.asarray(value, np.float32)
    return np.asarray(arr, np.float64)


def _shape_of(size: int | Iterable[int] | None, *params: np.ndarray) -> tuple[int, ...]:
    """``size`` followed by the parameters' broadcast shape (MegEngine's rule)."""
    try:
        tail = np.broadcast_shapes(*(p.shape for p in params))
    except ValueError as exc:
        raise ValueError(f"the distribution parameters do not broadcast: {exc}") from None
    return _size(size) + tuple(tail)


class RNG:
    """A random-number generator of its own (``seed`` given), or one that draws from the
    process-wide generator that ``random.seed`` resets (``seed`` None)."""

    def __init__(self, seed: int | None = None, device: str | None = None) -> None:
        self._seed = seed
        self._own = np.random.default_rng(int(seed)) if seed is not None else None
        self._device = device  # where the samples are placed (MegEngine's handle device)

    def _gen(self) -> np.random.Generator:
        if self._own is not None:
            return self._own
        from compiler.random import generator

        return generator()

    def _tensor(self, arr: np.ndarray, dtype: str = "float32") -> Any:
        from compiler.jit.tracing import mark_varying
        from compiler.tensor import Tensor

        out = Tensor(np.ascontiguousarray(arr).astype(dtype), device=self._device)
        return mark_varying(out)  # a new sample each call

    def uniform(self, low: float = 0, high: float = 1, size: Iterable[int] | None = None) -> Any:
        """Samples of U(low, high)."""
        return self._tensor(self._gen().uniform(low, high, _size(size)))

    def normal(self, mean: float = 0, std: float = 1, size: Iterable[int] | None = None) -> Any:
        """Samples of N(mean, std^2)."""
        return self._tensor(self._gen().normal(mean, std, _size(size)))

    def gamma(self, shape: Any, scale: Any = 1, size: Iterable[int] | None = None) -> Any:
        """Samples of Gamma(shape k, scale theta)."""
        k, theta = _param(shape, "shape"), _param(scale, "scale")
        if np.any(k <= 0) or np.any(theta <= 0):
            raise ValueError("gamma: shape and scale must be positive")
        out = _shape_of(size, k, theta)
        return self._tensor(self._gen().gamma(np.broadcast_to(k, out), np.broadcast_to(theta, out)))

    def beta(self, alpha: Any, beta: Any, size: Iterable[int] | None = None) -> Any:
        """Samples of Beta(alpha, beta)."""
        a, b = _param(alpha, "alpha"), _param(beta, "beta")
        if np.any(a <= 0) or np.any(b <= 0):
            raise ValueError("beta: alpha and beta must be positive")
        out = _shape_of(size, a, b)
        return self._tensor(self._gen().beta(np.broadcast_to(a, out), np.broadcast_to(b, out)))

    def poisson(self, lam: Any, size: Iterable[int] | None = None) -> Any:
        """Samples of Poisson(lam), as float32 counts."""
        lam_arr = _param(lam, "lam")
        if np.any(lam_arr < 0):
            raise ValueError("poisson: lam must be non-negative")
        out = _shape_of(size, lam_arr)
        return self._tensor(self._gen().poisson(np.broadcast_to(lam_arr, out)))

    def exponential(self, rate: Any = 1.0, size: Iterable[int] | None = None) -> Any:
        """Samples of Exponential(rate) (scale 1 / rate)."""
        r = _param(rate, "rate")
        if np.any(r <= 0):
            raise ValueError("exponential: rate must be positive")
        out = _shape_of(size, r)
        return self._tensor(self._gen().exponential(1.0 / np.broadcast_to(r, out)))

    def multinomial(self, input: Any, num_samples: int, replacement: bool = False) -> Any:  # noqa: A002
        """``num_samples`` category indices per row of the (unnormalised) probabilities ``input``
        (one row, or a batch of rows), drawn with or without replacement (int32)."""
        p = _param(input, "input")
        if p.ndim not in (1, 2):
            raise ValueError(f"multinomial: input must be 1-D or 2-D, got shape {p.shape}")
        rows = p.reshape(-1, p.shape[-1])
        if np.any(rows < 0) or np.any(rows.sum(axis=1) <= 0):
            raise ValueError("multinomial: probabilities must be non-negative with a positive sum")
        if not replacement and len(rows) and num_samples > np.count_nonzero(rows, axis=1).min():
            raise ValueError("multinomial: num_samples exceeds the categories with non-zero probability")
        gen = self._gen()
        picks = [gen.choice(rows.shape[1], num_samples, replace=replacement, p=r / r.sum()) for r in rows]
        out = np.stack(picks).astype(np.int32) if picks else np.zeros((0, num_samples), np.int32)
        return self._tensor(out[0] if p.ndim == 1 else out, "int32")

    def permutation(self, n: Any, *, dtype: str = "int32") -> Any:
        """A random permutation of ``range(n)``, or a copy of the tensor ``n`` shuffled along axis 0."""
        from compiler.tensor import Tensor

        if isinstance(n, Tensor):
            return self._tensor(self._gen().permutation(n.numpy()), str(n.dtype))
        if dtype not in ("int32", "int16", "float32"):
            raise ValueError(f"permutation: dtype must be int32, int16 or float32, got {dtype}")
        return self._tensor(self._gen().permutation(int(n)), dtype)

    def shuffle(self, inp: Any) -> None:
        """Shuffle the tensor ``inp`` in place along its first axis."""
        inp._reset(self._gen().permutation(inp.numpy()))


_default = RNG()


def seed(value: int) -> None:
    from compiler.random import seed as _seed

    _seed(value)


uniform = _default.uniform
normal = _default.normal
gamma = _default.gamma
beta = _default.beta
poisson = _default.poisson
exponential = _default.exponential
multinomial = _default.multinomial
permutation = _default.permutation
shuffle = _default.shuffle
