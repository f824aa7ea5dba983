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

import backends.mge.schema as S
from backends.mge.dtypes import RawDType
from backends.mge.fbs import TableWriter, write_bytes, write_offsets, write_structs, write_vector
from backends.mge.oprs import BY_KIND
from backends.mge.records import LoweredGraph, Metadata, WOpr, WTensor

COMP_NODE = "xpux:0"  # what the tracer writes: "any device"


def _write_dtype(b: flatbuffers.Builder, dt: RawDType) -> int:
    q = None
    if dt.scale is not None:
        tw = TableWriter(b).scalar(0, "f", float(dt.scale))
        if dt.zero_point is not None:
            tw.scalar(1, "B", int(dt.zero_point))
        q = tw.finish()
    tw = TableWriter(b).scalar(0, "b", S.DTYPE_FILE_ENUM.index(dt.name))
    if q is not None:
        tw.scalar(1, "B", S.LINEAR_QUANTIZATION_PARAM).offset(2, q)
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
        cache["cn"] = TableWriter(b).offset(0, s).finish()
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


@dataclass(frozen=True)
class Naming:
    """What a graph keeps besides its computation (``trace.dump``'s ``keep_*`` keywords): var names
    (0 none, 1 the outputs', 2 all), operator names and operator priorities."""

    keep_var_name: int = 1
    keep_opr_name: bool = False
    keep_opr_priority: bool = False


def _tensor_head(b: flatbuffers.Builder, t: WTensor, cache: dict[str, int]) -> TableWriter:
    """A Tensor table with the slots both versions start it with: name, shape, comp node, dtype."""
    shape = write_vector(b, "I", list(t.shape))
    name = b.CreateString(t.name) if t.name is not None else None
    dt = _write_dtype(b, t.dtype)
    cn = _comp_node(b, cache)
    return TableWriter(b).offset(0, name).offset(1, shape).offset(2, cn).offset(3, dt)


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
            tw = _tensor_head(b, t, cache)
            if t.image2d_axis is None:
                tw.scalar(4, "B", S.DEFAULT_TENSOR_FORMAT).offset(5, default_format)
            else:
                image = TableWriter(b).scalar(0, "B", t.image2d_axis).finish()
                tw.scalar(4, "B", S.IMAGE2D_TENSOR_FORMAT).offset(5, image)
            tw.offset(6, data)
            tensor_offs.append(tw.finish())
        tensors = write_offsets(b, tensor_offs) if tensor_offs else None
        first, add_types, add_vals = _params_fields(b, opr)
        inputs = write_vector(b, "I", opr.inputs)
        outputs = write_vector(b, "I", opr.outputs)
        tname = b.CreateString(type_name)
        oname = _opr_name(b, g, opr, naming)
        odt = _write_dtype(b, opr.output_dtype) if opr.output_dtype is not None else None
        tw = TableWriter(b).offset(0, tname).scalar(1, "Q", type_id).offset(2, oname)
        if first is not None:
            tw.scalar(3, "B", first[0]).offset(4, first[1])
        tw.offset(5, add_types).offset(6, add_vals).offset(7, inputs).offset(8, outputs)
        tw.offset(10, odt).offset(11, tensors).scalar(12, "I", version)
        if naming.keep_opr_priority:
            tw.scalar(13, "i", opr.priority)
        opr_offsets.append(tw.finish())
    oprs = write_offsets(b, opr_offsets)
    middle = None
    if naming.keep_var_name >= 1:
        mts = []
        for name in g.var_names:
            s = b.CreateString(name)
            mts.append(TableWriter(b).offset(0, s).finish())
        middle = write_offsets(b, mts)
    outs = write_offsets(b, [TableWriter(b).scalar(0, "I", v).scalar(1, "I", v).finish() for v in g.outputs])
    alias = write_offsets(b, [])
    md = _write_metadata(b, meta, v2=True)
    root = (
        TableWriter(b)
        .scalar(0, "I", S.MGB_VERSION)
        .scalar(1, "I", model_version)
        .offset(2, oprs)
        .offset(3, middle)
        .offset(4, outs)
        .offset(5, alias)
        .scalar(6, "I", _nr_shared_tensors(g))
        .offset(7, md)
        .finish()
    )
    b.FinishSizePrefixed(root, b"mgv2")
    return bytes(b.Output())


def _nr_shared_tensors(g: LoweredGraph) -> int:
    """VALUE_SHARED tensors: those of the (WithFormat) holders."""
    holders = ("MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder")
    return sum(len(o.tensors) for o in g.oprs if o.kind in holders)


def _write_metadata(b: flatbuffers.Builder, meta: Metadata, v2: bool) -> int:
    # a FlatBuffers string: the verifier insists on the terminating NUL (pickle bytes are not UTF-8,
    # MegEngine stores them raw all the same)
    ui = b.CreateString(bytes(meta.user_info))
    tw = TableWriter(b).scalar(0, "?", meta.is_valid).scalar(1, "?", meta.graph_modified)
    if v2:
        tw.scalar(2, "Q", meta.optimize_options).offset(3, ui)
    else:
        tw.offset(2, ui).scalar(3, "Q", meta.optimize_options)
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
            tw = _tensor_head(b, t, cache).scalar(4, "I", len(t.data or b"")).scalar(5, "I", 0)
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
        tw = TableWriter(b).scalar(0, "Q", otype.persist_id)
        if first is not None:
            tw.scalar(1, "B", first[0]).offset(2, first[1])
        tw.offset(3, inputs).offset(5, out_names).offset(6, odt).offset(7, tensors)
        if naming.keep_opr_priority:
            tw.scalar(8, "i", opr.priority)
        tw.offset(10, add_types).offset(11, add_vals).offset(12, oname)
        opr_offsets.append(tw.finish())
    oprs = write_offsets(b, opr_offsets)
    outs = write_structs(b, 8, 4, [struct.pack("<II", v, v) for v in g.outputs])
    md = _write_metadata(b, meta, v2=False)
    # The graph hash only has to be non-zero and stable; hash what has been built so far.
    graph_hash = xxhash.xxh64_intdigest(bytes(b.Bytes[b.Head() :]), S.GRAPH_HASH_SEED) or 1
    root = (
        TableWriter(b)
        .scalar(0, "I", S.MGB_VERSION)
        .scalar(1, "Q", graph_hash)
        .scalar(2, "I", 0)
        .offset(3, oprs)
        .offset(4, outs)
        .offset(5, md)
        .finish()
    )
    # Size-prefixed like MegEngine's dumper: the v1 loader verifies the buffer *including* its
    # size word (VerifySizePrefixedGraphBuffer), so 8-byte fields align relative to that word.
    b.FinishSizePrefixed(root, b"mgb1")
    fbs = bytes(b.Output())
    blob = b"".join(blobs)
    header = struct.pack("<I8sIQ", 0x4342474D, b"\0" * 8, 0, len(blob))
    return header + blob + fbs
