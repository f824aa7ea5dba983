"""``kernel-fuse-epilogue``: fold bias adds, residual adds and activations into the producing kernel.

A convolution or matrix-multiplication call whose only user is an elementwise call absorbs it when the
elementwise op is, with ``y`` that result:

* ``add(y, b)`` / ``add(b, y)``: ``b`` a per-output-channel vector (per column for a matmul) becomes
  the kernel's bias (two constant biases are summed); a tensor of ``y``'s shape becomes its residual;
* ``relu(y)``, ``relu6(y)``, ``sigmoid(y)``, ``h_swish(y)``: the kernel's activation;
* ``fuse_add_relu(y, z)`` etc.: both at once.

Only a kernel without an activation absorbs more (the epilogue order is bias, residual, activation).
The fused call takes the elementwise call's place, so a residual computed after the producer (ResNet's
shortcut branch) is available; the kernel is re-specialised through its template (new symbol).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from dialects import kernel as K
from dialects.dtypes import element_type
from passes.lowering.kernels import KernelRegistry, const_array, shape
from passes.lowering.select import ensure_def, kernel_target
from passes.target import Target

FUSABLE = {"conv2d_gemm", "conv2d_depthwise", "matmul_gemm", "conv2d_nchw88", "conv2d_nchw88_chan"}
# elementwise mode -> (adds its other operand, activation it applies)
EPILOGUE_MODES: dict[str, tuple[bool, str]] = {
    "add": (True, "identity"),
    "fuse_add_relu": (True, "relu"),
    "fuse_add_sigmoid": (True, "sigmoid"),
    "fuse_add_h_swish": (True, "hswish"),
    "relu": (False, "relu"),
    "sigmoid": (False, "sigmoid"),
    "h_swish": (False, "hswish"),
    "relu6": (False, "relu6"),
}


def _channels(family: str, params: dict[str, Any]) -> int:
    if family == "matmul_gemm":
        return params["n"]
    return params["c"] if family in ("conv2d_depthwise", "conv2d_nchw88_chan") else params["oc"]


def _is_bias_shape(family: str, s: tuple[int, ...], out: tuple[int, ...], channels: int) -> bool:
    if family == "matmul_gemm":
        return s in ((channels,), (1, channels)) and len(out) == 2
    if len(out) == 5:  # NCHW88: (1, C/8, 1, 1, 8)
        return s == (1, out[1], 1, 1, out[4]) and out[1] * out[4] >= channels
    return s in ((1, channels, 1, 1), (channels, 1, 1)) and len(out) == 4


def try_fuse(module: ModuleOp, call: K.CallOp, kernels: KernelRegistry) -> bool:
    d = call.definition()
    if d.family.data != "elemwise":
        return False
    mode = d.param_values()["mode"]
    if mode not in EPILOGUE_MODES:
        return False
    adds, act = EPILOGUE_MODES[mode]
    args = list(call.args)
    for pos, y in enumerate(args[: 2 if adds else 1]):
        producer = y.owner
        if not isinstance(producer, K.CallOp) or not y.has_one_use() or len(producer.outputs) != 1:
            continue
        pdef = producer.definition()
        if pdef.family.data not in FUSABLE:
            continue
        params = pdef.param_values()
        if params["act"] != "identity" or shape(call.outputs[0]) != shape(y):
            continue
        if params.get("dtype", "f32") != "f32":  # float16 storage: epilogues stay in the graph
            continue
        operands = list(producer.args)
        new = dict(params)
        new["act"] = act
        if adds:
            other = args[1 - pos]
            if not _absorb_add(pdef.family.data, producer, operands, new, other, call):
                continue
        nd = ensure_def(module, kernels.of(pdef), new)
        fused = K.CallOp(nd.sym, operands, [call.outputs[0].type])
        for key, value in producer.attributes.items():
            fused.attributes[key] = value
        Rewriter.insert_op(fused, InsertPoint.before(call))
        call.outputs[0].replace_all_uses_with(fused.outputs[0])
        Rewriter.erase_op(call)
        Rewriter.erase_op(producer)
        return True
    return False


def _absorb_add(
    family: str,
    producer: K.CallOp,
    operands: list[SSAValue],
    new: dict[str, Any],
    other: SSAValue,
    call: K.CallOp,
) -> bool:
    """Fold ``+ other`` into the epilogue parameters and operands; False if it does not fit."""
    out = shape(producer.outputs[0])
    channels = _channels(family, new)
    s = shape(other)
    bias_at = 2 if new["bias"] else None
    if _is_bias_shape(family, s, out, channels):
        if bias_at is None:
            new["bias"] = 1
            operands.insert(2, other)
            return True
        old, add = const_array(operands[bias_at]), const_array(other)
        if old is None or add is None:
            return False
        summed = (old.reshape(-1) + add.reshape(-1)).astype(np.float32)
        w = K.WeightOp.from_numpy(summed.reshape(shape(operands[bias_at])), element_type(summed.dtype))
        Rewriter.insert_op(w, InsertPoint.before(call))
        operands[bias_at] = w.output
        return True
    if s == out and not new["residual"] and math.prod(s) > 0:
        new["residual"] = 1
        operands.append(other)
        return True
    return False


@dataclass(frozen=True)
class FuseEpiloguePass(ModulePass):
    """Fuse bias, residual add and activation into the producing conv / matmul kernel."""

    name = "kernel-fuse-epilogue"
    target: str | Target = "x86-avx2"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernels = kernel_target(self.target).kernels
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp)]:
            changed = True
            while changed:
                changed = False
                for call in [c for c in fn.body.block.ops if isinstance(c, K.CallOp)]:
                    if call.parent is not None and try_fuse(op, call, kernels):
                        changed = True
        remove_unused(op)


def remove_unused(module: ModuleOp) -> None:
    """Drop defs no call uses, and weights and views nothing reads."""
    for fn in [f for f in module.ops if isinstance(f, func.FuncOp)]:
        for o in reversed(list(fn.body.block.ops)):
            if isinstance(o, K.WeightOp | K.ViewOp) and not o.results[0].uses:
                Rewriter.erase_op(o)
    used = {c.callee.string_value() for c in module.walk() if isinstance(c, K.CallOp)}
    for d in [d for d in module.ops if isinstance(d, K.KernelDefOp)]:
        if d.sym not in used:
            Rewriter.erase_op(d)
