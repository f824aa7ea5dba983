"""MegEngine 1.13 ``.mge`` schema facts as data: param tables, dtypes, operator registry and ids.

Everything here comes from ../shared/spec/mge-format.md (parts A.4, A.5, A.10-A.13). Field lists
are in declaration order, so a field's position is its FlatBuffers slot. Enum-valued fields hold
MegEngine numbers; the mapping to ``dialects.enums`` members happens in the reader and writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import xxhash

# ----------------------------------------------------------------------------------------------
# Operator params (union OperatorParam; numbering identical in V1 and V2)

UINT_MAX64 = 2**64 - 1
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class ParamDef:
    """One ``param.X`` table: union tag and (name, struct format, schema default) per slot."""

    name: str
    tag: int
    fields: tuple[tuple[str, str, object], ...] = ()
    # vector/struct fields are handled by name in the reader/writer
    vectors: tuple[str, ...] = field(default=())

    def slot(self, name: str) -> int:
        for i, (n, _, _) in enumerate(self.fields):
            if n == name:
                return i
        raise KeyError(f"param.{self.name} has no field {name}")


_CONV_GEOMETRY: tuple[tuple[str, str, object], ...] = (
    ("pad_h", "I", 0),
    ("pad_w", "I", 0),
    ("stride_h", "I", 1),
    ("stride_w", "I", 1),
    ("dilate_h", "I", 1),
    ("dilate_w", "I", 1),
)


def _conv_fields(with_nonline: bool) -> tuple[tuple[str, str, object], ...]:
    """param.Convolution's slots, or param.ConvBias's (same fields, nonlineMode first, another order)."""
    mode, sparse, fmt = ("mode", "I", 0), ("sparse", "I", 0), ("format", "I", 0)
    compute = ("compute_mode", "I", 0)
    if with_nonline:
        return (("nonlineMode", "I", 0), mode, sparse, fmt, *_CONV_GEOMETRY, compute)
    return (mode, *_CONV_GEOMETRY, sparse, fmt, compute)


PARAMS: dict[str, ParamDef] = {
    p.name: p
    for p in (
        ParamDef("Empty", 1),
        ParamDef("Axis", 2, (("axis", "i", 0),)),
        ParamDef("Convolution", 3, _conv_fields(False)),
        ParamDef("ConvBias", 6, _conv_fields(True)),
        ParamDef(
            "Pooling",
            9,
            (
                ("mode", "I", 0),
                ("pad_h", "I", 0),
                ("pad_w", "I", 0),
                ("stride_h", "I", 2),
                ("stride_w", "I", 2),
                ("window_h", "I", 2),
                ("window_w", "I", 2),
                ("format", "I", 0),
            ),
        ),
        ParamDef(
            "BN",
            11,
            (
                ("param_dim", "I", 0),
                ("fwd_mode", "I", 0),
                ("epsilon", "d", 1e-4),
                ("avg_factor", "d", 1.0),
                ("scale", "f", 1.0),
                ("bias", "f", 0.0),
            ),
        ),
        ParamDef("Elemwise", 17, (("mode", "I", 0),)),
        ParamDef("ElemwiseMultiType", 18, (("mode", "I", 0),)),
        ParamDef("PowC", 19, (("exp", "f", 0.0),)),
        ParamDef(
            "MatrixMul",
            20,
            (
                ("transposeA", "?", False),
                ("transposeB", "?", False),
                ("compute_mode", "I", 0),
                ("format", "I", 0),
            ),
        ),
        ParamDef("Reduce", 23, (("mode", "I", 0), ("axis", "i", INT_MAX), ("data_type", "I", 0))),
        ParamDef("RelayoutFormat", 45, (("mode", "I", 0), ("oc", "I", 0), ("group", "I", 1))),
        ParamDef("OptionalAxisV1", 54, (("axis", "i", 7),)),
        ParamDef("ExecutionPolicy", 55, (("strategy", "I", 1), ("workspace_limit", "Q", UINT_MAX64))),
        ParamDef(
            "Host2DeviceCopy",
            63,
            (
                ("enable_value_infer", "?", True),
                ("dump_default_value", "?", False),
                ("allow_cpu_mem_fwd", "?", True),
            ),
        ),
        ParamDef("Dimshuffle", 64, (("pattern", "vec_i", ()), ("ndim", "I", 0))),
        ParamDef("AxisAddRemove", 65, (("desc", "vec_axisdesc", ()),)),
        ParamDef("IndexDescMaskDump", 66, (("items", "vec_indexdesc", ()),)),
        ParamDef("DType", 67, (("type", "b", 0),)),  # plus the quantization union, see dtype code
        ParamDef("AdaptivePooling", 70, (("mode", "I", 0), ("format", "I", 0))),
        ParamDef(
            "Padding",
            82,
            tuple((f"front_offset_dim{i}", "I", 0) for i in range(7))
            + tuple((f"back_offset_dim{i}", "I", 0) for i in range(7))
            + (("padding_val", "f", 0.0), ("padding_mode", "I", 2)),
        ),
        ParamDef("Softmax", 90, (("axis", "i", -1),)),
        ParamDef("Linspace", 29, (("endpoint", "?", True),)),
        ParamDef("TopK", 44, (("mode", "I", 0),)),
        # mode: EQ NEQ LT LEQ GT GEQ; MegEngine's F.cond_take writes EQ with val 1
        ParamDef("CondTake", 25, (("mode", "I", 0), ("val", "f", 0.0), ("eps", "f", 1e-6))),
        # Resize: imode is WarpPerspectiveV1's InterpolationMode (LINEAR), format Convolution's (NHWC)
        ParamDef("Resize", 40, (("imode", "I", 1), ("format", "I", 1))),
        ParamDef(
            "LayerNorm",
            85,
            (
                ("affine", "?", True),
                ("eps", "f", 1e-5),
                ("normalized_dim", "Q", 1),
                ("normalized_size", "Q", 1),
            ),
        ),
        # InstanceNorm shares GroupNorm's table; format is Convolution's Format (NCHW)
        ParamDef(
            "GroupNorm",
            92,
            (("affine", "?", True), ("eps", "f", 1e-5), ("group", "I", 1), ("format", "I", 0)),
        ),
    )
}
PARAMS_BY_TAG: dict[int, ParamDef] = {p.tag: p for p in PARAMS.values()}

# struct AxisDesc {method: int8 (+3 pad), axis: int32}; struct IndexDescMaskItem {axis int8, 4 bools}
AXIS_DESC_SIZE = 8
INDEX_DESC_SIZE = 5

# ----------------------------------------------------------------------------------------------
# DTypes (dtype.fbs DTypeEnum, a byte in files)

DTYPE_FILE_ENUM: tuple[str, ...] = (
    "Float32",
    "Uint8",
    "Int8",
    "Int16",
    "Int32",
    "IntB1",
    "IntB2",
    "IntB4",
    "Byte",
    "Float16",
    "UintB4",
    "Quantized8Asymm",
    "QuantizedS32",
    "QuantizedS8",
    "Quantized4Asymm",
    "QuantizedS4",
    "QuantizedS16",
    "BFloat16",
    "Bool",
    "Uint16",
    "QuantizedS1",
    "Complex64",
)

# file dtype name -> xmge dtype name (dialects.dtypes); quantized ones carry scale/zero point
DTYPE_TO_XMGE: dict[str, str] = {
    "Float32": "float32",
    "Float16": "float16",
    "Int32": "int32",
    "Int16": "int16",
    "Int8": "int8",
    "Uint8": "uint8",
    "Byte": "uint8",
    "Uint16": "uint16",
    "Bool": "bool",
    "QuantizedS8": "qint8",
    "QuantizedS32": "qint32",
    "Quantized8Asymm": "quint8",
    "QuantizedS4": "qint4",
    "Quantized4Asymm": "quint4",
    "QuantizedS16": "qint16",
}
XMGE_TO_DTYPE: dict[str, str] = {v: k for k, v in DTYPE_TO_XMGE.items() if k != "Byte"}
ASYMMETRIC = {"Quantized8Asymm", "Quantized4Asymm"}
# the union tags (DTypeParam, TensorFormat) follow from their declarations in fbs_schema.py

# ----------------------------------------------------------------------------------------------
# Operator ids (A.5); the operators themselves are the rows of backends/mge/oprs.py

OPR_ID_SEED = 20160701
GRAPH_HASH_SEED = 0x4B4E74B36B5D11


def h_full(name: str) -> int:
    """Persistent id: XXH64 of the name plus its terminating NUL; 0 becomes 1."""
    return xxhash.xxh64_intdigest(name.encode() + b"\0", OPR_ID_SEED) or 1


def h_short(name: str) -> int:
    """Unversioned id: XXH64 of the name without a trailing ``V<digit>``; 0 becomes 1."""
    base = name
    if len(base) > 2 and base[-2] == "V" and base[-1].isdigit():
        base = base[:-2]
    return xxhash.xxh64_intdigest(base.encode(), OPR_ID_SEED) or 1


# ----------------------------------------------------------------------------------------------
# Version (the metadata word's optimize_options bits: passes/inference/options.py)

MGB_VERSION = 101300  # what MegEngine 1.13.0 writes; (major*1000+minor)*100+patch


def mgb_version(major: int = 1, minor: int = 13, patch: int = 0) -> int:
    return (major * 1000 + minor) * 100 + patch
