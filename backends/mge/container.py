"""Decoding ``.mge`` containers (FBS v1 ``MGBC``/``MGBS`` and FBS v2 ``mgv2``) into plain records.

This layer knows the byte layout and the schemas, not the ``mgb`` dialect: it produces
:class:`RawGraph` records (operators with their decoded params, tensors, var ids, names and
metadata) that ``xmge inspect`` prints and :mod:`backends.mge.reader` turns into IR. Every read is
bounds-checked (:mod:`backends.mge.fbs`); a problem raises :class:`MgeFormatError` with the file
offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import backends.mge.fbs_schema as F
import backends.mge.oprs as O
import backends.mge.schema as S
from backends.mge.dtypes import RawDType, storage_bytes
from backends.mge.fbs import Buffer, MgeFormatError, Table
from backends.mge.fbs_schema import COMMON, V1, V2, TableDef
from backends.mge.records import Metadata

V1_MAGIC = 0x4342474D  # "MGBC"
V1_MAGIC_COMPAT = 0x5342474D  # "MGBS"
V2_IDENTIFIER = b"mgv2"
V1_IDENTIFIER = b"mgb1"

# Each graph's FlatBuffer may not exceed this; FlatBuffers offsets are 32-bit anyway.
MAX_FBS_SIZE = 2**31 - 1


@dataclass
class RawTensor:
    name: str | None
    shape: tuple[int, ...]
    dtype: RawDType | None
    data: memoryview | None  # raw little-endian bytes, None for META_INPUT tensors
    data_pos: int  # file offset of the data (for sharing identical blobs)
    comp_node: str | None = None
    image2d_axis: int | None = None  # FBS v2 Image2DPackedTensorFormat.align_axis, if that format


@dataclass
class RawParam:
    kind: str  # ParamDef name, or "tag<N>" for tags xmge does not decode
    values: dict[str, Any]
    missing: bool = False  # the union tag names the table but the table itself is absent


@dataclass
class RawOpr:
    index: int  # position in the graph's operator list
    offset: int  # file offset of the operator table
    type_name: str  # registry name (v2 type string) or a description of the id
    type_id: int
    opr_version: int
    kind: str | None  # backends.mge.oprs.Opr.kind when known
    name: str | None
    params: list[RawParam]
    inputs: list[int]
    outputs: list[int]
    output_names: list[str] | None
    output_dtype: RawDType | None
    tensors: list[RawTensor]
    priority: int = 0
    blobs: list[bytes] = field(default_factory=list)

    def param(self, kind: str) -> dict[str, Any]:
        for p in self.params:
            if p.kind == kind:
                if p.missing and S.PARAMS[kind].fields:
                    raise MgeFormatError(
                        f"operator #{self.index} ({self.type_name}): its param.{kind} is tagged but "
                        "the table is missing",
                        self.offset,
                    )
                return p.values
        raise MgeFormatError(f"operator #{self.index} ({self.type_name}) lacks its param.{kind}", self.offset)


@dataclass
class RawMetadata(Metadata):
    """The metadata table as read: absent unless ``present`` (then not valid either)."""

    is_valid: bool = False
    present: bool = False


@dataclass
class RawGraph:
    format: str  # "FBS_V2", "FBS", "FBS_MGBS"
    offset: int  # file offset of this graph
    size: int  # bytes this graph occupies in the file
    version: int  # mge_version / mgb_version
    model_version: int | None
    oprs: list[RawOpr]
    outputs: list[int]  # var ids of the graph outputs, in order
    var_names: dict[int, str]
    metadata: RawMetadata
    nr_shared_tensor: int = 0
    graph_hash: int | None = None
    nr_vars: int = 0


def _u32(data: memoryview, pos: int, what: str) -> int:
    if pos + 4 > len(data):
        raise MgeFormatError(f"file truncated: {what} needs 4 bytes, {len(data) - pos} left", pos)
    return struct.unpack_from("<I", data, pos)[0]


def _u64(data: memoryview, pos: int, what: str) -> int:
    if pos + 8 > len(data):
        raise MgeFormatError(f"file truncated: {what} needs 8 bytes, {max(len(data) - pos, 0)} left", pos)
    return struct.unpack_from("<Q", data, pos)[0]


def identify(data: bytes | memoryview, pos: int = 0) -> str:
    """The container kind at ``pos``: ``FBS``, ``FBS_MGBS`` or ``FBS_V2``; MgeFormatError otherwise."""
    view = memoryview(data)
    head = bytes(view[pos : pos + 12])
    if len(head) >= 8:
        first = struct.unpack_from("<Q", head, 0)[0]
        if first == V1_MAGIC:
            return "FBS"
        if first == V1_MAGIC_COMPAT:
            return "FBS_MGBS"
    if len(head) >= 12 and head[8:12] == V2_IDENTIFIER:
        return "FBS_V2"
    if head.startswith(b"mgbtest0"):
        raise MgeFormatError(
            "a load_and_run test-case file (mgbtest0), not a plain .mge graph: split it with "
            "compiler.test_cases.read_cases",
            pos,
        )
    if head.startswith(b"packed_model"):
        raise MgeFormatError("a MegEngine Lite packed model, not a plain .mge graph", pos)
    if head[:1] == b"\x80" and 2 <= head[1:2][0] <= 5:  # a pickle's PROTO opcode and version
        raise MgeFormatError(
            "a Python pickle (a state dict or checkpoint from save()), not a .mge graph: load it with "
            "compiler.load",
            pos,
        )
    if len(head) < 12:
        raise MgeFormatError(f"file too short to be a .mge graph ({len(head)} bytes)", pos)
    raise MgeFormatError(
        f"not a MegEngine .mge graph: no MGBC magic and no 'mgv2' identifier (starts with {head[:12].hex()})",
        pos,
    )


def parse_file(data: bytes | memoryview) -> list[RawGraph]:
    """All graphs of a file (``append=True`` files hold several, back to back)."""
    view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    if len(view) == 0:
        raise MgeFormatError("empty file", 0)
    graphs: list[RawGraph] = []
    pos = 0
    while pos < len(view):
        kind = identify(view, pos)
        g = _parse_v2(view, pos) if kind == "FBS_V2" else _parse_v1(view, pos, kind)
        graphs.append(g)
        pos += g.size
    return graphs


# ----------------------------------------------------------------------------------------------
# shared decoding


def parse_first_graph(data: bytes | memoryview) -> RawGraph:
    """The file's first graph; bytes after it are not read (MegEngine's loader reads one graph
    from the start of a buffer the same way)."""
    view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    if len(view) == 0:
        raise MgeFormatError("empty file", 0)
    kind = identify(view, 0)
    return _parse_v2(view, 0) if kind == "FBS_V2" else _parse_v1(view, 0, kind)


def _dtype(t: Table | None) -> RawDType | None:
    if t is None:
        return None
    code = t.scalar(COMMON.DType.type, "b", 0)
    if not 0 <= code < len(S.DTYPE_FILE_ENUM):
        raise t.buf.fail(f"unknown dtype number {code}", t.pos)
    name = S.DTYPE_FILE_ENUM[code]
    ptype = t.scalar(COMMON.DType.param_type, "B", 0)
    scale = zp = None
    if ptype == F.LINEAR_QUANTIZATION_PARAM:
        q = t.table(COMMON.DType.param, "param")
        if q is not None:
            scale = float(q.scalar(COMMON.LinearQuantizationParam.scale, "f", 0.0))
            if name in S.ASYMMETRIC:
                zp = int(q.scalar(COMMON.LinearQuantizationParam.zero_point, "B", 0))
    elif ptype != 0:
        raise t.buf.fail(f"unknown dtype param type {ptype}", t.pos)
    if name.startswith("Quantized") and scale is None:
        raise t.buf.fail(f"quantized dtype {name} lacks its scale", t.pos)
    return RawDType(name, scale, zp)


def _param(tag: int, t: Table | None) -> RawParam:
    pdef = S.PARAMS_BY_TAG.get(tag)
    if pdef is None or t is None:
        return RawParam(pdef.name if pdef else f"tag{tag}", {}, missing=pdef is not None)
    values: dict[str, Any] = {}
    if pdef.name == "DType":
        dt = _dtype(t)
        values["dtype"] = dt
        return RawParam(pdef.name, values)
    for slot, (name, fmt, default) in enumerate(pdef.fields):
        if fmt == "vec_i":
            values[name] = tuple(t.scalars(slot, "i", name) or ())
        elif fmt == "vec_axisdesc":
            descs = []
            for p in t.structs(slot, S.AXIS_DESC_SIZE, name) or ():
                descs.append((t.unpack_at(p, "b"), t.unpack_at(p + 4, "i")))
            values[name] = tuple(descs)
        elif fmt == "vec_indexdesc":
            items = []
            for p in t.structs(slot, S.INDEX_DESC_SIZE, name) or ():
                items.append(
                    (t.unpack_at(p, "b"),) + tuple(bool(t.unpack_at(p + k, "B")) for k in range(1, 5))
                )
            values[name] = tuple(items)
        else:
            values[name] = t.scalar(slot, fmt, default)
    return RawParam(pdef.name, values)


def _params(t: Table, operator: TableDef) -> list[RawParam]:
    out = []
    tag = t.scalar(operator.param_type, "B", 0)
    if tag:
        out.append(_param(tag, t.table(operator.param, "param")))
    tags = t.scalars(operator.additional_params_type, "B", "additional_params_type") or []
    tables = t.tables(operator.additional_params, "additional_params") or []
    if len(tags) != len(tables):
        raise t.buf.fail("additional_params and their types differ in length", t.pos)
    for tag_i, tab in zip(tags, tables, strict=True):
        out.append(_param(tag_i, tab))
    return out


def _metadata(mt: Table | None, metadata: TableDef) -> RawMetadata:
    """The Metadata table; V1 and V2 swap the slots of optimize_options and user_info (A.8)."""
    if mt is None:
        return RawMetadata()
    ui = mt.bytes_view(metadata.user_info, "user_info")
    return RawMetadata(
        is_valid=bool(mt.scalar(metadata.is_valid, "?", False)),
        graph_modified=bool(mt.scalar(metadata.graph_modified, "?", False)),
        optimize_options=int(mt.scalar(metadata.optimize_options, "Q", 0)),
        user_info=b"" if ui is None else bytes(ui[0]),
        present=True,
    )


def _comp_node(t: Table | None) -> str | None:
    return None if t is None else t.string(COMMON.CompNode.logical_locator, "logical_locator")


def _image2d_axis(t: Table) -> int | None:
    """``align_axis`` of a v2 tensor in Image2DPackedTensorFormat (union tag 2), else ``None``."""
    if t.scalar(V2.Tensor.format_type, "B", 0) != F.IMAGE2D_TENSOR_FORMAT:
        return None
    fmt = t.table(V2.Tensor.format, "format")
    return None if fmt is None else int(fmt.scalar(V2.Image2DPackedTensorFormat.align_axis, "B", 0))


def _shape(t: Table, tensor: TableDef) -> tuple[int, ...]:
    shape = tuple(t.scalars(tensor.shape, "I", "shape") or ())
    if len(shape) > 7:
        raise t.buf.fail(f"tensor has {len(shape)} dimensions, MegEngine allows at most 7", t.pos)
    return shape


def _expect_size(t: Table, shape: tuple[int, ...], dtype: RawDType | None, have: int) -> None:
    if dtype is None:
        raise t.buf.fail("tensor with data lacks its dtype", t.pos)
    want = storage_bytes(shape, dtype)
    if want != have:
        raise t.buf.fail(
            f"tensor {shape} of {dtype.describe()} needs {want} bytes of data, the file holds {have}", t.pos
        )


# ----------------------------------------------------------------------------------------------
# FBS v2


def _raw_opr(
    ot: Table,
    operator: TableDef,
    blobs_field: str,
    index: int,
    type_name: str,
    type_id: int,
    version: int,
    kind: str | None,
    outputs: list[int],
    output_names: list[str] | None,
    tensors: list[RawTensor],
) -> RawOpr:
    """An operator record from its table (``operator``: its version's schema, which calls the blob
    list ``blobs_field``), given what the two versions find differently."""
    blob_tables = ot.tables(getattr(operator, blobs_field), blobs_field) or []
    blobs = (bt.bytes_view(COMMON.Blob.data, "data") for bt in blob_tables)
    return RawOpr(
        index=index,
        offset=ot.buf.file_offset + ot.pos,
        type_name=type_name,
        type_id=type_id,
        opr_version=version,
        kind=kind,
        name=ot.string(operator.name, "name"),
        params=_params(ot, operator),
        inputs=list(ot.scalars(operator.inputs, "I", "inputs") or []),
        outputs=outputs,
        output_names=output_names,
        output_dtype=_dtype(ot.table(operator.output_dtype, "output_dtype")),
        tensors=tensors,
        priority=ot.scalar(operator.priority, "i", 0),
        blobs=[bytes(b[0]) for b in blobs if b],
    )


def _size_prefixed(view: memoryview, pos: int, what: str, identifier: bytes) -> tuple[Table, int]:
    """The root table of the size-prefixed FlatBuffer at ``pos`` and its size (without the prefix)."""
    size = _u32(view, pos, "FlatBuffer size prefix")
    if size > len(view) - pos - 4:
        raise MgeFormatError(
            f"file truncated: the graph's FlatBuffer claims {size} bytes, {len(view) - pos - 4} remain", pos
        )
    return Buffer(view[pos + 4 : pos + 4 + size], pos + 4, what).root(identifier), size


def _parse_v2(view: memoryview, start: int) -> RawGraph:
    root, size = _size_prefixed(view, start, "FBS v2 graph", V2_IDENTIFIER)
    buf = root.buf
    oprs_t = root.tables(V2.Model.oprs, "oprs") or []
    oprs: list[RawOpr] = []
    nvars = 0
    for i, ot in enumerate(oprs_t):
        type_name = ot.string(V2.Operator.type, "type") or ""
        type_id = ot.scalar(V2.Operator.type_id, "Q", 0)
        version = ot.scalar(V2.Operator.opr_version, "I", 1)
        kind_t = O.BY_V2_ID.get((type_id, version))
        outputs = list(ot.scalars(V2.Operator.outputs, "I", "outputs") or [])
        for o in outputs:
            if o != nvars:
                raise buf.fail(
                    f"operator #{i} ({type_name}) output id {o} out of sequence (expected {nvars})", ot.pos
                )
            nvars += 1
        tensors = []
        for tt in ot.tables(V2.Operator.tensors, "tensors") or []:
            dt = _dtype(tt.table(V2.Tensor.dtype, "dtype"))
            shape = _shape(tt, V2.Tensor)
            raw = tt.bytes_view(V2.Tensor.data, "data")
            data, pos = (None, 0) if raw is None else raw
            if data is not None:
                _expect_size(tt, shape, dt, len(data))
            tensors.append(
                RawTensor(
                    tt.string(V2.Tensor.name, "name"),
                    shape,
                    dt,
                    data,
                    buf.file_offset + pos,
                    _comp_node(tt.table(V2.Tensor.comp_node, "cn")),
                    _image2d_axis(tt),
                )
            )
        kind = kind_t.kind if kind_t else None
        oprs.append(
            _raw_opr(
                ot, V2.Operator, "custom_data", i, type_name, type_id, version, kind, outputs, None, tensors
            )
        )
    names: dict[int, str] = {}
    for vid, mt in enumerate(root.tables(V2.Model.middle_tensors, "middle_tensors") or []):
        name = mt.string(V2.MiddleTensor.name, "name")
        if name:
            names[vid] = name
    output_vars = root.tables(V2.Model.output_vars_idx, "output_vars_idx") or []
    outputs = [ov.scalar(V2.OutputVar.compact_id, "I", 0) for ov in output_vars]
    meta = _metadata(root.table(V2.Model.metadata, "metadata"), V2.Metadata)
    return RawGraph(
        format="FBS_V2",
        offset=start,
        size=4 + size,
        version=root.scalar(V2.Model.mge_version, "I", 0),
        model_version=root.scalar(V2.Model.model_version, "I", 0),
        oprs=oprs,
        outputs=outputs,
        var_names=names,
        metadata=meta,
        nr_shared_tensor=root.scalar(V2.Model.nr_shared_tensor, "I", 0),
        nr_vars=nvars,
    )


# ----------------------------------------------------------------------------------------------
# FBS v1


# operators with a fixed number of (non-volatile) outputs other than 1
_V1_OUTPUTS = {"BatchNorm": 4, "LayerNorm": 3, "GroupNorm": 3, "InstanceNorm": 3,  # (dst, mean, rstd)
               "Argsort": 2, "ROIAlign": 2, "ROIPooling": 2, "NMSKeep": 2, "CondTake": 2}  # fmt: skip


def v1_output_count(
    kind: str | None, nr_tensors: int, names: list[str] | None, nr_inputs: int = 0,
    params: list[RawParam] | None = None,
) -> int:  # fmt: skip
    """How many var ids an operator takes in FBS v1, where ids are implicit."""
    if names:
        return len(names)
    if kind in _V1_OUTPUTS:
        return _V1_OUTPUTS[kind]
    if kind == "TopK":  # KTH_ONLY (mode 0) has no index output
        mode = next((p.values.get("mode", 0) for p in params or [] if p.kind == "TopK"), 0)
        return 1 if mode == 0 else 2
    if kind == "Split":  # (src, one size per part)
        return max(nr_inputs - 1, 1)
    if kind in ("MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder"):
        return nr_tensors
    return 1


def _parse_v1(view: memoryview, start: int, kind: str) -> RawGraph:
    if kind == "FBS":
        offset_to_fbs = _u64(view, start + 16, "offset to the FlatBuffer")
        blobs_start = start + 24
    else:
        offset_to_fbs = _u64(view, start + 8, "offset to the FlatBuffer")
        blobs_start = start + 16
    if offset_to_fbs > len(view) - blobs_start:
        raise MgeFormatError(
            f"file truncated: tensor data claims {offset_to_fbs} bytes, {len(view) - blobs_start} remain",
            start + (16 if kind == "FBS" else 8),
        )
    fbs_pos = blobs_start + offset_to_fbs
    root, size = _size_prefixed(view, fbs_pos, "FBS v1 graph", V1_IDENTIFIER)
    buf = root.buf
    by_id = O.BY_SHORT_ID if kind == "FBS_MGBS" else O.BY_PERSIST_ID
    blob_pos = blobs_start
    oprs: list[RawOpr] = []
    names: dict[int, str] = {}
    nvars = 0
    for i, ot in enumerate(root.tables(V1.Graph.oprs, "oprs") or []):
        type_id = ot.scalar(V1.Operator.type_id, "Q", 0)
        kind_t = by_id.get(type_id)
        type_name = kind_t.regname if kind_t else O.KNOWN_NAMES.get(type_id, f"<unknown type id {type_id}>")
        tensors = []
        for tt in ot.tables(V1.Operator.tensors, "tensors") or []:
            dt = _dtype(tt.table(V1.Tensor.dtype, "dtype"))
            shape = _shape(tt, V1.Tensor)
            data_size = tt.scalar(V1.Tensor.data_size, "I", 0)
            skip = tt.scalar(V1.Tensor.offset, "I", 0)
            data = None
            pos = blob_pos + skip
            if data_size:
                if pos + data_size > fbs_pos:
                    raise MgeFormatError(
                        f"operator #{i} ({type_name}): tensor data of {data_size} bytes runs past the tensor "
                        f"area (ends at {fbs_pos})",
                        buf.file_offset + tt.pos,
                    )
                data = view[pos : pos + data_size]
                _expect_size(tt, shape, dt, data_size)
                blob_pos = pos + data_size
            tensors.append(
                RawTensor(
                    tt.string(V1.Tensor.name, "name"),
                    shape,
                    dt,
                    data,
                    pos,
                    _comp_node(tt.table(V1.Tensor.comp_node, "cn")),
                )
            )
        opr_kind = kind_t.kind if kind_t else None
        out_names = ot.strings(V1.Operator.output_name, "output_name")
        v1_inputs = ot.scalars(V1.Operator.inputs, "I", "inputs") or []
        n_out = v1_output_count(opr_kind, len(tensors), out_names, len(v1_inputs), _params(ot, V1.Operator))
        outputs = list(range(nvars, nvars + n_out))
        if out_names:
            for vid, nm in zip(outputs, out_names, strict=True):
                if nm:
                    names[vid] = nm
        nvars += n_out
        oprs.append(
            _raw_opr(
                ot, V1.Operator, "blobs", i, type_name, type_id, 1, opr_kind, outputs, out_names, tensors
            )
        )
    output_var_size = V1.structs["OutputVar"][0]
    output_vars = root.structs(V1.Graph.output_vars_idx, output_var_size, "output_vars_idx") or []
    outputs = [root.unpack_at(p, "I") for p in output_vars]
    meta = _metadata(root.table(V1.Graph.metadata, "metadata"), V1.Metadata)
    return RawGraph(
        format=kind,
        offset=start,
        size=fbs_pos + 4 + size - start,
        version=root.scalar(V1.Graph.mgb_version, "I", 0),
        model_version=None,
        oprs=oprs,
        outputs=outputs,
        var_names=names,
        metadata=meta,
        nr_shared_tensor=root.scalar(V1.Graph.nr_shared_tensor, "I", 0),
        graph_hash=root.scalar(V1.Graph.hash, "Q", 0),
        nr_vars=nvars,
    )
