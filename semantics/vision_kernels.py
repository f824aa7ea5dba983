"""Reference kernels of 3-D convolution and the image ops of MegEngine's ``functional.vision``
(warp_perspective, roi_align, roi_pooling, nms, correlation).

Each follows MegEngine's naive CPU kernel: float32 arithmetic in the same order (so the generated C,
which repeats that order, matches bit for bit), the same border, rounding and empty-bin rules. The
functions the backward rules and the C templates reuse (coordinate mapping, sample positions, roi
geometry) live here once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dialects import enums
from dialects import tensor as T
from dialects.errors import XmgeError
from semantics.kernels import ResultSpec, kernel

F32 = np.float32
FLT_LOWEST = float(np.finfo(np.float32).min)
COORD_LIMIT = 1 << 24
"""Source coordinates are clamped to +-2^24 (and NaN to -2^24) before they become integers: beyond
that every border mode gives the same pixel, and the conversion stays defined."""


class DataIndexError(XmgeError, ValueError):
    """An index carried in the data (a matrix's image index, a roi's batch index) names no input
    image; MegEngine's kernels assert on it too."""


# ----------------------------------------------------------------------------------------------
# Convolution3D


def conv3d_filter(w: np.ndarray, sparse: Any, mode: Any) -> tuple[np.ndarray, int]:
    """The filter as (OC, IC/G, KD, KH, KW) for cross-correlation (flipped for a true convolution)
    and the group count."""
    groups = 1
    if sparse == enums.ConvSparse.GROUP:
        groups = w.shape[0]
        w = w.reshape(w.shape[0] * w.shape[1], *w.shape[2:])
    if mode == enums.ConvMode.CONVOLUTION:
        w = w[..., ::-1, ::-1, ::-1]
    return w, groups


def conv3d_out(size: Sequence[int], k: Sequence[int], stride: Sequence[int], padding: Sequence[int],
               dilation: Sequence[int]) -> list[int]:  # fmt: skip
    return [(size[i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(3)]


def conv3d_ncdhw(
    x: np.ndarray,
    w: np.ndarray,
    *,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    sparse: Any,
    mode: Any,
) -> np.ndarray:
    """float32 NCDHW convolution; each output sums its taps in (input channel, kd, kh, kw) order."""
    w, groups = conv3d_filter(w.astype(F32, copy=False), sparse, mode)
    oc, icpg, *k = w.shape
    pd, ph, pw = padding
    xp = np.pad(x.astype(F32, copy=False), ((0, 0), (0, 0), (pd, pd), (ph, ph), (pw, pw)))
    od, oh, ow = conv3d_out(x.shape[2:], k, stride, padding, dilation)
    out = np.zeros((x.shape[0], oc, od, oh, ow), F32)
    ocpg = oc // groups
    for g in range(groups):
        outs = out[:, g * ocpg : (g + 1) * ocpg]
        for ic in range(icpg):
            plane = xp[:, g * icpg + ic]
            for a in range(k[0]):
                for b in range(k[1]):
                    for c in range(k[2]):
                        d0, h0, w0 = a * dilation[0], b * dilation[1], c * dilation[2]
                        win = plane[
                            :,
                            d0 : d0 + (od - 1) * stride[0] + 1 : stride[0],
                            h0 : h0 + (oh - 1) * stride[1] + 1 : stride[1],
                            w0 : w0 + (ow - 1) * stride[2] + 1 : stride[2],
                        ]
                        taps = w[g * ocpg : (g + 1) * ocpg, ic, a, b, c]
                        outs += win[:, None] * taps[None, :, None, None, None]
    return out


def conv3d_backward(
    x: np.ndarray, w: np.ndarray, g: np.ndarray, *, stride: Sequence[int], padding: Sequence[int],
    dilation: Sequence[int], sparse: Any, mode: Any,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(d input, d filter) of :func:`conv3d_ncdhw` for the output gradient ``g`` (float64 sums)."""
    wshape = w.shape
    wd, groups = conv3d_filter(w.astype(np.float64), sparse, mode)
    oc, icpg, *k = wd.shape
    pd, ph, pw = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pd, pd), (ph, ph), (pw, pw)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(wd)
    g = g.astype(np.float64)
    od, oh, ow = g.shape[2:]
    ocpg = oc // groups
    for gi in range(groups):
        gs = g[:, gi * ocpg : (gi + 1) * ocpg]
        for ic in range(icpg):
            ch = gi * icpg + ic
            for a in range(k[0]):
                for b in range(k[1]):
                    for c in range(k[2]):
                        d0, h0, w0 = a * dilation[0], b * dilation[1], c * dilation[2]
                        sl = (
                            slice(d0, d0 + (od - 1) * stride[0] + 1, stride[0]),
                            slice(h0, h0 + (oh - 1) * stride[1] + 1, stride[1]),
                            slice(w0, w0 + (ow - 1) * stride[2] + 1, stride[2]),
                        )
                        win = xp[:, ch][(slice(None), *sl)]
                        taps = wd[gi * ocpg : (gi + 1) * ocpg, ic, a, b, c]
                        dxp[:, ch][(slice(None), *sl)] += np.einsum("nodhw,o->ndhw", gs, taps)
                        dw[gi * ocpg : (gi + 1) * ocpg, ic, a, b, c] = np.einsum("nodhw,ndhw->o", gs, win)
    dx = dxp[:, :, pd : pd + x.shape[2], ph : ph + x.shape[3], pw : pw + x.shape[4]]
    if mode == enums.ConvMode.CONVOLUTION:
        dw = dw[..., ::-1, ::-1, ::-1]
    return dx.astype(x.dtype), np.ascontiguousarray(dw).reshape(wshape).astype(w.dtype)


@kernel(T.Convolution3DOp)
def convolution3d(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, w = args
    y = conv3d_ncdhw(x, w, **{k: p[k] for k in ("stride", "padding", "dilation", "sparse", "mode")})
    return [y.astype(results[0].dtype, copy=False)]


# ----------------------------------------------------------------------------------------------
# WarpPerspective


def border_coord(p: int, n: int, bmode: Any) -> int:
    """The source index MegEngine reads for coordinate ``p`` of an axis of ``n`` pixels (-1: the
    constant border)."""
    B = enums.BorderMode
    if 0 <= p < n:
        return p
    if bmode == B.REPLICATE:
        return 0 if p < 0 else n - 1
    if bmode in (B.REFLECT, B.REFLECT_101):
        delta = int(bmode == B.REFLECT_101)
        if n == 1:
            return 0
        while not 0 <= p < n:
            p = -p - 1 + delta if p < 0 else n - 1 - (p - n) - delta
        return p
    if bmode == B.WRAP:
        return p % n
    return -1  # CONSTANT


def _coords(f: np.ndarray, n: int, bmode: Any) -> np.ndarray:
    """:func:`border_coord` of the integer coordinates ``f`` (floats, clamped as COORD_LIMIT says),
    in closed form: the reflections repeat with period 2n (REFLECT) or 2n - 2 (REFLECT_101)."""
    B = enums.BorderMode
    lim = float(COORD_LIMIT)
    p = np.where(np.isnan(f), -lim, np.clip(f, -lim, lim)).astype(np.int64)
    inside = (p >= 0) & (p < n)
    if bmode == B.REPLICATE:
        return np.clip(p, 0, n - 1)
    if bmode in (B.REFLECT, B.REFLECT_101):
        if n == 1:
            return np.zeros_like(p)
        period = 2 * n if bmode == B.REFLECT else 2 * n - 2
        m = np.mod(p, period)
        return np.where(m < n, m, period - 1 - m if bmode == B.REFLECT else period - m)
    if bmode == B.WRAP:
        return np.mod(p, n)
    return np.where(inside, p, -1)  # CONSTANT


def warp_taps(
    m: np.ndarray, oh: int, ow: int, ih: int, iw: int, bmode: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For one 3x3 matrix: (h0, h1, w0, w1, alpha_h, alpha_w, numerators and denominator) per output
    pixel, in float32 as MegEngine computes them (``alpha`` the fractional parts)."""
    m = m.astype(F32).reshape(9)
    owv = np.arange(ow, dtype=F32)[None, :]
    ohv = np.arange(oh, dtype=F32)[:, None]
    nw = m[0] * owv + m[1] * ohv + m[2]
    nh = m[3] * owv + m[4] * ohv + m[5]
    den = m[6] * owv + m[7] * ohv + m[8]
    with np.errstate(divide="ignore", invalid="ignore"):
        aw, ah = nw / den, nh / den
    fw, fh = np.floor(aw), np.floor(ah)
    w0, w1 = _coords(fw, iw, bmode), _coords(fw + 1, iw, bmode)
    h0, h1 = _coords(fh, ih, bmode), _coords(fh + 1, ih, bmode)
    with np.errstate(invalid="ignore"):
        return h0, h1, w0, w1, ah - fh, aw - fw, np.stack([nw, nh]), den


def warp_perspective_ref(
    x: np.ndarray, mat: np.ndarray, idx: np.ndarray | None, oh: int, ow: int, bmode: Any, border_val: float
) -> np.ndarray:
    n_mat = mat.shape[0]
    c, ih, iw = x.shape[1:]
    out = np.empty((n_mat, c, oh, ow), F32)
    bv = F32(border_val)
    constant = bmode == enums.BorderMode.CONSTANT
    for n in range(n_mat):
        src = x[int(idx[n]) if idx is not None else n].astype(F32, copy=False)
        h0, h1, w0, w1, ah, aw, _, _ = warp_taps(mat[n], oh, ow, ih, iw, bmode)

        def at(h: np.ndarray, w: np.ndarray, src: np.ndarray = src) -> np.ndarray:
            v = src[:, np.maximum(h, 0), np.maximum(w, 0)]
            return np.where((h == -1) | (w == -1), bv, v) if constant else v

        one = F32(1)
        with np.errstate(invalid="ignore", over="ignore"):
            val = (at(h0, w0) * (one - aw) * (one - ah) + at(h0, w1) * aw * (one - ah)
                   + at(h1, w0) * (one - aw) * ah + at(h1, w1) * aw * ah)  # fmt: skip
        out[n] = np.where(np.isfinite(val), val, bv) if constant else val
    return out


@kernel(T.WarpPerspectiveOp)
def warp_perspective(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, mat, *rest = args
    idx = rest[0] if rest else None
    if idx is not None and (idx.min(initial=0) < 0 or idx.max(initial=0) >= x.shape[0]):
        raise DataIndexError(
            f"mgb.warp_perspective: mat_idx {idx.tolist()} index out of range for {x.shape[0]} images"
        )
    oh, ow = p["out_shape"]
    return [warp_perspective_ref(x, mat, idx, oh, ow, p["bmode"], p["border_val"])]


# ----------------------------------------------------------------------------------------------
# ROIAlign / ROIPooling


def roi_batch(op: str, roi: np.ndarray, n: int) -> int:
    b = int(roi[0])
    if not 0 <= b < n:
        raise DataIndexError(f"{op}: roi batch index {roi[0]} is out of range for {n} input images")
    return b


def roi_align_samples(
    roi: np.ndarray, ph: int, pw: int, sh: int, sw: int, scale: float, offset: float
) -> tuple[np.ndarray, np.ndarray]:
    """Sample rows (PH, SH) and columns (PW, SW) of one roi's bins, in float32 as MegEngine."""
    r = roi.astype(F32)
    sc, off = F32(scale), F32(offset)
    x1, y1, x2, y2 = (r[i] * sc - off for i in (1, 2, 3, 4))
    bin_h = np.maximum(y2 - y1, F32(0)) / F32(ph)
    bin_w = np.maximum(x2 - x1, F32(0)) / F32(pw)
    rate_h, rate_w = F32(1) / F32(sh), F32(1) / F32(sw)
    hs = y1 + bin_h * (
        np.arange(ph, dtype=F32)[:, None] + rate_h * (np.arange(sh, dtype=F32)[None] + F32(0.5))
    )
    ws = x1 + bin_w * (
        np.arange(pw, dtype=F32)[:, None] + rate_w * (np.arange(sw, dtype=F32)[None] + F32(0.5))
    )
    return hs, ws


def bilinear_zero(plane: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """MegEngine's roi_align bilinear_interp of the (C, H, W) ``plane`` at rows ``h`` x columns
    ``w`` (1-D float32): (C, len(h), len(w)), zero outside the image."""
    height, width = plane.shape[1:]
    h0, w0 = np.floor(h).astype(np.int64), np.floor(w).astype(np.int64)

    def at(hi: np.ndarray, wi: np.ndarray) -> np.ndarray:
        ok = ((hi >= 0) & (hi < height))[:, None] & ((wi >= 0) & (wi < width))[None, :]
        v = plane[:, np.clip(hi, 0, height - 1)][:, :, np.clip(wi, 0, width - 1)]
        return np.where(ok[None], v, F32(0))

    tl, tr, bl, br = at(h0, w0), at(h0, w0 + 1), at(h0 + 1, w0), at(h0 + 1, w0 + 1)
    fw = (w - w0.astype(F32))[None, None, :]
    fh = (h - h0.astype(F32))[None, :, None]
    top = tl + (tr - tl) * fw
    bottom = bl + (br - bl) * fw
    return top + (bottom - top) * fh


@kernel(T.ROIAlignOp)
def roi_align(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, rois = args
    ph, pw = p["pooled_shape"]
    sh, sw = p["sample_shape"]
    k, c = rois.shape[0], x.shape[1]
    out = np.zeros((k, c, ph, pw), F32)
    index = np.full((k, c, ph, pw), -1, np.int32)
    is_max = p["mode"] == enums.ROIMode.MAX
    for r in range(k):
        plane = x[roi_batch("mgb.roi_align", rois[r], x.shape[0])].astype(F32, copy=False)
        hs, ws = roi_align_samples(rois[r], ph, pw, sh, sw, p["spatial_scale"], p["offset"])
        acc = np.full((c, ph, pw), FLT_LOWEST if is_max else 0.0, F32)
        for i in range(sh):
            for j in range(sw):
                v = bilinear_zero(plane, hs[:, i], ws[:, j])
                if is_max:
                    better = v > acc
                    acc = np.where(better, v, acc)
                    index[r] = np.where(better, i * sw + j, index[r])
                else:
                    acc = acc + v
        out[r] = acc if is_max else acc / F32(sh * sw)
    return [out, index]


def roi_pool_bins(roi: np.ndarray, oh: int, ow: int, scale: float, height: int, width: int) -> tuple[
    list[tuple[int, int]], list[tuple[int, int]]
]:  # fmt: skip
    """[(start, end)] rows per output row and columns per output column of one roi, as MegEngine's
    ROIPooling rounds and clips them."""
    r = roi.astype(F32)

    def rnd(v: F32) -> int:  # C round(): half away from zero
        return int(math.copysign(math.floor(abs(float(v)) + 0.5), float(v)))

    sw, sh, ew, eh = (rnd(r[i] * F32(scale)) for i in (1, 2, 3, 4))
    bin_h = F32(max(eh - sh + 1, 1)) / F32(oh)
    bin_w = F32(max(ew - sw + 1, 1)) / F32(ow)

    def edges(count: int, size: F32, start: int, limit: int) -> list[tuple[int, int]]:
        out = []
        for i in range(count):
            lo = int(math.floor(F32(i) * size)) + start
            hi = int(math.ceil(F32(i + 1) * size)) + start
            out.append((min(max(lo, 0), limit), min(max(hi, 0), limit)))
        return out

    return edges(oh, bin_h, sh, height), edges(ow, bin_w, sw, width)


@kernel(T.ROIPoolingOp)
def roi_pooling(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, rois = args
    oh, ow = p["out_shape"]
    k, c, height, width = rois.shape[0], *x.shape[1:]
    out = np.zeros((k, c, oh, ow), F32)
    index = np.full((k, c, oh, ow), -1, np.int32)
    is_max = p["mode"] == enums.ROIMode.MAX
    for r in range(k):
        plane = x[roi_batch("mgb.roi_pooling", rois[r], x.shape[0])].astype(F32, copy=False)
        rows, cols = roi_pool_bins(rois[r], oh, ow, p["scale"], height, width)
        for i, (h0, h1) in enumerate(rows):
            for j, (w0, w1) in enumerate(cols):
                if h1 <= h0 or w1 <= w0:
                    continue  # an empty bin pools to 0
                acc = np.full(c, FLT_LOWEST if is_max else 0.0, F32)
                best = np.full(c, -1, np.int32)
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        v = plane[:, h, w]
                        if is_max:
                            better = v > acc
                            acc = np.where(better, v, acc)
                            best = np.where(better, h * width + w, best)
                        else:
                            acc = acc + v
                out[r, :, i, j] = acc if is_max else acc / F32((h1 - h0) * (w1 - w0))
                index[r, :, i, j] = best
    return [out, index]


# ----------------------------------------------------------------------------------------------
# NMSKeep


def nms_keep_row(boxes: np.ndarray, thresh: float, max_output: int) -> tuple[np.ndarray, int]:
    """MegEngine's CPU NMS of one image's boxes (already in score order): kept indices (the tail
    repeating the last kept one, 0 when none) and their count."""
    b = boxes.astype(F32, copy=False)
    th = F32(thresh)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    kept: list[int] = []
    for i in range(b.shape[0]):
        if kept:
            k = np.asarray(kept)
            left, right = np.maximum(b[k, 0], b[i, 0]), np.minimum(b[k, 2], b[i, 2])
            top, bottom = np.maximum(b[k, 1], b[i, 1]), np.minimum(b[k, 3], b[i, 3])
            inter = np.maximum(right - left, F32(0)) * np.maximum(bottom - top, F32(0))
            if np.any(inter > (area[i] + area[k] - inter) * th):
                continue
        kept.append(i)
        if len(kept) == max_output:
            break
    out = np.full(max_output, kept[-1] if kept else 0, np.int32)
    out[: len(kept)] = kept
    return out, len(kept)


@kernel(T.NMSKeepOp)
def nms_keep(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    (boxes,) = args
    rows = [nms_keep_row(b, p["iou_thresh"], p["max_output"]) for b in boxes]
    idx = np.stack([r[0] for r in rows]) if rows else np.zeros((0, p["max_output"]), np.int32)
    return [idx.astype(np.int32), np.asarray([r[1] for r in rows], np.int32)]


# ----------------------------------------------------------------------------------------------
# Correlation


def correlation_geometry(p: dict[str, Any], out_hw: Sequence[int]) -> dict[str, Any]:
    """Where output (c, y, x) reads: data1 window centres ``y * stride1 + base`` (same for x) and, per
    displacement channel, the (dy, dx) offset of the data2 window."""
    radius = (int(p["kernel_size"]) - 1) // 2
    grid_r = int(p["max_displacement"]) // int(p["stride2"])
    grid = 2 * grid_r + 1
    s2 = int(p["stride2"])
    offsets = [((c // grid - grid_r) * s2, (c % grid - grid_r) * s2) for c in range(grid * grid)]
    base = radius + int(p["max_displacement"]) - int(p["pad_size"])
    return {
        "radius": radius,
        "offsets": offsets,
        "base": base,
        "stride": int(p["stride1"]),
        "out": tuple(out_hw),
    }


def _shifted(x: np.ndarray, y0: int, x0: int, stride: int, oh: int, ow: int, margin: int) -> np.ndarray:
    """``x`` (zero-padded by ``margin``) at rows y0 + stride * i, columns x0 + stride * j."""
    return x[:, :, margin + y0 : margin + y0 + (oh - 1) * stride + 1 : stride,
             margin + x0 : margin + x0 + (ow - 1) * stride + 1 : stride]  # fmt: skip


def _margin(geo: dict[str, Any], shape: Sequence[int]) -> int:
    reach = abs(geo["base"]) + geo["radius"] + max(max(abs(a), abs(b)) for a, b in geo["offsets"])
    return reach + geo["stride"] * max(geo["out"]) + max(shape[2:])


@kernel(T.CorrelationOp)
def correlation(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    a, b = (v.astype(F32, copy=False) for v in args)
    oh, ow = results[0].shape[2:]
    geo = correlation_geometry(p, (oh, ow))
    m = _margin(geo, a.shape)
    ap = np.pad(a, ((0, 0), (0, 0), (m, m), (m, m)))
    bp = np.pad(b, ((0, 0), (0, 0), (m, m), (m, m)))
    r, base, st = geo["radius"], geo["base"], geo["stride"]
    out = np.empty(results[0].shape, F32)
    n_elems = F32((2 * r + 1) ** 2 * a.shape[1])
    for c, (dy, dx) in enumerate(geo["offsets"]):
        acc = np.zeros((a.shape[0], oh, ow), F32)
        for i in range(-r, r + 1):  # MegEngine's order: x offset, y offset, then channel
            for j in range(-r, r + 1):
                w1 = _shifted(ap, base + j, base + i, st, oh, ow, m)
                w2 = _shifted(bp, base + j + dy, base + i + dx, st, oh, ow, m)
                for ch in range(a.shape[1]):
                    term = w1[:, ch] * w2[:, ch] if p["is_multiply"] else np.abs(w1[:, ch] - w2[:, ch])
                    acc = acc + term
        out[:, c] = acc / n_elems
    return [out]


def correlation_backward(
    a: np.ndarray, b: np.ndarray, g: np.ndarray, p: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(d data1, d data2) of :func:`correlation` for the output gradient ``g`` (float64)."""
    oh, ow = g.shape[2:]
    geo = correlation_geometry(p, (oh, ow))
    m = _margin(geo, a.shape)
    ap = np.pad(a.astype(np.float64), ((0, 0), (0, 0), (m, m), (m, m)))
    bp = np.pad(b.astype(np.float64), ((0, 0), (0, 0), (m, m), (m, m)))
    da, db = np.zeros_like(ap), np.zeros_like(bp)
    r, base, st = geo["radius"], geo["base"], geo["stride"]
    g = g.astype(np.float64) / ((2 * r + 1) ** 2 * a.shape[1])
    for c, (dy, dx) in enumerate(geo["offsets"]):
        gc = g[:, c][:, None]
        for i in range(-r, r + 1):
            for j in range(-r, r + 1):
                w1 = _shifted(ap, base + j, base + i, st, oh, ow, m)
                w2 = _shifted(bp, base + j + dy, base + i + dx, st, oh, ow, m)
                g1 = _shifted(da, base + j, base + i, st, oh, ow, m)
                g2 = _shifted(db, base + j + dy, base + i + dx, st, oh, ow, m)
                if p["is_multiply"]:
                    g1 += gc * w2
                    g2 += gc * w1
                else:
                    s = np.sign(w1 - w2)
                    g1 += gc * s
                    g2 -= gc * s
    h, w = a.shape[2:]
    return (da[:, :, m : m + h, m : m + w].astype(a.dtype), db[:, :, m : m + h, m : m + w].astype(b.dtype))
