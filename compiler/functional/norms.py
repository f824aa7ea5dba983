"""Normalisations MegEngine 1.13 has beside batch/layer/group norm (``F.nn.instance_norm``,
``general_norm``, ``local_response_norm``, ``sync_batch_norm``), composed of ops that have gradient
rules, so ``GradManager`` differentiates them and ``jit.trace`` records them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.core import op_error
from compiler.functional.elemwise import maximum, sqrt
from compiler.functional.math import mean
from compiler.functional.math import sum as _sum
from compiler.functional.tensor import reshape
from compiler.tensor import Tensor, as_tensor

__all__ = ["general_norm", "instance_norm", "local_response_norm", "sync_batch_norm"]


def _affine_operands(label: str, affine: bool, weight: Any, bias: Any) -> tuple[Tensor, Tensor] | None:
    if not affine:
        return None
    if weight is None or bias is None:
        raise op_error(label, "weight and bias must be given when affine is True")
    return as_tensor(weight), as_tensor(bias)


def _normalize_over(inp: Tensor, axes: list[int], eps: float) -> Tensor:
    centered = inp - mean(inp, axes, keepdims=True)
    variance = mean(centered * centered, axes, keepdims=True)  # biased, as MegEngine's norms
    return centered / sqrt(variance + eps)


def instance_norm(
    inp: Tensor, affine: bool, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """Normalises each (sample, channel) of (N, C, ...) over its spatial positions; ``weight`` and
    ``bias`` hold one value per channel."""
    inp = as_tensor(inp)
    if inp.ndim < 3:
        raise op_error("instance_norm", f"input must be (N, C, spatial...), got shape {inp.shape}")
    out = _normalize_over(inp, list(range(2, inp.ndim)), eps)
    params = _affine_operands("instance_norm", affine, weight, bias)
    if params is not None:
        c = inp.shape[1]
        pshape = (1, c) + (1,) * (inp.ndim - 2)
        for name, p in zip(("weight", "bias"), params, strict=True):
            if p.size != c:
                raise op_error("instance_norm", f"{name} has shape {p.shape}, expected {c} elements")
        out = out * reshape(params[0], pshape) + reshape(params[1], pshape)
    return out


def general_norm(
    inp: Tensor,
    normalized_axis: int | Sequence[int],
    affine: bool = True,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalises over the axes ``normalized_axis`` (ascending, possibly not adjacent); ``weight``
    and ``bias`` have the shape of those axes (``inp.shape[a] for a in normalized_axis``)."""
    inp = as_tensor(inp)
    axes = [normalized_axis] if isinstance(normalized_axis, int) else list(normalized_axis)
    if not axes:
        raise op_error("general_norm", "normalization axis not specified")
    norm = [a + inp.ndim if a < 0 else a for a in axes]
    if any(not 0 <= a < inp.ndim for a in norm):
        raise op_error("general_norm", f"normalized_axis {axes} out of range for shape {inp.shape}")
    if len(set(norm)) != len(norm):
        raise op_error("general_norm", f"normalized_axis {axes} repeats an axis")
    if norm != sorted(norm):
        raise op_error("general_norm", f"normalized_axis must be ascending: {sorted(norm)}, got {axes}")
    out = _normalize_over(inp, norm, eps)
    params = _affine_operands("general_norm", affine, weight, bias)
    if params is not None:
        want = tuple(inp.shape[a] for a in norm)
        pshape = tuple(inp.shape[d] if d in norm else 1 for d in range(inp.ndim))
        for name, p in zip(("weight", "bias"), params, strict=True):
            if p.size != int(np.prod(want)):
                raise op_error("general_norm", f"{name} has shape {p.shape}, expected {want}")
        out = out * reshape(params[0], pshape) + reshape(params[1], pshape)
    return out


def local_response_norm(
    inp: Tensor, kernel_size: int = 5, k: float = 2.0, alpha: float = 1e-4, beta: float = 0.75
) -> Tensor:
    """MegEngine's LRN across channels: ``x / (k + alpha * S) ** beta`` where ``S`` sums ``x**2``
    over the ``kernel_size`` channels centred on each one (zeros past the edges). Unlike
    torch, ``alpha`` is not divided by ``kernel_size``."""
    from compiler.functional.nn import pad

    inp = as_tensor(inp)
    n = int(kernel_size)
    if n < 1 or n % 2 == 0:
        raise op_error("local_response_norm", f"kernel_size must be a positive odd number, got {kernel_size}")
    if inp.ndim < 2:
        raise op_error("local_response_norm", f"input needs a channel axis, got shape {inp.shape}")
    c, half = inp.shape[1], n // 2
    widths = [(0, 0)] * inp.ndim
    widths[1] = (half, half)
    padded = pad(inp * inp, widths)
    window = padded[:, 0:c]
    for i in range(1, n):
        window = window + padded[:, i : i + c]
    return inp * (window * float(alpha) + float(k)) ** (-float(beta))


def sync_batch_norm(
    inp: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.9,
    eps: float = 1e-5,
    eps_mode: str = "additive",
    group: Any = None,
) -> Tensor:
    """Batch normalisation with statistics over every process of ``group``: xmge's distributed
    world is one process, so these are this batch's statistics. ``eps_mode`` "additive" divides by
    ``sqrt(var + eps)``, "max" by ``sqrt(max(var, eps))``."""
    from compiler.functional.nn import batch_norm

    mode = str(eps_mode).lower()
    if mode not in ("additive", "max"):
        raise op_error("sync_batch_norm", f"eps_mode must be 'additive' or 'max', got {eps_mode!r}")
    if mode == "additive":
        return batch_norm(
            inp, running_mean, running_var, weight, bias, training=training, momentum=momentum, eps=eps
        )
    inp = as_tensor(inp)
    c = inp.shape[1]
    pshape = (1, c) + (1,) * (inp.ndim - 2)
    axes = [0, *range(2, inp.ndim)]
    if training:
        # the statistics and their running update come from batch_norm; only the divisor differs
        batch_norm(inp, running_mean, running_var, training=True, momentum=momentum, eps=eps)
        mu = mean(inp, axes, keepdims=True)
        centered = inp - mu
        var = _sum(centered * centered, axes, keepdims=True) / float(inp.size // c)
    else:
        centered = inp - reshape(as_tensor(running_mean), pshape)
        var = reshape(as_tensor(running_var), pshape)
    out = centered / sqrt(maximum(var, float(eps)))
    if weight is not None:
        out = out * reshape(as_tensor(weight), pshape)
    if bias is not None:
        out = out + reshape(as_tensor(bias), pshape)
    return out
