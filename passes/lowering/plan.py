"""``kernel-plan-memory``: a static memory plan in one arena, and the weights blob layout.

1. Outputs: a returned value is written straight into the caller's output buffer when a kernel
   produces it (through views too); returned inputs, weights or values returned twice get a copy.
2. In place: an elementwise kernel whose first operand dies at that call and is read exactly where the
   result is written shares that operand's bytes.
3. Liveness-based reuse: each buffer lives from the op that writes it to the last op that reads it or
   a view of it; buffers are placed largest first at the lowest 64-byte-aligned offset that does not
   overlap any placed buffer live at the same time (the greedy-by-size planner of TFLite/MegCC).
4. Views take their source's place (zero-copy reshape). The workspace, shared by all calls because they
   run one after another, is the largest any kernel asks for and sits at the end of the arena.
5. Weights are laid out in order of first use, identical constants once, 64-byte aligned.

The function gets ``kernel.plan``; :func:`dialects.kernel.check_plan` verifies the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, Float32Type, ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from dialects import kernel as K
from dialects.dtypes import numpy_dtype
from passes.lowering.fuse import remove_unused
from passes.lowering.kernels import KernelRegistry, collapse
from passes.lowering.select import ensure_def
from passes.lowering.target_pass import DEFAULT_KERNEL_TARGET, functions, kernel_target
from passes.target import Target


def _root(v: SSAValue) -> SSAValue:
    while isinstance(v.owner, K.ViewOp):
        v = v.owner.src
    return v


def _materialize_outputs(module: ModuleOp, fn: func.FuncOp, kernels: KernelRegistry) -> dict[SSAValue, int]:
    """Storage value -> output index; inserts copies where a returned value cannot be written in place."""
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    owned: dict[SSAValue, int] = {}
    for j, v in enumerate(list(ret.arguments)):
        base = _root(v)
        if isinstance(base.owner, K.CallOp) and base not in owned and shape_bytes(v) == shape_bytes(base):
            owned[base] = j
            continue
        t = v.type
        assert isinstance(t, TensorType)
        shp = tuple(t.get_shape())
        unit = kernels.unit("copy", "generic")
        assert unit is not None, "every kernel registry has the portable copy"
        cshape, (cstrides,) = collapse(shp, [tuple(int(np.prod(shp[i + 1 :])) for i in range(len(shp)))])
        # moved as floats, or as raw words of the element's size (a bool or int8 output copied as
        # floats would write four times its bytes)
        itemsize = numpy_dtype(t.element_type).itemsize
        elem = "f32" if isinstance(t.element_type, Float32Type) else f"e{itemsize}"
        d = ensure_def(module, unit, {"shape": cshape, "strides": cstrides, "offset": 0, "elem": elem})
        copy = K.CallOp(d.sym, [v], [t])
        Rewriter.insert_op(copy, InsertPoint.before(ret))
        ret.operands[j] = copy.outputs[0]
        owned[copy.outputs[0]] = j
    return owned


def shape_bytes(v: SSAValue) -> int:
    return K.nbytes(v.type)


def plan_function(module: ModuleOp, fn: func.FuncOp, threads: int, kernels: KernelRegistry) -> K.PlanAttr:
    outputs = _materialize_outputs(module, fn, kernels)
    ops = list(fn.body.block.ops)
    ranges = K.live_ranges(fn)
    # storage groups: in-place results join their operand's group
    group: dict[SSAValue, int] = {}
    members: list[list[SSAValue]] = []
    for i, op in enumerate(ops):
        if not isinstance(op, K.CallOp):
            continue
        d = op.definition()
        inplace = bool(d.param_values().get("inplace", 0))
        for r in op.outputs:
            if r in outputs:
                continue
            if inplace and r is op.outputs[0]:
                src = _root(op.args[0])
                others = [_root(a) for a in op.args[1:]]
                if (
                    src in group
                    and src not in others
                    and ranges[src][1] == i
                    and K.aligned(shape_bytes(src)) == K.aligned(shape_bytes(r))
                    and all(ranges[m][1] <= i for m in members[group[src]])
                ):
                    group[r] = group[src]
                    members[group[r]].append(r)
                    continue
            group[r] = len(members)
            members.append([r])
    # place groups, largest first
    spans = []
    for g, vals in enumerate(members):
        start = min(ranges[v][0] for v in vals)
        end = max(ranges[v][1] for v in vals)
        spans.append((K.aligned(max(shape_bytes(v) for v in vals)), start, end, g))
    spans.sort(key=lambda s: (-s[0], s[1]))
    placed: list[tuple[int, int, int, int]] = []  # offset, size, start, end
    offset_of: dict[int, int] = {}
    for size, start, end, g in spans:
        busy = sorted((o, o + s) for o, s, a, b in placed if not (b < start or end < a))
        at = 0
        for lo, hi in busy:
            if at + size <= lo:
                break
            at = max(at, hi)
        offset_of[g] = at
        placed.append((at, size, start, end))
    activations = max((o + s for o, s, _, _ in placed), default=0)
    workspace = K.aligned(
        max((d.workspace.value.data for d in module.ops if isinstance(d, K.KernelDefOp)), default=0)
    )
    # weights blob
    wbytes = 0
    seen: dict[tuple[str, str], int] = {}
    for op in ops:
        if isinstance(op, K.WeightOp):
            key = (op.value.digest.data, str(op.output.type))
            if key not in seen:
                seen[key] = wbytes
                wbytes += K.aligned(shape_bytes(op.output))
            op.place = K.PlaceAttr(K.Space.WEIGHTS, seen[key])
    args = list(fn.body.block.args)
    for op in ops:
        if isinstance(op, K.CallOp):
            places = []
            for r in op.outputs:
                if r in outputs:
                    places.append(K.PlaceAttr(K.Space.OUTPUT, outputs[r]))
                else:
                    places.append(K.PlaceAttr(K.Space.ARENA, offset_of[group[r]]))
            op.places = ArrayAttr(places)
        elif isinstance(op, K.ViewOp):
            base = _root(op.src)
            if base in args:
                op.place = K.PlaceAttr(K.Space.INPUT, args.index(base))
            else:
                op.place = K.places_of(base.owner)[list(base.owner.results).index(base)]  # type: ignore[union-attr]
    plan = K.PlanAttr(activations + workspace, workspace, wbytes, threads)
    fn.attributes["kernel.plan"] = plan
    return plan


def weights_blob(module: ModuleOp) -> bytes:
    """The weights blob of a planned module: every ``kernel.weight`` at its place."""
    fn = next(f for f in module.ops if isinstance(f, func.FuncOp))
    plan = K.plan_of(fn)
    assert plan is not None
    blob = bytearray(plan.weights.data)
    for op in fn.body.block.ops:
        if isinstance(op, K.WeightOp):
            assert op.place is not None
            data = op.value.data.data
            blob[op.place.at : op.place.at + len(data)] = data
    return bytes(blob)


@dataclass(frozen=True)
class PlanMemoryPass(ModulePass):
    """Plan all buffers statically in one arena (liveness reuse, in place, zero-copy views)."""

    name = "kernel-plan-memory"
    # not a KernelTargetPass: ``threads`` comes first, as a positional argument and in the options
    threads: int = 1
    target: str | Target = DEFAULT_KERNEL_TARGET

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernels = kernel_target(self.target).kernels
        remove_unused(op)
        for fn in functions(op):
            plan_function(op, fn, self.threads, kernels)
            K.check_plan(fn)
