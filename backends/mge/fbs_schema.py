"""The FlatBuffers schemas of ``.mge`` files (spec A.4): the one place their slot numbers live.

Each table is declared below as in a ``.fbs`` file; a field's slot is its position, and a union
field takes two slots (``<name>_type``, then the value), as FlatBuffers numbers them. The container
reads, the serialiser writes and the verifier checks through the ``TableDef`` objects made from
these declarations, e.g. ``V2.Operator.type_id`` is the slot of ``Operator.type_id`` in FBS v2.

The ``OperatorParam`` union's member tables are :data:`backends.mge.schema.PARAMS`; they are
added when a schema is asked for (:func:`verifier_schema`), after the operator table has added
the rows' own param tables.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

import backends.mge.schema as S

# a field's kind, as the verifier walks it: ("s", fmt) scalar; ("t", table); ("str",);
# ("vs", fmt) vector of scalars; ("vt", table); ("vstr",); ("vstruct", size, align);
# ("u", union, type_slot) and ("ut",) its type byte; ("vu", union, type_slot) and ("vut",)
Kind = tuple[Any, ...]

# FlatBuffers scalar type -> struct format
SCALARS = {
    "bool": "?",
    "byte": "b",
    "ubyte": "B",
    "short": "h",
    "ushort": "H",
    "int": "i",
    "uint": "I",
    "float": "f",
    "long": "q",
    "ulong": "Q",
    "double": "d",
}

_SHARED = """
table DType { type:byte; param:DTypeParam; }
table LinearQuantizationParam { scale:float; zero_point:ubyte; }
table CompNode { logical_locator:string; }
table Blob { data:[ubyte]; }
union DTypeParam { LinearQuantizationParam }
"""

_V1 = """
table Graph {
    mgb_version:uint; hash:ulong; nr_shared_tensor:uint; oprs:[Operator];
    output_vars_idx:[OutputVar]; metadata:Metadata;
}
table Operator {
    type_id:ulong; param:OperatorParam; inputs:[uint]; comp_node:[CompNode];
    output_name:[string]; output_dtype:DType; tensors:[Tensor]; priority:int; blobs:[Blob];
    additional_params:[OperatorParam]; name:string;
}
table Tensor { name:string; shape:[uint]; comp_node:CompNode; dtype:DType; data_size:uint; offset:uint; }
table Metadata { is_valid:bool; graph_modified:bool; user_info:string; optimize_options:ulong; }
struct OutputVar { compact_id:uint; original_id:uint; }
"""

_V2 = """
table Model {
    mge_version:uint; model_version:uint; oprs:[Operator]; middle_tensors:[MiddleTensor];
    output_vars_idx:[OutputVar]; output_alias:[OutputAlias]; nr_shared_tensor:uint; metadata:Metadata;
}
table Operator {
    type:string; type_id:ulong; name:string; param:OperatorParam; additional_params:[OperatorParam];
    inputs:[uint]; outputs:[uint]; comp_node:[CompNode]; output_dtype:DType; tensors:[Tensor];
    opr_version:uint; priority:int; custom_data:[Blob];
}
table Tensor {
    name:string; shape:[uint]; comp_node:CompNode; dtype:DType; format:TensorFormat; data:[ubyte];
}
table MiddleTensor { name:string; shape:[uint]; comp_node:CompNode; dtype:DType; format:TensorFormat; }
table Metadata { is_valid:bool; graph_modified:bool; optimize_options:ulong; user_info:string; }
table OutputVar { compact_id:uint; original_id:uint; }
table OutputAlias { id:uint; name:string; }
table DefaultTensorFormat { }
table Image2DPackedTensorFormat { align_axis:ubyte; }
table LowbitsAlignedTensorFormat { size_nbits:ubyte; align_size_in_bits:ubyte; }
union TensorFormat { DefaultTensorFormat, Image2DPackedTensorFormat, LowbitsAlignedTensorFormat }
"""

_DECLARATION = re.compile(r"(table|struct|union)\s+(\w+)\s*\{([^}]*)\}")


class TableDef:
    """One table: its fields in slot order; ``table.<field>`` is that field's slot (the table's own
    attributes start with ``_`` so that no field name, ``name`` included, is shadowed)."""

    def __init__(self, table: str, fields: list[tuple[str, Kind]]):
        self._table = table
        self._fields = tuple(fields)
        self._slots = {field: slot for slot, (field, _kind) in enumerate(fields)}

    def __getattr__(self, field: str) -> int:
        slots = self.__dict__.get("_slots", {})
        if field not in slots:
            raise AttributeError(f"FlatBuffers table {self.__dict__.get('_table')} has no field {field!r}")
        return slots[field]

    def __repr__(self) -> str:
        return f"TableDef({self._table}: {', '.join(self._slots)})"

    def _kinds(self) -> dict[int, Kind]:
        return dict(enumerate(kind for _field, kind in self._fields))


@dataclass(frozen=True)
class Schema:
    """One format's tables (shared ones included), structs (size, alignment) and unions (tag ->
    member table; tags count from 1 in declaration order)."""

    tables: dict[str, TableDef]
    structs: dict[str, tuple[int, int]]
    unions: dict[str, dict[int, str]]

    def __getattr__(self, table: str) -> TableDef:
        tables = self.__dict__.get("tables", {})
        if table not in tables:
            raise AttributeError(f"no FlatBuffers table {table!r} in this schema")
        return tables[table]

    def tag(self, union: str, member: str) -> int:
        """The union type byte that says ``member``."""
        tags = {name: tag for tag, name in self.unions[union].items()}
        if member not in tags:
            raise KeyError(f"union {union} has no member {member}; it has {', '.join(tags)}")
        return tags[member]


def _field_kinds(
    name: str, type_: str, slot: int, unions: dict[str, Any], structs: dict[str, tuple[int, int]]
) -> list[tuple[str, Kind]]:
    """The slots one declared field takes from ``slot`` on (a union: its type, then its value)."""
    vector = type_.startswith("[")
    elem = type_.strip("[]")
    if elem in unions:
        type_kind, value_kind = ("vut", "vu") if vector else ("ut", "u")
        return [(name + "_type", (type_kind,)), (name, (value_kind, elem, slot))]
    if elem in SCALARS:
        kind: Kind = ("vs" if vector else "s", SCALARS[elem])
    elif elem == "string":
        kind = ("vstr",) if vector else ("str",)
    elif vector and elem in structs:
        kind = ("vstruct", *structs[elem])
    else:
        kind = ("vt" if vector else "t", elem)
    return [(name, kind)]


def _parse(text: str) -> Schema:
    declared: dict[str, list[tuple[str, str, list[str]]]] = {"table": [], "struct": [], "union": []}
    for what, name, body in _DECLARATION.findall(text):
        separator = "," if what == "union" else ";"
        declared[what].append((what, name, [m.strip() for m in body.split(separator) if m.strip()]))
    unions = {name: dict(enumerate(members, 1)) for _w, name, members in declared["union"]}
    # OperatorParam's members are the param tables, known when a schema is asked for
    unions["OperatorParam"] = {}
    structs: dict[str, tuple[int, int]] = {}
    for _w, name, members in declared["struct"]:
        sizes = [struct.calcsize(SCALARS[m.split(":")[1].strip()]) for m in members]
        structs[name] = (sum(sizes), max(sizes))
    tables: dict[str, TableDef] = {}
    for _w, name, members in declared["table"]:
        fields: list[tuple[str, Kind]] = []
        for field, type_ in (m.split(":") for m in members):
            fields += _field_kinds(field.strip(), type_.strip(), len(fields), unions, structs)
        tables[name] = TableDef(name, fields)
    return Schema(tables, structs, unions)


COMMON = _parse(_SHARED)  # the tables both formats declare alike (DType, CompNode, Blob, ...)
V1 = _parse(_SHARED + _V1)
V2 = _parse(_SHARED + _V2)

# the union type bytes the serialiser writes and the container tests for
LINEAR_QUANTIZATION_PARAM = COMMON.tag("DTypeParam", "LinearQuantizationParam")
DEFAULT_TENSOR_FORMAT = V2.tag("TensorFormat", "DefaultTensorFormat")
IMAGE2D_TENSOR_FORMAT = V2.tag("TensorFormat", "Image2DPackedTensorFormat")


def _param_kinds(pdef: S.ParamDef) -> dict[int, Kind]:
    kinds: dict[int, Kind] = {}
    for slot, (_name, fmt, _default) in enumerate(pdef.fields):
        if fmt == "vec_i":
            kinds[slot] = ("vs", "i")
        elif fmt == "vec_axisdesc":
            kinds[slot] = ("vstruct", S.AXIS_DESC_SIZE, 4)
        elif fmt == "vec_indexdesc":
            kinds[slot] = ("vstruct", S.INDEX_DESC_SIZE, 1)
        else:
            kinds[slot] = ("s", fmt)
    return kinds


def verifier_schema(identifier: bytes) -> tuple[str, dict[str, dict[int, Kind]], dict[str, dict[int, str]]]:
    """For the format of ``identifier`` (``mgb1``/``mgv2``): the root table's name, every table's
    slot kinds (the param tables of :data:`backends.mge.schema.PARAMS` as ``param.<Name>``) and the
    unions' members, ``OperatorParam`` included."""
    if identifier == b"mgb1":
        schema, root = V1, "Graph"
    elif identifier == b"mgv2":
        schema, root = V2, "Model"
    else:
        raise ValueError(f"unknown identifier {identifier!r}")
    tables = {name: t._kinds() for name, t in schema.tables.items()}
    params = [p for p in S.PARAMS.values() if p.name != "DType"]  # param.DType is the DType table
    tables.update({"param." + p.name: _param_kinds(p) for p in params})
    unions = {
        **schema.unions,
        "OperatorParam": {
            p.tag: "DType" if p.name == "DType" else "param." + p.name for p in S.PARAMS.values()
        },
    }
    return root, tables, unions
