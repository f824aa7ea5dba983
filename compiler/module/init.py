"""MegEngine's ``module.init``: in-place initialisers of parameters (``M.init.msra_normal_(w)``).

Samples come from ``compiler.random``'s seeded generator, so ``random.seed`` makes them
reproducible. Fan computations follow MegEngine: a 5-D weight is a grouped convolution
(groups, OC/g, IC/g, KH, KW) whose groups axis is ignored.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.tensor import Tensor


def _check(tensor: Any, fn: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"init.{fn}: expected a Tensor or Parameter, got {type(tensor).__name__}")
    return tensor


def fill_(tensor: Tensor, val: float) -> None:
    """Set every element of ``tensor`` to ``val``."""
    t = _check(tensor, "fill_")
    t._reset(np.full(t.shape, val, dtype=t.dtype))


def zeros_(tensor: Tensor) -> None:
    fill_(tensor, 0)


def ones_(tensor: Tensor) -> None:
    fill_(tensor, 1)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> None:
    """Samples of U(a, b)."""
    from compiler.random import generator

    t = _check(tensor, "uniform_")
    t._reset(generator().uniform(a, b, size=t.shape).astype(t.dtype))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> None:
    """Samples of N(mean, std^2)."""
    from compiler.random import generator

    t = _check(tensor, "normal_")
    t._reset(generator().normal(mean, std, size=t.shape).astype(t.dtype))


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain of a non-linearity (1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2)
    for relu, sqrt(2 / (1 + slope^2)) for leaky_relu)."""
    linear = {
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
    }
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, int | float) and not isinstance(param, bool):
            slope = float(param)
        else:
            raise ValueError(f"negative_slope {param!r} is not a number")
        return math.sqrt(2.0 / (1 + slope**2))
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[float, float]:
    """(fan_in, fan_out) of a weight: (in, out) for a 2-D Linear weight (out, in); for an
    (OC, IC, *kernel) convolution weight IC and OC times the kernel size."""
    shape = tuple(_check(tensor, "calculate_fan_in_and_fan_out").shape)
    if len(shape) < 2:
        raise ValueError(
            f"fan_in and fan_out cannot be computed for a tensor with fewer than 2 dimensions (shape {shape})"
        )
    if len(shape) == 2:
        return shape[1], shape[0]
    if len(shape) >= 5:
        # MegEngine drops the first axis of every weight with 5+ dims: the groups axis of grouped
        # conv2d/conv3d (and, as MegEngine notes, wrongly the OC axis of an ungrouped conv3d)
        shape = shape[1:]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def calculate_correct_fan(tensor: Tensor, mode: str) -> float:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode {mode!r} is not supported; use 'fan_in' or 'fan_out'")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> None:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> None:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)))


def msra_uniform_(
    tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> None:
    """U(-b, b) with b = sqrt(3) * gain / sqrt(fan) (He)."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(calculate_correct_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    uniform_(tensor, -bound, bound)


def msra_normal_(
    tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> None:
    """N(0, std^2) with std = gain / sqrt(fan) (He)."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(calculate_correct_fan(tensor, mode))
    normal_(tensor, 0.0, std)


__all__ = [
    "calculate_correct_fan",
    "calculate_fan_in_and_fan_out",
    "calculate_gain",
    "fill_",
    "msra_normal_",
    "msra_uniform_",
    "normal_",
    "ones_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]
