"""conv3d / M.Conv3d and F.vision's warp_perspective, roi_align, roi_pooling, nms and correlation:
against torch where torch has the op, against straightforward numpy written from MegEngine's
documented definitions where it does not (torchvision is not a dependency), against the outputs
MegEngine's own docstrings print, with gradients checked by finite differences; the C kernels
against the reference interpreter; the .mge rows written and read back."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
import compiler.module as M
from compiler import Tensor
from dialects.errors import XmgeError


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randn(*shape).astype("float32")


def check_grad(fn: Callable[..., Tensor], arrays: list[np.ndarray], wrt: int, picks: int = 10,
               eps: float = 1e-3, tol: float = 2e-2, seed: int = 0) -> None:  # fmt: skip
    """xmge's gradient of sum(fn(*arrays) * g) w.r.t. arrays[wrt] (a random g) against central
    differences at ``picks`` random elements, within ``tol`` of the gradient's largest magnitude."""
    rng = np.random.RandomState(seed)
    out_shape = fn(*[mge.tensor(a) for a in arrays]).shape
    g = rng.randn(*out_shape)
    params = [mge.Parameter(a) if i == wrt else mge.tensor(a) for i, a in enumerate(arrays)]
    gm = mge.autodiff.GradManager().attach([params[wrt]])
    with gm:
        gm.backward((fn(*params) * mge.tensor(g.astype("float32"))).sum())
    analytic = params[wrt].grad.numpy()
    scale = max(1.0, float(np.abs(analytic).max()))
    base = arrays[wrt]
    for _ in range(picks):
        pos = tuple(int(rng.randint(s)) for s in base.shape)
        sums = []
        for sign in (1, -1):
            a = base.copy()
            a[pos] += sign * eps
            args = [mge.tensor(a if i == wrt else x) for i, x in enumerate(arrays)]
            sums.append(float((fn(*args).numpy().astype(np.float64) * g).sum()))
        numeric = (sums[0] - sums[1]) / (2 * eps)
        assert abs(numeric - analytic[pos]) <= tol * scale, (pos, numeric, analytic[pos])


ARM = "arm-nchw44"


def _dump_read_run(
    fn: Callable[..., Any], inputs: list[np.ndarray], **dump: Any
) -> tuple[bytes, list[np.ndarray]]:
    """Trace ``fn``, dump it, read the file back and run it: (file bytes, outputs)."""
    import io

    from compiler.lite import Network

    traced = mge.jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(*[mge.tensor(x) for x in inputs])
    buf = io.BytesIO()
    traced.dump(buf, **dump)
    return buf.getvalue(), list(Network(buf.getvalue())(*inputs).values())


def _compile_and_compare(
    fn: Callable[..., Any], inputs: list[np.ndarray], target: str, sanitize: bool = False
) -> None:
    """Compile for ``target`` and compare every output with the reference interpreter, exactly (the
    kernels repeat the reference's float32 operations in its order)."""
    import warnings

    from compiler.driver.compile import EmulationWarning
    from semantics import run_module
    from tests.codegen_util import compile_fn

    compiled = compile_fn(fn, inputs, target)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        got = compiled.run_runner(inputs, sanitize=True) if sanitize else compiled.run(inputs)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(g, np.asarray(w), err_msg=f"output {i} ({target})")


# ----------------------------------------------------------------------------------------------
# conv3d


@pytest.mark.parametrize(
    "stride,padding,dilation,groups",
    [(1, 0, 1, 1), ((1, 2, 1), (1, 0, 2), (2, 1, 1), 2), (2, 1, 1, 3)],
)
def test_conv3d_matches_torch(stride: object, padding: object, dilation: object, groups: int) -> None:
    x, w, b = _data(2, 6, 5, 6, 7), _data(6, 6 // groups, 3, 2, 3, seed=1), _data(6, seed=2)
    y = F.conv3d(mge.tensor(x), mge.tensor(w), mge.tensor(b), stride, padding, dilation, groups)
    t = torch.nn.functional.conv3d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride, padding,
                                   dilation, groups)  # fmt: skip
    assert y.shape == tuple(t.shape)
    np.testing.assert_allclose(y.numpy(), t.numpy(), rtol=1e-5, atol=1e-5)


def test_conv3d_gradients_match_torch() -> None:
    x, w = _data(2, 4, 4, 5, 5), _data(4, 2, 2, 3, 2, seed=1)
    px, pw = mge.Parameter(x), mge.Parameter(w)
    gm = mge.autodiff.GradManager().attach([px, pw])
    with gm:
        y = F.conv3d(px, pw, stride=(1, 2, 1), padding=1, dilation=(1, 1, 2), groups=2)
        gm.backward((y * y).sum())
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv3d(tx, tw, None, (1, 2, 1), 1, (1, 1, 2), 2)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(px.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv3d_module_shapes_and_errors() -> None:
    m = M.Conv3d(4, 6, (1, 3, 3), padding=(0, 1, 1), groups=2)
    assert m.weight.shape == (2, 3, 2, 1, 3, 3) and m.bias.shape == (1, 6, 1, 1, 1)
    y = m(mge.tensor(_data(1, 4, 3, 5, 5)))
    assert y.shape == (1, 6, 3, 5, 5)
    m2 = M.Conv3d(3, 2, 2, bias=False)
    assert m2.weight.shape == (2, 3, 2, 2, 2) and m2.bias is None
    with pytest.raises(XmgeError, match="conv3d"):
        F.conv3d(mge.tensor(_data(1, 3, 4, 4)), mge.tensor(_data(2, 3, 1, 1, 1)))
    with pytest.raises(XmgeError, match="channels"):
        F.conv3d(mge.tensor(_data(1, 3, 4, 4, 4)), mge.tensor(_data(2, 2, 1, 1, 1)))
    with pytest.raises(XmgeError, match="Conv3d"):
        M.Conv3d(3, 4, 3, groups=2)


def test_conv3d_gradient_by_finite_differences() -> None:
    x, w = _data(1, 2, 3, 4, 4), _data(3, 2, 2, 2, 2, seed=1)

    def fn(a: Tensor, b: Tensor) -> Tensor:
        return F.conv3d(a, b, padding=(1, 0, 1), stride=(1, 1, 2))

    check_grad(fn, [x, w], 0)
    check_grad(fn, [x, w], 1)


@pytest.mark.parametrize(
    "stride,padding,output_padding,dilation,groups",
    [(1, 0, 0, 1, 1), ((2, 1, 3), (1, 0, 2), (1, 0, 2), (1, 2, 1), 1), (2, 1, 1, 1, 2), (3, 0, 2, 2, 1)],
)
def test_conv_transpose3d_matches_torch(
    stride: object, padding: object, output_padding: object, dilation: object, groups: int
) -> None:
    x, w, b = _data(2, 4, 3, 4, 5), _data(4, 6 // groups, 2, 3, 2, seed=1), _data(6, seed=2)
    y = F.conv_transpose3d(mge.tensor(x), mge.tensor(w), mge.tensor(b), stride, padding, output_padding,
                           dilation, groups)  # fmt: skip
    tx, tw, tb = torch.tensor(x), torch.tensor(w), torch.tensor(b)
    t = torch.nn.functional.conv_transpose3d(tx, tw, tb, stride, padding, output_padding, groups, dilation)
    assert y.shape == tuple(t.shape)
    np.testing.assert_allclose(y.numpy(), t.numpy(), rtol=1e-5, atol=1e-5)


def test_conv_transpose3d_gradients_match_torch() -> None:
    x, w = _data(1, 4, 3, 3, 4), _data(4, 3, 3, 2, 2, seed=1)
    px, pw = mge.Parameter(x), mge.Parameter(w)
    gm = mge.autodiff.GradManager().attach([px, pw])
    with gm:
        y = F.conv_transpose3d(px, pw, stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0))
        gm.backward((y * y).sum())
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv_transpose3d(tx, tw, None, (2, 1, 2), (1, 0, 1), (1, 0, 0))
    (ty * ty).sum().backward()
    np.testing.assert_allclose(px.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_transpose3d_module_and_float16_promotion() -> None:
    m = M.ConvTranspose3d(16, 33, (3, 5, 2), output_padding=(2, 1, 1), stride=(3, 2, 2), padding=(0, 4, 2))
    assert m.weight.shape == (16, 33, 3, 5, 2) and m.bias.shape == (1, 33, 1, 1, 1)
    y = m(mge.tensor(_data(1, 16, 2, 5, 6)))  # MegEngine's size formula per axis
    geometry = zip((2, 5, 6), (3, 2, 2), (0, 4, 2), (3, 5, 2), (2, 1, 1), strict=True)
    size = [(n - 1) * st - 2 * p + (k - 1) + o + 1 for n, st, p, k, o in geometry]
    assert y.shape == (1, 33, *size) == (1, 33, 8, 6, 9)
    for cls in (M.Conv3d, M.ConvTranspose3d):
        conv = cls(4, 6, 3)
        x = _data(2, 4, 5, 5, 5).astype("float16")
        np.testing.assert_array_equal(
            conv(mge.tensor(x)).numpy(), conv(mge.tensor(x.astype("float32"))).numpy()
        )
    with pytest.raises(XmgeError, match="output_padding"):
        F.conv_transpose3d(
            mge.tensor(_data(1, 2, 3, 3, 3)), mge.tensor(_data(2, 2, 2, 2, 2)), output_padding=1
        )


# ----------------------------------------------------------------------------------------------
# warp_perspective

# MegEngine's border modes (its docs draw them on "abcdefgh") are numpy's pad modes
_NP_PAD = {"replicate": "edge", "reflect": "symmetric", "reflect_101": "reflect", "wrap": "wrap",
           "constant": "constant"}  # fmt: skip


def _np_warp(x: np.ndarray, mat: np.ndarray, oh: int, ow: int, border: str, bval: float,
             idx: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """The documented definition: output(n, c, h, w) = input(n, c, (M0 w + M1 h + M2) / d,
    (M3 w + M4 h + M5) / d), bilinear, the image extended by ``border`` (float64)."""
    m = 40
    out = np.zeros((mat.shape[0], x.shape[1], oh, ow))
    for n in range(mat.shape[0]):
        src = x[n if idx is None else idx[n]].astype(np.float64)
        kw = {"constant_values": bval} if border == "constant" else {}
        pad = np.pad(src, ((0, 0), (m, m), (m, m)), mode=_NP_PAD[border], **kw)  # type: ignore[call-overload]
        M_ = mat[n].astype(np.float64)
        for h in range(oh):
            for w in range(ow):
                d = M_[2, 0] * w + M_[2, 1] * h + M_[2, 2]
                sx = (M_[0, 0] * w + M_[0, 1] * h + M_[0, 2]) / d
                sy = (M_[1, 0] * w + M_[1, 1] * h + M_[1, 2]) / d
                x0, y0 = math.floor(sx), math.floor(sy)
                fx, fy = sx - x0, sy - y0
                p = pad[:, y0 + m : y0 + m + 2, x0 + m : x0 + m + 2]
                out[n, :, h, w] = (p[:, 0, 0] * (1 - fx) * (1 - fy) + p[:, 0, 1] * fx * (1 - fy)
                                   + p[:, 1, 0] * (1 - fx) * fy + p[:, 1, 1] * fx * fy)  # fmt: skip
    return out


def _warp_mats(n: int, seed: int = 0) -> np.ndarray:
    """Perspective matrices that reach a few pixels past the image edges (the border modes)."""
    rng = np.random.RandomState(seed)
    mats = np.zeros((n, 3, 3), np.float32)
    for i in range(n):
        mats[i] = [[0.9 + 0.4 * rng.rand(), 0.2 * rng.randn(), -2 + 2 * rng.rand()],
                   [0.2 * rng.randn(), 0.9 + 0.4 * rng.rand(), -2 + 2 * rng.rand()],
                   [0.01 * rng.randn(), 0.01 * rng.randn(), 1.0]]  # fmt: skip
    return mats


def test_warp_perspective_docstring_example() -> None:
    x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    M_ = Tensor(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]], np.float32).reshape(1, 3, 3))
    np.testing.assert_array_equal(F.vision.warp_perspective(x, M_, (2, 2)).numpy(), [[[[5, 6], [9, 10]]]])


@pytest.mark.parametrize("border", ["replicate", "reflect", "reflect_101", "wrap", "constant"])
def test_warp_perspective_matches_the_documented_definition(border: str) -> None:
    x, mats = _data(2, 3, 7, 9), _warp_mats(3)
    idx = np.array([1, 0, 1], np.int32)
    y = F.vision.warp_perspective(mge.tensor(x), mge.tensor(mats), (6, 11), mat_idx=idx, border_mode=border,
                                  border_val=0.5)  # fmt: skip
    np.testing.assert_allclose(y.numpy(), _np_warp(x, mats, 6, 11, border, 0.5, idx), rtol=1e-4, atol=1e-4)


def test_warp_perspective_nhwc_and_errors() -> None:
    x, mats = _data(2, 5, 6, 3), _warp_mats(2)
    y = F.vision.warp_perspective(mge.tensor(x), mge.tensor(mats), (4, 4), format="NHWC")
    want = _np_warp(x.transpose(0, 3, 1, 2), mats, 4, 4, "replicate", 0.0).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(XmgeError, match="matrices for"):
        F.vision.warp_perspective(mge.tensor(_data(2, 1, 4, 4)), mge.tensor(_warp_mats(3)), (2, 2))
    with pytest.raises(XmgeError, match="border_mode"):
        F.vision.warp_perspective(mge.tensor(_data(1, 1, 4, 4)), mge.tensor(_warp_mats(1)), (2, 2),
                                  border_mode="mirror")  # fmt: skip


@pytest.mark.parametrize("border", ["replicate", "constant"])
def test_warp_perspective_gradients_by_finite_differences(border: str) -> None:
    x, mats = _data(1, 2, 5, 6), _warp_mats(1, seed=3)

    def fn(a: Tensor, m: Tensor) -> Tensor:
        return F.vision.warp_perspective(a, m, (4, 5), border_mode=border, border_val=0.25)

    check_grad(fn, [x, mats], 0)
    check_grad(fn, [x, mats], 1, eps=1e-4, tol=3e-2)


# ----------------------------------------------------------------------------------------------
# roi_align / roi_pooling


def _rois(k: int, n: int, size: float, seed: int = 0) -> np.ndarray:
    rng = np.random.RandomState(seed)
    xy = np.sort(rng.rand(k, 2, 2) * size, axis=1)  # (x1 < x2, y1 < y2)
    return np.concatenate([rng.randint(0, n, (k, 1)), xy[:, 0], xy[:, 1]], axis=1)[:, [0, 1, 3, 2, 4]].astype(
        np.float32
    )


def _np_bilinear(plane: np.ndarray, y: float, x: float) -> np.ndarray:
    """Bilinear value at (y, x); pixels outside the map count as 0 (RoI Align's definition)."""
    y0, x0 = math.floor(y), math.floor(x)
    out = np.zeros(plane.shape[0])
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < plane.shape[1] and 0 <= xx < plane.shape[2]:
                out += wy * wx * plane[:, yy, xx]
    return out


def _np_roi_align(x: np.ndarray, rois: np.ndarray, ph: int, pw: int, mode: str, scale: float,
                  samples: int, aligned: bool) -> np.ndarray:  # fmt: skip
    """Mask R-CNN's RoI Align: each bin the max / mean of samples x samples bilinear points at the
    centres of its sub-cells, the roi scaled by ``scale`` and shifted by -0.5 when ``aligned``."""
    off = 0.5 if aligned else 0.0
    out = np.zeros((rois.shape[0], x.shape[1], ph, pw))
    for k, r in enumerate(rois.astype(np.float64)):
        x1, y1, x2, y2 = (r[1:] * scale) - off
        bh, bw = max(y2 - y1, 0) / ph, max(x2 - x1, 0) / pw
        for i in range(ph):
            for j in range(pw):
                vals = [_np_bilinear(x[int(r[0])].astype(np.float64), y1 + bh * (i + (a + 0.5) / samples),
                                     x1 + bw * (j + (b + 0.5) / samples))
                        for a in range(samples) for b in range(samples)]  # fmt: skip
                out[k, :, i, j] = np.max(vals, axis=0) if mode == "max" else np.mean(vals, axis=0)
    return out


def test_roi_align_and_roi_pooling_docstring_examples() -> None:
    for fn, want in ((F.vision.roi_align, [[0.175, 0.175], [0.1359, 0.1359]]),
                     (F.vision.roi_pooling, [[-0.1383, -0.1383], [-0.5035, -0.5035]])):  # fmt: skip
        np.random.seed(42)
        inp = Tensor(np.random.randn(1, 1, 128, 128))
        rois = Tensor(np.random.random((4, 5)))
        np.testing.assert_array_equal(fn(inp, rois, (2, 2)).numpy()[0].round(decimals=4), np.float32([want]))


@pytest.mark.parametrize("mode,aligned,scale,samples", [("average", True, 1.0, 2), ("max", False, 0.5, 3)])
def test_roi_align_matches_the_definition(mode: str, aligned: bool, scale: float, samples: int) -> None:
    x, rois = _data(2, 3, 9, 11), _rois(5, 2, 14.0)
    y = F.vision.roi_align(mge.tensor(x), mge.tensor(rois), (3, 2), mode=mode, spatial_scale=scale,
                           sample_points=samples, aligned=aligned)  # fmt: skip
    assert y.shape == (5, 3, 3, 2)
    want = _np_roi_align(x, rois, 3, 2, mode, scale, samples, aligned)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["average", "max"])
def test_roi_align_gradient_by_finite_differences(mode: str) -> None:
    x, rois = _data(2, 2, 6, 7), _rois(3, 2, 8.0, seed=1)

    def fn(a: Tensor) -> Tensor:
        return F.vision.roi_align(a, mge.tensor(rois), (2, 3), mode=mode, sample_points=2)

    check_grad(fn, [x], 0, picks=16)


def _np_roi_pooling(x: np.ndarray, rois: np.ndarray, oh: int, ow: int, mode: str, scale: float) -> np.ndarray:
    """Fast R-CNN's RoI pooling: the roi rounded to pixels (at least 1x1), cut into oh x ow bins
    with floor/ceil edges clipped to the map, each max / mean pooled, 0 when empty."""
    out = np.zeros((rois.shape[0], x.shape[1], oh, ow))
    h, w = x.shape[2:]
    for k, r in enumerate(rois):
        x1, y1, x2, y2 = (int(np.sign(v) * np.floor(abs(v) + 0.5)) for v in r[1:] * np.float32(scale))
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for i in range(oh):
            for j in range(ow):
                h0 = min(max(math.floor(i * rh / oh) + y1, 0), h)
                h1 = min(max(math.ceil((i + 1) * rh / oh) + y1, 0), h)
                w0 = min(max(math.floor(j * rw / ow) + x1, 0), w)
                w1 = min(max(math.ceil((j + 1) * rw / ow) + x1, 0), w)
                patch = x[int(r[0]), :, h0:h1, w0:w1].reshape(x.shape[1], -1)
                if patch.shape[1]:
                    out[k, :, i, j] = patch.max(1) if mode == "max" else patch.mean(1)
    return out


@pytest.mark.parametrize("mode,scale", [("max", 1.0), ("average", 0.5)])
def test_roi_pooling_matches_the_definition(mode: str, scale: float) -> None:
    x, rois = _data(2, 3, 8, 10), _rois(6, 2, 16.0, seed=2)
    y = F.vision.roi_pooling(mge.tensor(x), mge.tensor(rois), (3, 4), mode=mode, scale=scale)
    np.testing.assert_allclose(y.numpy(), _np_roi_pooling(x, rois, 3, 4, mode, scale), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["max", "average"])
def test_roi_pooling_gradient_by_finite_differences(mode: str) -> None:
    x, rois = _data(1, 2, 6, 6), _rois(3, 1, 6.0, seed=4)

    def fn(a: Tensor) -> Tensor:
        return F.vision.roi_pooling(a, mge.tensor(rois), (2, 2), mode=mode)

    check_grad(fn, [x], 0, picks=16)


# ----------------------------------------------------------------------------------------------
# nms


def _np_nms(boxes: np.ndarray, scores: np.ndarray, thresh: float, max_output: int | None = None) -> list[int]:
    """Greedy NMS: highest score first, dropping every box whose IoU with a kept one exceeds thresh."""
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    for i in order:
        ok = True
        for j in kept:
            ix = max(0.0, min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]))
            iy = max(0.0, min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]))
            inter = ix * iy
            area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
            if inter / (area(boxes[i]) + area(boxes[j]) - inter) > thresh:
                ok = False
                break
        if ok:
            kept.append(int(i))
        if max_output is not None and len(kept) == max_output:
            break
    return kept


def _boxes(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    xy = rng.rand(n, 2) * 30
    wh = 5 + rng.rand(n, 2) * 15
    return np.concatenate([xy, xy + wh], 1).astype(np.float32), rng.rand(n).astype(np.float32)


def test_nms_docstring_example() -> None:
    x = np.zeros((100, 4))
    np.random.seed(42)
    x[:, :2] = np.random.rand(100, 2) * 20
    x[:, 2:] = np.random.rand(100, 2) * 20 + 100
    scores = Tensor(np.random.rand(100))
    keep = F.vision.nms(Tensor(x), scores, iou_thresh=0.7)
    assert keep.dtype == np.int32
    np.testing.assert_array_equal(keep.numpy(), [75, 69])


@pytest.mark.parametrize("thresh,max_output", [(0.3, None), (0.5, 4), (0.0, None)])
def test_nms_matches_greedy_definition(thresh: float, max_output: int | None) -> None:
    boxes, scores = _boxes(40)
    keep = F.vision.nms(mge.tensor(boxes), mge.tensor(scores), thresh, max_output)
    want = _np_nms(boxes.astype(np.float64), scores, thresh, max_output)
    np.testing.assert_array_equal(keep.numpy(), want)
    assert len(want) > 1


def test_nms_errors() -> None:
    with pytest.raises(XmgeError, match="boxes"):
        F.vision.nms(mge.tensor(_data(3, 5)), mge.tensor(_data(3)), 0.5)
    with pytest.raises(XmgeError, match="do not match"):
        F.vision.nms(mge.tensor(_data(3, 4)), mge.tensor(_data(4)), 0.5)


# ----------------------------------------------------------------------------------------------
# correlation


def _np_correlation(a: np.ndarray, b: np.ndarray, k: int, disp: int, s1: int, s2: int, pad: int,
                    mul: bool) -> np.ndarray:  # fmt: skip
    """FlowNet's correlation, written out: for output (n, (dy, dx), y, x) the mean over a k x k
    window around data1's point and all channels of data1 * data2 (or |data1 - data2|) at the point
    displaced by (dy, dx); points outside the (padded) maps are 0."""
    n, c, h, w = a.shape
    r = (k - 1) // 2
    border = disp + r
    oh = math.ceil((h + 2 * pad - 2 * border) / s1)
    ow = math.ceil((w + 2 * pad - 2 * border) / s1)
    grid = disp // s2
    ap = np.pad(a.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    bp = np.pad(b.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))

    def at(t: np.ndarray, y: int, x: int) -> np.ndarray:
        inside = 0 <= y < t.shape[2] and 0 <= x < t.shape[3]
        return t[:, :, y, x] if inside else np.zeros((n, c))

    out = np.zeros((n, (2 * grid + 1) ** 2, oh, ow))
    for oy in range(oh):
        for ox in range(ow):
            cy, cx = oy * s1 + border, ox * s1 + border
            for ci, (dy, dx) in enumerate((dy * s2, dx * s2) for dy in range(-grid, grid + 1)
                                          for dx in range(-grid, grid + 1)):  # fmt: skip
                acc = np.zeros(n)
                for i in range(-r, r + 1):
                    for j in range(-r, r + 1):
                        p, q = at(ap, cy + i, cx + j), at(bp, cy + i + dy, cx + j + dx)
                        acc += (p * q if mul else np.abs(p - q)).sum(1)
                out[:, ci, oy, ox] = acc / (k * k * c)
    return out


@pytest.mark.parametrize(
    "k,disp,s1,s2,pad,mul", [(1, 1, 1, 1, 0, True), (3, 2, 2, 1, 2, True), (1, 4, 1, 2, 4, False)]
)
def test_correlation_matches_the_definition(k: int, disp: int, s1: int, s2: int, pad: int, mul: bool) -> None:
    a, b = _data(2, 3, 7, 8), _data(2, 3, 7, 8, seed=1)
    y = F.vision.correlation(mge.tensor(a), mge.tensor(b), k, disp, s1, s2, pad, mul)
    np.testing.assert_allclose(
        y.numpy(), _np_correlation(a, b, k, disp, s1, s2, pad, mul), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("mul", [True, False])
def test_correlation_gradients_by_finite_differences(mul: bool) -> None:
    a, b = _data(1, 2, 5, 6), _data(1, 2, 5, 6, seed=1)

    def fn(p: Tensor, q: Tensor) -> Tensor:
        return F.vision.correlation(p, q, kernel_size=3, max_displacement=1, pad_size=2, is_multiply=mul)

    check_grad(fn, [a, b], 0)
    check_grad(fn, [a, b], 1)
    with pytest.raises(XmgeError, match="odd"):
        F.vision.correlation(mge.tensor(a), mge.tensor(b), kernel_size=2)


# ----------------------------------------------------------------------------------------------
# C kernels (bit-exact against the reference) and .mge rows


def _detection_model(
    x: Tensor, mats: Tensor, rois: Tensor, boxes: Tensor, scores: Tensor
) -> tuple[Tensor, ...]:
    outs = [
        F.vision.warp_perspective(x, mats[:2], (5, 7)),
        F.vision.warp_perspective(x, mats, (4, 4), mat_idx=[1, 1, 0], border_mode="constant", border_val=0.5),
        F.vision.warp_perspective(x, mats, (6, 5), mat_idx=[0, 1, 1], border_mode="reflect_101"),
        F.vision.warp_perspective(x[:1], mats[:1], (6, 6), border_mode="wrap"),
        F.vision.warp_perspective(x[:1], mats[1:2], (3, 6), border_mode="reflect"),
        F.vision.roi_align(x, rois, (3, 2), mode="average", spatial_scale=0.5, sample_points=2),
        F.vision.roi_align(x, rois, 2, mode="max", sample_points=(3, 2), aligned=False),
        F.vision.nms(boxes, scores, 0.4, max_output=6),
    ]
    return tuple(outs)


def _detection_inputs() -> list[np.ndarray]:
    boxes, scores = _boxes(20, seed=5)
    return [_data(2, 3, 8, 9), _warp_mats(3, seed=6), _rois(4, 2, 16.0, seed=7), boxes, scores]


def _conv3d_model(x: Tensor, w: Tensor, wg: Tensor) -> tuple[Tensor, ...]:
    return (
        F.conv3d(x, w, padding=1),
        F.conv3d(x, wg, stride=(2, 1, 2), padding=(0, 1, 2), dilation=(1, 2, 1), groups=2),
        F.conv_transpose3d(x, wg.reshape(4, 3, 2, 3, 2), stride=(2, 1, 2), padding=(1, 0, 1), groups=2),
    )


def _conv3d_inputs() -> list[np.ndarray]:
    return [_data(2, 4, 5, 6, 7), _data(3, 4, 3, 3, 3, seed=1), _data(6, 2, 2, 3, 2, seed=2)]


@pytest.mark.parametrize("model", ["detection", "conv3d"])
def test_vision_c_kernels_equal_the_reference(model: str) -> None:
    from tests.codegen_util import require

    require("x86-avx2")
    fn, inputs = (_detection_model, _detection_inputs()) if model == "detection" else (
        _conv3d_model, _conv3d_inputs())  # fmt: skip
    _compile_and_compare(fn, inputs, "x86-avx2")


def test_vision_c_kernels_under_sanitizers() -> None:
    from tests.codegen_util import require

    require("x86-avx2")
    _compile_and_compare(_detection_model, _detection_inputs(), "x86-avx2", sanitize=True)


@pytest.mark.parametrize("symbolic", [None, False, True])
def test_nms_eager_and_traced_keep_the_data_dependent_count(symbolic: bool | None) -> None:
    """Traced or not, every call returns as many indices as NMS keeps (the body runs each call)."""
    boxes = np.array([[0, 0, 50, 50], [4, 4, 50, 50], [25, 25, 50, 50], [50, 50, 80, 80]], np.float32)
    scores = np.array([0.5, 0.8, 0.9, 0.6], np.float32)

    def fn(b: Tensor, s: Tensor) -> Tensor:
        return F.vision.nms(b, s, iou_thresh=0.5, max_output=None if symbolic is None else 4)

    run = fn if symbolic is None else mge.jit.trace(fn, symbolic=symbolic)
    want = _np_nms(boxes.astype(np.float64), scores, 0.5)
    assert want == [2, 1, 3]
    for _ in range(3):
        np.testing.assert_array_equal(run(mge.tensor(boxes), mge.tensor(scores)).numpy(), want)
    empty = run(mge.tensor(np.zeros((0, 4), np.float32)), mge.tensor(np.zeros(0, np.float32)))
    assert empty.shape == (0,) and empty.dtype == np.int32


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.float16])
def test_warp_perspective_integer_and_half_images(dt: type) -> None:
    """int8/uint8 warp in float32 and round half away from zero back to the type; float16 computes
    in float32."""
    x = (np.arange(32).reshape(2, 1, 4, 4) * 3 - (40 if dt == np.int8 else 0)).astype(dt)
    shift = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]], np.float32)
    y = F.vision.warp_perspective(mge.tensor(x), mge.tensor(np.stack([shift] * 3)), (2, 2), mat_idx=[0, 1, 1])
    np.testing.assert_array_equal(y.numpy(), x[[0, 1, 1], :, 1:3, 1:3].astype(y.dtype))
    half = np.array([[0.5, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0]], np.float32)[None]
    z = F.vision.warp_perspective(mge.tensor(x[:1]), mge.tensor(half), (4, 4))
    want = _np_warp(x[:1].astype(np.float64), half, 4, 4, "replicate", 0.0)
    if dt != np.float16:
        assert z.dtype == dt
        want = np.sign(want) * np.floor(np.abs(want) + 0.5)
    np.testing.assert_allclose(z.numpy().astype(np.float64), want, atol=1e-4)


@pytest.mark.parametrize("dump_format", [None, "FBS"])
def test_vision_ops_dump_as_megengine_oprs_and_read_back(dump_format: str | None) -> None:
    """Convolution3D (+ExecutionPolicy), WarpPerspectiveV2 (out_shape and mat_idx as inputs),
    ROIAlignV1 and ROIPooling (two outputs), NMSKeepMGB, CorrelationForward: each param table with
    MegEngine's fields, and the file runs to the same outputs."""
    from backends.mge.container import parse_file
    from backends.mge.verify import verify_file

    def fn(
        x: Tensor, v: Tensor, w: Tensor, mats: Tensor, rois: Tensor, boxes: Tensor, scores: Tensor
    ) -> tuple:
        return (
            F.conv3d(v, w, stride=(1, 2, 1), padding=1, groups=2),
            F.conv_transpose3d(v, w.reshape(4, 2, 3, 3, 3), stride=2, padding=1, output_padding=(1, 0, 1)),
            F.vision.warp_perspective(
                x, mats, (4, 5), mat_idx=[0, 1, 1], border_mode="constant", border_val=2.0
            ),
            F.vision.roi_align(x, rois, (2, 3), mode="max", spatial_scale=0.5, sample_points=(2, 1)),
            F.vision.roi_pooling(x, rois, (3, 2), mode="average", scale=0.5),
            F.vision.nms(boxes, scores, 0.5, max_output=5),
            F.vision.correlation(x, x * 2, kernel_size=3, max_displacement=2, stride2=2, pad_size=1),
        )

    boxes, scores = _boxes(12, seed=3)
    inputs = [_data(2, 3, 8, 9), _data(1, 4, 3, 5, 5), _data(4, 2, 3, 3, 3, seed=1), _warp_mats(3),
              _rois(4, 2, 16.0), boxes, scores]  # fmt: skip
    data, got = _dump_read_run(fn, inputs, **({"dump_format": dump_format} if dump_format else {}))
    verify_file(data)  # the FlatBuffers checks MegEngine's loader runs first
    oprs: dict[str, Any] = {}
    for o in (o for g in parse_file(data) for o in g.oprs):
        oprs.setdefault(o.kind, o)  # the first of each kind
    assert oprs["Convolution3D"].param("Convolution3D")["stride_h"] == 2
    assert oprs["Convolution3D"].param("Convolution3D")["sparse"] == 1
    assert oprs["WarpPerspective"].param("WarpPerspective")["bmode"] == 4
    assert oprs["WarpPerspective"].param("WarpPerspective")["border_val"] == 2.0
    assert len(oprs["WarpPerspective"].inputs) == 4
    ra = oprs["ROIAlign"].param("ROIAlign")
    assert (ra["mode"], ra["spatial_scale"], ra["pooled_width"], ra["sample_width"]) == (0, 0.5, 3, 1)
    assert len(oprs["ROIAlign"].outputs) == 2 and len(oprs["ROIPooling"].inputs) == 3
    assert oprs["NMSKeep"].param("NMSKeep")["max_output"] == 5
    assert oprs["Correlation"].param("Correlation")["stride2"] == 2
    want = [np.asarray(t.numpy()) for t in fn(*[mge.tensor(a) for a in inputs])]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.slow
def test_vision_c_kernels_on_arm() -> None:
    """The same kernels cross-compiled for ARM and run under qemu (float32 inputs only)."""
    from backends.c.cross import toolchain_problem

    if toolchain_problem() is not None:
        pytest.skip(f"ARM toolchain: {toolchain_problem()}")
    _compile_and_compare(_detection_model, _detection_inputs(), ARM)
    _compile_and_compare(_conv3d_model, _conv3d_inputs(), ARM)


def test_roi_batch_index_out_of_range_fails_the_compiled_run() -> None:
    """A roi naming an image that is not there fails the run naming the kernel, as the reference
    refuses it; the next run is clean."""
    from backends.c.build import RunError
    from tests.codegen_util import compile_fn, require

    require("x86-avx2")
    x, rois = _data(2, 3, 8, 9), _rois(3, 2, 8.0)
    fn = lambda a, r: F.vision.roi_align(a, r, 2)  # noqa: E731
    compiled = compile_fn(fn, [x, rois], "x86-avx2")
    bad = rois.copy()
    bad[1, 0] = 2
    with pytest.raises(RunError, match=r"roi_align_\w+: index 2 is out of range"):
        compiled.run([x, bad])
    (got,) = compiled.run([x, rois])
    np.testing.assert_array_equal(got, fn(mge.tensor(x), mge.tensor(rois)).numpy())
    with pytest.raises(XmgeError, match="roi batch index 2.0 is out of range for 2 input images"):
        fn(mge.tensor(x), mge.tensor(bad))


@pytest.mark.parametrize("kth_only", [False, True])
def test_sort_oprs_read_back_from_fbs_v1(kth_only: bool) -> None:
    """FBS v1 has no output counts: the reader knows Argsort's two outputs and TopK's one or two
    (by its mode), as it knows ROIAlign's, ROIPooling's and NMSKeep's."""

    x = _data(3, 8)

    def fn(a: Tensor) -> tuple[Tensor, ...]:
        v, i = F.topk(a, 3, kth_only=kth_only)
        return (v, F.argsort(a, descending=True)) if kth_only else (v, i, F.argsort(a, descending=True))

    _, got = _dump_read_run(fn, [x], dump_format="FBS")
    for g, w in zip(got, fn(mge.tensor(x)), strict=True):
        np.testing.assert_array_equal(np.asarray(g), w.numpy())


def test_warp_mat_idx_out_of_range_fails_the_compiled_run() -> None:
    from backends.c.build import RunError
    from tests.codegen_util import compile_fn, require

    require("x86-avx2")
    x, mats = _data(2, 3, 6, 7), _warp_mats(3)
    fn = lambda a, m, i: F.vision.warp_perspective(a, m, (4, 5), mat_idx=i, border_mode="reflect")  # noqa: E731
    ok = np.array([1, 0, 1], np.int32)
    compiled = compile_fn(fn, [x, mats, ok], "x86-avx2")
    with pytest.raises(RunError, match=r"warp_perspective_\w+: index 2 is out of range"):
        compiled.run([x, mats, np.array([1, 2, 0], np.int32)])
    (got,) = compiled.run([x, mats, ok])
    np.testing.assert_array_equal(got, fn(mge.tensor(x), mge.tensor(mats), mge.tensor(ok)).numpy())
    with pytest.raises(XmgeError, match="mat_idx .* out of range for 2 images"):
        fn(mge.tensor(x), mge.tensor(mats), mge.tensor(np.array([1, 2, 0], np.int32)))


def test_border_coordinates_closed_form_is_megengines_loop() -> None:
    """The reference maps coordinates in closed form; MegEngine's get_real_coord loops: same result."""
    from dialects import enums
    from semantics.vision_kernels import _coords, border_coord

    p = np.arange(-40, 41, dtype=np.float32)
    for bmode in ("REPLICATE", "REFLECT", "REFLECT_101", "WRAP", "CONSTANT"):
        mode = enums.BorderMode[bmode]
        for n in (1, 2, 3, 7):
            want = [border_coord(int(v), n, mode) for v in p]
            np.testing.assert_array_equal(_coords(p, n, mode), want, err_msg=f"{bmode} n={n}")


def test_nms_keep_opdef() -> None:
    """``core.ops.builtin.NMSKeep(iou_thresh, max_output)``: equal when its parameters are, and
    applied to (B, N, 4) score-sorted boxes it gives (indices, count)."""
    from compiler.core._imperative_rt.core2 import apply
    from compiler.core.ops import builtin

    op = builtin.NMSKeep(0.7, 100)
    assert (
        op == builtin.NMSKeep(0.7, 100)
        and op != builtin.NMSKeep(0.8, 100)
        and op != builtin.NMSKeep(0.7, 200)
    )
    boxes = np.array([[[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]]], np.float32)
    idx, count = apply(builtin.NMSKeep(0.5, 3), mge.tensor(boxes))
    np.testing.assert_array_equal(idx.numpy(), [[0, 2, 2]])
    np.testing.assert_array_equal(count.numpy(), [2])
