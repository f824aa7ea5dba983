"""Image helpers for the vision transforms, on HWC numpy images (a 2-D image is treated as one
channel and comes back 2-D). Interpolation codes are OpenCV's numbers, so code written with
``cv2.INTER_*`` constants passes them unchanged; xmge computes with numpy, not OpenCV."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "INTER_AREA",
    "INTER_CUBIC",
    "INTER_LINEAR",
    "INTER_NEAREST",
    "flip",
    "hsv_to_bgr",
    "bgr_to_hsv",
    "pad",
    "resize",
    "to_bgr",
    "to_gray",
]

INTER_NEAREST, INTER_LINEAR, INTER_CUBIC, INTER_AREA = 0, 1, 2, 3


def _hwc(image: np.ndarray, what: str) -> tuple[np.ndarray, bool]:
    image = np.asarray(image)
    if image.ndim == 2:
        return image[:, :, None], True
    if image.ndim != 3:
        raise ValueError(f"{what}: expected an HWC or HW image, got shape {image.shape}")
    return image, False


def _back(image: np.ndarray, squeeze: bool) -> np.ndarray:
    return image[:, :, 0] if squeeze else image


def _cast_like(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)


def to_gray(image: np.ndarray) -> np.ndarray:
    """BGR to one gray channel (ITU-R 601 weights), shape ``(H, W, 1)``."""
    hwc, _ = _hwc(image, "to_gray")
    if hwc.shape[2] != 3:
        raise ValueError(f"to_gray: expected 3 BGR channels, got {hwc.shape[2]}")
    gray = (
        hwc[..., 0:1] * np.float32(0.114)
        + hwc[..., 1:2] * np.float32(0.587)
        + hwc[..., 2:3] * np.float32(0.299)
    )
    return _cast_like(gray, hwc.dtype)


def to_bgr(image: np.ndarray) -> np.ndarray:
    """One gray channel repeated into three, shape ``(H, W, 3)``."""
    hwc, _ = _hwc(image, "to_bgr")
    if hwc.shape[2] != 1:
        raise ValueError(f"to_bgr: expected 1 channel, got {hwc.shape[2]}")
    return np.repeat(hwc, 3, axis=2)


def pad(image: np.ndarray, size: Sequence[int], value: Any) -> np.ndarray:
    """Pad by ``size = (top, bottom, left, right)`` with ``value`` (a scalar, or one per
    channel). A float value makes the result float32, as the padded values must be kept."""
    hwc, squeeze = _hwc(image, "pad")
    top, bottom, left, right = (int(s) for s in size)
    if min(top, bottom, left, right) < 0:
        raise ValueError(f"pad: sizes must be non-negative, got {tuple(size)}")
    fill = np.asarray(value)
    dtype = hwc.dtype
    if fill.dtype.kind == "f" and dtype.kind != "f":
        dtype = np.dtype(np.float32)
    if fill.ndim == 1 and fill.shape[0] != hwc.shape[2]:
        raise ValueError(f"pad: {fill.shape[0]} pad values for {hwc.shape[2]} channels")
    h, w, c = hwc.shape
    out = np.empty((h + top + bottom, w + left + right, c), dtype=dtype)
    out[...] = fill
    out[top : top + h, left : left + w] = hwc
    return _back(out, squeeze)


def flip(image: np.ndarray, flipCode: int) -> np.ndarray:  # noqa: N803 - OpenCV's name
    """``flipCode`` 0 flips rows (vertical), > 0 columns (horizontal), < 0 both."""
    image = np.asarray(image)
    if flipCode == 0:
        out = image[::-1]
    elif flipCode > 0:
        out = image[:, ::-1]
    else:
        out = image[::-1, ::-1]
    return np.ascontiguousarray(out)


def _linear_axis(src: int, dst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # half-pixel centres; at the borders the edge pixel alone (OpenCV's INTER_LINEAR convention)
    pos = ((np.arange(dst) + 0.5) * (src / dst) - 0.5).astype(np.float32)
    lo = np.floor(pos).astype(np.int64)
    frac = pos - lo
    frac = np.where(lo < 0, np.float32(0), frac)
    lo = np.maximum(lo, 0)
    edge = lo >= src - 1
    frac = np.where(edge, np.float32(0), frac).astype(np.float32)
    lo = np.where(edge, src - 1, lo)
    return lo, np.minimum(lo + 1, src - 1), frac


def _linear_uint8(hwc: np.ndarray, rows: tuple, cols: tuple) -> np.ndarray:
    # OpenCV's fixed-point uint8 path: 11-bit weights, a horizontal pass in int, then a vertical
    # pass that drops 4 bits before a 16-bit high multiply; within 1 of OpenCV everywhere
    (r0, r1, fr), (c0, c1, fc) = rows, cols
    a1 = np.rint(fc * 2048).astype(np.int64)
    b1 = np.rint(fr * 2048).astype(np.int64)
    a0, b0 = 2048 - a1, 2048 - b1
    src = hwc.astype(np.int64)
    horiz = src[:, c0] * a0[None, :, None] + src[:, c1] * a1[None, :, None]
    top = (b0[:, None, None] * (horiz[r0] >> 4)) >> 16
    bottom = (b1[:, None, None] * (horiz[r1] >> 4)) >> 16
    return ((top + bottom + 2) >> 2).clip(0, 255).astype(np.uint8)


def resize(
    image: np.ndarray, size: Sequence[int], interpolation: int | Sequence[int] = INTER_LINEAR
) -> np.ndarray:
    """Resize to ``size = (height, width)`` by nearest or bilinear interpolation (a sequence of
    interpolations: one drawn at random)."""
    if len(size) != 2:
        raise ValueError(f"resize: size must be (height, width), got {size!r}")
    if isinstance(interpolation, Sequence):
        interpolation = interpolation[np.random.randint(len(interpolation))]
    hwc, squeeze = _hwc(image, "resize")
    th, tw = (int(s) for s in size)
    if th <= 0 or tw <= 0:
        raise ValueError(f"resize: target size must be positive, got {tuple(size)}")
    h, w, _ = hwc.shape
    if (h, w) == (th, tw):
        return _back(hwc.copy(), squeeze)
    if interpolation == INTER_NEAREST:
        rows = np.minimum((np.arange(th) * (h / th)).astype(np.int64), h - 1)
        cols = np.minimum((np.arange(tw) * (w / tw)).astype(np.int64), w - 1)
        return _back(np.ascontiguousarray(hwc[rows][:, cols]), squeeze)
    if interpolation != INTER_LINEAR:
        raise ValueError(
            f"resize: interpolation {interpolation} is not supported (xmge has INTER_NEAREST=0 and "
            "INTER_LINEAR=1)"
        )
    rows, cols = _linear_axis(h, th), _linear_axis(w, tw)
    if hwc.dtype == np.uint8:
        return _back(_linear_uint8(hwc, rows, cols), squeeze)
    (r0, r1, fr), (c0, c1, fc) = rows, cols
    src = hwc.astype(np.float32)
    horiz = src[:, c0] * (1 - fc)[None, :, None] + src[:, c1] * fc[None, :, None]
    out = horiz[r0] * (1 - fr)[:, None, None] + horiz[r1] * fr[:, None, None]
    return _back(_cast_like(out, hwc.dtype), squeeze)


def bgr_to_hsv(image: np.ndarray) -> np.ndarray:
    """uint8 BGR to HSV with hue over the full 0..255 range (OpenCV's ``COLOR_BGR2HSV_FULL``)."""
    bgr = np.asarray(image, dtype=np.float32)
    b, g, r = bgr[..., 0], bgr[..., 1], bgr[..., 2]
    v = bgr.max(axis=-1)
    delta = v - bgr.min(axis=-1)
    s = np.where(v > 0, delta * 255.0 / np.maximum(v, 1e-12), 0.0)
    safe = np.maximum(delta, 1e-12)
    hue = np.where(
        v == r,
        (g - b) * 60.0 / safe,
        np.where(v == g, 120.0 + (b - r) * 60.0 / safe, 240.0 + (r - g) * 60.0 / safe),
    )
    hue = np.where(delta > 0, np.mod(hue, 360.0), 0.0)
    h = np.mod(np.rint(hue * 256.0 / 360.0), 256.0)
    return np.stack([h, np.rint(s), v], axis=-1).astype(np.uint8)


def hsv_to_bgr(image: np.ndarray) -> np.ndarray:
    """The inverse of :func:`bgr_to_hsv`."""
    hsv = np.asarray(image, dtype=np.float32)
    h = hsv[..., 0] * (6.0 / 256.0)
    s = hsv[..., 1] / 255.0
    v = hsv[..., 2]
    sector = np.floor(h).astype(np.int64) % 6
    f = h - np.floor(h)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    choices_r = [v, q, p, p, t, v]
    choices_g = [t, v, v, q, p, p]
    choices_b = [p, p, t, v, v, q]
    r = np.choose(sector, choices_r)
    g = np.choose(sector, choices_g)
    b = np.choose(sector, choices_b)
    return np.clip(np.rint(np.stack([b, g, r], axis=-1)), 0, 255).astype(np.uint8)
