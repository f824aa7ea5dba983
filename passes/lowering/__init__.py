"""Lowering from the tensor (and layout) dialects to the kernel dialect: kernel selection from the
target's kernel registry, epilogue fusion, ahead-of-time weight packing and static memory planning."""

from passes.lowering.bf16_activations import Bf16ActivationsPass
from passes.lowering.fuse import FuseEpiloguePass
from passes.lowering.kernels import KernelRegistry, KernelUnit, Lowered, LoweringError
from passes.lowering.moves import FuseMovesPass
from passes.lowering.pack import PackWeightsPass
from passes.lowering.plan import PlanMemoryPass, weights_blob
from passes.lowering.select import LowerToKernelPass
from passes.lowering.widen import WidenF16Pass

LOWERING_PASSES = (
    WidenF16Pass,
    LowerToKernelPass,
    FuseEpiloguePass,
    FuseMovesPass,
    Bf16ActivationsPass,
    PackWeightsPass,
    PlanMemoryPass,
)

__all__ = [
    "LOWERING_PASSES",
    "Bf16ActivationsPass",
    "FuseEpiloguePass",
    "FuseMovesPass",
    "KernelRegistry",
    "KernelUnit",
    "LowerToKernelPass",
    "Lowered",
    "LoweringError",
    "PackWeightsPass",
    "PlanMemoryPass",
    "WidenF16Pass",
    "weights_blob",
]
