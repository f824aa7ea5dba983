"""Image graphs dumped by xmge and run by real MegEngine 1.13 (tests/test_mge_image_ops.py).

tests/data/image_mge/megengine_outputs.npz holds, per graph, its inputs (``NAME:a``, ``NAME:b``)
and what MegEngine's Lite runtime computed on xmge's ``.mge`` dump of it (``NAME:megengine``);
``tests/data/image_mge/record.py`` made it with megengine-oracle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import compiler.functional as F

GRAPHS: dict[str, Callable[..., Any]] = {
    "warp_affine": lambda x, m: F.vision.warp_affine(x, m, (6, 7), border_mode="reflect"),
    "warp_affine_cubic": lambda x, m: F.vision.warp_affine(
        x, m, (6, 7), border_mode="constant", border_val=0.5, interp_mode="cubic"
    ),
    "warp_affine_u8": lambda x, m: F.vision.warp_affine(x, m, (5, 9), border_mode="wrap"),
    "warp_affine_nchw": lambda x, m: F.vision.warp_affine(
        x, m, (6, 7), border_mode="constant", border_val=0.25, format="NCHW"
    ),
    "remap": lambda x, m: F.vision.remap(x, m, border_mode="reflect_101"),
    "remap_nearest": lambda x, m: F.vision.remap(
        x, m, border_mode="constant", scalar=0.5, interp_mode="nearest"
    ),
    "bicubic": lambda x: F.vision.interpolate(x, (9, 7), mode="bicubic"),
    "cvt_yuv2rgb": lambda x: F.vision.cvt_color(x, "YUV2RGB"),
    "cvt_gray_u8": lambda x: F.vision.cvt_color(x, "RGB2GRAY"),
    "cvt_rgba2bgr_u8": lambda x: F.vision.cvt_color(x, "RGBA2BGR"),
    "deformable_conv": lambda x, w, off, mask: F.deformable_conv2d(
        x, w, off, mask, stride=2, padding=1, groups=2
    ),
    "deformable_psroi_pooling": lambda x, rois, trans: F.deformable_psroi_pooling(
        x, rois, trans, False, 2, 3, 3, 2, 0.5, 0.2
    ),
    "region_restricted_conv": lambda x, w, rin, rout: F.nn.region_restricted_conv(
        x, w, rin, rout, padding=1, groups=3
    ),
}


def inputs() -> dict[str, tuple[np.ndarray, ...]]:
    """Each graph's inputs (fixed seed)."""
    rng = np.random.RandomState(0)
    img = rng.randn(2, 8, 9, 3).astype("float32")
    img_u8 = rng.randint(0, 256, (2, 8, 9, 3)).astype("uint8")
    mat = np.array([[[1.1, 0.2, -0.7], [0.1, 0.9, 0.45]], [[0.8, -0.3, 2.0], [0.35, 1.2, -1.7]]], "float32")
    nchw = rng.randn(2, 3, 8, 9).astype("float32")
    map_xy = rng.uniform(-3, 11, (2, 5, 6, 2)).astype("float32")
    return {
        "warp_affine": (img, mat),
        "warp_affine_cubic": (img, mat),
        "warp_affine_u8": (img_u8, mat),
        "warp_affine_nchw": (nchw, mat),
        "remap": (nchw, map_xy),
        "remap_nearest": (nchw, map_xy),
        "bicubic": (nchw,),
        "cvt_yuv2rgb": (rng.rand(2, 4, 5, 3).astype("float32"),),
        "cvt_gray_u8": (img_u8,),
        "cvt_rgba2bgr_u8": (rng.randint(0, 256, (1, 4, 5, 4)).astype("uint8"),),
        "deformable_conv": (
            nchw[:, :2].copy(),
            (rng.randn(4, 1, 3, 3) * 0.4).astype("float32"),
            (rng.randn(2, 2 * 2 * 9, 4, 5) * 1.5).astype("float32"),
            rng.rand(2, 2 * 9, 4, 5).astype("float32"),
        ),
        "deformable_psroi_pooling": (
            nchw,
            np.array([[0, 1.2, 2.0, 7.5, 6.3], [1, 0, 0, 9, 8], [1, -2, 5, 12, 11]], "float32"),
            (rng.randn(3, 2, 3, 3) * 0.5).astype("float32"),
        ),
        "region_restricted_conv": (
            nchw,
            rng.randn(3, 2, 1, 3, 3).astype("float32"),
            rng.randint(0, 3, (2, 8, 9)).astype("int32"),
            rng.randint(0, 3, (2, 8, 9)).astype("int32"),
        ),
    }
