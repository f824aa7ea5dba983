"""The ``.mge`` rows of Convolution3D and the image operators (WarpPerspectiveV2, ROIAlignV1,
ROIPooling, NMSKeep, CorrelationForward): their param tables (MegEngine 1.13's slot order and
defaults, spec A.4.4 tags) and how each is read into IR and written back.

MegEngine's own operators take a few parameters as input tensors (WarpPerspective's and
ROIPooling's output size): xmge reads those when they are constants, and writes them as int32
ImmutableTensors as MegEngine's tracer does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import backends.mge.schema as S
from backends.mge.lower_ops import EXECUTION_POLICY, attr_str
from backends.mge.read_context import define, emit_values, enum_of, fail, input_var, int_values, unsupported
from backends.mge.records import WOpr
from backends.mge.schema import ParamDef
from dialects import enums
from dialects import tensor as T

if TYPE_CHECKING:
    from backends.mge.container import RawOpr
    from backends.mge.lowering import Lowering
    from backends.mge.read_context import ReadContext

_AXES = ("d", "h", "w")

PARAM_DEFS: tuple[ParamDef, ...] = (
    ParamDef("ROIPooling", 12, (("mode", "I", 0), ("scale", "f", 1.0))),
    ParamDef(
        "WarpPerspective",
        13,
        (("imode", "I", 1), ("bmode", "I", 0), ("format", "I", 0), ("border_val", "f", 0.0)),
    ),  # fmt: skip
    ParamDef(
        "Convolution3D",
        41,
        (
            ("mode", "I", 0),
            *((f"pad_{a}", "I", 0) for a in _AXES),
            *((f"stride_{a}", "I", 1) for a in _AXES),
            *((f"dilate_{a}", "I", 1) for a in _AXES),
            ("sparse", "I", 0),
            ("data_type", "I", 0),
            ("format", "I", 0),
        ),
    ),
    ParamDef(
        "ROIAlign",
        48,
        (
            ("mode", "I", 0),
            ("format", "I", 0),
            ("spatial_scale", "f", 1.0),
            ("offset", "f", 0.0),
            ("pooled_height", "I", 1),
            ("pooled_width", "I", 1),
            ("sample_height", "I", 2),
            ("sample_width", "I", 2),
        ),
    ),
    # hand-written in MegEngine's mgb_cpp_opr.fbs (no pdef): schema defaults
    ParamDef("NMSKeep", 69, (("iou_thresh", "f", 0.0), ("max_output", "I", 0))),
    ParamDef(
        "Correlation",
        75,
        (
            ("format", "I", 0),
            ("kernel_size", "I", 1),
            ("max_displacement", "I", 1),
            ("stride1", "I", 1),
            ("stride2", "I", 1),
            ("pad_size", "I", 0),
            ("is_multiply", "?", True),
        ),
    ),
)


def register_params() -> None:
    """Add the tables above to ``schema.PARAMS`` (where the container, serialiser and verifier
    look every table up); a clash with a table declared elsewhere is a programming error."""
    for table in PARAM_DEFS:
        known = S.PARAMS.get(table.name) or S.PARAMS_BY_TAG.get(table.tag)
        if known is not None and known != table:
            raise TypeError(f"param.{table.name} (tag {table.tag}) clashes with {known}")
        S.PARAMS[table.name] = table
        S.PARAMS_BY_TAG[table.tag] = table


def _outputs(ctx: ReadContext, op: RawOpr, values: list[Any], n: int) -> None:
    for i, var in enumerate(values[:n]):
        define(ctx, op, i, var)


def _inputs(op: RawOpr, allowed: tuple[int, ...], names: str) -> None:
    if len(op.inputs) not in allowed:
        raise fail(op, f"takes {' or '.join(map(str, allowed))} inputs ({names}), has {len(op.inputs)}")


def _write(
    lw: Lowering, op: T.MgbOp, kind: str, ins: list[int], tables: list[tuple[str, dict[str, Any]]]
) -> None:
    """One operator whose outputs are the op's results (named ``name``, ``name:1``, ...)."""
    name = lw.var_name(op, kind)
    n = len(op.results)
    wopr = WOpr(kind, ins, n, tables, name=attr_str(op, "opr_name"))
    vids = lw.add(wopr, [name] + [f"{name}:{i}" for i in range(1, n)])
    for res, vid in zip(op.results, vids, strict=True):
        lw.ids[res] = vid


# ----------------------------------------------------------------------------------------------
# Convolution3D


def read_convolution3d(ctx: ReadContext, op: RawOpr) -> None:
    _inputs(op, (2,), "src, filter")
    p = op.param("Convolution3D")
    if enum_of(op, enums.Conv3DFormat, p["format"], "format") != enums.Conv3DFormat.NCDHW:
        raise unsupported(op, "Convolution3D in format NDHWC is not supported by xmge (NCDHW only)")
    if enum_of(op, enums.Conv3DDataType, p["data_type"], "data_type") != enums.Conv3DDataType.FLOAT:
        raise unsupported(op, "Convolution3D with data_type FLOAT_IO16xC32 is not supported by xmge")
    params = {
        "stride": tuple(p[f"stride_{a}"] for a in _AXES),
        "padding": tuple(p[f"pad_{a}"] for a in _AXES),
        "dilation": tuple(p[f"dilate_{a}"] for a in _AXES),
        "mode": enum_of(op, enums.ConvMode, p["mode"], "mode"),
        "sparse": enum_of(op, enums.ConvSparse, p["sparse"], "sparse"),
    }
    ins = [input_var(ctx, op, 0), input_var(ctx, op, 1)]
    _outputs(ctx, op, emit_values(ctx, op, T.Convolution3DOp, ins, **params), 1)


def lower_convolution3d(lw: Lowering, op: T.Convolution3DOp, p: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"mode": enums.number(p["mode"]), "sparse": enums.number(p["sparse"]),
                              "data_type": 0, "format": 0}  # fmt: skip
    for key, field in (("padding", "pad"), ("stride", "stride"), ("dilation", "dilate")):
        fields.update({f"{field}_{a}": int(v) for a, v in zip(_AXES, p[key], strict=True)})
    lw.simple(op, "Convolution3D", [("Convolution3D", fields), EXECUTION_POLICY])


# ----------------------------------------------------------------------------------------------
# WarpPerspective


def read_warp_perspective(ctx: ReadContext, op: RawOpr) -> None:
    """(src, mat, [mat_idx,] out_shape); out_shape must be a constant."""
    _inputs(op, (3, 4), "src, mat, [mat_idx,] out_shape")
    p = op.param("WarpPerspective")
    fmt = enum_of(op, enums.Format, p["format"], "format")
    if fmt != enums.Format.NCHW:
        raise unsupported(op, f"WarpPerspective in format {fmt.name} is not supported by xmge (NCHW only)")
    imode = enum_of(op, enums.InterpolationMode, p["imode"], "imode")
    if imode != enums.InterpolationMode.LINEAR:
        raise unsupported(
            op, f"WarpPerspective with interpolation mode {imode.name} is not supported by xmge"
        )
    bmode = enum_of(op, enums.BorderMode, p["bmode"], "bmode")
    out = int_values(op, input_var(ctx, op, len(op.inputs) - 1), "the output size")
    if len(out) != 2:
        raise fail(op, f"output size must have 2 values, got {out}")
    ins = [input_var(ctx, op, k) for k in range(len(op.inputs) - 1)]
    values = emit_values(ctx, op, T.WarpPerspectiveOp, ins, out_shape=tuple(out), imode=imode, bmode=bmode,
                         border_val=float(p["border_val"]))  # fmt: skip
    _outputs(ctx, op, values, 1)


def lower_warp_perspective(lw: Lowering, op: T.WarpPerspectiveOp, p: dict[str, Any]) -> None:
    fields = {"imode": enums.number(p["imode"]), "bmode": enums.number(p["bmode"]),
              "format": enums.number(p["format"]), "border_val": float(p["border_val"])}  # fmt: skip
    ins = [lw.ids[v] for v in op.operands] + [lw.int_const(p["out_shape"])]
    lw.simple(op, "WarpPerspective", [("WarpPerspective", fields)], ins)


# ----------------------------------------------------------------------------------------------
# ROIAlign / ROIPooling


def read_roi_align(ctx: ReadContext, op: RawOpr) -> None:
    _inputs(op, (2,), "src, rois")
    p = op.param("ROIAlign")
    fmt = enum_of(op, enums.Format, p["format"], "format")
    if fmt != enums.Format.NCHW:
        raise unsupported(op, f"ROIAlign in format {fmt.name} is not supported by xmge (NCHW only)")
    params = {
        "mode": enum_of(op, enums.ROIMode, p["mode"], "mode"),
        "spatial_scale": float(p["spatial_scale"]),
        "offset": float(p["offset"]),
        "pooled_shape": (p["pooled_height"], p["pooled_width"]),
        "sample_shape": (p["sample_height"], p["sample_width"]),
    }
    ins = [input_var(ctx, op, 0), input_var(ctx, op, 1)]
    _outputs(ctx, op, emit_values(ctx, op, T.ROIAlignOp, ins, **params), 2)


def lower_roi_align(lw: Lowering, op: T.ROIAlignOp, p: dict[str, Any]) -> None:
    (ph, pw), (sh, sw) = p["pooled_shape"], p["sample_shape"]
    fields = {"mode": enums.number(p["mode"]), "format": 0, "spatial_scale": float(p["spatial_scale"]),
              "offset": float(p["offset"]), "pooled_height": ph, "pooled_width": pw,
              "sample_height": sh, "sample_width": sw}  # fmt: skip
    _write(lw, op, "ROIAlign", [lw.ids[v] for v in op.operands], [("ROIAlign", fields)])


def read_roi_pooling(ctx: ReadContext, op: RawOpr) -> None:
    """(src, rois, out_shape); out_shape must be a constant."""
    _inputs(op, (3,), "src, rois, out_shape")
    p = op.param("ROIPooling")
    out = int_values(op, input_var(ctx, op, 2), "the output size")
    if len(out) != 2:
        raise fail(op, f"output size must have 2 values, got {out}")
    params = {"mode": enum_of(op, enums.ROIMode, p["mode"], "mode"), "scale": float(p["scale"]),
              "out_shape": tuple(out)}  # fmt: skip
    ins = [input_var(ctx, op, 0), input_var(ctx, op, 1)]
    _outputs(ctx, op, emit_values(ctx, op, T.ROIPoolingOp, ins, **params), 2)


def lower_roi_pooling(lw: Lowering, op: T.ROIPoolingOp, p: dict[str, Any]) -> None:
    fields = {"mode": enums.number(p["mode"]), "scale": float(p["scale"])}
    ins = [lw.ids[v] for v in op.operands] + [lw.int_const(p["out_shape"])]
    _write(lw, op, "ROIPooling", ins, [("ROIPooling", fields)])


# ----------------------------------------------------------------------------------------------
# NMSKeep / Correlation


def read_nms_keep(ctx: ReadContext, op: RawOpr) -> None:
    _inputs(op, (1,), "boxes")
    p = op.param("NMSKeep")
    values = emit_values(ctx, op, T.NMSKeepOp, [input_var(ctx, op, 0)], iou_thresh=float(p["iou_thresh"]),
                         max_output=int(p["max_output"]))  # fmt: skip
    _outputs(ctx, op, values, 2)


def lower_nms_keep(lw: Lowering, op: T.NMSKeepOp, p: dict[str, Any]) -> None:
    fields = {"iou_thresh": float(p["iou_thresh"]), "max_output": int(p["max_output"])}
    _write(lw, op, "NMSKeep", [lw.ids[op.operands[0]]], [("NMSKeep", fields)])


_CORRELATION = ("kernel_size", "max_displacement", "stride1", "stride2", "pad_size")


def read_correlation(ctx: ReadContext, op: RawOpr) -> None:
    _inputs(op, (2,), "data1, data2")
    p = op.param("Correlation")
    fmt = enum_of(op, enums.FormatV0, p["format"], "format")
    if fmt != enums.FormatV0.NCHW:
        raise unsupported(op, f"Correlation in format {fmt.name} is not supported by xmge (NCHW only)")
    params: dict[str, Any] = {k: int(p[k]) for k in _CORRELATION}
    params["is_multiply"] = bool(p["is_multiply"])
    ins = [input_var(ctx, op, 0), input_var(ctx, op, 1)]
    _outputs(ctx, op, emit_values(ctx, op, T.CorrelationOp, ins, **params), 1)


def lower_correlation(lw: Lowering, op: T.CorrelationOp, p: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"format": 0, **{k: int(p[k]) for k in _CORRELATION}}
    fields["is_multiply"] = bool(p["is_multiply"])
    lw.simple(op, "Correlation", [("Correlation", fields)])


register_params()
