"""Backward rules of 3-D convolution and the differentiable image ops (warp_perspective,
roi_align, roi_pooling, correlation): the gradients MegEngine's backward operators compute, in
numpy (float64 sums), from the reference kernels' own geometry (``semantics.vision_kernels``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dialects import enums
from dialects import tensor as T
from semantics import vision_kernels as V

Array = np.ndarray
Rule = Callable[
    [Sequence[Array], Sequence[Array], Sequence[Array | None], dict[str, Any]], list[Array | None]
]
RULES: dict[type[T.MgbOp], Rule] = {}
"""op class -> its backward rule; ``compiler.autodiff`` registers them (this module does not import
it, so that the package's imports stay acyclic)."""


def _rule(op: type[T.MgbOp]) -> Callable[[Rule], Rule]:
    def add(fn: Rule) -> Rule:
        RULES[op] = fn
        return fn

    return add


def _only_grad(grads: Sequence[Array | None]) -> Array:
    (g,) = grads
    assert g is not None
    return g


@_rule(T.Convolution3DOp)
def _convolution3d_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    x, w = inputs
    conv = {k: params[k] for k in ("stride", "padding", "dilation", "sparse", "mode")}
    dx, dw = V.conv3d_backward(x, w, _only_grad(grads), **conv)
    return [dx, dw]


@_rule(T.WarpPerspectiveOp)
def _warp_perspective_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """Gradients for the image (each output's four bilinear weights scattered back) and for the
    matrices (through the sample position: d out / d alpha times d alpha / d M); none for mat_idx.
    Taps on a CONSTANT border carry no image gradient, as in MegEngine."""
    x, mat, *rest = inputs
    idx = rest[0] if rest else None
    g = _only_grad(grads).astype(np.float64)
    oh, ow = params["out_shape"]
    bmode = params["bmode"]
    constant = bmode == enums.BorderMode.CONSTANT
    c, ih, iw = x.shape[1:]
    dx = np.zeros(x.shape, np.float64)
    dmat = np.zeros(mat.shape, np.float64)
    owv = np.arange(ow, dtype=np.float64)[None, :]
    ohv = np.arange(oh, dtype=np.float64)[:, None]
    for n in range(mat.shape[0]):
        b = int(idx[n]) if idx is not None else n
        src = x[b].astype(np.float64)
        h0, h1, w0, w1, ah, aw, num, den = V.warp_taps(mat[n], oh, ow, ih, iw, bmode)
        ah, aw, num, den = (a.astype(np.float64) for a in (ah, aw, num, den))
        gn = g[n]
        corners = ((h0, w0, (1 - aw) * (1 - ah)), (h0, w1, aw * (1 - ah)),
                   (h1, w0, (1 - aw) * ah), (h1, w1, aw * ah))  # fmt: skip
        vals = []
        for h, w, wt in corners:
            ok = (h >= 0) & (w >= 0)
            v = np.where(
                ok, src[:, np.maximum(h, 0), np.maximum(w, 0)], params["border_val"] if constant else 0
            )
            vals.append(v)
            hh, ww = np.broadcast_to(np.maximum(h, 0), (oh, ow)), np.broadcast_to(np.maximum(w, 0), (oh, ow))
            contrib = gn * (wt * ok)[None]
            for ch in range(c):
                np.add.at(dx[b, ch], (hh, ww), contrib[ch])
        v00, v01, v10, v11 = vals
        d_aw = ((v01 - v00) * (1 - ah) + (v11 - v10) * ah) * gn
        d_ah = ((v10 - v00) * (1 - aw) + (v11 - v01) * aw) * gn
        d_aw, d_ah = d_aw.sum(axis=0), d_ah.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            gw, gh = d_aw / den, d_ah / den
            ratio_w, ratio_h = num[0] / den, num[1] / den
        ok = np.isfinite(gw) & np.isfinite(gh)
        gw, gh = np.where(ok, gw, 0), np.where(ok, gh, 0)
        ones = np.ones_like(owv * ohv)
        basis = (owv * ones, ohv * ones, ones)
        for k, t in enumerate(basis):
            dmat[n, 0, k] = (gw * t).sum()
            dmat[n, 1, k] = (gh * t).sum()
            dmat[n, 2, k] = -(np.where(ok, gw * ratio_w + gh * ratio_h, 0) * t).sum()
    grads_in: list[Array | None] = [dx.astype(x.dtype), dmat.astype(mat.dtype)]
    return grads_in + ([None] if idx is not None else [])


@_rule(T.ROIAlignOp)
def _roi_align_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """Each bin's gradient spread over the bilinear taps of its samples (all of them, divided by
    their count, for average; the winning one for max); none for the rois."""
    x, rois = inputs
    g = grads[0]
    if g is None:
        return [None, None]
    index = outputs[1]
    ph, pw = params["pooled_shape"]
    sh, sw = params["sample_shape"]
    height, width = x.shape[2:]
    dx = np.zeros(x.shape, np.float64)
    is_max = params["mode"] == enums.ROIMode.MAX
    for r in range(rois.shape[0]):
        b = int(rois[r][0])
        hs, ws = V.roi_align_samples(rois[r], ph, pw, sh, sw, params["spatial_scale"], params["offset"])
        for i in range(sh):
            for j in range(sw):
                share = g[r].astype(np.float64) * ((index[r] == i * sw + j) if is_max else 1.0 / (sh * sw))
                h = hs[:, i].astype(np.float64)[:, None]
                w = ws[:, j].astype(np.float64)[None, :]
                h0, w0 = np.floor(h), np.floor(w)
                taps = (
                    (h0, w0, (h0 + 1 - h) * (w0 + 1 - w)),
                    (h0, w0 + 1, (h0 + 1 - h) * (w - w0)),
                    (h0 + 1, w0, (h - h0) * (w0 + 1 - w)),
                    (h0 + 1, w0 + 1, (h - h0) * (w - w0)),
                )
                for hh, ww, wt in taps:
                    hb, wb = np.broadcast_arrays(hh.astype(np.int64), ww.astype(np.int64))
                    ok = (hb >= 0) & (hb < height) & (wb >= 0) & (wb < width)
                    for ch in range(x.shape[1]):
                        np.add.at(dx[b, ch], (hb[ok], wb[ok]), (share[ch] * wt)[ok])
    return [dx.astype(x.dtype), None]


@_rule(T.ROIPoolingOp)
def _roi_pooling_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """Max: each bin's gradient to the pixel that won it; average: spread evenly over the bin."""
    x, rois = inputs
    g = grads[0]
    if g is None:
        return [None, None]
    index = outputs[1]
    oh, ow = params["out_shape"]
    c, height, width = x.shape[1:]
    dx = np.zeros((x.shape[0], c, height * width), np.float64)
    is_max = params["mode"] == enums.ROIMode.MAX
    for r in range(rois.shape[0]):
        b = int(rois[r][0])
        rows, cols = V.roi_pool_bins(rois[r], oh, ow, params["scale"], height, width)
        for i, (h0, h1) in enumerate(rows):
            for j, (w0, w1) in enumerate(cols):
                if h1 <= h0 or w1 <= w0:
                    continue
                gv = g[r, :, i, j].astype(np.float64)
                if is_max:
                    win = index[r, :, i, j]
                    ok = win >= 0
                    np.add.at(dx[b], (np.arange(c)[ok], win[ok]), gv[ok])
                else:
                    flat = (np.arange(h0, h1)[:, None] * width + np.arange(w0, w1)[None, :]).reshape(-1)
                    dx[b][:, flat] += (gv / flat.size)[:, None]
    return [dx.reshape(x.shape).astype(x.dtype), None]


@_rule(T.CorrelationOp)
def _correlation_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    da, db = V.correlation_backward(inputs[0], inputs[1], _only_grad(grads), params)
    return [da, db]


@_rule(T.RemapOp)
def _remap_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """Linear: the image gradient scatters each output's four bilinear weights (taps on a CONSTANT
    border carry none), the map gradient is d out / d (x, y) summed over channels (constant taps
    read ``scalar``). Nearest: the gradient goes to the pixel read; none for the map."""
    from semantics import image_kernels as IK

    x, mp = inputs
    g = _only_grad(grads).astype(np.float64)
    bmode = params["bmode"]
    constant = bmode == enums.BorderMode.CONSTANT
    c, ih, iw = x.shape[1:]
    dx = np.zeros(x.shape, np.float64)
    dmap = np.zeros(mp.shape, np.float64)
    for n in range(x.shape[0]):
        gn = g[n]
        if params["imode"] == enums.InterpolationMode.NEAREST:
            with np.errstate(invalid="ignore"):
                rx, ry = np.rint(mp[n, ..., 0].astype(np.float32)), np.rint(mp[n, ..., 1].astype(np.float32))
            corners = [(V._coords(ry, ih, bmode), V._coords(rx, iw, bmode), np.ones(ry.shape))]
        else:
            y0, y1, x0, x1, u, v = (a.astype(np.float64) if a.dtype.kind == "f" else a
                                    for a in IK.remap_taps(mp[n], ih, iw, bmode))  # fmt: skip
            corners = [(y0, x0, (1 - v) * (1 - u)), (y0, x1, (1 - u) * v),
                       (y1, x0, (1 - v) * u), (y1, x1, u * v)]  # fmt: skip
        vals = []
        for h, w, wt in corners:
            ok = (h >= 0) & (w >= 0)
            vals.append(np.where(ok, x[n][:, np.maximum(h, 0), np.maximum(w, 0)].astype(np.float64),
                                 params["scalar"] if constant else 0.0))  # fmt: skip
            contrib = gn * (wt * ok)[None]
            for ch in range(c):
                np.add.at(dx[n, ch], (np.maximum(h, 0), np.maximum(w, 0)), contrib[ch])
        if len(vals) == 4:
            v00, v01, v10, v11 = vals
            dmap[n, ..., 0] = (((v01 - v00) * (1 - u) + (v11 - v10) * u) * gn).sum(axis=0)
            dmap[n, ..., 1] = (((v10 - v00) * (1 - v) + (v11 - v01) * v) * gn).sum(axis=0)
    return [dx.astype(x.dtype), dmap.astype(mp.dtype)]


@_rule(T.DeformableConvOp)
def _deformable_conv_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """MegEngine's DeformableConvBackwardData/Filter: input, filter, offset and mask gradients."""
    from semantics.deformable_kernels import deformable_conv_backward

    x, w, offset, mask = inputs
    return list(deformable_conv_backward(x, w, offset, mask, _only_grad(grads), params))


@_rule(T.RegionRestrictedConvOp)
def _region_restricted_conv_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    from semantics.deformable_kernels import region_restricted_conv_backward

    x, w, rin, rout = inputs
    dx, dw = region_restricted_conv_backward(x, w, rin, rout, _only_grad(grads), params)
    return [dx, dw, None, None]


@_rule(T.DeformablePSROIPoolingOp)
def _deformable_psroi_pooling_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """MegEngine's DeformablePSROIPoolingBackward: input and trans gradients; none for the rois
    (nor through the sample counts)."""
    from semantics.deformable_kernels import deformable_psroi_pooling_backward

    x, rois, trans = inputs
    g = grads[0]
    if g is None:
        return [None, None, None]
    dx, dtrans = deformable_psroi_pooling_backward(x, rois, trans, g, params)
    return [dx, None, dtrans]


@_rule(T.WarpAffineOp)
def _warp_affine_backward(
    inputs: Sequence[Array], outputs: Sequence[Array], grads: Sequence[Array | None], params: dict[str, Any]
) -> list[Array | None]:
    """NCHW: WarpPerspective's gradients for the matrix with the row (0, 0, 1) appended (MegEngine
    differentiates it so), the matrix gradient's first two rows. NHWC has none in MegEngine."""
    from compiler.autodiff import GradError

    if params["format"] != enums.Format.NCHW:
        raise GradError("mgb.warp_affine: no gradient in NHWC (MegEngine's WarpAffine has none); use NCHW")
    x, mat = inputs
    m3 = np.concatenate([mat, np.tile(np.array([[[0, 0, 1]]], mat.dtype), (mat.shape[0], 1, 1))], 1)
    dx, dm = _warp_perspective_backward([x, m3], outputs, grads, params)[:2]
    assert dm is not None
    return [dx, np.ascontiguousarray(dm[:, :2])]
