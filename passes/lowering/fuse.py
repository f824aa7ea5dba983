"""``kernel-fuse-epilogue``: fold bias adds, residual adds and activations into the producing kernel.

A kernel call whose only user is an elementwise call absorbs it when the producer's unit declares
(:attr:`passes.lowering.kernels.KernelUnit.epilogues`, per element type of its result) the parts the
elementwise op needs, with ``y`` that result:

* ``add(y, b)`` / ``add(b, y)``: ``b`` a per-output-channel vector (per column for a matrix product)
  becomes the kernel's bias (two constant biases are summed); a tensor of ``y``'s shape becomes its
  residual;
* ``relu(y)``, ``relu6(y)``, ``sigmoid(y)``, ``h_swish(y)``: the kernel's activation;
* ``fuse_add_relu(y, z)`` etc.: both at once.

A float16 result's activation may also sit between ``typecvt`` calls (``kernel-widen-f16`` computes
an elementwise op without a float16 kernel in float32): ``typecvt(act(typecvt(y)))`` back to ``y``'s
type is fused the same way. A float16 declaration promises the activation of the float16 result,
rounded to float16, which is what the widened graph computes (for ReLU and ReLU6 bit for bit: they
commute with rounding).

Only a kernel without an activation absorbs more (the epilogue order is bias, residual, activation).
The fused call takes the elementwise call's place, so a residual computed after the producer (ResNet's
shortcut branch) is available; the kernel is re-specialised through its template (new symbol).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from dialects import kernel as K
from dialects.dtypes import dtype_name, element_type
from passes.lowering.kernels import EpilogueSupport, KernelRegistry, const_array, shape
from passes.lowering.select import ensure_def
from passes.lowering.target_pass import KernelTargetPass, functions
from passes.target import Target

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


def element_name(v: SSAValue) -> str | None:
    """The ``dialects.dtypes`` name of a tensor value's element type (``float32``), else None."""
    t = v.type
    if not isinstance(t, TensorType):
        return None
    try:
        return dtype_name(t.element_type)
    except KeyError:
        return None


def _sole_producer(y: SSAValue) -> K.CallOp | None:
    """The kernel call producing ``y`` when ``y`` is its only result and has no other user."""
    producer = y.owner
    if isinstance(producer, K.CallOp) and y.has_one_use() and len(producer.outputs) == 1:
        return producer
    return None


def _epilogue_of(
    producer: K.CallOp, kernels: KernelRegistry
) -> tuple[EpilogueSupport, dict[str, Any]] | None:
    """The producer's declared epilogue for its result type and its parameters, when it has not
    applied an activation yet (nothing can follow the activation)."""
    support = kernels.of(producer.definition()).epilogue(element_name(producer.outputs[0]) or "")
    if support is None:
        return None
    params = producer.definition().param_values()
    if params.get("act", "identity") != "identity":
        return None
    return support, params


def try_fuse(module: ModuleOp, call: K.CallOp, kernels: KernelRegistry) -> bool:
    d = call.definition()
    if not kernels.of(d).epilogue_consumer:
        return False
    mode = d.param_values()["mode"]
    if mode not in EPILOGUE_MODES:
        return False
    adds, act = EPILOGUE_MODES[mode]
    args = list(call.args)
    for pos, y in enumerate(args[: 2 if adds else 1]):
        producer = _sole_producer(y)
        if producer is None or shape(call.outputs[0]) != shape(y):
            continue
        got = _epilogue_of(producer, kernels)
        if got is None or act not in got[0].activations:
            continue
        support, params = got
        operands = list(producer.args)
        new = {**params, "act": act}
        if adds and not _absorb_add(support, producer, operands, new, args[1 - pos], call):
            continue
        _refuse(module, kernels, producer, new, operands, call.outputs[0], [call, producer])
        return True
    return not adds and _try_fuse_widened(module, call, act, kernels)


def _is_typecvt(op: object) -> bool:
    return isinstance(op, K.CallOp) and op.definition().family.data == "typecvt" and len(op.args) == 1


def _try_fuse_widened(module: ModuleOp, call: K.CallOp, act: str, kernels: KernelRegistry) -> bool:
    """``typecvt(act(typecvt(y)))`` with the outer conversion back to ``y``'s type: fuse ``act``."""
    widened = call.args[0]
    up = widened.owner
    if not _is_typecvt(up) or not widened.has_one_use() or not call.outputs[0].has_one_use():
        return False
    assert isinstance(up, K.CallOp)
    y = up.args[0]
    producer = _sole_producer(y)
    down = call.outputs[0].get_user_of_unique_use()
    if producer is None or not _is_typecvt(down) or down.results[0].type != y.type:
        return False
    assert isinstance(down, K.CallOp)
    got = _epilogue_of(producer, kernels)
    if got is None or act not in got[0].activations:
        return False
    new = {**got[1], "act": act}
    _refuse(module, kernels, producer, new, list(producer.args), down.outputs[0], [down, call, up, producer])
    return True


def _refuse(
    module: ModuleOp,
    kernels: KernelRegistry,
    producer: K.CallOp,
    params: dict[str, Any],
    operands: list[SSAValue],
    result: SSAValue,
    absorbed: Sequence[Operation],
) -> None:
    """Replace ``producer`` by its re-specialisation computing ``result`` in place of the op that
    defines it; ``absorbed`` (users first, ``producer`` last) are erased."""
    nd = ensure_def(module, kernels.of(producer.definition()), params)
    fused = K.CallOp(nd.sym, operands, [result.type])
    for key, value in producer.attributes.items():
        fused.attributes[key] = value
    owner = result.owner
    assert isinstance(owner, Operation)
    Rewriter.insert_op(fused, InsertPoint.before(owner))
    result.replace_all_uses_with(fused.outputs[0])
    for op in absorbed:
        Rewriter.erase_op(op)


def _is_bias_shape(along: str, s: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether an addend of shape ``s`` is one value per channel (or column) of a result ``out``."""
    if along == "columns":
        return len(out) == 2 and s in ((out[1],), (1, out[1]))
    if len(out) == 5:  # a blocked layout (N, C/b, H, W, b): the bias in the same layout
        return s == (1, out[1], 1, 1, out[4])
    return len(out) == 4 and s in ((1, out[1], 1, 1), (out[1], 1, 1))


def _absorb_add(
    support: EpilogueSupport,
    producer: K.CallOp,
    operands: list[SSAValue],
    new: dict[str, Any],
    other: SSAValue,
    call: K.CallOp,
) -> bool:
    """Fold ``+ other`` into the epilogue parameters and operands; False if it does not fit."""
    out = shape(producer.outputs[0])
    s = shape(other)
    bias_at = 2 if new.get("bias") else None
    if support.bias is not None and _is_bias_shape(support.bias, s, out):
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
    if support.residual and s == out and not new.get("residual") and math.prod(s) > 0:
        new["residual"] = 1
        operands.append(other)
        return True
    return False


@dataclass(frozen=True)
class FuseEpiloguePass(KernelTargetPass):
    """Fuse bias, residual add and activation into the producing kernel, as its unit declares."""

    name = "kernel-fuse-epilogue"

    def apply_for(self, module: ModuleOp, target: Target) -> None:
        for fn in functions(module):
            changed = True
            while changed:
                changed = False
                for call in [c for c in fn.body.block.ops if isinstance(c, K.CallOp)]:
                    if call.parent is not None and try_fuse(module, call, target.kernels):
                        changed = True
        remove_unused(module)


def remove_unused(module: ModuleOp) -> None:
    """Drop defs no call uses, and weights and views nothing reads."""
    for fn in functions(module):
        for o in reversed(list(fn.body.block.ops)):
            if isinstance(o, K.WeightOp | K.ViewOp) and not o.results[0].uses:
                Rewriter.erase_op(o)
    used = {c.callee.string_value() for c in module.walk() if isinstance(c, K.CallOp)}
    for d in [d for d in module.ops if isinstance(d, K.KernelDefOp)]:
        if d.sym not in used:
            Rewriter.erase_op(d)
