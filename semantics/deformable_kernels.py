"""Reference kernels of MegEngine's deformable operators, DeformableConv (DCNv2, modulated), and
of RegionRestrictedConvolution.

The input is sampled as MegEngine's naive kernel does (checked against MegEngine 1.13, outputs in
tests/data/image_mge/deformable_outputs.npz): a tap at (h, w) is 0 unless -1 < h < H and
-1 < w < W; inside, each of its four corners reads 0 outside the image, and the corner weights are
products of the float32 fractions. Each output sums its (input channel, fh, fw) taps in that order
in float32; MegEngine's GEMM sums in another order, within a few float32 ulps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dialects import enums
from dialects import tensor as T
from semantics.kernels import ResultSpec, kernel

F32 = np.float32


def _filter(w: np.ndarray, sparse: Any) -> tuple[np.ndarray, int]:
    """(OC, IC/G, FH, FW) and the group count."""
    if sparse == enums.ConvSparse.GROUP:
        return w.reshape(w.shape[0] * w.shape[1], *w.shape[2:]), w.shape[0]
    return w, 1


def sample_positions(
    oh: int,
    ow: int,
    fh: int,
    fw: int,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    offset: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns (float32, (DG, FH*FW, OH, OW)) each tap of one image reads."""
    k = fh * fw
    off = offset.astype(F32).reshape(-1, k, 2, oh, ow)
    kh, kw = np.divmod(np.arange(k), fw)
    base_h = (np.arange(oh)[None, :, None] * stride[0] - padding[0] + kh[:, None, None] * dilation[0]).astype(
        F32
    )
    base_w = (np.arange(ow)[None, None, :] * stride[1] - padding[1] + kw[:, None, None] * dilation[1]).astype(
        F32
    )
    return base_h[None] + off[:, :, 0], base_w[None] + off[:, :, 1]


def bilinear_corners(h: np.ndarray, w: np.ndarray, height: int, width: int) -> list[tuple[np.ndarray, ...]]:
    """The four (row, column, weight, valid) corners of taps at float32 (h, w); a tap outside
    (-1, H) x (-1, W) has all four invalid."""
    inside = (h > -1) & (w > -1) & (h < height) & (w < width)
    h0, w0 = np.floor(h), np.floor(w)
    lh, lw = (h - h0).astype(F32), (w - w0).astype(F32)
    hh, hw = F32(1) - lh, F32(1) - lw
    h0i, w0i = h0.astype(np.int64), w0.astype(np.int64)
    out = []
    for dh, dw, wt in ((0, 0, hh * hw), (0, 1, hh * lw), (1, 0, lh * hw), (1, 1, lh * lw)):
        r, c = h0i + dh, w0i + dw
        ok = inside & (r >= 0) & (c >= 0) & (r < height) & (c < width)
        out.append((np.clip(r, 0, height - 1), np.clip(c, 0, width - 1), wt, ok))
    return out


def columns(
    x: np.ndarray, offset: np.ndarray, mask: np.ndarray, fh: int, fw: int, p: dict[str, Any]
) -> tuple[np.ndarray, list[list[tuple[np.ndarray, ...]]]]:
    """The modulated samples (N, C, FH*FW, OH, OW) float32 and, per image, the corners used."""
    n, c, height, width = x.shape
    oh, ow = offset.shape[2:]
    k = fh * fw
    dg = offset.shape[1] // (2 * k)
    cpg = c // dg
    cols = np.zeros((n, c, k, oh, ow), F32)
    corners = []
    for b in range(n):
        hs, ws = sample_positions(oh, ow, fh, fw, p["stride"], p["padding"], p["dilation"], offset[b])
        cb = bilinear_corners(hs, ws, height, width)
        corners.append(cb)
        m = mask[b].astype(F32).reshape(dg, k, oh, ow)
        for ch in range(c):
            g = ch // cpg
            plane = x[b, ch].astype(F32)
            val = np.zeros((k, oh, ow), F32)
            for r, col, wt, ok in cb:
                val = val + wt[g] * np.where(ok[g], plane[r[g], col[g]], F32(0))
            cols[b, ch] = val * m[g]
    return cols, corners


@kernel(T.DeformableConvOp)
def deformable_conv(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
    x, w, offset, mask = args
    wf, groups = _filter(w.astype(F32), p["sparse"])
    oc, icpg, fh, fw = wf.shape
    cols, _ = columns(x, offset, mask, fh, fw, p)
    n, _, k, oh, ow = cols.shape
    out = np.zeros((n, oc, oh, ow), F32)
    ocpg = oc // groups
    for g in range(groups):
        for ic in range(icpg):
            for t in range(k):
                taps = wf[g * ocpg : (g + 1) * ocpg, ic].reshape(ocpg, k)[:, t]
                out[:, g * ocpg : (g + 1) * ocpg] += (
                    cols[:, g * icpg + ic, t][:, None] * taps[None, :, None, None]
                )
    return [out]


def deformable_conv_backward(
    x: np.ndarray, w: np.ndarray, offset: np.ndarray, mask: np.ndarray, gy: np.ndarray, p: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d input, d filter, d offset, d mask) for the output gradient ``gy`` (float64 sums): the
    column gradient ``W^T gy`` scattered through each tap's bilinear corners (input), times the
    corner values' slopes (offset), times the unmodulated sample (mask)."""
    wf, groups = _filter(w.astype(np.float64), p["sparse"])
    oc, icpg, fh, fw = wf.shape
    k = fh * fw
    cols, corners = columns(x, offset, mask, fh, fw, p)
    n, c, _, oh, ow = cols.shape
    ocpg = oc // groups
    g64 = gy.astype(np.float64)
    dcols = np.zeros((n, c, k, oh, ow))
    dw = np.zeros_like(wf)
    for g in range(groups):
        wg = wf[g * ocpg : (g + 1) * ocpg].reshape(ocpg, icpg * k)
        gg = g64[:, g * ocpg : (g + 1) * ocpg]
        cg = cols[:, g * icpg : (g + 1) * icpg].reshape(n, icpg * k, oh, ow).astype(np.float64)
        dcols[:, g * icpg : (g + 1) * icpg] = np.einsum("ok,nohw->nkhw", wg, gg).reshape(n, icpg, k, oh, ow)
        dw[g * ocpg : (g + 1) * ocpg] = np.einsum("nohw,nkhw->ok", gg, cg).reshape(ocpg, icpg, fh, fw)
    dg = offset.shape[1] // (2 * k)
    cpg = c // dg
    dx = np.zeros(x.shape)
    doff = np.zeros((n, dg, k, 2, oh, ow))
    dmask = np.zeros((n, dg, k, oh, ow))
    for b in range(n):
        m = mask[b].astype(np.float64).reshape(dg, k, oh, ow)
        hs, ws = sample_positions(oh, ow, fh, fw, p["stride"], p["padding"], p["dilation"], offset[b])
        lh, lw = (hs - np.floor(hs)).astype(np.float64), (ws - np.floor(ws)).astype(np.float64)
        for ch in range(c):
            g = ch // cpg
            plane = x[b, ch].astype(np.float64)
            d = dcols[b, ch]
            vals = [np.where(ok[g], plane[r[g], col[g]], 0.0) for r, col, _, ok in corners[b]]
            sample = sum(
                wt[g].astype(np.float64) * v for (_, _, wt, _), v in zip(corners[b], vals, strict=True)
            )
            dmask[b, g] += d * sample
            dsamp = d * m[g]
            for r, col, wt, ok in corners[b]:
                np.add.at(dx[b, ch], (r[g][ok[g]], col[g][ok[g]]), (dsamp * wt[g])[ok[g]])
            v00, v01, v10, v11 = vals
            doff[b, g, :, 0] += dsamp * ((v10 - v00) * (1 - lw[g]) + (v11 - v01) * lw[g])
            doff[b, g, :, 1] += dsamp * ((v01 - v00) * (1 - lh[g]) + (v11 - v10) * lh[g])
    return (
        dx.astype(x.dtype),
        dw.reshape(w.shape).astype(w.dtype),
        doff.reshape(offset.shape).astype(offset.dtype),
        dmask.reshape(mask.shape).astype(mask.dtype),
    )


# ----------------------------------------------------------------------------------------------
# RegionRestrictedConvolution


def region_windows(x: np.ndarray, rin: np.ndarray, rout: np.ndarray, fh: int, fw: int, p: dict[str, Any]):  # noqa: ANN201
    """Per tap (a, b): the input window (N, C, OH, OW) with taps of another region (or padding)
    zeroed, and the padded-window slices (for the gradient's scatter)."""
    (ph, pw), (sh, sw), (dh, dw) = p["padding"], p["stride"], p["dilation"]
    oh, ow = rout.shape[1:]
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    rp = np.pad(rin.astype(np.int64), ((0, 0), (ph, ph), (pw, pw)), constant_values=-1)
    for a in range(fh):
        for b in range(fw):
            sl = (
                slice(a * dh, a * dh + (oh - 1) * sh + 1, sh),
                slice(b * dw, b * dw + (ow - 1) * sw + 1, sw),
            )
            ok = rp[(slice(None), *sl)] == rout.astype(np.int64)
            yield a, b, sl, ok, np.where(ok[:, None], xp[(slice(None), slice(None), *sl)], F32(0))


@kernel(T.RegionRestrictedConvOp)
def region_restricted_conv(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any
) -> list[np.ndarray]:
    """float32 sums in MegEngine's naive (fh, fw, input channel) order."""
    x, w, rin, rout = args
    g, ocpg, icpg, fh, fw = w.shape
    w = w.astype(F32)
    out = np.zeros((x.shape[0], g * ocpg, *rout.shape[1:]), F32)
    for a, b, _, _, win in region_windows(x.astype(F32), rin, rout, fh, fw, p):
        for gi in range(g):
            for ic in range(icpg):
                taps = w[gi, :, ic, a, b]
                out[:, gi * ocpg : (gi + 1) * ocpg] += (
                    win[:, gi * icpg + ic][:, None] * taps[None, :, None, None]
                )
    return [out]


def region_restricted_conv_backward(
    x: np.ndarray, w: np.ndarray, rin: np.ndarray, rout: np.ndarray, gy: np.ndarray, p: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(d input, d filter) for the output gradient ``gy`` (float64 sums); none for the region ids."""
    g, ocpg, icpg, fh, fw = w.shape
    (ph, pw) = p["padding"]
    g64 = gy.astype(np.float64).reshape(gy.shape[0], g, ocpg, *gy.shape[2:])
    dxp = np.zeros((x.shape[0], x.shape[1], x.shape[2] + 2 * ph, x.shape[3] + 2 * pw))
    dw = np.zeros(w.shape)
    w64 = w.astype(np.float64)
    for a, b, sl, ok, win in region_windows(x.astype(np.float64), rin, rout, fh, fw, p):
        wg = win.reshape(win.shape[0], g, icpg, *win.shape[2:])
        dw[:, :, :, a, b] = np.einsum("ngohw,ngihw->goi", g64, wg)
        contrib = np.einsum("ngohw,goi->ngihw", g64, w64[:, :, :, a, b]) * ok[:, None, None]
        dxp[(slice(None), slice(None), *sl)] += contrib.reshape(win.shape)
    dx = dxp[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]]
    return dx.astype(x.dtype), dw.astype(w.dtype)


# ----------------------------------------------------------------------------------------------
# DeformablePSROIPooling


def _round_away(v: np.float32) -> np.float32:
    return F32(np.sign(v) * np.floor(np.abs(np.float64(v)) + 0.5))


def psroi_samples(
    roi: np.ndarray, n: int, trans: np.ndarray, p: dict[str, Any], height: int, width: int
) -> list[list[list[tuple[float, float, float, float]]]]:
    """Per bin (ph, pw): its samples' clamped positions (h, w) and d position / d trans (for
    the gradient: ``trans_std * roi_height``, ``trans_std * roi_width``), in float32 as MegEngine:
    the roi rounded to pixels, scaled, shifted by -0.5; bin (ph, pw) moved by roi ``n``'s
    ``trans`` at part cell ``(floor(ph / PH * part), floor(pw / PW * part))``; samples outside
    [-0.5, size - 0.5] dropped, the others clamped into the image."""
    ph_n, pw_n, part, spp = p["pooled_h"], p["pooled_w"], p["part_size"], p["sample_per_part"]
    ss, ts = F32(p["spatial_scale"]), F32(p["trans_std"])
    half = F32(0.5)
    sw, sh = _round_away(roi[1]) * ss - half, _round_away(roi[2]) * ss - half
    ew, eh = (_round_away(roi[3]) + F32(1)) * ss - half, (_round_away(roi[4]) + F32(1)) * ss - half
    rw, rh = max(ew - sw, F32(0.1)), max(eh - sh, F32(0.1))
    bw, bh = rw / F32(pw_n), rh / F32(ph_n)
    sbw, sbh = bw / F32(spp), bh / F32(spp)
    flat = trans.reshape(-1)
    bins = []
    for ph in range(ph_n):
        row = []
        for pw in range(pw_n):
            part_h = int(np.floor(F32(ph) / F32(ph_n) * F32(part)))
            part_w = int(np.floor(F32(pw) / F32(pw_n) * F32(part)))
            if p["no_trans"]:
                tx = ty = F32(0)
            else:
                tx = flat[((n * 2) * part + part_h) * part + part_w] * ts
                ty = flat[((n * 2 + 1) * part + part_h) * part + part_w] * ts
            ws, hs = F32(pw) * bw + sw + tx * rw, F32(ph) * bh + sh + ty * rh
            samples = []
            for ih in range(spp):
                for iw in range(spp):
                    w, h = ws + F32(iw) * sbw, hs + F32(ih) * sbh
                    if w < -0.5 or w > width - 0.5 or h < -0.5 or h > height - 0.5:
                        continue
                    w, h = min(max(w, F32(0)), F32(width - 1)), min(max(h, F32(0)), F32(height - 1))
                    samples.append((h, w, float(ts * rh), float(ts * rw)))
            row.append(samples)
        bins.append(row)
    return bins


def _psroi_bilinear(plane: np.ndarray, h: np.float32, w: np.float32) -> tuple[np.ndarray, list[Any]]:
    """MegEngine's bilinear read of ``plane`` (C, H, W) at (h, w) inside the image: corners at
    floor/ceil; returns the value and the (row, column, weight) corners."""
    x1, x2, y1, y2 = int(np.floor(w)), int(np.ceil(w)), int(np.floor(h)), int(np.ceil(h))
    dx, dy = F32(w - F32(x1)), F32(h - F32(y1))
    one = F32(1)
    corners = [(y1, x1, (one - dx) * (one - dy)), (y2, x1, (one - dx) * dy), (y1, x2, dx * (one - dy)),
               (y2, x2, dx * dy)]  # fmt: skip
    val = corners[0][2] * plane[:, y1, x1]
    for r, c, wt in corners[1:]:
        val = val + wt * plane[:, r, c]
    return val, corners


@kernel(T.DeformablePSROIPoolingOp)
def deformable_psroi_pooling(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any
) -> list[np.ndarray]:
    x, rois, trans = args
    n_img, c, height, width = x.shape
    out = np.zeros(results[0].shape, F32)
    count = np.zeros(results[1].shape, F32)
    for n in range(rois.shape[0]):
        b = int(rois[n][0])
        if not 0 <= b < n_img:
            from semantics.vision_kernels import DataIndexError

            raise DataIndexError(f"mgb.deformable_psroi_pooling: roi batch index {rois[n][0]} out of range")
        plane = x[b].astype(F32)
        for ph, row in enumerate(psroi_samples(rois[n], n, trans, p, height, width)):
            for pw, samples in enumerate(row):
                acc = np.zeros(c, F32)
                for h, w, _, _ in samples:
                    acc = acc + _psroi_bilinear(plane, h, w)[0]
                k = len(samples)
                out[n, :, ph, pw] = acc / F32(k) if k else F32(0)
                count[n, :, ph, pw] = k
    return [out, count]


def deformable_psroi_pooling_backward(
    x: np.ndarray, rois: np.ndarray, trans: np.ndarray, gy: np.ndarray, p: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(d input, d trans) for the output gradient ``gy`` (float64 sums): each bin's gradient over
    its samples' bilinear corners; the trans gradient through the sample positions (zero with
    ``no_trans``)."""
    _, c, height, width = x.shape
    dx = np.zeros(x.shape)
    dflat = np.zeros(trans.size)
    part = p["part_size"]
    for n in range(rois.shape[0]):
        b = int(rois[n][0])
        plane = x[b].astype(np.float64)
        for ph, row in enumerate(psroi_samples(rois[n], n, trans, p, height, width)):
            for pw, samples in enumerate(row):
                if not samples:
                    continue
                g = gy[n, :, ph, pw].astype(np.float64) / len(samples)
                part_h = int(np.floor(F32(ph) / F32(p["pooled_h"]) * F32(part)))
                part_w = int(np.floor(F32(pw) / F32(p["pooled_w"]) * F32(part)))
                for h, w, dh, dw in samples:
                    _, corners = _psroi_bilinear(x[b].astype(F32), h, w)
                    for r, col, wt in corners:
                        dx[b, :, r, col] += g * float(wt)
                    if p["no_trans"]:
                        continue
                    (y1, x1, _), (y2, _, _), (_, x2, _), _ = corners
                    fx, fy = float(w) - x1, float(h) - y1
                    d_w = (1 - fy) * (plane[:, y1, x2] - plane[:, y1, x1]) + fy * (
                        plane[:, y2, x2] - plane[:, y2, x1]
                    )
                    d_h = (1 - fx) * (plane[:, y2, x1] - plane[:, y1, x1]) + fx * (
                        plane[:, y2, x2] - plane[:, y1, x2]
                    )
                    dflat[((n * 2) * part + part_h) * part + part_w] += float((g * d_w).sum()) * dw
                    dflat[((n * 2 + 1) * part + part_h) * part + part_w] += float((g * d_h).sum()) * dh
    return dx.astype(x.dtype), dflat.reshape(trans.shape).astype(trans.dtype)
