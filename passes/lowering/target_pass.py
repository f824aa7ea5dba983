"""The ``target`` option of the kernel passes, read in one place.

Every pass of the kernel pipeline works for one target: ``compile()`` hands it the :class:`Target`
object, ``xmge-opt -p kernel-select{target=arm-nchw44}`` its textual form. :class:`KernelTargetPass`
declares that option and turns it into a target that generates kernels before the pass's own work.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from passes.lowering.kernels import LoweringError
from passes.target import Target, resolve_target

DEFAULT_KERNEL_TARGET = "x86-avx2"


def kernel_target(target: Target | str) -> Target:
    """The pass option as a target that generates kernels (a :class:`LoweringError` otherwise)."""
    t = resolve_target(target)
    if not t.isas or t.backend is None or t.backend.kernels is None:
        raise LoweringError(f"target {str(t)!r} does not generate kernels")
    return t


def functions(module: ModuleOp) -> list[func.FuncOp]:
    """The module's functions, listed before the caller rewrites any of them."""
    return [f for f in module.ops if isinstance(f, func.FuncOp)]


@dataclass(frozen=True)
class KernelTargetPass(ModulePass, ABC):
    """A kernel pass whose only option is ``target`` (a :class:`Target` or its textual form)."""

    target: str | Target = DEFAULT_KERNEL_TARGET

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.apply_for(op, kernel_target(self.target))

    @abstractmethod
    def apply_for(self, module: ModuleOp, target: Target) -> None:
        """The pass's work on ``module`` for ``target``, already resolved and known to generate kernels."""


__all__ = ["DEFAULT_KERNEL_TARGET", "KernelTargetPass", "functions", "kernel_target"]
