"""A shorter requantization epilogue for the x86 int8 convolutions, proven equal to the exact one.

The exact epilogue (``x86_int8._epilogue_value``: requant.py's definition on 16 lanes) costs about a
dozen vector operations per 16 results, more than the products of a convolution with few input
channels (MobileNetV2's 1x1 layers on 16 or 24 channels, its depthwise layers). Its result is a
*monotone* function of the raw accumulator ``u`` (each step is: the int32 bias, the conversion to
float32, products by positive scales, the bias, RELU, ``round_x86``, saturation), so it is fixed by
where it steps from one int8 value to the next: its thresholds. ``affine_requant`` finds, per output
channel, a float32 ``b`` such that

    ``G(u) = floor(float32(float32(u) * a + b))``, clamped to the result's range,

(``a`` the convolution's float32 scale; one fused multiply-add, rounded once, and one conversion
rounding down: three vector operations with the conversion of ``u``, where a separately rounded
product and sum took four on the epilogues' busiest ports) has the
same thresholds over every accumulator the convolution can produce (``u`` between the sums of the
negative and of the positive products with the extreme inputs). ``G`` is monotone too, so equal
thresholds make it equal to the exact epilogue on that whole range: a check, not an approximation.
The thresholds come from the reference's own operations (``quant_kernels.round_x86``), one level at
a time (255 at most per channel, each from a float64 estimate corrected by a few steps). A
convolution keeps the exact epilogue when any channel has no such ``b`` (a scale so small that
float32 cannot separate the levels), when its activation is not monotone (h-swish), or when ``G``
could leave int32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.c.templates.portable.requant import inverse, post_processed, ratio
from semantics.quant_kernels import round_x86

F32 = np.float32
SLOPE_TRIES = 8  # ulps either side of the scale tried as a channel's slope


@dataclass(frozen=True)
class AffineRequant:
    """``G(u) = clamp(floor(f32(f32(u) * a[c] + b[c])), lo, 127)`` (a fused multiply-add) for the
    output channels ``c`` where ``ok[c]``; the others keep the exact epilogue."""

    a: np.ndarray  # float32, one per output channel (0 where not ok)
    b: np.ndarray  # float32, one per output channel
    ok: np.ndarray  # bool, one per output channel
    lo: int  # -128, or 0 after a RELU


def _exact(u: np.ndarray, p: dict[str, Any], shift: np.ndarray, fb: np.ndarray | None) -> np.ndarray:
    """The exact epilogue's int8 result for raw accumulators ``u`` (int64, [channel, k]): the integer
    bias ``shift`` joins them, then requant.py's definition (as ``_epilogue_value`` computes it)."""
    t = np.clip(u + shift[:, None], -(2**31), 2**31 - 1)
    if not post_processed(p):
        if p["act"] == "relu":
            t = np.maximum(t, 0)
        y = np.multiply(t.astype(F32), F32(ratio(p["s_acc"], p["s_out"])), dtype=F32)
    else:
        y = np.multiply(t.astype(F32), F32(p["s_acc"]), dtype=F32)
        if fb is not None:
            y = np.add(y, fb[:, None].astype(F32), dtype=F32)
        if p["act"] == "relu":
            y = np.maximum(F32(0), y)
        y = np.multiply(y, F32(inverse(p["s_out"])), dtype=F32)
    return np.clip(round_x86(y), -128, 127).astype(np.int64)


def fma32(x: np.ndarray, a: np.float32, b: np.ndarray) -> np.ndarray:
    """float32 ``fma(x, a, b)``: the exact ``x * a + b`` rounded once to nearest even, as
    ``vfmadd`` computes it. The product of two float32 values is exact in float64 (48 bits); the
    float64 sum ``s`` and its exact error ``e`` (Knuth's two-sum) decide the one case where rounding
    ``s`` to float32 differs from rounding the exact sum: ``s`` halfway between two float32 values
    and the exact sum past it (``e`` on the far side)."""
    f64 = np.float64
    prod = x.astype(f64) * f64(a)
    addend = np.broadcast_to(b.astype(f64), prod.shape)
    s = prod + addend
    virtual = s - prod
    e = (prod - (s - virtual)) + (addend - virtual)
    r = s.astype(F32)
    r64 = r.astype(f64)
    beyond = np.nextafter(r, np.where(s > r64, F32(np.inf), F32(-np.inf)).astype(F32))
    halfway = (s != r64) & (s == (r64 + beyond.astype(f64)) / 2)
    past = halfway & (e != 0) & (np.sign(e) == np.sign(s - r64))
    return np.where(past, beyond, r)


def _fast(u: np.ndarray, a: np.float32, b: np.ndarray, lo: int) -> np.ndarray:
    y = fma32(u.astype(F32), a, b[:, None])
    return np.clip(np.floor(y), lo, 127).astype(np.int64)


def affine_requant(
    p: dict[str, Any], wv: np.ndarray, shift: np.ndarray, fb: np.ndarray | None, x_range: tuple[int, int]
) -> AffineRequant | None:
    """The shorter epilogue of an int8-result convolution (see the module docstring), or None.
    ``wv``: the filter's values (int64, output channel first), ``shift``: each channel's integer bias
    (int64, what the exact epilogue adds to the raw accumulator), ``fb``: the float32 bias where the
    result is post-processed, ``x_range``: the values an accumulated input takes (``(0, 255)`` for
    the ``x + 128`` operands)."""
    if p["out"] != "q8" or p.get("zp_out", 0) or p["act"] not in ("identity", "relu"):
        return None
    w = wv.reshape(len(shift), -1)
    lo_x, hi_x = x_range
    u_lo = np.minimum(w * lo_x, w * hi_x).sum(axis=1)
    u_hi = np.maximum(w * lo_x, w * hi_x).sum(axis=1)
    if post_processed(p):
        scale, offset = float(F32(p["s_acc"])) * inverse(p["s_out"]), 0.0
        offset_c = (fb.astype(np.float64) if fb is not None else np.zeros(len(w))) * inverse(p["s_out"])
    else:
        scale, offset = ratio(p["s_acc"], p["s_out"]), 0.0
        offset_c = np.zeros(len(w))
    if not scale > 0:
        return None
    # G stays inside int32 on the whole range (its conversion would give INT_MIN otherwise)
    b_est = offset_c + offset + 0.5 + shift * scale
    if max(np.abs(u_lo).max(initial=0), np.abs(u_hi).max(initial=0)) * scale + np.abs(b_est).max() >= 2**29:
        return None
    lo = 0 if p["act"] == "relu" else -128
    levels = np.arange(lo + 1, 128, dtype=np.int64)[None, :]
    # T[c, j]: the first u where the exact result reaches level j (u_hi + 1: never; u_lo: always)
    est = np.ceil((levels - 0.5 - offset_c[:, None]) / scale - shift[:, None])
    t = np.clip(est, u_lo[:, None], u_hi[:, None] + 1).astype(np.int64)
    for _ in range(64):
        inside = t <= u_hi[:, None]
        up = inside & (_exact(np.minimum(t, u_hi[:, None]), p, shift, fb) < levels)
        down = (t > u_lo[:, None]) & (_exact(t - 1, p, shift, fb) >= levels)
        if not (up.any() or down.any()):
            break
        t = t + up - down
    else:
        return None
    has_below = t > u_lo[:, None]
    has_at = t <= u_hi[:, None]
    at, below = np.minimum(t, u_hi[:, None]), t - 1
    want_lo = _exact(u_lo[:, None], p, shift, fb).clip(lo, 127)[:, 0]
    a_c = np.zeros(len(w), F32)
    b_c = np.zeros(len(w), F32)
    ok = np.zeros(len(w), bool)
    for a_try in _neighbours(F32(scale), SLOPE_TRIES):
        # b's interval: G(T - 1) < j <= G(T) for every level (in reals, then checked in float32)
        p_at = at.astype(F32).astype(np.float64) * np.float64(a_try)  # the exact products (fma)
        p_below = below.astype(F32).astype(np.float64) * np.float64(a_try)
        b_min = np.where(has_at, levels - p_at, -np.inf).max(axis=1)
        b_max = np.where(has_below, levels - p_below, np.inf).min(axis=1)
        one_sided = np.where(np.isfinite(b_min), b_min + 0.5 * scale, b_max - 0.5 * scale)
        b = np.where(np.isfinite(b_min) & np.isfinite(b_max), (b_min + b_max) / 2, one_sided).astype(F32)
        b = np.nan_to_num(b, nan=0.0, posinf=0.0, neginf=0.0)
        good = np.where(has_at, _fast(at, a_try, b, lo) >= levels, True).all(axis=1)
        good &= np.where(has_below, _fast(below, a_try, b, lo) < levels, True).all(axis=1)
        # both functions take the same value at u_lo (each level's check covers the rest)
        good &= _fast(u_lo[:, None], a_try, b, lo)[:, 0] == want_lo
        new = good & ~ok
        a_c[new], b_c[new] = a_try, b[new]
        ok |= new
        if ok.all():
            break
    if not ok.any():
        return None
    return AffineRequant(a_c, b_c, ok, lo)


def _neighbours(a: np.float32, count: int) -> list[np.float32]:
    """``a`` and the float32 values up to ``count`` ulps either side, nearest first."""
    out, up, down = [a], a, a
    for _ in range(count):
        up, down = np.nextafter(up, F32(np.inf)), np.nextafter(down, F32(0))
        out += [up, down]
    return out


__all__ = ["AffineRequant", "affine_requant", "fma32"]
