"""MegEngine's operator enums, in MegEngine's numbering (the one place that numbering lives).

Each enum is a ``StrEnum`` whose members are declared in MegEngine's order, so a member's number
in the ``.mge`` format is its position: ``number(ElemwiseMode.ADD) == 16``. The string values are
the lower-case names used in xmge's textual IR.
"""

from __future__ import annotations

from enum import Enum

from xdsl.utils.str_enum import StrEnum


def _make(name: str, members: str) -> type[StrEnum]:
    names = members.split()
    return StrEnum(name, [(n, n.lower()) for n in names])  # type: ignore[return-value]


ElemwiseMode = _make(
    "ElemwiseMode",
    """RELU ABS ACOS ASIN CEIL COS EXP EXPM1 FLOOR LOG LOG1P NEGATE SIGMOID SIN TANH ABS_GRAD ADD
    FLOOR_DIV MAX MIN MOD MUL POW SIGMOID_GRAD SUB SWITCH_GT0 TANH_GRAD TRUE_DIV LOG_SUM_EXP LT LEQ
    EQ SHL SHR COND_LEQ_MOV FUSE_MUL_ADD3 FUSE_MUL_ADD4 FUSE_ADD_RELU FUSE_ADD_SIGMOID FUSE_ADD_TANH
    FAST_TANH FAST_TANH_GRAD ROUND RMULH ATAN2 ERF ERFINV ERFC ERFCINV H_SWISH H_SWISH_GRAD
    FUSE_ADD_H_SWISH NOT AND OR XOR SILU SILU_GRAD GELU GELU_GRAD COND_LT_MOV NEQ ISNAN ISINF SINH
    COSH ASINH ACOSH ATANH TAN ASINH_GRAD ACOSH_GRAD ATANH_GRAD PRELU CLIP PRELU_GRAD SOFTPLUS
    SOFTPLUS_GRAD RELU6 RELU6_GRAD HSIGMOID HSIGMOID_GRAD LOGSIGMOID SQRT SQUARE SIGN""",
)
ElemwiseMultiTypeMode = _make(
    "ElemwiseMultiTypeMode",
    """FUSE_MUL_ADD3_INT16x32x32x32 FUSE_MUL_ADD3_IXxF32xF32xI8 ROUND_SHR_SATURATE_IXxI8xI8
    FUSE_ADD_RMULH_ROUND_SHR_SATURATE_INT16x16x16x8 FUSE_ADD_RMULH_ROUND_SHR_SATURATE_INT32x32x32x8
    ROUND_SHR_SATURATE_IXxI8xI16 QADD QFUSE_ADD_RELU QMUL QMIN QMAX QSUB QTRUE_DIV QFUSE_ADD_SIGMOID
    QFUSE_ADD_TANH QRELU QABS QSIGMOID QEXP QTANH QFUSE_MUL_ADD3 QFAST_TANH QNEGATE QACOS QASIN
    QCEIL QCOS QEXPM1 QFLOOR QLOG QLOG1P QSIN QROUND QERF QERFINV QERFC QERFCINV QABS_GRAD
    QFLOOR_DIV QMOD QSIGMOID_GRAD QSWITCH_GT0 QTANH_GRAD QLT QLEQ QEQ QPOW QLOG_SUM_EXP
    QFAST_TANH_GRAD QATAN2 QCOND_LEQ_MOV QH_SWISH QFUSE_ADD_H_SWISH QH_SWISH_GRAD
    FUSE_MUL_ADD3_INT16xF32xF32xF32 MUL_INT16xF32xF32 FUSE_MUL_ADD3_UINT8xF32xF32xF32 QCOND_LT_MOV
    EQ NEQ LT LEQ ISNAN ISINF""",
)
ConvMode = _make("ConvMode", "CROSS_CORRELATION CONVOLUTION")
ConvSparse = _make("ConvSparse", "DENSE GROUP")
ComputeMode = _make("ComputeMode", "DEFAULT FLOAT32")
NonlineMode = _make("NonlineMode", "IDENTITY RELU SIGMOID H_SWISH")
Format = _make(
    "Format",
    """NCHW NHWC NHWCD4 NCHW4 NCHW8 NCHW32 NCHW88 NCHW44 NCHW44_DOT NCHW4_NCHW32 NCHW32_NCHW4
    NCHW4_NCHW NHWC_NCHW NHWC_NCHW4_IC_SMALL NCHW_NCHW4_IC_SMALL CHWN4 NCHW64 NCHW4_NHWC""",
)
PoolingMode = _make("PoolingMode", "MAX AVERAGE AVERAGE_COUNT_EXCLUDE_PADDING")
RelayoutFormatMode = _make(
    "RelayoutFormatMode",
    """NHWC_NHWCD4 NHWCD4_NHWC NHWC_NHWCD4I NCHW_NHWCD4 NCHW_NHWCD4I NHWCD4I_NCHW NHWCD4_NCHW
    INTER_WEIGHT_DENSE INTER_WEIGHT_DENSEI INTER_WEIGHT_GROUP INTER_WEIGHT_GROUPI INTER_WEIGHT_CHAN
    INTER_WEIGHT_CHANI INTER_WEIGHT_DENSEI_DOT INTER_WEIGHT_GROUPI_DOT NCHW4_CHWN4 CHWN4_NCHW4
    NCHW_NCHW88_CONV_DENSE_WEIGHT NCHW_NCHW88_CONV_CHAN_WEIGHT NCHW_NCHW88_CONV_GROUP_WEIGHT
    NCHW_NCHW88 NCHW88_NCHW NCHW_NCHW4_IC_SMALL NCHW_NCHW4_IC_SMALL_CONV_DENSE_WEIGHT NCHW_NCHW4
    NCHW4_NCHW NCHW_NCHW4_WEIGHT NCHW_NCHW64 NCHW64_NCHW NCHW_NHWC NHWC_NCHW NHWCD4I_NHWC""",
)
MatrixMulFormat = _make("MatrixMulFormat", "DEFAULT MK4 MK8 MK4_DOT N32K4_DOT")
ReduceMode = _make("ReduceMode", "SUM SUM_SQR PRODUCT MIN MAX MEAN")
ReduceDataType = _make(
    "ReduceDataType", "DEFAULT FLOAT_IO16xC32 FLOAT_O32xC32 FLOAT_O16xC32 QUINT_I8xO32 QINT_I8xO32"
)
BNParamDim = _make("BNParamDim", "DIM_11HW DIM_1CHW DIM_1C11 DIM_111C")
BNFwdMode = _make("BNFwdMode", "TRAINING INFERENCE")
PaddingMode = _make("PaddingMode", "REPLICATE REFLECT CONSTANT")
AxisMethod = _make("AxisMethod", "ADD_1 REMOVE")
ArgsortOrder = _make("ArgsortOrder", "ASCENDING DESCENDING")
TopKMode = _make("TopKMode", "KTH_ONLY VALUE_IDX_NOSORT VALUE_IDX_SORTED")
# WarpPerspectiveV1's InterpolationMode, which Resize's ``imode`` uses
InterpolationMode = _make("InterpolationMode", "NEAREST LINEAR AREA CUBIC LANCZOS4")
# WarpPerspectiveV1's BorderMode (WarpPerspective's ``bmode``)
BorderMode = _make("BorderMode", "REPLICATE REFLECT REFLECT_101 WRAP CONSTANT TRANSPARENT ISOLATED")
# ROIAlign's and ROIPooling's Mode
ROIMode = _make("ROIMode", "MAX AVERAGE")
# CondTake: how each mask entry is compared with `val`
CondTakeMode = _make("CondTakeMode", "EQ NEQ LT LEQ GT GEQ")
Conv3DDataType = _make("Conv3DDataType", "FLOAT FLOAT_IO16xC32")
Conv3DFormat = _make("Conv3DFormat", "NCDHW NDHWC")
# ConvolutionV0's Format, which Correlation's ``format`` uses (Format's numbers after NCHW44_DOT differ)
FormatV0 = _make(
    "FormatV0",
    """NCHW NHWC NHWCD4 NCHW4 NCHW8 NCHW32 NCHW88 NCHW44 NCHW44_DOT NCHW_WINOGRAD NCHW88_WINOGRAD
    NCHW44_WINOGRAD NCHW4_NCHW32 NCHW32_NCHW4 NCHW4_NCHW NHWC_NCHW NHWC_NCHW4_IC_SMALL NCHW_NCHW4_IC_SMALL
    CHWN4 NCHW4_NHWC""",
)
# MultiHeadAttn's mask kind, and which optional tensors follow its four inputs
AttnMaskType = _make("AttnMaskType", "NO_MASK DEFAULT_MASK CUDNN_STYLE_MASK USER_DEFINED_MASK")
TensorCombinationType = _make("TensorCombinationType", "NONE ONLY_MASK ONLY_BIASKV ALL")
# CvtColor's Mode (YUV conversions read and write MegEngine's channel order; see semantics/image_kernels.py)
CvtColorMode = _make(
    "CvtColorMode",
    """RGB2GRAY RGB2YUV YUV2RGB GRAY2RGB RGBA2RGB RGBA2BGR RGBA2GRAY RGB2BGR BGR2GRAY BGR2RGB
    YUV2GRAY_NV21 YUV2RGB_NV21 YUV2BGR_NV21 YUV2GRAY_NV12 YUV2RGB_NV12 YUV2BGR_NV12 YUV2GRAY_YV12
    YUV2RGB_YV12 YUV2BGR_YV12 YUV2GRAY_YU12 YUV2RGB_YU12 YUV2BGR_YU12 YCrCb2RGB YCrCb2BGR
    BT601_YUV2RGB_NV21 BT601_YUV2BGR_NV21 BT601_YUV2RGB_NV12 BT601_YUV2BGR_NV12 BT601_YUV2RGB_YV12
    BT601_YUV2BGR_YV12 BT601_YUV2RGB_YU12 BT601_YUV2BGR_YU12""",
)


def number(member: Enum) -> int:
    """MegEngine's number of an enum member."""
    return list(type(member)).index(member)


def from_number(enum: type[StrEnum], value: int) -> StrEnum:
    """The member with MegEngine's number ``value``; a clear error when out of range."""
    members = list(enum)
    if not 0 <= value < len(members):
        raise ValueError(f"{enum.__name__} has no member numbered {value} (0..{len(members) - 1})")
    return members[value]


ALL_ENUMS: tuple[type[StrEnum], ...] = (
    ElemwiseMode,
    ArgsortOrder,
    TopKMode,
    ElemwiseMultiTypeMode,
    ConvMode,
    ConvSparse,
    ComputeMode,
    NonlineMode,
    Format,
    PoolingMode,
    RelayoutFormatMode,
    MatrixMulFormat,
    ReduceMode,
    ReduceDataType,
    BNParamDim,
    BNFwdMode,
    PaddingMode,
    AxisMethod,
    InterpolationMode,
    BorderMode,
    ROIMode,
    CondTakeMode,
    Conv3DDataType,
    Conv3DFormat,
    FormatV0,
    AttnMaskType,
    TensorCombinationType,
    CvtColorMode,
)
