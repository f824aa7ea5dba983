"""MegEngine's ``optimize_for_inference`` as named xDSL passes (spec part B), and the pipeline
builder :func:`pipeline_for` that maps ``trace.dump``'s options to them.

Base passes (always run when optimizing): ``fold-batch-norm``, ``arith-simplify``, ``param-fuse``,
``reorder-arith-chain``, ``arith-fuse`` (plus ``mgb-canonicalize`` and ``mgb-dce``). Option passes:
``fuse-grain``, ``f16-io-comp``, ``f16-io-f32-comp``, ``fuse-conv-bias-nonlinearity``,
``fuse-conv-bias-with-z``; layout passes come from the registry by name. ``split-reduce-squeeze``
is the dump-order fix-up every dump runs.
"""

from xdsl.passes import ModulePass

from passes.inference.arith import ArithFusePass, ArithSimplifyPass, ReorderArithChainPass
from passes.inference.batch_norm import FoldBatchNormPass
from passes.inference.conv_bias import FuseConvBiasNonlinearityPass, FuseConvBiasWithZPass
from passes.inference.float16 import F16IOCompPass, F16IOF32CompPass
from passes.inference.fuse_grain import FuseGrainPass
from passes.inference.graph_simplify import ElemwiseSimplifyPass
from passes.inference.mge_compat import SplitReduceSqueezePass
from passes.inference.param_fuse import ParamFusePass
from passes.inference.pipeline import (
    InferenceOptionError,
    InferenceOptions,
    base_passes,
    pipeline_for,
)
from passes.inference.specialize_shapes import SpecializeShapesPass

INFERENCE_PASSES: tuple[type[ModulePass], ...] = (
    FoldBatchNormPass,
    ArithSimplifyPass,
    ParamFusePass,
    ReorderArithChainPass,
    ArithFusePass,
    FuseGrainPass,
    F16IOCompPass,
    F16IOF32CompPass,
    FuseConvBiasNonlinearityPass,
    FuseConvBiasWithZPass,
    SplitReduceSqueezePass,
    ElemwiseSimplifyPass,
    SpecializeShapesPass,
)

__all__ = [
    "ElemwiseSimplifyPass",
    "INFERENCE_PASSES",
    "ArithFusePass",
    "ArithSimplifyPass",
    "F16IOCompPass",
    "F16IOF32CompPass",
    "FoldBatchNormPass",
    "FuseConvBiasNonlinearityPass",
    "FuseConvBiasWithZPass",
    "FuseGrainPass",
    "InferenceOptionError",
    "InferenceOptions",
    "ParamFusePass",
    "ReorderArithChainPass",
    "SplitReduceSqueezePass",
    "SpecializeShapesPass",
    "base_passes",
    "pipeline_for",
]
