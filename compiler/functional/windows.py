"""Sliding windows (MegEngine's Images2Neibs and SlidingWindowTranspose, ``F.nn.sliding_window`` /
``sliding_window_transpose``) and the locally connected convolution built on them
(``F.nn.local_conv2d``). Composed of pads, strided slices, reshapes and batched matmuls, so their
gradients come from those ops' rules and ``jit.trace`` records them."""

from __future__ import annotations

from typing import Any

from compiler.core import op_error
from compiler.functional.math import batch_matmul
from compiler.functional.tensor import reshape, stack, transpose
from compiler.tensor import Tensor, as_tensor

__all__ = ["local_conv2d", "sliding_window", "sliding_window_transpose"]


def _hw(label: str, v: Any, name: str, least: int) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, int) else tuple(v)
    if len(pair) != 2 or any(not isinstance(x, int) or x < least for x in pair):
        raise op_error(label, f"{name} must be an int or a pair of ints >= {least}, got {v!r}")
    return int(pair[0]), int(pair[1])


def _out_len(size: int, pad: int, window: int, stride: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (window - 1) - 1) // stride + 1


def sliding_window(
    inp: Tensor, kernel_size: Any, padding: Any = 0, stride: Any = 1, dilation: Any = 1
) -> Tensor:
    """The (kh, kw) windows of a zero-padded (N, C, H, W) input: ``out[n, c, oh, ow, i, j] =
    x[n, c, oh*sh + i*dh - ph, ow*sw + j*dw - pw]``, shape (N, C, OH, OW, kh, kw)."""
    from compiler.functional.nn import pad as _pad

    label = "sliding_window"
    inp = as_tensor(inp)
    if inp.ndim != 4:
        raise op_error(label, f"input must be 4-D (N, C, H, W), got shape {inp.shape}")
    kh, kw = _hw(label, kernel_size, "kernel_size", 1)
    ph, pw = _hw(label, padding, "padding", 0)
    sh, sw = _hw(label, stride, "stride", 1)
    dh, dw = _hw(label, dilation, "dilation", 1)
    n, c, h, w = inp.shape
    oh, ow = _out_len(h, ph, kh, sh, dh), _out_len(w, pw, kw, sw, dw)
    if oh < 1 or ow < 1:
        raise op_error(label, f"window {kh}x{kw} (dilation {dh}x{dw}) does not fit input {inp.shape}")
    x = _pad(inp, [(0, 0), (0, 0), (ph, ph), (pw, pw)]) if ph or pw else inp
    pieces = [
        x[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]
    return reshape(stack(pieces, axis=4), (n, c, oh, ow, kh, kw))


def sliding_window_transpose(
    inp: Tensor, output_size: Any, kernel_size: Any, padding: Any = 0, stride: Any = 1, dilation: Any = 1
) -> Tensor:
    """The adjoint of ``sliding_window``: each window element of (N, C, OH, OW, kh, kw) is added to
    the (N, C, H, W) position it was taken from; ``output_size`` is (H, W)."""
    from compiler.functional.nn import pad as _pad

    label = "sliding_window_transpose"
    inp = as_tensor(inp)
    h, w = _hw(label, output_size, "output_size", 1)
    kh, kw = _hw(label, kernel_size, "kernel_size", 1)
    ph, pw = _hw(label, padding, "padding", 0)
    sh, sw = _hw(label, stride, "stride", 1)
    dh, dw = _hw(label, dilation, "dilation", 1)
    oh, ow = _out_len(h, ph, kh, sh, dh), _out_len(w, pw, kw, sw, dw)
    if inp.ndim != 6:
        raise op_error(label, f"input must be 6-D (N, C, OH, OW, kh, kw), got shape {inp.shape}")
    if tuple(inp.shape[2:]) != (oh, ow, kh, kw):
        raise op_error(
            label,
            f"input shape {inp.shape} does not match output_size {(h, w)}: "
            f"expected (N, C, {oh}, {ow}, {kh}, {kw})",
        )
    n, c = inp.shape[:2]
    hp, wp = h + 2 * ph, w + 2 * pw
    span_h, span_w = sh * (oh - 1) + 1, sw * (ow - 1) + 1
    total = None
    # each position sums its window elements in the order of their windows (row-major over
    # (OH, OW)), which for one position is descending (i, j): MegEngine's order, bit for bit
    for i in reversed(range(kh)):
        for j in reversed(range(kw)):
            piece = reshape(inp[:, :, :, :, i, j], (n, c, oh, 1, ow, 1))
            # spread the window's values stride apart (zeros between), then shift it into place
            spread = _pad(piece, [(0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)])
            spread = reshape(spread, (n, c, oh * sh, ow * sw))[:, :, :span_h, :span_w]
            top, left = i * dh, j * dw
            placed = _pad(spread, [(0, 0), (0, 0), (top, hp - top - span_h), (left, wp - left - span_w)])
            total = placed if total is None else total + placed
    assert total is not None
    return total[:, :, ph : ph + h, pw : pw + w]


def local_conv2d(
    inp: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    conv_mode: str = "cross_correlation",
) -> Tensor:
    """A convolution whose kernel differs at each output position (a locally connected layer).
    ``weight`` is (OH, OW, IC, kh, kw, OC), or (groups, OH, OW, IC/groups, kh, kw, OC/groups);
    ``bias`` is added to the (N, OC, OH, OW) result."""
    label = "local_conv2d"
    mode = getattr(conv_mode, "name", conv_mode)
    if str(mode).lower() != "cross_correlation":
        raise op_error(label, f"only conv_mode 'cross_correlation' is supported, got {conv_mode!r}")
    inp, weight = as_tensor(inp), as_tensor(weight)
    if inp.ndim != 4:
        raise op_error(label, f"input must be 4-D (N, C, H, W), got shape {inp.shape}")
    if weight.ndim == 6:
        weight = reshape(weight, (1, *weight.shape))
    if weight.ndim != 7:
        raise op_error(label, f"weight must be 6-D or 7-D (grouped), got shape {weight.shape}")
    g, oh, ow, icg, kh, kw, ocg = weight.shape
    n, c = inp.shape[:2]
    if c != g * icg:
        raise op_error(label, f"input has {c} channels, weight {weight.shape} expects {g * icg}")
    win = sliding_window(inp, (kh, kw), padding, stride, dilation)
    if tuple(win.shape[2:4]) != (oh, ow):
        raise op_error(
            label, f"output would be {tuple(win.shape[2:4])}, weight {weight.shape} is for {(oh, ow)}"
        )
    # (N, G, ICg, OH, OW, kh, kw) -> (G, OH, OW, N, ICg*kh*kw): one matmul per group and position
    cols = transpose(reshape(win, (n, g, icg, oh, ow, kh, kw)), (1, 3, 4, 0, 2, 5, 6))
    cols = reshape(cols, (g * oh * ow, n, icg * kh * kw))
    kern = reshape(weight, (g * oh * ow, icg * kh * kw, ocg))
    out = reshape(batch_matmul(cols, kern), (g, oh, ow, n, ocg))
    out = reshape(transpose(out, (3, 0, 4, 1, 2)), (n, g * ocg, oh, ow))
    if bias is not None:
        out = out + as_tensor(bias)
    return out
