"""xmge's optimised tensor IR (plain NCHW, float32) as an ONNX model and as a PyTorch closure: the
*same* graph and weights for the runtimes xmge is compared with (``bench/bench_x86.py``,
``make demo``). Convolutions (grouped, biased, fused residual and ReLU), elementwise arithmetic and
activations, pooling, reshapes, transposes, slices, concatenation and matrix products are covered;
anything else raises ``NotImplementedError`` naming the op.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from dialects import enums
from dialects import tensor as T

E = enums.ElemwiseMode
UNARY_ONNX = {E.RELU: "Relu", E.SIGMOID: "Sigmoid", E.TANH: "Tanh", E.EXP: "Exp", E.ABS: "Abs"}
BINARY_ONNX = {E.ADD: "Add", E.SUB: "Sub", E.MUL: "Mul", E.TRUE_DIV: "Div", E.MAX: "Max", E.MIN: "Min"}


def _fn(module: ModuleOp) -> func.FuncOp:
    return next(op for op in module.ops if isinstance(op, func.FuncOp))


def _slices(
    op: T.SubtensorOp, shape: tuple[int, ...]
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
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


def to_onnx(module: ModuleOp, path: str) -> None:  # noqa: C901 - one branch per op
    """Write the tensor IR ``module`` (one function, float32, plain NCHW) as an ONNX model."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    fn = _fn(module)
    names: dict[Any, str] = {}
    nodes, inits = [], []
    counter = iter(range(1 << 30))

    def name(v: Any) -> str:
        if v not in names:
            names[v] = f"v{next(counter)}"
        return names[v]

    def const(array: np.ndarray) -> str:
        n = f"c{next(counter)}"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), n))
        return n

    inputs = [
        helper.make_tensor_value_info(name(a), TensorProto.FLOAT, list(a.type.get_shape()))  # type: ignore[attr-defined]
        for a in fn.body.block.args
    ]
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            outputs = [
                helper.make_tensor_value_info(name(v), TensorProto.FLOAT, list(v.type.get_shape()))  # type: ignore[attr-defined]
                for v in op.arguments
            ]
            continue
        if isinstance(op, T.ConstOp):
            names[op.output] = const(op.numpy())
            continue
        p = op.params() if isinstance(op, T.MgbOp) else {}
        ins = [name(v) for v in op.operands]
        out = name(op.results[0])
        if isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
            w = op.operands[1].owner.numpy()  # type: ignore[union-attr]
            groups = 1
            if p["sparse"] == enums.ConvSparse.GROUP:
                groups = w.shape[0]
                w = w.reshape(-1, *w.shape[2:])
            conv_in = [ins[0], const(w)]
            extra = list(op.operands[2:])
            if extra and math.prod(extra[0].type.get_shape()) == w.shape[0]:  # type: ignore[attr-defined]
                conv_in.append(const(extra[0].owner.numpy().reshape(-1)))  # type: ignore[union-attr]
                extra = extra[1:]
            y = (
                out
                if not extra
                and p.get("nonline_mode", enums.NonlineMode.IDENTITY) == enums.NonlineMode.IDENTITY
                else f"t{next(counter)}"
            )
            ph, pw = p["padding"]
            nodes.append(
                helper.make_node(
                    "Conv", conv_in, [y], strides=list(p["stride"]), pads=[ph, pw, ph, pw],
                    dilations=list(p["dilation"]), group=groups,
                )
            )  # fmt: skip
            for v in extra:
                z = f"t{next(counter)}"
                nodes.append(helper.make_node("Add", [y, name(v)], [z]))
                y = z
            nl = p.get("nonline_mode", enums.NonlineMode.IDENTITY)
            if nl == enums.NonlineMode.RELU:
                nodes.append(helper.make_node("Relu", [y], [out]))
            elif nl == enums.NonlineMode.SIGMOID:
                nodes.append(helper.make_node("Sigmoid", [y], [out]))
            elif nl == enums.NonlineMode.H_SWISH:
                nodes.append(helper.make_node("HardSwish", [y], [out]))
            elif nl != enums.NonlineMode.IDENTITY:
                raise NotImplementedError(f"ONNX export of conv nonlinearity {nl}")
            elif y != out:
                nodes.append(helper.make_node("Identity", [y], [out]))
        elif isinstance(op, T.ElemwiseOp):
            mode = p["mode"]
            if mode in BINARY_ONNX:
                nodes.append(helper.make_node(BINARY_ONNX[mode], ins, [out]))
            elif mode == E.FUSE_ADD_RELU:
                t = f"t{next(counter)}"
                nodes += [helper.make_node("Add", ins, [t]), helper.make_node("Relu", [t], [out])]
            elif mode in UNARY_ONNX:
                nodes.append(helper.make_node(UNARY_ONNX[mode], ins, [out]))
            elif mode == E.RELU6:
                lo, hi = const(np.array(0, np.float32)), const(np.array(6, np.float32))
                nodes.append(helper.make_node("Clip", [ins[0], lo, hi], [out]))
            elif mode == E.H_SWISH:
                nodes.append(helper.make_node("HardSwish", ins, [out]))
            else:
                raise NotImplementedError(f"ONNX export of elemwise {mode}")
        elif isinstance(op, T.PoolingOp):
            ph, pw = p["padding"]
            kind = "MaxPool" if p["mode"] == enums.PoolingMode.MAX else "AveragePool"
            attrs: dict[str, Any] = {
                "kernel_shape": list(p["window"]),
                "strides": list(p["stride"]),
                "pads": [ph, pw, ph, pw],
            }
            if kind == "AveragePool":
                attrs["count_include_pad"] = int(p["mode"] == enums.PoolingMode.AVERAGE)
            nodes.append(helper.make_node(kind, ins, [out], **attrs))
        elif isinstance(op, T.ReshapeOp | T.AxisAddRemoveOp):
            nodes.append(
                helper.make_node(
                    "Reshape", [ins[0], const(np.array(op.results[0].type.get_shape(), np.int64))], [out]
                )
            )  # type: ignore[attr-defined]
        elif isinstance(op, T.MatrixMulOp):
            nodes.append(
                helper.make_node(
                    "Gemm", ins, [out], transA=int(p["transpose_a"]), transB=int(p["transpose_b"])
                )
            )
        elif isinstance(op, T.DimshuffleOp):
            pattern = list(p["pattern"])
            if -1 in pattern:
                raise NotImplementedError("ONNX export of a dimshuffle that adds axes")
            nodes.append(helper.make_node("Transpose", ins, [out], perm=pattern))
        elif isinstance(op, T.SubtensorOp):
            starts, ends, axes, steps, drop = _slices(op, tuple(op.operands[0].type.get_shape()))  # type: ignore[attr-defined]
            sl = f"t{next(counter)}" if drop else out
            arrays = [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
            nodes.append(helper.make_node("Slice", [ins[0], *(const(a) for a in arrays)], [sl]))
            if drop:
                nodes.append(helper.make_node("Squeeze", [sl, const(np.array(drop, np.int64))], [out]))
        elif isinstance(op, T.ConcatOp):
            nodes.append(helper.make_node("Concat", ins, [out], axis=int(p["axis"])))
        else:
            raise NotImplementedError(f"ONNX export of {op.name}")
    graph = helper.make_graph(nodes, "xmge", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def _relu6(t: Any) -> Any:
    import torch

    return torch.clamp(t, 0, 6)


def torch_runner(module: ModuleOp) -> Any:  # noqa: C901 - one branch per op
    """A closure running the tensor IR op by op with PyTorch's CPU kernels (weights pre-converted)."""
    import torch
    import torch.nn.functional as TF

    fn = _fn(module)
    consts = {
        op.output: torch.from_numpy(op.numpy().copy())
        for op in fn.body.block.ops
        if isinstance(op, T.ConstOp)
    }
    ops = [op for op in fn.body.block.ops if not isinstance(op, T.ConstOp)]

    def run(x: Any) -> Any:
        env = dict(consts)
        env[fn.body.block.args[0]] = x
        for op in ops:
            if isinstance(op, func.ReturnOp):
                return env[op.arguments[0]]
            p = op.params()  # type: ignore[attr-defined]
            a = [env[v] for v in op.operands]
            if isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
                w, groups = a[1], 1
                if p["sparse"] == enums.ConvSparse.GROUP:
                    groups = w.shape[0]
                    w = w.reshape(-1, *w.shape[2:])
                bias = None
                rest = a[2:]
                if rest and rest[0].numel() == w.shape[0]:
                    bias, rest = rest[0].reshape(-1), rest[1:]
                y = TF.conv2d(
                    a[0], w, bias, tuple(p["stride"]), tuple(p["padding"]), tuple(p["dilation"]), groups
                )
                for z in rest:
                    y = y + z
                nl = p.get("nonline_mode")
                if nl == enums.NonlineMode.RELU:
                    y = torch.relu(y)
                elif nl == enums.NonlineMode.SIGMOID:
                    y = torch.sigmoid(y)
                elif nl == enums.NonlineMode.H_SWISH:
                    y = TF.hardswish(y)
            elif isinstance(op, T.ElemwiseOp):
                m = p["mode"]
                binary = {E.ADD: torch.add, E.FUSE_ADD_RELU: torch.add, E.SUB: torch.sub, E.MUL: torch.mul,
                          E.TRUE_DIV: torch.div, E.MAX: torch.maximum, E.MIN: torch.minimum}  # fmt: skip
                unary = {E.RELU: torch.relu, E.SIGMOID: torch.sigmoid, E.TANH: torch.tanh, E.EXP: torch.exp,
                         E.ABS: torch.abs, E.RELU6: _relu6, E.H_SWISH: TF.hardswish}  # fmt: skip
                if m in binary:
                    y = binary[m](a[0], a[1])
                    if m == E.FUSE_ADD_RELU:
                        y = torch.relu(y)
                elif m in unary:
                    y = unary[m](a[0])
                else:
                    raise NotImplementedError(f"elemwise {m}")
            elif isinstance(op, T.PoolingOp):
                if p["mode"] == enums.PoolingMode.MAX:
                    y = TF.max_pool2d(a[0], tuple(p["window"]), tuple(p["stride"]), tuple(p["padding"]))
                else:
                    y = TF.avg_pool2d(
                        a[0], tuple(p["window"]), tuple(p["stride"]), tuple(p["padding"]),
                        count_include_pad=p["mode"] == enums.PoolingMode.AVERAGE,
                    )  # fmt: skip
            elif isinstance(op, T.ReshapeOp | T.AxisAddRemoveOp):
                y = a[0].reshape(tuple(op.results[0].type.get_shape()))  # type: ignore[attr-defined]
            elif isinstance(op, T.MatrixMulOp):
                x0 = a[0].t() if p["transpose_a"] else a[0]
                x1 = a[1].t() if p["transpose_b"] else a[1]
                y = x0 @ x1
            elif isinstance(op, T.DimshuffleOp):
                y = a[0].permute(*p["pattern"]).contiguous()
            elif isinstance(op, T.SubtensorOp):
                starts, ends, axes, steps, drop = _slices(op, tuple(a[0].shape))
                index: list[Any] = [slice(None)] * a[0].dim()
                for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
                    index[ax] = slice(s, e if e >= 0 else None, st)
                y = a[0][tuple(index)]
                for ax in sorted(drop, reverse=True):
                    y = y.squeeze(ax)
            elif isinstance(op, T.ConcatOp):
                y = torch.cat(a, dim=int(p["axis"]))
            else:
                raise NotImplementedError(op.name)
            env[op.results[0]] = y
        raise RuntimeError("no return")

    return run
