"""``kernel-pack-weights``: repack constant operands ahead of time into the layout their kernel reads
(GEMM A/B panels, depthwise filter rows), as each template defines. A weight shared by several calls is
packed once per distinct packing; an already packed weight (``packing`` set) is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.rewriter import InsertPoint, Rewriter

from dialects import kernel as K
from dialects.dtypes import element_type
from passes.lowering.fuse import remove_unused
from passes.lowering.target_pass import KernelTargetPass, functions
from passes.target import Target


@dataclass(frozen=True)
class PackWeightsPass(KernelTargetPass):
    """Pack constant kernel operands ahead of time into the layout their kernel reads."""

    name = "kernel-pack-weights"

    def apply_for(self, module: ModuleOp, target: Target) -> None:
        for fn in functions(module):
            done: dict[tuple[int, str, tuple[int, ...]], K.WeightOp] = {}
            for call in [c for c in fn.body.block.ops if isinstance(c, K.CallOp)]:
                d = call.definition()
                unit = target.kernels.of(d)
                params = d.param_values()
                for i, v in enumerate(call.args):
                    w = v.owner
                    if not isinstance(w, K.WeightOp) or w.packing.data:
                        continue
                    got = unit.pack(i, w.numpy(), params)
                    if got is None:
                        continue
                    array, packing = got
                    key = (id(w), packing, tuple(array.shape))
                    packed = done.get(key)
                    if packed is None:
                        packed = K.WeightOp.from_numpy(array, element_type(array.dtype), packing)
                        for k, a in w.attributes.items():
                            packed.attributes[k] = a
                        Rewriter.insert_op(packed, InsertPoint.before(w))
                        done[key] = packed
                    call.operands[i] = packed.output
        remove_unused(module)
