"""Vision graphs dumped by xmge and run by real MegEngine 1.13 (tests/test_mge_vision_interop.py).

tests/data/vision_mge/megengine_outputs.npz holds, per graph, its two inputs (``NAME:a``, ``NAME:b``)
and what MegEngine's Lite runtime computed on xmge's ``.mge`` dump of it (``NAME:megengine``);
``tests/data/vision_mge/record.py`` made it with megengine-oracle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import compiler.functional as F


def _warp(x: Any, m: Any) -> Any:
    return F.vision.warp_perspective(x, m, (6, 7))


def _warp_constant(x: Any, m: Any) -> Any:
    return F.vision.warp_perspective(x, m, (6, 7), border_mode="constant", border_val=0.5)


def _roi_align(x: Any, rois: Any) -> Any:
    return F.vision.roi_align(x, rois, (3, 3), spatial_scale=0.9, sample_points=2, aligned=True)


def _roi_align_max(x: Any, rois: Any) -> Any:
    return F.vision.roi_align(x, rois, (2, 2), mode="max", spatial_scale=1.0, sample_points=2, aligned=False)


def _roi_pooling(x: Any, rois: Any) -> Any:
    return F.vision.roi_pooling(x, rois, (2, 2), mode="max", scale=1.0)


def _conv3d(v: Any, w: Any) -> Any:
    return F.conv3d(v, w, stride=(1, 2, 1), padding=1)


def _correlation(a: Any, b: Any) -> Any:
    return F.vision.correlation(
        a, b, kernel_size=1, max_displacement=2, stride1=1, stride2=1, pad_size=2, is_multiply=True
    )


GRAPHS: dict[str, Callable[[Any, Any], Any]] = {
    "warp": _warp,
    "warp_const": _warp_constant,
    "roi_align": _roi_align,
    "roi_align_max": _roi_align_max,
    "roi_pooling": _roi_pooling,
    "conv3d": _conv3d,
    "correlation": _correlation,
}
