"""Dead-code elimination: erase side-effect-free ops whose results nobody uses."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.transforms.dead_code_elimination import would_be_trivially_dead

from dialects import tensor as T


def is_dead(op: Operation, consts: bool = True) -> bool:
    """No result of ``op`` is used and erasing it has no observable effect."""
    if not consts and isinstance(op, T.ConstOp):
        return False
    return bool(op.results) and all(not r.uses for r in op.results) and would_be_trivially_dead(op)


def erase_dead_ops(module: Operation, consts: bool = True) -> int:
    """Erase dead ops, users before producers, so whole dead chains go in one sweep; returns the count."""
    erased = 0
    for op in list(module.walk(reverse=True)):
        if op is not module and is_dead(op, consts):
            op.detach()
            op.erase()
            erased += 1
    return erased


@dataclass(frozen=True)
class MgbDeadCodeEliminationPass(ModulePass):
    """Erases unused side-effect-free ops (mgb ops, constants included)."""

    name = "mgb-dce"

    consts: bool = True
    """Also erase unused mgb.const ops (weights no op reads)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        erase_dead_ops(op, self.consts)
