"""``split-reduce-squeeze``: not an optimisation, a frontend-order fix-up applied to every dump.

MegEngine's ``F.mean(x, (2, 3))`` removes each reduced axis right after its Reduce; xmge's frontend
removes them together at the end. The dump interleaves them the way MegEngine's frontend emits
them, so that dumps list the same operators in the same order as MegEngine's.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from dialects import enums
from dialects import tensor as T
from passes.inference.common import copy_naming, single_use
from passes.pattern_pass import PatternPass


class SplitReduceSqueeze(RewritePattern):
    """``remove(reduce(reduce(x, a1), a2), a1, a2)`` with a1 > a2  ==>
    ``remove(reduce(remove(reduce(x, a1), a1), a2), a2)``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.AxisAddRemoveOp, rewriter: PatternRewriter) -> None:
        p = op.params()
        methods, axes = list(p["methods"]), list(p["axes"])
        if len(axes) < 2 or any(m != enums.AxisMethod.REMOVE for m in methods):
            return
        chain: list[T.ReduceOp] = []
        v: SSAValue = op.src
        while isinstance(v.owner, T.ReduceOp) and single_use(v) and len(chain) < len(axes):
            chain.append(v.owner)
            v = v.owner.src
        chain.reverse()
        if (
            len(chain) != len(axes)
            or [r.params()["axis"] for r in chain] != axes
            or axes != sorted(axes, reverse=True)
        ):
            return
        cur = chain[0].src
        last: T.MgbOp | None = None
        for r in chain:
            rp = r.params()
            red = rewriter.insert(T.ReduceOp.make([cur], **rp), InsertPoint.before(op))
            copy_naming(r, red)
            last = T.AxisAddRemoveOp.make(
                [red.results[0]], methods=(enums.AxisMethod.REMOVE,), axes=(rp["axis"],)
            )
            rewriter.insert(last, InsertPoint.before(op))
            if "scope" in op.attributes:
                last.attributes["scope"] = op.attributes["scope"]
            cur = last.results[0]
        assert last is not None
        if "name" in op.attributes:
            last.attributes["name"] = op.attributes["name"]
        rewriter.replace(op, [], [cur])


@dataclass(frozen=True)
class SplitReduceSqueezePass(PatternPass):
    """Interleaves multi-axis reduce+squeeze as MegEngine's frontend emits it (dump-order fix-up)."""

    name = "split-reduce-squeeze"
    PATTERNS = (SplitReduceSqueeze(),)
