"""``compiler.module.vision``: the augmentation modules of MegEngine's ``module.vision`` (newer
than MegEngine 1.13, so checked against numpy definitions rather than the oracle)."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
from compiler.module.vision import AdditiveGaussianNoise, Flip, LinearContrast, RandomHorizontalFlip, Sharpen

X = (np.arange(2 * 3 * 4 * 5) * 7 % 251).astype(np.float32).reshape(2, 3, 4, 5)


def _sharpen_numpy(x: np.ndarray, alpha: float, lightness: float) -> np.ndarray:
    kernel = np.array([[-1, -1, -1], [-1, 8 + lightness, -1], [-1, -1, -1]], np.float32) * alpha
    kernel[1, 1] += 1 - alpha
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect")
    out = np.zeros_like(x)
    for dy in range(3):
        for dx in range(3):
            out += kernel[dy, dx] * padded[:, :, dy : dy + x.shape[2], dx : dx + x.shape[3]]
    return out


def test_sharpen_and_contrast_follow_their_definitions() -> None:
    np.testing.assert_allclose(
        Sharpen(alpha=0.7, lightness=0.9)(mge.tensor(X)).numpy(),
        _sharpen_numpy(X, 0.7, 0.9),
        rtol=1e-5,
        atol=1e-3,
    )
    u8 = X.astype(np.uint8)
    got = Sharpen(alpha=0.5, lightness=1.2)(mge.tensor(u8)).numpy()
    assert got.dtype == np.uint8
    expect = np.clip(_sharpen_numpy(u8.astype(np.float32), 0.5, 1.2), 0, 255)
    assert np.abs(got.astype(np.float32) - expect).max() <= 1.0
    np.testing.assert_allclose(LinearContrast(alpha=0.6)(mge.tensor(X)).numpy(), X * 0.6, rtol=1e-6)
    got = LinearContrast(alpha=1.5)(mge.tensor(u8)).numpy()
    np.testing.assert_array_equal(
        got, np.clip(127 + (u8.astype(np.float32) - 127) * 1.5, 0, 255).astype(np.uint8)
    )
    drawn = LinearContrast(alpha=(0.5, 0.7), per_channel=True, seed=3)(mge.tensor(X)).numpy()
    ratio = drawn[:, :, 1:, 1:] / X[:, :, 1:, 1:]
    assert ((ratio >= 0.5 - 1e-6) & (ratio <= 0.7 + 1e-6)).all()


def test_flips_and_noise() -> None:
    np.testing.assert_array_equal(Flip(vertical=True, horizontal=False)(mge.tensor(X)).numpy(), X[:, ::-1])
    np.testing.assert_array_equal(RandomHorizontalFlip(prob=1.0)(mge.tensor(X)).numpy(), X[:, :, ::-1])
    noisy = AdditiveGaussianNoise(std=2.0, seed=1)(mge.tensor(X)).numpy() - X
    # one draw per pixel, shared by the channels
    np.testing.assert_allclose(noisy[:, 0], noisy[:, 2], atol=1e-4)
    assert 1.0 < noisy.std() < 3.0
    with pytest.raises(TypeError, match="bool"):
        LinearContrast(alpha=True)(mge.tensor(X))
