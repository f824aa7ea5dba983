"""ONNX (opsets 7 to 28) → ``mgb`` dialect: the same IR the tracer and the ``.mge`` reader produce.

``read_onnx(path_or_bytes) -> ModuleOp`` builds one ``func.func @main``: graph inputs become block
arguments (``input_names``), graph outputs the ``func.return`` operands (``output_names``),
initializers ``mgb.const`` ops named after them (lazily, right before their first real use, so
constants that only feed shape computations leave no trace). Every emitted op carries the ONNX
value it computes as ``name``.

xmge's ops are static, so every value that only depends on constants and shapes (Shape, Gather,
Concat, Range, ConstantOfShape, ... subgraphs) is evaluated while importing with ONNX's own numpy
reference implementation (``onnx.reference``) and folded into the consumers' static parameters.

ONNX has no int64 in xmge (nor in MegEngine): int64 values become int32 (an error if one does not
fit), float64 values float32. An operator xmge cannot express exactly raises
:class:`OnnxImportError` naming the op type, the node and the opset.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, IntegerType, ModuleOp, Signedness, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from backends.onnx import limits
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import DTypeError, QuantizedType, element_type, is_float, numpy_dtype
from dialects.errors import XmgeError
from dialects.registration import registering
from semantics.kernels import OnnxResizeAxis, interp_matrix, onnx_resize_matrix

E = enums.ElemwiseMode
# Opsets 7-28: every version of the claimed ops' definitions from 7 on; the handlers read the
# version-specific forms (attributes that became inputs, changed defaults and semantics).
MIN_OPSET, MAX_OPSET = 7, 28
ONNX_DOMAINS = ("", "ai.onnx")

# Ops never evaluated at import time even when every input is known (random ops would bake one
# sample into the model; a per-tensor DequantizeLinear of a weight stays a quantized constant).
_NEVER_FOLD = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
    "DequantizeLinear",
    "QuantizeLinear",
}


class OnnxImportError(XmgeError, ValueError):
    """An ONNX model xmge cannot import: malformed, or using an op (or an op's option) that xmge
    cannot express exactly. The message names the op type, the node and the opset."""


@dataclass
class _Value:
    """An ONNX value while importing: known (``const``, in its ONNX dtype) and/or in the IR."""

    type: TensorType
    const: np.ndarray | None = None
    ssa: SSAValue | None = None
    initializer: str | None = None  # the initializer's name: the mgb.const is named after it


# ONNX's narrow types that xmge holds exactly in a wider one (every value representable)
_WIDENED = {
    "int4": "int8",
    "int2": "int8",
    "uint4": "uint8",
    "uint2": "uint8",
    "bfloat16": "float32",
    "float8_e4m3fn": "float32",
    "float8_e4m3fnuz": "float32",
    "float8_e5m2": "float32",
    "float8_e5m2fnuz": "float32",
    "float8_e8m0fnu": "float32",
    "float4_e2m1fn": "float32",
}
# ops whose result only depends on their narrow-typed inputs' values (not on the type's overflow
# or rounding): a graph input they alone read may be widened
_READS_VALUES_ONLY = {"Cast", "CastLike", "DequantizeLinear"}


def _reads_zero_point(proto: Any, name: str) -> bool:
    """Whether a node reads ``name`` only as QuantizeLinear's zero point: a value it needs at
    compile time, whose ONNX dtype (kept with the constant) gives the result's range."""
    return (
        proto.op_type == "QuantizeLinear"
        and list(proto.input).index(name) == 2
        and name not in proto.input[:2]
    )


def _narrow(array: np.ndarray, what: str) -> np.ndarray:
    """An ONNX array in the dtype xmge stores it in (int64 → int32, float64 → float32, the narrow
    types of :data:`_WIDENED` widened)."""
    a = np.asarray(array)
    if a.dtype.name in _WIDENED:
        return a.astype(_WIDENED[a.dtype.name])
    if a.dtype == np.uint64:
        if a.size and a.max() > 2**32 - 1:
            raise OnnxImportError(f"{what}: integer values beyond uint32 (xmge has no uint64)")
        return a.astype(np.uint32)
    if a.dtype.kind == "i" and a.dtype.itemsize > 4:
        if a.size and (a.min() < -(2**31) or a.max() > 2**31 - 1):
            raise OnnxImportError(f"{what}: integer values beyond int32 (xmge has no int64)")
        return a.astype(np.int32)
    if a.dtype == np.float64:
        return a.astype(np.float32)
    return a


def _type_of(array: np.ndarray, what: str) -> TensorType:
    """The IR type of an ONNX array; int64 values are only checked to fit int32 if the array
    reaches the IR (INT64_MAX as a Slice end never does)."""
    a = np.asarray(array)
    dtype = _WIDENED.get(a.dtype.name, a.dtype)
    try:
        return TensorType(element_type(dtype), list(a.shape))
    except DTypeError as exc:
        raise OnnxImportError(f"{what}: {exc}") from None


def _shape(t: Attribute) -> tuple[int, ...]:
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _axis(axis: int, rank: int, node: _Node) -> int:
    if not -rank <= axis < rank:
        raise node.fail(f"axis {axis} is out of range for a rank-{rank} input")
    return axis % rank


# ----------------------------------------------------------------------------------------------
# Importer state and per-node helpers


class _Importer:
    def __init__(
        self,
        model: Any,
        input_shapes: dict[str, Sequence[int]] | None,
        input_values: dict[str, Any] | None = None,
        origin: str = "<onnx model>",
    ) -> None:
        import onnx

        self.onnx = onnx
        self.model = model
        self.origin = origin
        self.widened: dict[str, str] = {}  # graph inputs held in a wider dtype -> their ONNX dtype
        self.fold_seconds = 0.0
        self.folded_bytes = 0
        self.total_bytes = 0  # every initializer, folded value and graph value (XMGE_MAX_TOTAL_BYTES)
        for _ in _subgraph_nodes(model.graph):  # the nesting limit holds before any subgraph is read
            pass
        self.opset = self._opset(model)
        self.values: dict[str, _Value] = {}
        self.unusable: set[str] = set()
        graph = model.graph
        inits = {t.name for t in graph.initializer}
        for t in graph.initializer:
            # the declared size first: a hostile dims list must not make to_array allocate it
            count = math.prod(int(d) for d in t.dims) if all(d >= 0 for d in t.dims) else 0
            try:
                itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
            except (KeyError, ValueError, TypeError):
                itemsize = 1  # to_array below names the bad type
            self._check_tensor_bytes(
                None, count * itemsize, f"initializer {t.name!r} of shape {tuple(t.dims)}"
            )
            try:
                array = onnx.numpy_helper.to_array(t)
            except Exception as exc:  # external data not found, unsupported type, ...
                raise OnnxImportError(f"initializer {t.name!r} cannot be read: {exc}") from None
            self.values[t.name] = _Value(
                _type_of(array, f"initializer {t.name!r}"), array, initializer=t.name
            )
        declared = [i for i in graph.input if i.name not in inits]
        bound = dict(input_values or {})
        self.inputs = [i for i in declared if i.name not in bound]
        self.input_names = [i.name for i in self.inputs]
        overrides = dict(input_shapes or {})
        for option, names in (("input_shapes", overrides), ("input_values", bound)):
            unknown = set(names) - {i.name for i in declared}
            if unknown:
                raise OnnxImportError(
                    f"{option} names {sorted(unknown)}, which are not graph inputs "
                    f"{[i.name for i in declared]}"
                )
        for info in declared:
            if info.name in bound:
                self.values[info.name] = self._bound_value(info, bound[info.name])
        arg_types = [self._input_type(i, overrides.get(i.name)) for i in self.inputs]
        for info, t in zip(self.inputs, arg_types, strict=True):
            if isinstance(t, TensorType) and not isinstance(t.element_type, QuantizedType):
                nbytes = math.prod(t.get_shape()) * numpy_dtype(t.element_type).itemsize
                self._check_tensor_bytes(None, nbytes, f"graph input {info.name!r} ({t})")
        self.block = Block(arg_types=arg_types)
        for i, arg in zip(self.inputs, self.block.args, strict=True):
            self.values[i.name] = _Value(arg.type, ssa=arg)  # type: ignore[arg-type]

    @staticmethod
    def _opset(model: Any) -> int:
        versions = [o.version for o in model.opset_import if o.domain in ONNX_DOMAINS]
        if not versions:
            raise OnnxImportError("the model imports no version of the default ONNX domain (ai.onnx)")
        opset = versions[0]
        if 1 <= opset < MIN_OPSET:
            # an older model reads the same as at opset 7 when each of its ops is defined alike there
            from onnx import defs

            for proto in _subgraph_nodes(model.graph):
                if proto.domain not in ONNX_DOMAINS:
                    continue
                try:
                    same = (
                        defs.get_schema(proto.op_type, opset, "").since_version
                        == defs.get_schema(proto.op_type, MIN_OPSET, "").since_version
                    )
                except Exception:  # noqa: BLE001 - an op unknown at either opset
                    same = False
                if not same:
                    raise OnnxImportError(
                        f"opset {opset} is not supported: its {proto.op_type} differs from opset "
                        f"{MIN_OPSET}'s (xmge imports opsets {MIN_OPSET} to {MAX_OPSET}; convert the model "
                        "with "
                        "onnx.version_converter first)"
                    )
            return opset
        if not MIN_OPSET <= opset <= MAX_OPSET:
            raise OnnxImportError(
                f"opset {opset} is not supported: xmge imports opsets {MIN_OPSET} to {MAX_OPSET} "
                "(convert the model with onnx.version_converter first)"
            )
        return opset

    def _reader_of(self, name: str) -> str:
        """`` (read by <op> node <name>, opset N)`` for an error about graph input ``name``."""
        for proto in self.model.graph.node:
            if name in proto.input:
                label = proto.name or (proto.output[0] if proto.output else "")
                return f" (read by {proto.op_type} node {label!r}, opset {self.opset})"
        return ""

    def _np_dtype(self, info: Any) -> np.dtype:
        tt = info.type.tensor_type
        if not info.type.HasField("tensor_type"):
            raise OnnxImportError(f"graph input {info.name!r}{self._reader_of(info.name)} is not a tensor")
        try:
            return np.dtype(self.onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, ValueError, TypeError):
            raise OnnxImportError(
                f"graph input {info.name!r}{self._reader_of(info.name)} has element type code "
                f"{tt.elem_type}, which is not an ONNX tensor type"
            ) from None

    def _bound_value(self, info: Any, value: Any) -> _Value:
        """A graph input whose value is given at import (``input_values``): a constant."""
        want = self._np_dtype(info)
        a = np.asarray(value)
        if a.dtype != want and not (a.dtype.kind == want.kind and np.can_cast(a.dtype, want)):
            raise OnnxImportError(f"input_values[{info.name!r}] is {a.dtype}, the graph input is {want}")
        a = a.astype(want)
        dims = info.type.tensor_type.shape.dim
        if info.type.tensor_type.HasField("shape") and (
            len(dims) != a.ndim
            or any(d.HasField("dim_value") and d.dim_value != n for d, n in zip(dims, a.shape, strict=False))
        ):
            declared = [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in dims]
            raise OnnxImportError(
                f"input_values[{info.name!r}] has shape {a.shape}, which the graph input's {declared} "
                "does not allow"
            )
        return _Value(_type_of(a, f"input_values[{info.name!r}]"), a)

    def _input_type(self, info: Any, override: Sequence[int] | None) -> TensorType:
        tt = info.type.tensor_type
        np_dtype = self._np_dtype(info)
        if override is not None:
            shape = [int(d) for d in override]
        else:
            shape = []
            for k, d in enumerate(tt.shape.dim):
                if not d.HasField("dim_value") or d.dim_value < 0:
                    label = d.dim_param or "?"
                    raise OnnxImportError(
                        f"graph input {info.name!r} has a dynamic dimension {k} ({label!r}); xmge needs "
                        f"static shapes: pass input_shapes={{{info.name!r}: (...)}}"
                    )
                shape.append(int(d.dim_value))
        if np_dtype.name in _WIDENED:
            self.widened[info.name] = np_dtype.name
            readers = [p for p in _subgraph_nodes(self.model.graph) if info.name in p.input]
            if any(
                p.op_type not in _READS_VALUES_ONLY and not _reads_zero_point(p, info.name) for p in readers
            ):
                raise OnnxImportError(
                    f"graph input {info.name!r}{self._reader_of(info.name)}: unsupported dtype "
                    f"{np_dtype.name} (xmge holds it as {_WIDENED[np_dtype.name]} only where Cast, CastLike "
                    "or DequantizeLinear alone read it)"
                )
        elem = _type_of(
            np.zeros(0, np_dtype), f"graph input {info.name!r}{self._reader_of(info.name)}"
        ).element_type
        return TensorType(elem, shape)

    # -- values ---------------------------------------------------------------------------------
    def ssa(self, value: _Value) -> SSAValue:
        """The IR value, emitting its ``mgb.const`` on first use."""
        if value.ssa is None:
            assert value.const is not None
            what = f"constant {value.initializer!r}" if value.initializer else "a constant"
            const = T.ConstOp.from_numpy(_narrow(value.const, what), value.type.element_type)
            if value.initializer:
                const.attributes["name"] = StringAttr(value.initializer)
            self.block.add_op(const)
            value.ssa = const.output
        return value.ssa

    def run(self) -> ModuleOp:
        for node in self.model.graph.node:
            self.convert(node)
        results: list[SSAValue] = []
        output_names: list[str] = []
        for out in self.model.graph.output:
            value = self.values.get(out.name)
            if value is None:
                raise OnnxImportError(f"graph output {out.name!r} is computed by no node")
            results.append(self.ssa(value))
            output_names.append(out.name)
        if not results:
            raise OnnxImportError("the graph has no outputs")
        self.block.add_op(func.ReturnOp(*results))
        for op in self.block.ops:  # every value the imported graph computes stays within the budget
            for r in op.results:
                if isinstance(r.type, TensorType) and not isinstance(r.type.element_type, QuantizedType):
                    nbytes = math.prod(r.type.get_shape()) * numpy_dtype(r.type.element_type).itemsize
                    where = op.attributes.get("name")
                    label = f"{op.name} {where.data!r}" if isinstance(where, StringAttr) else op.name
                    self._check_tensor_bytes(None, nbytes, f"the value of {label} ({r.type})")
        arg_types = [a.type for a in self.block.args]
        fn = func.FuncOp("main", (arg_types, [r.type for r in results]), Region(self.block))
        fn.attributes["input_names"] = ArrayAttr([StringAttr(n) for n in self.input_names])
        fn.attributes["output_names"] = ArrayAttr([StringAttr(n) for n in output_names])
        module = ModuleOp([fn])
        try:
            module.verify()
        except Exception as exc:
            raise OnnxImportError(f"the imported graph does not verify: {exc}") from exc
        return module

    def convert(self, proto: Any) -> None:
        node = _Node(self, proto)
        try:
            self._convert(node)
        except XmgeError:
            raise
        except (ArithmeticError, IndexError, KeyError, TypeError, ValueError, AttributeError,
                VerifyException) as exc:
            # a malformed node the checks missed (a bad type code, a non-positive quantization
            # scale, an attribute of the wrong kind): still a one-line error naming it
            raise node.fail(f"malformed node: {type(exc).__name__}: {_first_line(exc)}") from None

    def _convert(self, node: _Node) -> None:
        proto = node.proto
        if proto.domain not in ONNX_DOMAINS:
            raise node.fail(f"operators of domain {proto.domain!r} are not supported")
        present = [n for n in proto.input if n]
        for n in present:
            if n not in self.values:
                raise node.fail(f"input {n!r} is computed by no earlier node")
        if proto.op_type == "If" and present and self.values[present[0]].const is not None:
            self._inline_if(node)
            return
        captured = _captured_names(proto)
        missing = [n for n in captured if n not in self.values]
        if missing:
            raise node.fail(f"its subgraphs read {missing}, which no earlier node computes")
        if proto.op_type not in _NEVER_FOLD and all(
            self.values[n].const is not None for n in [*present, *captured]
        ):
            self._fold(node, captured)
            return
        handler = _HANDLERS.get(proto.op_type)
        if handler is None:
            runtime = [n for n in [*present, *captured] if self.values[n].const is None]
            raise node.fail(
                f"operator {proto.op_type} is not supported by xmge's ONNX importer on values computed "
                f"at run time ({', '.join(repr(n) for n in runtime)}; it is evaluated while importing when "
                "all its inputs are known)"
            )
        first_new = len(self.block.ops)
        outs = handler(node)
        self._define(node, outs, first_new)

    def _inline_if(self, node: _Node) -> None:
        """An If whose condition is known: the taken branch's nodes, as if written in its place
        (its outer reads resolve in this graph; its outputs become the If's)."""
        cond = np.asarray(self.values[node.proto.input[0]].const).reshape(-1)
        if cond.size != 1:
            raise node.fail(f"the condition must hold one value, got {cond.size}")
        branch = node._attrs.get("then_branch" if bool(cond[0]) else "else_branch")
        if branch is None:
            raise node.fail("the taken branch is missing")
        graph = branch.g
        for t in graph.initializer:
            array = self.onnx.numpy_helper.to_array(t)
            self.values[t.name] = _Value(_type_of(array, f"initializer {t.name!r}"), array)
        for inner in graph.node:
            self.convert(inner)
        outs = [name for name in node.proto.output]
        if len(graph.output) != len(outs):
            raise node.fail(f"the taken branch has {len(graph.output)} outputs, the node {len(outs)}")
        for name, out in zip(outs, graph.output, strict=True):
            if not name:
                continue
            if out.name not in self.values:
                raise node.fail(f"the taken branch's output {out.name!r} is computed by no node")
            self.values[name] = self.values[out.name]

    def _define(self, node: _Node, outs: Sequence[_Value | None], first_new: int) -> None:
        new_ops = set(list(self.block.ops)[first_new:])
        for k, name in enumerate(node.proto.output):
            if not name:
                continue
            value = outs[k] if k < len(outs) else None
            if value is None:  # an output xmge does not compute (e.g. Dropout's mask)
                self.unusable.add(name)
                continue
            self.values[name] = value
            owner = value.ssa.owner if value.ssa is not None else None
            if owner in new_ops and "name" not in owner.attributes:  # type: ignore[union-attr]
                owner.attributes["name"] = StringAttr(name)  # type: ignore[union-attr]

    def _fold(self, node: _Node, captured: Sequence[str] = ()) -> None:
        """Evaluate ``node`` on its known inputs with ONNX's reference implementation, at the
        model's opset (a one-node model: a bare node would be run at the newest opset), within the
        import budget (:mod:`backends.onnx.limits`). ``captured``: outer values its subgraphs read,
        passed to the one-node model as extra inputs."""
        from onnx.reference import ReferenceEvaluator

        helper = self.onnx.helper
        proto = node.proto
        feeds = {n: np.asarray(self.values[n].const) for n in [*proto.input, *captured] if n}
        self._check_budget_before(node, feeds)
        inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), None)
            for n, a in feeds.items()
        ]
        outputs = [self.onnx.ValueInfoProto(name=n) for n in proto.output if n]
        graph = helper.make_graph([proto], "fold", inputs, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        budget = limits.max_fold_seconds() - self.fold_seconds
        started = time.perf_counter()
        try:
            with _deadline(budget):
                outs = ReferenceEvaluator(model).run(None, feeds)
        except _FoldTimeout:
            raise self.limit_error(
                node,
                f"evaluating its constant inputs ran past the {limits.max_fold_seconds():g} s allowed for "
                f"constant folding ({limits.MAX_FOLD_SECONDS_ENV})",
            ) from None
        except MemoryError:
            raise self.limit_error(node, "evaluating it on its constant inputs ran out of memory") from None
        except Exception as exc:
            raise node.fail(
                f"evaluating it on its constant inputs failed: {type(exc).__name__}: {_first_line(exc)}"
            ) from None
        finally:
            self.fold_seconds += time.perf_counter() - started
        if self.fold_seconds > limits.max_fold_seconds():
            raise self.limit_error(
                node,
                f"constant folding took {self.fold_seconds:.1f} s, more than the "
                f"{limits.max_fold_seconds():g} s allowed ({limits.MAX_FOLD_SECONDS_ENV})",
            )
        in_elements = sum(a.size for a in feeds.values())
        for name, array in zip([n for n in proto.output if n], outs, strict=True):
            a = np.asarray(array)
            self._check_tensor_bytes(node, a.nbytes, f"its output {name!r} of shape {a.shape}")
            # what folding creates beyond its inputs (a weight's Cast or Transpose creates nothing)
            self.folded_bytes += max(a.size - in_elements, 0) * a.itemsize
            self._check_folded_bytes(node)
            self.values[name] = _Value(_type_of(a, node.where()), a)

    # -- the import budget ------------------------------------------------------------------------
    def limit_error(self, node: _Node | None, message: str) -> OnnxImportError:
        where = f"{node.where()}: " if node is not None else ""
        return OnnxImportError(f"{self.origin}: {where}{message}")

    def _check_tensor_bytes(self, node: _Node | None, nbytes: int, what: str, count: bool = True) -> None:
        """``nbytes`` within the per-tensor cap; with ``count`` it also adds to the import's total."""
        cap = limits.max_tensor_bytes()
        if nbytes > cap:
            raise self.limit_error(
                node,
                f"{what} would need {nbytes} bytes, more than the limit of {cap} "
                f"({limits.MAX_TENSOR_BYTES_ENV})",
            )
        if count:
            self.total_bytes += nbytes
            total_cap = limits.max_total_bytes()
            if self.total_bytes > total_cap:
                raise self.limit_error(
                    node,
                    f"{what} brings the model's tensors to {self.total_bytes} bytes, more than the limit of "
                    f"{total_cap} ({limits.MAX_TOTAL_BYTES_ENV})",
                )

    def _check_folded_bytes(self, node: _Node, more: int = 0) -> None:
        cap = limits.max_folded_bytes()
        if self.folded_bytes + more > cap:
            raise self.limit_error(
                node,
                f"the values evaluated while importing would exceed {cap} bytes "
                f"({limits.MAX_FOLDED_BYTES_ENV})",
            )

    def _check_budget_before(self, node: _Node, feeds: dict[str, np.ndarray]) -> None:
        """Refuse before evaluating what would exceed the budget: an output size the inputs fix,
        a loop's trip count."""
        predicted = _predicted_bytes(node, feeds)
        if predicted is not None:
            nbytes, shape = predicted
            self._check_tensor_bytes(node, nbytes, f"its output of shape {shape}", count=False)
            itemsize = nbytes // max(math.prod(shape), 1)
            grown = max(math.prod(shape) - sum(a.size for a in feeds.values()), 0) * itemsize
            self._check_folded_bytes(node, grown)
        if node.op_type in ("Loop", "Scan"):
            cap = limits.max_loop_iterations()
            trips = _loop_trip_count(node, feeds)
            if trips is None or trips > cap:
                count = "an unbounded number of" if trips is None else f"{trips}"
                raise self.limit_error(
                    node,
                    f"evaluating it while importing would run {count} iterations, more than the limit of "
                    f"{cap} ({limits.MAX_LOOP_ITERATIONS_ENV})",
                )


class _FoldTimeout(Exception):
    pass


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Interrupt the body after ``seconds`` (SIGALRM: only on the main thread, and only when no one
    else uses the alarm; elsewhere the fold time is checked after each node)."""
    if seconds <= 0:
        raise _FoldTimeout
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    )
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _FoldTimeout

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _ints_of(a: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


def _predicted_bytes(node: _Node, feeds: dict[str, np.ndarray]) -> tuple[int, tuple[int, ...]] | None:
    """(bytes, shape) of the output of the ops whose output can be far larger than their inputs,
    from the inputs' values alone; None for the others (checked after evaluation)."""
    proto = node.proto
    ins = [feeds.get(n) if n else None for n in proto.input]
    op = node.op_type
    try:
        if op == "ConstantOfShape":
            value = node.attr("value")
            itemsize = 4 if value is None else node.imp.onnx.numpy_helper.to_array(value).itemsize
            shape = tuple(_ints_of(ins[0]))
        elif op == "Expand":
            itemsize = ins[0].itemsize
            shape = tuple(np.broadcast_shapes(ins[0].shape, tuple(_ints_of(ins[1]))))
        elif op == "Range":
            start, limit, delta = (float(np.asarray(a).reshape(-1)[0]) for a in ins[:3])
            itemsize = ins[0].itemsize
            shape = (max(math.ceil((limit - start) / delta), 0) if delta else 0,)
        elif op == "Tile":
            itemsize = ins[0].itemsize
            shape = tuple(d * r for d, r in zip(ins[0].shape, _ints_of(ins[1]), strict=False))
        elif op in ("MatMul", "Gemm") and ins[0].ndim >= 1 and ins[1].ndim >= 1:
            a, b = ins[0].shape, ins[1].shape
            if op == "Gemm":
                shape = (a[1] if node.attr("transA", 0) else a[0], b[0] if node.attr("transB", 0) else b[-1])
            else:
                batch = np.broadcast_shapes(a[:-2], b[:-2]) if len(a) > 1 and len(b) > 1 else ()
                shape = (*batch, *a[-2:-1], *(b[-1:] if len(b) > 1 else ()))
            itemsize = ins[0].itemsize
        elif op == "Pad" and len(ins) > 1 and ins[1] is not None:
            pads = _ints_of(ins[1])
            rank = ins[0].ndim
            if len(pads) != 2 * rank:
                return None
            shape = tuple(d + pads[k] + pads[rank + k] for k, d in enumerate(ins[0].shape))
            itemsize = ins[0].itemsize
        elif op in ("Resize", "Upsample"):
            sizes = ins[3] if len(ins) > 3 and ins[3] is not None and ins[3].size else None
            scales = next((a for a in ins[1:3] if a is not None and a.dtype.kind == "f" and a.size), None)
            if sizes is not None and sizes.size == ins[0].ndim:
                shape = tuple(_ints_of(sizes))
            elif scales is not None and scales.size == ins[0].ndim:
                factors = scales.reshape(-1).tolist()
                shape = tuple(int(d * float(f)) for d, f in zip(ins[0].shape, factors, strict=True))
            else:
                return None
            itemsize = ins[0].itemsize
        elif op == "OneHot":
            shape = (*ins[0].shape, int(np.asarray(ins[1]).reshape(-1)[0]))
            itemsize = ins[2].itemsize
        else:
            return None
    except (TypeError, ValueError, IndexError, AttributeError, OverflowError, ZeroDivisionError):
        return None  # malformed: the evaluation itself reports it
    if any(d < 0 for d in shape):
        return None
    return math.prod(shape) * itemsize, shape


def _loop_trip_count(node: _Node, feeds: dict[str, np.ndarray]) -> int | None:
    """How many iterations a Loop / Scan will run at most (None: unbounded), nested loops included."""
    if node.op_type == "Scan":  # one iteration per slice of the scanned inputs (already in memory)
        return max((a.shape[0] for a in feeds.values() if a.ndim), default=0)
    m = node.proto.input[0] if node.proto.input else ""
    if not m or m not in feeds:
        return None
    trips = int(np.asarray(feeds[m]).reshape(-1)[0])
    body = node._attrs.get("body")
    if body is not None and any(n.op_type in ("Loop", "Scan") for n in _subgraph_nodes(body.g)):
        return None  # a loop in the body: its count is not known from here
    return max(trips, 0)


def _subgraph_nodes(graph: Any, depth: int = 1) -> Iterator[Any]:
    if depth > limits.max_depth():
        raise OnnxImportError(
            f"subgraphs (If / Loop / Scan bodies) nested more than {limits.max_depth()} deep "
            f"in graph {graph.name!r} ({limits.MAX_DEPTH_ENV})"
        )
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.HasField("g"):
                yield from _subgraph_nodes(a.g, depth + 1)
            for g in a.graphs:
                yield from _subgraph_nodes(g, depth + 1)


def _captured_names(proto: Any) -> list[str]:
    """Values of the enclosing graph that ``proto``'s subgraphs (If branches, Loop / Scan bodies)
    read: everything used there that is not defined there."""
    out: list[str] = []

    def walk(graph: Any, defined: set[str]) -> None:
        defined = defined | {i.name for i in graph.input} | {t.name for t in graph.initializer}
        for n in graph.node:
            for name in n.input:
                if name and name not in defined and name not in out:
                    out.append(name)
            for a in n.attribute:
                subs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
                for g in subs:
                    walk(g, defined)
            defined |= set(n.output)
        for o in graph.output:
            if o.name not in defined and o.name not in out:
                out.append(o.name)

    for a in proto.attribute:
        subs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
        for g in subs:
            walk(g, set())
    return out


class _Node:
    """One ONNX node being converted: attribute and input access, op emission, errors."""

    def __init__(self, importer: _Importer, proto: Any) -> None:
        self.imp = importer
        self.proto = proto
        self.op_type: str = proto.op_type
        self.opset = importer.opset
        self._attrs = {a.name: a for a in proto.attribute}

    def where(self) -> str:
        name = self.proto.name or (self.proto.output[0] if self.proto.output else "")
        return f"{self.op_type} node {name!r} (opset {self.opset})"

    def fail(self, message: str) -> OnnxImportError:
        return OnnxImportError(f"{self.where()}: {message}")

    # -- attributes -------------------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        a = self._attrs.get(name)
        if a is None:
            return default
        value = self.imp.onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, list):
            return [v.decode() if isinstance(v, bytes) else v for v in value]
        return value

    # -- inputs -----------------------------------------------------------------------------------
    def n_inputs(self) -> int:
        return len(self.proto.input)

    def has(self, i: int) -> bool:
        return i < len(self.proto.input) and bool(self.proto.input[i])

    def value(self, i: int) -> _Value:
        if not self.has(i):
            raise self.fail(f"needs input {i}")
        name = self.proto.input[i]
        if name in self.imp.unusable:
            raise self.fail(f"input {i} ({name!r}) is an output xmge does not compute")
        return self.imp.values[name]

    def ssa(self, i: int) -> SSAValue:
        return self.imp.ssa(self.value(i))

    def shape(self, i: int) -> tuple[int, ...]:
        return _shape(self.value(i).type)

    def const(self, i: int, what: str) -> np.ndarray:
        v = self.value(i)
        if v.const is None:
            name = self.proto.input[i]
            if name in self.imp.input_names:
                raise self.fail(
                    f"{what} (input {i}) is graph input {name!r}, which must be known when importing: "
                    f"make it a constant or pass input_values={{{name!r}: ...}}"
                )
            raise self.fail(
                f"{what} (input {i}) must be known when importing (a constant or computed from shapes)"
            )
        return v.const

    def ints(self, i: int, what: str) -> list[int]:
        a = self.const(i, what)
        if a.dtype.kind not in "iu":
            raise self.fail(f"{what} must be integers, got {a.dtype}")
        return [int(x) for x in a.reshape(-1)]

    def axes(self, attr_until: int, input_index: int = 1) -> list[int] | None:
        """``axes`` as an attribute (opsets before ``attr_until``) or an optional input (after)."""
        if self.opset < attr_until:
            a = self.attr("axes")
            return None if a is None else [int(x) for x in a]
        return self.ints(input_index, "axes") if self.has(input_index) else None

    # -- emission ---------------------------------------------------------------------------------
    def emit(
        self, cls: type[T.MgbOp], operands: Sequence[SSAValue], result_types: Any = None, **params: Any
    ) -> T.MgbOp:
        try:
            op = cls.make(list(operands), result_types, **params)
        except (T.ShapeInferenceError, ValueError, TypeError, KeyError) as exc:
            raise self.fail(f"cannot build {cls.name}: {exc}") from None
        # each op within the per-tensor cap as it is built: a handler may go on to build numpy
        # helpers (pooling divisors, index tables) of the same size
        for r in op.results:
            t = r.type
            if isinstance(t, TensorType) and not isinstance(t.element_type, QuantizedType):
                nbytes = math.prod(t.get_shape()) * numpy_dtype(t.element_type).itemsize
                self.imp._check_tensor_bytes(self, nbytes, f"its {cls.name} result ({t})", count=False)
        self.imp.block.add_op(op)
        return op

    def emit1(
        self, cls: type[T.MgbOp], operands: Sequence[SSAValue], result_types: Any = None, **params: Any
    ) -> SSAValue:
        return self.emit(cls, operands, result_types, **params).results[0]

    def elemwise(self, mode: Any, *operands: SSAValue) -> SSAValue:
        return self.emit1(T.ElemwiseOp, operands, mode=mode)

    def scalar(self, value: float, like: SSAValue) -> SSAValue:
        """A shape-(1,) constant of ``like``'s dtype (MegEngine has no 0-d vars)."""
        t = like.type
        assert isinstance(t, TensorType)
        const = T.ConstOp.from_numpy(np.asarray([value], numpy_dtype(t.element_type)), t.element_type)
        self.imp.block.add_op(const)
        return const.output

    def constant(self, array: np.ndarray) -> SSAValue:
        return self.imp.ssa(_Value(_type_of(array, self.where()), array))

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        t = x.type
        assert isinstance(t, TensorType)
        if tuple(t.get_shape()) == tuple(shape):
            return x
        return self.emit1(T.ReshapeOp, [x], [TensorType(t.element_type, list(shape))])

    def subtensor(
        self,
        x: SSAValue,
        axes: Sequence[int],
        starts: Sequence[int],
        stops: Sequence[int],
        steps: Sequence[int] | None = None,
        drop: Sequence[int] | None = None,
    ) -> SSAValue:
        n = len(axes)
        return self.emit1(
            T.SubtensorOp,
            [x],
            axes=tuple(axes),
            starts=tuple(starts),
            stops=tuple(stops),
            steps=tuple(steps or (1,) * n),
            drop=tuple(drop or (0,) * n),
        )

    def operand_like(self, i: int, like: TensorType) -> SSAValue:
        """Input ``i`` as an elemwise operand next to a value of type ``like``: a constant takes
        ``like``'s dtype (ONNX lets Pow's exponent differ) and a 0-d constant shape (1,)."""
        v = self.value(i)
        if v.const is None:
            return self.imp.ssa(v)
        a = v.const
        if a.ndim == 0 and like.get_shape():
            a = a.reshape(1)
        elem = like.element_type
        if not isinstance(elem, QuantizedType) and _type_of(a, self.where()).element_type != elem:
            a = a.astype(numpy_dtype(elem))
        return self.imp.ssa(v) if a is v.const else self.constant(a)


def _new(ssa: SSAValue) -> _Value:
    t = ssa.type
    assert isinstance(t, TensorType)
    return _Value(t, ssa=ssa)


Handler = Callable[[_Node], list[_Value | None]]
_HANDLERS: dict[str, Handler] = {}


def handles(*op_types: str) -> Callable[[Handler], Handler]:
    return registering(_HANDLERS, *op_types)


def claimed_op_types() -> set[str]:
    """The ONNX op types the importer converts when their inputs are computed at run time."""
    return set(_HANDLERS)


# ----------------------------------------------------------------------------------------------
# Shapes known while importing


@handles("Shape")
def _shape_op(node: _Node) -> list[_Value | None]:
    shape = np.asarray(node.shape(0), np.int64)
    start, end = node.attr("start", 0), node.attr("end")
    return [_Value(_type_of(shape[start:end], node.where()), shape[start:end])]


@handles("Size")
def _size_op(node: _Node) -> list[_Value | None]:
    size = np.asarray(math.prod(node.shape(0)), np.int64)
    return [_Value(_type_of(size, node.where()), size)]


@handles("Identity")
def _identity(node: _Node) -> list[_Value | None]:
    return [node.value(0)]


@handles("Dropout")
def _dropout(node: _Node) -> list[_Value | None]:
    if node.has(2) and bool(np.asarray(node.const(2, "training_mode")).reshape(-1)[0]):
        ratio = float(np.asarray(node.const(1, "ratio")).reshape(-1)[0]) if node.has(1) else 0.5
        if ratio != 0.0:  # ratio 0 drops nothing: the inference result
            raise node.fail(
                f"training_mode=True with ratio {ratio} is not supported (a random mask; xmge imports "
                "inference graphs)"
            )
    if len(node.proto.output) < 2 or not node.proto.output[1]:
        return [node.value(0)]
    if node.opset < 10:  # the mask was the input's dtype before opset 10 (never read in inference)
        raise node.fail("the mask output of opsets before 10 is not supported")
    # inference: nothing is dropped, the mask is all true
    return [
        node.value(0),
        _Value(_type_of(np.ones(node.shape(0), bool), node.where()), np.ones(node.shape(0), bool)),
    ]


# ----------------------------------------------------------------------------------------------
# Elementwise

_UNARY = {
    "Relu": E.RELU,
    "Sigmoid": E.SIGMOID,
    "Tanh": E.TANH,
    "Exp": E.EXP,
    "Log": E.LOG,
    "Neg": E.NEGATE,
    "Abs": E.ABS,
    "Sqrt": E.SQRT,
    "Erf": E.ERF,
    "Floor": E.FLOOR,
    "Ceil": E.CEIL,
    "Sin": E.SIN,
    "Cos": E.COS,
    "Tan": E.TAN,
    "Asin": E.ASIN,
    "Acos": E.ACOS,
    "Sinh": E.SINH,
    "Cosh": E.COSH,
    "Asinh": E.ASINH,
    "Acosh": E.ACOSH,
    "Atanh": E.ATANH,
    "Softplus": E.SOFTPLUS,
    "Sign": E.SIGN,
    "Not": E.NOT,
    "HardSwish": E.H_SWISH,
    "IsNaN": E.ISNAN,
}
_BINARY = {
    "Add": E.ADD,
    "Sub": E.SUB,
    "Mul": E.MUL,
    "Div": E.TRUE_DIV,
    "Pow": E.POW,
    "Equal": E.EQ,
    "Less": E.LT,
    "LessOrEqual": E.LEQ,
    "And": E.AND,
    "Or": E.OR,
    "Xor": E.XOR,
    "PRelu": E.PRELU,
}
_SWAPPED = {"Greater": E.LT, "GreaterOrEqual": E.LEQ}  # a > b is b < a
_VARIADIC = {"Max": E.MAX, "Min": E.MIN, "Sum": E.ADD, "Mean": E.ADD}


@handles(*_UNARY)
def _unary(node: _Node) -> list[_Value | None]:
    return [_new(node.elemwise(_UNARY[node.op_type], node.ssa(0)))]


@handles(*_BINARY, *_SWAPPED)
def _binary(node: _Node) -> list[_Value | None]:
    mode = _BINARY.get(node.op_type) or _SWAPPED[node.op_type]
    va, vb = node.value(0), node.value(1)
    # the operand whose dtype rules: a value in the IR (the other may be a constant to convert)
    like = va.type if (va.const is None or vb.const is not None or node.op_type == "Pow") else vb.type
    if node.op_type == "Div" and not is_float(like.element_type):
        return [_new(_int_div(node, node.operand_like(0, like), node.operand_like(1, like), like))]
    if node.op_type == "Pow" and vb.const is None and vb.type.element_type != va.type.element_type:
        return [_new(_mixed_pow(node))]
    a, b = node.operand_like(0, like), node.operand_like(1, like)
    if node.op_type in _SWAPPED:
        a, b = b, a
    return [_new(node.elemwise(mode, a, b))]


def _int_div(node: _Node, a: SSAValue, b: SSAValue, like: TensorType) -> SSAValue:
    """Integer Div (C's, truncating toward zero): the floored quotient, plus one where the floored
    remainder is nonzero with the other sign than the dividend."""
    q = node.elemwise(E.FLOOR_DIV, a, b)
    elem = like.element_type
    assert isinstance(elem, IntegerType)
    if elem.signedness.data == Signedness.UNSIGNED:
        return q
    r = node.elemwise(E.MOD, a, b)
    zero = node.scalar(0, r)
    differs = node.elemwise(E.XOR, node.elemwise(E.LT, r, zero), node.elemwise(E.LT, a, zero))
    fix = node.elemwise(E.AND, differs, node.elemwise(E.NEQ, r, zero))
    t = q.type
    assert isinstance(t, TensorType)
    return node.elemwise(E.ADD, q, node.emit1(T.TypeCvtOp, [fix], [TensorType(elem, t.get_shape())]))


def _mixed_pow(node: _Node) -> SSAValue:
    """Pow whose run-time exponent has another dtype than the base (allowed since opset 12): a
    float base takes the exponent converted to its type; an integer base is raised in float32 and
    the result truncated back to its type, as onnxruntime computes it."""
    base, exp = node.value(0).type, node.value(1).type

    def cvt(x: SSAValue, elem: Attribute) -> SSAValue:
        t = x.type
        assert isinstance(t, TensorType)
        return node.emit1(T.TypeCvtOp, [x], [TensorType(elem, t.get_shape())])

    if is_float(base.element_type):
        return node.elemwise(E.POW, node.ssa(0), cvt(node.ssa(1), base.element_type))
    f32 = element_type("float32")
    a = cvt(node.ssa(0), f32)
    b = node.ssa(1) if exp.element_type == f32 else cvt(node.ssa(1), f32)
    return cvt(node.elemwise(E.POW, a, b), base.element_type)


@handles(*_VARIADIC)
def _variadic(node: _Node) -> list[_Value | None]:
    mode = _VARIADIC[node.op_type]
    like = next(node.value(i).type for i in range(node.n_inputs()) if node.value(i).const is None)
    acc = node.operand_like(0, like)
    for i in range(1, node.n_inputs()):
        acc = node.elemwise(mode, acc, node.operand_like(i, like))
    if node.op_type == "Mean" and node.n_inputs() > 1:
        acc = node.elemwise(E.TRUE_DIV, acc, node.scalar(node.n_inputs(), acc))
    return [_new(acc)]


@handles("Mod")
def _mod(node: _Node) -> list[_Value | None]:
    like = node.value(0).type
    fmod = bool(node.attr("fmod", 0))
    floats = is_float(like.element_type)
    a, b = node.operand_like(0, like), node.operand_like(1, like)
    if floats and fmod or not floats and not fmod:  # xmge's MOD: C's fmod on floats, Python's % on integers
        return [_new(node.elemwise(E.MOD, a, b))]
    if floats and node.opset >= 28:
        # fmod=0 on floats (opset 28): the floored remainder, the sign of the divisor: fmod's
        # remainder plus the divisor where their signs differ (signs compared exactly, no product)
        r = node.elemwise(E.MOD, a, b)
        opposite = node.elemwise(E.MUL, node.elemwise(E.SIGN, r), node.elemwise(E.SIGN, b))
        shift = node.elemwise(E.COND_LT_MOV, opposite, node.scalar(0.0, r), b)
        return [_new(node.elemwise(E.ADD, r, shift))]
    if floats:
        raise node.fail("fmod=0 on floating-point inputs is defined from opset 28 on (fmod=1 before)")
    # fmod=1 on integers: C's remainder (the dividend's sign): the floored one, less the divisor
    # where it is nonzero with the other sign than the dividend
    r = node.elemwise(E.MOD, a, b)
    zero = node.scalar(0, r)
    differs = node.elemwise(E.XOR, node.elemwise(E.LT, r, zero), node.elemwise(E.LT, a, zero))
    fix = node.elemwise(E.AND, differs, node.elemwise(E.NEQ, r, zero))
    t = r.type
    assert isinstance(t, TensorType)
    fix_int = node.emit1(T.TypeCvtOp, [fix], [TensorType(like.element_type, t.get_shape())])
    return [_new(node.elemwise(E.SUB, r, node.elemwise(E.MUL, fix_int, b)))]


@handles("Reciprocal")
def _reciprocal(node: _Node) -> list[_Value | None]:
    x = node.ssa(0)
    return [_new(node.elemwise(E.TRUE_DIV, node.scalar(1.0, x), x))]


@handles("Clip")
def _clip(node: _Node) -> list[_Value | None]:
    x = node.ssa(0)
    t = x.type
    assert isinstance(t, TensorType)

    def bound(i: int) -> SSAValue | None:
        if node.opset < 11:  # min / max attributes (defaults: no bound)
            v = node.attr(("min", "max")[i - 1])
            return None if v is None else node.scalar(float(v), x)
        return node.operand_like(i, t) if node.has(i) else None

    lo, hi = bound(1), bound(2)
    if lo is not None and hi is not None:
        return [_new(node.elemwise(E.CLIP, x, lo, hi))]
    if lo is not None:
        return [_new(node.elemwise(E.MAX, x, lo))]
    if hi is not None:
        return [_new(node.elemwise(E.MIN, x, hi))]
    return [node.value(0)]


@handles("LeakyRelu")
def _leaky_relu(node: _Node) -> list[_Value | None]:
    x = node.ssa(0)
    return [_new(node.elemwise(E.PRELU, x, node.scalar(float(node.attr("alpha", 0.01)), x)))]


@handles("HardSigmoid")
def _hard_sigmoid(node: _Node) -> list[_Value | None]:
    x = node.ssa(0)
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    if np.float32(alpha) == np.float32(1 / 6) and beta == 0.5:
        return [_new(node.elemwise(E.HSIGMOID, x))]
    y = node.elemwise(E.FUSE_MUL_ADD3, x, node.scalar(alpha, x), node.scalar(beta, x))
    return [_new(node.elemwise(E.CLIP, y, node.scalar(0.0, x), node.scalar(1.0, x)))]


def _elu_core(node: _Node, x: SSAValue, alpha: float) -> SSAValue:
    """relu(x) + alpha * min(expm1(x), 0): x for x > 0, alpha * (exp(x) - 1) otherwise."""
    neg = node.elemwise(E.MIN, node.elemwise(E.EXPM1, x), node.scalar(0.0, x))
    return node.elemwise(E.FUSE_MUL_ADD3, neg, node.scalar(alpha, x), node.elemwise(E.RELU, x))


@handles("Elu")
def _elu(node: _Node) -> list[_Value | None]:
    return [_new(_elu_core(node, node.ssa(0), float(node.attr("alpha", 1.0))))]


@handles("Selu")
def _selu(node: _Node) -> list[_Value | None]:
    x = node.ssa(0)
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    return [_new(node.elemwise(E.MUL, _elu_core(node, x, alpha), node.scalar(gamma, x)))]


@handles("Gelu")
def _gelu(node: _Node) -> list[_Value | None]:
    x = node.ssa(0)
    if node.attr("approximate", "none") == "none":
        return [_new(node.elemwise(E.GELU, x))]
    # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    cube = node.elemwise(E.MUL, node.elemwise(E.SQUARE, x), x)
    inner = node.elemwise(E.FUSE_MUL_ADD3, cube, node.scalar(0.044715, x), x)
    t = node.elemwise(E.TANH, node.elemwise(E.MUL, inner, node.scalar(math.sqrt(2 / math.pi), x)))
    half_x = node.elemwise(E.MUL, x, node.scalar(0.5, x))
    return [_new(node.elemwise(E.FUSE_MUL_ADD3, half_x, t, half_x))]


@handles("Mish")
def _mish(node: _Node) -> list[_Value | None]:
    x = node.ssa(0)
    return [_new(node.elemwise(E.MUL, x, node.elemwise(E.TANH, node.elemwise(E.SOFTPLUS, x))))]


@handles("IsInf")
def _is_inf(node: _Node) -> list[_Value | None]:
    x = node.ssa(0)
    neg, pos = bool(node.attr("detect_negative", 1)), bool(node.attr("detect_positive", 1))
    inf = node.elemwise(E.ISINF, x)
    if neg and pos:
        return [_new(inf)]
    if not (neg or pos):  # detects nothing
        return [_new(node.elemwise(E.AND, inf, node.elemwise(E.NOT, inf)))]
    zero = node.scalar(0.0, x)
    sign = node.elemwise(E.LT, zero, x) if pos else node.elemwise(E.LT, x, zero)
    return [_new(node.elemwise(E.AND, inf, sign))]


@handles("Cast", "CastLike")
def _cast(node: _Node) -> list[_Value | None]:
    if node.op_type == "Cast":
        try:
            target = node.imp.onnx.helper.tensor_dtype_to_np_dtype(node.attr("to"))
        except (KeyError, ValueError, TypeError):
            raise node.fail(f"attribute to={node.attr('to')} is not an ONNX tensor type") from None
    else:
        like = node.proto.input[1]
        target = node.imp.widened.get(like) or node.value(1).type.element_type
    name = getattr(target, "name", target)
    if name in _LOW_BITS:
        return [_new(_cast_low_bits(node, *_LOW_BITS[name]))]
    try:
        elem = element_type(target)
    except DTypeError as exc:
        raise node.fail(str(exc)) from None
    v = node.value(0)
    if v.type.element_type == elem:
        return [v]
    return [_new(node.emit1(T.TypeCvtOp, [node.ssa(0)], [TensorType(elem, v.type.get_shape())]))]


# ONNX's sub-byte integers: (bits, signed); held widened (see _WIDENED)
_LOW_BITS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


def _cast_low_bits(node: _Node, bits: int, signed: bool) -> SSAValue:
    """Cast to a sub-byte integer: ONNX (its Cast doc: "we truncate bits which can't be stored")
    keeps the low ``bits`` of the value truncated toward zero, i.e. wraps modulo 2**bits."""
    v = node.value(0)
    shape = v.type.get_shape()
    x = node.ssa(0)
    if v.type.element_type != element_type("int32"):
        x = node.emit1(T.TypeCvtOp, [x], [TensorType(element_type("int32"), shape)])
    half = 2 ** (bits - 1) if signed else 0
    if half:
        x = node.elemwise(E.ADD, x, node.scalar(half, x))
    x = node.elemwise(E.MOD, x, node.scalar(2**bits, x))  # integer MOD is floor modulo
    if half:
        x = node.elemwise(E.SUB, x, node.scalar(half, x))
    holder = element_type(_WIDENED["int4" if signed else "uint4"])
    return node.emit1(T.TypeCvtOp, [x], [TensorType(holder, shape)])


# ----------------------------------------------------------------------------------------------
# Convolution and matrix products


def _spatial_pads(
    node: _Node, in_hw: Sequence[int], kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> tuple[list[int], list[int]]:
    """(begin, end) padding per spatial axis from ``pads`` / ``auto_pad``."""
    n = len(in_hw)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = [int(p) for p in node.attr("pads", [0] * 2 * n)]
        return pads[:n], pads[n:]
    if auto == "VALID":
        return [0] * n, [0] * n
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.fail(f"unknown auto_pad {auto!r}")
    begin, end = [], []
    for i in range(n):
        k = dilation[i] * (kernel[i] - 1) + 1
        out = -(-in_hw[i] // stride[i])
        total = max((out - 1) * stride[i] + k - in_hw[i], 0)
        small, large = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else large)
        end.append(large if auto == "SAME_UPPER" else small)
    return begin, end


def _require_2d(node: _Node, rank: int) -> None:
    if rank != 4:
        raise node.fail(f"only 1-D and 2-D (NCL, NCHW) inputs are supported, got a rank-{rank} input")


@dataclass(frozen=True)
class _ConvAttrs:
    """What Conv and ConvTranspose read alike: the input and weight shapes (2-D only), groups,
    strides and dilations."""

    xs: tuple[int, ...]
    ws: tuple[int, ...]
    group: int
    stride: list[int]
    dilation: list[int]

    @staticmethod
    def of(node: _Node) -> _ConvAttrs:
        xs, ws = node.shape(0), node.shape(1)
        _require_2d(node, len(xs))
        group = int(node.attr("group", 1))
        stride = [int(s) for s in node.attr("strides", [1, 1])]
        dilation = [int(d) for d in node.attr("dilations", [1, 1])]
        if group < 1:
            raise node.fail(f"attribute group={group} must be at least 1")
        if len(ws) != 4:
            raise node.fail(f"the weight must have rank 4 for a 2-D convolution, got shape {ws}")
        if len(stride) != 2 or min(stride) < 1 or len(dilation) != 2 or min(dilation) < 1:
            raise node.fail(f"strides {stride} and dilations {dilation} must be two positive integers each")
        return _ConvAttrs(xs, ws, group, stride, dilation)

    def weight(self, node: _Node) -> tuple[SSAValue, Any]:
        """The weight with its groups split off (MegEngine's GROUP form), and the sparse mode."""
        w, ws, group = node.ssa(1), self.ws, self.group
        if group == 1:
            return w, enums.ConvSparse.DENSE
        if ws[0] % group:
            raise node.fail(f"the weight's first axis ({ws[0]} channels) cannot be split into {group} groups")
        return node.reshape(w, (group, ws[0] // group, *ws[1:])), enums.ConvSparse.GROUP


def _lift_1d(handler: Handler) -> Handler:
    """A 1-D convolution / pooling (N, C, L) as the 2-D one of (N, C, 1, L): the input (and a
    convolution's weight) get a unit axis, the window attributes a leading 1 (pads a 0)."""

    def run(node: _Node) -> list[_Value | None]:
        if len(node.shape(0)) != 3:
            return handler(node)
        imp, onnx_helper = node.imp, node.imp.onnx.helper
        proto = type(node.proto)()
        proto.CopyFrom(node.proto)
        lifted = (0, 1) if node.op_type in ("Conv", "ConvTranspose") else (0,)
        for i in lifted:
            if not node.has(i):
                continue
            v = node.value(i)
            s = _shape(v.type)
            if len(s) != 3:
                raise node.fail(f"input {i} of shape {s} must have rank 3 for a 1-D {node.op_type}")
            shape2d = (s[0], s[1], 1, s[2])
            if v.const is not None:
                lifted_value = _Value(
                    _type_of(v.const.reshape(shape2d), node.where()), v.const.reshape(shape2d)
                )
            else:
                lifted_value = _new(node.reshape(node.ssa(i), shape2d))
            name = f"<xmge 2-d>{proto.input[i]}"  # no ONNX name starts so
            imp.values[name] = lifted_value
            proto.input[i] = name
        for attr in proto.attribute:
            if attr.name in ("kernel_shape", "strides", "dilations", "output_padding", "output_shape"):
                first = 0 if attr.name == "output_padding" else 1
                attr.CopyFrom(onnx_helper.make_attribute(attr.name, [first, *attr.ints]))
            elif attr.name == "pads":
                attr.CopyFrom(onnx_helper.make_attribute("pads", [0, attr.ints[0], 0, attr.ints[1]]))
        outs = handler(_Node(imp, proto))
        y = outs[0]
        assert y is not None and y.ssa is not None
        n, c, _, length = _shape(y.type)
        return [_new(node.reshape(y.ssa, (n, c, length))), *outs[1:]]

    return run


@handles("Conv")
@_lift_1d
def _conv(node: _Node) -> list[_Value | None]:
    a = _ConvAttrs.of(node)
    xs, ws, stride, dilation = a.xs, a.ws, a.stride, a.dilation
    kernel = list(node.attr("kernel_shape", ws[2:]))
    if list(ws[2:]) != kernel:
        raise node.fail(f"kernel_shape {kernel} differs from the weight's {ws[2:]}")
    begin, end = _spatial_pads(node, xs[2:], kernel, stride, dilation)
    x = node.ssa(0)
    sym = [min(b, e) for b, e in zip(begin, end, strict=True)]
    if begin != sym or end != sym:  # asymmetric: the surplus as explicit zero padding
        x = node.emit1(
            T.PaddingOp,
            [x],
            front=(0, 0, begin[0] - sym[0], begin[1] - sym[1]),
            back=(0, 0, end[0] - sym[0], end[1] - sym[1]),
        )
    w, sparse = a.weight(node)
    y = node.emit1(
        T.ConvolutionOp,
        [x, w],
        stride=tuple(stride),
        padding=tuple(sym),
        dilation=tuple(dilation),
        sparse=sparse,
    )
    if node.has(2):
        y = node.elemwise(E.ADD, y, _channel_param(node, 2, 4))
    return [_new(y)]


def _channel_param(node: _Node, i: int, rank: int) -> SSAValue:
    """A per-channel vector (C,) as (1, C, 1, ...), the layout MegEngine's ops broadcast."""
    v = node.value(i)
    c = math.prod(v.type.get_shape())
    shape = (1, c) + (1,) * (rank - 2)
    if v.const is not None:
        return (
            node.constant(v.const.reshape(shape)) if v.initializer is None else _named_reshape(node, v, shape)
        )
    return node.reshape(node.ssa(i), shape)


def _named_reshape(node: _Node, v: _Value, shape: tuple[int, ...]) -> SSAValue:
    """A parameter reshaped while importing, keeping the initializer's name on its mgb.const."""
    assert v.const is not None
    return node.imp.ssa(
        _Value(
            _type_of(v.const.reshape(shape), node.where()), v.const.reshape(shape), initializer=v.initializer
        )
    )


def _depth_taps_3d(handler: Handler) -> Handler:
    """A 3-D ConvTranspose (N, C, D, H, W) as a sum over the kernel's depth taps of 2-D ones:
    tap ``k`` maps input plane ``d`` through the (H, W) kernel slice ``w[:, :, k]`` onto output
    plane ``d * stride + k * dilation`` (before cropping ``pads``). The planes of one tap are a
    batch of 2-D transposed convolutions, spread along D by zero stuffing."""

    def run(node: _Node) -> list[_Value | None]:
        if len(node.shape(0)) != 5:
            return handler(node)
        if node.attr("output_shape") is not None or node.attr("auto_pad", "NOTSET") not in ("NOTSET", ""):
            raise node.fail("3-D ConvTranspose with output_shape or auto_pad is not supported (give pads)")
        wv = node.value(1)
        n, c, d, h, w = node.shape(0)
        wshape = _shape(wv.type)
        if len(wshape) != 5:
            raise node.fail(f"the weight of a 3-D ConvTranspose must have rank 5, got shape {wshape}")
        kd = wshape[2]

        def tap(k: int) -> _Value:
            """The (H, W) kernel slice of depth tap ``k``."""
            if wv.const is not None:
                part = np.ascontiguousarray(np.asarray(wv.const)[:, :, k])
                return _Value(_type_of(part, node.where()), part)
            return _new(node.subtensor(node.ssa(1), (2,), (k,), (k + 1,), drop=(1,)))

        stride = [int(v) for v in node.attr("strides", [1, 1, 1])]
        dilation = [int(v) for v in node.attr("dilations", [1, 1, 1])]
        pads = [int(v) for v in node.attr("pads", [0] * 6)]
        out_pad = [int(v) for v in node.attr("output_padding", [0, 0, 0])]
        if not len(stride) == len(dilation) == len(out_pad) == 3 or len(pads) != 6:
            raise node.fail("strides, dilations and output_padding need 3 entries, pads 6")
        imp, onnx_helper = node.imp, node.imp.onnx.helper
        planes = node.emit1(T.DimshuffleOp, [node.ssa(0)], pattern=(0, 2, 1, 3, 4))
        planes = node.reshape(planes, (n * d, c, h, w))
        full_d = stride[0] * (d - 1) + dilation[0] * (kd - 1) + 1
        total: SSAValue | None = None
        for k in range(kd):
            proto = type(node.proto)()
            proto.CopyFrom(node.proto)
            del proto.input[2:]  # the bias is added once, below
            for i, value in (
                (0, _new(planes)),
                (1, tap(k)),
            ):
                name = f"<xmge depth tap {k}>{proto.input[i]}"  # no ONNX name starts so
                imp.values[name] = value
                proto.input[i] = name
            proto.name = node.proto.name or node.proto.output[0]  # errors name the ONNX node
            proto.output[0] = f"<xmge depth tap {k}>{proto.output[0]}"
            keep = [
                a
                for a in proto.attribute
                if a.name not in ("kernel_shape", "strides", "dilations", "pads", "output_padding")
            ]
            del proto.attribute[:]
            proto.attribute.extend(keep)
            for key, value in (
                ("kernel_shape", list(wshape[3:])),
                ("strides", stride[1:]),
                ("dilations", dilation[1:]),
                ("pads", [pads[1], pads[2], pads[4], pads[5]]),
                ("output_padding", out_pad[1:]),
            ):
                proto.attribute.append(onnx_helper.make_attribute(key, value))
            out = handler(_Node(imp, proto))[0]
            assert out is not None and out.ssa is not None
            _, co, oh, ow = _shape(out.ssa.type)
            y = node.reshape(out.ssa, (n, d, 1, co * oh * ow))
            if stride[0] > 1:  # zero stuffing: input plane j lands on row j * stride
                y = node.emit1(T.PaddingOp, [y], front=(0, 0, 0, 0), back=(0, 0, stride[0] - 1, 0), value=0.0)
            y = node.reshape(y, (n, d * stride[0], co * oh * ow))
            y = node.subtensor(y, (1,), (0,), (stride[0] * (d - 1) + 1,))
            front = k * dilation[0]
            back = full_d - front - (stride[0] * (d - 1) + 1)
            y = node.emit1(T.PaddingOp, [y], front=(0, front, 0), back=(0, back, 0), value=0.0)
            total = y if total is None else node.elemwise(E.ADD, total, y)
        assert total is not None
        out_d = full_d - pads[0] - pads[3] + out_pad[0]
        if pads[0] or pads[3] or out_pad[0]:
            grow = max(out_pad[0] - pads[3], 0)
            if grow:
                total = node.emit1(T.PaddingOp, [total], front=(0, 0, 0), back=(0, grow, 0), value=0.0)
            total = node.subtensor(total, (1,), (pads[0],), (pads[0] + out_d,))
        y = node.reshape(total, (n, out_d, co, oh, ow))
        y = node.emit1(T.DimshuffleOp, [y], pattern=(0, 2, 1, 3, 4))
        if node.has(2):
            bias = np.asarray(node.const(2, "B"), np.float32).reshape(1, -1, 1, 1, 1)
            y = node.elemwise(E.ADD, y, node.constant(bias))
        return [_new(y)]

    return run


@handles("ConvTranspose")
@_depth_taps_3d
@_lift_1d
def _conv_transpose(node: _Node) -> list[_Value | None]:
    a = _ConvAttrs.of(node)
    xs, ws, stride, dilation = a.xs, a.ws, a.stride, a.dilation
    kernel = [int(k) for k in ws[2:]]
    out_pad = [int(p) for p in node.attr("output_padding", [0, 0])]
    full = [stride[i] * (xs[2 + i] - 1) + dilation[i] * (kernel[i] - 1) + 1 for i in range(2)]
    out_shape = node.attr("output_shape")
    auto_pad = node.attr("auto_pad", "NOTSET")
    if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # the spec's total_padding: SAME_UPPER puts the smaller half first, anything else the larger
        out_hw = (
            [int(s) for s in out_shape[-2:]]
            if out_shape is not None
            else [x * s for x, s in zip(xs[2:], stride, strict=True)]
        )
        total = [full[i] + out_pad[i] - out_hw[i] for i in range(2)]
        # a negative total (an output_shape beyond the full result) extends it with zero rows
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        end = [t - b for t, b in zip(total, begin, strict=True)]
    else:
        begin, end = _spatial_pads(node, xs[2:], kernel, stride, dilation)
    w, sparse = a.weight(node)
    params = {"stride": tuple(stride), "dilation": tuple(dilation), "sparse": sparse}
    if begin == end and min(begin) >= 0 and all(p < s for p, s in zip(out_pad, stride, strict=True)):
        y = node.emit1(
            T.ConvolutionBackwardDataOp,
            [w, node.ssa(0)],
            padding=tuple(begin),
            output_padding=tuple(out_pad),
            **params,
        )
    else:
        # the full result, extended by output_padding zero rows/columns, then cropped by the pads
        y = node.emit1(T.ConvolutionBackwardDataOp, [w, node.ssa(0)], padding=(0, 0), **params)
        grow = [max(out_pad[i] - end[i], 0) for i in range(2)]
        lead = [max(-b, 0) for b in begin]  # negative begin pads: zero rows in front
        if any(grow) or any(lead):
            y = node.emit1(T.PaddingOp, [y], front=(0, 0, *lead), back=(0, 0, grow[0], grow[1]))
        starts = [begin[i] + lead[i] for i in range(2)]
        stops = [full[i] + out_pad[i] - end[i] + lead[i] for i in range(2)]
        y = node.subtensor(y, (2, 3), starts, stops)
    if node.has(2):
        y = node.elemwise(E.ADD, y, _channel_param(node, 2, 4))
    return [_new(y)]


@handles("Gemm")
def _gemm(node: _Node) -> list[_Value | None]:
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    y = node.emit1(
        T.MatrixMulOp,
        [node.ssa(0), node.ssa(1)],
        transpose_a=bool(node.attr("transA", 0)),
        transpose_b=bool(node.attr("transB", 0)),
    )
    if alpha != 1.0:
        y = node.elemwise(E.MUL, y, node.scalar(alpha, y))
    if node.has(2) and beta != 0.0:
        t = y.type
        assert isinstance(t, TensorType)
        c = node.value(2)
        if beta != 1.0 and c.const is not None:
            c_ssa = node.constant((c.const * beta).astype(c.const.dtype))
        else:
            c_ssa = node.operand_like(2, t)
            if beta != 1.0:
                c_ssa = node.elemwise(E.MUL, c_ssa, node.scalar(beta, c_ssa))
        y = node.elemwise(E.ADD, y, c_ssa)
    return [_new(y)]


@handles("MatMul")
def _matmul(node: _Node) -> list[_Value | None]:
    a, b = node.ssa(0), node.ssa(1)
    sa, sb = list(node.shape(0)), list(node.shape(1))
    if not sa or not sb:
        raise node.fail("MatMul of a 0-d tensor is not defined")
    squeeze_a, squeeze_b = len(sa) == 1, len(sb) == 1
    if squeeze_a:
        sa = [1, *sa]
        a = node.reshape(a, sa)
    if squeeze_b:
        sb = [*sb, 1]
        b = node.reshape(b, sb)
    if len(sb) == 2:
        lead = sa[:-1]
        y = node.emit1(T.MatrixMulOp, [node.reshape(a, (math.prod(lead), sa[-1])), b])
        out = [*lead, sb[-1]]
    else:
        try:
            batch = list(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2])))
        except ValueError:
            raise node.fail(f"batch dimensions of {tuple(sa)} and {tuple(sb)} do not broadcast") from None

        def batched(v: SSAValue, s: list[int]) -> SSAValue:
            full = [*batch, *s[-2:]]
            if s != full:
                t = v.type
                assert isinstance(t, TensorType)
                v = node.emit1(T.BroadcastOp, [v], [TensorType(t.element_type, full)])
            return node.reshape(v, (math.prod(batch), *s[-2:]))

        y = node.emit1(T.BatchedMatrixMulOp, [batched(a, sa), batched(b, sb)])
        out = [*batch, sa[-2], sb[-1]]
    if squeeze_a:
        del out[-2]
    if squeeze_b:
        del out[-1]
    return [_new(node.reshape(y, out))]


# ----------------------------------------------------------------------------------------------
# Normalisation and softmax


@handles("BatchNormalization")
def _batch_norm(node: _Node) -> list[_Value | None]:
    if node.attr("training_mode", 0):
        return _batch_norm_training(node)
    rank = len(node.shape(0))
    if rank < 2:
        raise node.fail(f"the input needs a channel axis, got shape {node.shape(0)}")
    if (
        node.opset < 9
        and not node.attr("spatial", 1)
        and any(math.prod(node.shape(i)) != node.shape(0)[1] for i in range(1, 5))
    ):
        raise node.fail("spatial=0 with per-position statistics is not supported (one per channel is)")
    params = [_channel_param(node, i, rank) for i in range(1, 5)]
    y = node.emit1(T.BatchNormOp, [node.ssa(0), *params], epsilon=float(node.attr("epsilon", 1e-5)))
    return [_new(y)] + [None] * (len(node.proto.output) - 1)


def _batch_norm_training(node: _Node) -> list[_Value | None]:
    """training_mode=1 (opset 14+): normalised with the batch's own statistics (over every axis
    but the channels, population variance); the running mean and variance outputs updated with
    ``momentum``."""
    shape = node.shape(0)
    rank = len(shape)
    if rank < 2:
        raise node.fail(f"the input needs a channel axis, got shape {shape}")
    c = shape[1]
    x = node.ssa(0)
    # (N, C, rest) -> (C, N * rest): per-channel rows
    moved = node.emit1(
        T.DimshuffleOp, [node.reshape(x, (shape[0], c, math.prod(shape[2:])))], pattern=(1, 0, 2)
    )
    rows = node.reshape(moved, (c, shape[0] * math.prod(shape[2:])))
    mean = node.emit1(T.ReduceOp, [rows], mode=enums.ReduceMode.MEAN, axis=1)
    centered = node.elemwise(E.SUB, rows, mean)
    var = node.emit1(T.ReduceOp, [node.elemwise(E.SQUARE, centered)], mode=enums.ReduceMode.MEAN, axis=1)
    view = (1, c) + (1,) * (rank - 2)
    mean_b, var_b = node.reshape(mean, view), node.reshape(var, view)
    eps = node.scalar(float(np.float32(node.attr("epsilon", 1e-5))), var_b)
    inv = node.elemwise(
        E.TRUE_DIV, node.scalar(1.0, var_b), node.elemwise(E.SQRT, node.elemwise(E.ADD, var_b, eps))
    )
    y = node.elemwise(E.MUL, node.elemwise(E.SUB, x, mean_b), inv)
    y = node.elemwise(E.FUSE_MUL_ADD3, y, _channel_param(node, 1, rank), _channel_param(node, 2, rank))
    outs: list[_Value | None] = [_new(y)]
    momentum = float(node.attr("momentum", 0.9))
    for k, (i, batch) in enumerate(((3, mean), (4, var)), start=1):
        if k < len(node.proto.output) and node.proto.output[k]:
            running = node.reshape(node.ssa(i), (c, 1))
            updated = node.elemwise(
                E.FUSE_MUL_ADD4,
                running,
                node.scalar(momentum, running),
                batch,
                node.scalar(1 - momentum, batch),
            )
            outs.append(_new(node.reshape(updated, (c,))))
        else:
            outs.append(None)
    return outs


@handles("LayerNormalization")
def _layer_norm(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", -1)), len(shape), node)
    size = math.prod(shape[axis:])
    x = node.ssa(0)
    weight = node.ssa(1)
    bias = node.ssa(2) if node.has(2) else node.constant(np.zeros(shape[axis:], np.float32))
    op = node.emit(
        T.LayerNormOp,
        [x, weight, bias],
        affine=True,
        eps=float(node.attr("epsilon", 1e-5)),
        normalized_dim=len(shape) - axis,
        normalized_size=size,
    )
    outs: list[_Value | None] = [_new(op.results[0])]
    if any(node.proto.output[1:]):
        # the optional Mean and InvStdDev outputs: the statistics over the normalized axes,
        # shaped like the input with those axes kept as 1
        lead = math.prod(shape[:axis])
        stat_shape = (*shape[:axis], *(1,) * (len(shape) - axis))
        flat = node.reshape(x, (lead, size))
        mean = node.emit1(T.ReduceOp, [flat], mode=enums.ReduceMode.MEAN, axis=1)
        centered = node.elemwise(E.SUB, flat, mean)
        var = node.emit1(T.ReduceOp, [node.elemwise(E.SQUARE, centered)], mode=enums.ReduceMode.MEAN, axis=1)
        eps = float(np.float32(node.attr("epsilon", 1e-5)))
        std = node.elemwise(E.SQRT, node.elemwise(E.ADD, var, node.scalar(eps, var)))
        inv = node.elemwise(E.TRUE_DIV, node.scalar(1.0, std), std)
        outs += [_new(node.reshape(mean, stat_shape)), _new(node.reshape(inv, stat_shape))]
    return outs


def _softmax_core(node: _Node, log: bool) -> SSAValue:
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", -1 if node.opset >= 13 else 1)), len(shape), node)
    x = node.ssa(0)
    if node.opset < 13 and axis != len(shape) - 1:  # opsets 1-12 coerce to 2-D at ``axis``
        x = node.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
        axis = 1
    if log:
        shifted = node.elemwise(E.SUB, x, node.emit1(T.ReduceOp, [x], mode=enums.ReduceMode.MAX, axis=axis))
        total = node.emit1(T.ReduceOp, [node.elemwise(E.EXP, shifted)], mode=enums.ReduceMode.SUM, axis=axis)
        y = node.elemwise(E.SUB, shifted, node.elemwise(E.LOG, total))
    else:
        y = node.emit1(T.SoftmaxOp, [x], axis=axis)
    return node.reshape(y, shape)


@handles("Softmax")
def _softmax(node: _Node) -> list[_Value | None]:
    return [_new(_softmax_core(node, log=False))]


@handles("LogSoftmax")
def _log_softmax(node: _Node) -> list[_Value | None]:
    return [_new(_softmax_core(node, log=True))]


# ----------------------------------------------------------------------------------------------
# Pooling


def _pool_geometry(
    node: _Node, in_hw: Sequence[int], kernel: Sequence[int], stride: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """ONNX's (begin pad, end pad, output size) per spatial axis, ceil_mode included."""
    begin, end = _spatial_pads(node, in_hw, kernel, stride, [1, 1])
    ceil = bool(node.attr("ceil_mode", 0))
    out = []
    for i in range(2):
        span = in_hw[i] + begin[i] + end[i] - kernel[i]
        if span < 0:
            raise node.fail(f"the window {kernel} is larger than the padded input {tuple(in_hw)}")
        o = (-(-span // stride[i]) if ceil else span // stride[i]) + 1
        if ceil and (o - 1) * stride[i] >= in_hw[i] + begin[i]:  # the last window must start inside
            o -= 1
        out.append(o)
    return begin, end, out


def _dilated_pool(node: _Node, shape: tuple[int, ...]) -> SSAValue:
    """Dilated pooling (MegEngine's pooling has no dilation): the input padded explicitly (-inf
    for max, zeros for average), one strided slice per window tap, their maximum or sum; an
    average divides each output by the taps that fall inside the (padded, with count_include_pad)
    input."""
    kernel = [int(k) for k in node.attr("kernel_shape")]
    stride = [int(s) for s in node.attr("strides", [1, 1])]
    dilation = [int(d) for d in node.attr("dilations", [1, 1])]
    if min(dilation) < 1 or min(stride) < 1:
        raise node.fail(f"strides {stride} and dilations {dilation} must be positive")
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True)]
    in_hw = shape[2:]
    begin, end, out = _pool_geometry(node, in_hw, span, stride)
    is_max = node.op_type == "MaxPool"
    back = [max((out[i] - 1) * stride[i] + span[i] - in_hw[i] - begin[i], 0) for i in range(2)]
    x = node.emit1(
        T.PaddingOp,
        [node.ssa(0)],
        front=(0, 0, *begin),
        back=(0, 0, *back),
        value=-math.inf if is_max else 0.0,
    )
    acc: SSAValue | None = None
    for ky in range(kernel[0]):
        for kx in range(kernel[1]):
            starts = [ky * dilation[0], kx * dilation[1]]
            stops = [starts[i] + (out[i] - 1) * stride[i] + 1 for i in range(2)]
            tap = node.subtensor(x, (2, 3), starts, stops, stride)
            acc = tap if acc is None else node.elemwise(E.MAX if is_max else E.ADD, acc, tap)
    assert acc is not None
    if is_max:
        return acc
    include_pad = bool(node.attr("count_include_pad", 0))
    counts = []
    for i in range(2):
        taps = np.arange(out[i])[:, None] * stride[i] - begin[i] + np.arange(kernel[i])[None, :] * dilation[i]
        lo, hi = (-begin[i], in_hw[i] + end[i]) if include_pad else (0, in_hw[i])
        counts.append(((taps >= lo) & (taps < hi)).sum(axis=1))
    count = np.outer(counts[0], counts[1]).astype(np.float32).reshape(1, 1, *out)
    return node.elemwise(E.TRUE_DIV, acc, node.constant(np.maximum(count, 1)))


def _divisors(in_size: int, k: int, s: int, begin: int, end: int, out: int, include_pad: bool) -> np.ndarray:
    """How many elements ONNX averages over in each window along one axis."""
    starts = np.arange(out) * s - begin
    if include_pad:
        return np.minimum(starts + k, in_size + end) - starts
    return np.minimum(starts + k, in_size) - np.maximum(starts, 0)


def _separate_3d(handler: Handler) -> Handler:
    """3-D pooling (N, C, D, H, W) as two 2-D poolings: over (H, W) on (N, C*D, H, W), then over
    D on (N, C, D, H'*W') with a (kd, 1) window. A box's maximum is the maximum of its planes'
    maxima; its sum and element count (padding counted or not) are products of per-axis ones."""

    def run(node: _Node) -> list[_Value | None]:
        shape = node.shape(0)
        if len(shape) not in (3, 4, 5):
            raise node.fail(
                f"pooling takes 1-D, 2-D or 3-D inputs (rank 3 to 5), got a rank-{len(shape)} input"
            )
        if len(shape) != 5:
            return handler(node)
        if len(node.proto.output) > 1 and node.proto.output[1]:
            raise node.fail("the Indices output is not supported")
        n, c, d, h, w = shape
        imp, onnx_helper = node.imp, node.imp.onnx.helper
        kernel = [int(k) for k in node.attr("kernel_shape")]
        stride = [int(v) for v in node.attr("strides", [1, 1, 1])]
        dilation = [int(v) for v in node.attr("dilations", [1, 1, 1])]
        pads = [int(v) for v in node.attr("pads", [0] * 6)]
        if not len(kernel) == len(stride) == len(dilation) == 3 or len(pads) != 6:
            raise node.fail("kernel_shape, strides and dilations need 3 entries, pads 6")

        def apply(x: SSAValue, tag: str, k: list[int], s: list[int], dl: list[int], p: list[int]) -> SSAValue:
            proto = type(node.proto)()
            proto.CopyFrom(node.proto)
            del proto.output[1:]
            name = f"<xmge {tag}>{proto.input[0]}"
            imp.values[name] = _new(x)
            proto.input[0] = name
            proto.name = node.proto.name or node.proto.output[0]  # errors name the ONNX node
            proto.output[0] = f"<xmge {tag}>{proto.output[0]}"
            keep = [
                a for a in proto.attribute if a.name not in ("kernel_shape", "strides", "dilations", "pads")
            ]
            del proto.attribute[:]
            proto.attribute.extend(keep)
            for key, value in (("kernel_shape", k), ("strides", s), ("dilations", dl), ("pads", p)):
                proto.attribute.append(onnx_helper.make_attribute(key, value))
            out = handler(_Node(imp, proto))[0]
            assert out is not None and out.ssa is not None
            return out.ssa

        x = node.reshape(node.ssa(0), (n, c * d, h, w))
        y = apply(x, "hw", kernel[1:], stride[1:], dilation[1:], [pads[1], pads[2], pads[4], pads[5]])
        _, _, oh, ow = _shape(y.type)
        y = node.reshape(y, (n, c, d, oh * ow))
        y = apply(y, "d", [kernel[0], 1], [stride[0], 1], [dilation[0], 1], [pads[0], 0, pads[3], 0])
        od = _shape(y.type)[2]
        return [_new(node.reshape(y, (n, c, od, oh, ow)))]

    return run


@handles("MaxPool", "AveragePool")
@_separate_3d
@_lift_1d
def _pool(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    _require_2d(node, len(shape))
    want_indices = len(node.proto.output) > 1 and bool(node.proto.output[1])
    if want_indices and any(d != 1 for d in node.attr("dilations", [1, 1])):
        raise node.fail("the Indices output with dilations is not supported")
    if any(d != 1 for d in node.attr("dilations", [1, 1])):
        return [_new(_dilated_pool(node, shape))]
    kernel = [int(k) for k in node.attr("kernel_shape")]
    stride = [int(s) for s in node.attr("strides", [1, 1])]
    in_hw = shape[2:]
    begin, end, out = _pool_geometry(node, in_hw, kernel, stride)
    is_max = node.op_type == "MaxPool"
    include_pad = bool(node.attr("count_include_pad", 0))
    # what each window must cover at the end: beyond ``end`` only with ceil_mode
    reach = [(out[i] - 1) * stride[i] + kernel[i] - in_hw[i] - begin[i] for i in range(2)]
    x = node.ssa(0)
    P = enums.PoolingMode
    if all(begin[i] == end[i] and reach[i] <= begin[i] and begin[i] < kernel[i] for i in range(2)):
        mode = P.MAX if is_max else (P.AVERAGE if include_pad else P.AVERAGE_COUNT_EXCLUDE_PADDING)
        y = node.emit1(
            T.PoolingOp, [x], mode=mode, window=tuple(kernel), stride=tuple(stride), padding=tuple(begin)
        )
    else:
        # explicit padding (-inf for max, zeros for average), then a plain window sum / count
        back = [max(reach[i], 0) for i in range(2)]
        x = node.emit1(
            T.PaddingOp, [x], front=(0, 0, *begin), back=(0, 0, *back), value=-math.inf if is_max else 0.0
        )
        y = node.emit1(
            T.PoolingOp, [x], mode=P.MAX if is_max else P.AVERAGE, window=tuple(kernel), stride=tuple(stride)
        )
        if not is_max:
            dh, dw = (
                _divisors(in_hw[i], kernel[i], stride[i], begin[i], end[i], out[i], include_pad)
                for i in range(2)
            )
            count = np.outer(dh, dw)
            if (count != kernel[0] * kernel[1]).any():
                scale = (kernel[0] * kernel[1] / count).astype(np.float32).reshape(1, 1, *out)
                y = node.elemwise(E.MUL, y, node.constant(scale))
    got = _shape(y.type)[2:]
    if list(got) != out:
        y = node.subtensor(y, (2, 3), (0, 0), out)
    if want_indices:
        return [_new(y), _new(_max_pool_indices(node, shape, kernel, stride, begin, out))]
    return [_new(y)]


def _max_pool_indices(
    node: _Node,
    shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    begin: Sequence[int],
    out: Sequence[int],
) -> SSAValue:
    """MaxPool's Indices (flat index into the input of each window's first maximum; the spatial
    part column-major with ``storage_order=1``),
    by a scan over the window offsets: each is a strided slice of the -inf padded input, and a
    strictly greater value takes over its index."""
    n, c, h, w = shape
    column_major = bool(node.attr("storage_order", 0))
    back = [max((out[i] - 1) * stride[i] + kernel[i] - shape[2 + i] - begin[i], 0) for i in range(2)]
    xp = node.emit1(T.PaddingOp, [node.ssa(0)], front=(0, 0, *begin), back=(0, 0, *back), value=-math.inf)
    plane = (np.arange(n * c, dtype=np.int64) * h * w).reshape(n, c, 1, 1)
    oh = np.arange(out[0]).reshape(-1, 1) * stride[0] - begin[0]
    ow = np.arange(out[1]).reshape(1, -1) * stride[1] - begin[1]
    best: SSAValue | None = None
    index: SSAValue | None = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            stops = (i + (out[0] - 1) * stride[0] + 1, j + (out[1] - 1) * stride[1] + 1)
            v = node.subtensor(xp, (2, 3), (i, j), stops, tuple(stride))
            spatial = (oh + i) + (ow + j) * h if column_major else (oh + i) * w + (ow + j)
            flat = node.constant((plane + spatial).astype(np.int32))
            if best is None or index is None:
                best, index = v, flat
                continue
            took = node.elemwise(E.LT, best, v)
            took = node.emit1(T.TypeCvtOp, [took], [TensorType(element_type("int32"), _shape(took.type))])
            index = node.elemwise(E.ADD, index, node.elemwise(E.MUL, took, node.elemwise(E.SUB, flat, index)))
            best = node.elemwise(E.MAX, best, v)
    assert index is not None
    return index


@handles("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    mode = enums.PoolingMode.MAX if node.op_type == "GlobalMaxPool" else enums.PoolingMode.AVERAGE
    if len(shape) == 4:
        return [_new(node.emit1(T.AdaptivePoolingOp, [node.ssa(0)], mode=mode, out_shape=(1, 1)))]
    y = node.ssa(0)
    reduce = enums.ReduceMode.MAX if node.op_type == "GlobalMaxPool" else enums.ReduceMode.MEAN
    for axis in range(2, len(shape)):
        y = node.emit1(T.ReduceOp, [y], mode=reduce, axis=axis)
    return [_new(y)]


# ----------------------------------------------------------------------------------------------
# Reductions

_REDUCE = {
    "ReduceMean": [enums.ReduceMode.MEAN],
    "ReduceSum": [enums.ReduceMode.SUM],
    "ReduceMax": [enums.ReduceMode.MAX],
    "ReduceMin": [enums.ReduceMode.MIN],
    "ReduceProd": [enums.ReduceMode.PRODUCT],
    "ReduceSumSquare": [enums.ReduceMode.SUM_SQR, enums.ReduceMode.SUM],
    "ReduceL2": [enums.ReduceMode.SUM_SQR, enums.ReduceMode.SUM],
    "ReduceL1": [enums.ReduceMode.SUM],
    "ReduceLogSum": [enums.ReduceMode.SUM],
    "ReduceLogSumExp": [enums.ReduceMode.SUM],
}


@handles(*_REDUCE)
def _reduce(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    axes = node.axes(13 if node.op_type == "ReduceSum" else 18)
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return [node.value(0)]
        axes = list(range(len(shape)))
    axes = sorted({_axis(a, len(shape), node) for a in axes})
    x = node.ssa(0)
    if node.op_type == "ReduceL1":
        x = node.elemwise(E.ABS, x)
    elif node.op_type == "ReduceLogSumExp":
        x = node.elemwise(E.EXP, x)
    first, rest = _REDUCE[node.op_type][0], _REDUCE[node.op_type][-1]
    for k, axis in enumerate(axes):
        x = node.emit1(T.ReduceOp, [x], mode=first if k == 0 else rest, axis=axis)
    if node.op_type == "ReduceL2":
        x = node.elemwise(E.SQRT, x)
    elif node.op_type in ("ReduceLogSum", "ReduceLogSumExp"):
        x = node.elemwise(E.LOG, x)
    if not node.attr("keepdims", 1):
        x = node.reshape(x, [d for i, d in enumerate(shape) if i not in axes])
    return [_new(x)]


@handles("ArgMax", "ArgMin")
def _arg(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", 0)), len(shape), node)
    cls = T.ArgmaxOp if node.op_type == "ArgMax" else T.ArgminOp
    x = node.ssa(0)
    last = bool(node.attr("select_last_index", 0)) and shape[axis] > 1
    if last:  # the first extremum of the reversed axis, counted from the end
        x = node.subtensor(x, [axis], [shape[axis] - 1], [-shape[axis] - 1], [-1])
    y = node.emit1(cls, [x], axis=axis)
    if last:
        y = node.elemwise(E.SUB, node.scalar(shape[axis] - 1, y), y)
    if not node.attr("keepdims", 1):
        y = node.reshape(y, [d for i, d in enumerate(shape) if i != axis])
    return [_new(y)]


# ----------------------------------------------------------------------------------------------
# Shape manipulation


@handles("Reshape")
def _reshape(node: _Node) -> list[_Value | None]:
    src = node.shape(0)
    spec = node.ints(1, "shape")
    allow_zero = bool(node.attr("allowzero", 0))
    shape = [src[i] if d == 0 and not allow_zero else d for i, d in enumerate(spec)]
    if shape.count(-1) > 1:
        raise node.fail(f"shape {spec} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or math.prod(src) % known:
            raise node.fail(f"cannot reshape {src} into {spec}")
        shape[shape.index(-1)] = math.prod(src) // known
    if math.prod(shape) != math.prod(src):
        raise node.fail(f"cannot reshape {src} into {tuple(shape)}")
    return [_new(node.reshape(node.ssa(0), shape))]


@handles("Flatten")
def _flatten(node: _Node) -> list[_Value | None]:
    src = node.shape(0)
    axis = int(node.attr("axis", 1))
    axis = axis + len(src) if axis < 0 else axis
    return [_new(node.reshape(node.ssa(0), (math.prod(src[:axis]), math.prod(src[axis:]))))]


@handles("Squeeze")
def _squeeze(node: _Node) -> list[_Value | None]:
    src = node.shape(0)
    axes = node.axes(13)
    axes = (
        [i for i, d in enumerate(src) if d == 1] if axes is None else [_axis(a, len(src), node) for a in axes]
    )
    if any(src[a] != 1 for a in axes):
        raise node.fail(f"cannot squeeze axes {axes} of shape {src}")
    if not axes:
        return [node.value(0)]
    order = sorted(set(axes), reverse=True)
    y = node.emit1(
        T.AxisAddRemoveOp, [node.ssa(0)], methods=[enums.AxisMethod.REMOVE] * len(order), axes=tuple(order)
    )
    return [_new(y)]


@handles("Unsqueeze")
def _unsqueeze(node: _Node) -> list[_Value | None]:
    src = node.shape(0)
    axes = node.axes(13)
    if not axes:
        raise node.fail("needs axes")
    rank = len(src) + len(axes)
    order = sorted({_axis(a, rank, node) for a in axes})
    y = node.emit1(
        T.AxisAddRemoveOp, [node.ssa(0)], methods=[enums.AxisMethod.ADD_1] * len(order), axes=tuple(order)
    )
    return [_new(y)]


@handles("Transpose")
def _transpose(node: _Node) -> list[_Value | None]:
    rank = len(node.shape(0))
    perm = [int(p) for p in node.attr("perm", list(range(rank))[::-1])]
    if perm == list(range(rank)):
        return [node.value(0)]
    return [_new(node.emit1(T.DimshuffleOp, [node.ssa(0)], pattern=tuple(perm)))]


@handles("Concat")
def _concat(node: _Node) -> list[_Value | None]:
    present = [i for i in range(node.n_inputs()) if node.has(i) and math.prod(node.shape(i)) > 0]
    if len(present) == 1:
        return [node.value(present[0])]
    rank = len(node.shape(present[0]))
    axis = _axis(int(node.attr("axis")), rank, node)
    like = next(
        (node.value(i).type for i in present if node.value(i).const is None), node.value(present[0]).type
    )
    ins = [node.operand_like(i, like) for i in present]
    return [_new(node.emit1(T.ConcatOp, ins, axis=axis))]


@handles("Split")
def _split(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", 0)), len(shape), node)
    n_out = len(node.proto.output)
    if node.opset >= 13 and node.has(1):
        sizes = node.ints(1, "split")
    elif node.opset < 13 and node.attr("split") is not None:
        sizes = [int(s) for s in node.attr("split")]
    else:
        parts = int(node.attr("num_outputs", n_out))
        chunk = -(-shape[axis] // parts)
        sizes = [min(chunk, shape[axis] - k * chunk) for k in range(parts)]
    op = node.emit(T.SplitOp, [node.ssa(0)], axis=axis, sizes=tuple(sizes))
    return [_new(r) for r in op.results]


@handles("Slice")
def _slice(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    if node.opset < 10:  # starts / ends / axes attributes, no steps
        starts, ends = [int(v) for v in node.attr("starts", [])], [int(v) for v in node.attr("ends", [])]
        axes = [int(v) for v in node.attr("axes", range(len(starts)))]
        steps = [1] * len(starts)
    else:
        starts, ends = node.ints(1, "starts"), node.ints(2, "ends")
        axes = node.ints(3, "axes") if node.has(3) else list(range(len(starts)))
        steps = node.ints(4, "steps") if node.has(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.fail("starts, ends, axes and steps must have equal lengths")
    out_axes, out_starts, out_stops, out_steps = [], [], [], []
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            raise node.fail("a slice step cannot be zero")
        axis = _axis(axis, len(shape), node)
        dim = shape[axis]
        # Python's slice clamping is ONNX's; a stop of -1 means "before index 0" after it
        b, e, s = slice(start, end, step).indices(dim)
        if (b, e, s) == (0, dim, 1):
            continue
        out_axes.append(axis)
        out_starts.append(b)
        out_stops.append(-dim - 1 if e < 0 else e)
        out_steps.append(s)
    if not out_axes:
        return [node.value(0)]
    return [_new(node.subtensor(node.ssa(0), out_axes, out_starts, out_stops, out_steps))]


_GATHER_SLICES = 16
"""Constant Gather indices up to this many become slices and a concat (what tracing
``x[[0, 2, 3]]``-style code records); more become one IndexingMultiAxisVec on a constant."""


@handles("Gather")
def _gather(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", 0)), len(shape), node)
    if node.value(1).const is None:  # run-time indices (token ids, ...): advanced indexing
        t = node.value(1).type
        if not isinstance(t.element_type, IntegerType) or isinstance(t.element_type, QuantizedType):
            raise node.fail(f"indices must be integers, got {t.element_type}")
        i32 = element_type("int32")
        idx_ssa = node.ssa(1)
        if t.element_type != i32:
            idx_ssa = node.emit1(T.TypeCvtOp, [idx_ssa], [TensorType(i32, t.get_shape())])
        if not t.get_shape():  # a 0-d index drops the axis
            idx_ssa = node.reshape(idx_ssa, (1,))
            y = node.emit1(T.IndexingMultiAxisVecOp, [node.ssa(0), idx_ssa], axes=(axis,))
            return [_new(node.reshape(y, (*shape[:axis], *shape[axis + 1 :])))]
        return [_new(node.emit1(T.IndexingMultiAxisVecOp, [node.ssa(0), idx_ssa], axes=(axis,)))]
    idx = np.asarray(node.const(1, "indices")).astype(np.int64)
    dim = shape[axis]
    if ((idx < -dim) | (idx >= dim)).any():
        raise node.fail(f"indices {idx.reshape(-1).tolist()} out of range for axis {axis} of size {dim}")
    flat = [int(i) % dim for i in idx.reshape(-1)]
    x = node.ssa(0)
    if idx.ndim == 0:
        return [_new(node.subtensor(x, [axis], [flat[0]], [flat[0] + 1], drop=[1]))]
    steps = {b - a for a, b in zip(flat, flat[1:], strict=False)}
    if len(flat) == 1 or (len(steps) == 1 and 0 not in steps):
        step = steps.pop() if steps else 1
        stop = flat[-1] + (1 if step > 0 else -1)
        y = node.subtensor(x, [axis], [flat[0]], [stop if stop >= 0 else -dim - 1], [step])
    elif not flat:
        raise node.fail("empty indices are not supported")
    elif len(flat) > _GATHER_SLICES:
        # many irregular indices: one indexing op on a constant index vector, not an op per index
        # (10^4 indices took seconds to import as slices and a concat)
        table = node.constant(np.asarray(flat, np.int32))
        y = node.emit1(T.IndexingMultiAxisVecOp, [x, table], axes=(axis,))
    else:
        y = node.emit1(T.ConcatOp, [node.subtensor(x, [axis], [i], [i + 1]) for i in flat], axis=axis)
    return [_new(node.reshape(y, (*shape[:axis], *idx.shape, *shape[axis + 1 :])))]


@handles("Expand")
def _expand(node: _Node) -> list[_Value | None]:
    src = node.shape(0)
    try:
        out = tuple(np.broadcast_shapes(src, tuple(node.ints(1, "shape"))))
    except ValueError:
        raise node.fail(f"cannot expand {src} to {node.ints(1, 'shape')}") from None
    if out == src:
        return [node.value(0)]
    t = node.value(0).type
    return [_new(node.emit1(T.BroadcastOp, [node.ssa(0)], [TensorType(t.element_type, list(out))]))]


@handles("Tile")
def _tile(node: _Node) -> list[_Value | None]:
    src = node.shape(0)
    reps = node.ints(1, "repeats")
    if len(reps) != len(src):
        raise node.fail(f"repeats {reps} must have one entry per axis of {src}")
    if all(r == 1 for r in reps):
        return [node.value(0)]
    t = node.value(0).type
    # (d0, d1, ...) → (1, d0, 1, d1, ...) → broadcast (r0, d0, r1, d1, ...) → (r0 d0, r1 d1, ...)
    inter = [x for d in src for x in (1, d)]
    y = node.reshape(node.ssa(0), inter)
    y = node.emit1(
        T.BroadcastOp,
        [y],
        [TensorType(t.element_type, [x for r, d in zip(reps, src, strict=True) for x in (r, d)])],
    )
    return [_new(node.reshape(y, [r * d for r, d in zip(reps, src, strict=True)]))]


_PAD_MODES = {
    "constant": enums.PaddingMode.CONSTANT,
    "reflect": enums.PaddingMode.REFLECT,
    "edge": enums.PaddingMode.REPLICATE,
}


@handles("Pad")
def _pad(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    rank = len(shape)
    mode_name = node.attr("mode", "constant")
    if mode_name not in _PAD_MODES and mode_name != "wrap":
        raise node.fail(f"mode {mode_name!r} is not an ONNX Pad mode (constant, reflect, edge, wrap)")
    pads = [int(p) for p in node.attr("pads", [])] if node.opset < 11 else node.ints(1, "pads")
    axes = [_axis(a, rank, node) for a in node.ints(3, "axes")] if node.has(3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise node.fail(f"pads {pads} needs two entries per padded axis ({len(axes)})")
    front, back = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        front[a], back[a] = pads[k], pads[len(axes) + k]
    value = float(node.attr("value", 0.0))
    if node.opset >= 11 and node.has(2):
        cv = np.asarray(node.const(2, "constant_value")).reshape(-1)
        value = float(cv[0]) if cv.size else 0.0
    x = node.ssa(0)
    if mode_name == "wrap":  # the input repeated around itself: slices of the other end, concatenated
        for a in range(rank):
            f, b, n = max(front[a], 0), max(back[a], 0), shape[a]
            if not (f or b):
                continue
            if f > n or b > n:
                raise node.fail(f"wrap pads {f}, {b} longer than axis {a} ({n})")
            parts = [node.subtensor(x, [a], [n - f], [n])] if f else []
            parts.append(x)
            if b:
                parts.append(node.subtensor(x, [a], [0], [b]))
            x = node.emit1(T.ConcatOp, parts, axis=a)
    elif any(p > 0 for p in front + back):
        x = node.emit1(
            T.PaddingOp,
            [x],
            front=tuple(max(p, 0) for p in front),
            back=tuple(max(p, 0) for p in back),
            value=value,
            mode=_PAD_MODES[mode_name],
        )
    if any(p < 0 for p in front + back):  # negative pads crop
        crop = [a for a in range(rank) if front[a] < 0 or back[a] < 0]
        padded = _shape(x.type)
        x = node.subtensor(
            x, crop, [max(-front[a], 0) for a in crop], [padded[a] - max(-back[a], 0) for a in crop]
        )
    return [_new(x)]


# ----------------------------------------------------------------------------------------------
# Resize


def _resize_request(
    node: _Node, shape: tuple[int, ...]
) -> tuple[list[float], list[int], OnnxResizeAxis, list[float]]:
    """(scale per axis, output size per axis, the sampling attributes, roi) of a Resize / Upsample
    at the node's opset."""
    rank = len(shape)
    mode = node.attr("mode", "nearest")
    if node.op_type == "Upsample" or node.opset < 11:
        # Upsample (opsets 7-9) and Resize-10: scales only, asymmetric coordinates, nearest = floor
        if node.op_type == "Upsample" and node.opset < 9:
            scales = [float(f) for f in node.attr("scales", [])]
        else:
            scales = [float(f) for f in node.const(1, "scales").reshape(-1)]
        if len(scales) != rank:
            raise node.fail(f"scales {scales} need one entry per axis of {shape}")
        mode = {"bilinear": "linear"}.get(mode, mode)
        if mode not in ("nearest", "linear"):
            raise node.fail(
                f"mode {mode!r} is not an opset-{node.opset} {node.op_type} mode (nearest, linear)"
            )
        sizes = [int(math.floor(d * f)) for d, f in zip(shape, scales, strict=True)]
        attrs = OnnxResizeAxis(mode, "asymmetric", "floor")
        return scales, sizes, attrs, [0.0] * rank + [1.0] * rank
    if mode not in ("nearest", "linear", "cubic"):
        raise node.fail(f"mode {mode!r} is not an ONNX Resize mode (nearest, linear, cubic)")
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    if ctm == "tf_half_pixel_for_nn" and node.opset >= 13:
        raise node.fail("coordinate_transformation_mode 'tf_half_pixel_for_nn' was removed in opset 13")
    antialias = bool(node.attr("antialias", 0))
    if antialias and mode == "nearest":
        raise node.fail("antialias=1 is not defined for mode 'nearest'")
    attrs = OnnxResizeAxis(
        mode,
        ctm,
        node.attr("nearest_mode", "round_prefer_floor"),
        float(node.attr("cubic_coeff_a", -0.75)),
        bool(node.attr("exclude_outside", 0)),
        antialias,
    )
    axes = [_axis(a, rank, node) for a in node.attr("axes", range(rank))]
    scales, sizes = [1.0] * rank, list(shape)
    if node.has(3) and node.const(3, "sizes").size:
        given = node.ints(3, "sizes")
        if len(given) != len(axes):
            raise node.fail(f"sizes {given} need one entry per resized axis {axes}")
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for a, n in zip(axes, given, strict=True):
                sizes[a], scales[a] = n, n / shape[a] if shape[a] else 1.0
        elif policy in ("not_larger", "not_smaller"):
            ratios = [n / shape[a] for a, n in zip(axes, given, strict=True)]
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                sizes[a], scales[a] = int(scale * shape[a] + 0.5), scale
        else:
            raise node.fail(f"keep_aspect_ratio_policy {policy!r} is not an ONNX policy")
    elif node.has(2) and node.const(2, "scales").size:
        given_scales = [float(f) for f in node.const(2, "scales").reshape(-1)]
        if len(given_scales) != len(axes):
            raise node.fail(f"scales {given_scales} need one entry per resized axis {axes}")
        for a, f in zip(axes, given_scales, strict=True):
            if f <= 0:
                raise node.fail(f"scale {f} must be positive")
            scales[a], sizes[a] = f, int(math.floor(shape[a] * f))
    else:
        raise node.fail("needs scales or sizes")
    roi = [0.0] * rank + [1.0] * rank
    if ctm == "tf_crop_and_resize":
        given_roi = [float(v) for v in node.const(1, "roi").reshape(-1)] if node.has(1) else []
        if len(given_roi) != 2 * len(axes):
            raise node.fail(f"roi {given_roi} needs a start and an end per resized axis {axes}")
        for k, a in enumerate(axes):
            roi[a], roi[rank + a] = given_roi[k], given_roi[len(axes) + k]
    return scales, sizes, attrs, roi


@handles("Resize", "Upsample")
def _resize(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    rank = len(shape)
    scales, sizes, attrs, roi = _resize_request(node, shape)
    if any(n <= 0 for n in sizes):
        raise node.fail(f"the output shape {tuple(sizes)} has an empty axis")
    # sized before anything is built: a scale of 10^5 asks for a huge output and per-axis matrices
    out_what = f"its output of shape {tuple(sizes)}"
    node.imp._check_tensor_bytes(node, math.prod(sizes) * 4, out_what, count=False)
    for a in range(rank):
        node.imp._check_tensor_bytes(
            node, sizes[a] * shape[a] * 8, f"its interpolation matrix for axis {a} ({sizes[a]} x {shape[a]})"
        )
    mats: dict[int, np.ndarray] = {}
    outside = np.zeros(sizes, bool) if attrs.coordinate_transformation_mode == "tf_crop_and_resize" else None
    for a in range(rank):
        axis_attrs = replace(attrs, roi=(roi[a], roi[rank + a]))
        try:
            m, out = onnx_resize_matrix(shape[a], sizes[a], scales[a], axis_attrs)
        except ValueError as exc:
            raise node.fail(str(exc)) from None
        if outside is not None and out.any():
            view = [1] * rank
            view[a] = -1
            outside = outside | out.reshape(view)
        if m.shape != (shape[a], shape[a]) or not np.array_equal(m, np.eye(shape[a])):
            mats[a] = m
    extrapolate = outside is not None and outside.any()
    if not mats and not extrapolate:
        return [node.value(0)]
    x = node.ssa(0)
    # MegEngine's Resize when it samples the same pixels (the fast kernel, both spatial axes of NCHW)
    imode = {"nearest": enums.InterpolationMode.NEAREST, "linear": enums.InterpolationMode.LINEAR}.get(
        attrs.mode
    )
    if (
        rank == 4
        and not extrapolate
        and set(mats) <= {2, 3}
        and imode is not None
        and all(
            np.allclose(
                mats.get(a, np.eye(shape[a])), interp_matrix(shape[a], sizes[a], imode), rtol=0, atol=1e-6
            )
            for a in (2, 3)
        )
    ):
        return [_new(node.emit1(T.ResizeOp, [x], out_shape=(sizes[2], sizes[3]), imode=imode))]
    elem = node.value(0).type.element_type
    if not is_float(elem):
        raise node.fail(
            f"{attrs.mode} resampling of a {elem} input with coordinate_transformation_mode "
            f"{attrs.coordinate_transformation_mode!r} is not supported (floating-point inputs are)"
        )
    # separable: a constant resampling matrix per resized axis (a matrix product along it)
    dtype = numpy_dtype(elem)
    current = list(shape)
    for a, m in mats.items():
        perm = [k for k in range(rank) if k != a] + [a]
        y = x if a == rank - 1 else node.emit1(T.DimshuffleOp, [x], pattern=tuple(perm))
        lead = [current[k] for k in perm[:-1]]
        y = node.reshape(y, (math.prod(lead), current[a]))
        y = node.emit1(T.MatrixMulOp, [y, node.constant(np.ascontiguousarray(m.T).astype(dtype))])
        current[a] = sizes[a]
        y = node.reshape(y, (*lead, sizes[a]))
        if a != rank - 1:
            inverse = [perm.index(k) for k in range(rank)]
            y = node.emit1(T.DimshuffleOp, [y], pattern=tuple(inverse))
        x = y
    if extrapolate:
        assert outside is not None
        value = float(node.attr("extrapolation_value", 0.0))
        if value != 0.0:  # the rows outside the region are zero: add the value there
            x = node.elemwise(E.ADD, x, node.constant((outside * value).astype(dtype)))
    return [_new(x)]


# ----------------------------------------------------------------------------------------------
# Quantization


def _quant_type(node: _Node, scale_i: int, zp_i: int) -> QuantizedType:
    scale = np.asarray(node.const(scale_i, "scale"))
    if scale.size != 1:
        raise node.fail("per-axis quantization (a scale per channel) cannot be expressed in xmge's dtypes")
    zp = np.asarray(node.const(zp_i, "zero_point")) if node.has(zp_i) else np.zeros((), np.uint8)
    if node.attr("output_dtype", 0):
        zp = zp.astype(node.imp.onnx.helper.tensor_dtype_to_np_dtype(node.attr("output_dtype")))
    if zp.size != 1:
        raise node.fail("per-axis zero points cannot be expressed in xmge's dtypes")
    z = int(zp.reshape(-1)[0])
    s = float(np.float32(scale.reshape(-1)[0]))
    if zp.dtype == np.int8:
        if z != 0:
            raise node.fail(f"int8 with zero point {z}: MegEngine's qint8 is symmetric (zero point 0)")
        return QuantizedType("qint8", s)
    if zp.dtype == np.uint8:
        return QuantizedType("quint8", s, z)
    raise node.fail(f"quantization to {zp.dtype} is not supported (int8 and uint8 are)")


def _quantize_plain(node: _Node, target: np.dtype) -> SSAValue:
    """QuantizeLinear into a plain integer tensor (what xmge's quantized dtypes cannot hold: a
    scale per axis or block, 16-bit results): ``saturate(round_half_even(x / scale) + zp)``."""
    x = node.value(0)
    shape = list(x.type.get_shape())
    rank = len(shape)

    def spread(a: np.ndarray) -> SSAValue:
        a = np.asarray(a, np.float32)
        if a.size == 1:
            return node.constant(a.reshape(1))
        axis = _axis(int(node.attr("axis", 1)), rank, node)
        block = int(node.attr("block_size", 0))
        if block:
            a = np.repeat(a, block, axis=axis)[tuple(slice(0, d) for d in shape)]
        else:
            view = [1] * rank
            view[axis] = -1
            a = a.reshape(view)
        return node.constant(np.ascontiguousarray(a))

    f32 = element_type("float32")
    v = node.ssa(0)
    if x.type.element_type != f32:
        v = node.emit1(T.TypeCvtOp, [v], [TensorType(f32, shape)])
    v = node.elemwise(E.TRUE_DIV, v, spread(node.const(1, "y_scale")))
    r = node.elemwise(E.ROUND, v)  # half away from zero; ties to even below
    d = node.elemwise(E.SUB, r, v)
    tie = node.elemwise(E.EQ, node.elemwise(E.ABS, d), node.scalar(0.5, d))
    odd = node.elemwise(E.NEQ, node.elemwise(E.MOD, r, node.scalar(2.0, r)), node.scalar(0.0, r))
    fix = node.emit1(T.TypeCvtOp, [node.elemwise(E.AND, tie, odd)], [TensorType(f32, shape)])
    r = node.elemwise(E.SUB, r, node.elemwise(E.MUL, fix, node.elemwise(E.SIGN, d)))
    if node.has(2):
        r = node.elemwise(E.ADD, r, spread(node.const(2, "y_zero_point")))
    if target.name in _LOW_BITS:  # ONNX saturates to the sub-byte range; held widened
        bits, signed = _LOW_BITS[target.name]
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        holder = element_type(_WIDENED[target.name])
    else:
        info = np.iinfo(target)
        low, high, holder = int(info.min), int(info.max), element_type(target)
    r = node.elemwise(E.CLIP, r, node.scalar(float(low), r), node.scalar(float(high), r))
    return node.emit1(T.TypeCvtOp, [r], [TensorType(holder, shape)])


@handles("QuantizeLinear")
def _quantize(node: _Node) -> list[_Value | None]:
    scale = np.asarray(node.const(1, "y_scale"))
    if node.attr("output_dtype", 0):
        target = np.dtype(node.imp.onnx.helper.tensor_dtype_to_np_dtype(node.attr("output_dtype")))
    elif node.has(2):
        target = np.asarray(node.const(2, "y_zero_point")).dtype
    else:
        target = np.dtype(np.uint8)
    if node.value(0).const is None and target.name in ("int8", "uint8", "int16", "uint16", *_LOW_BITS):
        if scale.size > 1 or target.itemsize > 1 or target.name in _LOW_BITS:
            return [_new(_quantize_plain(node, target))]
    q = _quant_type(node, 1, 2)
    x = node.value(0)
    if x.const is not None:
        raise node.fail("quantizing a constant is not supported; store the quantized initializer instead")
    return [_new(node.emit1(T.TypeCvtOp, [node.ssa(0)], [TensorType(q, x.type.get_shape())]))]


def _dequantize_plain(node: _Node, x: _Value, scale: np.ndarray) -> SSAValue:
    """DequantizeLinear of a plain integer run-time value: ``(float(x) - zero_point) * scale`` in
    float arithmetic, so any integer type, per-axis and blocked scales work."""
    rank = len(x.type.get_shape())
    shape = list(x.type.get_shape())
    zp = np.asarray(node.const(2, "x_zero_point")) if node.has(2) else np.zeros((), np.float32)

    def spread(a: np.ndarray) -> np.ndarray:
        """A scale / zero point laid out to broadcast against x (per tensor, axis or block)."""
        a = a.astype(np.float32)
        if a.size == 1:
            return a.reshape(1)
        axis = _axis(int(node.attr("axis", 1)), rank, node)
        block = int(node.attr("block_size", 0))
        if block:
            if a.ndim != rank:
                raise node.fail(f"a blocked scale of shape {a.shape} must have the input's rank {rank}")
            a = np.repeat(a, block, axis=axis)
            return a[tuple(slice(0, d) for d in shape)]
        view = [1] * rank
        view[axis] = -1
        return a.reshape(view)

    f32 = element_type("float32")
    y = node.emit1(T.TypeCvtOp, [node.ssa(0)], [TensorType(f32, shape)])
    if zp.size and np.any(zp != 0):
        y = node.elemwise(E.SUB, y, node.constant(spread(zp)))
    y = node.elemwise(E.MUL, y, node.constant(spread(scale)))
    out_dtype = node.attr("output_dtype", 0)
    if out_dtype:
        target = element_type(node.imp.onnx.helper.tensor_dtype_to_np_dtype(out_dtype))
        if target != f32:
            y = node.emit1(T.TypeCvtOp, [y], [TensorType(target, shape)])
    return y


@handles("DequantizeLinear")
def _dequantize(node: _Node) -> list[_Value | None]:
    x = node.value(0)
    scale = np.asarray(node.const(1, "x_scale"))
    if x.const is None and not isinstance(x.type.element_type, QuantizedType):
        return [_new(_dequantize_plain(node, x, scale))]
    if node.attr("block_size", 0):
        raise node.fail("blocked quantization (block_size) cannot be expressed in xmge's dtypes")
    if x.const is not None and scale.size > 1:
        # a per-channel quantized weight: xmge's dtypes hold one scale, so the float weight it means
        shape = [1] * x.const.ndim
        shape[_axis(int(node.attr("axis", 1)), x.const.ndim, node)] = -1
        zp = np.asarray(node.const(2, "x_zero_point")) if node.has(2) else np.zeros(1, np.int64)
        centered = x.const.astype(np.float32) - zp.astype(np.float32).reshape(shape)
        weight = centered * scale.astype(np.float32).reshape(shape)
        return [_Value(_type_of(weight, node.where()), weight)]
    q = _quant_type(node, 1, 2)
    f32 = element_type("float32")
    if x.const is not None:
        stored = node.imp.ssa(_Value(TensorType(q, list(x.const.shape)), x.const, initializer=x.initializer))
        return [_new(node.emit1(T.TypeCvtOp, [stored], [TensorType(f32, list(x.const.shape))]))]
    if x.type.element_type != q:
        raise node.fail(
            f"dequantizes a {x.type.element_type} value with {q}: only values quantized with the same "
            "scale and zero point (by a QuantizeLinear) can be dequantized"
        )
    return [_new(node.emit1(T.TypeCvtOp, [node.ssa(0)], [TensorType(f32, x.type.get_shape())]))]


# ----------------------------------------------------------------------------------------------
# Entry point


def read_onnx(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview | Any,
    input_shapes: dict[str, Sequence[int]] | None = None,
    input_values: dict[str, Any] | None = None,
) -> ModuleOp:
    """An ONNX model (a path, the file's bytes or an ``onnx.ModelProto``) as an ``mgb`` module.

    ``input_shapes`` fixes the shape of inputs that the model leaves dynamic (``{"x": (1, 3, 224,
    224)}``); ``input_values`` gives graph inputs whose value is known when compiling (shapes, axes,
    sizes, repeats ...): they become constants and leave the model's inputs. Raises
    :class:`OnnxImportError` for anything xmge cannot import. Constant folding runs within the
    import budget of :mod:`backends.onnx.limits`. Safe to call from several threads at once (the
    folding time limit interrupts a node only on the main thread; elsewhere it is checked after
    each node).
    """
    try:
        import onnx
    except ImportError as exc:
        raise OnnxImportError(f"importing ONNX models needs the 'onnx' package: {exc}") from None
    try:
        if isinstance(source, onnx.ModelProto):
            model = source
        elif isinstance(source, bytes | bytearray | memoryview):
            model = onnx.load_from_string(bytes(source))
        else:
            model = onnx.load(os.fspath(source))
    except (OSError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:  # type: ignore[attr-defined]
        raise OnnxImportError(f"cannot read the ONNX model: {exc}") from None
    except Exception as exc:  # protobuf's DecodeError and friends
        raise OnnxImportError(f"not an ONNX model: {type(exc).__name__}: {exc}") from None
    if not model.HasField("graph"):
        raise OnnxImportError("not an ONNX model: it has no graph")
    if isinstance(source, onnx.ModelProto):
        origin = "<onnx.ModelProto>"
    elif isinstance(source, bytes | bytearray | memoryview):
        origin = "<onnx bytes>"
    else:
        origin = os.fspath(source)
    try:
        limits.max_tensor_bytes(), limits.max_folded_bytes(), limits.max_total_bytes()
        limits.max_loop_iterations(), limits.max_fold_seconds(), limits.max_depth()
    except limits.LimitError as exc:
        raise OnnxImportError(str(exc)) from None
    return _Importer(model, input_shapes, input_values, origin).run()
