"""Image functions (MegEngine's ``functional.vision``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.core import apply, op_error
from compiler.functional.math import matmul
from compiler.functional.tensor import expand_dims, reshape, transpose
from compiler.tensor import Tensor, as_tensor
from dialects import enums
from dialects import tensor as T

__all__ = ["flip", "interpolate", "rot90"]

_MODES = {
    "bilinear": enums.InterpolationMode.LINEAR,
    "linear": enums.InterpolationMode.LINEAR,
    "nearest": enums.InterpolationMode.NEAREST,
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
                raise op_error("interpolate", f"scale_factor needs 2 values, got {scale_factor}")
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
    interpolation matrices (MegEngine uses a WarpPerspective there)."""
    inp = as_tensor(inp)
    mode = mode.lower()
    if mode not in _MODES:
        raise op_error("interpolate", f"unsupported mode {mode!r}; expected one of {sorted(_MODES)}")
    if mode == "nearest" and align_corners is not None:
        raise op_error("interpolate", "align_corners can only be set in the bilinear/linear mode")
    align_corners = bool(align_corners)
    if mode == "linear":
        if inp.ndim != 3:
            raise op_error("interpolate", f"linear mode needs a 3-D input, got shape {inp.shape}")
        inp = expand_dims(inp, 3)
    elif inp.ndim != 4:
        raise op_error("interpolate", f"{mode} mode needs a 4-D NCHW input, got shape {inp.shape}")
    if inp.dtype.kind != "f":
        raise op_error("interpolate", f"needs a float input, got {inp.dtype}")
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
