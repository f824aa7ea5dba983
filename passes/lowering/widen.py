"""``kernel-widen-f16``: run in float32 the float16 ops no kernel of the target computes in float16.

After ``f16-io-comp`` every op of the graph is float16. The ARM FP16 kernels cover what dominates the
work (NCHW44 convolutions and pooling, relayouts, type conversions); any other float16 op (an
elementwise op, a softmax, a matrix multiplication, a convolution left in NCHW, ...) is rebuilt on
float32 operands between ``typecvt`` ops, i.e. computed in float32 and rounded to float16 once
(for a single add or multiply that is exactly the float16 result). Float16 constants feeding such an
op are widened ahead of time. Ops a kernel serves in float16 are left alone, so the pass changes
nothing on targets or graphs without float16.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import Float16Type, Float32Type, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from dialects import tensor as T
from dialects.layout import RelayoutOp
from dialects.weights import WeightAttr
from passes.lowering.kernels import VIEW_OPS, LoweringError
from passes.lowering.target_pass import KernelTargetPass, functions
from passes.target import Target

F16, F32 = Float16Type(), Float32Type()


def _retype(t: TensorType, element: Float16Type | Float32Type) -> TensorType:
    return TensorType(element, t.get_shape(), t.encoding)


def _is_f16(v: SSAValue) -> bool:
    return isinstance(v.type, TensorType) and isinstance(v.type.element_type, Float16Type)


def widen(op: T.MgbOp) -> None:
    """Rebuild ``op`` on float32 operands and results, converting at its boundary."""
    operands: list[SSAValue] = []
    for v in op.operands:
        if not _is_f16(v):
            operands.append(v)
            continue
        owner = v.owner
        if isinstance(owner, T.ConstOp) and not owner.value.is_elided:
            # a constant (a blocked filter too, same layout) is widened ahead of time, so the op's
            # kernel still sees a constant it can pack
            data = np.ascontiguousarray(owner.numpy(), dtype=np.float32)
            c = T.ConstOp.create(
                result_types=[_retype(v.type, F32)],  # type: ignore[arg-type]
                properties={"value": WeightAttr.from_numpy(data)},
            )
            Rewriter.insert_op(c, InsertPoint.before(op))
            operands.append(c.results[0])
            continue
        up = T.TypeCvtOp.make([v], [_retype(v.type, F32)])  # type: ignore[arg-type]
        Rewriter.insert_op(up, InsertPoint.before(op))
        operands.append(up.results[0])
    types = [_retype(t, F32) if isinstance(t, TensorType) and isinstance(t.element_type, Float16Type) else t
             for t in op.result_types]  # fmt: skip
    params = {k: v for k, v in op.params().items() if k not in ("compute_mode",)}
    new = type(op).make(operands, types, **params)
    for k, a in op.attributes.items():
        new.attributes[k] = a
    Rewriter.insert_op(new, InsertPoint.before(op))
    results: list[SSAValue] = []
    for old, r in zip(op.results, new.results, strict=True):
        if _is_f16(old):
            down = T.TypeCvtOp.make([r], [old.type])  # type: ignore[arg-type]
            Rewriter.insert_op(down, InsertPoint.before(op))
            results.append(down.results[0])
        else:
            results.append(r)
    for old, r in zip(op.results, results, strict=True):
        old.replace_all_uses_with(r)
    Rewriter.erase_op(op)


@dataclass(frozen=True)
class WidenF16Pass(KernelTargetPass):
    """Compute in float32 the float16 ops that have no float16 kernel on the target."""

    name = "kernel-widen-f16"

    def apply_for(self, module: ModuleOp, target: Target) -> None:
        for fn in functions(module):
            for mop in list(fn.body.block.ops):
                if not isinstance(mop, T.MgbOp) or isinstance(
                    mop, (T.ConstOp, T.TypeCvtOp, RelayoutOp, *VIEW_OPS)
                ):
                    continue
                if not any(_is_f16(v) for v in (*mop.operands, *mop.results)):
                    continue
                if _served(mop, target):
                    continue
                widen(mop)


def _served(op: Operation, target: Target) -> bool:
    try:
        target.kernels.choose(op, target.isas)
    except LoweringError:
        return False
    return True
