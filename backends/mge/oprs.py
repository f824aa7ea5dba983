"""The MegEngine operators xmge reads and writes: one row per operator kind (spec A.5).

A row holds everything about one kind: its registry names and C++ type name (from which the ids in
a file follow), the ``mgb`` IR ops written as it and how it is read and written: for the common
form (inputs = the op's operands, one param table whose fields are the op's properties) a
:class:`~backends.mge.param_map.ParamMap`, from which reading and lowering follow; otherwise a
function that reads it from a file (:mod:`backends.mge.read_ops`) and, for IR ops, one that lowers
them for writing (:mod:`backends.mge.lower_ops`). The container, the reader, the writer and
``trace.dump``'s naming all look kinds up here, so adding an operator is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import backends.mge.attention_ops as A
import backends.mge.image_ops as IM
import backends.mge.layouts as layouts
import backends.mge.lower_ops as W
import backends.mge.read_ops as R
import backends.mge.schema as S
import backends.mge.vision_ops as V
from backends.mge.param_map import ParamMap, lower_mapped, read_mapped
from backends.mge.schema import ParamDef, h_full, h_short
from dialects import tensor as T

if TYPE_CHECKING:
    from backends.mge.container import RawOpr
    from backends.mge.read_context import ReadContext

ReadFn = Callable[["ReadContext", "RawOpr"], None]
LowerFn = W.LowerFn


@dataclass(frozen=True)
class Opr:
    """A MegEngine operator kind.

    ``regname`` is the version-1 registry name (used by FBS v1, and by FBS v2 with opr_version 1);
    ``v2name`` is the version-2 registry name when the operator has one. ``kind`` is
    the name that ``megengine.utils.network`` shows and xmge's var names use, ``typeinfo`` the
    C++ class name used in strip-info JSON.
    """

    kind: str
    regname: str | None
    typeinfo: str
    v2name: str | None = None
    ir_ops: tuple[type[T.MgbOp], ...] = ()
    """The IR ops written as this kind."""
    read: ReadFn | None = None
    """Reads one operator of this kind into IR; None when the reader does not take it."""
    lower: LowerFn | None = None
    """Lowers one of ``ir_ops`` to operator records for writing."""
    names_traced_ops: bool = True
    """Traced ops of ``ir_ops`` are named ``scope.kind`` like MegEngine's tracer does (Elemwise
    ops are named by their mode instead; quantized elemwise ops are not deduplicated by name)."""
    params: ParamMap | None = None
    """The common form: the operator is its one IR op, its params map to the op's properties;
    ``read`` and ``lower`` follow from it."""

    def __post_init__(self) -> None:
        if self.params is None:
            return
        if len(self.ir_ops) != 1 or self.read is not None or self.lower is not None:
            raise TypeError(f"{self.kind}: a row with a ParamMap has one IR op and no read/lower functions")
        (cls,) = self.ir_ops
        self.params.check(self.kind, cls)
        # frozen: the derived functions are set once, here
        object.__setattr__(self, "read", partial(read_mapped, self.params, cls))
        object.__setattr__(self, "lower", partial(lower_mapped, self.params, self.kind))

    @property
    def persist_id(self) -> int:
        assert self.regname is not None, self.kind
        return h_full(self.regname)

    def v2_id(self, model_version: int = 2) -> tuple[str, int, int]:
        """(type string, type_id, opr_version) written in an FBS v2 file."""
        assert self.regname is not None, self.kind
        if self.v2name is not None and model_version >= 2:
            return self.v2name, h_full(self.v2name), 2
        return self.regname, h_short(self.regname), 1


def _same(kind: str, **rest: object) -> Opr:
    """A kind whose registry and C++ names are its own name, in both versions."""
    return Opr(kind, kind, kind, kind, **rest)  # type: ignore[arg-type]


# fmt: off
OPRS: tuple[Opr, ...] = (
    Opr("Host2DeviceCopy", "Host2DeviceCopy", "Host2DeviceCopy", "Host2DeviceCopy"),  # graph inputs
    _same("ImmutableTensor", read=R.read_immutable),
    Opr("SharedDeviceTensor", "SharedDeviceTensor", "SharedDeviceTensor", read=R.read_immutable),
    _same("MultipleDeviceTensorHolder", read=R.read_multi_holder),
    _same("MultipleDeviceTensorWithFormatHolder", read=R.read_multi_holder),  # NHWCD4 weights
    Opr("Convolution", "ConvolutionV2", "ConvolutionForward", "Convolution",
        (T.ConvolutionOp,), R.read_convolution, W.lower_convolution),
    Opr("ConvolutionBackwardData", "ConvolutionBackwardDataV2", "ConvolutionBackwardData",
        "ConvolutionBackwardData",
        (T.ConvolutionBackwardDataOp,), R.read_convolution_backward_data, W.lower_convolution_backward_data),
    Opr("ConvBias", "ConvBiasForwardV4", "ConvBiasForward", "ConvBiasForward",
        (T.ConvBiasOp,), R.read_conv_bias, W.lower_conv_bias),
    Opr("Pooling", "PoolingV1", "PoolingForward", None, (T.PoolingOp,), R.read_pooling, W.lower_pooling),
    Opr("AdaptivePooling", "AdaptivePoolingV1", "AdaptivePoolingForward", None,
        (T.AdaptivePoolingOp,), R.read_adaptive_pooling, W.lower_adaptive_pooling),
    Opr("MatrixMul", "MatrixMulV2", "MatrixMul", None, (T.MatrixMulOp,), R.read_matmul, W.lower_matmul),
    Opr("BatchedMatrixMul", "BatchedMatrixMulV2", "BatchedMatrixMul", None,
        (T.BatchedMatrixMulOp,), R.read_matmul, W.lower_matmul),
    Opr("Elemwise", "Elemwise", "Elemwise", None,
        (T.ElemwiseOp,), R.read_elemwise, W.lower_elemwise, names_traced_ops=False),
    Opr("ElemwiseMultiType", "ElemwiseMultiType", "ElemwiseMultiType", None,
        (T.ElemwiseMultiTypeOp,), R.read_elemwise_multi_type, W.lower_elemwise_multi_type,
        names_traced_ops=False),
    Opr("PowC", "PowC", "PowC", read=R.read_powc),  # read as Elemwise POW
    Opr("Reduce", "ReduceV2", "Reduce", None, (T.ReduceOp,), R.read_reduce, W.lower_reduce),
    Opr("TypeCvt", "TypeCvtV2", "TypeCvt", None, (T.TypeCvtOp,), R.read_typecvt, W.lower_typecvt),
    Opr("Reshape", "ReshapeV1", "Reshape", None,
        (T.ReshapeOp, T.ReshapeToOp), R.read_reshape, W.lower_reshape),
    Opr("Broadcast", "Broadcast", "Broadcast", None,
        (T.BroadcastOp, T.BroadcastToOp), R.read_broadcast, W.lower_broadcast),
    Opr("Dimshuffle", "Dimshuffle", "Dimshuffle", None,
        (T.DimshuffleOp,), R.read_dimshuffle, W.lower_dimshuffle),
    Opr("AxisAddRemove", "AxisAddRemove", "AxisAddRemove", None,
        (T.AxisAddRemoveOp,), R.read_axis_add_remove, W.lower_axis_add_remove),
    Opr("Concat", "Concat", "Concat", None, (T.ConcatOp,), R.read_concat, W.lower_concat),
    Opr("GetVarShape", "GetVarShapeV1", "GetVarShape", None,
        (T.GetVarShapeOp,), R.read_get_var_shape, W.lower_get_var_shape, names_traced_ops=False),
    Opr("Subtensor", "Subtensor", "Subtensor", None, (T.SubtensorOp,), R.read_subtensor, W.lower_subtensor),
    # read as MegEngine's Split; written as one Subtensor per part, as MegEngine 1.13's tracer does
    Opr("Split", "Split", "Split", None, (T.SplitOp,), R.read_split, W.lower_split),
    Opr("BatchNorm", "BatchNormV1", "BatchNormForward", None,
        (T.BatchNormOp,), R.read_batch_norm, W.lower_batch_norm),
    Opr("Softmax", "Softmax", "SoftmaxForward", "Softmax", (T.SoftmaxOp,),
        params=ParamMap("Softmax", {"axis": "axis"})),
    Opr("Padding", "Padding", "PaddingForward", None, (T.PaddingOp,), R.read_padding, W.lower_padding),
    Opr("Resize", "ResizeV2", "ResizeForward", None, (T.ResizeOp,), R.read_resize, W.lower_resize),
    Opr("LayerNorm", "LayerNorm", "LayerNormForward", None,
        (T.LayerNormOp,), R.read_layer_norm, W.lower_layer_norm),
    # read as the mgb ops they compose; written as those ops
    Opr("GroupNorm", "GroupNorm", "GroupNormForward", "GroupNorm", read=R.read_group_norm),
    Opr("InstanceNorm", "InstanceNorm", "InstanceNormForward", "InstanceNorm", read=R.read_group_norm),
    Opr("Argmax", "Argmax", "ArgmaxForward", None, (T.ArgmaxOp,), params=ParamMap("Axis", {"axis": "axis"})),
    Opr("Argmin", "Argmin", "ArgminForward", None, (T.ArgminOp,), params=ParamMap("Axis", {"axis": "axis"})),
    Opr("RelayoutFormat", "RelayoutFormatV1", "RelayoutFormat", read=layouts.read_relayout_format),
    Opr("Identity", "Identity", "Identity", read=R.read_alias),
    Opr("Copy", "Copy", "Copy", read=R.read_alias),
    Opr("MarkNoBroadcastElemwise", "MarkNoBroadcastElemwise", "MarkNoBroadcastElemwise",
        read=R.read_first_input),
    Opr("VirtualDep", "VirtualDep", "VirtualDep", read=R.read_first_input),
    Opr("MarkDynamicVar", "MarkDynamicVar", "MarkDynamicVar", read=R.read_first_input),
    Opr("SetSubtensor", "SetSubtensor", "SetSubtensor", None,
        (T.SetSubtensorOp,), R.read_modify_subtensor, W.lower_modify_subtensor),
    Opr("IncrSubtensor", "IncrSubtensor", "IncrSubtensor", None,
        (T.IncrSubtensorOp,), R.read_modify_subtensor, W.lower_modify_subtensor),
    Opr("IndexingMultiAxisVec", "IndexingMultiAxisVec", "IndexingMultiAxisVec", None,
        (T.IndexingMultiAxisVecOp,), R.read_indexing, W.lower_indexing),
    Opr("IndexingSetMultiAxisVec", "IndexingSetMultiAxisVec", "IndexingSetMultiAxisVec", None,
        (T.IndexingSetMultiAxisVecOp,), R.read_indexing, W.lower_indexing),
    Opr("IndexingIncrMultiAxisVec", "IndexingIncrMultiAxisVec", "IndexingIncrMultiAxisVec", None,
        (T.IndexingIncrMultiAxisVecOp,), R.read_indexing, W.lower_indexing),
    Opr("Linspace", "Linspace", "Linspace", None, (T.LinspaceOp,), R.read_linspace, W.lower_linspace),
    Opr("Cumsum", "CumsumV1", "Cumsum", None, (T.CumsumOp,), params=ParamMap(
        ParamDef("Cumsum", 24, (("axis", "i", S.INT_MAX), ("exclusive", "?", True), ("reverse", "?", False))),
        {"axis": "axis", "exclusive": "exclusive", "reverse": "reverse"})),
    Opr("IndexingOneHot", "IndexingOneHot", "IndexingOneHot", None, (T.IndexingOneHotOp,),
        params=ParamMap("Axis", {"axis": "axis"})),
    Opr("Argsort", "Argsort", "ArgsortForward", None, (T.ArgsortOp,),
        params=ParamMap(ParamDef("Argsort", 26, (("order", "I", 0),)), {"order": "descending"})),
    Opr("TopK", "TopK", "TopK", None, (T.TopKOp,), R.read_topk, W.lower_topk),
    # read as matmul/softmax/elementwise ops; xmge writes attention as those ops, never as this
    Opr("MultiHeadAttn", "MultiHeadAttn", "MultiHeadAttnForward", None, (), A.read_multi_head_attn),
    Opr("SVD", "SVD", "SVD", None, (T.SVDOp,), params=ParamMap(
        ParamDef("SVD", 22, (("full_matrices", "?", False), ("compute_uv", "?", True))),
        {"full_matrices": "full_matrices"})),
    Opr("CondTake", "CondTake", "CondTake", None, (T.CondTakeOp,), R.read_cond_take, W.lower_cond_take),
    # load_and_run test-case files check each output with one (trace.dump(input_data=...))
    Opr("AssertEqual", "AssertEqual", "AssertEqual", None, (T.AssertEqualOp,), params=ParamMap(
        ParamDef("AssertEqual", 56, (("maxerr", "f", 1e-4), ("verbose", "?", False))),
        {"maxerr": "maxerr", "verbose": "verbose"})),
    Opr("Convolution3D", "Convolution3D", "Convolution3DForward", "Convolution3D", (T.Convolution3DOp,),
        V.read_convolution3d, V.lower_convolution3d),
    Opr("WarpPerspective", "WarpPerspectiveV2", "WarpPerspectiveForward", None, (T.WarpPerspectiveOp,),
        V.read_warp_perspective, V.lower_warp_perspective),
    Opr("ROIAlign", "ROIAlignV1", "ROIAlignForward", None, (T.ROIAlignOp,),
        V.read_roi_align, V.lower_roi_align),
    Opr("ROIPooling", "ROIPooling", "ROIPoolingForward", None, (T.ROIPoolingOp,),
        V.read_roi_pooling, V.lower_roi_pooling),
    # registered by src/opr/impl/standalone/nms_opr.cpp (not a *.sereg.h), as NMSKeepMGB
    Opr("NMSKeep", "NMSKeepMGB", "NMSKeep", None, (T.NMSKeepOp,), V.read_nms_keep, V.lower_nms_keep),
    Opr("Correlation", "CorrelationForward", "CorrelationForward", None, (T.CorrelationOp,),
        V.read_correlation, V.lower_correlation),
    Opr("WarpAffine", "WarpAffineV2", "WarpAffineForward", None, (T.WarpAffineOp,),
        IM.read_warp_affine, IM.lower_warp_affine),
    Opr("Remap", "RemapV1", "RemapForward", None, (T.RemapOp,), IM.read_remap, IM.lower_remap),
    Opr("CvtColor", "CvtColor", "CvtColorForward", None, (T.CvtColorOp,),
        IM.read_cvt_color, IM.lower_cvt_color),
    Opr("DeformableConv", "DeformableConvForwardV1", "DeformableConvForward", "DeformableConvForward",
        (T.DeformableConvOp,), IM.read_deformable_conv, IM.lower_deformable_conv),
    Opr("DeformablePSROIPooling", "DeformablePSROIPoolingForward", "DeformablePSROIPoolingForward", None,
        (T.DeformablePSROIPoolingOp,), IM.read_deformable_psroi_pooling, IM.lower_deformable_psroi_pooling),
    # registered outside the *.sereg.h files tests/data/mge_opr_registry_1_13.txt lists
    Opr("RegionRestrictedConvolution", "RegionRestrictedConvolution", "RegionRestrictedConvolutionForward",
        None, (T.RegionRestrictedConvOp,), IM.read_region_restricted_conv, IM.lower_region_restricted_conv),
)
# fmt: on


def _declared_params(rows: tuple[Opr, ...]) -> None:
    """Add the param tables that rows declare themselves (a :class:`ParamDef` in their ParamMap)
    to ``schema.PARAMS``, where the container, the serialiser and the verifier find every table.
    ``backends/mge/__init__.py`` imports this module, so that happens before any of them runs."""
    for row in rows:
        table = row.params.table if row.params is not None else None
        if not isinstance(table, ParamDef):
            continue
        known = S.PARAMS.get(table.name) or S.PARAMS_BY_TAG.get(table.tag)
        if known is not None and known != table:
            raise TypeError(f"{row.kind}: param.{table.name} (tag {table.tag}) clashes with {known}")
        S.PARAMS[table.name] = table
        S.PARAMS_BY_TAG[table.tag] = table


_declared_params(OPRS)
BY_KIND: dict[str, Opr] = {o.kind: o for o in OPRS}
BY_IR_OP: dict[type[T.MgbOp], Opr] = {cls: o for o in OPRS for cls in o.ir_ops}
_WRITTEN = [o for o in OPRS if o.regname is not None]
BY_PERSIST_ID: dict[int, Opr] = {o.persist_id: o for o in _WRITTEN}
BY_SHORT_ID: dict[int, Opr] = {h_short(o.regname): o for o in _WRITTEN if o.regname is not None}
BY_V2_ID: dict[tuple[int, int], Opr] = {
    **{(h_short(o.regname), 1): o for o in _WRITTEN if o.regname is not None},
    **{(h_full(o.v2name), 2): o for o in _WRITTEN if o.v2name is not None},
}

_TRAINING = "a training-only operator (gradients, parameter updates), never in an inference graph"
_RANDOM = "a random number generator: an inference graph xmge compiles must be deterministic"
_CONTROL = "conditional execution / graph plumbing MegEngine inserts only for dynamic or multi-device graphs"
_DYNAMIC = "its output shape depends on tensor values, which xmge's static shapes cannot express"
_DEVICE = "a vendor runtime / device-specific operator (TensorRT, Atlas, Cambricon, NvOf)"
_NICHE = "not produced by the model zoo's inference graphs; not supported by xmge yet"

# MegEngine 1.13 operators (registry names, as in tests/data/mge_opr_registry_1_13.txt) that xmge
# refuses to read, each with the reason its error gives.
REFUSED: dict[str, str] = {
    **{name: _TRAINING for name in (
        "AdaptivePoolingBackwardV1 AddUpdate ArgsortBackward BatchNormBackwardV1 Convolution3DBackwardData "
        "Convolution3DBackwardFilter ConvolutionBackwardFilterV2 CorrelationBackwardData1 "
        "CorrelationBackwardData2 DeformableConvBackwardDataV1 DeformableConvBackwardFilterV1 "
        "DeformablePSROIPoolingBackward DiagBackward DropoutBackward FakeQuantBackward GeneralNormBackward "
        "GroupLocalBackwardDataV2 GroupLocalBackwardFilterV2 GroupNormBackward Images2NeibsBackward "
        "IndexingRemapBackward InstanceNormBackward LRNBackward LSQBackward LSTMBackward LayerNormBackward "
        "LocalBackwardDataV2 LocalBackwardFilterV2 LocalShareBackwardDataV1 LocalShareBackwardFilterV1 "
        "MultiHeadAttnBackward PaddingBackward PoolingBackwardV1 RNNBackward ROIAlignBackwardV1 "
        "ROIPoolingBackward RemapBackwardDataV1 RemapBackwardMatV1 ResizeBackward ShuffleRNGBackward "
        "SlidingWindowTransposeBackward SoftmaxBackward TQTBackward WarpPerspectiveBackwardDataV2 "
        "WarpPerspectiveBackwardMatV2 WhereBackward VirtualGrad CheckNonFinite FakeQuant TQT LSQ"
    ).split()},
    **{name: _RANDOM for name in (
        "BetaRNG ExponentialRNG GammaRNG GaussianRNGV1 MultinomialRNG PermutationRNG PoissonRNG ShuffleRNG "
        "UniformRNGV1 Dropout"
    ).split()},
    **{name: _CONTROL for name in (
        "CondExecMark CondExecMarkIfNeed CondExecMerge CondExecPred CondExecPredLogical Sleep "
        "PersistentOutputStorage VolatileSharedDeviceTensor SharedDeviceTensorWithFormat Alloc"
    ).split()},
    **{name: _DYNAMIC for name in "NonZero".split()},
    **{name: _DEVICE for name in "AtlasRuntimeOpr NvOf".split()},
    **{name: _NICHE for name in (
        "AffineInt BatchConvBiasForwardV1 BatchedIncrMeshIndexing BatchedMeshIndexing "
        "BatchedSetMeshIndexing Cross DctChannelSelectV1 "
        "Diag Dot Eye Flip GaussianBlur GeneralNorm "
        "GroupLocalV2 Images2Neibs IncrMeshIndexing IndexingRemap IndexingSetOneHot "
        "LRN LSTMCellForward LSTMForward LocalShareForwardV1 LocalV2 MaskConvolutionV2 "
        "MaskPropagate MaskedFill MatrixInverse MeshIndexing RNNCellForward RNNForward "
        "Resize3D Rotate SetMeshIndexing SlidingWindowTranspose "
        "Where"
    ).split()},
}

# Known ids of operators xmge does not read, so errors can name them (and say why).
KNOWN_NAMES: dict[int, str] = {h(name): name for name in REFUSED for h in (h_full, h_short)}


def refusal(type_name: str, type_id: int) -> tuple[str, str] | None:
    """(registry name, reason) when xmge refuses the operator with this id (or, failing that,
    this registry name)."""
    name = KNOWN_NAMES.get(type_id, type_name)
    why = REFUSED.get(name)
    return None if why is None else (name, why)


# operators that own a megdnn workspace (a Byte output var) in MegEngine: strip-info reports the
# Byte dtype for them, and the var takes a node id
WORKSPACE_KINDS = frozenset(
    {"Convolution", "ConvBias", "Pooling", "MatrixMul", "BatchedMatrixMul", "Reduce", "BatchNorm"}
)


def traced_kind(op: T.MgbOp) -> str | None:
    """The kind in a traced op's MegEngine name (``layer1.0.RELU``, ``fc.MatrixMul``): the mode of
    an elemwise op, the row's kind otherwise; None for ops MegEngine's tracer leaves unnamed."""
    if isinstance(op, T.ElemwiseOp):
        return op.params()["mode"].name
    row = BY_IR_OP.get(type(op))
    return row.kind if row is not None and row.names_traced_ops else None
