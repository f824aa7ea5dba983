"""Loss functions checked against values recorded from real MegEngine 1.13 (issue 32); the inputs
are regenerated from a fixed numpy seed, so the test needs no MegEngine."""

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
from compiler.core import OpError


def _inputs() -> tuple[mge.Tensor, mge.Tensor]:
    rng = np.random.RandomState(0)
    rng.randn(3, 4)
    rng.randn(2, 3, 4)
    pred = rng.randn(3, 4).astype("float32")
    rng.rand(3, 4)
    label = np.sign(rng.randn(3, 4)).astype("float32")
    return mge.tensor(pred), mge.tensor(label)


@pytest.mark.parametrize(
    ("norm", "reduction", "expected"),
    [
        ("L1", "mean", 4.3178),
        ("L2", "mean", 8.6976),
        ("L1", "none", [4.9199, 2.9508, 5.0826]),
    ],
)
def test_hinge_loss_matches_megengine(norm: str, reduction: str, expected: object) -> None:
    pred, label = _inputs()
    out = F.nn.hinge_loss(pred, label, norm=norm, reduction=reduction)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-4)


def test_hinge_loss_rejects_unknown_norm() -> None:
    pred, label = _inputs()
    with pytest.raises(OpError, match="norm"):
        F.nn.hinge_loss(pred, label, norm="L3")


def _ctc_inputs() -> tuple[np.ndarray, mge.Tensor, mge.Tensor]:
    rng = np.random.RandomState(1)
    logits = rng.randn(6, 2, 4).astype("float32")
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return probs, mge.tensor(np.array([6, 4], "int32")), mge.tensor(np.array([3, 2], "int32"))


@pytest.mark.parametrize(
    ("label", "blank", "reduction", "expected"),
    [
        ([1, 2, 2, 3, 1], 0, "none", [6.1755, 4.0253]),
        ([1, 2, 2, 3, 1], 0, "mean", 2.0356),
        ([1, 2, 2, 3, 1], 0, "sum", 10.2008),
        ([1, 2, 2, 0, 1], 3, "none", [5.7076, 3.2637]),
        ([[1, 2, 2], [3, 1, 0]], 0, "none", [6.1755, 4.0253]),
    ],
)
def test_ctc_loss_matches_megengine(label: list, blank: int, reduction: str, expected: object) -> None:
    probs, pred_lengths, label_lengths = _ctc_inputs()
    lab = mge.tensor(np.array(label, "int32"))
    out = F.nn.ctc_loss(mge.tensor(probs), pred_lengths, lab, label_lengths, blank=blank, reduction=reduction)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-4)


def test_ctc_loss_gradient_matches_torch() -> None:
    # torch's CTC backward assumes normalised log-probabilities, so compare gradients of the logits
    # through a softmax, where its shortcut is exact
    torch = pytest.importorskip("torch")
    _, pred_lengths, label_lengths = _ctc_inputs()
    logits = np.random.RandomState(1).randn(6, 2, 4).astype("float32")
    labels = [1, 2, 2, 3, 1]
    x = mge.Parameter(logits)
    gm = mge.autodiff.GradManager().attach([x])
    with gm:
        probs = F.softmax(x, axis=2)
        loss = F.nn.ctc_loss(probs, pred_lengths, mge.tensor(np.array(labels, "int32")), label_lengths)
        gm.backward(loss)
    tx = torch.tensor(logits, requires_grad=True)
    tloss = torch.nn.functional.ctc_loss(
        torch.log_softmax(tx, 2), torch.tensor(labels), torch.tensor([6, 4]), torch.tensor([3, 2])
    )
    tloss.backward()
    np.testing.assert_allclose(loss.numpy(), tloss.item(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-5)


def test_ctc_loss_rejects_mismatched_labels() -> None:
    probs, pred_lengths, label_lengths = _ctc_inputs()
    with pytest.raises(OpError, match="ctc_loss"):
        F.nn.ctc_loss(mge.tensor(probs), pred_lengths, mge.tensor(np.array([1, 2], "int32")), label_lengths)
