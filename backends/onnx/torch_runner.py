"""xmge's optimised tensor IR run op by op with PyTorch's CPU kernels (one function per op class,
:data:`TORCH_KERNELS`): the PyTorch side of ``bench/bench_x86.py``'s comparison, on the graph and
weights that :func:`backends.onnx.export.to_onnx` exports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as TF
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from backends.onnx.export import handlers, only_function, shape_of, subtensor_slices
from dialects import enums
from dialects import tensor as T

E = enums.ElemwiseMode
BINARY_TORCH: dict[Any, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    E.ADD: torch.add,
    E.SUB: torch.sub,
    E.MUL: torch.mul,
    E.TRUE_DIV: torch.div,
    E.MAX: torch.maximum,
    E.MIN: torch.minimum,
}
UNARY_TORCH: dict[Any, Callable[[torch.Tensor], torch.Tensor]] = {
    E.RELU: torch.relu,
    E.SIGMOID: torch.sigmoid,
    E.TANH: torch.tanh,
    E.EXP: torch.exp,
    E.ABS: torch.abs,
    E.RELU6: lambda t: torch.clamp(t, 0, 6),
    E.H_SWISH: TF.hardswish,
}
CONV_NONLINEARITY_TORCH = {
    enums.NonlineMode.RELU: torch.relu,
    enums.NonlineMode.SIGMOID: torch.sigmoid,
    enums.NonlineMode.H_SWISH: TF.hardswish,
}
Kernel = Callable[[Any, dict[str, Any], list[torch.Tensor]], torch.Tensor]


def _conv(op: T.ConvolutionOp | T.ConvBiasOp, p: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:
    w, groups = a[1], 1
    if p["sparse"] == enums.ConvSparse.GROUP:
        groups = w.shape[0]
        w = w.reshape(-1, *w.shape[2:])
    bias = None
    rest = a[2:]
    if rest and rest[0].numel() == w.shape[0]:
        bias, rest = rest[0].reshape(-1), rest[1:]
    y = TF.conv2d(a[0], w, bias, tuple(p["stride"]), tuple(p["padding"]), tuple(p["dilation"]), groups)
    for z in rest:
        y = y + z
    nonlinearity = CONV_NONLINEARITY_TORCH.get(p.get("nonline_mode"))
    return nonlinearity(y) if nonlinearity is not None else y


def _elemwise(op: T.ElemwiseOp, p: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:
    m = p["mode"]
    if m == E.FUSE_ADD_RELU:
        return torch.relu(torch.add(a[0], a[1]))
    if m in BINARY_TORCH:
        return BINARY_TORCH[m](a[0], a[1])
    if m in UNARY_TORCH:
        return UNARY_TORCH[m](a[0])
    raise NotImplementedError(f"elemwise {m}")


def _pooling(op: T.PoolingOp, p: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:
    if p["mode"] == enums.PoolingMode.MAX:
        return TF.max_pool2d(a[0], tuple(p["window"]), tuple(p["stride"]), tuple(p["padding"]))
    return TF.avg_pool2d(
        a[0],
        tuple(p["window"]),
        tuple(p["stride"]),
        tuple(p["padding"]),
        count_include_pad=p["mode"] == enums.PoolingMode.AVERAGE,
    )


def _reshape(op: T.ReshapeOp | T.AxisAddRemoveOp, p: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:
    return a[0].reshape(shape_of(op.results[0]))


def _matmul(op: T.MatrixMulOp, p: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:
    x0 = a[0].t() if p["transpose_a"] else a[0]
    x1 = a[1].t() if p["transpose_b"] else a[1]
    return x0 @ x1


def _dimshuffle(op: T.DimshuffleOp, p: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:
    return a[0].permute(*p["pattern"]).contiguous()


def _subtensor(op: T.SubtensorOp, p: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:
    starts, ends, axes, steps, drop = subtensor_slices(op, tuple(a[0].shape))
    index: list[Any] = [slice(None)] * a[0].dim()
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        index[ax] = slice(s, e if e >= 0 else None, st)
    y = a[0][tuple(index)]
    for ax in sorted(drop, reverse=True):
        y = y.squeeze(ax)
    return y


def _concat(op: T.ConcatOp, p: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(a, dim=int(p["axis"]))


TORCH_KERNELS: dict[type[T.MgbOp], Kernel] = handlers(globals())


def torch_runner(module: ModuleOp) -> Callable[[torch.Tensor], torch.Tensor]:
    """A closure running the tensor IR op by op with PyTorch's CPU kernels (weights pre-converted)."""
    fn = only_function(module)
    consts = {
        op.output: torch.from_numpy(op.numpy().copy())
        for op in fn.body.block.ops
        if isinstance(op, T.ConstOp)
    }
    steps: list[tuple[T.MgbOp, Kernel]] = []
    ret: func.ReturnOp | None = None
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            ret = op
        elif not isinstance(op, T.ConstOp):
            kernel = TORCH_KERNELS.get(type(op))
            if kernel is None or not isinstance(op, T.MgbOp):
                raise NotImplementedError(op.name)
            steps.append((op, kernel))
    if ret is None:
        raise ValueError(f"@{fn.sym_name.data} does not end with func.return")
    result = ret.arguments[0]

    def run(x: torch.Tensor) -> torch.Tensor:
        env = dict(consts)
        env[fn.body.block.args[0]] = x
        for op, kernel in steps:
            env[op.results[0]] = kernel(op, op.params(), [env[v] for v in op.operands])
        return env[result]

    return run
