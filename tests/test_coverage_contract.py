"""The coverage contract: every op of the tensor dialect has a kernel unit on every code-generating
backend (x86, ARM, CUDA) and an ONNX exporter, or sits on that backend's refusal list below with the
reason. A new op fails here until it gets its kernels or a stated refusal; an op that gains a unit
must leave the list (the lists stay true, not merely sufficient)."""

from __future__ import annotations

import pytest
from xdsl.ir import Operation

from backends.c.arm import ArmNeonEmitter
from backends.c.isas import ISA_EMITTERS
from backends.c.kernels import KERNELS as C_KERNELS
from backends.cuda.kernels import KERNELS as CUDA_KERNELS
from backends.onnx.export import ONNX_EXPORTERS
from dialects import tensor as T
from passes.lowering.kernels import VIEW_OPS

# what the lowering handles without a kernel: constants become weights, views alias their operand
NO_KERNEL = {
    T.ConstOp: "a constant becomes a weight of the model, not a kernel call",
    **{op: "a view: the memory plan aliases its operand, no kernel runs" for op in VIEW_OPS},
}

_CUDA_GAP = "no CUDA unit yet (issue 30); compiling it for cuda is a one-line LoweringError naming the op"
# training-side image ops that the model zoo's inference graphs do not contain (Fast R-CNN's roi
# pooling gave way to roi_align; correlation is FlowNet's): the reference interpreter runs them
_C_VISION_GAP = "no C unit: not in the inference graphs xmge targets; the reference interpreter runs it"
_C_VISION = {
    T.ROIPoolingOp: _C_VISION_GAP,
    T.CorrelationOp: _C_VISION_GAP,
}
# linear algebra of analysis code, not of the inference graphs xmge targets (MegEngine's own CPU
# SVD is its naive kernel): the reference interpreter runs it
_C_LINALG = {T.SVDOp: _C_VISION_GAP}
# shapes computed in the graph: specialize-shapes turns them into constants and static reshapes
# before kernel selection; a data-dependent count has no static size (compile refuses it)
_SPECIALIZED = "specialize-shapes fixes it to its static form (the traced shape) before kernel selection"
_DATA_DEPENDENT = (
    "its output size depends on data: compile refuses it (DataDependentShapeError naming the op)"
)
SHAPE_OPS = {
    T.GetVarShapeOp: _SPECIALIZED,
    T.ReshapeToOp: _SPECIALIZED,
    T.BroadcastToOp: _SPECIALIZED,
    T.CondTakeOp: _DATA_DEPENDENT,
}
# load_and_run test-case checks (trace.dump(input_data=...)): the reference interpreter runs them;
# compile refuses them with a one-line LoweringError naming the op
CHECKS = {T.AssertEqualOp: "a test-case check of a dumped model, not an inference op: compile refuses it"}
REFUSED: dict[str, dict[type[Operation], str]] = {
    "x86": {**NO_KERNEL, **_C_VISION, **_C_LINALG, **SHAPE_OPS, **CHECKS},
    "arm": {**NO_KERNEL, **_C_VISION, **_C_LINALG, **SHAPE_OPS, **CHECKS},
    "cuda": {
        **NO_KERNEL,
        **SHAPE_OPS,
        **CHECKS,
        **{
            op: _CUDA_GAP
            for op in (
                T.ArgmaxOp,
                T.ArgminOp,
                T.ArgsortOp,
                T.BatchNormOp,
                T.ConvolutionBackwardDataOp,
                T.CumsumOp,
                T.IndexingOneHotOp,
                T.LayerNormOp,
                T.PaddingOp,
                T.ResizeOp,
                T.TopKOp,
                T.SVDOp,
                T.Convolution3DOp,
                T.WarpPerspectiveOp,
                T.ROIAlignOp,
                T.ROIPoolingOp,
                T.NMSKeepOp,
                T.CorrelationOp,
                T.WarpAffineOp,
                T.RemapOp,
                T.CvtColorOp,
                T.DeformableConvOp,
                T.RegionRestrictedConvOp,
                T.DeformablePSROIPoolingOp,
            )
        },
    },
}

_ONNX_GAP = "no exporter yet (issue 30); to_onnx raises NotImplementedError naming the op"
ONNX_REFUSED: dict[type[Operation], str] = {
    T.ConstOp: "constants are written as graph initializers, not as nodes",
    **SHAPE_OPS,
    **CHECKS,
    **{
        op: _ONNX_GAP
        for op in (
            T.AdaptivePoolingOp,
            T.ArgmaxOp,
            T.ArgminOp,
            T.ArgsortOp,
            T.BatchNormOp,
            T.BatchedMatrixMulOp,
            T.BroadcastOp,
            T.ConvolutionBackwardDataOp,
            T.CumsumOp,
            T.ElemwiseMultiTypeOp,
            T.IncrSubtensorOp,
            T.IndexingIncrMultiAxisVecOp,
            T.IndexingMultiAxisVecOp,
            T.IndexingOneHotOp,
            T.IndexingSetMultiAxisVecOp,
            T.LayerNormOp,
            T.LinspaceOp,
            T.PaddingOp,
            T.ReduceOp,
            T.ResizeOp,
            T.SetSubtensorOp,
            T.SoftmaxOp,
            T.SplitOp,
            T.TopKOp,
            T.SVDOp,
            T.TypeCvtOp,
            T.Convolution3DOp,
            T.WarpPerspectiveOp,
            T.ROIAlignOp,
            T.ROIPoolingOp,
            T.NMSKeepOp,
            T.CorrelationOp,
            T.WarpAffineOp,
            T.RemapOp,
            T.CvtColorOp,
            T.DeformableConvOp,
            T.RegionRestrictedConvOp,
            T.DeformablePSROIPoolingOp,
        )
    },
}

# the ARM templates' ISAs are those whose emitter is a NEON one; every other C ISA is x86's, and
# "generic" (portable C) serves both
_ARM_ISAS = {isa for isa, emitter in ISA_EMITTERS.items() if issubclass(emitter, ArmNeonEmitter)}
ISAS: dict[str, set[str]] = {
    "x86": set(ISA_EMITTERS) - _ARM_ISAS,
    "arm": _ARM_ISAS | {"generic"},
}


def _served(backend: str) -> set[type[Operation]]:
    if backend == "cuda":
        return {op for u in CUDA_KERNELS.units() for op in u.ops}
    return {op for u in C_KERNELS.units() if u.isa in ISAS[backend] for op in u.ops}


def _names(ops: set[type[Operation]]) -> list[str]:
    return sorted(op.__name__ for op in ops)


def test_the_op_list_is_the_dialects() -> None:
    assert len(T.TENSOR_OPS) > 30
    assert "generic" in ISAS["x86"] and {"avx2", "avx512"} <= ISAS["x86"]
    assert {"neon", "dot"} <= ISAS["arm"] and not ISAS["arm"] & {"avx2", "avx512"}


@pytest.mark.parametrize("backend", ["x86", "arm", "cuda"])
def test_every_op_has_a_kernel_unit_or_a_stated_refusal(backend: str) -> None:
    ops, served, refused = set(T.TENSOR_OPS), _served(backend), REFUSED[backend]
    assert _names(ops - served - set(refused)) == [], f"ops with neither a {backend} unit nor a refusal"
    assert _names(served & set(refused)) == [], f"ops with a {backend} unit: remove them from REFUSED"
    assert all(reason.strip() for reason in refused.values())


def test_every_op_has_an_onnx_exporter_or_a_stated_refusal() -> None:
    ops, exported = set(T.TENSOR_OPS), set(ONNX_EXPORTERS)
    assert _names(ops - exported - set(ONNX_REFUSED)) == [], "ops with neither an exporter nor a refusal"
    assert _names(exported & set(ONNX_REFUSED)) == [], "exported ops: remove them from ONNX_REFUSED"
    assert _names(exported - ops) == [], "exporters for ops outside the tensor dialect"
