"""Reference kernels of the image ops of MegEngine's ``functional.vision`` that preprocessing and
inference graphs use: warp_affine, remap, cvt_color and the bicubic mode of Resize.

Each reproduces what MegEngine 1.13's CPU kernels compute (checked against real MegEngine, outputs
in tests/data/image_mge): float32 arithmetic in the same order, uint8 in the same fixed point.

* WarpAffine in NHWC is MegEngine's (OpenCV-derived) fixed-point sampler: each source position is
  an integer in 1/1024 pixel (``AB_BITS``), rounded to 1/32 pixel (``INTER_BITS``); the fraction
  picks weights from a 32 x 32 table (float32 products of the 1-D weights; for uint8, those
  scaled to 2^15 and corrected to sum to exactly 2^15). NCHW (linear only) samples at the float
  position like WarpPerspective.
* Remap samples at the float positions of ``map_xy`` (nearest: rounded half to even).
* The YUV conversions of CvtColor read and write MegEngine's channel order: "RGB2YUV" weighs
  channel 0 as blue (0.114) and channel 2 as red; "YUV2RGB" writes blue first.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from dialects import enums
from dialects import tensor as T
from semantics.kernels import ResultSpec, kernel
from semantics.vision_kernels import _coords, warp_perspective_ref

F32 = np.float32
I = enums.InterpolationMode
AB_BITS = 10
AB_SCALE = 1 << AB_BITS
INTER_BITS = 5
INTER_TAB_SIZE = 1 << INTER_BITS
COEF_BITS = 15
COEF_SCALE = 1 << COEF_BITS
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
CUBIC_A = -0.75


# ----------------------------------------------------------------------------------------------
# interpolation weights


def cubic_weights(x: np.ndarray) -> np.ndarray:
    """The four cubic-convolution weights (a = -0.75) of taps -1, 0, 1, 2 for fractions ``x``
    (float32), computed as MegEngine does; the last is 1 minus the others. Shape (len(x), 4)."""
    x = np.asarray(x, F32)
    a, one = F32(CUBIC_A), F32(1)
    c0 = ((a * (x + one) - F32(5) * a) * (x + one) + F32(8) * a) * (x + one) - F32(4) * a
    c1 = ((a + F32(2)) * x - (a + F32(3))) * x * x + one
    c2 = ((a + F32(2)) * (one - x) - (a + F32(3))) * (one - x) * (one - x) + one
    c3 = one - c0 - c1 - c2
    return np.stack([c0, c1, c2, c3], -1).astype(F32)


def weights_1d(imode: Any) -> np.ndarray:
    """Per 1/32 fraction, the 1-D weights of the taps (linear: 2, cubic: 4), float32."""
    xs = np.arange(INTER_TAB_SIZE, dtype=F32) * F32(1.0 / INTER_TAB_SIZE)
    if imode == I.LINEAR:
        return np.stack([F32(1) - xs, xs], -1).astype(F32)
    return cubic_weights(xs)


@functools.cache
def warp_table(imode: Any) -> np.ndarray:
    """float32 weights (32, 32, k, k): [y fraction, x fraction, tap row, tap column]."""
    w = weights_1d(imode)
    return (w[:, None, :, None] * w[None, :, None, :]).astype(F32)


@functools.cache
def warp_table_int(imode: Any) -> np.ndarray:
    """The uint8 weights: :func:`warp_table` times 2^15, rounded to nearest even, and where the
    sum misses 2^15 the largest (sum short) or smallest (sum over) of the central 2 x 2 taps
    takes the difference."""
    f = warp_table(imode)
    k = f.shape[-1]
    out = np.rint(f.astype(np.float64) * COEF_SCALE).astype(np.int64)
    lo = k // 2 - 1
    for i in range(INTER_TAB_SIZE):
        for j in range(INTER_TAB_SIZE):
            t = out[i, j]
            diff = int(t.sum()) - COEF_SCALE
            if diff == 0:
                continue
            small = big = (lo, lo)
            for a in range(lo, lo + 2):
                for b in range(lo, lo + 2):
                    if t[a, b] < t[small]:
                        small = (a, b)
                    elif t[a, b] > t[big]:
                        big = (a, b)
            t[big if diff < 0 else small] -= diff
    return out


# ----------------------------------------------------------------------------------------------
# WarpAffine


def _sat_round(v: np.ndarray) -> np.ndarray:
    """float64 to int32 as MegEngine's saturate_cast<int>: round half to even, saturate (NaN to
    INT32_MIN)."""
    v = np.where(np.isnan(v), float(INT32_MIN), v)
    return np.clip(np.rint(v), INT32_MIN, INT32_MAX).astype(np.int64)


def warp_affine_positions(m: np.ndarray, oh: int, ow: int, imode: Any) -> tuple[np.ndarray, np.ndarray]:
    """Source positions (X, Y), each (OH, OW) int64, of one (2, 3) matrix: whole pixels for
    NEAREST, 1/32 pixels otherwise (the low 5 bits are the fraction). The matrix is used in
    double precision, each row start and column step rounded to 1/1024 pixel."""
    md = m.astype(F32).astype(np.float64).reshape(6)
    xs = np.arange(ow, dtype=np.float64)
    ys = np.arange(oh, dtype=np.float64)[:, None]
    adelta, bdelta = _sat_round(md[0] * xs * AB_SCALE), _sat_round(md[3] * xs * AB_SCALE)
    near = imode == I.NEAREST
    round_delta = AB_SCALE // 2 if near else AB_SCALE // INTER_TAB_SIZE // 2
    x0 = _sat_round((md[1] * ys + md[2]) * AB_SCALE) + round_delta
    y0 = _sat_round((md[4] * ys + md[5]) * AB_SCALE) + round_delta
    shift = AB_BITS if near else AB_BITS - INTER_BITS
    return (x0 + adelta[None]) >> shift, (y0 + bdelta[None]) >> shift


def _border(p: np.ndarray, n: int, bmode: Any) -> np.ndarray:
    return _coords(p.astype(np.float64), n, bmode)


def u8_border(border_val: float) -> int:
    """The uint8 border value as MegEngine converts it: the float32 value truncated to int32 and
    wrapped to 8 bits (300 -> 44, -4 -> 252, 3.5 -> 3); NaN and values beyond int32 give x86's
    integer-indefinite INT32_MIN, so 0."""
    v = float(np.float32(border_val))
    if np.isnan(v) or not -(2.0**31) < v < 2.0**31:
        return 0
    return int(np.trunc(v)) & 0xFF


def warp_affine_nhwc(x: np.ndarray, mat: np.ndarray, oh: int, ow: int, imode: Any, bmode: Any,
                     border_val: float) -> np.ndarray:  # fmt: skip
    n, ih, iw, c = x.shape
    is_u8 = x.dtype == np.uint8
    cval = u8_border(border_val) if is_u8 else F32(border_val)
    constant = bmode == enums.BorderMode.CONSTANT
    out = np.empty((n, oh, ow, c), x.dtype)
    for b in range(n):
        src = x[b]
        px, py = warp_affine_positions(mat[b], oh, ow, imode)

        def at(yy: np.ndarray, xx: np.ndarray, src: np.ndarray = src) -> np.ndarray:
            v = src[np.maximum(yy, 0), np.maximum(xx, 0)]
            return np.where(((yy < 0) | (xx < 0))[..., None], cval, v) if constant else v

        if imode == I.NEAREST:
            out[b] = at(_border(py, ih, bmode), _border(px, iw, bmode))
            continue
        sx, sy = px >> INTER_BITS, py >> INTER_BITS
        fx, fy = px & (INTER_TAB_SIZE - 1), py & (INTER_TAB_SIZE - 1)
        k = 2 if imode == I.LINEAR else 4
        first = 0 if k == 2 else 1
        if is_u8:
            wt = warp_table_int(imode)[fy, fx]
            acc = np.zeros((oh, ow, c), np.int64)
            for i in range(k):
                yy = _border(sy - first + i, ih, bmode)
                for j in range(k):
                    acc += at(yy, _border(sx - first + j, iw, bmode)).astype(np.int64) * wt[..., i, j, None]
            out[b] = np.clip((acc + (1 << (COEF_BITS - 1))) >> COEF_BITS, 0, 255)
            continue
        wt = warp_table(imode)[fy, fx]
        acc = np.zeros((oh, ow, c), F32)
        for i in range(k):  # taps summed row by row, left to right
            yy = _border(sy - first + i, ih, bmode)
            for j in range(k):
                acc = acc + at(yy, _border(sx - first + j, iw, bmode)) * wt[..., i, j, None]
        if constant:  # all taps outside: the border value itself
            x0, y0 = sx - first, sy - first
            outside = (x0 >= iw) | (x0 + k <= 0) | (y0 >= ih) | (y0 + k <= 0)
            acc = np.where(outside[..., None], cval, acc)
        out[b] = acc
    return out


@kernel(T.WarpAffineOp)
def warp_affine(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, mat = args
    oh, ow = p["out_shape"]
    if p["format"] == enums.Format.NCHW:
        m3 = np.concatenate([mat.astype(F32), np.tile(np.array([[[0, 0, 1]]], F32), (mat.shape[0], 1, 1))], 1)
        return [warp_perspective_ref(x, m3, None, oh, ow, p["bmode"], p["border_val"])]
    return [warp_affine_nhwc(x, mat, oh, ow, p["imode"], p["bmode"], p["border_val"])]


# ----------------------------------------------------------------------------------------------
# Remap


def remap_taps(mp: np.ndarray, ih: int, iw: int, bmode: Any) -> tuple[np.ndarray, ...]:
    """(y0, y1, x0, x1, u, v) of one image's bilinear remap: border-mapped rows and columns
    (-1: the constant border) and the float32 fractions down (u) and across (v)."""
    cx, cy = mp[..., 0].astype(F32), mp[..., 1].astype(F32)
    fx, fy = np.floor(cx), np.floor(cy)
    with np.errstate(invalid="ignore"):
        return (_coords(fy, ih, bmode), _coords(fy + 1, ih, bmode), _coords(fx, iw, bmode),
                _coords(fx + 1, iw, bmode), cy - fy, cx - fx)  # fmt: skip


def remap_scalar(scalar: float, dtype: np.dtype) -> np.float32:
    """The constant border value a remap of ``dtype`` images blends: for uint8 the scalar
    converted to uint8 first (rounded half away from zero, saturated), as MegEngine does."""
    if np.dtype(dtype) == np.uint8:
        return F32(round_half_away(np.array(F32(scalar)), np.dtype(np.uint8)))
    return F32(scalar)


def remap_ref(x: np.ndarray, mp: np.ndarray, imode: Any, bmode: Any, scalar: float) -> np.ndarray:
    n, c, ih, iw = x.shape
    oh, ow = mp.shape[1:3]
    out = np.empty((n, c, oh, ow), F32)
    sc = remap_scalar(scalar, x.dtype)
    constant = bmode == enums.BorderMode.CONSTANT
    for b in range(n):
        src = x[b].astype(F32, copy=False)

        def at(yy: np.ndarray, xx: np.ndarray, src: np.ndarray = src) -> np.ndarray:
            v = src[:, np.maximum(yy, 0), np.maximum(xx, 0)]
            return np.where((yy < 0) | (xx < 0), sc, v) if constant else v

        if imode == I.NEAREST:
            with np.errstate(invalid="ignore"):
                rx, ry = np.rint(mp[b, ..., 0].astype(F32)), np.rint(mp[b, ..., 1].astype(F32))
            out[b] = at(_coords(ry, ih, bmode), _coords(rx, iw, bmode))
            continue
        y0, y1, x0, x1, u, v = remap_taps(mp[b], ih, iw, bmode)
        one = F32(1)
        with np.errstate(invalid="ignore", over="ignore"):
            out[b] = (at(y0, x0) * (one - v) * (one - u) + at(y0, x1) * (one - u) * v
                      + at(y1, x0) * (one - v) * u + at(y1, x1) * u * v)  # fmt: skip
    return out


def round_half_away(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    r = np.trunc(v + np.copysign(F32(0.5), v))
    return np.clip(r, info.min, info.max).astype(dtype)


@kernel(T.RemapOp)
def remap(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, mp = args
    y = remap_ref(x, mp, p["imode"], p["bmode"], p["scalar"])
    if x.dtype == np.uint8:
        return [round_half_away(y, np.dtype(np.uint8))]
    return [y]


# ----------------------------------------------------------------------------------------------
# CvtColor

M = enums.CvtColorMode
# 14-bit fixed-point weights of the uint8 conversions
Y_R, Y_G, Y_B = 4899, 9617, 1868  # 0.299, 0.587, 0.114
U_B, V_R = 8061, 14369  # 0.492, 0.877
B_U, G_U, G_V, R_V = 33292, -6472, -9519, 18678  # 2.032, -0.395, -0.581, 1.140
SHIFT = 14
HALF = 1 << (SHIFT - 1)


def _gray_f(first: np.ndarray, mid: np.ndarray, last: np.ndarray) -> np.ndarray:
    """float gray of (blue, green, red) planes: summed blue first."""
    return first * F32(0.114) + mid * F32(0.587) + last * F32(0.299)


def cvt_color_ref(x: np.ndarray, mode: Any) -> np.ndarray:
    c = [x[..., i] for i in range(x.shape[-1])]
    if mode == M.GRAY2RGB:
        return np.repeat(x, 3, axis=-1)
    if mode in (M.RGBA2RGB, M.BGR2RGB, M.RGB2BGR, M.RGBA2BGR):
        keep = x[..., :3]
        return np.ascontiguousarray(keep if mode == M.RGBA2RGB else keep[..., ::-1])
    if x.dtype == np.uint8:
        v = [ci.astype(np.int64) for ci in c]
        if mode in (M.RGB2GRAY, M.RGBA2GRAY, M.BGR2GRAY):
            r, g, b = (v[0], v[1], v[2]) if mode != M.BGR2GRAY else (v[2], v[1], v[0])
            y = (r * Y_R + g * Y_G + b * Y_B + HALF) >> SHIFT
            return np.clip(y, 0, 255).astype(np.uint8)[..., None]
        if mode == M.RGB2YUV:  # channel 0 is blue
            b, g, r = v[0], v[1], v[2]
            y = (r * Y_R + g * Y_G + b * Y_B + HALF) >> SHIFT
            delta = (128 << SHIFT) + HALF
            u, w = ((b - y) * U_B + delta) >> SHIFT, ((r - y) * V_R + delta) >> SHIFT
            return np.clip(np.stack([y, u, w], -1), 0, 255).astype(np.uint8)
        # YUV2RGB: writes blue first
        y, u, w = v[0], v[1] - 128, v[2] - 128
        b = y + ((B_U * u + HALF) >> SHIFT)
        g = y + ((G_V * w + G_U * u + HALF) >> SHIFT)
        r = y + ((R_V * w + HALF) >> SHIFT)
        return np.clip(np.stack([b, g, r], -1), 0, 255).astype(np.uint8)
    f = [ci.astype(F32) for ci in c]
    if mode == M.RGB2GRAY:
        return _gray_f(f[2], f[1], f[0])[..., None]
    if mode == M.BGR2GRAY:
        return _gray_f(f[0], f[1], f[2])[..., None]
    half = F32(0.5)
    if mode == M.RGB2YUV:
        y = _gray_f(f[0], f[1], f[2])
        return np.stack([y, (f[0] - y) * F32(0.492) + half, (f[2] - y) * F32(0.877) + half], -1)
    y, u, w = f[0], f[1] - half, f[2] - half  # YUV2RGB
    g = y + (u * F32(-0.395) + w * F32(-0.581))
    return np.stack([y + u * F32(2.032), g, y + w * F32(1.140)], -1)


@kernel(T.CvtColorOp)
def cvt_color(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    return [cvt_color_ref(args[0], p["mode"]).astype(results[0].dtype, copy=False)]


# ----------------------------------------------------------------------------------------------
# Resize, bicubic


def cubic_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """First source index (of four) and the four float32 weights per output index: the source
    position ``(d + 0.5) / (out / in) - 0.5`` in float32 (divided by the float32 scale, as
    MegEngine: multiplying by in / out differs in the last bit), replicate border."""
    scale = F32(n_out) / F32(n_in)
    f = (np.arange(n_out, dtype=F32) + F32(0.5)) / scale - F32(0.5)
    s = np.floor(f)
    return s.astype(np.int64) - 1, cubic_weights(f - s)


def resize_cubic(x: np.ndarray, oh: int, ow: int) -> np.ndarray:
    """Bicubic NCHW resize: per output the 16 taps summed row by row, each ``v * wy * wx``."""
    h, w = x.shape[2:]
    y0, wy = cubic_taps(h, oh)
    x0, wx = cubic_taps(w, ow)
    x = x.astype(F32, copy=False)
    out = np.zeros((*x.shape[:2], oh, ow), F32)
    for i in range(4):
        rows = x[:, :, np.clip(y0 + i, 0, h - 1)]
        for j in range(4):
            out = out + rows[..., np.clip(x0 + j, 0, w - 1)] * wy[:, i, None] * wx[None, :, j]
    return out


def cubic_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) float64 weights of :func:`cubic_taps` (edge taps folded onto the edge pixel):
    the bicubic resize along one axis as a matrix, for its gradient."""
    first, w = cubic_taps(n_in, n_out)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    for i in range(4):
        np.add.at(m, (rows, np.clip(first + i, 0, n_in - 1)), w[:, i].astype(np.float64))
    return m
