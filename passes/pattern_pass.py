"""Passes that are one set of rewrite patterns applied greedily to a fixed point.

``apply_patterns`` is the one place the walker and applier are put together; ``PatternPass`` is a
``ModulePass`` whose subclass declares only its name, options and patterns, e.g.::

    @dataclass(frozen=True)
    class ArithFusePass(PatternPass):
        name = "arith-fuse"
        PATTERNS = (FuseAddNonlinearity(), FuseMulAdd3())

A subclass whose patterns depend on its options overrides ``patterns()`` instead of ``PATTERNS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker, RewritePattern


def apply_patterns(
    module: ModuleOp, patterns: Sequence[RewritePattern], ctx: Context | None, *, dce: bool = True
) -> None:
    """Apply ``patterns`` to ``module`` greedily, to a fixed point; with ``dce`` (xDSL's default)
    ops left without uses are erased along the way."""
    applier = GreedyRewritePatternApplier(list(patterns), ctx=ctx, dce_enabled=dce)
    PatternRewriteWalker(applier).rewrite_module(module)


@dataclass(frozen=True)
class PatternPass(ModulePass):
    """A pass that applies ``patterns()`` to the module to a fixed point."""

    # stateless pattern instances, shared by every instance of the pass (not a pass option)
    PATTERNS: ClassVar[tuple[RewritePattern, ...]] = ()

    def patterns(self) -> Sequence[RewritePattern]:
        """The patterns this pass applies; by default the class's ``PATTERNS``."""
        return self.PATTERNS

    def erases_dead_ops(self) -> bool:
        """Whether ops left without uses are erased while rewriting."""
        return True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns = self.patterns()
        if not patterns:
            raise NotImplementedError(f"pass {self.name!r} ({type(self).__name__}) declares no patterns")
        apply_patterns(op, patterns, ctx, dce=self.erases_dead_ops())
