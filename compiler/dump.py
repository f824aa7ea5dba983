"""``trace.dump``: MegEngine 1.13's ``jit.trace.dump`` for xmge traces (spec part C).

The traced ``func.func`` is copied and run through the passes the dump options select
(``passes.inference.pipeline_for``: MegEngine's ``optimize_for_inference`` as named passes, after the
``split-reduce-squeeze`` order fix-up every dump gets), then lowered and written by
:mod:`backends.mge.writer`. Parameters keep MegEngine's meaning; optimisation options that xmge does
not implement yet are rejected by name rather than silently ignored.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import warnings
from collections.abc import Sequence
from typing import IO, Any, NamedTuple

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, Float32Type, FunctionType, ModuleOp, StringAttr, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from backends.mge.oprs import BY_IR_OP, BY_KIND, WORKSPACE_KINDS, traced_kind
from backends.mge.writer import LoweredGraph, Metadata, write_graph
from compiler.serialization import atomic_write
from dialects import tensor as T
from dialects.dtypes import is_float, numpy_dtype
from dialects.errors import XmgeError
from passes.inference import ElemwiseSimplifyPass, InferenceOptions, SplitReduceSqueezePass, pipeline_for

TEST_CASE_OPTIONS = (
    "input_data",
    "repeat",
    "silent",
    "no_assert",
    "maxerr",
    "resize_input",
    "input_transform",
)

_CPP_DTYPE = {
    "Float32": "Float32",
    "Float16": "Float16",
    "Int32": "Int32",
    "Int16": "Int16",
    "Int8": "Int8",
    "Uint8": "Uint8",
    "Uint16": "Uint16",
    "Bool": "Bool",
    "QuantizedS8": "QuantizedS8",
    "QuantizedS32": "QuantizedS32",
    "Quantized8Asymm": "Quantized8Asymm",
    "QuantizedS16": "QuantizedS16",
}


class TrainingGraphError(XmgeError, ValueError, RuntimeError):
    """``dump`` of a trace that ran training-only computations (a BatchNorm's batch statistics).
    A RuntimeError too, as MegEngine's assertion is."""


class DumpResult(NamedTuple):
    """What MegEngine's ``dump_graph`` reports: its ``CompGraphDumpResult`` namedtuple, fields in
    MegEngine's order (so ``result[4]`` is the input names, as MegEngine code indexes it)."""

    nr_opr: int
    tot_bytes: int
    tensor_value_bytes: int
    content_hash: int
    inputs: list[str]
    outputs: list[str]
    params: list[str] = []  # noqa: RUF012 - immutable tuple; never mutated


def _as_names(value: str | Sequence[str | None] | None, n: int, what: str) -> list[str] | None:
    if value is None:
        return None
    names = [value] if isinstance(value, str) else list(value)
    if len(names) != n:
        raise ValueError(f"wrong number of {what}, should be {n} values")
    return ["" if x is None else str(x) for x in names]


def check_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The optimize options in ``kwargs`` (test-case options removed); clear errors for the rest."""
    for key in TEST_CASE_OPTIONS:
        if key in kwargs and key != "input_data":
            kwargs.pop(key)  # only meaningful together with input_data
    if kwargs.pop("input_data", None) is not None:
        raise ValueError(
            "input_data (load_and_run test cases, the mgbtest0 wrapper) is not supported by xmge"
        )
    if kwargs.pop("compat_older_version", None) is not None:
        raise ValueError("compat_older_version (MGBS 8.14 files) is not supported by xmge")
    InferenceOptions.from_kwargs(kwargs)  # unknown and conflicting options fail before any work
    return kwargs


def run_passes(module: ModuleOp, passes: Sequence[ModulePass]) -> ModuleOp:
    """A copy of ``module`` with ``passes`` applied in order (the input is left untouched)."""
    out = module.clone()
    ctx = Context()
    for p in passes:
        p.apply(ctx, out)
    out.verify()
    return out


def name_converted_outputs(fn: func.FuncOp) -> None:
    """Outputs converted back to float32 by the float16 passes keep their var's name, as in
    MegEngine (``fc2.ADD`` rather than ``TypeCvt``, and no clash between two such outputs)."""
    ret = fn.body.block.last_op
    if not isinstance(ret, func.ReturnOp):
        return
    for v in ret.arguments:
        cvt, src = v.owner, None
        if isinstance(cvt, T.TypeCvtOp) and "name" not in cvt.attributes:
            src = cvt.src.owner
        if not isinstance(src, T.MgbOp):
            continue
        name = src.attributes.get("name")
        scope = src.attributes.get("scope")
        kind = traced_kind(src)
        if isinstance(name, StringAttr):
            cvt.attributes["name"] = name
        elif kind is not None:
            cvt.attributes["name"] = StringAttr(
                f"{scope.data}.{kind}" if isinstance(scope, StringAttr) else kind
            )


def _opr_name(op: T.MgbOp) -> str | None:
    """The operator name MegEngine's tracer gives a traced op (``OpDef::make_name``: scope and
    type, e.g. ``layer1.0.RELU``); ``None`` for constants and ops MegEngine leaves unnamed. A
    traced op's ``name`` attribute is its var's name (the user's ``x.name = ...``), not this."""
    opr_name = op.attributes.get("opr_name")
    if isinstance(opr_name, StringAttr):
        return opr_name.data
    if isinstance(op, T.ConstOp):
        return None
    if isinstance(op, T.AxisAddRemoveOp) and isinstance(op.src.owner, T.ReduceOp):
        op = op.src.owner  # F.sum/F.mean without keepdims: one op, Reduce + AxisAddRemove oprs
    kind = traced_kind(op)
    if kind is None:
        name = op.attributes.get("name")
        return name.data if isinstance(name, StringAttr) else None
    scope = op.attributes.get("scope")
    return f"{scope.data}.{kind}" if isinstance(scope, StringAttr) else kind


def _dependency_order(fn: func.FuncOp) -> list[T.MgbOp]:
    """The function's ops in MegEngine's ``cg::DepOprIter`` order from the outputs: inputs first,
    depth first."""
    ret = fn.body.block.last_op
    if not isinstance(ret, func.ReturnOp):
        return []
    order: list[T.MgbOp] = []
    seen: set[int] = set()
    for v in ret.arguments:
        stack: list[tuple[Operation, bool]] = [(v.owner, False)] if isinstance(v.owner, Operation) else []
        while stack:
            op, expanded = stack.pop()
            if expanded:
                if isinstance(op, T.MgbOp):
                    order.append(op)
                continue
            if id(op) in seen:
                continue
            seen.add(id(op))
            stack.append((op, True))
            for operand in reversed(op.operands):
                if isinstance(operand.owner, Operation) and id(operand.owner) not in seen:
                    stack.append((operand.owner, False))
    return order


def dedup_traced_names(fn: func.FuncOp) -> None:
    """MegEngine's ``TraceResult::dump``: each traced op is named after its scope and type
    (``opr_name``); operators sharing a name, in dependency order from the outputs, are renamed
    ``name[0]``, ``name[1]``, ... (e.g. ``Reduce[0]`` .. ``Reduce[3]`` for two ``F.mean`` calls, or
    ``layer1.0.RELU[1]``), and so is their var unless the user named it. The names are set
    explicitly, so the optimizer keeps them on the ops that replace these."""
    groups: dict[str, list[T.MgbOp]] = {}
    for op in _dependency_order(fn):
        name = _opr_name(op)
        if name is not None:
            groups.setdefault(name, []).append(op)
    for name, ops in groups.items():
        for i, op in enumerate(ops):
            new = f"{name}[{i}]" if len(ops) > 1 else name
            var = op.attributes.get("name")
            if isinstance(var, StringAttr) and not isinstance(op.attributes.get("opr_name"), StringAttr):
                # a user-named var: the operator keeps its own name, the var the user's (MegEngine
                # rewrites the operator's name where it occurs in the var's)
                op.attributes["opr_name"] = StringAttr(new)
                op.attributes["name"] = StringAttr(var.data.replace(name, new, 1))
            elif len(ops) > 1:
                op.attributes["name"] = StringAttr(new)
                if "opr_name" in op.attributes:
                    op.attributes["opr_name"] = StringAttr(new)


def add_assert_checks(
    module: ModuleOp,
    input_names: Sequence[str],
    output_names: Sequence[str] | None,
    cases: list[dict[str, np.ndarray]],
    *,
    maxerr: float,
    verbose: bool,
) -> list[str]:
    """MegEngine's ``trace.dump(input_data=..., no_assert=False)``: each output ``o`` is checked by
    an AssertEqual against a new input ``o:expect`` (its value in each test case, computed here),
    with MegBrain's error ``max(|expect - o| / max(min(|expect|, |o|), 1))``; the checks' results
    become the graph's outputs. Returns the new inputs' names; ``cases`` get their values."""
    from semantics import run_module

    fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
    block = fn.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    names = _output_var_names(fn, output_names)
    shapes = [tuple(a.type.get_shape()) for a in block.args]  # type: ignore[attr-defined]
    for case in cases:
        # MegEngine holds a scalar input as shape (1,): the trace's own shape runs it here
        args = [np.reshape(case[n], s) if np.size(case[n]) == math.prod(s) else case[n]
                for n, s in zip(input_names, shapes, strict=True)]  # fmt: skip
        outs = run_module(module, args)
        for name, value in zip(names, outs, strict=True):
            case[f"{name}:expect"] = np.asarray(value)
    checks: list[SSAValue] = []
    for name, get in zip(names, list(ret.arguments), strict=True):
        expect = block.insert_arg(get.type, len(block.args))
        label = f"assert_eq({name}:expect,{name})"
        checks.append(_assert_equal(block, ret, expect, get, maxerr, verbose, label))
    ret.operands = checks
    fn.function_type = FunctionType.from_lists([a.type for a in block.args], [c.type for c in checks])
    expect_names = [f"{n}:expect" for n in names]
    fn.attributes["input_names"] = ArrayAttr([StringAttr(n) for n in [*input_names, *expect_names]])
    var_attr = fn.attributes.get("xmge.input_var_names")
    if isinstance(var_attr, ArrayAttr):
        fn.attributes["xmge.input_var_names"] = ArrayAttr([*var_attr.data, *(StringAttr("") for _ in names)])
    return expect_names


def _output_var_names(fn: func.FuncOp, output_names: Sequence[str] | None) -> list[str]:
    """The names the outputs' vars are dumped with (the ``:expect`` inputs are named after them)."""
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    input_names = [a.data for a in fn.attributes["input_names"].data]  # type: ignore[attr-defined]
    names = []
    for i, v in enumerate(ret.arguments):
        given = output_names[i] if output_names is not None else ""
        if given:
            names.append(given)
        elif isinstance(v.owner, Block):
            names.append(input_names[v.index])  # type: ignore[attr-defined]
        else:
            op = v.owner
            var = op.attributes.get("name")
            opr = _opr_name(op) if isinstance(op, T.MgbOp) else None
            names.append(var.data if isinstance(var, StringAttr) else opr or f"unnamed{i}")
    return names


def _assert_equal(
    block: Block, before: Operation, expect: SSAValue, get: SSAValue, maxerr: float, verbose: bool, name: str
) -> SSAValue:
    """``AssertEqual(expect, get, err)`` with MegBrain's ``AssertEqual::make`` error sub-graph."""
    from dialects import enums

    E = enums.ElemwiseMode

    def add(op: T.MgbOp) -> SSAValue:
        block.insert_op_before(op, before)
        return op.results[0]

    def elemwise(mode: Any, *operands: SSAValue) -> SSAValue:
        return add(T.ElemwiseOp.make(list(operands), mode=mode))

    a, b = expect, get
    elem = a.type.element_type  # type: ignore[attr-defined]
    if not is_float(elem):
        f32 = TensorType(Float32Type(), a.type.get_shape())  # type: ignore[attr-defined]
        a, b = add(T.TypeCvtOp.make([a], [f32])), add(T.TypeCvtOp.make([b], [f32]))
        elem = Float32Type()
    one = add(T.ConstOp.from_numpy(np.ones((1,), numpy_dtype(elem)), elem))
    diff = elemwise(E.ABS, elemwise(E.SUB, a, b))
    scale = elemwise(E.MAX, elemwise(E.MIN, elemwise(E.ABS, a), elemwise(E.ABS, b)), one)
    ratio = elemwise(E.TRUE_DIV, diff, scale)
    n = math.prod(ratio.type.get_shape())  # type: ignore[attr-defined]
    flat = add(T.ReshapeOp.make([ratio], [TensorType(elem, [n])]))
    err = add(T.ReduceOp.make([flat], mode=enums.ReduceMode.MAX, axis=0))
    check = T.AssertEqualOp.make([expect, get, err], maxerr=maxerr, verbose=verbose)
    check.attributes["name"] = StringAttr(name)
    return add(check)


def _name_traced_output_casts(fn: func.FuncOp) -> None:
    """A traced TypeCvt that is an output keeps its own name (``simple.dequant.TypeCvt``):
    named explicitly, it is not taken for a float16 pass's cast back (``name_converted_outputs``)."""
    ret = fn.body.block.last_op
    if not isinstance(ret, func.ReturnOp):
        return
    for v in ret.arguments:
        op = v.owner
        if isinstance(op, T.TypeCvtOp) and "name" not in op.attributes:
            name = _opr_name(op)
            if name is not None:
                op.attributes["name"] = StringAttr(name)


# MegDNN's commutable elemwise modes: MegBrain's Elemwise orders their two inputs by var id
_COMMUTABLE = frozenset(
    {"ADD", "FUSE_ADD_RELU", "FUSE_ADD_SIGMOID", "FUSE_ADD_TANH", "MUL", "RMULH", "MAX", "MIN", "EQ"}
    | {"LOG_SUM_EXP"}
)


def order_traced_graph(fn: func.FuncOp) -> None:
    """The graph ``TraceResult::dump`` builds from a trace. Its nodes are numbered as they are made
    (an operator, then each of its vars): the inputs, then every constant in trace order, then
    the ops in trace order. As each node is made MegBrain's ``GraphOptimizer`` applies, and all of
    it is visible in the file:

    * an op equal to one made before (same kind, params and inputs) is that one (``insert_pre``),
      and so is a constant of at most 28 elements equal to one made before (its ``DevValueCache``):
      two ``F.relu(x)`` are one RELU, two zero biases of a Linear(3, 3) one constant;
    * an op whose inputs are all constants, with one result of under 1024 elements, is replaced by
      a new constant (``replace_const_var``);
    * a commutable elemwise op's two inputs are ordered by var id (``2 * x`` is ``MUL(x, const<2>)``);
    * an unnamed constant is named after its value or shape and its id (``const<2>[2]``)."""
    block = fn.body.block
    var_id: dict[SSAValue, int] = {}
    made: dict[Any, list[SSAValue]] = {}
    next_id = 0
    for a in block.args:
        var_id[a] = next_id + 1
        next_id += 2
    for c in [op for op in block.ops if isinstance(op, T.ConstOp)]:
        key = _const_key(c)
        if key is not None and key in made and _same_value(c, made[key][0]):
            _replace(block, c, made[key])  # the cached var itself: no new operator, no ids
            continue
        if key is not None:
            made[key] = [c.output]
        var_id[c.output] = next_id + 1
        if "name" not in c.attributes:
            c.attributes["name"] = StringAttr(f"{_const_summary(c)}[{next_id}]")
        next_id += 2
    for op in list(block.ops):
        if isinstance(op, T.ConstOp) or not isinstance(op, T.MgbOp):
            continue
        if isinstance(op, T.ElemwiseOp) and len(op.operands) == 2 and op.params()["mode"].name in _COMMUTABLE:
            a, b = op.operands
            if var_id.get(b, -1) < var_id.get(a, -1):
                op.operands = [b, a]
        row = BY_IR_OP.get(type(op))
        workspace = 1 if row is not None and row.kind in WORKSPACE_KINDS else 0
        first_id = next_id
        next_id += 1 + len(op.results) + workspace
        key = _op_key(op)
        if key is not None and key in made:
            user_name = op.attributes.get("name")
            kept = made[key]
            if isinstance(user_name, StringAttr) and isinstance(kept[0].owner, Operation):
                kept[0].owner.attributes["name"] = user_name  # the var takes the newest name given
            _replace(block, op, kept)
            continue
        for k, r in enumerate(op.results):
            var_id[r] = first_id + 1 + k
        folded = _fold(op)
        if folded is None:
            if key is not None:
                made[key] = list(op.results)
            continue
        user_name = op.attributes.get("name")
        block.insert_op_before(folded, op)
        _replace(block, op, [folded.output])
        default = StringAttr(f"{_const_summary(folded)}[{next_id}]")
        folded.attributes["name"] = user_name if isinstance(user_name, StringAttr) else default
        var_id[folded.output] = next_id + 1
        next_id += 2
        if key is not None:
            made[key] = [folded.output]


_NAMING_ATTRS = frozenset({"name", "opr_name", "scope"})


def _hashable(attr: Any) -> Any:
    try:
        hash(attr)
    except TypeError:
        return str(attr)
    return attr


def _op_key(op: T.MgbOp) -> Any:
    """What makes two traced ops the same operator for MegBrain (kind, params, inputs, result
    types); None for ops without inputs, which are never merged."""
    if not op.operands:
        return None
    props = tuple(sorted((k, _hashable(v)) for k, v in op.properties.items()))
    attrs = tuple(sorted((k, _hashable(v)) for k, v in op.attributes.items() if k not in _NAMING_ATTRS))
    return (op.name, tuple(op.operands), props, attrs, tuple(str(r.type) for r in op.results))


# MegBrain's ImmutableTensor::DevValueCache::MAX_SIZE (TensorLayout::MAX_NDIM * 4): larger constants
# are never merged
_MAX_MERGED_CONST_ELEMENTS = 7 * 4


def _const_key(op: T.ConstOp) -> Any:
    if op.value.is_elided or math.prod(op.output.type.get_shape()) > _MAX_MERGED_CONST_ELEMENTS:
        return None
    return ("const", str(op.output.type), op.value.digest.data)


def _same_value(op: T.ConstOp, other: SSAValue) -> bool:
    """Equal bytes, checked where the digests match."""
    return isinstance(other.owner, T.ConstOp) and op.value.data.data == other.owner.value.data.data


def _replace(block: Block, op: Operation, values: Sequence[SSAValue]) -> None:
    for r, v in zip(op.results, values, strict=True):
        r.replace_all_uses_with(v)
    block.erase_op(op)


_MAX_CONST_FOLDING_SIZE = 1024  # MegBrain's graph_opt.cpp


def _fold(op: T.MgbOp) -> T.ConstOp | None:
    """``op``'s value as a constant where MegBrain folds it as the op is made: all its inputs are
    constants and it has one result of fewer than 1024 elements."""
    from passes.inference.common import const_of_type
    from semantics.interpreter import result_specs
    from semantics.kernels import KERNELS

    if not op.operands or len(op.results) != 1:
        return None
    if any(not isinstance(v.owner, T.ConstOp) for v in op.operands):
        return None
    (result,) = op.results
    if math.prod(result.type.get_shape()) >= _MAX_CONST_FOLDING_SIZE:  # type: ignore[attr-defined]
        return None
    kernel = KERNELS.get(type(op))  # type: ignore[arg-type]
    if kernel is None:
        return None
    args = [v.owner.numpy() for v in op.operands]  # type: ignore[union-attr]
    try:
        (out,) = kernel(args, result_specs(op), **op.params())
    except (NotImplementedError, ValueError, TypeError, ArithmeticError):
        return None  # left to run time, where the error names the op
    return const_of_type(out, result.type)  # type: ignore[arg-type]


def _const_summary(op: T.ConstOp) -> str:
    """MegBrain's ``ImmutableTensor`` summary: ``const<v>`` (``%.3g``) for one element (with the
    shape after it unless 1-d), else ``const{d0,d1,...}``."""
    shape = tuple(op.output.type.get_shape()) or (1,)  # MegEngine holds scalars as shape (1,)
    if math.prod(shape) == 1 and not op.value.is_elided:
        value = float(np.asarray(op.numpy(), dtype=np.float64).reshape(-1)[0])
        text = "const<" + _format_g3(value) + ">"
        return text if len(shape) == 1 else text + "{" + ",".join(map(str, shape)) + "}"
    return "const{" + ",".join(map(str, shape)) + "}"


def _format_g3(value: float) -> str:
    """C's ``%.3g`` (Python's ``g`` differs only in inf/nan spelling)."""
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return f"{value:.3g}"


def strip_info(graph: LoweredGraph, content_hash: int) -> dict[str, Any]:
    """The strip-info record of a dumped graph (C++ type, dtype and elemwise-mode names)."""
    from dialects import enums

    kinds = {BY_KIND[o.kind].typeinfo for o in graph.oprs}
    dtypes: set[str] = set()
    modes: set[str] = set()
    for o in graph.oprs:
        for t in o.tensors:
            dtypes.add(_CPP_DTYPE.get(t.dtype.name, t.dtype.name))
        if o.kind in WORKSPACE_KINDS:
            dtypes.add("Byte")
        if o.kind == "Elemwise":
            modes.add(enums.from_number(enums.ElemwiseMode, o.params[0][1]["mode"]).name)
        if o.kind in ("GetVarShape",):
            dtypes.add("Int32")
        if o.output_dtype is not None:
            dtypes.add(_CPP_DTYPE.get(o.output_dtype.name, o.output_dtype.name))
        if o.kind == "TypeCvt":
            dtypes.add(_CPP_DTYPE.get(o.params[0][1]["dtype"].name, o.params[0][1]["dtype"].name))
    return {
        "dtypes": sorted(dtypes),
        "elemwise_modes": sorted(modes),
        "opr_types": sorted(kinds),
        "hash": content_hash,
    }


def _merge_strip_info(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    merged = dict(old)
    for key, values in old.items():
        if key == "hash" or not isinstance(values, list) or key not in new:
            continue
        merged[key] = values + [v for v in new[key] if v not in values]
    merged["hash"] = new["hash"]
    return merged


def _write_strip_info(
    target: str | os.PathLike[str] | IO[str], info: dict[str, Any], append_json: bool
) -> None:
    if isinstance(target, str | os.PathLike):
        old_text = ""
        if os.path.exists(target):
            with open(target) as f:
                old_text = f.read()
        if append_json and old_text.strip():
            info = _merge_strip_info(json.loads(old_text), info)
        atomic_write(target, lambda f: f.write(json.dumps(info).encode()))
        return
    if append_json:
        target.seek(0)
        old_text = target.read()
        if old_text.strip():
            info = _merge_strip_info(json.loads(old_text), info)
    target.seek(0)
    target.truncate()
    target.write(json.dumps(info))


def _positional_count(names: Sequence[str]) -> int:
    n = 0
    for name in names:
        if re.fullmatch(r"arg_\d+", name) and name == f"arg_{n}":
            n += 1
        else:
            break
    return n


def dump(
    tr: Any,
    file: str | os.PathLike[str] | IO[bytes],
    *,
    arg_names: str | Sequence[str | None] | None = None,
    output_names: str | Sequence[str] | None = None,
    append: bool = False,
    keep_var_name: int = 1,
    keep_opr_name: bool = False,
    keep_param_name: bool = False,
    keep_opr_priority: bool = False,
    no_change_graph: bool = False,
    strip_info_file: str | os.PathLike[str] | IO[str] | None = None,
    append_json: bool = False,
    optimize_for_inference: bool = True,
    user_info: Any = None,
    enable_metadata: bool = True,
    dump_format: str | None = None,
    model_version: int = 2,
    **kwargs: Any,
) -> DumpResult:
    """Serializes the last trace to ``file`` as a MegEngine ``.mge`` graph (MegEngine 1.13's
    ``trace.dump``; the trace must be made with ``capture_as_const=True``).

    :param file: a path (written atomically) or a binary file object.
    :param arg_names: names of the graph's inputs, in positional order (default ``arg_0, ...``).
    :param output_names: names of the outputs (not for a function returning a dict).
    :param append: append the graph to an existing file (a multi-graph file; readers take graph 0).
    :param keep_var_name: 0 drops every var name, 1 keeps the inputs' and outputs', 2 keeps all.
    :param keep_opr_name: keep operator names.
    :param keep_param_name: keep parameter names (no visible effect on traced constants).
    :param keep_opr_priority: keep operator priorities.
    :param no_change_graph: serialize the graph as traced (no name de-duplication fix-ups).
    :param strip_info_file: where to write the strip-info JSON (operators, dtypes, hash).
    :param append_json: merge into an existing strip-info file instead of replacing it.
    :param optimize_for_inference: run MegEngine's inference optimizations (default True); the
        ``enable_*`` keywords below pick options and are ignored without it.
    :param user_info: any picklable object stored in the metadata.
    :param enable_metadata: store metadata (optimize options, user info).
    :param dump_format: ``"FBS_V2"`` (default) or ``"FBS"`` (the older FlatBuffers v1 format).
    :param model_version: FBS v2 model version (2).
    :param kwargs: ``optimize_for_inference`` options: ``enable_io16xc32``, ``enable_ioc16``,
        ``enable_hwcd4``, ``enable_nchw4``, ``enable_nchw88``, ``enable_nchw44``,
        ``enable_nchw44_dot``, ``enable_nchw32``, ``enable_chwn4``, ``enable_nchw64``,
        ``enable_fuse_conv_bias_nonlinearity``, ``enable_fuse_conv_bias_with_z``,
        ``enable_fuse_grain`` (see ``passes.inference.options``); MegEngine's test-case options
        (``input_data``, ``repeat``, ``silent``, ``no_assert``, ``maxerr``, ``resize_input``,
        ``input_transform``): ``input_data`` writes load_and_run test cases (``compiler.test_cases``)
        and needs ``no_assert=True``.
    :return: a ``DumpResult``: operator count, bytes, weight bytes, content hash, input and output
        names.
    """
    if not getattr(tr, "capture_as_const", False):
        raise ValueError("you must specify capture_as_const=True at __init__ to use dump")
    if getattr(tr, "_last", None) is None:
        raise ValueError(
            f"{tr.__name__} has not been traced yet: call it once with example inputs before dump"
        )
    kwargs = dict(kwargs)
    case_opts = {k: kwargs.pop(k) for k in TEST_CASE_OPTIONS if k in kwargs}
    input_data = case_opts.get("input_data")
    options = check_options(kwargs)
    module, rebuild = tr._last
    fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
    training = fn.attributes.get("xmge.training_only")
    if isinstance(training, ArrayAttr):
        ran = "; ".join(a.data for a in training.data if isinstance(a, StringAttr))
        raise TrainingGraphError(
            f"cannot dump {tr.__name__}: the trace ran training-only computations ({ran}); call "
            "module.eval() before tracing to dump an inference graph"
        )
    n_out = len(fn.function_type.outputs.data)
    sample = rebuild(list(range(n_out)))
    if isinstance(sample, dict):
        if output_names is not None:
            raise TypeError("cannot specify output_names when the traced function returns a dict")
        out_names: list[str] | None = [str(k) for k in sample]
    else:
        out_names = _as_names(output_names, n_out, "output_names")
    traced_inputs = [a.data for a in fn.attributes["input_names"].data]  # type: ignore[attr-defined]
    n_pos = _positional_count(traced_inputs)
    given = _as_names(arg_names, n_pos, "arg_names")
    var_attr = fn.attributes.get("xmge.input_var_names")
    var_names = (
        [a.data for a in var_attr.data] if isinstance(var_attr, ArrayAttr) else [""] * len(traced_inputs)
    )
    # MegEngine's TraceResult::dump: names given to dump first (arg_names), then the input tensors'
    # own names (Tensor(..., name="data")), then the defaults (arg_N, the keyword)
    prefer = given is not None
    inputs = []
    for i, (default, var_name) in enumerate(zip(traced_inputs, var_names, strict=True)):
        name = given[i] if given is not None and i < n_pos else default
        inputs.append((name if prefer and name else var_name or name) or default)

    # a trace compiled at opt_level >= 1 (MegEngine's default 2) simplifies log(exp(x)) and the
    # like as its graph is built, so its dumps have them simplified whatever the dump options
    simplify: list[Any] = [ElemwiseSimplifyPass()] if getattr(tr, "opt_level", 2) >= 1 else []
    traced_fn = run_passes(module, [*simplify, SplitReduceSqueezePass()])
    traced_main = next(op for op in traced_fn.ops if isinstance(op, func.FuncOp))
    order_traced_graph(traced_main)
    dedup_traced_names(traced_main)
    _name_traced_output_casts(traced_main)
    cases: list[dict[str, np.ndarray]] | None = None
    if input_data is not None:
        from compiler.test_cases import make_cases

        cases = make_cases(
            traced_main,
            inputs,
            input_data,
            repeat=int(case_opts.get("repeat", 1)),
            resize_input=bool(case_opts.get("resize_input", False)),
            input_transform=case_opts.get("input_transform"),
        )
        if not case_opts.get("no_assert", False):
            expect_names = add_assert_checks(
                traced_fn,
                inputs,
                out_names,
                cases,
                maxerr=float(case_opts.get("maxerr", 1e-4)),
                verbose=not case_opts.get("silent", False),
            )
            inputs = [*inputs, *expect_names]
            out_names = None  # the outputs are now the checks' (MegEngine names them after them)
    ignored = sorted(k for k, v in options.items() if v and k.startswith("enable_"))
    if ignored and not optimize_for_inference:
        # MegEngine drops these silently; a user who asked for a layout would not know it never happened
        warnings.warn(
            f"{', '.join(ignored)} ignored: optimize_for_inference=False turns every inference option off",
            UserWarning,
            stacklevel=2,
        )
    work = run_passes(traced_fn, pipeline_for(optimize_for_inference=optimize_for_inference, **options))
    wfn = next(op for op in work.ops if isinstance(op, func.FuncOp))
    wfn.attributes["input_names"] = ArrayAttr([StringAttr(n) for n in inputs])
    name_converted_outputs(wfn)
    if enable_metadata:
        meta = Metadata(
            is_valid=True,
            optimize_options=(
                InferenceOptions.from_kwargs(options).metadata_word() if optimize_for_inference else 0
            ),
            user_info=pickle.dumps(user_info),
        )
    else:
        meta = Metadata(is_valid=False, optimize_options=0, user_info=b"")
    res = write_graph(
        wfn,
        dump_format=dump_format or "FBS_V2",
        model_version=model_version,
        keep_var_name=keep_var_name,
        keep_opr_name=keep_opr_name,
        keep_opr_priority=keep_opr_priority,
        no_change_graph=no_change_graph,
        output_names=[n for n in out_names] if out_names is not None else None,
        metadata=meta,
    )
    # keep_param_name only names SharedDeviceTensor weights; traced weights are ImmutableTensor
    # (anonymous), exactly as in MegEngine, so it has no visible effect here.
    del keep_param_name

    data = res.data
    if cases is not None:
        from compiler.test_cases import wrap

        data = wrap(res.data, cases, dump_format or "FBS_V2")
    if isinstance(file, str | os.PathLike):
        if append and os.path.exists(file):
            with open(file, "rb") as f:
                data = f.read() + data
        atomic_write(file, lambda f: f.write(data))
    else:
        file.write(data)
    if strip_info_file is not None:
        _write_strip_info(strip_info_file, strip_info(res.graph, res.content_hash), append_json)
    g = res.graph
    names = g.var_names
    return DumpResult(
        nr_opr=len(g.oprs),
        tot_bytes=len(res.data),
        tensor_value_bytes=sum(len(t.data or b"") for o in g.oprs for t in o.tensors),
        content_hash=res.content_hash,
        inputs=sorted(inputs),
        outputs=[names[v] if keep_var_name else f"unnamed{i}" for i, v in enumerate(g.outputs)],
    )


__all__ = ["dump", "DumpResult"]


def dump_module(module: ModuleOp, *, dump_format: str | None = None, **kwargs: Any) -> bytes:
    """A model that is already IR (read from ONNX or a ``.mge``) as ``.mge`` bytes, optimized with
    ``optimize_for_inference`` keywords exactly as :func:`dump` optimizes a trace, metadata included
    (``xmge convert``)."""
    options = check_options(dict(kwargs))
    work = run_passes(module, pipeline_for(**options))
    fn = next(op for op in work.ops if isinstance(op, func.FuncOp))
    meta = Metadata(
        is_valid=True,
        optimize_options=InferenceOptions.from_kwargs(options).metadata_word(),
        user_info=pickle.dumps(None),
    )
    return write_graph(fn, dump_format=dump_format or "FBS_V2", metadata=meta).data
