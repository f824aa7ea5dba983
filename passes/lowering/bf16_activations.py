"""``kernel-bf16-activations``: keep activations in bfloat16 between kernels that take them so.

Under ``+bf16`` a bfloat16 convolution rounds its float32 input to bfloat16 anyway; storing the
producer's result as bfloat16 (rounded once, in its epilogue) halves the bytes written and read
between layers and lets the reader skip its conversion pass. A result becomes a bfloat16 tensor
(``tensor<...xbf16>``, same shape and layout) when its producer can store it so and *every* user
reads it as bfloat16 at that argument; a value the function returns, or any other reader (a
depthwise layer, pooling, a relayout, a view), keeps it float32, so conversion happens only at
float32 edges: the model's inputs and outputs and the layers that stay float32. The float32
F(4x4, 3x3) Winograd kernel takes part on ``x86-avx512-nchw88+bf16`` (its ``avx512bf16`` unit):
bfloat16 input and result, float32 transforms and GEMM.

What changes numerically beyond the ``+bf16`` contract: a residual read as bfloat16 is rounded to
bfloat16 too (the convolution input was already), and so are a float32 Winograd layer's input and
result (its filters, transforms and sums stay float32). Units take part by implementing
:class:`Bf16ActivationUnit`; the pass records its choice in the definitions' ``bf16_args`` /
``bf16_outs`` parameters, which ``kernel.call``'s verifier checks against the element types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from xdsl.dialects.builtin import BFloat16Type, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import Rewriter

from dialects import kernel as K
from passes.lowering.fuse import remove_unused
from passes.lowering.select import ensure_def
from passes.lowering.target_pass import KernelTargetPass, functions
from passes.target import Target


@runtime_checkable
class Bf16ActivationUnit(Protocol):
    """A kernel unit that can read some arguments, or store some results, as bfloat16."""

    def bf16_reads(self, p: dict[str, Any]) -> tuple[int, ...]:
        """Argument indices the specialisation ``p`` can read as bfloat16."""
        ...

    def bf16_writes(self, p: dict[str, Any]) -> tuple[int, ...]:
        """Result indices the specialisation ``p`` can store as bfloat16."""
        ...


def takes_part(target: Target) -> bool:
    """Whether ``target`` has a unit that takes part (the pass is in its pipeline only then)."""
    return any(isinstance(u, Bf16ActivationUnit) and u.isa in target.isas for u in target.kernels.units())


def _retype(v: SSAValue) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return TensorType(BFloat16Type(), t.get_shape(), t.encoding)


def _reads(op: Operation, index: int, units: dict[int, Any], params: dict[int, dict[str, Any]]) -> bool:
    """Whether ``op`` is a call whose unit reads argument ``index`` as bfloat16."""
    u = units.get(id(op))
    return isinstance(u, Bf16ActivationUnit) and index in u.bf16_reads(params[id(op)])


@dataclass(frozen=True)
class Bf16ActivationsPass(KernelTargetPass):
    """Store as bfloat16 every kernel result whose producer and readers all take bfloat16."""

    name = "kernel-bf16-activations"

    def apply_for(self, module: ModuleOp, target: Target) -> None:
        kernels = target.kernels
        changed = False
        for fn in functions(module):
            calls = [o for o in fn.body.block.ops if isinstance(o, K.CallOp)]
            units = {id(c): kernels.of(c.definition()) for c in calls}
            params = {id(c): c.definition().param_values() for c in calls}

            outs: dict[int, list[int]] = {}
            args: dict[int, list[int]] = {}
            for c in calls:
                u = units[id(c)]
                if not isinstance(u, Bf16ActivationUnit):
                    continue
                for k in u.bf16_writes(params[id(c)]):
                    r = c.outputs[k]
                    users = list(r.uses)
                    if not users or not all(_reads(use.operation, use.index, units, params) for use in users):
                        continue
                    outs.setdefault(id(c), []).append(k)
                    for use in users:
                        args.setdefault(id(use.operation), []).append(use.index)
            for c in calls:
                if id(c) not in outs and id(c) not in args:
                    continue
                p = dict(params[id(c)])
                if id(c) in args:
                    p["bf16_args"] = tuple(sorted(set(args[id(c)])))
                if id(c) in outs:
                    p["bf16_outs"] = tuple(sorted(outs[id(c)]))
                d = ensure_def(module, units[id(c)], p)
                types = [_retype(r) if k in outs.get(id(c), ()) else r.type for k, r in enumerate(c.outputs)]
                repl = K.CallOp(d.sym, list(c.args), types)
                for key, a in c.attributes.items():
                    if key != "callee":
                        repl.attributes[key] = a
                Rewriter.replace_op(c, repl)
                changed = True
        if changed:
            remove_unused(module)


__all__ = ["Bf16ActivationUnit", "Bf16ActivationsPass", "takes_part"]
