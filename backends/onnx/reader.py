"""ONNX (opsets 11 to 21) → ``mgb`` dialect: the same IR the tracer and the ``.mge`` reader produce.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Region, SSAValue

from dialects import enums
from dialects import tensor as T
from dialects.dtypes import DTypeError, QuantizedType, element_type, is_float, numpy_dtype
from dialects.errors import XmgeError
from dialects.registration import registering
from semantics.kernels import interp_matrix

E = enums.ElemwiseMode
MIN_OPSET, MAX_OPSET = 11, 21
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


def _narrow(array: np.ndarray, what: str) -> np.ndarray:
    """An ONNX array in the dtype xmge stores it in (int64 → int32, float64 → float32)."""
    a = np.asarray(array)
    if a.dtype.kind in "iu" and a.dtype.itemsize > 4 or a.dtype == np.uint32:
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
    try:
        return TensorType(element_type(a.dtype), list(a.shape))
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
    def __init__(self, model: Any, input_shapes: dict[str, Sequence[int]] | None) -> None:
        import onnx

        self.onnx = onnx
        self.model = model
        self.opset = self._opset(model)
        self.values: dict[str, _Value] = {}
        self.unusable: set[str] = set()
        graph = model.graph
        inits = {t.name for t in graph.initializer}
        for t in graph.initializer:
            try:
                array = onnx.numpy_helper.to_array(t)
            except Exception as exc:  # external data not found, unsupported type, ...
                raise OnnxImportError(f"initializer {t.name!r} cannot be read: {exc}") from None
            self.values[t.name] = _Value(
                _type_of(array, f"initializer {t.name!r}"), array, initializer=t.name
            )
        self.inputs = [i for i in graph.input if i.name not in inits]
        self.input_names = [i.name for i in self.inputs]
        overrides = dict(input_shapes or {})
        unknown = set(overrides) - set(self.input_names)
        if unknown:
            raise OnnxImportError(
                f"input_shapes names {sorted(unknown)}, which are not graph inputs {self.input_names}"
            )
        arg_types = [self._input_type(i, overrides.get(i.name)) for i in self.inputs]
        self.block = Block(arg_types=arg_types)
        for i, arg in zip(self.inputs, self.block.args, strict=True):
            self.values[i.name] = _Value(arg.type, ssa=arg)  # type: ignore[arg-type]

    @staticmethod
    def _opset(model: Any) -> int:
        versions = [o.version for o in model.opset_import if o.domain in ONNX_DOMAINS]
        if not versions:
            raise OnnxImportError("the model imports no version of the default ONNX domain (ai.onnx)")
        opset = versions[0]
        if not MIN_OPSET <= opset <= MAX_OPSET:
            raise OnnxImportError(
                f"opset {opset} is not supported: xmge imports opsets {MIN_OPSET} to {MAX_OPSET} "
                "(convert the model with onnx.version_converter first)"
            )
        return opset

    def _input_type(self, info: Any, override: Sequence[int] | None) -> TensorType:
        tt = info.type.tensor_type
        if not info.type.HasField("tensor_type"):
            raise OnnxImportError(f"graph input {info.name!r} is not a tensor")
        np_dtype = self.onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
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
        elem = _type_of(np.zeros(0, np_dtype), f"graph input {info.name!r}").element_type
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
        if proto.domain not in ONNX_DOMAINS:
            raise node.fail(f"operators of domain {proto.domain!r} are not supported")
        present = [n for n in proto.input if n]
        for n in present:
            if n not in self.values:
                raise node.fail(f"input {n!r} is computed by no earlier node")
        if proto.op_type not in _NEVER_FOLD and all(self.values[n].const is not None for n in present):
            self._fold(node)
            return
        handler = _HANDLERS.get(proto.op_type)
        if handler is None:
            raise node.fail(
                f"operator {proto.op_type} is not supported by xmge's ONNX importer on values computed "
                "at run time (it is evaluated while importing when all its inputs are known)"
            )
        first_new = len(self.block.ops)
        outs = handler(node)
        self._define(node, outs, first_new)

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

    def _fold(self, node: _Node) -> None:
        """Evaluate ``node`` on its known inputs with ONNX's reference implementation, at the
        model's opset (a one-node model: a bare node would be run at the newest opset)."""
        from onnx.reference import ReferenceEvaluator

        helper = self.onnx.helper
        proto = node.proto
        feeds = {n: np.asarray(self.values[n].const) for n in proto.input if n}
        inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), None)
            for n, a in feeds.items()
        ]
        outputs = [self.onnx.ValueInfoProto(name=n) for n in proto.output if n]
        graph = helper.make_graph([proto], "fold", inputs, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            outs = ReferenceEvaluator(model).run(None, feeds)
        except Exception as exc:
            raise node.fail(
                f"evaluating it on its constant inputs failed: {type(exc).__name__}: {exc}"
            ) from None
        for name, array in zip([n for n in proto.output if n], outs, strict=True):
            a = np.asarray(array)
            self.values[name] = _Value(_type_of(a, node.where()), a)


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
        raise node.fail("training_mode=True is not supported (xmge imports inference graphs)")
    return [node.value(0), None]


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
        raise node.fail(f"integer division of values computed at run time is not supported ({like})")
    a, b = node.operand_like(0, like), node.operand_like(1, like)
    if node.op_type in _SWAPPED:
        a, b = b, a
    return [_new(node.elemwise(mode, a, b))]


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
    if is_float(like.element_type) != bool(node.attr("fmod", 0)):
        raise node.fail("fmod must be 1 for floats (C's fmod); Python-style modulo is for integers")
    return [_new(node.elemwise(E.MOD, node.operand_like(0, like), node.operand_like(1, like)))]


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
    if not (node.attr("detect_negative", 1) and node.attr("detect_positive", 1)):
        raise node.fail("only detect_negative=1 and detect_positive=1 are supported")
    return [_new(node.elemwise(E.ISINF, node.ssa(0)))]


@handles("Cast", "CastLike")
def _cast(node: _Node) -> list[_Value | None]:
    if node.op_type == "Cast":
        target = node.imp.onnx.helper.tensor_dtype_to_np_dtype(node.attr("to"))
    else:
        target = node.value(1).type.element_type
    try:
        elem = element_type(target)
    except DTypeError as exc:
        raise node.fail(str(exc)) from None
    v = node.value(0)
    if v.type.element_type == elem:
        return [v]
    return [_new(node.emit1(T.TypeCvtOp, [node.ssa(0)], [TensorType(elem, v.type.get_shape())]))]


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
        raise node.fail(f"only 2-D (NCHW) inputs are supported, got a rank-{rank} input")


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
        return _ConvAttrs(xs, ws, group, stride, dilation)

    def weight(self, node: _Node) -> tuple[SSAValue, Any]:
        """The weight with its groups split off (MegEngine's GROUP form), and the sparse mode."""
        w, ws, group = node.ssa(1), self.ws, self.group
        if group == 1:
            return w, enums.ConvSparse.DENSE
        if ws[0] % group:
            raise node.fail(f"the weight's first axis ({ws[0]} channels) cannot be split into {group} groups")
        return node.reshape(w, (group, ws[0] // group, *ws[1:])), enums.ConvSparse.GROUP


@handles("Conv")
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


@handles("ConvTranspose")
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
        if min(total) < 0:
            raise node.fail(f"output size {out_hw} is larger than the transposed convolution's {full}")
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        end = [t - b for t, b in zip(total, begin, strict=True)]
    else:
        begin, end = _spatial_pads(node, xs[2:], kernel, stride, dilation)
    w, sparse = a.weight(node)
    params = {"stride": tuple(stride), "dilation": tuple(dilation), "sparse": sparse}
    if begin == end and all(p < s for p, s in zip(out_pad, stride, strict=True)):
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
        if any(grow):
            y = node.emit1(T.PaddingOp, [y], front=(0, 0, 0, 0), back=(0, 0, grow[0], grow[1]))
        stops = [full[i] + out_pad[i] - end[i] for i in range(2)]
        y = node.subtensor(y, (2, 3), begin, stops)
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
        raise node.fail("training_mode=1 is not supported (xmge imports inference graphs)")
    rank = len(node.shape(0))
    if rank < 2:
        raise node.fail(f"the input needs a channel axis, got shape {node.shape(0)}")
    params = [_channel_param(node, i, rank) for i in range(1, 5)]
    y = node.emit1(T.BatchNormOp, [node.ssa(0), *params], epsilon=float(node.attr("epsilon", 1e-5)))
    return [_new(y)] + [None] * (len(node.proto.output) - 1)


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
    return [_new(op.results[0]), None, None]


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


def _divisors(in_size: int, k: int, s: int, begin: int, end: int, out: int, include_pad: bool) -> np.ndarray:
    """How many elements ONNX averages over in each window along one axis."""
    starts = np.arange(out) * s - begin
    if include_pad:
        return np.minimum(starts + k, in_size + end) - starts
    return np.minimum(starts + k, in_size) - np.maximum(starts, 0)


@handles("MaxPool", "AveragePool")
def _pool(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    _require_2d(node, len(shape))
    if len(node.proto.output) > 1 and node.proto.output[1]:
        raise node.fail("the Indices output is not supported")
    if node.attr("storage_order", 0):
        raise node.fail("storage_order=1 is not supported")
    if any(d != 1 for d in node.attr("dilations", [1, 1])):
        raise node.fail(
            f"dilations {node.attr('dilations')} are not supported (MegEngine's pooling has none)"
        )
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
    return [_new(y)]


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
    if node.attr("select_last_index", 0):
        raise node.fail("select_last_index=1 is not supported")
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", 0)), len(shape), node)
    cls = T.ArgmaxOp if node.op_type == "ArgMax" else T.ArgminOp
    y = node.emit1(cls, [node.ssa(0)], axis=axis)
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


@handles("Gather")
def _gather(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", 0)), len(shape), node)
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
    if mode_name not in _PAD_MODES:
        raise node.fail(f"mode {mode_name!r} is not supported (constant, reflect, edge are)")
    pads = node.ints(1, "pads")
    axes = [_axis(a, rank, node) for a in node.ints(3, "axes")] if node.has(3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise node.fail(f"pads {pads} needs two entries per padded axis ({len(axes)})")
    front, back = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        front[a], back[a] = pads[k], pads[len(axes) + k]
    value = 0.0
    if node.has(2):
        cv = np.asarray(node.const(2, "constant_value")).reshape(-1)
        value = float(cv[0]) if cv.size else 0.0
    x = node.ssa(0)
    if any(p > 0 for p in front + back):
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


def _onnx_resample_matrix(node: _Node, n_in: int, n_out: int, scale: float, mode: str) -> np.ndarray:
    """(n_out, n_in) weights of ONNX Resize along one axis (nearest or linear), per the spec."""
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    i = np.arange(n_out, dtype=np.float64)
    if ctm == "half_pixel":
        x = (i + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        x = (i + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    elif ctm == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        x = n_in / 2 * (1 - adjustment) + (i + 0.5) / scale - 0.5
    elif ctm == "align_corners":
        x = i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    elif ctm == "asymmetric":
        x = i / scale
    else:
        raise node.fail(f"coordinate_transformation_mode {ctm!r} is not supported")
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    if mode == "nearest":
        nearest = node.attr("nearest_mode", "round_prefer_floor")
        pick = {
            "round_prefer_floor": lambda v: np.ceil(v - 0.5),
            "round_prefer_ceil": lambda v: np.floor(v + 0.5),
            "floor": np.floor,
            "ceil": np.ceil,
        }.get(nearest)
        if pick is None:
            raise node.fail(f"nearest_mode {nearest!r} is not supported")
        m[rows, np.clip(pick(x), 0, n_in - 1).astype(np.int64)] = 1.0
        return m
    x = np.clip(x, 0, n_in - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    np.add.at(m, (rows, lo), 1.0 - (x - lo))
    np.add.at(m, (rows, hi), x - lo)
    return m


@handles("Resize")
def _resize(node: _Node) -> list[_Value | None]:
    shape = node.shape(0)
    _require_2d(node, len(shape))
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise node.fail(f"mode {mode!r} is not supported (MegEngine's Resize has nearest and linear)")
    if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise node.fail("keep_aspect_ratio_policy other than 'stretch' is not supported")
    axes = [_axis(a, 4, node) for a in node.attr("axes", [0, 1, 2, 3])]
    scales = [1.0] * 4
    sizes = list(shape)
    if node.has(3) and node.const(3, "sizes").size:
        for a, s in zip(axes, node.ints(3, "sizes"), strict=True):
            sizes[a] = s
        scales = [sizes[a] / shape[a] for a in range(4)]
    elif node.has(2) and node.const(2, "scales").size:
        for a, s in zip(axes, node.const(2, "scales").reshape(-1).tolist(), strict=True):
            scales[a] = float(s)
        sizes = [int(math.floor(shape[a] * scales[a])) for a in range(4)]
    else:
        raise node.fail("needs scales or sizes")
    if sizes[:2] != list(shape[:2]):
        raise node.fail(f"only the two spatial axes can be resized, got {tuple(shape)} → {tuple(sizes)}")
    if node.attr("antialias", 0) and min(scales[2:]) < 1:
        raise node.fail("antialias=1 when downsampling is not supported")
    imode = enums.InterpolationMode.NEAREST if mode == "nearest" else enums.InterpolationMode.LINEAR
    for a in (2, 3):
        onnx_m = _onnx_resample_matrix(node, shape[a], sizes[a], scales[a], mode)
        if not np.allclose(onnx_m, interp_matrix(shape[a], sizes[a], imode), rtol=0, atol=1e-6):
            raise node.fail(
                f"{mode} resampling {shape[a]} → {sizes[a]} with coordinate_transformation_mode "
                f"{node.attr('coordinate_transformation_mode', 'half_pixel')!r}"
                + (
                    f", nearest_mode {node.attr('nearest_mode', 'round_prefer_floor')!r}"
                    if mode == "nearest"
                    else ""
                )
                + " samples other pixels than MegEngine's Resize; it is not supported"
            )
    if sizes == list(shape):
        return [node.value(0)]
    return [_new(node.emit1(T.ResizeOp, [node.ssa(0)], out_shape=(sizes[2], sizes[3]), imode=imode))]


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


@handles("QuantizeLinear")
def _quantize(node: _Node) -> list[_Value | None]:
    q = _quant_type(node, 1, 2)
    x = node.value(0)
    if x.const is not None:
        raise node.fail("quantizing a constant is not supported; store the quantized initializer instead")
    return [_new(node.emit1(T.TypeCvtOp, [node.ssa(0)], [TensorType(q, x.type.get_shape())]))]


@handles("DequantizeLinear")
def _dequantize(node: _Node) -> list[_Value | None]:
    x = node.value(0)
    scale = np.asarray(node.const(1, "x_scale"))
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
) -> ModuleOp:
    """An ONNX model (a path, the file's bytes or an ``onnx.ModelProto``) as an ``mgb`` module.

    ``input_shapes`` fixes the shape of inputs that the model leaves dynamic (``{"x": (1, 3, 224,
    224)}``). Raises :class:`OnnxImportError` for anything xmge cannot import.
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
    return _Importer(model, input_shapes).run()
