"""Data-augmentation modules of MegEngine's ``module.vision`` that run on batched image tensors:
flips, additive Gaussian noise, linear contrast and sharpening.

Images are NCHW unless a module says NHWC (the flips, as in MegEngine). Random parameters come
from the module's own :class:`~compiler.random.RNG` (``seed``)."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from compiler import functional as F
from compiler.module.module import Module
from compiler.random import RNG
from compiler.tensor import Tensor

__all__ = [
    "AdditiveGaussianNoise",
    "Flip",
    "LinearContrast",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "Sharpen",
]


def _check_tensor(owner: str, inp: Any) -> None:
    if not isinstance(inp, Tensor):
        raise TypeError(f"{owner}: expected a Tensor, got {type(inp).__name__}")


def _back_to(result: Tensor, dtype: np.dtype) -> Tensor:
    """Clip to ``dtype``'s range and cast back (integer images stay integer images)."""
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        return F.clip(result, int(info.min), int(info.max)).astype(dtype)
    return result.astype(dtype)


class Flip(Module):
    """Reverse NHWC images vertically and/or horizontally."""

    def __init__(self, vertical: bool = True, horizontal: bool = True) -> None:
        super().__init__()
        self.vertical = vertical
        self.horizontal = horizontal

    def forward(self, inp: Tensor) -> Tensor:
        _check_tensor("Flip", inp)
        return F.vision.flip(inp, self.vertical, self.horizontal)


class _RandomFlip(Module):
    """Flip NHWC images along the class's axis with probability ``prob`` (one draw per call)."""

    vertical = False
    horizontal = False

    def __init__(self, prob: float = 0.5) -> None:
        super().__init__()
        self.prob = prob

    def forward(self, inp: Any) -> Any:
        if np.random.rand() < self.prob:
            return F.vision.flip(
                Tensor(inp) if not isinstance(inp, Tensor) else inp,
                vertical=self.vertical,
                horizontal=self.horizontal,
            )
        return inp


class RandomHorizontalFlip(_RandomFlip):
    """Flip NHWC images left-right with probability ``prob`` (one draw per call)."""

    horizontal = True


class RandomVerticalFlip(_RandomFlip):
    """Flip NHWC images upside down with probability ``prob`` (one draw per call)."""

    vertical = True


class AdditiveGaussianNoise(Module):
    """Add ``N(mean, std)`` noise to NCHW images: one value per pixel shared by the channels, or
    one per channel too with ``per_channel=True``."""

    def __init__(
        self, mean: float = 0.0, std: float = 1.0, per_channel: bool = False, seed: int | None = None
    ) -> None:
        assert seed is None or isinstance(seed, int), "AdditiveGaussianNoise: seed must be an int or None"
        super().__init__()
        self.mean = float(mean)
        self.std = float(std)
        self.per_channel = per_channel
        self._seed = seed
        self._rng = RNG(seed)

    @property
    def seed(self) -> int | None:
        return self._seed

    @seed.setter
    def seed(self, seed: int) -> None:
        assert isinstance(seed, int), "AdditiveGaussianNoise: seed must be an int"
        self._seed = seed
        self._rng = RNG(seed)

    def forward(self, inp: Tensor) -> Tensor:
        _check_tensor("AdditiveGaussianNoise", inp)
        shape = tuple(inp.shape)
        if self.per_channel:
            noise = self._rng.normal(self.mean, self.std, shape)
        else:
            if len(shape) != 4:
                raise ValueError(f"AdditiveGaussianNoise: expected NCHW images, got shape {shape}")
            noise = F.broadcast_to(self._rng.normal(self.mean, self.std, (shape[0], 1, *shape[2:])), shape)
        return inp + noise


def _draw(rng: RNG, param: Any, size: tuple[int, ...] | None, owner: str) -> Any:
    """A number as given, or a tuple ``(a, b)`` drawn uniformly from ``[a, b)``."""
    if isinstance(param, bool):
        raise TypeError(f"{owner}: a parameter cannot be a bool")
    if isinstance(param, numbers.Real):
        return float(param) if size is None else F.full(size, float(param), dtype="float32")
    if isinstance(param, tuple):
        assert len(param) == 2, f"{owner}: a tuple parameter must be (low, high), got {len(param)} entries"
        if size is None:
            return float(rng.uniform(param[0], param[1], (1,)).numpy()[0])
        return rng.uniform(param[0], param[1], size)
    raise TypeError(
        f"{owner}: a parameter must be a number or a (low, high) tuple, got {type(param).__name__}"
    )


class LinearContrast(Module):
    """``center + alpha * (v - center)`` on NCHW images (center 127.5 for uint8, 0 for floats);
    ``alpha`` drawn per image, or per image and channel with ``per_channel``."""

    def __init__(self, alpha: Any, per_channel: bool = False, seed: int | None = None) -> None:
        super().__init__()
        self.alpha = alpha
        self.per_channel = per_channel
        self.seed = seed
        self._rng = RNG(seed)

    def forward(self, inp: Tensor) -> Tensor:
        _check_tensor("LinearContrast", inp)
        shape = tuple(inp.shape)
        if len(shape) != 4:
            raise ValueError(f"LinearContrast: expected NCHW images, got shape {shape}")
        size = (shape[0], shape[1], 1, 1) if self.per_channel else (shape[0], 1, 1, 1)
        alpha = _draw(self._rng, self.alpha, size, "LinearContrast")
        dtype = np.dtype(inp.dtype)
        if dtype.kind == "u":
            center = float(np.iinfo(dtype).min + 0.5 * np.iinfo(dtype).max)
        elif dtype.kind == "i":
            center = -0.5
        else:
            center = 0.0
        if dtype.kind in "ui":
            center = float(int(center))
        return _back_to(center + (inp.astype("float32") - center) * alpha, dtype)


class Sharpen(Module):
    """Sharpen NCHW images with a 3x3 kernel (``lightness`` added to the centre of the
    Laplacian-style effect kernel) blended with the identity by ``alpha``; borders reflect."""

    def __init__(self, alpha: Any, lightness: Any, seed: int | None = None) -> None:
        assert seed is None or isinstance(seed, int), "Sharpen: seed must be an int or None"
        super().__init__()
        self.alpha = alpha
        self.lightness = lightness
        self.seed = seed
        self._rng = RNG(seed)
        self.matrix_nochange = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float32)
        self.matrix_effect = np.array([[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]], dtype=np.float32)

    def forward(self, inp: Tensor) -> Tensor:
        _check_tensor("Sharpen", inp)
        shape = tuple(inp.shape)
        if len(shape) != 4:
            raise ValueError(f"Sharpen: expected NCHW images, got shape {shape}")
        alpha = _draw(self._rng, self.alpha, None, "Sharpen")
        lightness = _draw(self._rng, self.lightness, None, "Sharpen")
        effect = self.matrix_effect.copy()
        effect[1, 1] += lightness
        kernel = (self.matrix_nochange * (1 - alpha) + effect * alpha).astype(np.float32)
        channels = shape[1]
        weight = Tensor(np.broadcast_to(kernel, (channels, 1, 1, 3, 3)).copy())
        padded = F.pad(inp.astype("float32"), ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect")
        return _back_to(F.conv2d(padded, weight, groups=channels), np.dtype(inp.dtype))
