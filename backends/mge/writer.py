"""``mgb`` dialect -> ``.mge`` (FBS v2, the default, or FBS v1) that MegEngine 1.13 loads.

Writing happens in two steps: :mod:`backends.mge.lowering` turns one ``func.func`` into a
:class:`~backends.mge.records.LoweredGraph` (MegEngine operators, one per IR op through its row of
the operator table, plus the shape sub-graphs and dump-time rewrites MegEngine's dumper makes);
:mod:`backends.mge.serialize` encodes that as FBS v2 or v1 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

from xdsl.dialects import func
from xdsl.dialects.builtin import BytesAttr, IntegerAttr, ModuleOp, StringAttr

from backends.mge.container import parse_file
from backends.mge.lowering import lower_func
from backends.mge.records import (
    ATTR_METADATA_VALID,
    ATTR_OPTIMIZE_OPTIONS,
    ATTR_USER_INFO,
    LoweredGraph,
    Metadata,
    MgeWriteError,
)
from backends.mge.serialize import Naming, serialize_v1, serialize_v2

__all__ = [
    "FORMATS",
    "LoweredGraph",
    "Metadata",
    "MgeWriteError",
    "WriteOptions",
    "WriteResult",
    "write_graph",
    "write_mge",
]

FORMATS = ("FBS_V2", "FBS")


def _func_metadata(fn: func.FuncOp) -> Metadata:
    meta = Metadata()
    ui = fn.attributes.get(ATTR_USER_INFO)
    if isinstance(ui, BytesAttr):
        meta.user_info = ui.data
    oo = fn.attributes.get(ATTR_OPTIMIZE_OPTIONS)
    if isinstance(oo, StringAttr):
        meta.optimize_options = int(oo.data)
    valid = fn.attributes.get(ATTR_METADATA_VALID)
    if isinstance(valid, IntegerAttr):
        meta.is_valid = bool(valid.value.data)
    return meta


@dataclass
class WriteResult:
    data: bytes
    graph: LoweredGraph
    content_hash: int  # FBS v1's graph hash; 0 for FBS v2 (MegEngine never sets it there)


def write_graph(
    fn: func.FuncOp,
    *,
    dump_format: str = "FBS_V2",
    model_version: int = 2,
    keep_var_name: int = 1,
    keep_opr_name: bool = False,
    keep_opr_priority: bool = False,
    no_change_graph: bool = False,
    output_names: Sequence[str] | None = None,
    metadata: Metadata | None = None,
) -> WriteResult:
    """One function as one ``.mge`` graph."""
    if dump_format not in FORMATS:
        raise MgeWriteError(f"unknown dump_format {dump_format!r}; expected one of {', '.join(FORMATS)}")
    if model_version not in (1, 2):
        raise ValueError(f"model_version must be 1 or 2, got {model_version}")
    if keep_var_name not in (0, 1, 2):
        raise ValueError(f"keep_var_name must be 0, 1 or 2, got {keep_var_name}")
    # FBS v1 stores each holder tensor's TensorFormat in a blob whose layout is not pinned down
    # (spec F): v1 files keep an ImmutableTensor per NHWCD4 constant
    g = lower_func(
        fn,
        no_change_graph=no_change_graph,
        output_names=output_names,
        image_holder=dump_format == "FBS_V2",
    )
    for i, opr in enumerate(g.oprs):
        opr.priority = opr.priority or i + 1  # keep_opr_priority: the operator's id when unset
    meta = metadata or _func_metadata(fn)
    naming = Naming(keep_var_name, keep_opr_name, keep_opr_priority)
    if dump_format == "FBS_V2":
        return WriteResult(serialize_v2(g, meta, naming, model_version=model_version), g, 0)
    data = serialize_v1(g, meta, naming)
    return WriteResult(data, g, parse_file(data)[0].graph_hash or 0)


class WriteOptions(TypedDict, total=False):
    """:func:`write_graph`'s keywords besides ``dump_format``."""

    model_version: int
    keep_var_name: int
    keep_opr_name: bool
    keep_opr_priority: bool
    no_change_graph: bool
    output_names: Sequence[str] | None
    metadata: Metadata | None


def write_mge(
    module: ModuleOp | func.FuncOp, *, dump_format: str | None = None, **options: Unpack[WriteOptions]
) -> bytes:
    """Every function of ``module`` as one ``.mge`` graph each, back to back (one for a plain trace).

    ``dump_format`` is MegEngine's: ``None``/``"FBS_V2"`` (default) or ``"FBS"`` (v1); the other
    keywords are :func:`write_graph`'s. Metadata
    defaults to what the reader recorded on the function (so a read file is written back as it
    was) or to a valid, empty record.
    """
    funcs = (
        [module]
        if isinstance(module, func.FuncOp)
        else [op for op in module.ops if isinstance(op, func.FuncOp)]
    )
    if not funcs:
        raise MgeWriteError("can't dump empty graph: the module has no function")
    out = bytearray()
    for fn in funcs:
        out += write_graph(fn, dump_format=dump_format or "FBS_V2", **options).data
    return bytes(out)
