"""``kernel-select``: replace every ``mgb`` op by a call to a specialised kernel chosen from the
target's kernel registry (:class:`passes.lowering.kernels.KernelRegistry`); constants become
``kernel.weight``, reshapes ``kernel.view``.

An op no kernel unit can run is an error naming the op, its scope and the families that were tried,
with why each was rejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from dialects import kernel as K
from dialects import tensor as T
from dialects.dtypes import element_type
from passes.lowering.kernels import VIEW_OPS, KernelUnit, LoweringError
from passes.lowering.target_pass import KernelTargetPass, functions, kernel_target
from passes.target import Target, TargetError


def ensure_def(module: ModuleOp, unit: KernelUnit, params: dict[str, Any]) -> K.KernelDefOp:
    """The module's ``kernel.def`` for this specialisation, added (at the top) if missing."""
    sym = unit.symbol(params)
    for op in module.ops:
        if isinstance(op, K.KernelDefOp) and op.sym == sym:
            return op
    d = K.KernelDefOp(sym, unit.family, unit.isa, params, unit.workspace(params))
    first = module.body.block.first_op
    if first is None:
        module.body.block.add_op(d)
    else:
        module.body.block.insert_op_before(d, first)
    return d


def op_signature(op: Operation) -> str:
    """The key a tuning file records a choice under: op kind, operand/result types (shapes and
    dtypes) and attributes, so layers of equal shape share one choice across models."""
    attrs = ",".join(f"{k}={v}" for k, v in sorted(op.attributes.items()) if k not in ("scope", "name"))
    ins = ",".join(str(t) for t in op.operand_types)
    outs = ",".join(str(t) for t in op.result_types)
    return f"{op.name}({ins})->({outs}){{{attrs}}}"


def _weight_from(array: np.ndarray, before: Operation) -> SSAValue:
    w = K.WeightOp.from_numpy(array, element_type(array.dtype))
    Rewriter.insert_op(w, InsertPoint.before(before))
    return w.output


def _drop_unread_calls(fn: func.FuncOp) -> None:
    """Erase calls nothing reads: a unit may compute its operand's producers itself (an int8
    convolution with the ReLU6 float island after it), leaving their calls without a reader. The
    mgb graph had no dead ops (the inference passes end with dce), so nothing else is dropped."""
    for o in reversed(list(fn.body.block.ops)):
        if isinstance(o, K.CallOp) and not any(r.uses for r in o.results):
            Rewriter.erase_op(o)


@dataclass(frozen=True)
class LowerToKernelPass(KernelTargetPass):
    """Select a specialised kernel for every mgb op (prioritised kernel units, availability rules)."""

    name = "kernel-select"
    # (op signature, family) pairs from a tuning file (compiler/tuning.py); empty keeps priorities
    choices: tuple[tuple[str, str], ...] = ()

    def apply_for(self, module: ModuleOp, target: Target) -> None:
        from passes.lowering.widen import WidenF16Pass

        # a float16 graph (an io16xc32 / ioc16 dump) on any target: the float16 ops no kernel
        # computes in float16 run in float32 (a no-op where kernel-widen-f16 already ran)
        WidenF16Pass(target).apply_for(module, target)
        for fn in functions(module):
            for mop in list(fn.body.block.ops):
                if isinstance(mop, func.ReturnOp):
                    continue
                self._lower(module, mop, target)
            _drop_unread_calls(fn)

    def _lower(self, module: ModuleOp, mop: Operation, target: Target) -> None:
        if isinstance(mop, T.ConstOp):
            w = K.WeightOp(mop.value, mop.output.type)  # type: ignore[arg-type]
            if "name" in mop.attributes:
                w.attributes["name"] = mop.attributes["name"]
            Rewriter.replace_op(mop, w)
            return
        if isinstance(mop, VIEW_OPS):
            t = mop.results[0].type
            assert isinstance(t, TensorType)
            Rewriter.replace_op(mop, K.ViewOp(mop.operands[0], t))
            return
        prefer = dict(self.choices).get(op_signature(mop)) if self.choices else None
        unit, lowered = target.kernels.choose(mop, target.isas, prefer)
        d = ensure_def(module, unit, lowered.params)
        operands = [v if isinstance(v, SSAValue) else _weight_from(v, mop) for v in lowered.operands]
        call = K.CallOp(d.sym, operands, list(mop.result_types))
        for key in ("name", "scope"):  # the layer's name, for profiles (never read by code generation)
            if key in mop.attributes:
                call.attributes[key] = mop.attributes[key]
        Rewriter.replace_op(mop, call)


__all__ = ["LowerToKernelPass", "LoweringError", "TargetError", "ensure_def", "kernel_target", "op_signature"]
