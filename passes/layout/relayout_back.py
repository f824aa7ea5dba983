"""``relayout-back``: run the ops of a blocked layout a target has no kernels for in plain NCHW.

A ``.mge`` dumped with ``enable_hwcd4`` (an OpenCL layout), ``enable_nchw32``/``chwn4``/``nchw64``
(CUDA int8 layouts) or ``enable_nchw88`` on ARM holds convolutions, poolings and elementwise ops
in a format no CPU kernel of the target implements. Rather than refusing the graph, each such op
becomes its NCHW form: its blocked operands go through ``layout.relayout`` to plain (filters are
constants, so the relayout folds into the weights at compile time), it computes in NCHW, and a
relayout hands its result back in the old layout; the relayout canonicalizations then cancel every
back-to-back pair, so only the relayouts at the edges of a blocked region remain. Padded channels
(NHWCD4 pads C to 4) stay as zero channels of the plain tensors, so the NCHW op computes exactly
what the blocked one did.

The layouts in ``keep`` (the target's own, and NHWC, a plain format) are left alone, so the
target's layout pass can block the graph again in a layout it has.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from dialects import layout as L
from dialects import tensor as T
from passes.layout.common import rewrite


class RelayoutNote(UserWarning):
    """The one-line note that a graph's layout was computed in NCHW, and at what cost."""


# the activation layouts this pass can undo (NHWC is a plain format with kernels of its own)
BLOCKED = frozenset(L.ACTIVATION_OF_FORMAT.values()) - {L.Layout.NHWC}


def lacking_layouts(keep: str) -> frozenset[L.Layout]:
    """The blocked layouts not named in ``keep`` (comma-separated layout names, e.g. ``nchw88``)."""
    kept = {w.strip() for w in keep.split(",") if w.strip()}
    unknown = kept - {str(lay) for lay in L.Layout} - {"nchw"}
    if unknown:
        raise ValueError(f"relayout-back: unknown layout(s) {sorted(unknown)} in keep")
    return frozenset(lay for lay in BLOCKED if str(lay) not in kept)


@dataclass
class RunInNchw(RewritePattern):
    """``op{format = A}(x : A) : A``  ==>  ``relayout(op{format = NCHW}(relayout(x) : nchw)) : A``
    for every A in ``lacking``."""

    lacking: frozenset[L.Layout]
    converted: list[str] = field(default_factory=list)

    def _needs(self, op: Operation) -> bool:
        if isinstance(op, L.RelayoutOp) or not isinstance(op, T.MgbOp) or not op.operands:
            # a constant in a blocked layout stays: a relayout of it folds into a plain constant
            return False
        fmt = op.params().get("format") if "format" in op.properties else None
        if fmt is not None and L.ACTIVATION_OF_FORMAT.get(fmt) in self.lacking:
            return True
        values = [*op.operands, *op.results]
        return any(L.layout_of(v.type) in self.lacking for v in values)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not self._needs(op):
            return
        operands = []
        for v in op.operands:
            if L.layout_of(v.type) is None:
                operands.append(v)
                continue
            back = L.RelayoutOp.build(v, None)
            rewriter.insert_op(back, InsertPoint.before(op))
            operands.append(back.output)
        props = dict(op.properties)
        if "format" in props:
            props["format"] = T.to_attr(L.Format.NCHW)
        result_types = [L.to_logical(r.type) if L.layout_of(r.type) else r.type for r in op.results]
        new = type(op).create(
            operands=operands, result_types=result_types, properties=props, attributes=dict(op.attributes)
        )
        rewriter.insert_op(new, InsertPoint.before(op))
        values = []
        for old, res in zip(op.results, new.results, strict=True):
            layout = L.layout_of(old.type)
            if layout is None:
                values.append(res)
                continue
            again = L.RelayoutOp.build(res, layout)
            rewriter.insert_op(again, InsertPoint.before(op))
            values.append(again.output)
        rewriter.replace_matched_op([], values)
        self.converted.append(op.name)


@dataclass(frozen=True)
class RelayoutBackPass(ModulePass):
    """Compute every op of a layout not in ``keep`` in NCHW (see the module docstring).

    ``note`` receives one line saying what was converted and what it costs (``compile()`` prints
    it); nothing when the graph holds no such layout."""

    name = "relayout-back"
    keep: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        note = self.run(op, ctx)
        if note is not None:
            warnings.warn(note, RelayoutNote, stacklevel=2)

    def run(self, module: ModuleOp, ctx: Context | None = None) -> str | None:
        """Apply the pass; the one-line cost note, or None when nothing needed it."""
        lacking = lacking_layouts(self.keep)
        found = sorted(
            {
                str(L.layout_of(v.type))
                for o in module.walk()
                for v in o.results
                if L.layout_of(v.type) in lacking
            }
        )
        pattern = RunInNchw(lacking)
        rewrite(module, [pattern], ctx)
        if not pattern.converted:
            return None
        edges = sum(1 for o in module.walk() if isinstance(o, L.RelayoutOp))
        return (
            f"{'/'.join(found) or 'blocked'} layout has no kernels here: "
            f"{len(pattern.converted)} op(s) run in NCHW instead ({edges} relayout(s) left at run time; "
            "filters repacked once at compile time)"
        )
