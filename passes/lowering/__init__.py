"""Lowering from the tensor (and layout) dialects to the kernel dialect: kernel selection from one
registry, epilogue fusion, ahead-of-time weight packing and static memory planning."""

from passes.lowering import (
    rules_typed,  # noqa: F401  (blocked-layout and non-float32 candidates)
    rules_x86,  # noqa: F401  (x86 NCHW88 candidates)
)
from passes.lowering.fuse import FuseEpiloguePass
from passes.lowering.pack import PackWeightsPass
from passes.lowering.plan import PlanMemoryPass, weights_blob
from passes.lowering.select import LoweringError, LowerToKernelPass

LOWERING_PASSES = (LowerToKernelPass, FuseEpiloguePass, PackWeightsPass, PlanMemoryPass)

__all__ = [
    "LOWERING_PASSES",
    "FuseEpiloguePass",
    "LowerToKernelPass",
    "LoweringError",
    "PackWeightsPass",
    "PlanMemoryPass",
    "weights_blob",
]
