"""MegEngine 1.13 module classes added in issue 32's second round: each module computes what its
functional form (checked against torch in test_mge_nn_extra.py) or torch computes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
import compiler.module as M
from dialects.errors import XmgeError

RNG = np.random.default_rng(3)


def test_pad_pixel_shuffle_lrn_modules_match_torch():
    x = RNG.standard_normal((1, 8, 3, 3)).astype(np.float32)
    t = torch.tensor(x)
    out = M.Pad(((0, 0), (0, 0), (1, 2), (0, 1)), constant_val=2.5)(mge.tensor(x))
    np.testing.assert_array_equal(out.numpy(), torch.nn.functional.pad(t, (0, 1, 1, 2), value=2.5).numpy())
    np.testing.assert_array_equal(
        M.PixelShuffle(2)(mge.tensor(x)).numpy(), torch.nn.PixelShuffle(2)(t).numpy()
    )
    lrn = M.LocalResponseNorm(3, k=1.0, alpha=0.3, beta=0.5)(mge.tensor(x))
    ref = torch.nn.LocalResponseNorm(3, alpha=0.9, beta=0.5, k=1.0)(t)  # torch divides alpha by the size
    np.testing.assert_allclose(lrn.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_sliding_window_modules_round_trip_counts():
    x = mge.tensor(np.ones((1, 1, 4, 4), np.float32))
    win = M.SlidingWindow(2, padding=0, stride=1)(x)
    assert win.shape == (1, 1, 3, 3, 2, 2)
    back = M.SlidingWindowTranspose((4, 4), 2)(win)
    # each pixel is summed once per window that covers it
    covers = np.array([1, 2, 2, 1], np.float32)
    np.testing.assert_array_equal(back.numpy()[0, 0], np.outer(covers, covers))


def test_general_norm_module_and_its_shape_check():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    gn = M.GeneralNorm((3, 4), (1, 2))
    ref = torch.nn.functional.layer_norm(torch.tensor(x), (3, 4))
    np.testing.assert_allclose(gn(mge.tensor(x)).numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    assert gn.weight.shape == (3, 4) and gn.bias.shape == (3, 4)
    with pytest.raises(XmgeError, match="expected \\[3, 4\\]"):
        gn(mge.tensor(np.zeros((2, 4, 3), np.float32)))
    with pytest.raises(XmgeError, match="differ in length"):
        M.GeneralNorm((3, 4), 1)


def test_batch_matmul_activation_relu():
    mod = M.BatchMatMulActivation(2, 3, 4, bias=True, nonlinear_mode="relu")
    assert mod.weight.shape == (2, 4, 3) and mod.bias.shape == (4,)
    mod.bias._reset(np.arange(4, dtype=np.float32) - 1.5)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    ref = np.maximum(np.matmul(mod.weight.numpy(), x) + mod.bias.numpy(), 0)
    np.testing.assert_allclose(mod(mge.tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-6)


def test_local_conv2d_module_weight_shape_and_forward():
    mod = M.LocalConv2d(4, 6, 5, 5, 3, stride=2, padding=1, groups=2)
    assert mod.weight.shape == (2, 3, 3, 2, 3, 3, 3) and mod.bias is None
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    np.testing.assert_array_equal(
        mod(mge.tensor(x)).numpy(), F.nn.local_conv2d(mge.tensor(x), mod.weight, None, 2, 1).numpy()
    )


def test_repr_is_megengine_s_layout():
    from collections import OrderedDict

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = M.Conv2d(3, 8, 3, padding=1, bias=False)
            self.conv2 = M.Conv2d(3, 8, 3, dilation=2, groups=1)
            self.bn = M.BatchNorm2d(8)
            self.pool = M.MaxPool2d(kernel_size=2)
            self.seq = M.Sequential(OrderedDict(dw=M.Conv2d(8, 8, 3, 1, 0, groups=8, bias=False)))
            self.items = [M.Dropout(drop_prob=0.1), [M.Softmax(axis=1)]]
            self.fc = M.Linear(4, 2)

        def forward(self, x):
            return x

    assert repr(Net()) == (
        "Net(\n"
        "  (conv1): Conv2d(3, 8, kernel_size=(3, 3), padding=(1, 1), bias=False)\n"
        "  (conv2): Conv2d(3, 8, kernel_size=(3, 3), dilation=(2, 2))\n"
        "  (bn): BatchNorm2d(8, eps=1e-05, momentum=0.9, affine=True, track_running_stats=True)\n"
        "  (pool): MaxPool2d(kernel_size=2, stride=2, padding=0)\n"
        "  (seq): Sequential(\n"
        "    (dw): Conv2d(8, 8, kernel_size=(3, 3), groups=8, bias=False)\n"
        "  )\n"
        "  (items.0): Dropout(drop_prob=0.1)\n"
        "  (items.1.0): Softmax(axis=1)\n"
        "  (fc): Linear(in_features=4, out_features=2, bias=True)\n"
        ")"
    )
