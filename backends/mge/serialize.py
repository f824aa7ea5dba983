""":class:`~backends.mge.records.LoweredGraph` -> ``.mge`` bytes: FBS v2 (``mgv2``, the default) and
FBS v1 (``MGBC`` header, tensor blobs, then the ``mgb1`` FlatBuffer), with ``flatbuffers.Builder``.

Type names and ids come from the operator's row of :data:`backends.mge.oprs.OPRS`, param tables
from :data:`backends.mge.schema.PARAMS`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import flatbuffers
import xxhash

import backends.mge.fbs_schema as F
import backends.mge.schema as S
from backends.mge.dtypes import RawDType
from backends.mge.fbs import TableWriter, write_bytes, write_offsets, write_structs, write_vector
from backends.mge.fbs_schema import COMMON, V1, V2, TableDef
from backends.mge.oprs import BY_KIND
from backends.mge.records import LoweredGraph, Metadata, WOpr, WTensor

COMP_NODE = "xpux:0"  # what the tracer writes: "any device"


def _write_dtype(b: flatbuffers.Builder, dt: RawDType) -> int:
    q = None
    quant, dtype = COMMON.LinearQuantizationParam, COMMON.DType
    if dt.scale is not None:
        tw = TableWriter(b).scalar(quant.scale, "f", float(dt.scale))
        if dt.zero_point is not None:
            tw.scalar(quant.zero_point, "B", int(dt.zero_point))
        q = tw.finish()
    tw = TableWriter(b).scalar(dtype.type, "b", S.DTYPE_FILE_ENUM.index(dt.name))
    if q is not None:
        tw.scalar(dtype.param_type, "B", F.LINEAR_QUANTIZATION_PARAM).offset(dtype.param, q)
    return tw.finish()


def _write_param(b: flatbuffers.Builder, kind: str, values: dict[str, Any]) -> tuple[int, int]:
    pdef = S.PARAMS[kind]
    if kind == "DType":
        return pdef.tag, _write_dtype(b, values["dtype"])
    offsets: dict[int, int] = {}
    for slot, (name, fmt, _default) in enumerate(pdef.fields):
        if fmt == "vec_i":
            offsets[slot] = write_vector(b, "i", list(values[name]))
        elif fmt == "vec_axisdesc":
            packed = [struct.pack("<b3xi", m, a) for m, a in values[name]]
            offsets[slot] = write_structs(b, S.AXIS_DESC_SIZE, 4, packed)
        elif fmt == "vec_indexdesc":
            packed = [struct.pack("<b4B", it[0], *(int(f) for f in it[1:])) for it in values[name]]
            offsets[slot] = write_structs(b, S.INDEX_DESC_SIZE, 1, packed)
    tw = TableWriter(b)
    for slot, (name, fmt, _default) in enumerate(pdef.fields):
        if slot in offsets:
            tw.offset(slot, offsets[slot])
        else:
            tw.scalar(slot, fmt, values[name])
    return pdef.tag, tw.finish()


def _comp_node(b: flatbuffers.Builder, cache: dict[str, int]) -> int:
    # one shared CompNode table: every tensor names the same device
    if "cn" not in cache:
        s = b.CreateString(COMP_NODE)
        cache["cn"] = TableWriter(b).offset(COMMON.CompNode.logical_locator, s).finish()
    return cache["cn"]


def _params_fields(
    b: flatbuffers.Builder, opr: WOpr
) -> tuple[tuple[int, int] | None, int | None, int | None]:
    written = [_write_param(b, k, v) for k, v in opr.params]
    first = written[0] if written else None
    add_types = add_vals = None
    if len(written) > 1:
        add_types = write_vector(b, "B", [t for t, _ in written[1:]])
        add_vals = write_offsets(b, [o for _, o in written[1:]])
    return first, add_types, add_vals


def _params_slots(
    tw: TableWriter,
    operator: TableDef,
    first: tuple[int, int] | None,
    add_types: int | None,
    add_vals: int | None,
) -> None:
    """The operator's param union and its additional params (``operator``: its version's schema)."""
    if first is not None:
        tw.scalar(operator.param_type, "B", first[0]).offset(operator.param, first[1])
    tw.offset(operator.additional_params_type, add_types).offset(operator.additional_params, add_vals)


@dataclass(frozen=True)
class Naming:
    """What a graph keeps besides its computation (``trace.dump``'s ``keep_*`` keywords): var names
    (0 none, 1 the outputs', 2 all), operator names and operator priorities."""

    keep_var_name: int = 1
    keep_opr_name: bool = False
    keep_opr_priority: bool = False


def _tensor_head(b: flatbuffers.Builder, t: WTensor, cache: dict[str, int], tensor: TableDef) -> TableWriter:
    """A Tensor table (``tensor``: its version's schema) with the fields both versions start it
    with: name, shape, comp node, dtype."""
    shape = write_vector(b, "I", list(t.shape))
    name = b.CreateString(t.name) if t.name is not None else None
    dt = _write_dtype(b, t.dtype)
    cn = _comp_node(b, cache)
    tw = TableWriter(b).offset(tensor.name, name).offset(tensor.shape, shape)
    return tw.offset(tensor.comp_node, cn).offset(tensor.dtype, dt)


def _opr_name(b: flatbuffers.Builder, g: LoweredGraph, opr: WOpr, naming: Naming) -> int | None:
    """The operator's name (its first output's when it has none), where the names are kept."""
    return b.CreateString(opr.name or g.var_names[opr.outputs[0]]) if naming.keep_opr_name else None


def serialize_v2(
    g: LoweredGraph, meta: Metadata, naming: Naming = Naming(), *, model_version: int = 2
) -> bytes:
    b = flatbuffers.Builder(1024 + sum(len(t.data or b"") for o in g.oprs for t in o.tensors))
    cache: dict[str, int] = {}
    default_format = TableWriter(b).finish()  # DefaultTensorFormat: an empty table
    opr_offsets = []
    for opr in g.oprs:
        otype = BY_KIND[opr.kind]
        type_name, type_id, version = otype.v2_id(model_version)
        tensor_offs = []
        for t in opr.tensors:
            data = write_bytes(b, t.data) if t.data is not None else None
            tw = _tensor_head(b, t, cache, V2.Tensor)
            if t.image2d_axis is None:
                tw.scalar(V2.Tensor.format_type, "B", F.DEFAULT_TENSOR_FORMAT)
                tw.offset(V2.Tensor.format, default_format)
            else:
                align_axis = V2.Image2DPackedTensorFormat.align_axis
                image = TableWriter(b).scalar(align_axis, "B", t.image2d_axis).finish()
                tw.scalar(V2.Tensor.format_type, "B", F.IMAGE2D_TENSOR_FORMAT).offset(V2.Tensor.format, image)
            tw.offset(V2.Tensor.data, data)
            tensor_offs.append(tw.finish())
        tensors = write_offsets(b, tensor_offs) if tensor_offs else None
        first, add_types, add_vals = _params_fields(b, opr)
        inputs = write_vector(b, "I", opr.inputs)
        outputs = write_vector(b, "I", opr.outputs)
        tname = b.CreateString(type_name)
        oname = _opr_name(b, g, opr, naming)
        odt = _write_dtype(b, opr.output_dtype) if opr.output_dtype is not None else None
        o = V2.Operator
        tw = TableWriter(b).offset(o.type, tname).scalar(o.type_id, "Q", type_id).offset(o.name, oname)
        _params_slots(tw, o, first, add_types, add_vals)
        tw.offset(o.inputs, inputs).offset(o.outputs, outputs)
        tw.offset(o.output_dtype, odt).offset(o.tensors, tensors).scalar(o.opr_version, "I", version)
        if naming.keep_opr_priority:
            tw.scalar(o.priority, "i", opr.priority)
        opr_offsets.append(tw.finish())
    oprs = write_offsets(b, opr_offsets)
    middle = None
    if naming.keep_var_name >= 1:
        mts = []
        for name in g.var_names:
            s = b.CreateString(name)
            mts.append(TableWriter(b).offset(V2.MiddleTensor.name, s).finish())
        middle = write_offsets(b, mts)
    ov = V2.OutputVar
    outs = write_offsets(
        b,
        [
            TableWriter(b).scalar(ov.compact_id, "I", v).scalar(ov.original_id, "I", v).finish()
            for v in g.outputs
        ],
    )
    alias = write_offsets(b, [])
    md = _write_metadata(b, meta, V2.Metadata)
    m = V2.Model
    root = (
        TableWriter(b)
        .scalar(m.mge_version, "I", S.MGB_VERSION)
        .scalar(m.model_version, "I", model_version)
        .offset(m.oprs, oprs)
        .offset(m.middle_tensors, middle)
        .offset(m.output_vars_idx, outs)
        .offset(m.output_alias, alias)
        .scalar(m.nr_shared_tensor, "I", _nr_shared_tensors(g))
        .offset(m.metadata, md)
        .finish()
    )
    b.FinishSizePrefixed(root, b"mgv2")
    return bytes(b.Output())


def _nr_shared_tensors(g: LoweredGraph) -> int:
    """VALUE_SHARED tensors: those of the (WithFormat) holders."""
    holders = ("MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder")
    return sum(len(o.tensors) for o in g.oprs if o.kind in holders)


def _write_metadata(b: flatbuffers.Builder, meta: Metadata, metadata: TableDef) -> int:
    """The Metadata table (``metadata``: its version's schema; V1 and V2 swap the slots of
    optimize_options and user_info, A.8)."""
    # a FlatBuffers string: the verifier insists on the terminating NUL (pickle bytes are not UTF-8,
    # MegEngine stores them raw all the same)
    ui = b.CreateString(bytes(meta.user_info))
    tw = TableWriter(b).scalar(metadata.is_valid, "?", meta.is_valid)
    tw.scalar(metadata.graph_modified, "?", meta.graph_modified)
    tw.scalar(metadata.optimize_options, "Q", meta.optimize_options).offset(metadata.user_info, ui)
    return tw.finish()


def serialize_v1(g: LoweredGraph, meta: Metadata, naming: Naming = Naming()) -> bytes:
    b = flatbuffers.Builder(1024)
    cache: dict[str, int] = {}
    blobs: list[bytes] = []
    out_set = set(g.outputs)
    opr_offsets = []
    for opr in g.oprs:
        otype = BY_KIND[opr.kind]
        tensor_offs = []
        for t in opr.tensors:
            tw = _tensor_head(b, t, cache, V1.Tensor)
            tw.scalar(V1.Tensor.data_size, "I", len(t.data or b"")).scalar(V1.Tensor.offset, "I", 0)
            tensor_offs.append(tw.finish())
            if t.data:
                blobs.append(t.data)
        tensors = write_offsets(b, tensor_offs) if tensor_offs else None
        first, add_types, add_vals = _params_fields(b, opr)
        inputs = write_vector(b, "I", opr.inputs)
        out_names = None
        if naming.keep_var_name >= 2 or (naming.keep_var_name == 1 and out_set.intersection(opr.outputs)):
            out_names = write_offsets(b, [b.CreateString(g.var_names[v]) for v in opr.outputs])
        oname = _opr_name(b, g, opr, naming)
        odt = _write_dtype(b, opr.output_dtype) if opr.output_dtype is not None else None
        o = V1.Operator
        tw = TableWriter(b).scalar(o.type_id, "Q", otype.persist_id)
        _params_slots(tw, o, first, add_types, add_vals)
        tw.offset(o.inputs, inputs).offset(o.output_name, out_names)
        tw.offset(o.output_dtype, odt).offset(o.tensors, tensors)
        if naming.keep_opr_priority:
            tw.scalar(o.priority, "i", opr.priority)
        tw.offset(o.name, oname)
        opr_offsets.append(tw.finish())
    oprs = write_offsets(b, opr_offsets)
    size, align = V1.structs["OutputVar"]
    outs = write_structs(b, size, align, [struct.pack("<II", v, v) for v in g.outputs])
    md = _write_metadata(b, meta, V1.Metadata)
    # The graph hash only has to be non-zero and stable; hash what has been built so far.
    graph_hash = xxhash.xxh64_intdigest(bytes(b.Bytes[b.Head() :]), S.GRAPH_HASH_SEED) or 1
    gr = V1.Graph
    root = (
        TableWriter(b)
        .scalar(gr.mgb_version, "I", S.MGB_VERSION)
        .scalar(gr.hash, "Q", graph_hash)
        .scalar(gr.nr_shared_tensor, "I", 0)
        .offset(gr.oprs, oprs)
        .offset(gr.output_vars_idx, outs)
        .offset(gr.metadata, md)
        .finish()
    )
    # Size-prefixed like MegEngine's dumper: the v1 loader verifies the buffer *including* its
    # size word (VerifySizePrefixedGraphBuffer), so 8-byte fields align relative to that word.
    b.FinishSizePrefixed(root, b"mgb1")
    fbs = bytes(b.Output())
    blob = b"".join(blobs)
    header = struct.pack("<I8sIQ", 0x4342474D, b"\0" * 8, 0, len(blob))
    return header + blob + fbs
