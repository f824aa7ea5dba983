"""Every number xmge writes into a ``.mge`` file is MegEngine 1.13's.

The reference is ``tests/data/megengine_1_13/tables.json``, extracted from MegEngine's own
sources at tag v1.13.4 (``dnn/scripts/opr_param_defs.py``, ``tools/param_defs/
mgb_opr_param_defs.py``, ``src/serialization/impl/schema.fbs`` and ``dtype.fbs``, ...) by
``tests/data/megengine_1_13/extract_tables.py``; nothing in it comes from xmge. Part (a) compares
xmge's tables (``dialects/enums.py``, ``backends/mge/schema.py``) with it; part (b) writes one
operator per mode, checks the raw number in the file and reads the file back.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from xdsl.builder import ImplicitBuilder
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, Block, Region

import compiler as xm
import compiler.functional as F
from backends.mge import schema as S
from backends.mge.container import RawOpr, parse_file
from backends.mge.lower_ops import EXECUTION_POLICY
from backends.mge.reader import read_mge
from backends.mge.writer import write_mge
from compiler import jit
from dialects import enums as E
from dialects import tensor as T
from dialects.dtypes import QuantizedType, tensor_type
from tests.conftest import data_path

with open(data_path("megengine_1_13", "tables.json")) as _f:
    MGE: dict[str, Any] = json.load(_f)
PARAM_DEFS: dict[str, Any] = MGE["params"]


def mge_enum(ref: str) -> dict[str, int]:
    """MegEngine's enum ``Param.Enum`` (as ``opr_param_defs.py`` names it), member -> number."""
    param, enum = ref.split(".")
    return PARAM_DEFS[param]["enums"][enum]


# Which MegEngine enum each xmge enum is. Every enum in dialects/enums.py must be listed.
ENUM_SOURCES: dict[Any, dict[str, int]] = {
    E.ElemwiseMode: mge_enum("Elemwise.Mode"),
    E.ElemwiseMultiTypeMode: mge_enum("ElemwiseMultiType.Mode"),
    E.ConvMode: mge_enum("ConvolutionV0.Mode"),
    E.ConvSparse: mge_enum("ConvolutionV0.Sparse"),
    E.ComputeMode: mge_enum("ConvolutionV1.ComputeMode"),
    E.NonlineMode: mge_enum("ConvBiasV0.NonlineMode"),
    E.Format: mge_enum("Convolution.Format"),
    E.PoolingMode: mge_enum("PoolingV0.Mode"),
    E.RelayoutFormatMode: mge_enum("RelayoutFormatV0.Mode"),
    E.MatrixMulFormat: mge_enum("MatrixMul.Format"),
    E.ReduceMode: mge_enum("Reduce.Mode"),
    E.ReduceDataType: mge_enum("Reduce.DataType"),
    E.BNParamDim: mge_enum("BN.ParamDim"),
    E.BNFwdMode: mge_enum("BN.FwdMode"),
    E.PaddingMode: mge_enum("Padding.PaddingMode"),
    E.AxisMethod: MGE["axis_desc_method"],
    E.InterpolationMode: mge_enum("WarpPerspectiveV1.InterpolationMode"),
    E.ArgsortOrder: mge_enum("Argsort.Order"),
    E.TopKMode: mge_enum("TopK.Mode"),
    E.BorderMode: mge_enum("WarpPerspectiveV1.BorderMode"),
    E.ROIMode: mge_enum("ROIAlignV0.Mode"),
    E.CondTakeMode: mge_enum("CondTake.Mode"),
    E.Conv3DDataType: mge_enum("Convolution3D.DataType"),
    E.Conv3DFormat: mge_enum("Convolution3D.Format"),
    E.FormatV0: mge_enum("ConvolutionV0.Format"),
    E.AttnMaskType: mge_enum("MultiHeadAttn.AttnMaskType"),
    E.TensorCombinationType: mge_enum("MultiHeadAttn.TensorCombinationType"),
    E.CvtColorMode: mge_enum("CvtColor.Mode"),
}

# The xmge enum the writer fills each enum-valued param field from (backends/mge/writer.py).
FIELD_ENUMS: dict[tuple[str, str], Any] = {
    **{
        (conv, field): enum
        for conv in ("Convolution", "ConvBias")
        for field, enum in (
            ("mode", E.ConvMode),
            ("sparse", E.ConvSparse),
            ("format", E.Format),
            ("compute_mode", E.ComputeMode),
        )
    },
    ("ConvBias", "nonlineMode"): E.NonlineMode,
    ("Pooling", "mode"): E.PoolingMode,
    ("Pooling", "format"): E.Format,
    ("AdaptivePooling", "mode"): E.PoolingMode,
    ("AdaptivePooling", "format"): E.Format,
    ("BN", "param_dim"): E.BNParamDim,
    ("BN", "fwd_mode"): E.BNFwdMode,
    ("Elemwise", "mode"): E.ElemwiseMode,
    ("ElemwiseMultiType", "mode"): E.ElemwiseMultiTypeMode,
    ("MatrixMul", "compute_mode"): E.ComputeMode,
    ("MatrixMul", "format"): E.MatrixMulFormat,
    ("Reduce", "mode"): E.ReduceMode,
    ("Reduce", "data_type"): E.ReduceDataType,
    ("RelayoutFormat", "mode"): E.RelayoutFormatMode,
    ("Padding", "padding_mode"): E.PaddingMode,
    ("Resize", "imode"): E.InterpolationMode,
    ("Resize", "format"): E.Format,
    ("GroupNorm", "format"): E.Format,
    ("Argsort", "order"): E.ArgsortOrder,
    ("TopK", "mode"): E.TopKMode,
    ("Convolution3D", "mode"): E.ConvMode,
    ("Convolution3D", "sparse"): E.ConvSparse,
    ("Convolution3D", "data_type"): E.Conv3DDataType,
    ("Convolution3D", "format"): E.Conv3DFormat,
    ("WarpPerspective", "imode"): E.InterpolationMode,
    ("WarpPerspective", "bmode"): E.BorderMode,
    ("WarpPerspective", "format"): E.Format,
    ("ROIAlign", "mode"): E.ROIMode,
    ("ROIAlign", "format"): E.Format,
    ("ROIPooling", "mode"): E.ROIMode,
    ("CondTake", "mode"): E.CondTakeMode,
    ("Correlation", "format"): E.FormatV0,
    ("MultiHeadAttn", "attn_mask_type"): E.AttnMaskType,
    ("MultiHeadAttn", "tensor_combination_type"): E.TensorCombinationType,
    ("WarpAffine", "imode"): E.InterpolationMode,
    ("WarpAffine", "border_mode"): E.BorderMode,
    ("WarpAffine", "format"): E.Format,
    ("Remap", "imode"): E.InterpolationMode,
    ("Remap", "border_type"): E.BorderMode,
    ("Remap", "format"): E.Format,
    ("CvtColor", "mode"): E.CvtColorMode,
}

# param tables MegEngine writes by hand in mgb_cpp_opr.fbs / schema.fbs, not from a pdef
HAND_WRITTEN_PARAMS = {
    "Host2DeviceCopy", "Dimshuffle", "AxisAddRemove", "IndexDescMaskDump", "DType", "NMSKeep"
}  # fmt: skip


def xmge_numbers(enum: Any) -> dict[str, int]:
    return {m.name: E.number(m) for m in enum}


# ----------------------------------------------------------------------------------------------
# (a) xmge's tables against MegEngine's


def test_reference_names_its_megengine_release() -> None:
    assert "MegEngine/MegEngine tag v1.13." in MGE["_source"]


def test_every_xmge_enum_has_a_megengine_reference() -> None:
    assert set(E.ALL_ENUMS) == set(ENUM_SOURCES)


@pytest.mark.parametrize("enum", E.ALL_ENUMS, ids=lambda e: e.__name__)
def test_enum_numbers_are_megengines(enum: Any) -> None:
    assert xmge_numbers(enum) == ENUM_SOURCES[enum]


@pytest.mark.parametrize("enum", E.ALL_ENUMS, ids=lambda e: e.__name__)
def test_from_number_inverts_megengines_numbering(enum: Any) -> None:
    for name, number in ENUM_SOURCES[enum].items():
        assert E.from_number(enum, number) is enum[name]


def test_param_union_tags_are_megengines() -> None:
    tags = MGE["operator_param_tags"]
    # ``DType = 67`` is the serialization DType table (TypeCvt); ``param.DType = 51`` is another one
    got = {name: pdef.tag for name, pdef in S.PARAMS.items()}
    want = {name: tags[name if name == "DType" else f"param.{name}"] for name in S.PARAMS}
    assert got == want


def _mge_default(text: str) -> object:
    """A pdef default (``'1e-4f'``, ``'true'``, ``'18446744073709551615ull'``) as a Python value."""
    if text in ("true", "false"):
        return text == "true"
    for suffix in ("ull", "f"):
        if text.endswith(suffix) and not text.startswith("0x"):
            text = text[: -len(suffix)]
    value = float(text)
    return int(value) if value.is_integer() and "." not in text and "e" not in text else value


PDEF_PARAMS = sorted(set(S.PARAMS) - HAND_WRITTEN_PARAMS)


@pytest.mark.parametrize("name", PDEF_PARAMS)
def test_param_fields_are_megengines_in_slot_order(name: str) -> None:
    """Field names, value types and defaults, in declaration (= FlatBuffers slot) order."""
    mge = PARAM_DEFS[name]["fields"]
    ours = S.PARAMS[name].fields
    assert [(n, fmt) for n, fmt, _ in ours] == [(n, fmt) for n, fmt, _, _ in mge]
    for (field, _, default), (_, _, mge_default, _) in zip(ours, mge, strict=True):
        assert default == pytest.approx(_mge_default(mge_default)), f"param.{name}.{field} default"


def test_every_enum_field_xmge_writes_is_mapped_to_megengines_enum() -> None:
    for name in PDEF_PARAMS:
        for field, _, _, enum_ref in PARAM_DEFS[name]["fields"]:
            if enum_ref is None or (name, field) == ("ExecutionPolicy", "strategy"):
                continue
            assert (name, field) in FIELD_ENUMS, f"param.{name}.{field} ({enum_ref}) has no xmge enum"
            assert xmge_numbers(FIELD_ENUMS[name, field]) == mge_enum(enum_ref), f"param.{name}.{field}"


def test_execution_policy_strategy_is_heuristic() -> None:
    strategy = mge_enum("ExecutionPolicy.Strategy")
    assert EXECUTION_POLICY[1]["strategy"] == strategy["HEURISTIC"]


def test_dtype_codes_are_megengines() -> None:
    assert {name: code for code, name in enumerate(S.DTYPE_FILE_ENUM)} == MGE["dtype_enum"]


def test_optimize_options_bits_and_layout_transforms_are_megengines() -> None:
    from passes.inference.options import OPTIONS

    # MegEngine's C++ field names for the two float16 keywords differ from the Python keywords
    cpp_name = {"io16xc32": "f16_io_f32_comp", "ioc16": "f16_io_comp"}
    bits = {}
    for o in OPTIONS:
        if o.bit is not None:
            short = o.keyword[len("enable_") :]
            bits[cpp_name.get(short, short)] = o.bit
    flags = dict(MGE["optimize_option_bits"])
    flags.pop("weight_preprocess")  # set by MegEngine's C++ API only: no dump keyword
    assert bits == flags
    layouts = {o.layout: o.layout_code for o in OPTIONS if o.layout is not None}
    assert layouts, "the option table names no layout"
    for name, code in layouts.items():
        assert MGE["layout_transform"][name] == code, name


# ----------------------------------------------------------------------------------------------
# (b) one operator per mode: the number in the file is MegEngine's, and it reads back


def _tensor(shape: Sequence[int], dtype: str | Attribute = "float32") -> TensorType:
    return tensor_type(shape, dtype)


def write_one(
    arg_types: Sequence[TensorType], build: Callable[..., T.MgbOp]
) -> tuple[bytes, list[RawOpr], list[T.MgbOp]]:
    """Writes ``build(*args)`` as a one-operator graph (compatibility rewrites off); returns the
    file, its raw operators and the tensor-dialect operators read back from it."""
    block = Block(arg_types=list(arg_types))
    with ImplicitBuilder(block) as args:
        op = build(*args)
        func.ReturnOp(op.results[0])
    fn = func.FuncOp("main", (list(arg_types), [op.results[0].type]), Region(block))
    module = ModuleOp([fn])
    module.verify()
    data = write_mge(module, no_change_graph=True)
    read = [o for o in read_mge(data).walk() if isinstance(o, T.MgbOp)]
    return data, parse_file(data)[0].oprs, read


def raw_param(oprs: list[RawOpr], kind: str, param: str) -> dict[str, Any]:
    (opr,) = [o for o in oprs if o.kind == kind]
    return opr.param(param)


def read_back(ops: list[T.MgbOp], cls: type[T.MgbOp]) -> dict[str, Any]:
    (op,) = [o for o in ops if isinstance(o, cls)]
    return op.params()


@pytest.mark.parametrize("mode", list(E.ElemwiseMode), ids=lambda m: m.name)
def test_elemwise_mode_in_file(mode: Any) -> None:
    x = _tensor((2, 3))
    _, oprs, ops = write_one([x] * T.ELEMWISE_ARITY[mode], lambda *a: T.ElemwiseOp.make(list(a), mode=mode))
    assert raw_param(oprs, "Elemwise", "Elemwise")["mode"] == mge_enum("Elemwise.Mode")[mode.name]
    assert read_back(ops, T.ElemwiseOp)["mode"] is mode


def _multi_type_operands(mode: Any) -> list[TensorType] | None:
    """Operand types the dialect accepts for an ElemwiseMultiType mode (None: no such typing)."""
    arity = T.multi_type_arity(mode)
    candidates = [QuantizedType("qint8", 0.5), "int8", "int16", "int32", "float32"]
    for dtype in candidates:
        types = [_tensor((2, 3), dtype)] * arity
        try:
            T.ElemwiseMultiTypeOp.infer(types, mode=mode)
        except (T.ShapeInferenceError, ValueError, KeyError, NotImplementedError):
            continue
        return types
    return None


MULTI_TYPE_WRITABLE = [m for m in E.ElemwiseMultiTypeMode if _multi_type_operands(m) is not None]


def test_most_multi_type_modes_are_exercised() -> None:
    # every Q-mode and the comparisons at least; a regression in the dialect would shrink this
    assert {m for m in E.ElemwiseMultiTypeMode if m.name.startswith("Q")} <= set(MULTI_TYPE_WRITABLE)


@pytest.mark.parametrize("mode", MULTI_TYPE_WRITABLE, ids=lambda m: m.name)
def test_elemwise_multi_type_mode_in_file(mode: Any) -> None:
    types = _multi_type_operands(mode)
    assert types is not None
    _, oprs, ops = write_one(types, lambda *a: T.ElemwiseMultiTypeOp.make(list(a), mode=mode))
    raw = raw_param(oprs, "ElemwiseMultiType", "ElemwiseMultiType")["mode"]
    assert raw == mge_enum("ElemwiseMultiType.Mode")[mode.name]
    assert read_back(ops, T.ElemwiseMultiTypeOp)["mode"] is mode


@pytest.mark.parametrize("mode", list(E.PoolingMode), ids=lambda m: m.name)
def test_pooling_modes_in_file(mode: Any) -> None:
    x = _tensor((1, 2, 6, 6))
    _, oprs, ops = write_one([x], lambda a: T.PoolingOp.make([a], mode=mode, window=(2, 2), stride=(2, 2)))
    raw = raw_param(oprs, "Pooling", "Pooling")
    assert (raw["mode"], raw["format"]) == (mge_enum("PoolingV0.Mode")[mode.name], 0)
    assert read_back(ops, T.PoolingOp)["mode"] is mode
    _, oprs, ops = write_one([x], lambda a: T.AdaptivePoolingOp.make([a], mode=mode, out_shape=(3, 3)))
    assert (
        raw_param(oprs, "AdaptivePooling", "AdaptivePooling")["mode"] == mge_enum("PoolingV0.Mode")[mode.name]
    )
    assert read_back(ops, T.AdaptivePoolingOp)["mode"] is mode


@pytest.mark.parametrize("nonline", list(E.NonlineMode), ids=lambda m: m.name)
def test_conv_bias_nonlinearity_in_file(nonline: Any) -> None:
    x, w, b = _tensor((1, 4, 5, 5)), _tensor((8, 4, 3, 3)), _tensor((1, 8, 1, 1))
    _, oprs, ops = write_one([x, w, b], lambda *a: T.ConvBiasOp.make(list(a), nonline_mode=nonline))
    raw = raw_param(oprs, "ConvBias", "ConvBias")
    assert raw["nonlineMode"] == mge_enum("ConvBiasV0.NonlineMode")[nonline.name]
    assert read_back(ops, T.ConvBiasOp)["nonline_mode"] is nonline


@pytest.mark.parametrize(
    ("sparse", "filter_shape"), [(E.ConvSparse.DENSE, (8, 4, 3, 3)), (E.ConvSparse.GROUP, (2, 4, 2, 3, 3))]
)
@pytest.mark.parametrize("mode", list(E.ConvMode), ids=lambda m: m.name)
def test_convolution_mode_and_sparse_in_file(mode: Any, sparse: Any, filter_shape: tuple[int, ...]) -> None:
    x, w = _tensor((1, 4, 5, 5)), _tensor(filter_shape)
    _, oprs, ops = write_one([x, w], lambda *a: T.ConvolutionOp.make(list(a), mode=mode, sparse=sparse))
    raw = raw_param(oprs, "Convolution", "Convolution")
    assert (raw["mode"], raw["sparse"], raw["format"], raw["compute_mode"]) == (
        mge_enum("ConvolutionV0.Mode")[mode.name],
        mge_enum("ConvolutionV0.Sparse")[sparse.name],
        mge_enum("Convolution.Format")["NCHW"],
        mge_enum("ConvolutionV1.ComputeMode")["DEFAULT"],
    )
    params = read_back(ops, T.ConvolutionOp)
    assert (params["mode"], params["sparse"]) == (mode, sparse)


@pytest.mark.parametrize("data_type", list(E.ReduceDataType), ids=lambda m: m.name)
@pytest.mark.parametrize("mode", list(E.ReduceMode), ids=lambda m: m.name)
def test_reduce_mode_and_data_type_in_file(mode: Any, data_type: Any) -> None:
    x = _tensor((2, 3, 4))
    try:
        T.ReduceOp.infer([x], mode=mode, axis=1, data_type=data_type)
    except T.ShapeInferenceError:
        pytest.skip(f"the dialect does not build Reduce {mode.name} with {data_type.name} on float32")
    _, oprs, ops = write_one([x], lambda a: T.ReduceOp.make([a], mode=mode, axis=1, data_type=data_type))
    raw = raw_param(oprs, "Reduce", "Reduce")
    assert (raw["mode"], raw["data_type"]) == (
        mge_enum("Reduce.Mode")[mode.name],
        mge_enum("Reduce.DataType")[data_type.name],
    )
    params = read_back(ops, T.ReduceOp)
    assert (params["mode"], params["data_type"]) == (mode, data_type)


@pytest.mark.parametrize("mode", list(E.PaddingMode), ids=lambda m: m.name)
def test_padding_mode_in_file(mode: Any) -> None:
    x = _tensor((1, 2, 4, 4))
    _, oprs, ops = write_one(
        [x], lambda a: T.PaddingOp.make([a], front=(0, 0, 1, 1), back=(0, 0, 1, 1), mode=mode)
    )
    assert raw_param(oprs, "Padding", "Padding")["padding_mode"] == mge_enum("Padding.PaddingMode")[mode.name]
    assert read_back(ops, T.PaddingOp)["mode"] is mode


def _resize_buildable(imode: Any) -> bool:
    try:
        T.ResizeOp.infer([_tensor((1, 2, 4, 4))], imode=imode, out_shape=(8, 8))
    except T.ShapeInferenceError:
        return False
    return True


RESIZE_MODES = [m for m in E.InterpolationMode if _resize_buildable(m)]


def test_resize_modes_exercised() -> None:
    # the rest (AREA, CUBIC, LANCZOS4) the dialect refuses, so xmge never writes them
    assert {E.InterpolationMode.NEAREST, E.InterpolationMode.LINEAR} <= set(RESIZE_MODES)


@pytest.mark.parametrize("imode", RESIZE_MODES, ids=lambda m: m.name)
def test_resize_interpolation_in_file(imode: Any) -> None:
    x = _tensor((1, 2, 4, 4))
    _, oprs, ops = write_one([x], lambda a: T.ResizeOp.make([a], imode=imode, out_shape=(8, 8)))
    raw = raw_param(oprs, "Resize", "Resize")
    assert (raw["imode"], raw["format"]) == (
        mge_enum("WarpPerspectiveV1.InterpolationMode")[imode.name],
        mge_enum("Convolution.Format")["NCHW"],
    )
    assert read_back(ops, T.ResizeOp)["imode"] is imode


def test_batch_norm_param_dim_and_fwd_mode_in_file() -> None:
    x, p = _tensor((1, 3, 4, 4)), _tensor((1, 3, 1, 1))
    _, oprs, ops = write_one([x, p, p, p, p], lambda *a: T.BatchNormOp.make(list(a)))
    raw = raw_param(oprs, "BatchNorm", "BN")
    assert (raw["param_dim"], raw["fwd_mode"]) == (
        mge_enum("BN.ParamDim")["DIM_1C11"],
        mge_enum("BN.FwdMode")["INFERENCE"],
    )
    params = read_back(ops, T.BatchNormOp)
    assert (params["param_dim"], params["fwd_mode"]) == (E.BNParamDim.DIM_1C11, E.BNFwdMode.INFERENCE)


@pytest.mark.parametrize("compute_mode", list(E.ComputeMode), ids=lambda m: m.name)
def test_matrix_mul_compute_mode_in_file(compute_mode: Any) -> None:
    a, b = _tensor((2, 3)), _tensor((3, 4))
    _, oprs, ops = write_one([a, b], lambda *v: T.MatrixMulOp.make(list(v), compute_mode=compute_mode))
    raw = raw_param(oprs, "MatrixMul", "MatrixMul")
    assert (raw["compute_mode"], raw["format"]) == (
        mge_enum("MatrixMulV1.ComputeMode")[compute_mode.name],
        mge_enum("MatrixMul.Format")["DEFAULT"],
    )
    assert read_back(ops, T.MatrixMulOp)["compute_mode"] is compute_mode


@pytest.mark.parametrize("method", list(E.AxisMethod), ids=lambda m: m.name)
def test_axis_add_remove_method_in_file(method: Any) -> None:
    x = _tensor((2, 1, 3))
    axis = 0 if method == E.AxisMethod.ADD_1 else 1
    _, oprs, ops = write_one([x], lambda a: T.AxisAddRemoveOp.make([a], methods=[method], axes=[axis]))
    assert raw_param(oprs, "AxisAddRemove", "AxisAddRemove")["desc"] == (
        (MGE["axis_desc_method"][method.name], axis),
    )
    assert list(read_back(ops, T.AxisAddRemoveOp)["methods"]) == [method]


# xmge dtype -> MegEngine's DTypeEnum member (whose number test_dtype_codes_are_megengines pins)
TYPECVT_TARGETS: list[tuple[str | Attribute, str]] = [
    ("int32", "Int32"),
    ("int16", "Int16"),
    ("int8", "Int8"),
    ("uint8", "Uint8"),
    ("float16", "Float16"),
    (QuantizedType("qint8", 0.25), "QuantizedS8"),
    (QuantizedType("qint32", 0.25), "QuantizedS32"),
    (QuantizedType("quint8", 0.25, 3), "Quantized8Asymm"),
]


@pytest.mark.parametrize(("target", "mge_name"), TYPECVT_TARGETS, ids=[n for _, n in TYPECVT_TARGETS])
def test_typecvt_dtype_in_file(target: str | Attribute, mge_name: str) -> None:
    x, y = _tensor((2, 3)), _tensor((2, 3), target)
    _, oprs, ops = write_one([x], lambda a: T.TypeCvtOp.make([a], [y]))
    raw = raw_param(oprs, "TypeCvt", "DType")["dtype"]
    assert raw.name == mge_name
    assert S.DTYPE_FILE_ENUM.index(raw.name) == MGE["dtype_enum"][mge_name]
    (cvt,) = [o for o in ops if isinstance(o, T.TypeCvtOp)]
    assert cvt.results[0].type == y


# ----------------------------------------------------------------------------------------------
# through the user API: the case (F.maximum dumped as MIN) and the blocked formats


def _traced_dump(fn: Callable[..., Any], *arrays: np.ndarray, **dump: Any) -> list[RawOpr]:
    traced = jit.trace(symbolic=True, capture_as_const=True)(fn)
    traced(*[xm.tensor(a) for a in arrays])
    buf = io.BytesIO()
    traced.dump(buf, **dump)
    return parse_file(buf.getvalue())[0].oprs


@pytest.mark.parametrize(("fn", "mode"), [(F.maximum, "MAX"), (F.minimum, "MIN")], ids=["maximum", "minimum"])
def test_traced_maximum_and_minimum_are_megengines_max_and_min(fn: Callable[..., Any], mode: str) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    oprs = _traced_dump(fn, a, a[::-1].copy(), optimize_for_inference=False)
    modes = [o.param("Elemwise")["mode"] for o in oprs if o.kind == "Elemwise"]
    assert modes == [mge_enum("Elemwise.Mode")[mode]]


@pytest.mark.parametrize(
    ("option", "format_name"), [("enable_nchw44", "NCHW44"), ("enable_nchw88", "NCHW88")]
)
def test_blocked_layout_dumps_write_megengines_format_number(option: str, format_name: str) -> None:
    import compiler.module as M

    conv = M.Conv2d(8, 8, 3, padding=1)
    conv.eval()
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)
    oprs = _traced_dump(lambda d: F.relu(conv(d)), x, **{option: True})
    formats = [o.param("ConvBias")["format"] for o in oprs if o.kind == "ConvBias"]
    assert formats == [mge_enum("Convolution.Format")[format_name]]


def test_relayout_format_modes_in_file() -> None:
    from xdsl.parser import Parser

    from tests.test_layout import ctx
    from tests.test_mge_layouts import RELAYOUTS  # NCHW4, NHWCD4 and CHWN4 relayouts, both ways

    module = ModuleOp([Parser(ctx(), RELAYOUTS).parse_op()])
    data = write_mge(module)
    raw = [o.param("RelayoutFormat")["mode"] for o in parse_file(data)[0].oprs if o.kind == "RelayoutFormat"]
    names = ["NCHW_NCHW4_IC_SMALL", "NCHW_NHWCD4I", "NHWCD4I_NCHW", "NCHW4_CHWN4", "CHWN4_NCHW4"]
    assert raw == [mge_enum("RelayoutFormatV0.Mode")[n] for n in names]
    assert write_mge(read_mge(data)) == data
