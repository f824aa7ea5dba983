"""``kernel-select``: replace every ``mgb`` op by a call to a specialised kernel chosen from the one
registry (:mod:`passes.lowering.rules`); constants become ``kernel.weight``, reshapes ``kernel.view``.

An op no candidate can run is an error naming the op, its scope and the candidates that were tried,
with why each was rejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from backends.c.templates import Template, lookup
from dialects import kernel as K
from dialects import tensor as T
from dialects.dtypes import element_type
from passes.lowering.rules import RULES, VIEW_OPS, Lowered
from passes.target import Target, resolve_target


class LoweringError(ValueError):
    """No kernel can run an op on the chosen target."""


def ensure_def(module: ModuleOp, template: Template, params: dict[str, Any]) -> K.KernelDefOp:
    """The module's ``kernel.def`` for this specialisation, added (at the top) if missing."""
    sym = template.symbol(params)
    for op in module.ops:
        if isinstance(op, K.KernelDefOp) and op.sym == sym:
            return op
    d = K.KernelDefOp(sym, template.family, template.isa, params, template.workspace(params))
    first = module.body.block.first_op
    if first is None:
        module.body.block.add_op(d)
    else:
        module.body.block.insert_op_before(d, first)
    return d


def choose(op: Operation, isas: tuple[str, ...]) -> tuple[Template, Lowered]:
    """The first candidate of ``op`` that has a template on ``isas`` and accepts the op."""
    tried = []
    for cand in RULES.get(type(op), []):
        template = lookup(cand.family, isas)
        if template is None:
            tried.append(f"{cand.family} (no template for ISAs {', '.join(isas)})")
            continue
        lowered = cand.rule(op, template.isa)
        if lowered is None:
            tried.append(f"{cand.family} (does not accept these shapes, dtypes or parameters)")
            continue
        return template, lowered
    scope = op.attributes.get("scope")
    where = f" in {scope.data}" if isinstance(scope, StringAttr) else ""
    types = ", ".join(str(t) for t in op.operand_types)
    raise LoweringError(
        f"{op.name}{where} ({types}): no kernel on ISAs {', '.join(isas)}; "
        + (f"tried {'; '.join(tried)}" if tried else "no kernel family is registered for this op")
    )


def _weight_from(array: np.ndarray, before: Operation) -> SSAValue:
    w = K.WeightOp.from_numpy(array, element_type(array.dtype))
    Rewriter.insert_op(w, InsertPoint.before(before))
    return w.output


@dataclass(frozen=True)
class LowerToKernelPass(ModulePass):
    """Select a specialised kernel for every mgb op (ordered candidates, availability checks)."""

    name = "kernel-select"
    target: str | Target = "x86-avx2"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        isas = resolve_target(self.target).isas
        if not isas:
            raise LoweringError(f"target {str(self.target)!r} does not generate kernels")
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp)]:
            for mop in list(fn.body.block.ops):
                if isinstance(mop, func.ReturnOp):
                    continue
                self._lower(op, mop, isas)

    def _lower(self, module: ModuleOp, mop: Operation, isas: tuple[str, ...]) -> None:
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
        template, lowered = choose(mop, isas)
        d = ensure_def(module, template, lowered.params)
        operands = [v if isinstance(v, SSAValue) else _weight_from(v, mop) for v in lowered.operands]
        call = K.CallOp(d.sym, operands, list(mop.result_types))
        for key in ("scope",):
            if key in mop.attributes:
                call.attributes[key] = mop.attributes[key]
        Rewriter.replace_op(mop, call)
