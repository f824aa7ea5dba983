"""Neural-network functions (MegEngine's ``functional.nn``)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.core import apply, note_training_only, op_error
from compiler.functional.elemwise import (
    _elemwise,
    exp,
    gelu,
    hsigmoid,
    hswish,
    log,
    maximum,
    minimum,
    relu,
    relu6,
    sigmoid,
    silu,
    tanh,
)
from compiler.functional.math import max as _max
from compiler.functional.math import mean
from compiler.functional.math import sum as _sum
from compiler.functional.tensor import _axis, reshape
from compiler.tensor import Tensor, as_tensor
from dialects import enums
from dialects import tensor as T

__all__ = [
    "pixel_shuffle",
    "adaptive_avg_pool2d",
    "adaptive_max_pool2d",
    "avg_pool2d",
    "batch_norm",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose3d",
    "warp_perspective",
    "warp_affine",
    "remap",
    "deformable_conv2d",
    "region_restricted_conv",
    "deformable_psroi_pooling",
    "conv_transpose2d",
    "dropout",
    "embedding",
    "gelu",
    "group_norm",
    "instance_norm",
    "hsigmoid",
    "hswish",
    "indexing_one_hot",
    "interpolate",
    "layer_norm",
    "leaky_relu",
    "local_response_norm",
    "linear",
    "log_softmax",
    "logsigmoid",
    "logsoftmax",
    "logsumexp",
    "max_pool2d",
    "one_hot",
    "pad",
    "prelu",
    "relu",
    "relu6",
    "sigmoid",
    "silu",
    "sliding_window",
    "softmax",
    "softplus",
    "tanh",
]


# how the errors of ``_n_ints`` name n values: (any sequence, one of the wrong length)
_N_INTS_WORDS = {2: ("a pair of ints", "a pair"), 3: ("three ints", "three ints (depth, height, width)")}


def _n_ints(label: str, v: int | Sequence[int], name: str, n: int) -> tuple[int, ...]:
    """``v`` as ``n`` ints: an int repeated, or a sequence of exactly ``n`` integers."""
    if isinstance(v, int | np.integer):
        return (int(v),) * n
    some, exact = _N_INTS_WORDS[n]
    try:
        vals = tuple(operator.index(x) for x in v)
    except TypeError:
        raise op_error(label, f"{name} must be an int or {some}, got {v!r}") from None
    if len(vals) != n:
        raise op_error(label, f"{name} must be an int or {exact}, got {v}")
    return vals


def _pair(label: str, v: int | Sequence[int], name: str) -> tuple[int, int]:
    return _n_ints(label, v, name, 2)  # type: ignore[return-value]


def _conv_geometry(
    label: str,
    stride: int | Sequence[int],
    padding: int | Sequence[int],
    dilation: int | Sequence[int],
    groups: int,
) -> dict[str, Any]:
    """The window parameters every 2-D convolution op takes (ConvolutionOp, ConvBiasOp,
    ConvolutionBackwardDataOp), by keyword; ``groups`` > 1 selects the grouped filter layout."""
    return {
        "stride": _pair(label, stride, "stride"),
        "padding": _pair(label, padding, "padding"),
        "dilation": _pair(label, dilation, "dilation"),
        "sparse": enums.ConvSparse.GROUP if groups > 1 else enums.ConvSparse.DENSE,
    }


def _grouped_weight(label: str, weight: Tensor, groups: int, first_axis: str) -> Tensor:
    """``weight`` as a group convolution reads it: a 4-D weight split into (G, C/G, ...) along its
    first axis (``first_axis`` names those channels in errors), a 5-D one checked to hold ``groups``."""
    if groups < 1:
        raise op_error(label, f"groups must be positive, got {groups}")
    if groups > 1 and weight.ndim == 4:
        channels = weight.shape[0]
        if channels % groups:
            raise op_error(label, f"{channels} {first_axis} channels cannot be split into {groups} groups")
        weight = reshape(weight, (groups, channels // groups, *weight.shape[1:]))
    if groups > 1 and weight.ndim == 5 and weight.shape[0] != groups:
        raise op_error(label, f"weight {weight.shape} has {weight.shape[0]} groups, groups={groups}")
    return weight


def _mode(label: str, enum: type[Any], value: str, what: str) -> Any:
    """The member of ``enum`` that MegEngine's lower-case mode string ``value`` names."""
    try:
        return enum[value.upper()]
    except KeyError:
        raise op_error(label, f"unknown {what} {value!r}") from None


def _promote_conv_operands(label: str, inp: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """MegEngine's dtype promotion for convolutions: float operands of different precisions are
    computed in the wider one (under amp, autocast decides); quantized or integer operands must
    match."""
    if inp.dtype == weight.dtype:
        return inp, weight
    from compiler.core.tensor import amp as _amp

    plain_floats = all(t.dtype.kind == "f" and t.dtype.metadata is None for t in (inp, weight))
    if not plain_floats:
        raise op_error(label, f"input dtype {inp.dtype} differs from weight dtype {weight.dtype}")
    if _amp._enabled:
        return inp, weight
    from compiler.functional.elemwise import _promoted

    wide = _promoted(inp.dtype, weight.dtype)  # MegBrain's dtype_promotion, as elementwise operands
    return inp.astype(wide), weight.astype(wide)


def _add_channel_bias(label: str, out: Tensor, bias: Tensor | None) -> Tensor:
    """``out`` plus one bias value per channel (axis 1); the bias is (OC,) or (1, OC, 1, ...)."""
    if bias is None:
        return out
    bias = as_tensor(bias)
    oc = out.shape[1]
    shape = (1, oc) + (1,) * (out.ndim - 2)
    if bias.size != oc:
        raise op_error(label, f"bias has shape {bias.shape}, expected {shape} for {oc} output channels")
    if bias.shape != shape:
        # a (OC,) bias would otherwise broadcast along the last axis
        bias = reshape(bias, shape)
    return _elemwise("ADD", out, bias, label=f"{label} bias")


def conv2d(
    inp: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    conv_mode: str = "cross_correlation",
    compute_mode: str = "default",
) -> Tensor:
    """2-D convolution; with ``groups > 1`` the weight is (G, OC/G, IC/G, FH, FW) as in MegEngine."""
    inp, weight = as_tensor(inp), as_tensor(weight)
    if inp.ndim != 4:
        raise op_error("conv2d", f"input must be 4-D NCHW, got shape {inp.shape}")
    weight = _grouped_weight("conv2d", weight, groups, "output")
    inp, weight = _promote_conv_operands("conv2d", inp, weight)
    mode = _mode("conv2d", enums.ConvMode, conv_mode, "conv_mode")
    cmode = _mode("conv2d", enums.ComputeMode, compute_mode, "compute_mode")
    (out,) = apply(
        T.ConvolutionOp,
        [inp, weight],
        label="conv2d",
        **_conv_geometry("conv2d", stride, padding, dilation, groups),
        mode=mode,
        compute_mode=cmode,
    )
    return _add_channel_bias("conv2d", out, bias)


def deformable_conv2d(
    inp: Tensor,
    weight: Tensor,
    offset: Tensor,
    mask: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    conv_mode: str = "cross_correlation",
    compute_mode: str = "default",
) -> Tensor:
    """Deformable convolution (DCNv2, MegEngine's DeformableConv): tap (fh, fw) of output (oh, ow)
    reads ``inp`` bilinearly (zero outside) at its regular position shifted by ``offset``
    (N, 2 * DG * FH * FW, OH, OW), a (dy, dx) pair per deformable group and tap, and is scaled by
    ``mask`` (N, DG * FH * FW, OH, OW); the DG deformable groups split the input channels. The
    weight is as conv2d's. Differentiable in all four inputs."""
    label = "deformable_conv2d"
    inp, weight = as_tensor(inp), as_tensor(weight)
    offset, mask = as_tensor(offset).astype("float32"), as_tensor(mask).astype("float32")
    if inp.ndim != 4:
        raise op_error(label, f"input must be 4-D NCHW, got shape {inp.shape}")
    if str(conv_mode).lower() != "cross_correlation":
        raise op_error(label, f"only conv_mode 'cross_correlation' is supported, got {conv_mode!r}")
    _mode(label, enums.ComputeMode, compute_mode, "compute_mode")
    weight = _grouped_weight(label, weight, groups, "output")
    inp, weight = _promote_conv_operands(label, inp, weight)
    (out,) = apply(
        T.DeformableConvOp,
        [inp, weight, offset, mask],
        label=label,
        **_conv_geometry(label, stride, padding, dilation, groups),
    )
    return _add_channel_bias(label, out, bias)


def region_restricted_conv(
    inp: Tensor,
    weight: Tensor,
    rin: Tensor,
    rout: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    conv_mode: str = "cross_correlation",
    compute_mode: str = "default",
) -> Tensor:
    """Region-restricted convolution (MegEngine's RegionRestrictedConvolution): a grouped
    convolution (weight (G, OC/G, IC/G, FH, FW)) in which an input pixel contributes to an output
    only where the region ids agree, ``rin[n, ih, iw] == rout[n, oh, ow]`` (``rin`` (N, IH, IW),
    ``rout`` (N, OH, OW), both int32 or both uint8); padding contributes nothing. Differentiable in
    the input and the weight."""
    label = "region_restricted_conv"
    inp, weight, rin, rout = as_tensor(inp), as_tensor(weight), as_tensor(rin), as_tensor(rout)
    if str(conv_mode).lower() != "cross_correlation":
        raise op_error(label, f"only conv_mode 'cross_correlation' is supported, got {conv_mode!r}")
    _mode(label, enums.ComputeMode, compute_mode, "compute_mode")
    if groups < 1:
        raise op_error(label, f"groups must be positive, got {groups}")
    if weight.ndim == 4:  # MegEngine always runs it grouped
        weight = reshape(weight, (groups, weight.shape[0] // groups, *weight.shape[1:]))
    geometry = _conv_geometry(label, stride, padding, dilation, groups)
    geometry.pop("sparse")
    (out,) = apply(T.RegionRestrictedConvOp, [inp, weight, rin, rout], label=label, **geometry)
    return _add_channel_bias(label, out, bias)


def deformable_psroi_pooling(
    inp: Tensor,
    rois: Tensor,
    trans: Tensor,
    no_trans: bool,
    part_size: int,
    pooled_h: int,
    pooled_w: int,
    sample_per_part: int,
    spatial_scale: float,
    trans_std: float = 0.1,
) -> Tensor:
    """Deformable PSRoI pooling (MegEngine's DeformablePSROIPooling): each row (batch index, x1,
    y1, x2, y2) of ``rois`` (K, 5), rounded to pixels and scaled by ``spatial_scale``, is split
    into ``pooled_h`` x ``pooled_w`` bins, each the mean of its ``sample_per_part``^2 bilinear
    samples inside the image; unless ``no_trans``, bin (ph, pw) of roi k moves by ``trans_std``
    times the roi's size times ``trans[k]`` (trans (R >= K, 2, pooled_h, pooled_w), read on a
    ``part_size`` grid as MegEngine does). Returns (K, C, pooled_h, pooled_w); differentiable in
    ``inp`` and ``trans``."""
    label = "deformable_psroi_pooling"
    inp, rois, trans = as_tensor(inp), as_tensor(rois), as_tensor(trans)
    out, _ = apply(
        T.DeformablePSROIPoolingOp,
        [inp, rois.astype("float32"), trans.astype("float32")],
        label=label,
        no_trans=bool(no_trans),
        part_size=int(part_size),
        pooled_h=int(pooled_h),
        pooled_w=int(pooled_w),
        sample_per_part=int(sample_per_part),
        spatial_scale=float(spatial_scale),
        trans_std=float(trans_std),
    )
    return out


def conv_transpose2d(
    inp: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    conv_mode: str = "cross_correlation",
    compute_mode: str = "default",
) -> Tensor:
    """2-D transposed convolution (MegEngine's ConvolutionBackwardData); the weight is
    (IC, OC, FH, FW), with ``groups > 1`` (G, IC/G, OC/G, FH, FW), as in MegEngine."""
    label = "conv_transpose2d"
    inp, weight = as_tensor(inp), as_tensor(weight)
    if inp.ndim != 4:
        raise op_error(label, f"input must be 4-D NCHW, got shape {inp.shape}")
    weight = _grouped_weight(label, weight, groups, "input")
    if conv_mode.lower() != "cross_correlation":
        raise op_error(label, f"only conv_mode 'cross_correlation' is supported, got {conv_mode!r}")
    cmode = _mode(label, enums.ComputeMode, compute_mode, "compute_mode")
    inp, weight = _promote_conv_operands(label, inp, weight)
    (out,) = apply(
        T.ConvolutionBackwardDataOp,
        [weight, inp],
        label=label,
        **_conv_geometry(label, stride, padding, dilation, groups),
        output_padding=_pair(label, output_padding, "output_padding"),
        compute_mode=cmode,
    )
    return _add_channel_bias(label, out, bias)


def layer_norm(
    inp: Tensor,
    normalized_shape: int | Sequence[int],
    affine: bool,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalisation over the trailing ``normalized_shape`` axes (MegEngine's LayerNorm)."""
    inp = as_tensor(inp)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    nd = len(shape)
    if nd == 0 or tuple(inp.shape[inp.ndim - nd :]) != tuple(shape) or nd > inp.ndim:
        raise op_error("layer_norm", f"normalized_shape {shape} does not end the input shape {inp.shape}")
    operands = [inp]
    if affine:
        if weight is None or bias is None:
            raise op_error("layer_norm", "weight and bias must be given when affine is True")
        operands += [as_tensor(weight), as_tensor(bias)]
    out, _, _ = apply(
        T.LayerNormOp,
        operands,
        label="layer_norm",
        affine=bool(affine),
        eps=float(eps),
        normalized_dim=nd,
        normalized_size=int(np.prod(shape)),
    )
    return out


def linear(inp: Tensor, weight: Tensor, bias: Tensor | None = None, compute_mode: str = "default") -> Tensor:
    """``inp @ weight.T + bias`` with weight (out, in) and bias (out,). ``compute_mode``
    ("default" or "float32") is MegEngine's accumulation hint; xmge accumulates float32 anyway."""
    if str(compute_mode).upper() not in enums.ComputeMode.__members__:
        raise op_error("linear", f"unknown compute_mode {compute_mode!r}")
    inp, weight = as_tensor(inp), as_tensor(weight)
    if weight.ndim != 2:
        raise op_error("linear", f"weight must be 2-D (out, in), got shape {weight.shape}")
    if inp.ndim < 1 or inp.shape[-1] != weight.shape[1]:
        raise op_error(
            "linear",
            f"input's last dimension must be {weight.shape[1]} for weight {weight.shape}, "
            f"got input {inp.shape}",
        )
    lead = inp.shape[:-1]
    x2 = inp if inp.ndim == 2 else reshape(inp, (-1, inp.shape[-1]))
    (out,) = apply(T.MatrixMulOp, [x2, weight], label="linear", transpose_b=True)
    if inp.ndim != 2:
        out = reshape(out, (*lead, weight.shape[0]))
    if bias is not None:
        bias = as_tensor(bias)
        if bias.shape not in ((weight.shape[0],), (1, weight.shape[0])):
            raise op_error("linear", f"bias has shape {bias.shape}, expected ({weight.shape[0]},)")
        out = _elemwise("ADD", out, bias, label="linear bias")
    return out


def conv1d(
    inp: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    conv_mode: str = "cross_correlation",
    compute_mode: str = "default",
) -> Tensor:
    """1-D convolution of (N, C, L) with weight (OC, IC/groups, K): a conv2d over (N, C, L, 1)."""
    inp, weight = as_tensor(inp), as_tensor(weight)
    if inp.ndim != 3:
        raise op_error("conv1d", f"input must be 3-D (N, C, L), got shape {inp.shape}")
    if weight.ndim != 3:
        raise op_error("conv1d", f"weight must be 3-D (OC, IC/groups, K), got shape {weight.shape}")
    from compiler.functional.tensor import expand_dims, squeeze

    out = conv2d(
        expand_dims(inp, 3), expand_dims(weight, 3), None, (stride, 1), (padding, 0), (dilation, 1), groups,
        conv_mode, compute_mode,
    )  # fmt: skip
    return _add_channel_bias("conv1d", squeeze(out, 3), bias)


def _triple(label: str, v: int | Sequence[int], name: str) -> tuple[int, int, int]:
    return _n_ints(label, v, name, 3)  # type: ignore[return-value]


def conv3d(
    inp: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    conv_mode: str = "cross_correlation",
) -> Tensor:
    """3-D convolution of NCDHW ``inp`` (MegEngine's Convolution3D): weight (OC, IC, KD, KH, KW),
    with ``groups > 1`` (G, OC/G, IC/G, KD, KH, KW); zero padding; bias (1, OC, 1, 1, 1) or (OC,)."""
    label = "conv3d"
    inp, weight = as_tensor(inp), as_tensor(weight)
    if conv_mode.lower() != "cross_correlation":
        raise op_error(label, f"only conv_mode 'cross_correlation' is supported, got {conv_mode!r}")
    if inp.ndim != 5:
        raise op_error(label, f"input must be 5-D NCDHW, got shape {inp.shape}")
    if groups < 1:
        raise op_error(label, f"groups must be positive, got {groups}")
    if groups > 1 and weight.ndim == 5:
        if weight.shape[0] % groups:
            raise op_error(label, f"{weight.shape[0]} output channels cannot be split into {groups} groups")
        weight = reshape(weight, (groups, weight.shape[0] // groups, *weight.shape[1:]))
    if groups > 1 and (weight.ndim != 6 or weight.shape[0] != groups):
        raise op_error(
            label, f"weight {weight.shape} does not hold {groups} groups (G, OC/G, IC/G, KD, KH, KW)"
        )
    inp, weight = _promote_conv_operands(label, inp, weight)
    (out,) = apply(
        T.Convolution3DOp,
        [inp, weight],
        label=label,
        stride=_triple(label, stride, "stride"),
        padding=_triple(label, padding, "padding"),
        dilation=_triple(label, dilation, "dilation"),
        sparse=enums.ConvSparse.GROUP if groups > 1 else enums.ConvSparse.DENSE,
    )
    return _add_channel_bias(label, out, bias)


def _zero_insert(x: Tensor, axis: int, stride: int) -> Tensor:
    """``x`` with ``stride - 1`` zeros between neighbours along ``axis`` (pad a new axis, merge)."""
    if stride == 1:
        return x
    n = x.shape[axis]
    spread = reshape(x, (*x.shape[: axis + 1], 1, *x.shape[axis + 1 :]))
    widths = [(0, 0)] * spread.ndim
    widths[axis + 1] = (0, stride - 1)
    merged = reshape(pad(spread, widths), (*x.shape[:axis], n * stride, *x.shape[axis + 1 :]))
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, (n - 1) * stride + 1)
    return merged[tuple(index)]


def conv_transpose3d(
    inp: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """3-D transposed convolution (the gradient of :func:`conv3d` w.r.t. its input; MegEngine's
    Convolution3DBackwardData): weight (IC, OC, KD, KH, KW), grouped (G, IC/G, OC/G, KD, KH, KW);
    output size ``(in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1``.
    Computed as a stride-1 ``conv3d`` of the input spread out by ``stride`` (zeros between) and
    padded by ``dilation * (k - 1) - padding`` (plus ``output_padding`` at the end), with the
    kernel mirrored and its channel axes swapped; gradients follow from those ops."""
    label = "conv_transpose3d"
    inp, weight = as_tensor(inp), as_tensor(weight)
    if inp.ndim != 5:
        raise op_error(label, f"input must be 5-D NCDHW, got shape {inp.shape}")
    s, p = _triple(label, stride, "stride"), _triple(label, padding, "padding")
    op, d = _triple(label, output_padding, "output_padding"), _triple(label, dilation, "dilation")
    if min(s) < 1 or min(d) < 1 or min(p) < 0:
        raise op_error(label, f"invalid stride {s}, dilation {d} or padding {p}")
    if any(o >= st for o, st in zip(op, s, strict=True)) or min(op) < 0:
        raise op_error(label, f"output_padding {op} must be non-negative and less than the stride {s}")
    if groups < 1:
        raise op_error(label, f"groups must be positive, got {groups}")
    if groups > 1 and weight.ndim == 5:
        if weight.shape[0] % groups:
            raise op_error(label, f"{weight.shape[0]} input channels cannot be split into {groups} groups")
        weight = reshape(weight, (groups, weight.shape[0] // groups, *weight.shape[1:]))
    grouped = weight.ndim == 6
    if (groups > 1) != grouped or (grouped and weight.shape[0] != groups) or weight.ndim not in (5, 6):
        raise op_error(label, f"weight {weight.shape} does not fit groups={groups} (IC, OC, KD, KH, KW)")
    ic = weight.shape[0] * weight.shape[1] if grouped else weight.shape[0]
    if inp.shape[1] != ic:
        raise op_error(label, f"input has {inp.shape[1]} channels, the weight {weight.shape} expects {ic}")
    k = weight.shape[-3:]
    x = inp
    for i in range(3):
        x = _zero_insert(x, 2 + i, s[i])
    widths = [(0, 0), (0, 0)]
    crop = [slice(None), slice(None)]
    for i in range(3):
        edge = d[i] * (k[i] - 1) - p[i]
        widths.append((max(edge, 0), max(edge + op[i], 0)))
        size = x.shape[2 + i] + widths[-1][0] + widths[-1][1]
        crop.append(slice(max(-edge, 0), size - max(-(edge + op[i]), 0)))
    x = pad(x, widths) if any(w != (0, 0) for w in widths) else x
    x = x[tuple(crop)]
    # (IC, OC, k) -> (OC, IC, k) mirrored; grouped (G, IC/G, OC/G, k) -> (G, OC/G, IC/G, k)
    from compiler.functional.tensor import transpose

    perm = (0, 2, 1, 3, 4, 5) if grouped else (1, 0, 2, 3, 4)
    flipped = transpose(weight, perm)[
        (Ellipsis, slice(None, None, -1), slice(None, None, -1), slice(None, None, -1))
    ]
    out = conv3d(x, flipped, None, 1, 0, d, groups)
    return _add_channel_bias(label, out, bias)


def group_norm(
    inp: Tensor,
    num_groups: int,
    affine: bool,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Group normalisation of (N, C, ...): statistics per sample over each group of C/num_groups
    channels and all spatial positions; ``weight``/``bias`` of C elements when ``affine``."""
    from compiler.functional.elemwise import sqrt

    inp = as_tensor(inp)
    if inp.ndim < 2:
        raise op_error("group_norm", f"input must have a channel axis, got shape {inp.shape}")
    n, c = inp.shape[0], inp.shape[1]
    if num_groups < 1 or c % num_groups:
        raise op_error("group_norm", f"{c} channels cannot be split into {num_groups} groups")
    grouped = reshape(inp, (n, num_groups, -1))
    centered = grouped - mean(grouped, 2, keepdims=True)
    variance = mean(centered * centered, 2, keepdims=True)
    out = reshape(centered / sqrt(variance + eps), inp.shape)
    if affine:
        if weight is None or bias is None:
            raise op_error("group_norm", "weight and bias must be given when affine is True")
        pshape = (1, c) + (1,) * (inp.ndim - 2)
        out = out * reshape(as_tensor(weight), pshape) + reshape(as_tensor(bias), pshape)
    return out


def _check_integers(label: str, index: Tensor) -> None:
    if index.dtype.kind not in "iu":
        raise op_error(label, f"indices must be integers, got {index.dtype}")


def _check_picks(label: str, index: Tensor, src: Tensor, axis: int, names: tuple[str, str]) -> None:
    """``index`` picks one entry of ``src`` along ``axis`` per position: integers shaped as ``src``
    without that axis. ``names``: what the caller calls the two, for the errors."""
    index_name, src_name = names
    expected = src.shape[:axis] + src.shape[axis + 1 :]
    if index.shape != expected:
        raise op_error(
            label, f"{index_name} has shape {index.shape}, expected {expected} for {src_name} {src.shape}"
        )
    _check_integers(label, index)


def _one_hot_mask(label: str, index: Tensor, num_classes: int, axis: int, dtype: Any) -> Tensor:
    """``index`` compared with 0..num_classes-1 laid along a new axis ``axis``, as ``dtype``."""
    from compiler.functional.tensor import expand_dims

    index = as_tensor(index)
    _check_integers(label, index)
    index = index.astype("int32")
    classes_shape = [1] * (index.ndim + 1)
    classes_shape[axis] = num_classes
    classes = Tensor(np.arange(num_classes, dtype=np.int32).reshape(classes_shape))
    return _elemwise("EQ", expand_dims(index, axis), classes, label=label).astype(dtype)


def one_hot(inp: Tensor, num_classes: int) -> Tensor:
    """int32 one-hot encoding along a new last axis (MegEngine's ``F.one_hot``)."""
    inp = as_tensor(inp)
    return _one_hot_mask("one_hot", inp, int(num_classes), inp.ndim, "int32")


def indexing_one_hot(src: Tensor, index: Tensor, axis: int = 1, keepdims: bool = False) -> Tensor:
    """``src`` picked at ``index`` along ``axis`` (``index``: integers, ``src``'s shape without that
    axis): MegEngine's IndexingOneHot operator, then the axis squeezed unless ``keepdims``."""
    src, index = as_tensor(src), as_tensor(index)
    ax = _axis("indexing_one_hot", axis, src.ndim)
    if src.ndim < 2:
        raise op_error("indexing_one_hot", f"src needs 2 or more dimensions, got shape {src.shape}")
    _check_picks("indexing_one_hot", index, src, ax, ("index", "src"))
    (picked,) = apply(T.IndexingOneHotOp, [src, index.astype("int32")], label="indexing_one_hot", axis=ax)
    if keepdims:
        return picked
    from compiler.functional.tensor import squeeze

    return squeeze(picked, ax)


def embedding(
    inp: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float | None = None,
) -> Tensor:
    """Rows of ``weight`` (num_embeddings, dim) picked by integer ``inp``: output inp.shape + (dim,).
    Traced as a one-hot (N, num_embeddings) float matrix times ``weight`` (exact: one non-zero
    term per sum); MegEngine's IndexingMultiAxisVec is not an mgb op yet."""
    from compiler.functional.math import matmul

    inp, weight = as_tensor(inp), as_tensor(weight)
    if weight.ndim != 2:
        raise op_error("embedding", f"weight must be 2-D (num_embeddings, dim), got shape {weight.shape}")
    if max_norm is not None:
        raise op_error("embedding", "max_norm renormalisation is not supported (MegEngine ignores it too)")
    if inp.dtype.kind in "iu" and inp.size:
        ids = inp.numpy()
        if ids.min() < 0 or ids.max() >= weight.shape[0]:
            raise op_error(
                "embedding", f"indices must be in [0, {weight.shape[0]}), got [{ids.min()}, {ids.max()}]"
            )
    flat = reshape(inp, (inp.size,))
    mask = _one_hot_mask("embedding", flat, weight.shape[0], 1, weight.dtype)
    return reshape(matmul(mask, weight), (*inp.shape, weight.shape[1]))


def _pool(label: str, mode: Any, inp: Tensor, kernel_size: Any, stride: Any, padding: Any) -> Tensor:
    inp = as_tensor(inp)
    if inp.ndim != 4:
        raise op_error(label, f"input must be 4-D NCHW, got shape {inp.shape}")
    window = _pair(label, kernel_size, "kernel_size")
    strides = window if stride is None else _pair(label, stride, "stride")
    (out,) = apply(
        T.PoolingOp,
        [inp],
        label=label,
        mode=mode,
        window=window,
        stride=strides,
        padding=_pair(label, padding, "padding"),
    )
    return out


def max_pool2d(inp: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    return _pool("max_pool2d", enums.PoolingMode.MAX, inp, kernel_size, stride, padding)


def avg_pool2d(
    inp: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    mode: str = "average_count_exclude_padding",
) -> Tensor:
    pmode = _mode("avg_pool2d", enums.PoolingMode, mode, "mode")
    return _pool("avg_pool2d", pmode, inp, kernel_size, stride, padding)


def _adaptive(label: str, mode: Any, inp: Tensor, oshp: Any) -> Tensor:
    inp = as_tensor(inp)
    if inp.ndim != 4:
        raise op_error(label, f"input must be 4-D NCHW, got shape {inp.shape}")
    out_hw = _pair(label, oshp, "output size")
    for i, o in zip(inp.shape[2:], out_hw, strict=True):
        if o < 1 or o > i:
            raise op_error(
                label, f"output size {out_hw} must be between 1 and the input size {inp.shape[2:]}"
            )
    (out,) = apply(T.AdaptivePoolingOp, [inp], label=label, mode=mode, out_shape=out_hw)
    return out


def adaptive_avg_pool2d(inp: Tensor, oshp: Any) -> Tensor:
    return _adaptive("adaptive_avg_pool2d", enums.PoolingMode.AVERAGE, inp, oshp)


def adaptive_max_pool2d(inp: Tensor, oshp: Any) -> Tensor:
    return _adaptive("adaptive_max_pool2d", enums.PoolingMode.MAX, inp, oshp)


def _softmax_axis(ndim: int) -> int:
    return 0 if ndim in (0, 1, 3) else 1


def softmax(inp: Tensor, axis: int | None = None) -> Tensor:
    inp = as_tensor(inp)
    if inp.dtype.kind != "f":
        inp = inp.astype("float32")
    if axis is None:
        axis = _softmax_axis(inp.ndim)
    if not -inp.ndim <= axis < inp.ndim:
        raise op_error("softmax", f"axis {axis} is out of range for shape {inp.shape}")
    (out,) = apply(T.SoftmaxOp, [inp], label="softmax", axis=axis % inp.ndim)
    return out


def logsumexp(inp: Tensor, axis: int | Sequence[int], keepdims: bool = False) -> Tensor:
    inp = as_tensor(inp)
    axes = [axis] if isinstance(axis, int) else list(axis)
    norm = {_axis("logsumexp", a, inp.ndim) for a in axes}
    # subtracting the max keeps exp() from overflowing; it is added back after the log
    m = _max(inp, axes, keepdims=True)
    out = log(_sum(exp(inp - m), axes, keepdims=True)) + m
    return out if keepdims else reshape(out, tuple(s for i, s in enumerate(out.shape) if i not in norm))


def log_softmax(inp: Tensor, axis: int | None = None) -> Tensor:
    inp = as_tensor(inp)
    if inp.dtype.kind != "f":
        inp = inp.astype("float32")
    if axis is None:
        axis = _softmax_axis(inp.ndim)
    return inp - logsumexp(inp, axis, keepdims=True)


logsoftmax = log_softmax  # MegEngine's spelling of the same function


def logsigmoid(inp: Tensor) -> Tensor:
    """log(sigmoid(x)), computed without overflow (MegEngine's LOGSIGMOID mode)."""
    return _elemwise("LOGSIGMOID", as_tensor(inp), label="logsigmoid")


def prelu(inp: Tensor, weight: Tensor) -> Tensor:
    """max(x, 0) + weight * min(x, 0): ``weight`` holds one slope, or one per channel (axis 1)."""
    inp, weight = as_tensor(inp), as_tensor(weight, inp)
    if weight.size != 1 and inp.ndim >= 2:
        if weight.size != inp.shape[1]:
            raise op_error("prelu", f"weight has {weight.size} slopes for {inp.shape[1]} channels")
        weight = reshape(weight, (1, weight.size) + (1,) * (inp.ndim - 2))
    return maximum(inp, 0.0) + minimum(inp, 0.0) * weight


def leaky_relu(inp: Tensor, negative_slope: float = 0.01) -> Tensor:
    inp = as_tensor(inp)
    return maximum(inp, 0.0) + minimum(inp, 0.0) * negative_slope


def softplus(inp: Tensor) -> Tensor:
    return _elemwise("SOFTPLUS", as_tensor(inp), label="softplus")


def batch_norm(
    inp: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    *,
    training: bool = False,
    momentum: float = 0.9,
    eps: float = 1e-5,
    inplace: bool = True,
) -> Tensor:
    """Batch normalisation over axis 1. In training mode the batch statistics are used and the
    running statistics become ``running * momentum + batch * (1 - momentum)``: in place when
    ``inplace``, else returned as ``(out, new_mean, new_var)``, as MegEngine does. The result has
    the input's dtype (a float16 input is normalised in float32)."""
    inp = as_tensor(inp)
    if inp.ndim < 2:
        raise op_error("batch_norm", f"input must have a channel axis, got shape {inp.shape}")
    c = inp.shape[1]
    pshape = (1, c) + (1,) * (inp.ndim - 2)

    def param(t: Tensor | None, fill: float, name: str) -> Tensor:
        if t is None:
            return Tensor(np.full(pshape, fill, np.float32))
        t = as_tensor(t)
        if t.size != c:
            raise op_error("batch_norm", f"{name} has shape {t.shape}, expected {pshape} for {c} channels")
        return t

    w, b = param(weight, 1.0, "weight"), param(bias, 0.0, "bias")
    if not training:
        if running_mean is None or running_var is None:
            raise op_error("batch_norm", "inference mode needs running_mean and running_var")
        rm, rv = param(running_mean, 0.0, "running_mean"), param(running_var, 1.0, "running_var")
        (out,) = apply(T.BatchNormOp, [inp, w, b, rm, rv], label="batch_norm", epsilon=float(eps))
        return out
    note_training_only("batch_norm in training mode (batch statistics)")
    from compiler.core.tensor import amp as _amp

    if _amp._enabled and inp.dtype.kind == "f":
        inp = inp.astype(_amp._low_prec_dtype)  # MegEngine's autocast rule for BatchNorm's data
    out_dtype = inp.dtype
    if inp.dtype == np.float16:
        inp = inp.astype("float32")  # statistics in float32, the result in the input's dtype
    axes = [0, *range(2, inp.ndim)]
    batch_mean = mean(inp, axes, keepdims=True)
    centered = inp - batch_mean
    batch_var = mean(centered * centered, axes, keepdims=True)
    new_stats = None
    if running_mean is not None and running_var is not None:
        n = inp.size // c
        unbiased = batch_var.numpy() * (n / max(n - 1, 1))
        new_mean = running_mean.numpy() * momentum + batch_mean.numpy().reshape(running_mean.shape) * (
            1 - momentum
        )
        new_var = running_var.numpy() * momentum + unbiased.reshape(running_var.shape) * (1 - momentum)
        if inplace:
            running_mean._reset(new_mean)
            running_var._reset(new_var)
        else:
            new_stats = (
                Tensor(new_mean.astype(running_mean.dtype)),
                Tensor(new_var.astype(running_var.dtype)),
            )
    from compiler.functional.elemwise import sqrt

    out = centered / sqrt(batch_var + eps) * reshape(w, pshape) + reshape(b, pshape)
    if out.dtype != out_dtype:
        out = out.astype(out_dtype)
    # MegEngine: with running statistics and inplace=False, the updated statistics are returned
    return out if new_stats is None else (out, *new_stats)


def dropout(inp: Tensor, drop_prob: float, training: bool = True) -> Tensor:
    inp = as_tensor(inp)
    if not 0 <= drop_prob < 1:
        raise op_error("dropout", f"drop_prob must be in [0, 1), got {drop_prob}")
    if not training or drop_prob == 0:
        return inp
    from compiler.core import active_recorders
    from compiler.jit import Trace

    if any(isinstance(r, Trace) for r in active_recorders()):
        raise op_error("dropout", "dropout in training mode cannot be traced; call module.eval() first")
    from compiler.random import generator

    keep = (generator().random(inp.shape) >= drop_prob).astype(inp.dtype) / (1 - drop_prob)
    return inp * Tensor(keep.astype(inp.dtype))


def pad(
    src: Tensor, pad_width: Sequence[Sequence[int]], mode: str = "constant", constant_value: float = 0.0
) -> Tensor:
    src = as_tensor(src)
    widths = [tuple(int(v) for v in w) for w in pad_width]
    # like MegEngine, pairs given for only the leading axes leave the trailing axes unpadded
    widths += [(0, 0)] * (src.ndim - len(widths))
    if len(widths) != src.ndim or any(len(w) != 2 for w in widths):
        raise op_error(
            "pad", f"pad_width needs one (front, back) pair per axis of shape {src.shape}, got {pad_width}"
        )
    modes = {
        "constant": enums.PaddingMode.CONSTANT,
        "reflect": enums.PaddingMode.REFLECT,
        "edge": enums.PaddingMode.REPLICATE,
        "replicate": enums.PaddingMode.REPLICATE,
    }
    mode = mode.lower() if isinstance(mode, str) else mode  # MegEngine spells them "CONSTANT", ...
    if mode not in modes:
        raise op_error("pad", f"unknown mode {mode!r}; expected one of {sorted(modes)}")
    (out,) = apply(
        T.PaddingOp,
        [src],
        label="pad",
        front=tuple(w[0] for w in widths),
        back=tuple(w[1] for w in widths),
        value=float(constant_value),
        mode=modes[mode],
    )
    return out


from compiler.functional.vision import interpolate  # noqa: E402,F401,I001

# MegEngine's functional.nn star-imports functional.vision; warp_perspective is in its __all__
from compiler.functional.vision import (  # noqa: E402,F401,I001
    correlation,
    nms,
    roi_align,
    roi_pooling,
    warp_perspective,
)
from compiler.functional.vision import remap, warp_affine  # noqa: E402,F401,I001
from compiler.functional.loss import (  # noqa: E402,F401,I001
    binary_cross_entropy,
    cross_entropy,
    ctc_loss,
    hinge_loss,
    l1_loss,
    square_loss,
)


def pixel_shuffle(inp: Tensor, upscale_factor: int) -> Tensor:
    """``(..., C*r*r, H, W)`` to ``(..., C, H*r, W*r)``: channel ``c*r*r + i*r + j`` moves to
    pixel ``(h*r + i, w*r + j)`` of channel ``c``; a reshape, a transpose and a reshape."""
    from compiler.functional.tensor import transpose

    inp = as_tensor(inp)
    r = int(upscale_factor)
    if inp.ndim < 3 or r < 1 or inp.shape[-3] % (r * r):
        raise op_error(
            "pixel_shuffle", f"needs (..., C*{r}*{r}, H, W) and a positive factor, got shape {inp.shape}"
        )
    *lead, c, h, w = inp.shape
    n = int(np.prod(lead, dtype=np.int64))
    x = reshape(inp, (n, c // (r * r), r, r, h, w))
    x = transpose(x, (0, 1, 4, 2, 5, 3))
    return reshape(x, (*lead, c // (r * r), h * r, w * r))


# MegEngine 1.13's other nn ops, defined in their own modules (issue 32, second round)
from compiler.functional.math import normalize  # noqa: E402,I001
from compiler.functional.norms import general_norm, instance_norm, local_response_norm, sync_batch_norm  # noqa: E402,I001
from compiler.functional.windows import local_conv2d, sliding_window, sliding_window_transpose  # noqa: E402,I001

__all__ += [
    "general_norm",
    "instance_norm",
    "local_conv2d",
    "local_response_norm",
    "normalize",
    "sliding_window",
    "sliding_window_transpose",
    "sync_batch_norm",
]

from compiler.functional.attention import multi_head_attention  # noqa: E402,I001

__all__ += ["multi_head_attention"]
