"""The ``.mge`` rows of WarpAffine (WarpAffineV2), Remap (RemapV1) and CvtColor: their param tables
(MegEngine 1.13's slot order and defaults, spec A.4.4 tags) and how each is read into IR and
written back. WarpAffine's output size is an input tensor in MegEngine: read when it is a constant,
written as an int32 ImmutableTensor as MegEngine's tracer does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import backends.mge.schema as S
from backends.mge.lower_ops import EXECUTION_POLICY, _convolution_param
from backends.mge.read_context import define, emit_values, enum_of, fail, input_var, int_values, unsupported
from backends.mge.read_ops import _conv_params
from backends.mge.schema import ParamDef
from dialects import enums
from dialects import tensor as T

if TYPE_CHECKING:
    from backends.mge.container import RawOpr
    from backends.mge.lowering import Lowering
    from backends.mge.read_context import ReadContext

PARAM_DEFS: tuple[ParamDef, ...] = (
    ParamDef("CvtColor", 37, (("mode", "I", 0),)),
    ParamDef(
        "WarpAffine",
        38,
        (("imode", "I", 1), ("border_mode", "I", 0), ("border_val", "f", 0.0), ("format", "I", 1)),
    ),  # fmt: skip
    ParamDef(
        "DeformablePSROIPooling",
        49,
        (
            ("no_trans", "?", True),
            ("spatial_scale", "f", 1.0),
            ("trans_std", "f", 1.0),
            ("pooled_h", "I", 1),
            ("pooled_w", "I", 1),
            ("part_size", "I", 1),
            ("sample_per_part", "I", 1),
        ),
    ),  # fmt: skip
    ParamDef(
        "Remap", 68, (("imode", "I", 1), ("border_type", "I", 0), ("format", "I", 1), ("scalar", "f", 0.0))
    ),
)


def register_params() -> None:
    """Add the tables above to ``schema.PARAMS``; a clash with a table declared elsewhere is a
    programming error."""
    for table in PARAM_DEFS:
        known = S.PARAMS.get(table.name) or S.PARAMS_BY_TAG.get(table.tag)
        if known is not None and known != table:
            raise TypeError(f"param.{table.name} (tag {table.tag}) clashes with {known}")
        S.PARAMS[table.name] = table
        S.PARAMS_BY_TAG[table.tag] = table


def _inputs(op: RawOpr, n: int, names: str) -> None:
    if len(op.inputs) != n:
        raise fail(op, f"takes {n} inputs ({names}), has {len(op.inputs)}")


def _one(ctx: ReadContext, op: RawOpr, cls: type[T.MgbOp], ins: list[Any], **params: Any) -> None:
    define(ctx, op, 0, emit_values(ctx, op, cls, ins, **params)[0])


def read_warp_affine(ctx: ReadContext, op: RawOpr) -> None:
    """(src, mat, out_shape); out_shape must be a constant."""
    _inputs(op, 3, "src, mat, out_shape")
    p = op.param("WarpAffine")
    fmt = enum_of(op, enums.Format, p["format"], "format")
    if fmt not in (enums.Format.NCHW, enums.Format.NHWC):
        raise unsupported(op, f"WarpAffine in format {fmt.name} is not supported by xmge (NHWC, NCHW only)")
    out = int_values(op, input_var(ctx, op, 2), "the output size")
    if len(out) != 2:
        raise fail(op, f"output size must have 2 values, got {out}")
    _one(ctx, op, T.WarpAffineOp, [input_var(ctx, op, 0), input_var(ctx, op, 1)], out_shape=tuple(out),
         imode=enum_of(op, enums.InterpolationMode, p["imode"], "imode"),
         bmode=enum_of(op, enums.BorderMode, p["border_mode"], "border_mode"),
         border_val=float(p["border_val"]), format=fmt)  # fmt: skip


def lower_warp_affine(lw: Lowering, op: T.WarpAffineOp, p: dict[str, Any]) -> None:
    fields = {"imode": enums.number(p["imode"]), "border_mode": enums.number(p["bmode"]),
              "border_val": float(p["border_val"]), "format": enums.number(p["format"])}  # fmt: skip
    ins = [lw.ids[v] for v in op.operands] + [lw.int_const(p["out_shape"])]
    lw.simple(op, "WarpAffine", [("WarpAffine", fields)], ins)


def read_remap(ctx: ReadContext, op: RawOpr) -> None:
    _inputs(op, 2, "src, map_xy")
    p = op.param("Remap")
    fmt = enum_of(op, enums.Format, p["format"], "format")
    if fmt != enums.Format.NCHW:
        raise unsupported(op, f"Remap in format {fmt.name} is not supported by xmge (NCHW only)")
    _one(ctx, op, T.RemapOp, [input_var(ctx, op, 0), input_var(ctx, op, 1)],
         imode=enum_of(op, enums.InterpolationMode, p["imode"], "imode"),
         bmode=enum_of(op, enums.BorderMode, p["border_type"], "border_type"),
         scalar=float(p["scalar"]))  # fmt: skip


def lower_remap(lw: Lowering, op: T.RemapOp, p: dict[str, Any]) -> None:
    fields = {"imode": enums.number(p["imode"]), "border_type": enums.number(p["bmode"]),
              "format": enums.number(p["format"]), "scalar": float(p["scalar"])}  # fmt: skip
    lw.simple(op, "Remap", [("Remap", fields)])


def read_cvt_color(ctx: ReadContext, op: RawOpr) -> None:
    _inputs(op, 1, "src")
    mode = enum_of(op, enums.CvtColorMode, op.param("CvtColor")["mode"], "mode")
    if mode not in T.CVT_COLOR_CHANNELS:
        raise unsupported(op, f"CvtColor mode {mode.name} is not supported by xmge")
    _one(ctx, op, T.CvtColorOp, [input_var(ctx, op, 0)], mode=mode)


def lower_cvt_color(lw: Lowering, op: T.CvtColorOp, p: dict[str, Any]) -> None:
    lw.simple(op, "CvtColor", [("CvtColor", {"mode": enums.number(p["mode"])})])


def _nchw_conv_params(op: RawOpr, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """``keys`` of the Convolution param as the convolution reader reads them; ``name`` is read in
    format NCHW only."""
    p = op.param("Convolution")
    if enum_of(op, enums.Format, p["format"], "format") != enums.Format.NCHW:
        raise unsupported(op, f"{name} is read in format NCHW only")
    params = _conv_params(op, p)
    return {k: params[k] for k in keys}


def read_deformable_conv(ctx: ReadContext, op: RawOpr) -> None:
    """(src, filter, offset, mask), param Convolution (NCHW)."""
    _inputs(op, 4, "src, filter, offset, mask")
    params = _nchw_conv_params(op, "DeformableConv", ("stride", "padding", "dilation", "mode", "sparse"))
    _one(ctx, op, T.DeformableConvOp, [input_var(ctx, op, k) for k in range(4)], **params)


def lower_deformable_conv(lw: Lowering, op: T.DeformableConvOp, p: dict[str, Any]) -> None:
    conv = _convolution_param({**p, "compute_mode": enums.ComputeMode.DEFAULT}, enums.Format.NCHW)
    lw.simple(op, "DeformableConv", [("Convolution", conv), EXECUTION_POLICY])


def read_region_restricted_conv(ctx: ReadContext, op: RawOpr) -> None:
    """(src, filter, rin, rout), param Convolution (NCHW, sparse GROUP)."""
    _inputs(op, 4, "src, filter, rin, rout")
    params = _nchw_conv_params(op, "RegionRestrictedConvolution", ("stride", "padding", "dilation", "mode"))
    _one(ctx, op, T.RegionRestrictedConvOp, [input_var(ctx, op, k) for k in range(4)], **params)


def lower_region_restricted_conv(lw: Lowering, op: T.RegionRestrictedConvOp, p: dict[str, Any]) -> None:
    fields = {**p, "sparse": enums.ConvSparse.GROUP, "compute_mode": enums.ComputeMode.DEFAULT}
    conv = _convolution_param(fields, enums.Format.NCHW)
    lw.simple(op, "RegionRestrictedConvolution", [("Convolution", conv)])


_PSROI_INTS = ("pooled_h", "pooled_w", "part_size", "sample_per_part")


def read_deformable_psroi_pooling(ctx: ReadContext, op: RawOpr) -> None:
    """(src, rois, trans) -> (output, count)."""
    _inputs(op, 3, "src, rois, trans")
    p = op.param("DeformablePSROIPooling")
    params: dict[str, Any] = {k: int(p[k]) for k in _PSROI_INTS}
    params.update(no_trans=bool(p["no_trans"]), spatial_scale=float(p["spatial_scale"]),
                  trans_std=float(p["trans_std"]))  # fmt: skip
    ins = [input_var(ctx, op, k) for k in range(3)]
    values = emit_values(ctx, op, T.DeformablePSROIPoolingOp, ins, **params)
    for i, var in enumerate(values[:2]):
        define(ctx, op, i, var)


def lower_deformable_psroi_pooling(lw: Lowering, op: T.DeformablePSROIPoolingOp, p: dict[str, Any]) -> None:
    from backends.mge.vision_ops import _write

    fields: dict[str, Any] = {k: int(p[k]) for k in _PSROI_INTS}
    fields.update(no_trans=bool(p["no_trans"]), spatial_scale=float(p["spatial_scale"]),
                  trans_std=float(p["trans_std"]))  # fmt: skip
    ins = [lw.ids[v] for v in op.operands]
    _write(lw, op, "DeformablePSROIPooling", ins, [("DeformablePSROIPooling", fields)])


register_params()
