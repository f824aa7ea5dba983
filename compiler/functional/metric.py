"""MegEngine's ``functional.metric``: classification accuracy from the top-k predictions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.functional.math import topk
from compiler.functional.tensor import broadcast_to, expand_dims
from compiler.tensor import Tensor, as_tensor


def topk_accuracy(logits: Tensor, target: Tensor, topk: int | Sequence[int] = 1) -> Tensor | list[Tensor]:
    """Fraction of rows whose ``target`` class is among the ``k`` largest ``logits``, for each ``k``
    of ``topk`` (one tensor for an int, a list for a sequence, as MegEngine returns)."""
    logits, target = as_tensor(logits), as_tensor(target)
    ks = (topk,) if isinstance(topk, int) else tuple(topk)
    _, pred = _topk(logits, max(ks))
    rows = target.shape[0]
    accs = []
    for k in ks:
        correct = pred[:, :k].detach() == broadcast_to(expand_dims(target, 1), (rows, k))
        accs.append(correct.astype(np.float32).sum() / rows)
    return accs[0] if len(ks) == 1 else accs


def _topk(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    return topk(logits, k, descending=True)


__all__ = ["topk_accuracy"]
