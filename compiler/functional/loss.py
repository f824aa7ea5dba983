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
    against class indices ``label``, which has ``pred``'s shape without ``axis``. Float labels are
    class indices too, truncated toward zero as MegEngine's IndexingOneHot converts them (its own
    docstring passes ``Tensor([1., 1., 1.])``); soft (per-class probability) labels are refused, as
    MegEngine refuses them: their shape has ``pred``'s number of dimensions."""
    from compiler.functional.nn import _check_picks, logsumexp  # nn re-exports this module's losses

    pred, label = as_tensor(pred), as_tensor(label)
    if label.dtype.kind == "f":
        label = label.astype("int32")
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
    """SVM hinge loss of (N, C) scores against labels in {-1, 1}: per sample the sum over C of
    ``max(0, 1 - pred * label)`` ("L1") or of its square ("L2"), then reduced over N."""
    from compiler.functional.elemwise import relu

    kind = str(norm).upper()
    if kind not in ("L1", "L2"):
        raise op_error("hinge_loss", f"norm must be 'L1' or 'L2', got {norm!r}")
    pred = as_tensor(pred)
    label = as_tensor(label, pred)
    if label.dtype != pred.dtype:
        label = astype(label, pred.dtype)
    margin = relu(1.0 - pred * label)
    loss = _sum(margin if kind == "L1" else margin * margin, axis=1)
    return _reduce_output("hinge_loss", loss, reduction)


def _padded_labels(label: Tensor, lengths: np.ndarray, blank: int) -> np.ndarray:
    """(N, S) labels, from (N, S) or from the concatenation of every sample's labels (the labels
    are integers without a gradient, so they are read now)."""
    data = np.asarray(label.numpy()).astype(np.int64)
    if data.ndim == 2:
        if lengths.min() <= 0 or lengths.max() > data.shape[1]:
            raise op_error(
                "ctc_loss", f"label_lengths must lie in (0, {data.shape[1]}], got {lengths.tolist()}"
            )
        return data
    if data.ndim != 1:
        raise op_error("ctc_loss", f"label must be (N, S) or 1-D concatenated, got shape {data.shape}")
    if lengths.min() <= 0 or data.size != lengths.sum():
        raise op_error(
            "ctc_loss", f"label has {data.size} elements, label_lengths sum to {int(lengths.sum())}"
        )
    out = np.full((lengths.size, int(lengths.max())), blank, np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for i, (s, n) in enumerate(zip(starts, lengths, strict=True)):
        out[i, :n] = data[s : s + n]
    return out


def ctc_loss(
    pred: Tensor,
    pred_lengths: Tensor,
    label: Tensor,
    label_lengths: Tensor,
    blank: int = 0,
    reduction: str = "mean",
) -> Tensor:
    """Connectionist Temporal Classification loss of class *probabilities* ``pred`` (T, N, C)
    (MegEngine takes probabilities where torch takes log-probabilities). Per sample, minus the log
    of the summed probability of every alignment of its labels (blank between repeats) over its
    first ``pred_lengths[n]`` steps; "mean" divides each by its label length first, as torch."""
    from compiler.functional.elemwise import logaddexp, maximum
    from compiler.functional.math import batch_matmul
    from compiler.functional.tensor import concat, full, transpose, where

    label_name = "ctc_loss"
    pred = as_tensor(pred)
    if pred.ndim != 3:
        raise op_error(label_name, f"pred must be (T, N, C), got shape {pred.shape}")
    t_max, n, c = pred.shape
    plen = np.asarray(as_tensor(pred_lengths).numpy()).astype(np.int64).reshape(-1)
    llen = np.asarray(as_tensor(label_lengths).numpy()).astype(np.int64).reshape(-1)
    if plen.size != n or llen.size != n:
        raise op_error(label_name, f"pred_lengths and label_lengths need {n} elements (the batch size)")
    if not 0 <= blank < c:
        raise op_error(label_name, f"blank must lie in [0, {c}), got {blank}")
    if plen.min() <= 0 or plen.max() > t_max:
        raise op_error(label_name, f"pred_lengths must lie in (0, {t_max}], got {plen.tolist()}")
    labels = _padded_labels(as_tensor(label), llen, blank)
    if labels.size and (labels.min() < 0 or labels.max() >= c):
        raise op_error(label_name, f"labels must lie in [0, {c})")
    s = labels.shape[1]
    ext = np.full((n, 2 * s + 1), blank, np.int64)
    ext[:, 1::2] = labels
    width = ext.shape[1]
    # may an alignment skip from l-2 to l? only onto a label that differs from the one before
    skip = np.zeros((n, width), bool)
    skip[:, 2:] = ext[:, 2:] != ext[:, :-2]
    picks = (ext[:, None, :] == np.arange(c)[None, :, None]).astype(pred.dtype)  # (N, C, L)
    probs = batch_matmul(transpose(pred, (1, 0, 2)), Tensor(picks))  # (N, T, L)
    floor = float(np.finfo(pred.dtype).tiny)
    logp = log(maximum(probs, floor))
    never = float(np.log(floor))
    start = np.zeros((n, width), bool)
    start[:, :2] = True
    alpha = where(Tensor(start), logp[:, 0, :], full((n, width), never, dtype=pred.dtype))
    # the two states an alignment may end in, picked exactly (a logsumexp over a mask would add
    # every other state's floor value and cap the loss near -log(tiny))
    last = np.zeros((n, width), pred.dtype)
    last[np.arange(n), 2 * llen] = 1
    before_last = np.zeros((n, width), pred.dtype)
    before_last[np.arange(n), 2 * llen - 1] = 1
    last_t, before_t = Tensor(last), Tensor(before_last)
    # no predecessor before the first states: a value below any reachable log-probability (the
    # floor ``never`` would cap states 0 and 1 once their own value sinks below it)
    nothing = float(-np.finfo(pred.dtype).max / 4)
    pad1 = full((n, 1), nothing, dtype=pred.dtype)
    pad2 = full((n, 2), nothing, dtype=pred.dtype)
    skip_t = Tensor(skip)

    def finish(a: Tensor) -> Tensor:
        return -logaddexp(_sum(a * last_t, 1), _sum(a * before_t, 1))

    losses = []
    for t in range(t_max):
        if t:
            stay_or_step = logaddexp(alpha, concat([pad1, alpha[:, :-1]], 1))
            with_skip = logaddexp(stay_or_step, concat([pad2, alpha[:, :-2]], 1))
            alpha = where(skip_t, with_skip, stay_or_step) + logp[:, t, :]
        losses.append(finish(alpha))
    at_end = (plen[None, :] - 1 == np.arange(t_max)[:, None]).astype(pred.dtype)  # (T, N)
    from compiler.functional.tensor import stack

    loss = _sum(stack(losses, 0) * Tensor(at_end), 0)
    if reduction == "mean":
        return mean(loss / Tensor(llen.astype(pred.dtype)))
    return _reduce_output(label_name, loss, reduction)
