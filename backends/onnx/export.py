"""xmge's optimised tensor IR (plain NCHW, float32) as an ONNX model, one exporter per op class.

Convolutions (grouped, biased, fused residual and ReLU), elementwise arithmetic and activations,
pooling, reshapes, transposes, slices, concatenation and matrix products are covered
(:data:`ONNX_EXPORTERS`); anything else raises ``NotImplementedError`` naming the op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from dialects import enums
from dialects import tensor as T

E = enums.ElemwiseMode
UNARY_ONNX = {E.RELU: "Relu", E.SIGMOID: "Sigmoid", E.TANH: "Tanh", E.EXP: "Exp", E.ABS: "Abs"}
BINARY_ONNX = {E.ADD: "Add", E.SUB: "Sub", E.MUL: "Mul", E.TRUE_DIV: "Div", E.MAX: "Max", E.MIN: "Min"}
CONV_NONLINEARITY_ONNX = {
    enums.NonlineMode.RELU: "Relu",
    enums.NonlineMode.SIGMOID: "Sigmoid",
    enums.NonlineMode.H_SWISH: "HardSwish",
}


def only_function(module: ModuleOp) -> func.FuncOp:
    return next(op for op in module.ops if isinstance(op, func.FuncOp))


def shape_of(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())  # type: ignore[attr-defined]


def subtensor_slices(
    op: T.SubtensorOp, shape: tuple[int, ...]
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(starts, ends, axes, steps, dropped axes) of a subtensor; an end before the first element is
    a large negative number, as ONNX's Slice wants it."""
    p = op.params()
    starts, ends, axes, steps, drop = [], [], [], [], []
    for axis, start, stop, step, d in zip(
        p["axes"], p["starts"], p["stops"], p["steps"], p["drop"], strict=True
    ):
        r = range(*slice(start, stop, step).indices(shape[axis]))
        starts.append(r.start)
        ends.append(r.stop if r.stop >= 0 else -(2**62))
        axes.append(axis)
        steps.append(r.step)
        if d:
            drop.append(axis)
    return starts, ends, axes, steps, drop


class OnnxGraph:
    """The nodes and initialisers being built, and the names of the IR values."""

    def __init__(self, helper: Any, numpy_helper: Any) -> None:
        self.helper = helper
        self.numpy_helper = numpy_helper
        self.names: dict[SSAValue, str] = {}
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._counter = 0

    def _fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter - 1}"

    def name(self, v: SSAValue) -> str:
        if v not in self.names:
            self.names[v] = self._fresh("v")
        return self.names[v]

    def temp(self) -> str:
        return self._fresh("t")

    def const(self, array: np.ndarray) -> str:
        n = self._fresh("c")
        self.inits.append(self.numpy_helper.from_array(np.ascontiguousarray(array), n))
        return n

    def node(self, op_type: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
        self.nodes.append(self.helper.make_node(op_type, inputs, outputs, **attrs))


Exporter = Callable[[OnnxGraph, Any, dict[str, Any], list[str], str], None]


def _conv(
    g: OnnxGraph, op: T.ConvolutionOp | T.ConvBiasOp, p: dict[str, Any], ins: list[str], out: str
) -> None:
    w = op.operands[1].owner.numpy()  # type: ignore[union-attr]
    groups = 1
    if p["sparse"] == enums.ConvSparse.GROUP:
        groups = w.shape[0]
        w = w.reshape(-1, *w.shape[2:])
    conv_in = [ins[0], g.const(w)]
    extra = list(op.operands[2:])
    if extra and math.prod(shape_of(extra[0])) == w.shape[0]:
        conv_in.append(g.const(extra[0].owner.numpy().reshape(-1)))  # type: ignore[union-attr]
        extra = extra[1:]
    nl = p.get("nonline_mode", enums.NonlineMode.IDENTITY)
    if nl != enums.NonlineMode.IDENTITY and nl not in CONV_NONLINEARITY_ONNX:
        raise NotImplementedError(f"ONNX export of conv nonlinearity {nl}")
    y = out if not extra and nl == enums.NonlineMode.IDENTITY else g.temp()
    ph, pw = p["padding"]
    g.node("Conv", conv_in, [y], strides=list(p["stride"]), pads=[ph, pw, ph, pw],
           dilations=list(p["dilation"]), group=groups)  # fmt: skip
    for v in extra:
        z = g.temp()
        g.node("Add", [y, g.name(v)], [z])
        y = z
    if nl != enums.NonlineMode.IDENTITY:
        g.node(CONV_NONLINEARITY_ONNX[nl], [y], [out])
    elif y != out:
        g.node("Identity", [y], [out])


def _elemwise(g: OnnxGraph, op: T.ElemwiseOp, p: dict[str, Any], ins: list[str], out: str) -> None:
    mode = p["mode"]
    if mode in BINARY_ONNX:
        g.node(BINARY_ONNX[mode], ins, [out])
    elif mode == E.FUSE_ADD_RELU:
        t = g.temp()
        g.node("Add", ins, [t])
        g.node("Relu", [t], [out])
    elif mode in UNARY_ONNX:
        g.node(UNARY_ONNX[mode], ins, [out])
    elif mode == E.RELU6:
        g.node("Clip", [ins[0], g.const(np.array(0, np.float32)), g.const(np.array(6, np.float32))], [out])
    elif mode == E.H_SWISH:
        g.node("HardSwish", ins, [out])
    else:
        raise NotImplementedError(f"ONNX export of elemwise {mode}")


def _pooling(g: OnnxGraph, op: T.PoolingOp, p: dict[str, Any], ins: list[str], out: str) -> None:
    ph, pw = p["padding"]
    kind = "MaxPool" if p["mode"] == enums.PoolingMode.MAX else "AveragePool"
    attrs: dict[str, Any] = {
        "kernel_shape": list(p["window"]),
        "strides": list(p["stride"]),
        "pads": [ph, pw, ph, pw],
    }
    if kind == "AveragePool":
        attrs["count_include_pad"] = int(p["mode"] == enums.PoolingMode.AVERAGE)
    g.node(kind, ins, [out], **attrs)


def _reshape(
    g: OnnxGraph, op: T.ReshapeOp | T.AxisAddRemoveOp, p: dict[str, Any], ins: list[str], out: str
) -> None:
    g.node("Reshape", [ins[0], g.const(np.array(shape_of(op.results[0]), np.int64))], [out])


def _matmul(g: OnnxGraph, op: T.MatrixMulOp, p: dict[str, Any], ins: list[str], out: str) -> None:
    g.node("Gemm", ins, [out], transA=int(p["transpose_a"]), transB=int(p["transpose_b"]))


def _dimshuffle(g: OnnxGraph, op: T.DimshuffleOp, p: dict[str, Any], ins: list[str], out: str) -> None:
    pattern = list(p["pattern"])
    if -1 in pattern:
        raise NotImplementedError("ONNX export of a dimshuffle that adds axes")
    g.node("Transpose", ins, [out], perm=pattern)


def _subtensor(g: OnnxGraph, op: T.SubtensorOp, p: dict[str, Any], ins: list[str], out: str) -> None:
    starts, ends, axes, steps, drop = subtensor_slices(op, shape_of(op.operands[0]))
    sliced = g.temp() if drop else out
    arrays = [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
    g.node("Slice", [ins[0], *(g.const(a) for a in arrays)], [sliced])
    if drop:
        g.node("Squeeze", [sliced, g.const(np.array(drop, np.int64))], [out])


def _concat(g: OnnxGraph, op: T.ConcatOp, p: dict[str, Any], ins: list[str], out: str) -> None:
    g.node("Concat", ins, [out], axis=int(p["axis"]))


# the tensor ops the ONNX path covers -> the name of the handler that exports each (here) and runs
# it with PyTorch (``torch_runner``): both modules name their handlers ``_<name>``, so the two tables
# cover the same ops
ONNX_OPS: dict[type[T.MgbOp], str] = {
    T.ConvolutionOp: "conv",
    T.ConvBiasOp: "conv",
    T.ElemwiseOp: "elemwise",
    T.PoolingOp: "pooling",
    T.ReshapeOp: "reshape",
    T.AxisAddRemoveOp: "reshape",
    T.MatrixMulOp: "matmul",
    T.DimshuffleOp: "dimshuffle",
    T.SubtensorOp: "subtensor",
    T.ConcatOp: "concat",
}


def handlers(namespace: dict[str, Any]) -> dict[type[T.MgbOp], Any]:
    """``ONNX_OPS`` with each name replaced by the function ``_<name>`` of ``namespace``."""
    return {op: namespace[f"_{name}"] for op, name in ONNX_OPS.items()}


ONNX_EXPORTERS: dict[type[T.MgbOp], Exporter] = handlers(globals())


def to_onnx(module: ModuleOp, path: str) -> None:
    """Write the tensor IR ``module`` (one function, float32, plain NCHW) as an ONNX model."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    fn = only_function(module)
    g = OnnxGraph(helper, numpy_helper)
    inputs = [
        helper.make_tensor_value_info(g.name(a), TensorProto.FLOAT, list(shape_of(a)))
        for a in fn.body.block.args
    ]
    outputs = []
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            outputs = [
                helper.make_tensor_value_info(g.name(v), TensorProto.FLOAT, list(shape_of(v)))
                for v in op.arguments
            ]
        elif isinstance(op, T.ConstOp):
            g.names[op.output] = g.const(op.numpy())
        else:
            export = ONNX_EXPORTERS.get(type(op))
            if export is None:
                raise NotImplementedError(f"ONNX export of {op.name}")
            export(g, op, op.params(), [g.name(v) for v in op.operands], g.name(op.results[0]))
    graph = helper.make_graph(g.nodes, "xmge", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)
