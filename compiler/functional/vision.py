"""Image functions (MegEngine's ``functional.vision``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.core import apply, check_error, op_error
from compiler.functional.math import matmul
from compiler.functional.tensor import expand_dims, reshape, transpose
from compiler.tensor import Tensor, as_tensor
from dialects import enums
from dialects import tensor as T

__all__ = [
    "correlation",
    "cvt_color",
    "flip",
    "interpolate",
    "nms",
    "nvof",
    "remap",
    "resize",
    "roi_align",
    "roi_pooling",
    "rot90",
    "rotate",
    "warp_affine",
    "warp_perspective",
]

_MODES = {
    "bilinear": enums.InterpolationMode.LINEAR,
    "linear": enums.InterpolationMode.LINEAR,
    "nearest": enums.InterpolationMode.NEAREST,
    "bicubic": enums.InterpolationMode.CUBIC,
}


def _out_size(inp: Tensor, size: Any, scale_factor: Any, mode: str) -> tuple[int, int]:
    if size is None:
        if scale_factor is None:
            raise op_error("interpolate", "scale_factor must not be None when size is None")
        if isinstance(scale_factor, int | float):
            scale = (float(scale_factor), 1.0 if mode == "linear" else float(scale_factor))
        else:
            if mode == "linear":
                raise op_error("interpolate", "under linear mode, scale_factor can only be a single value")
            scale = tuple(float(s) for s in scale_factor)  # type: ignore[assignment]
            if len(scale) != 2:
                raise check_error("interpolate", f"scale_factor needs 2 values, got {scale_factor}")
        # MegEngine: floor(float32(in * scale)) per spatial axis
        return tuple(int(math.floor(np.float32(inp.shape[2 + i] * scale[i]))) for i in range(2))  # type: ignore[return-value]
    if scale_factor is not None:
        raise op_error("interpolate", "scale_factor must be None when size is provided")
    if isinstance(size, int):
        return (size, 1)
    if mode == "linear":
        raise op_error("interpolate", "under linear mode, size can only be a single value")
    vals = tuple(int(s) for s in size)
    if len(vals) != 2:
        raise op_error("interpolate", f"size needs 2 values, got {size}")
    return vals  # type: ignore[return-value]


def interpolate(
    inp: Tensor,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "bilinear",
    align_corners: bool | None = None,
) -> Tensor:
    """Resample the spatial axes of an NCHW tensor (``linear``: an NCH tensor) to ``size`` or by
    ``scale_factor``. Without ``align_corners`` this is MegEngine's Resize operator; with it
    (bilinear/linear only) the same sampling is the exact product ``Ah @ x @ Aw^T`` with constant
    interpolation matrices (MegEngine uses a WarpPerspective there). ``bicubic`` is cubic
    convolution (a = -0.75) at half-pixel centres, edge pixels repeated. float16 input is
    resampled in float32 (and returned so, as MegEngine does)."""
    inp = as_tensor(inp)
    mode = mode.lower()
    if mode not in _MODES:
        raise op_error("interpolate", f"unsupported mode {mode!r}; expected one of {sorted(_MODES)}")
    if mode in ("nearest", "bicubic") and align_corners is not None:
        raise op_error("interpolate", "align_corners can only be set in the bilinear/linear mode")
    align_corners = bool(align_corners)
    if mode == "linear":
        if inp.ndim != 3:
            raise check_error("interpolate", f"linear mode needs a 3-D input, got shape {inp.shape}")
        inp = expand_dims(inp, 3)
    elif inp.ndim != 4:
        raise check_error("interpolate", f"{mode} mode needs a 4-D NCHW input, got shape {inp.shape}")
    if inp.dtype.kind != "f":
        raise op_error("interpolate", f"needs a float input, got {inp.dtype}")
    if inp.dtype == np.float16:
        inp = inp.astype("float32")
    oh, ow = _out_size(inp, size, scale_factor, mode)
    if oh < 1 or ow < 1:
        raise op_error("interpolate", f"output size {(oh, ow)} is empty")
    if not align_corners:
        (out,) = apply(T.ResizeOp, [inp], label="interpolate", out_shape=(oh, ow), imode=_MODES[mode])
    else:
        from semantics.kernels import interp_matrix

        n, c, ih, iw = inp.shape
        lin = enums.InterpolationMode.LINEAR
        ah = Tensor(interp_matrix(ih, oh, lin, True).T.astype(inp.dtype))  # (IH, OH)
        # MegEngine's linear mode keeps the width scale iw / ow (a no-op for the added axis of size 1)
        aw = Tensor(interp_matrix(iw, ow, lin, mode != "linear").T.astype(inp.dtype))  # (IW, OW)
        rows = matmul(reshape(inp, (n * c * ih, iw)), aw)  # (N*C*IH, OW)
        cols = transpose(reshape(rows, (n * c, ih, ow)), (0, 2, 1))
        out = matmul(reshape(cols, (n * c * ow, ih)), ah)  # (N*C*OW, OH)
        out = transpose(reshape(out, (n, c, ow, oh)), (0, 1, 3, 2))
    if mode == "linear":
        out = reshape(out, out.shape[:3])
    return out


def _nhwc(label: str, inp: Tensor) -> Tensor:
    inp = as_tensor(inp)
    if inp.ndim != 4:
        raise op_error(label, f"needs NHWC images (4-D), got shape {inp.shape}")
    return inp


def flip(inp: Tensor, vertical: bool = True, horizontal: bool = True) -> Tensor:
    """NHWC images mirrored top to bottom (``vertical``) and/or left to right (``horizontal``):
    a reversed-step subtensor, which keeps the gradient."""
    inp = _nhwc("flip", inp)
    if not vertical and not horizontal:
        return inp
    rows = slice(None, None, -1) if vertical else slice(None)
    cols = slice(None, None, -1) if horizontal else slice(None)
    return inp[:, rows, cols]


def rot90(inp: Tensor, clockwise: bool = True) -> Tensor:
    """NHWC images turned a quarter: a swap of H and W, with the columns mirrored after the swap
    (clockwise) or before it (counterclockwise)."""
    inp = _nhwc("rot90", inp)
    if clockwise:
        return flip(transpose(inp, (0, 2, 1, 3)), vertical=False, horizontal=True)
    return transpose(flip(inp, vertical=False, horizontal=True), (0, 2, 1, 3))


def _float32(t: Any) -> Tensor:
    t = as_tensor(t)
    return t if t.dtype == np.float32 else t.astype("float32")


def _hw(label: str, v: Any, name: str) -> tuple[int, int]:
    """A (height, width) pair from an int, a pair or a 2-element Tensor."""
    if isinstance(v, Tensor):
        v = v.numpy().reshape(-1).tolist()
    if isinstance(v, int | np.integer):
        return int(v), int(v)
    vals = tuple(int(x) for x in v)
    if len(vals) != 2:
        raise op_error(label, f"{name} needs (height, width), got {v}")
    return vals  # type: ignore[return-value]


def warp_perspective(
    inp: Tensor,
    mat: Tensor,
    out_shape: Any,
    mat_idx: Any = None,
    border_mode: str = "replicate",
    border_val: float = 0.0,
    format: str = "NCHW",
    interp_mode: str = "linear",
) -> Tensor:
    """Perspective warp of a batch of images (MegEngine's WarpPerspective): output pixel (h, w) of
    image n is ``inp[mat_idx[n]]`` (``inp[n]`` without ``mat_idx``) sampled bilinearly at
    ``((M00 w + M01 h + M02) / d, (M10 w + M11 h + M12) / d)``, ``d = M20 w + M21 h + M22`` for
    ``mat`` (N, 3, 3) (the inverse of cv2.warpPerspective's matrix); taps outside the image follow
    ``border_mode`` (replicate, reflect, reflect_101, wrap, constant with ``border_val``).
    ``format`` NCHW or NHWC; ``interp_mode`` linear only. float16 input computes (and returns)
    float32; int8 / uint8 images are warped in float32 and rounded back half away from zero (as
    MegEngine's rounding converter), clamped to the type's range."""
    from compiler.functional.elemwise import clip, round

    label = "warp_perspective"
    inp, mat = as_tensor(inp), as_tensor(mat)
    if inp.dtype in (np.int8, np.uint8):
        info = np.iinfo(inp.dtype)
        out = warp_perspective(
            inp.astype("float32"), mat, out_shape, mat_idx, border_mode, border_val, format, interp_mode
        )
        return round(clip(out, float(info.min), float(info.max))).astype(inp.dtype)
    if inp.dtype == np.float16:
        inp = inp.astype("float32")
    if inp.dtype != np.float32:
        raise op_error(label, f"needs a float32, float16, int8 or uint8 input, got {inp.dtype}")
    mat = _float32(mat)
    if interp_mode.lower() != "linear":
        raise op_error(label, f"only interp_mode 'linear' is supported, got {interp_mode!r}")
    try:
        bmode = enums.BorderMode[border_mode.upper()]
    except KeyError:
        raise op_error(label, f"unknown border_mode {border_mode!r}") from None
    fmt = format.upper()
    if fmt not in ("NCHW", "NHWC"):
        raise op_error(label, f"format must be NCHW or NHWC, got {format!r}")
    if inp.ndim != 4:
        raise op_error(label, f"input must be 4-D {fmt}, got shape {inp.shape}")
    if fmt == "NHWC":
        inp = transpose(inp, (0, 3, 1, 2))
    operands = [inp, mat]
    if mat_idx is not None:
        operands.append(as_tensor(np.asarray(mat_idx, np.int32)) if not isinstance(mat_idx, Tensor)
                        else mat_idx.astype("int32"))  # fmt: skip
    (out,) = apply(
        T.WarpPerspectiveOp, operands, label=label, out_shape=_hw(label, out_shape, "out_shape"),
        bmode=bmode, border_val=float(border_val),
    )  # fmt: skip
    return transpose(out, (0, 2, 3, 1)) if fmt == "NHWC" else out


def _roi_operands(label: str, inp: Tensor, rois: Tensor, mode: str) -> tuple[Tensor, Tensor, Any]:
    inp, rois = _float32(inp), _float32(rois)
    if mode.lower() not in ("max", "average"):
        raise op_error(label, f"only max/average mode is supported, got {mode!r}")
    return inp, rois, enums.ROIMode[mode.upper()]


def roi_align(
    inp: Tensor,
    rois: Tensor,
    output_shape: Any,
    mode: str = "average",
    spatial_scale: float = 1.0,
    sample_points: Any = 2,
    aligned: bool = True,
) -> Tensor:
    """RoI Align (Mask R-CNN, MegEngine's ROIAlign): each row (batch index, x1, y1, x2, y2) of
    ``rois`` (K, 5) is scaled by ``spatial_scale`` (and shifted by -0.5 when ``aligned``), split into
    ``output_shape`` bins, each the max or average of ``sample_points`` bilinear samples (zero
    outside the feature map). Returns (K, C, PH, PW)."""
    label = "roi_align"
    inp, rois, rmode = _roi_operands(label, inp, rois, mode)
    ph, pw = _hw(label, output_shape, "output_shape")
    sh, sw = _hw(label, sample_points, "sample_points")
    if min(sh, sw) < 1:
        raise op_error(
            label,
            f"sample_points must be positive (dense sampling, 0, is not supported), got {sample_points}",
        )
    out, _ = apply(
        T.ROIAlignOp, [inp, rois], label=label, mode=rmode, spatial_scale=float(spatial_scale),
        offset=0.5 if aligned else 0.0, pooled_shape=(ph, pw), sample_shape=(sh, sw),
    )  # fmt: skip
    return out


def roi_pooling(
    inp: Tensor, rois: Tensor, output_shape: Any, mode: str = "max", scale: float = 1.0
) -> Tensor:
    """RoI pooling (Fast R-CNN, MegEngine's ROIPooling): each row (batch index, x1, y1, x2, y2) of
    ``rois`` (K, 5), scaled by ``scale`` and rounded to pixels, is split into ``output_shape`` bins
    that are max- or average-pooled (0 for an empty bin). Returns (K, C, OH, OW)."""
    label = "roi_pooling"
    inp, rois, rmode = _roi_operands(label, inp, rois, mode)
    out, _ = apply(
        T.ROIPoolingOp, [inp, rois], label=label, mode=rmode, scale=float(scale),
        out_shape=_hw(label, output_shape, "output_shape"),
    )  # fmt: skip
    return out


def nms(boxes: Tensor, scores: Tensor, iou_thresh: float, max_output: int | None = None) -> Tensor:
    """Non-maximum suppression: int32 indices of the kept boxes (x1, y1, x2, y2), in descending
    score order; a box is dropped when its IoU with a kept, higher-scoring box exceeds
    ``iou_thresh`` (MegEngine's NMSKeep on the boxes sorted by score), at most ``max_output``
    (all boxes when None). How many are kept depends on the data: NMSKeep gives ``max_output``
    indices and the count, and the result is sliced to the count read when the call runs, as
    ``cond_take`` reads its mask (a traced function runs its body on every call, so each call gets
    its own count; a dumped or compiled graph, whose shapes are static, keeps the traced call's)."""
    from compiler.functional.math import argsort

    label = "nms"
    boxes, scores = as_tensor(boxes), as_tensor(scores)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise op_error(label, f"the expected shape of boxes is (N, 4), got {boxes.shape}")
    if scores.ndim != 1:
        raise op_error(label, f"the expected shape of scores is (N,), got {scores.shape}")
    if boxes.shape[0] != scores.shape[0]:
        raise op_error(
            label, f"number of boxes ({boxes.shape[0]}) and scores ({scores.shape[0]}) do not match"
        )
    if boxes.shape[0] == 0:
        return Tensor(np.zeros(0, np.int32))
    if max_output is None:
        max_output = boxes.shape[0]
    if int(max_output) < 1:
        raise op_error(label, f"max_output must be positive, got {max_output}")
    # no detach (it would cut a traced graph here): the result is indices, no gradient flows anyway
    boxes = _float32(boxes)
    order = argsort(scores, descending=True)
    ranked = reshape(boxes[order], (1, boxes.shape[0], 4))
    indices, count = apply(
        T.NMSKeepOp, [ranked], label=label, iou_thresh=float(iou_thresh), max_output=int(max_output)
    )
    keep = reshape(indices, (int(max_output),))[: int(count.numpy()[0])]
    return order[keep]


def correlation(
    data1: Tensor,
    data2: Tensor,
    kernel_size: int = 1,
    max_displacement: int = 1,
    stride1: int = 1,
    stride2: int = 1,
    pad_size: int = 0,
    is_multiply: bool = True,
) -> Tensor:
    """FlowNet's correlation of two NCHW feature maps (MegEngine's Correlation): one output channel
    per displacement on the ``stride2`` grid within ``max_displacement``, each the mean over a
    ``kernel_size`` window and all channels of ``data1 * data2`` (``|data1 - data2|`` without
    ``is_multiply``), at positions ``stride1`` apart; ``pad_size`` zero pixels around both."""
    label = "correlation"
    data1, data2 = as_tensor(data1), as_tensor(data2)
    if data1.dtype != np.float32 or data2.dtype != np.float32:
        raise op_error(label, f"needs float32 inputs, got {data1.dtype} and {data2.dtype}")
    (out,) = apply(
        T.CorrelationOp, [data1, data2], label=label, kernel_size=int(kernel_size),
        max_displacement=int(max_displacement), stride1=int(stride1), stride2=int(stride2),
        pad_size=int(pad_size), is_multiply=bool(is_multiply),
    )  # fmt: skip
    return out


_BORDERS = ("replicate", "reflect", "reflect_101", "wrap", "constant")


def _border_mode(label: str, border_mode: str) -> Any:
    name = str(border_mode).lower()
    if name in ("transparent", "isolated"):
        raise op_error(
            label, f"border_mode {border_mode!r} is not supported (MegEngine's CPU kernels lack it)"
        )
    if name not in _BORDERS:
        raise op_error(label, f"unknown border_mode {border_mode!r}; expected one of {list(_BORDERS)}")
    return enums.BorderMode[name.upper()]


_AFFINE_MODES = {"nearest": enums.InterpolationMode.NEAREST, "linear": enums.InterpolationMode.LINEAR,
                 "cubic": enums.InterpolationMode.CUBIC}  # fmt: skip


def warp_affine(
    inp: Tensor,
    mat: Tensor,
    out_shape: Any,
    border_mode: str = "replicate",
    border_val: float = 0.0,
    format: str = "NHWC",
    interp_mode: str = "linear",
) -> Tensor:
    """Affine warp of a batch of images (MegEngine's WarpAffine): output pixel (h, w) of image n
    samples ``inp[n]`` at ``(M00 w + M01 h + M02, M10 w + M11 h + M12)`` (x across, y down) for
    ``mat`` (N, 2, 3) (the inverse of cv2.warpAffine's matrix, as in cv2's WARP_INVERSE_MAP).
    ``format`` NHWC (the default; float32 or uint8, ``interp_mode`` nearest, linear or cubic, at
    1/32-pixel positions as MegEngine's OpenCV-style sampler) or NCHW (float32, linear, at float
    positions). Taps outside follow ``border_mode`` (replicate, reflect, reflect_101, wrap,
    constant with ``border_val``). Forward only, as in MegEngine (use warp_perspective for a
    gradient)."""
    label = "warp_affine"
    inp, mat = as_tensor(inp), _float32(mat)
    fmt = str(format).upper()
    if fmt not in ("NCHW", "NHWC"):
        raise op_error(label, f"format must be NHWC or NCHW, got {format!r}")
    mode = str(interp_mode).lower()
    if mode not in _AFFINE_MODES:
        raise op_error(
            label, f"interp_mode {interp_mode!r} is not supported; expected one of {list(_AFFINE_MODES)}"
        )
    (out,) = apply(
        T.WarpAffineOp, [inp, mat], label=label, out_shape=_hw(label, out_shape, "out_shape"),
        imode=_AFFINE_MODES[mode], bmode=_border_mode(label, border_mode), border_val=float(border_val),
        format=enums.Format[fmt],
    )  # fmt: skip
    return out


def remap(
    inp: Tensor,
    map_xy: Tensor,
    border_mode: str = "replicate",
    scalar: float = 0.0,
    interp_mode: str = "linear",
) -> Tensor:
    """Relocate pixels (MegEngine's Remap, NCHW): output pixel (h, w) of image n is ``inp[n]``
    sampled at ``(map_xy[n, h, w, 0], map_xy[n, h, w, 1])`` (x across, y down; the output takes
    ``map_xy``'s height and width), bilinearly or, with ``interp_mode="nearest"``, at the rounded
    position; taps outside follow ``border_mode`` (constant: ``scalar``). float16 images are
    sampled in float32 and returned as float16; uint8 rounded back half away from zero."""
    label = "remap"
    inp, map_xy = as_tensor(inp), as_tensor(map_xy)
    mode = str(interp_mode).lower()
    if mode not in ("linear", "nearest"):
        raise op_error(label, f"interp_mode {interp_mode!r} is not supported; expected 'linear' or 'nearest'")
    back = None
    if inp.dtype == np.float16:
        inp, back = inp.astype("float32"), "float16"
    if map_xy.dtype != np.float32:
        map_xy = map_xy.astype("float32")
    (out,) = apply(
        T.RemapOp, [inp, map_xy], label=label, imode=_MODES[mode], bmode=_border_mode(label, border_mode),
        scalar=float(scalar),
    )  # fmt: skip
    return out.astype(back) if back else out


def cvt_color(inp: Tensor, mode: str = "") -> Tensor:
    """Convert NHWC images between colour formats (MegEngine's CvtColor). float32: RGB2GRAY,
    BGR2GRAY, RGB2YUV, YUV2RGB, GRAY2RGB; uint8 also RGBA2RGB, RGBA2BGR, RGBA2GRAY, RGB2BGR,
    BGR2RGB (the NV12/NV21/YV12/YU12 and BT601 modes are not supported). The YUV modes keep
    MegEngine's channel order: RGB2YUV reads channel 0 as blue, YUV2RGB writes blue first."""
    label = "cvt_color"
    inp = as_tensor(inp)
    name = str(mode) if "YCrCb" in str(mode) else str(mode).upper()
    try:
        cmode = enums.CvtColorMode[name]
    except KeyError:
        raise op_error(label, f"unsupported mode {mode!r}") from None
    if cmode not in T.CVT_COLOR_CHANNELS:
        raise op_error(label, f"mode {mode!r} is not supported by xmge")
    (out,) = apply(T.CvtColorOp, [inp], label=label, mode=cmode)
    return out


def rotate(inp: Tensor, angle: float = 0.0, format: str = "NCHW", interp_mode: str = "bilinear") -> Tensor:
    """Images turned by ``angle`` degrees about their centre (later MegEngine's ``rotate``): an
    affine warp with a zero constant border, NCHW bilinear (NHWC "area" is not supported)."""
    inp = as_tensor(inp)
    fmt = str(format).upper()
    if fmt != "NCHW" or interp_mode != "bilinear":
        raise op_error(
            "rotate", f"only NCHW with interp_mode 'bilinear' is supported, got {format!r}, {interp_mode!r}"
        )
    if inp.ndim != 4:
        raise op_error("rotate", f"input must be 4-D NCHW, got shape {inp.shape}")
    h, w = inp.shape[2:]
    a = float(angle) / 180.0 * math.pi
    cos, sin = math.cos(a), math.sin(a)
    cx, cy = (w - 1) / 2, (h - 1) / 2
    mat = np.array(
        [[[cos, -sin, (1 - cos) * cx + sin * cy], [sin, cos, -sin * cx + (1 - cos) * cy]]], np.float32
    )
    mat = np.repeat(mat, inp.shape[0], axis=0)
    return warp_affine(inp, Tensor(mat), (h, w), border_mode="constant", format="NCHW", interp_mode="linear")


def resize(
    inp: Tensor, size: Any, format: str = "NCHW", imode: str = "bilinear", max_size: int | None = None
) -> Tensor:
    """Images resized to ``size`` (height, width) (later MegEngine's ``resize``): MegEngine's Resize
    with half-pixel centres, ``imode`` bilinear, nearest or bicubic; a side above ``max_size`` is
    cut to it. NHWC input is resized as NCHW and transposed back."""
    inp = as_tensor(inp)
    if str(imode) not in ("bilinear", "nearest", "bicubic"):
        raise op_error("resize", f"imode must be bilinear, nearest or bicubic, got {imode!r}")
    oh, ow = _hw("resize", size, "size")
    if max_size is not None:
        oh, ow = min(oh, int(max_size)), min(ow, int(max_size))
    fmt = str(format).upper()
    if fmt not in ("NCHW", "NHWC"):
        raise op_error("resize", f"format must be NCHW or NHWC, got {format!r}")
    if fmt == "NHWC":
        inp = transpose(inp, (0, 3, 1, 2))
    out = interpolate(inp, (oh, ow), mode=imode)
    return transpose(out, (0, 2, 3, 1)) if fmt == "NHWC" else out


def nvof(src: Tensor, precision: int = 1) -> Tensor:
    """NVIDIA Optical Flow (MegEngine's NvOf): a CUDA-only operator; xmge's targets have no CUDA
    driver, so this raises what MegEngine raises on a CPU (a CUDA driver error)."""
    src = as_tensor(src)
    if src.ndim != 5 or src.shape[4] != 4:
        raise op_error("nvof", f"src must be (n, t, h, w, 4) uint8, got shape {src.shape}")
    raise op_error("nvof", "needs the NVIDIA Optical Flow SDK on a CUDA device; it is unavailable on CPU")
