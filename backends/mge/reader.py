"""``.mge`` (MegEngine 1.13, FBS v1 and v2) → ``mgb`` dialect.

Each graph of the file becomes one ``func.func`` (``@main``, then ``@graph1``, ... for files written
with ``append=True``). Host2DeviceCopy inputs become block arguments (``input_names``), graph
outputs the ``func.return`` operands (``output_names``); every emitted op carries the file's var
name as ``name``.

MegEngine computes shapes at run time (GetVarShape → Subtensor → Concat → Reshape); xmge's ops are
static, so every value that only depends on shapes and constants is evaluated while reading
(:class:`ReadVar.value`) and folded into the consumer's static parameters. Constants become
``mgb.const`` lazily, right before their first real use, so constants that only feed shape
computations or index inputs leave no trace in the IR.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from backends.mge.container import RawGraph, RawOpr, parse_file
from backends.mge.dtypes import to_element
from backends.mge.fbs import MgeFormatError
from backends.mge.oprs import BY_KIND, refusal
from backends.mge.read_context import (
    MgeUnsupportedError,
    ReadContext,
    ReadVar,
    check_tensor_size,
    define,
    fail,
    ssa_of,
    unsupported,
    where,
)
from backends.mge.records import ATTR_FORMAT, ATTR_METADATA_VALID, ATTR_OPTIMIZE_OPTIONS, ATTR_USER_INFO
from dialects.dtypes import numpy_dtype

__all__ = [
    "ATTR_FORMAT",
    "ATTR_METADATA_VALID",
    "ATTR_OPTIMIZE_OPTIONS",
    "ATTR_USER_INFO",
    "MgeFormatError",
    "MgeUnsupportedError",
    "dump_options",
    "graph_to_func",
    "read_mge",
]


def read_mge(data: bytes | bytearray | memoryview) -> ModuleOp:
    """Read every graph of a ``.mge`` file into one module; MgeFormatError on any problem."""
    graphs = parse_file(data)
    funcs = [graph_to_func(g, "main" if i == 0 else f"graph{i}") for i, g in enumerate(graphs)]
    module = ModuleOp(funcs)
    try:
        module.verify()
    except Exception as exc:  # a file whose ops are individually valid but inconsistent overall
        raise MgeFormatError(f"the graph read from the file does not verify: {exc}") from exc
    return module


def dump_options(fn: func.FuncOp) -> dict[str, bool] | None:
    """The ``optimize_for_inference`` keywords a read graph was dumped with, decoded from its
    metadata's ``optimize_options`` word (MegEngine's ``deserialize_infer_option``); None when
    the file has no metadata."""
    # the option table is the optimizer's; imported here so that reading files does not load it
    from passes.inference.options import keywords_from_word

    word = fn.attributes.get(ATTR_OPTIMIZE_OPTIONS)
    return keywords_from_word(int(word.data)) if isinstance(word, StringAttr) else None


def graph_to_func(graph: RawGraph, name: str = "main") -> func.FuncOp:
    h2d = [op for op in graph.oprs if op.kind == "Host2DeviceCopy"]
    arg_types: list[Attribute] = []
    input_names: list[str] = []
    for op in h2d:
        if len(op.tensors) != 1:
            raise fail(op, f"needs one tensor describing the input, has {len(op.tensors)}")
        t = op.tensors[0]
        if t.dtype is None:
            raise fail(op, "the input tensor lacks its dtype")
        elem = to_element(t.dtype, where(op), op.offset)
        check_tensor_size(op, t.shape, numpy_dtype(elem).itemsize, "the input")
        arg_types.append(TensorType(elem, list(t.shape)))
        input_names.append(t.name or graph.var_names.get(op.outputs[0] if op.outputs else -1, "") or "")
    block = Block(arg_types=arg_types)
    ctx = ReadContext(graph, block)
    args = iter(block.args)
    for op in graph.oprs:
        if op.kind == "Host2DeviceCopy":
            arg = next(args)
            define(ctx, op, 0, ReadVar(type=arg.type, ssa=arg))  # type: ignore[arg-type]
            continue
        _convert(ctx, op)
    results: list[SSAValue] = []
    output_names: list[str] = []
    for i, vid in enumerate(graph.outputs):
        var = ctx.vars.get(vid)
        if var is None:
            raise MgeFormatError(f"graph output {i} refers to var {vid}, which no operator defines")
        results.append(ssa_of(ctx, var, f"graph output {i}"))
        output_names.append(var.name or f"unnamed{i}")
    if not results:
        raise MgeFormatError("the graph has no outputs", graph.offset)
    block.add_op(func.ReturnOp(*results))
    fn = func.FuncOp(name, (arg_types, [r.type for r in results]), Region(block))
    fn.attributes["input_names"] = ArrayAttr([StringAttr(n) for n in input_names])
    fn.attributes["output_names"] = ArrayAttr([StringAttr(n) for n in output_names])
    meta = graph.metadata
    fn.attributes[ATTR_FORMAT] = StringAttr(graph.format)
    if meta.present:
        fn.attributes[ATTR_METADATA_VALID] = IntegerAttr(int(meta.is_valid), i64)
        fn.attributes[ATTR_USER_INFO] = BytesAttr(meta.user_info)
        fn.attributes[ATTR_OPTIMIZE_OPTIONS] = StringAttr(str(meta.optimize_options))
    return fn


def _convert(ctx: ReadContext, op: RawOpr) -> None:
    kind = op.kind
    if kind is None:
        refused = refusal(op.type_name, op.type_id)
        if refused is not None:
            raise unsupported(op, f"operator {refused[0]} is not supported by xmge: {refused[1]}")
        raise unsupported(op, f"unknown operator type (type id {op.type_id}, version {op.opr_version})")
    read = BY_KIND[kind].read
    if read is None:
        raise unsupported(op, f"operator type {kind} is not supported by xmge's reader")
    try:
        read(ctx, op)
    except VerifyException as exc:  # e.g. a quantized scale that underflows to 0 in a product
        raise fail(op, f"invalid operands or params: {exc}") from exc
