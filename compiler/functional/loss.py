"""Loss functions (MegEngine's ``functional.loss``), composed of ops that have gradient rules, so
``GradManager`` differentiates them without rules of their own and ``jit.trace`` can record them."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.core import op_error
from compiler.functional.elemwise import _elemwise, log
from compiler.functional.math import mean
from compiler.functional.math import sum as _sum
from compiler.functional.tensor import astype, expand_dims
from compiler.tensor import Tensor, as_tensor

__all__ = ["binary_cross_entropy", "cross_entropy", "hinge_loss", "l1_loss", "square_loss"]


def _reduce_output(label: str, loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return _sum(loss)
    if reduction == "none":
        return loss
    raise op_error(label, f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def l1_loss(pred: Tensor, label: Tensor, reduction: str = "mean") -> Tensor:
    """Mean (or sum) of ``|pred - label|``."""
    diff = as_tensor(pred) - as_tensor(label)
    return _reduce_output("l1_loss", _elemwise("ABS", diff, label="l1_loss"), reduction)


def square_loss(pred: Tensor, label: Tensor, reduction: str = "mean") -> Tensor:
    """Mean (or sum) of ``(pred - label) ** 2``."""
    diff = as_tensor(pred) - as_tensor(label)
    return _reduce_output("square_loss", _elemwise("SQUARE", diff, label="square_loss"), reduction)


def _pick(pred: Tensor, label: Tensor, axis: int) -> Tensor:
    """``pred`` at the class index ``label`` along ``axis`` (MegEngine's indexing_one_hot), built as a
    one-hot mask (EQ against the class numbers) times ``pred``, summed over ``axis``."""
    n = pred.shape[axis]
    classes = Tensor(np.arange(n, dtype=np.int32).reshape([n if i == axis else 1 for i in range(pred.ndim)]))
    mask = astype(_elemwise("EQ", expand_dims(label, axis), classes, label="cross_entropy"), pred.dtype)
    return _sum(pred * mask, axis)


def cross_entropy(
    pred: Tensor,
    label: Tensor,
    axis: int = 1,
    with_logits: bool = True,
    label_smooth: float = 0,
    reduction: str = "mean",
) -> Tensor:
    """Cross entropy of class scores ``pred`` (logits, or probabilities when ``with_logits=False``)
    against integer ``label``, which has ``pred``'s shape without ``axis``."""
    from compiler.functional.nn import _check_picks, logsumexp  # nn re-exports this module's losses

    pred, label = as_tensor(pred), as_tensor(label)
    if pred.ndim != label.ndim + 1:
        raise op_error(
            "cross_entropy",
            f"target ndim must be one less than input ndim; input_ndim={pred.ndim} target_ndim={label.ndim}",
        )
    if not -pred.ndim <= axis < pred.ndim:
        raise op_error("cross_entropy", f"axis {axis} is out of range for pred of shape {pred.shape}")
    axis %= pred.ndim
    _check_picks("cross_entropy", label, pred, axis, ("label", "pred"))
    classes = pred.shape[axis]
    if label.size and (int(label._data.min()) < 0 or int(label._data.max()) >= classes):
        raise op_error(
            "cross_entropy",
            f"labels must lie in [0, {classes}), got {label._data.min()}..{label._data.max()}",
        )
    if with_logits:
        log_z: Any = logsumexp(pred, axis)
        primary = _pick(pred, label, axis)
    else:
        log_z = 0.0
        primary = log(_pick(pred, label, axis))
    ls = label_smooth
    if ls is None or ls == 0:
        loss = log_z - primary
    else:
        log_pred = pred if with_logits else log(pred)
        loss = log_z - ls * mean(log_pred, axis) - (1 - ls) * primary
    return _reduce_output("cross_entropy", loss, reduction)


def binary_cross_entropy(
    pred: Tensor, label: Tensor, with_logits: bool = True, reduction: str = "mean"
) -> Tensor:
    """Binary cross entropy of ``pred`` (logits, or probabilities when ``with_logits=False``) against
    ``label`` in [0, 1]."""
    pred = as_tensor(pred)
    label = as_tensor(label, pred)
    if label.dtype != pred.dtype:
        label = astype(label, pred.dtype)
    if not with_logits:
        loss = -(label * log(pred) + (1 - label) * log(1 - pred))
    else:
        # -log(sigmoid(p)) = softplus(-p), which stays finite for large |p|
        loss = (1 - label) * pred + _elemwise("SOFTPLUS", -pred, label="binary_cross_entropy")
    return _reduce_output("binary_cross_entropy", loss, reduction)


def hinge_loss(pred: Tensor, label: Tensor, norm: str = "L1", reduction: str = "mean") -> Tensor:
    """Hinge loss of scores ``pred`` against labels in {-1, 1}: ``max(0, 1 - pred * label)`` (squared
    for ``norm="L2"``) summed over axis 1, one value per sample, then reduced."""
    if norm not in ("L1", "L2"):
        raise op_error("hinge_loss", f"norm must be 'L1' or 'L2', got {norm!r}")
    pred = as_tensor(pred)
    label = as_tensor(label, pred)
    if label.dtype != pred.dtype:
        label = astype(label, pred.dtype)
    margin = _elemwise("RELU", 1 - pred * label, label="hinge_loss")
    if norm == "L2":
        margin = _elemwise("SQUARE", margin, label="hinge_loss")
    return _reduce_output("hinge_loss", _sum(margin, 1), reduction)
