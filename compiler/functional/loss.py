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

__all__ = ["binary_cross_entropy", "cross_entropy", "ctc_loss", "hinge_loss", "l1_loss", "square_loss"]


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


# stands in for log(0) on impossible CTC paths; finite, so logsumexp never computes -inf - -inf
_CTC_NEG = -1e30


def _ctc_labels(label: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """One label sequence per sample, from the concatenated (sum(lengths),) or padded (N, S) form."""
    if label.ndim == 2:
        return [label[i, : lengths[i]] for i in range(len(lengths))]
    if label.ndim != 1 or label.size != lengths.sum():
        raise op_error(
            "ctc_loss",
            f"label must be (N, S) or hold sum(label_lengths)={lengths.sum()} labels, got {label.shape}",
        )
    return np.split(label, np.cumsum(lengths)[:-1])


def ctc_loss(
    pred: Tensor,
    pred_lengths: Tensor,
    label: Tensor,
    label_lengths: Tensor,
    blank: int = 0,
    reduction: str = "mean",
) -> Tensor:
    """Connectionist temporal classification loss of class probabilities ``pred`` (T, N, C), the
    first ``pred_lengths[n]`` steps of sample n, against its ``label_lengths[n]`` labels; "mean" is
    the mean of the losses divided by their label lengths. The forward (alpha) recursion runs on the
    extended label sequence (blanks between and around labels) in log space, with ops that have
    gradient rules; the lengths and labels are read as data, so they are fixed for a trace."""
    from compiler.functional.nn import logsumexp
    from compiler.functional.tensor import concat, stack

    pred = as_tensor(pred)
    if pred.ndim != 3:
        raise op_error("ctc_loss", f"pred must be (T, N, C), got shape {pred.shape}")
    steps, n, classes = pred.shape
    plen = np.asarray(as_tensor(pred_lengths)._data, dtype=np.int64).reshape(-1)
    llen = np.asarray(as_tensor(label_lengths)._data, dtype=np.int64).reshape(-1)
    if plen.size != n or llen.size != n:
        raise op_error(
            "ctc_loss", f"pred_lengths and label_lengths need {n} entries, got {plen.size} and {llen.size}"
        )
    if (plen < 0).any() or (plen > steps).any() or (llen < 0).any():
        raise op_error("ctc_loss", f"lengths must lie in [0, {steps}], got {plen} and {llen}")
    if not 0 <= blank < classes:
        raise op_error("ctc_loss", f"blank {blank} is not one of the {classes} classes")
    seqs = _ctc_labels(np.asarray(as_tensor(label)._data, dtype=np.int64), llen)
    ext_len = 2 * int(llen.max(initial=0)) + 1
    ext = np.full((n, ext_len), blank, np.int64)
    skip = np.full((n, ext_len), _CTC_NEG, np.float32)  # 0 where s-2 -> s may skip a blank
    final = np.full((n, ext_len), _CTC_NEG, np.float32)  # 0 at the two positions a path may end
    for i, seq in enumerate(seqs):
        if seq.size and (seq.min() < 0 or seq.max() >= classes):
            raise op_error("ctc_loss", f"labels must lie in [0, {classes}), got {seq}")
        ext[i, 1 : 2 * seq.size : 2] = seq
        for s in range(3, 2 * seq.size, 2):
            if ext[i, s] != ext[i, s - 2]:
                skip[i, s] = 0.0
        final[i, 2 * seq.size] = 0.0
        if seq.size:
            final[i, 2 * seq.size - 1] = 0.0
    onehot = Tensor((ext[:, :, None] == np.arange(classes)).astype(np.float32))  # (N, S', C)
    start = np.full((1, ext_len), _CTC_NEG, np.float32)
    start[0, : min(2, ext_len)] = 0.0
    neg1, neg2 = Tensor(np.full((n, 1), _CTC_NEG, np.float32)), Tensor(np.full((n, 2), _CTC_NEG, np.float32))
    skip_t = Tensor(skip)
    pred = astype(pred, np.float32) if pred.dtype != np.float32 else pred

    def emit(t: int) -> Tensor:
        return log(_sum(onehot * expand_dims(pred[t], 1), 2))  # (N, S'): log p of each extended label

    alpha = emit(0) + Tensor(start)
    for t in range(1, steps):
        moved = [alpha, concat([neg1, alpha[:, :-1]], 1)]
        if ext_len > 2:
            moved.append(concat([neg2, alpha[:, :-2]], 1) + skip_t)
        new = logsumexp(stack(moved, 0), 0) + emit(t)
        active = Tensor((plen > t).astype(np.float32).reshape(n, 1))
        alpha = active * new + (1 - active) * alpha
    loss = -logsumexp(alpha + Tensor(final), 1)
    if reduction == "mean":
        return mean(loss / Tensor(np.maximum(llen, 1).astype(np.float32)))
    return _reduce_output("ctc_loss", loss, reduction)
