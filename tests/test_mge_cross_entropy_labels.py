"""``F.nn.cross_entropy`` takes labels as MegEngine 1.13 does: float class indices are truncated
toward zero (MegEngine's own docstring passes ``Tensor([1., 1., 1.])``), soft labels are refused.
MegEngine's values: tests/data/mge_names/cross_entropy.npz (tests/data/mge_names/record.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
from compiler.autodiff import GradManager
from compiler.core import OpError

DATA = dict(np.load(os.path.join(os.path.dirname(__file__), "data", "mge_names", "cross_entropy.npz")))


def test_float_labels_match_megengine() -> None:
    logits, label = mge.tensor(DATA["logits"]), mge.tensor(DATA["label"])
    got = F.nn.cross_entropy(logits, label, reduction="none").numpy()
    np.testing.assert_allclose(got, DATA["none"], rtol=1e-6, atol=1e-6)
    smooth = F.nn.cross_entropy(logits, label, label_smooth=0.2, reduction="none").numpy()
    np.testing.assert_allclose(smooth, DATA["smooth"], rtol=1e-6, atol=1e-6)
    # the same as the integer labels the floats truncate to, and as torch on those
    ints = DATA["label"].astype(np.int64)
    want = torch.nn.functional.cross_entropy(
        torch.tensor(DATA["logits"]), torch.tensor(ints), reduction="none"
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


def test_float_label_gradient_matches_megengine() -> None:
    x = mge.tensor(DATA["logits"])
    gm = GradManager().attach([x])
    with gm:
        gm.backward(F.nn.cross_entropy(x, mge.tensor(DATA["label"])))
    np.testing.assert_allclose(x.grad.numpy(), DATA["grad"], rtol=1e-5, atol=1e-7)


def test_soft_labels_are_refused_as_megengine_refuses_them() -> None:
    soft = np.full((3, 5), 0.2, np.float32)
    with pytest.raises(OpError, match="target ndim must be one less than input ndim"):
        F.nn.cross_entropy(mge.tensor(DATA["logits"]), mge.tensor(soft))
