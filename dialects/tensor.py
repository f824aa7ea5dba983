"""The ``mgb`` dialect: one op per MegEngine operator kind, over plain (NCHW) tensors.

Every op is a :class:`MgbOp`. Its parameters are properties; :meth:`MgbOp.params` reads them as
plain Python values (ints, tuples, floats, enum members) and :meth:`MgbOp.make` builds an op from
such values, so the frontend, the reference interpreter and the ``.mge`` reader and writer all
speak in the same parameter names. ``infer`` computes result types from operand types and
parameters; the verifier, the tracer and the eager frontend share it, so a shape error reads the
same everywhere.

Textual form (one generic syntax for all ops; the elemwise mode is a leading keyword)::

    %y = mgb.convolution %x, %w {padding = array<i64: 1, 1>} : (tensor<...>, tensor<...>) -> tensor<...>
    %z = mgb.elemwise fuse_add_relu %y, %b : (...) -> tensor<...>
    %w = mgb.const #mgb.weight<"9f0c..."> : tensor<8x3x3x3xf32>
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DenseArrayBase,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
    f64,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Dialect, Operation, SpacedOpaqueSyntaxAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.pattern_rewriter import RewritePattern
from xdsl.printer import Printer
from xdsl.traits import ConstantLike, HasCanonicalizationPatternsTrait, Pure
from xdsl.utils.exceptions import VerifyException

from dialects import enums
from dialects.dtypes import DTypeError, QuantizedType, dtype_name, is_float
from dialects.errors import XmgeError
from dialects.syntax import attach_attrs, print_attr_dict
from dialects.values import scalar_attr, scalar_value
from dialects.weights import WeightAttr

# ----------------------------------------------------------------------------------------------
# Enum attributes (numbering lives in dialects.enums)


@irdl_attr_definition
class ElemwiseModeAttr(EnumAttribute[enums.ElemwiseMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.elemwise_mode"


@irdl_attr_definition
class ElemwiseMultiTypeModeAttr(EnumAttribute[enums.ElemwiseMultiTypeMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.elemwise_multi_type_mode"


@irdl_attr_definition
class ConvModeAttr(EnumAttribute[enums.ConvMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.conv_mode"


@irdl_attr_definition
class ConvSparseAttr(EnumAttribute[enums.ConvSparse], SpacedOpaqueSyntaxAttribute):
    name = "mgb.sparse"


@irdl_attr_definition
class ComputeModeAttr(EnumAttribute[enums.ComputeMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.compute_mode"


@irdl_attr_definition
class NonlineModeAttr(EnumAttribute[enums.NonlineMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.nonline"


@irdl_attr_definition
class FormatAttr(EnumAttribute[enums.Format], SpacedOpaqueSyntaxAttribute):
    name = "mgb.format"


@irdl_attr_definition
class PoolingModeAttr(EnumAttribute[enums.PoolingMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.pooling_mode"


@irdl_attr_definition
class MatrixMulFormatAttr(EnumAttribute[enums.MatrixMulFormat], SpacedOpaqueSyntaxAttribute):
    name = "mgb.matmul_format"


@irdl_attr_definition
class ReduceModeAttr(EnumAttribute[enums.ReduceMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.reduce_mode"


@irdl_attr_definition
class ReduceDataTypeAttr(EnumAttribute[enums.ReduceDataType], SpacedOpaqueSyntaxAttribute):
    name = "mgb.reduce_data_type"


@irdl_attr_definition
class BNParamDimAttr(EnumAttribute[enums.BNParamDim], SpacedOpaqueSyntaxAttribute):
    name = "mgb.bn_param_dim"


@irdl_attr_definition
class BNFwdModeAttr(EnumAttribute[enums.BNFwdMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.bn_fwd_mode"


@irdl_attr_definition
class PaddingModeAttr(EnumAttribute[enums.PaddingMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.padding_mode"


@irdl_attr_definition
class AxisMethodAttr(EnumAttribute[enums.AxisMethod], SpacedOpaqueSyntaxAttribute):
    name = "mgb.axis_method"


@irdl_attr_definition
class InterpolationModeAttr(EnumAttribute[enums.InterpolationMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.interp"


@irdl_attr_definition
class BorderModeAttr(EnumAttribute[enums.BorderMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.border"


@irdl_attr_definition
class ROIModeAttr(EnumAttribute[enums.ROIMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.roi_mode"


@irdl_attr_definition
class CvtColorModeAttr(EnumAttribute[enums.CvtColorMode], SpacedOpaqueSyntaxAttribute):
    name = "mgb.cvt_color_mode"


ENUM_ATTRS: dict[type, type[EnumAttribute[Any]]] = {
    cls.enum_type: cls
    for cls in (
        ElemwiseModeAttr,
        ElemwiseMultiTypeModeAttr,
        ConvModeAttr,
        ConvSparseAttr,
        ComputeModeAttr,
        NonlineModeAttr,
        FormatAttr,
        PoolingModeAttr,
        MatrixMulFormatAttr,
        ReduceModeAttr,
        ReduceDataTypeAttr,
        BNParamDimAttr,
        BNFwdModeAttr,
        PaddingModeAttr,
        AxisMethodAttr,
        InterpolationModeAttr,
        BorderModeAttr,
        ROIModeAttr,
        CvtColorModeAttr,
    )
}

# ----------------------------------------------------------------------------------------------
# Parameter values <-> attributes


def to_attr(value: Any) -> Attribute:
    """The property attribute for a Python parameter value."""
    if isinstance(value, Attribute):
        return value
    if type(value) in ENUM_ATTRS:
        return ENUM_ATTRS[type(value)](value)
    scalar = scalar_attr(value, IntegerType(1))
    if scalar is not None:
        return scalar
    if isinstance(value, tuple | list):
        items = list(value)
        if items and all(type(v) in ENUM_ATTRS for v in items):
            return ArrayAttr([to_attr(v) for v in items])
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return DenseArrayBase.from_list(i64, [int(v) for v in items])
    raise TypeError(f"cannot store parameter value {value!r} as an attribute")


def from_attr(attr: Attribute) -> Any:
    """The Python parameter value of a property attribute (inverse of :func:`to_attr`)."""
    if isinstance(attr, EnumAttribute):
        return attr.data
    scalar = scalar_value(attr)
    if scalar is not None:
        return scalar
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    if isinstance(attr, ArrayAttr):
        return tuple(from_attr(a) for a in attr.data)
    return attr


class ShapeInferenceError(XmgeError, ValueError):
    """Operands that an op cannot accept; the message names the op and the problem."""

    def __init__(self, op_name: str, message: str):
        super().__init__(f"{op_name}: {message}")
        self.op_name = op_name


def _shape(t: Attribute) -> tuple[int, ...]:
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


INT32_MAX = 2**31 - 1
"""Largest stride, dilation, padding or window: MegEngine's params hold them as 32-bit integers (and
numpy's strided windows overflow on larger steps)."""


def _ints(v: Any, n: int, what: str, op: str) -> tuple[int, ...]:
    vals = tuple(v) if isinstance(v, tuple | list) else (v,) * n
    if len(vals) != n:
        raise ShapeInferenceError(op, f"{what} needs {n} values, got {vals}")
    return tuple(int(x) for x in vals)


def broadcast_shapes(op: str, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """numpy broadcasting, with an error naming the op and the shapes."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeInferenceError(
                op, "shapes " + ", ".join(str(tuple(s)) for s in shapes) + " cannot be broadcast together"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


# ----------------------------------------------------------------------------------------------
# Base op


class MgbOp(IRDLOperation):
    """Shared construction, parameter access, shape inference, verification and syntax."""

    KEYWORD: ClassVar[str | None] = None  # a property printed as a bare leading keyword
    ACCEPTS_LAYOUTS: ClassVar[bool] = False  # operands may be in blocked layouts (dialects.layout)
    IGNORED_PROPS: ClassVar[tuple[str, ...]] = ("operandSegmentSizes",)
    NO_GRADIENT: ClassVar[str | None] = None
    """Why training has no gradient through this op (its results are indices, or it is for
    inference only); None: differentiable, with its backward rule in ``compiler/autodiff.py``."""

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def make(
        cls,
        operands: Sequence[SSAValue | None],
        result_types: Sequence[Attribute] | None = None,
        **params: Any,
    ) -> MgbOp:
        """Build from operand values and Python parameters; result types default to ``infer``."""
        props = {k: to_attr(v) for k, v in params.items() if v is not None}
        if result_types is None:
            present = [o.type for o in operands if o is not None]
            result_types = cls.infer(present, **cls.params_with_defaults(props))
        return cls._create(list(operands), list(result_types), props)

    @classmethod
    def _create(
        cls, operands: list[SSAValue | None], result_types: list[Attribute], props: dict[str, Attribute]
    ) -> MgbOp:
        return cls.create(
            operands=[o for o in operands if o is not None], result_types=result_types, properties=props
        )

    @classmethod
    def params_with_defaults(cls, props: dict[str, Attribute]) -> dict[str, Any]:
        """Python parameter values for ``props``, with the op's defaults filled in."""
        full: dict[str, Attribute] = {}
        for name, pdef in cls.get_irdl_definition().properties.items():
            default = getattr(pdef, "default_value", None)
            if default is not None:
                full[name] = default
        full.update(props)
        return {k: from_attr(v) for k, v in full.items() if k not in cls.IGNORED_PROPS}

    def params(self) -> dict[str, Any]:
        """The op's properties as Python values (defaults included, also for parsed IR that
        omitted them)."""
        return self.params_with_defaults(dict(self.properties))

    # -- shape inference -----------------------------------------------------------------------
    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        """Result types for these operand types and parameters; ``ShapeInferenceError`` if invalid."""
        raise NotImplementedError

    def verify_(self) -> None:
        _verify_tensor_types(self)
        try:
            expected = self.infer(list(self.operand_types), **self.params())
        except NotImplementedError:
            return
        except ShapeInferenceError as exc:
            raise VerifyException(str(exc)) from exc
        got = list(self.result_types)
        quantized_in = any(isinstance(_type(t).element_type, QuantizedType) for t in self.operand_types)
        if len(expected) != len(got) or not all(
            _result_type_ok(e, g, quantized_in) for e, g in zip(expected, got, strict=True)
        ):
            raise VerifyException(
                f"{self.name}: result types {', '.join(map(str, got))} do not match the inferred "
                f"{', '.join(map(str, expected))}"
            )

    # -- syntax ---------------------------------------------------------------------------------
    def print(self, printer: Printer) -> None:
        props = dict(self.properties)
        for name in self.IGNORED_PROPS:
            props.pop(name, None)
        if self.KEYWORD is not None:
            keyword = props.pop(self.KEYWORD)
            assert isinstance(keyword, EnumAttribute)
            printer.print_string(f" {keyword.data.value}")
        op_def = self.get_irdl_definition()
        for name, pdef in op_def.properties.items():
            if name in props and getattr(pdef, "default_value", None) == props[name]:
                del props[name]
        if self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        print_attr_dict(printer, props, self.attributes)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)

    @classmethod
    def parse(cls, parser: Parser) -> MgbOp:
        props: dict[str, Attribute] = {}
        if cls.KEYWORD is not None:
            enum_attr = ENUM_ATTR_OF_PROP[(cls.name, cls.KEYWORD)]
            props[cls.KEYWORD] = enum_attr(parser.parse_str_enum(enum_attr.enum_type))
        pos = parser.pos
        unresolved = []
        first = parser.parse_optional_unresolved_operand()
        if first is not None:
            unresolved.append(first)
            while parser.parse_optional_punctuation(","):
                unresolved.append(parser.parse_unresolved_operand())
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        fn_type = parser.parse_function_type()
        operands = parser.resolve_operands(unresolved, fn_type.inputs.data, pos)
        declared = cls.get_irdl_definition().properties
        props.update({k: attrs.pop(k) for k in list(attrs) if k in declared})
        return attach_attrs(cls._create(list(operands), list(fn_type.outputs.data), props), attrs)


def _verify_tensor_types(op: IRDLOperation) -> None:
    """Every operand and result is a tensor of a dtype xmge knows (see ``dialects.dtypes``), and
    in a blocked layout only if the op accepts layouts."""
    accepts_layouts = getattr(op, "ACCEPTS_LAYOUTS", False)
    for t in (*op.operand_types, *op.result_types):
        if not isinstance(t, TensorType):
            raise VerifyException(f"{op.name}: operands and results must be tensors, got {t}")
        if not accepts_layouts and getattr(t.encoding, "name", None) == "layout.fmt":
            raise VerifyException(f"{op.name}: takes plain tensors only, got {t}; relayout it first")
        try:
            dtype_name(t.element_type)
        except (KeyError, DTypeError):
            raise VerifyException(f"{op.name}: unsupported element type {t.element_type} in {t}") from None


def _result_type_ok(expected: TensorType, got: Attribute, quantized_in: bool) -> bool:
    """``got`` matches the inferred type; with quantized operands the result may be any quantized
    (or 32-bit accumulator) dtype, since its scale is chosen by the producer, not inferred."""
    if expected == got:
        return True
    if (
        not quantized_in
        or not isinstance(got, TensorType)
        or got.get_shape() != expected.get_shape()
        or got.encoding != expected.encoding
    ):
        return False
    return isinstance(got.element_type, QuantizedType) or got.element_type == IntegerType(32)


class MgbCanonicalization(HasCanonicalizationPatternsTrait):
    """An op's canonicalization patterns (``passes.canonicalize``, imported lazily); xDSL's
    ``canonicalize`` pass finds them through this trait."""

    def get_patterns(self, op: type[Operation]) -> tuple[RewritePattern, ...]:
        from passes.canonicalize import PATTERNS_BY_OP

        return PATTERNS_BY_OP.get(op, ())  # type: ignore[call-overload]

    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        from passes.canonicalize import ALL_PATTERNS

        return ALL_PATTERNS


def _layout() -> Any:
    """``dialects.layout`` (imported lazily: it builds on this module)."""
    from dialects import layout

    return layout


def _type(t: Attribute) -> TensorType:
    if not isinstance(t, TensorType):
        raise ShapeInferenceError("mgb", f"expected a tensor type, got {t}")
    return t


def _same_dtype(op: str, types: Iterable[TensorType], what: str = "operands") -> Attribute:
    elems = {t.element_type for t in types}
    if len(elems) > 1:
        raise ShapeInferenceError(op, f"{what} have different dtypes: {', '.join(map(str, elems))}")
    return elems.pop()


# ----------------------------------------------------------------------------------------------
# Ops


@irdl_op_definition
class ConstOp(MgbOp):
    """ImmutableTensor / SharedDeviceTensor: a weight or constant."""

    name = "mgb.const"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True
    value = prop_def(WeightAttr)
    output = result_def(TensorType)
    traits = traits_def(Pure(), ConstantLike())

    @classmethod
    def from_numpy(cls, array: Any, element_type: Attribute | None = None) -> ConstOp:
        import numpy as np

        from dialects.dtypes import element_type as to_element

        arr = np.asarray(array)
        elem = element_type or to_element(arr.dtype)
        from dialects.dtypes import numpy_dtype

        data = np.ascontiguousarray(arr, dtype=numpy_dtype(elem))
        op = cls.create(
            result_types=[TensorType(elem, list(arr.shape))],
            properties={"value": WeightAttr.from_numpy(data)},
        )
        return op

    def numpy(self) -> Any:
        from dialects.dtypes import numpy_dtype

        t = _type(self.output.type)
        what = f"mgb.const {self.output.name_hint or ''}".strip()
        return self.value.to_numpy(numpy_dtype(t.element_type), tuple(t.get_shape()), what)

    def verify_(self) -> None:
        import numpy as np

        from dialects.dtypes import numpy_dtype

        _verify_tensor_types(self)
        t = _type(self.output.type)
        if self.value.is_elided:
            return
        want = math.prod(t.get_shape()) * numpy_dtype(t.element_type).itemsize
        have = len(self.value.data.data)
        if want != have:
            raise VerifyException(f"mgb.const: {t} needs {want} bytes of data, the weight holds {have}")
        del np

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        print_attr_dict(printer, self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.output.type)

    @classmethod
    def parse(cls, parser: Parser) -> ConstOp:
        start = parser.pos
        value = parser.parse_attribute()
        if not isinstance(value, WeightAttr):
            parser.raise_error("mgb.const expects a #mgb.weight<...> value", start, parser.pos)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        return attach_attrs(cls.create(result_types=[t], properties={"value": value}), attrs)


def _accumulator_elem(op: str, src: TensorType, filt: TensorType) -> Attribute:
    """The default result dtype of a conv or matrix product: the float operands' dtype,
    ``qint32(s_src * s_filter)`` for quantized operands (MegEngine's default; a producer may ask
    for another quantized result type), else the integer operands' dtype."""
    a, b = src.element_type, filt.element_type
    if isinstance(a, QuantizedType) and isinstance(b, QuantizedType):
        import numpy as np

        # a float32 scale, as MegEngine's DType holds (and the .mge file stores) it
        return QuantizedType("qint32", float(np.float32(a.scale_value * b.scale_value)))
    if isinstance(a, QuantizedType) or isinstance(b, QuantizedType):
        raise ShapeInferenceError(op, f"cannot mix quantized and plain operands ({a} and {b})")
    return _same_dtype(op, (src, filt)) if is_float(a) else a


def _conv_output(
    op: str,
    src: TensorType,
    filt: TensorType,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    sparse: Any,
    fmt: Any,
) -> tuple[int, ...]:
    if fmt != enums.Format.NCHW:
        raise NotImplementedError
    s, f = _shape(src), _shape(filt)
    if len(s) != 4:
        raise ShapeInferenceError(op, f"input must be 4-D NCHW, got shape {s}")
    if sparse == enums.ConvSparse.GROUP:
        if len(f) != 5:
            raise ShapeInferenceError(
                op, f"group convolution needs a 5-D weight (G, OC/G, IC/G, FH, FW), got {f}"
            )
        groups, ocpg, icpg, fh, fw = f
        oc = groups * ocpg
    else:
        if len(f) != 4:
            raise ShapeInferenceError(op, f"weight must be 4-D (OC, IC, FH, FW), got shape {f}")
        groups, (oc, icpg, fh, fw) = 1, f
    if s[1] != icpg * groups:
        raise ShapeInferenceError(
            op,
            f"input has {s[1]} channels (shape {s}) but the weight {f} expects {icpg * groups}"
            + (f" ({groups} groups of {icpg})" if groups > 1 else ""),
        )
    if (
        min(stride) < 1
        or min(dilation) < 1
        or min(padding) < 0
        or max(*stride, *dilation, *padding) > INT32_MAX
    ):
        raise ShapeInferenceError(op, f"invalid stride {stride}, dilation {dilation} or padding {padding}")
    out_hw = []
    for i, k in enumerate((fh, fw)):
        extent = s[2 + i] + 2 * padding[i] - dilation[i] * (k - 1) - 1
        if extent < 0:
            raise ShapeInferenceError(
                op, f"kernel {fh}x{fw} (dilation {dilation}) is larger than the padded input {s[2:]}"
            )
        out_hw.append(extent // stride[i] + 1)
    return (s[0], oc, out_hw[0], out_hw[1])


class _ConvBase(MgbOp):
    ACCEPTS_LAYOUTS: ClassVar[bool] = True

    @classmethod
    def _conv_params(cls, params: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
        return (
            _ints(params.get("stride", 1), 2, "stride", cls.name),
            _ints(params.get("padding", 0), 2, "padding", cls.name),
            _ints(params.get("dilation", 1), 2, "dilation", cls.name),
        )


_I64_PAIR_ONE = DenseArrayBase.from_list(i64, [1, 1])
_I64_PAIR_ZERO = DenseArrayBase.from_list(i64, [0, 0])
_I64Array = DenseArrayBase.constr(I64)


@irdl_op_definition
class ConvolutionOp(_ConvBase):
    name = "mgb.convolution"
    src = operand_def(TensorType)
    filter = operand_def(TensorType)
    output = result_def(TensorType)
    stride = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    padding = prop_def(_I64Array, default_value=_I64_PAIR_ZERO)
    dilation = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    mode = prop_def(ConvModeAttr, default_value=ConvModeAttr(enums.ConvMode.CROSS_CORRELATION))
    sparse = prop_def(ConvSparseAttr, default_value=ConvSparseAttr(enums.ConvSparse.DENSE))
    format = prop_def(FormatAttr, default_value=FormatAttr(enums.Format.NCHW))
    compute_mode = prop_def(ComputeModeAttr, default_value=ComputeModeAttr(enums.ComputeMode.DEFAULT))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        if params.get("format", enums.Format.NCHW) != enums.Format.NCHW:
            return _layout().infer_conv(cls, [_type(t) for t in operand_types], params)
        src, filt = (_type(t) for t in operand_types)
        stride, padding, dilation = cls._conv_params(params)
        shape = _conv_output(
            cls.name, src, filt, stride, padding, dilation, params.get("sparse"), params.get("format")
        )
        return [TensorType(_accumulator_elem(cls.name, src, filt), list(shape))]


@irdl_op_definition
class ConvBiasOp(_ConvBase):
    """Convolution + bias (+ z) + nonlinearity, as MegEngine's ConvBias."""

    name = "mgb.conv_bias"
    src = operand_def(TensorType)
    filter = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    z = opt_operand_def(TensorType)
    output = result_def(TensorType)
    stride = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    padding = prop_def(_I64Array, default_value=_I64_PAIR_ZERO)
    dilation = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    mode = prop_def(ConvModeAttr, default_value=ConvModeAttr(enums.ConvMode.CROSS_CORRELATION))
    sparse = prop_def(ConvSparseAttr, default_value=ConvSparseAttr(enums.ConvSparse.DENSE))
    format = prop_def(FormatAttr, default_value=FormatAttr(enums.Format.NCHW))
    compute_mode = prop_def(ComputeModeAttr, default_value=ComputeModeAttr(enums.ComputeMode.DEFAULT))
    nonline_mode = prop_def(NonlineModeAttr, default_value=NonlineModeAttr(enums.NonlineMode.IDENTITY))
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())

    @classmethod
    def _create(
        cls, operands: list[SSAValue | None], result_types: list[Attribute], props: dict[str, Attribute]
    ) -> MgbOp:
        present = [o for o in operands if o is not None]
        if len(present) < 2 or len(present) > 4:
            raise VerifyException(
                f"mgb.conv_bias takes 2 to 4 operands (src, filter, bias, z), got {len(present)}"
            )
        sizes = [1, 1, int(len(present) > 2), int(len(present) > 3)]
        props = {**props, "operandSegmentSizes": DenseArrayBase.from_list(IntegerType(32), sizes)}
        return cls.create(operands=present, result_types=result_types, properties=props)

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        types = [_type(t) for t in operand_types]
        if params.get("format", enums.Format.NCHW) != enums.Format.NCHW:
            return _layout().infer_conv(cls, types, params)
        src, filt = types[0], types[1]
        stride, padding, dilation = cls._conv_params(params)
        shape = _conv_output(
            cls.name, src, filt, stride, padding, dilation, params.get("sparse"), params.get("format")
        )
        if len(types) > 2:
            b = _shape(types[2])
            if b not in ((1, shape[1], 1, 1), ()) and math.prod(b) not in (1,):
                broadcast_shapes(cls.name, [shape, b])
        if len(types) > 3 and _shape(types[3]) != shape:
            raise ShapeInferenceError(cls.name, f"z has shape {_shape(types[3])}, the output is {shape}")
        return [TensorType(_accumulator_elem(cls.name, src, filt), list(shape))]


@irdl_op_definition
class ConvolutionBackwardDataOp(_ConvBase):
    """MegEngine's ConvolutionBackwardData (``F.conv_transpose2d``): the input gradient of the
    convolution whose weight is ``filter``, applied to ``diff``. The filter is the forward conv's,
    (IC, OC, FH, FW) seen from the transposed conv (or (G, IC/G, OC/G, FH, FW)); ``output_padding``
    adds rows/columns at the bottom/right (MegEngine's optional third, output-shape input)."""

    name = "mgb.convolution_backward_data"
    filter = operand_def(TensorType)
    diff = operand_def(TensorType)
    output = result_def(TensorType)
    stride = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    padding = prop_def(_I64Array, default_value=_I64_PAIR_ZERO)
    dilation = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    output_padding = prop_def(_I64Array, default_value=_I64_PAIR_ZERO)
    mode = prop_def(ConvModeAttr, default_value=ConvModeAttr(enums.ConvMode.CROSS_CORRELATION))
    sparse = prop_def(ConvSparseAttr, default_value=ConvSparseAttr(enums.ConvSparse.DENSE))
    compute_mode = prop_def(ComputeModeAttr, default_value=ComputeModeAttr(enums.ComputeMode.DEFAULT))
    traits = traits_def(Pure())
    ACCEPTS_LAYOUTS: ClassVar[bool] = False

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        filt, diff = (_type(t) for t in operand_types)
        stride, padding, dilation = cls._conv_params(params)
        out_pad = _ints(params.get("output_padding", 0), 2, "output_padding", cls.name)
        f, d = _shape(filt), _shape(diff)
        if len(d) != 4:
            raise ShapeInferenceError(cls.name, f"diff must be 4-D NCHW, got shape {d}")
        if params.get("sparse") == enums.ConvSparse.GROUP:
            if len(f) != 5:
                raise ShapeInferenceError(
                    cls.name, f"group filter must be 5-D (G, IC/G, OC/G, FH, FW), got shape {f}"
                )
            groups, icpg, ocpg, fh, fw = f
        else:
            if len(f) != 4:
                raise ShapeInferenceError(cls.name, f"filter must be 4-D (IC, OC, FH, FW), got shape {f}")
            groups, (icpg, ocpg, fh, fw) = 1, f
        if d[1] != groups * icpg:
            raise ShapeInferenceError(
                cls.name, f"diff has {d[1]} channels (shape {d}) but the filter {f} expects {groups * icpg}"
            )
        if (
            min(stride) < 1
            or min(dilation) < 1
            or min(padding) < 0
            or min(out_pad) < 0
            or max(*stride, *dilation, *padding) > INT32_MAX
        ):
            raise ShapeInferenceError(cls.name, f"invalid stride {stride}, dilation {dilation} or padding")
        if out_pad[0] >= stride[0] or out_pad[1] >= stride[1]:
            raise ShapeInferenceError(
                cls.name, f"output_padding {out_pad} must be smaller than the stride {stride}"
            )
        hw = [
            (d[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * ((fh, fw)[i] - 1) + 1 + out_pad[i]
            for i in range(2)
        ]
        if min(hw) < 1:
            raise ShapeInferenceError(cls.name, f"empty output {tuple(hw)} for diff {d} and filter {f}")
        if not is_float(filt.element_type):
            raise ShapeInferenceError(cls.name, f"needs float operands, got {dtype_name(filt.element_type)}")
        elem = _same_dtype(cls.name, (filt, diff))
        return [TensorType(elem, [d[0], groups * ocpg, hw[0], hw[1]])]


# Arity of each elemwise mode (MegEngine's); modes absent here are unary.
_BINARY = {
    "ABS_GRAD ADD FLOOR_DIV MAX MIN MOD MUL POW SIGMOID_GRAD SUB SWITCH_GT0 TANH_GRAD TRUE_DIV "
    "LOG_SUM_EXP LT LEQ EQ SHL SHR FUSE_ADD_RELU FUSE_ADD_SIGMOID FUSE_ADD_TANH FAST_TANH_GRAD RMULH "
    "ATAN2 H_SWISH_GRAD FUSE_ADD_H_SWISH AND OR XOR SILU_GRAD GELU_GRAD NEQ ASINH_GRAD ACOSH_GRAD "
    "ATANH_GRAD PRELU SOFTPLUS_GRAD RELU6_GRAD HSIGMOID_GRAD"
}
_TERNARY = {"COND_LEQ_MOV FUSE_MUL_ADD3 COND_LT_MOV CLIP PRELU_GRAD"}
ELEMWISE_ARITY: dict[Any, int] = {m: 1 for m in enums.ElemwiseMode}
ELEMWISE_ARITY.update({enums.ElemwiseMode[n]: 2 for n in " ".join(_BINARY).split()})
ELEMWISE_ARITY.update({enums.ElemwiseMode[n]: 3 for n in " ".join(_TERNARY).split()})
ELEMWISE_ARITY[enums.ElemwiseMode.FUSE_MUL_ADD4] = 4
ELEMWISE_BOOL_RESULT = {enums.ElemwiseMode[n] for n in "LT LEQ EQ NEQ ISNAN ISINF".split()}


@irdl_op_definition
class ElemwiseOp(MgbOp):
    name = "mgb.elemwise"
    KEYWORD: ClassVar[str | None] = "mode"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True
    mode = prop_def(ElemwiseModeAttr)
    inputs = var_operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        mode = params["mode"]
        types = [_type(t) for t in operand_types]
        op = f"{cls.name} {mode.value}"
        if len(types) != ELEMWISE_ARITY[mode]:
            raise ShapeInferenceError(op, f"takes {ELEMWISE_ARITY[mode]} inputs, got {len(types)}")
        elem = _same_dtype(op, types, "inputs")
        layout = _layout().common_layout(op, types)
        shape = broadcast_shapes(op, [_shape(t) for t in types])
        if mode in ELEMWISE_BOOL_RESULT:
            elem = IntegerType(1)
        return [_layout().with_layout(TensorType(elem, list(shape)), layout, shape)]


def _pool_out(op: str, size: int, window: int, stride: int, pad: int) -> int:
    extent = size + 2 * pad - window
    if extent < 0:
        raise ShapeInferenceError(op, f"window {window} is larger than the padded input {size}+2*{pad}")
    return extent // stride + 1


class _PoolingBase(MgbOp):
    """Pooling and AdaptivePooling: one 4-D NCHW input (or a blocked layout's, which the layout
    dialect infers), the output's channels and batch those of the input; each op says its output
    height and width (:meth:`output_hw`)."""

    @classmethod
    def output_hw(cls, s: tuple[int, ...], params: dict[str, Any]) -> tuple[int, int]:
        raise NotImplementedError

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        if params.get("format", enums.Format.NCHW) != enums.Format.NCHW:
            return _layout().infer_pooling(cls, [src], params)
        s = _shape(src)
        if len(s) != 4:
            raise ShapeInferenceError(cls.name, f"input must be 4-D NCHW, got shape {s}")
        oh, ow = cls.output_hw(s, params)
        return [TensorType(src.element_type, [s[0], s[1], oh, ow])]


@irdl_op_definition
class PoolingOp(_PoolingBase):
    name = "mgb.pooling"
    KEYWORD: ClassVar[str | None] = "mode"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True
    mode = prop_def(PoolingModeAttr)
    src = operand_def(TensorType)
    output = result_def(TensorType)
    window = prop_def(_I64Array)
    stride = prop_def(_I64Array)
    padding = prop_def(_I64Array, default_value=_I64_PAIR_ZERO)
    format = prop_def(FormatAttr, default_value=FormatAttr(enums.Format.NCHW))
    traits = traits_def(Pure())

    @classmethod
    def output_hw(cls, s: tuple[int, ...], params: dict[str, Any]) -> tuple[int, int]:
        window = _ints(params["window"], 2, "window", cls.name)
        stride = _ints(params["stride"], 2, "stride", cls.name)
        padding = _ints(params.get("padding", 0), 2, "padding", cls.name)
        if (
            min(window) < 1
            or min(stride) < 1
            or min(padding) < 0
            or max(*window, *stride, *padding) > INT32_MAX
        ):
            raise ShapeInferenceError(
                cls.name, f"invalid window {window}, stride {stride} or padding {padding}"
            )
        if padding[0] >= window[0] or padding[1] >= window[1]:
            raise ShapeInferenceError(cls.name, f"padding {padding} must be smaller than the window {window}")
        oh = _pool_out(cls.name, s[2], window[0], stride[0], padding[0])
        ow = _pool_out(cls.name, s[3], window[1], stride[1], padding[1])
        return oh, ow


@irdl_op_definition
class AdaptivePoolingOp(_PoolingBase):
    name = "mgb.adaptive_pooling"
    KEYWORD: ClassVar[str | None] = "mode"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True
    mode = prop_def(PoolingModeAttr)
    src = operand_def(TensorType)
    output = result_def(TensorType)
    out_shape = prop_def(_I64Array)
    format = prop_def(FormatAttr, default_value=FormatAttr(enums.Format.NCHW))
    traits = traits_def(Pure())

    @classmethod
    def output_hw(cls, s: tuple[int, ...], params: dict[str, Any]) -> tuple[int, int]:
        oh, ow = _ints(params["out_shape"], 2, "out_shape", cls.name)
        if oh < 1 or ow < 1:
            raise ShapeInferenceError(cls.name, f"invalid output size {(oh, ow)}")
        return oh, ow


_FALSE = IntegerAttr(0, IntegerType(1))


class _MatMulBase(MgbOp):
    """MatrixMul and BatchedMatrixMul: the same operands and parameters, 2-D or batched 3-D."""

    BATCHED: ClassVar[bool] = False
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    output = result_def(TensorType)
    transpose_a = prop_def(IntegerAttr, default_value=_FALSE)
    transpose_b = prop_def(IntegerAttr, default_value=_FALSE)
    compute_mode = prop_def(ComputeModeAttr, default_value=ComputeModeAttr(enums.ComputeMode.DEFAULT))
    format = prop_def(MatrixMulFormatAttr, default_value=MatrixMulFormatAttr(enums.MatrixMulFormat.DEFAULT))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        a, b = (_type(t) for t in operand_types)
        sa, sb = _shape(a), _shape(b)
        nd = 3 if cls.BATCHED else 2
        if len(sa) != nd or len(sb) != nd:
            raise ShapeInferenceError(cls.name, f"operands must be {nd}-D, got shapes {sa} and {sb}")
        if params.get("transpose_a"):
            sa = (*sa[:-2], sa[-1], sa[-2])
        if params.get("transpose_b"):
            sb = (*sb[:-2], sb[-1], sb[-2])
        if sa[-1] != sb[-2]:
            raise ShapeInferenceError(
                cls.name,
                f"inner dimensions differ: {sa} @ {sb} (after transposes) needs {sa[-1]} == {sb[-2]}",
            )
        if cls.BATCHED and sa[0] != sb[0]:
            raise ShapeInferenceError(cls.name, f"batch sizes differ: {sa[0]} and {sb[0]}")
        if is_float(a.element_type):
            elem = _same_dtype(cls.name, (a, b))
        elif isinstance(a.element_type, QuantizedType) or isinstance(b.element_type, QuantizedType):
            elem = _accumulator_elem(cls.name, a, b)
        else:
            elem = IntegerType(32)
        return [TensorType(elem, [*sa[:-1], sb[-1]])]


@irdl_op_definition
class MatrixMulOp(_MatMulBase):
    name = "mgb.matrix_mul"


@irdl_op_definition
class BatchedMatrixMulOp(_MatMulBase):
    name = "mgb.batched_matrix_mul"
    BATCHED: ClassVar[bool] = True


@irdl_op_definition
class ReshapeOp(MgbOp):
    """Reshape to the (static) result shape."""

    name = "mgb.reshape"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure(), MgbCanonicalization())

    def verify_(self) -> None:
        _verify_tensor_types(self)
        src, out = _type(self.src.type), _type(self.output.type)
        if math.prod(_shape(src)) != math.prod(_shape(out)):
            raise VerifyException(f"mgb.reshape: cannot reshape {_shape(src)} into {_shape(out)}")
        if src.element_type != out.element_type:
            raise VerifyException("mgb.reshape: result dtype must equal the input dtype")


@irdl_op_definition
class BroadcastOp(MgbOp):
    """Broadcast to the (static) result shape."""

    name = "mgb.broadcast"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure(), MgbCanonicalization())

    def verify_(self) -> None:
        _verify_tensor_types(self)
        src, out = _shape(self.src.type), _shape(self.output.type)
        try:
            if broadcast_shapes(self.name, [src, out]) != out:
                raise ShapeInferenceError(self.name, "")
        except ShapeInferenceError:
            raise VerifyException(f"mgb.broadcast: cannot broadcast {src} to {out}") from None
        if _type(self.src.type).element_type != _type(self.output.type).element_type:
            raise VerifyException("mgb.broadcast: result dtype must equal the input dtype")


def _verify_shape_operand(op: MgbOp, shape: SSAValue, rank: int) -> None:
    t = _type(shape.type)
    if t.element_type != IntegerType(32) or len(_shape(t)) != 1 or _shape(t)[0] != rank:
        raise VerifyException(f"{op.name}: shape must be an int32 vector of {rank} values, got {t}")


@irdl_op_definition
class GetVarShapeOp(MgbOp):
    """The shape of ``src`` as an int32 vector computed in the graph (MegEngine's GetVarShape): what
    ``x.shape`` gives in a trace with symbolic shapes, so a dump derives its shapes from the input
    shapes it runs with."""

    name = "mgb.get_var_shape"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    NO_GRADIENT: ClassVar[str | None] = "its result is a shape"

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        return [TensorType(IntegerType(32), [len(_shape(src))])]


@irdl_op_definition
class ReshapeToOp(MgbOp):
    """Reshape to the shape held by the int32 vector ``shape``, computed in the graph (MegEngine's
    Reshape with a shape input); the result type is that shape as traced. ``unspec_axis`` >= 0 names
    the axis whose size is inferred from the element count (its entry in ``shape`` is ignored)."""

    name = "mgb.reshape_to"
    src = operand_def(TensorType)
    shape = operand_def(TensorType)
    output = result_def(TensorType)
    unspec_axis = prop_def(IntegerAttr[I64], default_value=IntegerAttr(-1, i64))
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _verify_tensor_types(self)
        src, out = _type(self.src.type), _type(self.output.type)
        if math.prod(_shape(src)) != math.prod(_shape(out)):
            raise VerifyException(f"{self.name}: cannot reshape {_shape(src)} into {_shape(out)}")
        if src.element_type != out.element_type:
            raise VerifyException(f"{self.name}: result dtype must equal the input dtype")
        _verify_shape_operand(self, self.shape, len(_shape(out)))
        axis = self.params()["unspec_axis"]
        if not -1 <= axis < max(1, len(_shape(out))):
            raise VerifyException(f"{self.name}: unspec_axis {axis} is out of range for {_shape(out)}")


@irdl_op_definition
class BroadcastToOp(MgbOp):
    """Broadcast to the shape held by the int32 vector ``shape``, computed in the graph (MegEngine's
    Broadcast with a shape input); the result type is that shape as traced."""

    name = "mgb.broadcast_to"
    src = operand_def(TensorType)
    shape = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _verify_tensor_types(self)
        src, out = _shape(self.src.type), _shape(self.output.type)
        try:
            if broadcast_shapes(self.name, [src, out]) != out:
                raise ShapeInferenceError(self.name, "")
        except ShapeInferenceError:
            raise VerifyException(f"{self.name}: cannot broadcast {src} to {out}") from None
        if _type(self.src.type).element_type != _type(self.output.type).element_type:
            raise VerifyException(f"{self.name}: result dtype must equal the input dtype")
        _verify_shape_operand(self, self.shape, len(out))


@irdl_op_definition
class DimshuffleOp(MgbOp):
    """Transpose; a pattern entry of -1 inserts a new axis of size 1."""

    name = "mgb.dimshuffle"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    pattern = prop_def(_I64Array)
    traits = traits_def(Pure(), MgbCanonicalization())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        s = _shape(src)
        pattern = tuple(params["pattern"])
        used = [p for p in pattern if p != -1]
        if sorted(used) != list(range(len(s))):
            raise ShapeInferenceError(
                cls.name, f"pattern {pattern} is not a permutation of the {len(s)} input axes"
            )
        return [TensorType(src.element_type, [1 if p == -1 else s[p] for p in pattern])]


@irdl_op_definition
class AxisAddRemoveOp(MgbOp):
    """Add (size-1) or remove axes, applied in order: ``methods[i]`` at ``axes[i]``."""

    name = "mgb.axis_add_remove"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    methods = prop_def(ArrayAttr)
    axes = prop_def(_I64Array)
    traits = traits_def(Pure(), MgbCanonicalization())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        shape = list(_shape(src))
        methods, axes = tuple(params["methods"]), tuple(params["axes"])
        if len(methods) != len(axes):
            raise ShapeInferenceError(cls.name, "methods and axes must have the same length")
        for m, a in zip(methods, axes, strict=True):
            if m == enums.AxisMethod.ADD_1:
                if not 0 <= a <= len(shape):
                    raise ShapeInferenceError(cls.name, f"cannot add axis {a} to shape {tuple(shape)}")
                shape.insert(a, 1)
            else:
                if not 0 <= a < len(shape) or shape[a] != 1:
                    raise ShapeInferenceError(cls.name, f"cannot remove axis {a} of shape {tuple(shape)}")
                del shape[a]
        return [TensorType(src.element_type, shape)]


@irdl_op_definition
class ConcatOp(MgbOp):
    name = "mgb.concat"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True
    inputs = var_operand_def(TensorType)
    output = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        types = [_type(t) for t in operand_types]
        if not types:
            raise ShapeInferenceError(cls.name, "needs at least one input")
        axis = params["axis"]
        shapes = [_shape(t) for t in types]
        nd = len(shapes[0])
        if not 0 <= axis < nd:
            raise ShapeInferenceError(cls.name, f"axis {axis} out of range for {nd}-D inputs")
        for s in shapes:
            if len(s) != nd or any(s[i] != shapes[0][i] for i in range(nd) if i != axis):
                raise ShapeInferenceError(
                    cls.name, f"input shapes {', '.join(map(str, shapes))} differ outside axis {axis}"
                )
        elem = _same_dtype(cls.name, types, "inputs")
        layout = _layout().common_layout(cls.name, types)
        if layout is not None and axis in _layout().inner_axes(types[0]):
            raise ShapeInferenceError(
                cls.name, f"cannot concatenate along axis {axis}, inside a block of {types[0]}"
            )
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [_layout().with_layout(TensorType(elem, out), layout, out)]


@irdl_op_definition
class SplitOp(MgbOp):
    name = "mgb.split"
    src = operand_def(TensorType)
    outputs = var_result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    sizes = prop_def(_I64Array)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        s, axis, sizes = _shape(src), params["axis"], tuple(params["sizes"])
        if not 0 <= axis < len(s):
            raise ShapeInferenceError(cls.name, f"axis {axis} out of range for shape {s}")
        if sum(sizes) != s[axis] or min(sizes, default=0) < 0:
            raise ShapeInferenceError(cls.name, f"sizes {sizes} do not add up to dimension {s[axis]} of {s}")
        return [TensorType(src.element_type, [*s[:axis], n, *s[axis + 1 :]]) for n in sizes]


@irdl_op_definition
class SubtensorOp(MgbOp):
    """Static slicing: for each ``axes[i]``, ``starts[i]:stops[i]:steps[i]``; ``drop[i]`` = 1 removes
    that axis (an integer index, taken as a length-1 slice)."""

    name = "mgb.subtensor"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    axes = prop_def(_I64Array)
    starts = prop_def(_I64Array)
    stops = prop_def(_I64Array)
    steps = prop_def(_I64Array)
    drop = prop_def(_I64Array)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        shape = list(_shape(src))
        keys = ("axes", "starts", "stops", "steps", "drop")
        items = list(zip(*(params[k] for k in keys), strict=True))
        if any(len(params[k]) != len(items) for k in keys):
            raise ShapeInferenceError(cls.name, "axes, starts, stops, steps and drop must have equal lengths")
        dropped = []
        for axis, start, stop, step, drop in items:
            if not 0 <= axis < len(shape):
                raise ShapeInferenceError(cls.name, f"axis {axis} out of range for shape {_shape(src)}")
            if step == 0:
                raise ShapeInferenceError(cls.name, "slice step cannot be zero")
            n = len(range(*slice(start, stop, step).indices(shape[axis])))
            if drop:
                if n != 1:
                    raise ShapeInferenceError(
                        cls.name, f"index {start} out of range for axis {axis} of size {shape[axis]}"
                    )
                dropped.append(axis)
            shape[axis] = n
        out = [d for i, d in enumerate(shape) if i not in dropped]
        return [TensorType(src.element_type, out)]


def _slice_shape(op: str, shape: Sequence[int], params: dict[str, Any]) -> list[int]:
    """The shape a static slice (SubtensorOp's parameters) selects from ``shape``."""
    out = list(shape)
    keys = ("axes", "starts", "stops", "steps", "drop")
    items = list(zip(*(params[k] for k in keys), strict=False))
    if any(len(params[k]) != len(items) for k in keys):
        raise ShapeInferenceError(op, "axes, starts, stops, steps and drop must have equal lengths")
    dropped = []
    for axis, start, stop, step, drop in items:
        if not 0 <= axis < len(shape) or axis in dropped:
            raise ShapeInferenceError(op, f"axis {axis} out of range for shape {tuple(shape)}")
        if step == 0:
            raise ShapeInferenceError(op, "slice step cannot be zero")
        n = len(range(*slice(start, stop, step).indices(shape[axis])))
        if drop:
            if n != 1:
                raise ShapeInferenceError(
                    op, f"index {start} out of range for axis {axis} of size {shape[axis]}"
                )
            dropped.append(axis)
        out[axis] = n
    return [d for i, d in enumerate(out) if i not in dropped]


def _modified(op: str, src: TensorType, value: TensorType, want: list[int], what: str) -> list[TensorType]:
    """The result of writing ``value`` over the ``want``-shaped ``what`` of ``src`` (set or incr):
    ``src``'s type, once ``value`` has the selection's shape and ``src``'s dtype."""
    if list(_shape(value)) != want:
        raise ShapeInferenceError(op, f"value of shape {_shape(value)} for a {what} of shape {tuple(want)}")
    _same_dtype(op, (src, value))
    return [TensorType(src.element_type, _shape(src))]


class _ModifySubtensorBase(MgbOp):
    """``src`` with the static slice (SubtensorOp's parameters) replaced by, or incremented by,
    ``value``, whose shape is the slice's; MegEngine's SetSubtensor / IncrSubtensor."""

    src = operand_def(TensorType)
    value = operand_def(TensorType)
    output = result_def(TensorType)
    axes = prop_def(_I64Array)
    starts = prop_def(_I64Array)
    stops = prop_def(_I64Array)
    steps = prop_def(_I64Array)
    drop = prop_def(_I64Array)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, value = (_type(t) for t in operand_types)
        return _modified(cls.name, src, value, _slice_shape(cls.name, _shape(src), params), "slice")


@irdl_op_definition
class SetSubtensorOp(_ModifySubtensorBase):
    name = "mgb.set_subtensor"


@irdl_op_definition
class IncrSubtensorOp(_ModifySubtensorBase):
    name = "mgb.incr_subtensor"


def _vec_index_shape(
    op: str, src: TensorType, indices: Sequence[TensorType], axes: Sequence[int]
) -> list[int]:
    """numpy advanced indexing of ``src`` by int32 ``indices`` on ascending ``axes``: the indexed
    axes become the broadcast index shape, at the first indexed axis when they are consecutive and
    in front otherwise (megdnn IndexingMultiAxisVec::deduce_layout_fwd)."""
    shape = _shape(src)
    axes = list(axes)
    if not axes or len(axes) != len(indices):
        raise ShapeInferenceError(op, f"needs one index per axis, got {len(indices)} indices for axes {axes}")
    if any(not 0 <= a < len(shape) for a in axes) or any(
        b <= a for a, b in zip(axes, axes[1:], strict=False)
    ):
        raise ShapeInferenceError(op, f"axes {axes} must be ascending and within the rank of {shape}")
    for t in indices:
        if t.element_type != IntegerType(32):
            raise ShapeInferenceError(op, f"indices must be int32, got {t}")
    index_shape = list(broadcast_shapes(op, [_shape(t) for t in indices]))
    rest = [d for i, d in enumerate(shape) if i not in axes]
    at = axes[0] if axes == list(range(axes[0], axes[0] + len(axes))) else 0
    return rest[:at] + index_shape + rest[at:]


@irdl_op_definition
class IndexingMultiAxisVecOp(MgbOp):
    """``src[..., idx0, ..., idx1, ...]``: numpy advanced indexing by int32 tensors on ``axes``
    (negative indices count from the end); MegEngine's IndexingMultiAxisVec."""

    name = "mgb.indexing_multi_axis_vec"
    src = operand_def(TensorType)
    indices = var_operand_def(TensorType)
    output = result_def(TensorType)
    axes = prop_def(_I64Array)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, *indices = (_type(t) for t in operand_types)
        return [TensorType(src.element_type, _vec_index_shape(cls.name, src, indices, params["axes"]))]


class _ModifyIndexingBase(MgbOp):
    """``src`` with the elements IndexingMultiAxisVec selects replaced by (set) or incremented by
    (incr) ``value``, whose shape is that selection's."""

    src = operand_def(TensorType)
    value = operand_def(TensorType)
    indices = var_operand_def(TensorType)
    output = result_def(TensorType)
    axes = prop_def(_I64Array)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, value, *indices = (_type(t) for t in operand_types)
        want = _vec_index_shape(cls.name, src, indices, params["axes"])
        return _modified(cls.name, src, value, want, "selection")


@irdl_op_definition
class IndexingSetMultiAxisVecOp(_ModifyIndexingBase):
    name = "mgb.indexing_set_multi_axis_vec"


@irdl_op_definition
class IndexingIncrMultiAxisVecOp(_ModifyIndexingBase):
    name = "mgb.indexing_incr_multi_axis_vec"


@irdl_op_definition
class LinspaceOp(MgbOp):
    """``num`` evenly spaced float32 values from ``start`` to ``stop`` (both one-element tensors,
    ``stop`` included when ``endpoint``); MegEngine's Linspace, whose ``num`` input is folded to a
    constant."""

    name = "mgb.linspace"
    start = operand_def(TensorType)
    stop = operand_def(TensorType)
    output = result_def(TensorType)
    num = prop_def(IntegerAttr[I64])
    endpoint = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(1, IntegerType(1)))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        start, stop = (_type(t) for t in operand_types)
        for what, t in (("start", start), ("stop", stop)):
            if math.prod(_shape(t)) != 1 or not is_float(t.element_type):
                raise ShapeInferenceError(cls.name, f"{what} must be a one-element float tensor, got {t}")
        num = int(params["num"])
        if num < 0:
            raise ShapeInferenceError(cls.name, f"num must not be negative, got {num}")
        return [TensorType(Float32Type(), [num])]


@irdl_op_definition
class ReduceOp(MgbOp):
    """Reduce along ``axis``, keeping it with size 1 (MegEngine's Reduce)."""

    name = "mgb.reduce"
    KEYWORD: ClassVar[str | None] = "mode"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True
    mode = prop_def(ReduceModeAttr)
    src = operand_def(TensorType)
    output = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    data_type = prop_def(ReduceDataTypeAttr, default_value=ReduceDataTypeAttr(enums.ReduceDataType.DEFAULT))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        s, axis = list(_shape(src)), params["axis"]
        if not 0 <= axis < len(s):
            raise ShapeInferenceError(cls.name, f"axis {axis} out of range for shape {tuple(s)}")
        if axis in _layout().blocked_axes(src):
            raise ShapeInferenceError(cls.name, f"cannot reduce axis {axis} of {src}: it is split in blocks")
        s[axis] = 1
        return [TensorType(src.element_type, s, src.encoding)]


@irdl_op_definition
class TypeCvtOp(MgbOp):
    name = "mgb.typecvt"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True
    src = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure(), MgbCanonicalization())

    def verify_(self) -> None:
        _verify_tensor_types(self)
        if _type(self.src.type).encoding != _type(self.output.type).encoding:
            raise VerifyException(
                f"mgb.typecvt: the result layout must be the input's: {self.src.type} -> {self.output.type}"
            )
        if _shape(self.src.type) != _shape(self.output.type):
            raise VerifyException(
                f"mgb.typecvt: result shape {_shape(self.output.type)} must equal the input shape "
                f"{_shape(self.src.type)}"
            )


@irdl_op_definition
class SoftmaxOp(MgbOp):
    name = "mgb.softmax"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        if not is_float(src.element_type):
            raise ShapeInferenceError(cls.name, f"needs a float input, got {dtype_name(src.element_type)}")
        if not 0 <= params["axis"] < len(_shape(src)):
            raise ShapeInferenceError(cls.name, f"axis {params['axis']} out of range for shape {_shape(src)}")
        return [src]


@irdl_op_definition
class BatchNormOp(MgbOp):
    """Inference-mode batch normalisation over (x, weight, bias, mean, variance)."""

    name = "mgb.batch_norm"
    src = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    mean = operand_def(TensorType)
    variance = operand_def(TensorType)
    output = result_def(TensorType)
    epsilon = prop_def(FloatAttr, default_value=FloatAttr(1e-5, f64))
    param_dim = prop_def(BNParamDimAttr, default_value=BNParamDimAttr(enums.BNParamDim.DIM_1C11))
    fwd_mode = prop_def(BNFwdModeAttr, default_value=BNFwdModeAttr(enums.BNFwdMode.INFERENCE))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        types = [_type(t) for t in operand_types]
        s = _shape(types[0])
        if len(s) < 2:
            raise ShapeInferenceError(cls.name, f"input must have a channel axis, got shape {s}")
        want = (1, s[1]) + (1,) * (len(s) - 2)
        for what, t in zip(("weight", "bias", "running_mean", "running_var"), types[1:], strict=True):
            if math.prod(_shape(t)) != s[1]:
                raise ShapeInferenceError(
                    cls.name, f"{what} has shape {_shape(t)}, expected {want} for {s[1]} channels"
                )
        return [types[0]]


@irdl_op_definition
class PaddingOp(MgbOp):
    name = "mgb.padding"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    front = prop_def(_I64Array)
    back = prop_def(_I64Array)
    value = prop_def(FloatAttr, default_value=FloatAttr(0.0, f64))
    mode = prop_def(PaddingModeAttr, default_value=PaddingModeAttr(enums.PaddingMode.CONSTANT))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        s = _shape(src)
        front, back = tuple(params["front"]), tuple(params["back"])
        if len(front) != len(s) or len(back) != len(s):
            raise ShapeInferenceError(cls.name, f"front/back offsets need {len(s)} values each")
        if min(front + back, default=0) < 0:
            raise ShapeInferenceError(cls.name, f"negative padding {front} / {back}")
        return [TensorType(src.element_type, [d + f + b for d, f, b in zip(s, front, back, strict=True)])]


@irdl_op_definition
class ResizeOp(MgbOp):
    """MegEngine's Resize (``F.vision.interpolate`` without ``align_corners``): nearest or
    half-pixel bilinear or bicubic (a = -0.75) resampling of the two spatial axes of an NCHW
    tensor to ``out_shape`` (MegEngine's out-size input, folded to a constant)."""

    name = "mgb.resize"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    out_shape = prop_def(_I64Array)
    imode = prop_def(
        InterpolationModeAttr, default_value=InterpolationModeAttr(enums.InterpolationMode.LINEAR)
    )
    format = prop_def(FormatAttr, default_value=FormatAttr(enums.Format.NCHW))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        s = _shape(src)
        if params.get("format", enums.Format.NCHW) != enums.Format.NCHW:
            raise ShapeInferenceError(cls.name, f"only format nchw is supported, got {params['format']}")
        imode = params.get("imode", enums.InterpolationMode.LINEAR)
        if imode not in (enums.InterpolationMode.NEAREST, enums.InterpolationMode.LINEAR,
                         enums.InterpolationMode.CUBIC):  # fmt: skip
            raise ShapeInferenceError(cls.name, f"interpolation mode {imode.value} is not supported")
        if len(s) != 4:
            raise ShapeInferenceError(cls.name, f"input must be 4-D NCHW, got shape {s}")
        if not is_float(src.element_type):
            raise ShapeInferenceError(cls.name, f"needs a float input, got {dtype_name(src.element_type)}")
        oh, ow = _ints(params["out_shape"], 2, "out_shape", cls.name)
        if oh < 1 or ow < 1:
            raise ShapeInferenceError(cls.name, f"invalid output size {(oh, ow)}")
        return [TensorType(src.element_type, [s[0], s[1], oh, ow])]


@irdl_op_definition
class LayerNormOp(MgbOp):
    """MegEngine's LayerNorm: normalise over the last ``normalized_dim`` axes (``normalized_size``
    elements), then, when ``affine``, scale and shift by (weight, bias) of the normalised shape.
    Results: the output, the mean and the reciprocal standard deviation (float32, one per leading
    position), as MegEngine's operator has."""

    name = "mgb.layer_norm"
    inputs = var_operand_def(TensorType)
    output = result_def(TensorType)
    mean = result_def(TensorType)
    rstd = result_def(TensorType)
    affine = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(1, IntegerType(1)))
    eps = prop_def(FloatAttr, default_value=FloatAttr(1e-5, f64))
    normalized_dim = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    normalized_size = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        types = [_type(t) for t in operand_types]
        affine = bool(params.get("affine", True))
        if len(types) != (3 if affine else 1):
            raise ShapeInferenceError(
                cls.name, f"takes {'(src, weight, bias)' if affine else '(src)'}, got {len(types)} operands"
            )
        src = types[0]
        s = _shape(src)
        nd, size = int(params.get("normalized_dim", 1)), int(params.get("normalized_size", 1))
        if not is_float(src.element_type):
            raise ShapeInferenceError(cls.name, f"needs a float input, got {dtype_name(src.element_type)}")
        if not 0 < nd <= len(s) or math.prod(s[len(s) - nd :]) != size:
            raise ShapeInferenceError(
                cls.name, f"normalized_dim {nd} / normalized_size {size} do not fit the input shape {s}"
            )
        for what, t in zip(("weight", "bias"), types[1:], strict=False):
            if math.prod(_shape(t)) != size:
                raise ShapeInferenceError(
                    cls.name, f"{what} has shape {_shape(t)}, expected {s[len(s) - nd :]}"
                )
        stats = TensorType(Float32Type(), list(s[: len(s) - nd]) or [1])
        return [src, stats, stats]


class _ArgBase(MgbOp):
    NO_GRADIENT: ClassVar[str | None] = "its result is an index"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        s = _shape(src)
        if not 0 <= params["axis"] < len(s):
            raise ShapeInferenceError(cls.name, f"axis {params['axis']} out of range for shape {s}")
        if s[params["axis"]] == 0:
            raise ShapeInferenceError(cls.name, f"axis {params['axis']} of shape {s} is empty")
        out = list(s)
        out[params["axis"]] = 1
        return [TensorType(IntegerType(32), out)]


@irdl_op_definition
class ArgmaxOp(_ArgBase):
    """MegEngine's Argmax: int32 index of the (first) largest value along ``axis``, kept as size 1."""

    name = "mgb.argmax"


@irdl_op_definition
class ArgminOp(_ArgBase):
    """MegEngine's Argmin: int32 index of the (first) smallest value along ``axis``, kept as size 1."""

    name = "mgb.argmin"


@irdl_op_definition
class CumsumOp(MgbOp):
    """MegEngine's Cumsum: running sums along ``axis`` in the input's dtype, from the start (or the
    end with ``reverse``), each including its own element (or not, with ``exclusive``)."""

    name = "mgb.cumsum"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    exclusive = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(0, IntegerType(1)))
    reverse = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(0, IntegerType(1)))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        s, axis = _shape(src), params["axis"]
        if isinstance(src.element_type, QuantizedType) or dtype_name(src.element_type) == "bool":
            raise ShapeInferenceError(
                cls.name, f"needs a float or integer input, got {dtype_name(src.element_type)}"
            )
        if not 0 <= axis < len(s):
            raise ShapeInferenceError(cls.name, f"axis {axis} out of range for shape {s}")
        return [src]


def _sortable_matrix(name: str, src: TensorType) -> tuple[int, int]:
    s = _shape(src)
    if len(s) != 2:
        raise ShapeInferenceError(name, f"sorts the rows of a 2-D tensor, got shape {s}")
    if isinstance(src.element_type, QuantizedType) or dtype_name(src.element_type) == "bool":
        raise ShapeInferenceError(name, f"needs a float or integer input, got {dtype_name(src.element_type)}")
    return s[0], s[1]


@irdl_op_definition
class ArgsortOp(MgbOp):
    """MegEngine's Argsort: each row of a 2-D ``src`` sorted (ascending, or descending with
    ``descending``); results the sorted values and their int32 column indices. Equal values keep
    their order (a stable sort), so the indices are deterministic."""

    name = "mgb.argsort"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    indices = result_def(TensorType)
    descending = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(0, IntegerType(1)))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        rows, cols = _sortable_matrix(cls.name, src)
        return [src, TensorType(IntegerType(32), [rows, cols])]


@irdl_op_definition
class TopKOp(MgbOp):
    """MegEngine's TopK on the rows of a 2-D ``src``: the ``k`` smallest (``k`` > 0) or the ``-k``
    largest (``k`` < 0) values and their int32 indices. ``mode`` 0 (KTH_ONLY) keeps only the k-th
    value and its index (shape ``(rows,)``); 1 (VALUE_IDX_NOSORT) and 2 (VALUE_IDX_SORTED) keep all
    ``|k|`` of them, 2 ordered from the k-th extreme inwards (smallest first for k > 0)."""

    name = "mgb.topk"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    indices = result_def(TensorType)
    k = prop_def(IntegerAttr[I64])
    mode = prop_def(IntegerAttr[I64], default_value=IntegerAttr(2, i64))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        rows, cols = _sortable_matrix(cls.name, src)
        k, mode = int(params["k"]), int(params.get("mode", 2))
        if mode not in (0, 1, 2):
            raise ShapeInferenceError(cls.name, f"mode {mode} is not 0 (kth_only), 1 (no_sort) or 2 (sorted)")
        if k == 0 or abs(k) > cols:
            raise ShapeInferenceError(cls.name, f"k={k} must be non-zero with |k| <= {cols} (the row length)")
        shape = [rows] if mode == 0 else [rows, abs(k)]
        return [TensorType(src.element_type, shape), TensorType(IntegerType(32), shape)]


COND_TAKE_MODES = tuple(mode.name for mode in enums.CondTakeMode)
"""MegEngine's param.CondTake modes, by number: how each mask entry is compared with ``val``."""


@irdl_op_definition
class CondTakeOp(MgbOp):
    """MegEngine's CondTake: the elements of ``data`` whose ``mask`` entry passes ``mode`` against
    ``val`` (EQ: ``|mask - val| < eps``; ``F.cond_take`` uses EQ with val 1 on a bool mask),
    flattened in C order, and their int32 positions in the flattened ``data``. How many depends on
    the mask's values: a trace types the results with the count it saw, a graph read from a file
    with a dynamic size (``?``); the reference interpreter takes the count from the data, and
    ``compile`` refuses the op (static kernels cannot size their outputs by data)."""

    name = "mgb.cond_take"
    data = operand_def(TensorType)
    mask = operand_def(TensorType)
    values = result_def(TensorType)
    indices = result_def(TensorType)
    mode = prop_def(IntegerAttr[I64], default_value=IntegerAttr(0, i64))
    val = prop_def(FloatAttr, default_value=FloatAttr(1.0, f64))
    eps = prop_def(FloatAttr, default_value=FloatAttr(1e-6, f64))
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _verify_tensor_types(self)
        data, mask = _type(self.data.type), _type(self.mask.type)
        values, indices = _type(self.values.type), _type(self.indices.type)
        if _shape(data) != _shape(mask):
            raise VerifyException(f"{self.name}: mask shape {_shape(mask)} differs from data {_shape(data)}")
        if not 0 <= self.params()["mode"] < len(COND_TAKE_MODES):
            mode = self.params()["mode"]
            raise VerifyException(f"{self.name}: mode {mode} is not one of {COND_TAKE_MODES}")
        if len(_shape(values)) != 1 or _shape(values) != _shape(indices):
            raise VerifyException(f"{self.name}: results must be 2 vectors of one size: {values}, {indices}")
        if values.element_type != data.element_type or indices.element_type != IntegerType(32):
            raise VerifyException(f"{self.name}: results must be (data dtype, int32): {values}, {indices}")
        if _shape(values)[0] > max(1, math.prod(_shape(data))) and _shape(values)[0] != -1:
            raise VerifyException(f"{self.name}: takes at most {math.prod(_shape(data))} elements")


@irdl_op_definition
class AssertEqualOp(MgbOp):
    """MegEngine's AssertEqual: checks that ``get`` equals ``expect`` given ``err``, the one-element
    largest error ``|expect - get| / max(min(|expect|, |get|), 1)`` (the smaller of the absolute
    and the relative error) computed by the ops before it; the result is ``expect``. Running it
    where ``err`` exceeds ``maxerr`` (or is NaN) raises AssertEqualError. MegEngine's load_and_run
    test-case files check each output with one; ``verbose`` prints the error when it runs."""

    name = "mgb.assert_equal"
    NO_GRADIENT: ClassVar[str | None] = "a test-case check MegEngine dumps for inference (no backward)"
    expect = operand_def(TensorType)
    get = operand_def(TensorType)
    err = operand_def(TensorType)
    output = result_def(TensorType)
    maxerr = prop_def(FloatAttr, default_value=FloatAttr(1e-4, f64))
    verbose = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(0, IntegerType(1)))

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        expect, get, err = (_type(t) for t in operand_types)
        if _shape(expect) != _shape(get):
            raise ShapeInferenceError(cls.name, f"get {_shape(get)} and expect {_shape(expect)} differ")
        if math.prod(_shape(err)) != 1:
            raise ShapeInferenceError(cls.name, f"err must hold one value, got shape {_shape(err)}")
        return [expect]

    def verify_(self) -> None:
        _verify_tensor_types(self)
        try:
            (want,) = self.infer([self.expect.type, self.get.type, self.err.type])
        except ShapeInferenceError as exc:
            raise VerifyException(str(exc)) from None
        if self.output.type != want:
            raise VerifyException(f"{self.name}: result must be expect's type {want}, got {self.output.type}")


@irdl_op_definition
class SVDOp(MgbOp):
    """MegEngine's SVD of each matrix in the trailing two axes of a float32 ``src`` (..., M, N):
    ``u`` (..., M, K), ``s`` (..., K) descending and non-negative, ``vh`` (..., K, N) with
    K = min(M, N); with ``full_matrices`` ``u`` is (..., M, M) and ``vh`` (..., N, N). A singular
    vector's sign is not unique: the reference kernel makes the largest-magnitude entry of each
    column of ``u`` positive (its row of ``vh`` follows)."""

    name = "mgb.svd"
    src = operand_def(TensorType)
    u = result_def(TensorType)
    s = result_def(TensorType)
    vh = result_def(TensorType)
    full_matrices = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(0, IntegerType(1)))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        shape = _shape(src)
        if len(shape) < 2:
            raise ShapeInferenceError(
                cls.name, f"needs a (..., M, N) input with 2 or more axes, got shape {shape}"
            )
        if not isinstance(src.element_type, Float32Type):
            raise ShapeInferenceError(cls.name, f"needs a float32 input, got {dtype_name(src.element_type)}")
        *lead, m, n = shape
        k = min(m, n)
        um, vn = (m, n) if params.get("full_matrices") else (k, k)
        f32 = src.element_type
        return [TensorType(f32, [*lead, m, um]), TensorType(f32, [*lead, k]), TensorType(f32, [*lead, vn, n])]


@irdl_op_definition
class IndexingOneHotOp(MgbOp):
    """MegEngine's IndexingOneHot: ``src`` picked along ``axis`` at ``index`` (int32, ``src``'s shape
    without ``axis``, each in ``[0, src.shape[axis])``); the axis stays, with size 1."""

    name = "mgb.indexing_one_hot"
    src = operand_def(TensorType)
    index = operand_def(TensorType)
    output = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, index = (_type(t) for t in operand_types)
        s, axis = _shape(src), params["axis"]
        if len(s) < 2:
            raise ShapeInferenceError(cls.name, f"needs an input of 2 or more dimensions, got shape {s}")
        if not 0 <= axis < len(s):
            raise ShapeInferenceError(cls.name, f"axis {axis} out of range for shape {s}")
        if index.element_type != IntegerType(32):
            raise ShapeInferenceError(cls.name, f"index must be int32, got {dtype_name(index.element_type)}")
        want = s[:axis] + s[axis + 1 :]
        if _shape(index) != want:
            raise ShapeInferenceError(cls.name, f"index has shape {_shape(index)}, expected {want} for {s}")
        out = list(s)
        out[axis] = 1
        return [TensorType(src.element_type, out)]


@irdl_op_definition
class ElemwiseMultiTypeOp(MgbOp):
    """MegEngine's ElemwiseMultiType: elementwise ops whose operands and result differ in dtype,
    above all the quantized Q-modes (QADD, QFUSE_ADD_RELU, QMUL, ...): dequantize, apply the float
    op, quantize to the result dtype. The result type states the output dtype (MegEngine's
    ``output_dtype``); inference proposes the first input's dtype for Q-modes."""

    name = "mgb.elemwise_multi_type"
    KEYWORD: ClassVar[str | None] = "mode"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True  # as Elemwise: MegEngine's NCHWxx passes convert it too
    mode = prop_def(ElemwiseMultiTypeModeAttr)
    inputs = var_operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        mode = params["mode"]
        types = [_type(t) for t in operand_types]
        op = f"{cls.name} {mode.value}"
        arity = multi_type_arity(mode)
        if len(types) != arity:
            raise ShapeInferenceError(op, f"takes {arity} inputs, got {len(types)}")
        layout = _layout().common_layout(op, types)
        shape = broadcast_shapes(op, [_shape(t) for t in types])
        elem = multi_type_result_elem(op, mode, [t.element_type for t in types])
        return [_layout().with_layout(TensorType(elem, list(shape)), layout, shape)]


def multi_type_arity(mode: Any) -> int:
    """Number of inputs of an ElemwiseMultiType mode (the Q-modes take their Elemwise mode's)."""
    M = enums.ElemwiseMultiTypeMode
    name = mode.name
    if name.startswith("Q"):
        return ELEMWISE_ARITY[enums.ElemwiseMode[name[1:]]]
    if name in ("EQ", "NEQ", "LT", "LEQ", "MUL_INT16xF32xF32") or mode in (
        M.ROUND_SHR_SATURATE_IXxI8xI8,
        M.ROUND_SHR_SATURATE_IXxI8xI16,
    ):
        return 2
    if name in ("ISNAN", "ISINF"):
        return 1
    return 3


def multi_type_result_elem(op: str, mode: Any, elems: Sequence[Attribute]) -> Attribute:
    M = enums.ElemwiseMultiTypeMode
    name = mode.name
    if name.startswith("Q"):
        if not any(isinstance(e, QuantizedType) for e in elems):
            raise ShapeInferenceError(op, f"needs quantized inputs, got {', '.join(map(str, elems))}")
        return next(e for e in elems if isinstance(e, QuantizedType))
    if name in ("EQ", "NEQ", "LT", "LEQ", "ISNAN", "ISINF"):
        return IntegerType(1)
    if mode == M.FUSE_MUL_ADD3_INT16x32x32x32:
        return IntegerType(32)
    if mode in (M.FUSE_MUL_ADD3_IXxF32xF32xI8, M.ROUND_SHR_SATURATE_IXxI8xI8):
        return IntegerType(8)
    if mode == M.ROUND_SHR_SATURATE_IXxI8xI16:
        return IntegerType(16)
    if mode in (
        M.FUSE_ADD_RMULH_ROUND_SHR_SATURATE_INT16x16x16x8,
        M.FUSE_ADD_RMULH_ROUND_SHR_SATURATE_INT32x32x32x8,
    ):
        return IntegerType(8)
    return elems[0] if elems and is_float(elems[0]) else Float32Type()


# ----------------------------------------------------------------------------------------------
# 3-D convolution and the detection / optical-flow image ops (MegEngine's functional.vision)

_I64_TRIPLE_ONE = DenseArrayBase.from_list(i64, [1, 1, 1])
_I64_TRIPLE_ZERO = DenseArrayBase.from_list(i64, [0, 0, 0])


def _float32_operand(op: str, what: str, t: TensorType) -> None:
    if not isinstance(t.element_type, Float32Type):
        raise ShapeInferenceError(op, f"{what} must be float32, got {dtype_name(t.element_type)}")


@irdl_op_definition
class Convolution3DOp(MgbOp):
    """MegEngine's Convolution3D (NCDHW): ``src`` (N, C, D, H, W), ``filter`` (OC, IC, KD, KH, KW)
    or, with sparse=GROUP, (G, OC/G, IC/G, KD, KH, KW); zero padding on both sides of each axis."""

    name = "mgb.convolution3d"
    src = operand_def(TensorType)
    filter = operand_def(TensorType)
    output = result_def(TensorType)
    stride = prop_def(_I64Array, default_value=_I64_TRIPLE_ONE)
    padding = prop_def(_I64Array, default_value=_I64_TRIPLE_ZERO)
    dilation = prop_def(_I64Array, default_value=_I64_TRIPLE_ONE)
    mode = prop_def(ConvModeAttr, default_value=ConvModeAttr(enums.ConvMode.CROSS_CORRELATION))
    sparse = prop_def(ConvSparseAttr, default_value=ConvSparseAttr(enums.ConvSparse.DENSE))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, filt = (_type(t) for t in operand_types)
        s, f = _shape(src), _shape(filt)
        stride = _ints(params.get("stride", 1), 3, "stride", cls.name)
        padding = _ints(params.get("padding", 0), 3, "padding", cls.name)
        dilation = _ints(params.get("dilation", 1), 3, "dilation", cls.name)
        if len(s) != 5:
            raise ShapeInferenceError(cls.name, f"input must be 5-D NCDHW, got shape {s}")
        if not is_float(src.element_type) or src.element_type != filt.element_type:
            raise ShapeInferenceError(
                cls.name,
                f"needs float input and weight of one dtype, got {dtype_name(src.element_type)} and "
                f"{dtype_name(filt.element_type)}",
            )
        if params.get("sparse", enums.ConvSparse.DENSE) == enums.ConvSparse.GROUP:
            if len(f) != 6:
                raise ShapeInferenceError(
                    cls.name, f"group convolution needs a 6-D weight (G, OC/G, IC/G, KD, KH, KW), got {f}"
                )
            groups, ocpg, icpg, *k = f
        else:
            if len(f) != 5:
                raise ShapeInferenceError(cls.name, f"weight must be 5-D (OC, IC, KD, KH, KW), got shape {f}")
            groups, (ocpg, icpg, *k) = 1, f
        if s[1] != icpg * groups:
            raise ShapeInferenceError(
                cls.name, f"input has {s[1]} channels (shape {s}) but the weight {f} expects {icpg * groups}"
            )
        if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
            raise ShapeInferenceError(
                cls.name, f"invalid stride {stride}, dilation {dilation} or padding {padding}"
            )
        out = []
        for i in range(3):
            extent = s[2 + i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1
            if extent < 0:
                raise ShapeInferenceError(
                    cls.name,
                    f"kernel {tuple(k)} (dilation {dilation}) is larger than the padded input {s[2:]}",
                )
            out.append(extent // stride[i] + 1)
        return [TensorType(src.element_type, [s[0], groups * ocpg, *out])]


@irdl_op_definition
class WarpPerspectiveOp(MgbOp):
    """MegEngine's WarpPerspective (NCHW, bilinear): output pixel (h, w) of image n samples
    ``src[mat_idx[n]]`` (``src[n]`` without ``mat_idx``) at ``(M00 w + M01 h + M02) / d`` across,
    ``(M10 w + M11 h + M12) / d`` down, ``d = M20 w + M21 h + M22``, with ``mat`` (N, 3, 3);
    taps outside the image follow ``bmode`` (CONSTANT: ``border_val``)."""

    name = "mgb.warp_perspective"
    src = operand_def(TensorType)
    mat = operand_def(TensorType)
    mat_idx = opt_operand_def(TensorType)
    output = result_def(TensorType)
    out_shape = prop_def(_I64Array)
    imode = prop_def(
        InterpolationModeAttr, default_value=InterpolationModeAttr(enums.InterpolationMode.LINEAR)
    )
    bmode = prop_def(BorderModeAttr, default_value=BorderModeAttr(enums.BorderMode.REPLICATE))
    format = prop_def(FormatAttr, default_value=FormatAttr(enums.Format.NCHW))
    border_val = prop_def(FloatAttr, default_value=FloatAttr(0.0, f64))
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(Pure())

    @classmethod
    def _create(
        cls, operands: list[SSAValue | None], result_types: list[Attribute], props: dict[str, Attribute]
    ) -> MgbOp:
        present = [o for o in operands if o is not None]
        if len(present) not in (2, 3):
            raise VerifyException(f"{cls.name} takes 2 or 3 operands (src, mat, mat_idx), got {len(present)}")
        sizes = [1, 1, int(len(present) == 3)]
        props = {**props, "operandSegmentSizes": DenseArrayBase.from_list(IntegerType(32), sizes)}
        return cls.create(operands=present, result_types=result_types, properties=props)

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        types = [_type(t) for t in operand_types]
        src, mat = types[0], types[1]
        s, m = _shape(src), _shape(mat)
        if params.get("format", enums.Format.NCHW) != enums.Format.NCHW:
            raise ShapeInferenceError(cls.name, f"only format nchw is supported, got {params['format']}")
        if params.get("imode", enums.InterpolationMode.LINEAR) != enums.InterpolationMode.LINEAR:
            raise ShapeInferenceError(
                cls.name, f"only linear interpolation is supported, got {params['imode']}"
            )
        bmode = params.get("bmode", enums.BorderMode.REPLICATE)
        if bmode in (enums.BorderMode.TRANSPARENT, enums.BorderMode.ISOLATED):
            raise ShapeInferenceError(cls.name, f"border mode {bmode.name} is not supported")
        if len(s) != 4:
            raise ShapeInferenceError(cls.name, f"input must be 4-D NCHW, got shape {s}")
        _float32_operand(cls.name, "input", src)
        _float32_operand(cls.name, "mat", mat)
        if len(m) != 3 or m[1:] != (3, 3):
            raise ShapeInferenceError(cls.name, f"mat must be (N, 3, 3), got shape {m}")
        if len(types) == 3:
            idx = types[2]
            if _shape(idx) != (m[0],) or dtype_name(idx.element_type) != "int32":
                raise ShapeInferenceError(
                    cls.name,
                    f"mat_idx must be int32 of shape ({m[0]},), got {dtype_name(idx.element_type)} "
                    f"{_shape(idx)}",
                )
        elif m[0] != s[0]:
            raise ShapeInferenceError(cls.name, f"{m[0]} matrices for {s[0]} images (give mat_idx)")
        oh, ow = _ints(params["out_shape"], 2, "out_shape", cls.name)
        if oh < 1 or ow < 1:
            raise ShapeInferenceError(cls.name, f"invalid output size {(oh, ow)}")
        return [TensorType(src.element_type, [m[0], s[1], oh, ow])]


def _rois(op: str, src: TensorType, rois: TensorType) -> int:
    s, r = _shape(src), _shape(rois)
    if len(s) != 4:
        raise ShapeInferenceError(op, f"input must be 4-D NCHW, got shape {s}")
    _float32_operand(op, "input", src)
    _float32_operand(op, "rois", rois)
    if len(r) != 2 or r[1] != 5:
        raise ShapeInferenceError(op, f"rois must be (K, 5) rows of (batch index, x1, y1, x2, y2), got {r}")
    return r[0]


@irdl_op_definition
class ROIAlignOp(MgbOp):
    """MegEngine's ROIAlign (NCHW): for each roi row (batch index, x1, y1, x2, y2), scaled by
    ``spatial_scale`` and shifted by ``-offset``, a ``pooled_height`` x ``pooled_width`` grid of
    bins, each the max or average of ``sample_height`` x ``sample_width`` bilinear samples (zero
    outside the image). Results: the pooled values and, for max, the winning sample's index in its
    bin (-1 for average, which MegEngine leaves unset)."""

    name = "mgb.roi_align"
    src = operand_def(TensorType)
    rois = operand_def(TensorType)
    output = result_def(TensorType)
    index = result_def(TensorType)
    mode = prop_def(ROIModeAttr, default_value=ROIModeAttr(enums.ROIMode.AVERAGE))
    spatial_scale = prop_def(FloatAttr, default_value=FloatAttr(1.0, f64))
    offset = prop_def(FloatAttr, default_value=FloatAttr(0.0, f64))
    pooled_shape = prop_def(_I64Array)
    sample_shape = prop_def(_I64Array, default_value=DenseArrayBase.from_list(i64, [2, 2]))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, rois = (_type(t) for t in operand_types)
        k = _rois(cls.name, src, rois)
        ph, pw = _ints(params["pooled_shape"], 2, "pooled_shape", cls.name)
        sh, sw = _ints(params.get("sample_shape", 2), 2, "sample_shape", cls.name)
        if min(ph, pw) < 1 or min(sh, sw) < 1:
            raise ShapeInferenceError(
                cls.name, f"output shape {(ph, pw)} and sample points {(sh, sw)} must be positive"
            )
        shape = [k, _shape(src)[1], ph, pw]
        return [TensorType(src.element_type, shape), TensorType(IntegerType(32), shape)]


@irdl_op_definition
class ROIPoolingOp(MgbOp):
    """MegEngine's ROIPooling (Fast R-CNN, NCHW): each roi row (batch index, x1, y1, x2, y2) is
    scaled by ``scale`` and rounded to whole pixels (a malformed roi counts as 1x1); its
    ``out_shape`` bins (floor/ceil edges, clipped to the image) are max- or average-pooled (0 for an
    empty bin). Results: the pooled values and, for max, the flat (h * W + w) index of each max."""

    name = "mgb.roi_pooling"
    src = operand_def(TensorType)
    rois = operand_def(TensorType)
    output = result_def(TensorType)
    index = result_def(TensorType)
    mode = prop_def(ROIModeAttr, default_value=ROIModeAttr(enums.ROIMode.MAX))
    scale = prop_def(FloatAttr, default_value=FloatAttr(1.0, f64))
    out_shape = prop_def(_I64Array)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, rois = (_type(t) for t in operand_types)
        k = _rois(cls.name, src, rois)
        oh, ow = _ints(params["out_shape"], 2, "out_shape", cls.name)
        if min(oh, ow) < 1:
            raise ShapeInferenceError(cls.name, f"invalid output size {(oh, ow)}")
        shape = [k, _shape(src)[1], oh, ow]
        return [TensorType(src.element_type, shape), TensorType(IntegerType(32), shape)]


@irdl_op_definition
class NMSKeepOp(MgbOp):
    """MegEngine's NMSKeep on ``boxes`` (B, N, 4) of (x1, y1, x2, y2) already sorted by score:
    greedily keeps a box unless its overlap with a kept one exceeds ``iou_thresh`` (inter > thresh *
    union), up to ``max_output``. Results: the kept indices (B, max_output; the tail repeats the
    last kept one) and how many were kept (B,)."""

    name = "mgb.nms_keep"
    boxes = operand_def(TensorType)
    indices = result_def(TensorType)
    count = result_def(TensorType)
    iou_thresh = prop_def(FloatAttr)
    max_output = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    NO_GRADIENT: ClassVar[str | None] = "its results are indices"

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (boxes,) = (_type(t) for t in operand_types)
        b = _shape(boxes)
        if len(b) != 3 or b[2] != 4:
            raise ShapeInferenceError(cls.name, f"boxes must be (B, N, 4), got shape {b}")
        _float32_operand(cls.name, "boxes", boxes)
        keep = int(params["max_output"])
        if keep < 1:
            raise ShapeInferenceError(cls.name, f"max_output must be positive, got {keep}")
        return [TensorType(IntegerType(32), [b[0], keep]), TensorType(IntegerType(32), [b[0]])]


def correlation_output(op: str, s: Sequence[int], params: dict[str, Any]) -> tuple[int, int, int, int]:
    """(N, displacements, OH, OW) of MegEngine's Correlation on an NCHW ``s``."""
    ksize, disp = int(params.get("kernel_size", 1)), int(params.get("max_displacement", 1))
    stride1, stride2 = int(params.get("stride1", 1)), int(params.get("stride2", 1))
    pad = int(params.get("pad_size", 0))
    if ksize < 1 or ksize % 2 == 0 or disp < 0 or stride1 < 1 or stride2 < 1 or pad < 0:
        raise ShapeInferenceError(
            op,
            f"kernel_size {ksize} must be odd and positive, strides ({stride1}, {stride2}) positive, "
            f"max_displacement {disp} and pad_size {pad} non-negative",
        )
    border = disp + (ksize - 1) // 2
    grid = 2 * (disp // stride2) + 1
    oh, ow = (math.ceil((s[i] + 2 * pad - 2 * border) / stride1) for i in (2, 3))
    if oh < 1 or ow < 1:
        raise ShapeInferenceError(op, f"input {tuple(s)} is too small for the border {border} (pad {pad})")
    return s[0], grid * grid, oh, ow


@irdl_op_definition
class CorrelationOp(MgbOp):
    """MegEngine's Correlation (FlowNet, NCHW): for every displacement (dy, dx) on the grid of
    ``stride2`` steps within ``max_displacement``, the mean over a ``kernel_size`` window and all
    channels of ``data1 * data2`` (``|data1 - data2|`` without ``is_multiply``) at positions
    ``stride1`` apart; pixels outside the (``pad_size``-padded) images count as 0."""

    name = "mgb.correlation"
    data1 = operand_def(TensorType)
    data2 = operand_def(TensorType)
    output = result_def(TensorType)
    kernel_size = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    max_displacement = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    stride1 = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    stride2 = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    pad_size = prop_def(IntegerAttr[I64], default_value=IntegerAttr(0, i64))
    is_multiply = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(1, IntegerType(1)))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        a, b = (_type(t) for t in operand_types)
        s = _shape(a)
        if len(s) != 4 or _shape(b) != s:
            raise ShapeInferenceError(
                cls.name, f"needs two 4-D NCHW inputs of one shape, got {s} and {_shape(b)}"
            )
        _float32_operand(cls.name, "data1", a)
        _float32_operand(cls.name, "data2", b)
        return [TensorType(a.element_type, list(correlation_output(cls.name, s, params)))]


_IMAGE_BORDERS = (enums.BorderMode.REPLICATE, enums.BorderMode.REFLECT, enums.BorderMode.REFLECT_101,
                  enums.BorderMode.WRAP, enums.BorderMode.CONSTANT)  # fmt: skip


def _image_border(op: str, bmode: Any) -> None:
    if bmode not in _IMAGE_BORDERS:
        raise ShapeInferenceError(
            op, f"border mode {bmode.name} is not supported (MegEngine's CPU kernels lack it)"
        )


@irdl_op_definition
class WarpAffineOp(MgbOp):
    """MegEngine's WarpAffine: output pixel (h, w) of image n samples ``src[n]`` at
    ``(M00 w + M01 h + M02, M10 w + M11 h + M12)`` (x across, y down) for ``mat`` (N, 2, 3).
    NHWC (float32 or uint8; nearest, linear or cubic) runs MegEngine's fixed-point sampler:
    positions in 1/1024 pixel, weights from a 32-step table; NCHW (float32, linear) samples at
    the float position as WarpPerspective does. Taps outside follow ``bmode``."""

    name = "mgb.warp_affine"
    src = operand_def(TensorType)
    mat = operand_def(TensorType)
    output = result_def(TensorType)
    out_shape = prop_def(_I64Array)
    imode = prop_def(
        InterpolationModeAttr, default_value=InterpolationModeAttr(enums.InterpolationMode.LINEAR)
    )
    bmode = prop_def(BorderModeAttr, default_value=BorderModeAttr(enums.BorderMode.REPLICATE))
    border_val = prop_def(FloatAttr, default_value=FloatAttr(0.0, f64))
    format = prop_def(FormatAttr, default_value=FormatAttr(enums.Format.NHWC))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, mat = (_type(t) for t in operand_types)
        s, m = _shape(src), _shape(mat)
        fmt = params.get("format", enums.Format.NHWC)
        imode = params.get("imode", enums.InterpolationMode.LINEAR)
        _image_border(cls.name, params.get("bmode", enums.BorderMode.REPLICATE))
        if len(s) != 4:
            raise ShapeInferenceError(cls.name, f"input must be 4-D {fmt.name}, got shape {s}")
        _float32_operand(cls.name, "mat", mat)
        if len(m) != 3 or m[1:] != (2, 3) or m[0] != s[0]:
            raise ShapeInferenceError(cls.name, f"mat must be ({s[0]}, 2, 3), got shape {m}")
        oh, ow = _ints(params["out_shape"], 2, "out_shape", cls.name)
        if oh < 1 or ow < 1:
            raise ShapeInferenceError(cls.name, f"invalid output size {(oh, ow)}")
        I = enums.InterpolationMode
        if fmt == enums.Format.NHWC:
            if imode not in (I.NEAREST, I.LINEAR, I.CUBIC):
                raise ShapeInferenceError(
                    cls.name, f"interpolation mode {imode.name} is not supported in NHWC"
                )
            if dtype_name(src.element_type) not in ("float32", "uint8"):
                raise ShapeInferenceError(
                    cls.name, f"NHWC input must be float32 or uint8, got {dtype_name(src.element_type)}"
                )
            return [TensorType(src.element_type, [s[0], oh, ow, s[3]])]
        if fmt != enums.Format.NCHW:
            raise ShapeInferenceError(cls.name, f"only formats nhwc and nchw are supported, got {fmt}")
        if imode != I.LINEAR:
            raise ShapeInferenceError(cls.name, f"NCHW supports linear interpolation only, got {imode.name}")
        _float32_operand(cls.name, "NCHW input", src)
        return [TensorType(src.element_type, [s[0], s[1], oh, ow])]


@irdl_op_definition
class RemapOp(MgbOp):
    """MegEngine's Remap (NCHW): output pixel (h, w) of image n samples ``src[n]`` at
    ``(map_xy[n, h, w, 0], map_xy[n, h, w, 1])`` (x across, y down), nearest (rounded half to
    even) or bilinear; taps outside follow ``bmode`` (CONSTANT: ``scalar``)."""

    name = "mgb.remap"
    src = operand_def(TensorType)
    map_xy = operand_def(TensorType)
    output = result_def(TensorType)
    imode = prop_def(
        InterpolationModeAttr, default_value=InterpolationModeAttr(enums.InterpolationMode.LINEAR)
    )
    bmode = prop_def(BorderModeAttr, default_value=BorderModeAttr(enums.BorderMode.REPLICATE))
    scalar = prop_def(FloatAttr, default_value=FloatAttr(0.0, f64))
    format = prop_def(FormatAttr, default_value=FormatAttr(enums.Format.NCHW))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, mp = (_type(t) for t in operand_types)
        s, m = _shape(src), _shape(mp)
        if params.get("format", enums.Format.NCHW) != enums.Format.NCHW:
            raise ShapeInferenceError(cls.name, f"only format nchw is supported, got {params['format']}")
        imode = params.get("imode", enums.InterpolationMode.LINEAR)
        if imode not in (enums.InterpolationMode.NEAREST, enums.InterpolationMode.LINEAR):
            raise ShapeInferenceError(cls.name, f"interpolation mode {imode.name} is not supported")
        _image_border(cls.name, params.get("bmode", enums.BorderMode.REPLICATE))
        if len(s) != 4:
            raise ShapeInferenceError(cls.name, f"input must be 4-D NCHW, got shape {s}")
        if dtype_name(src.element_type) not in ("float32", "uint8"):
            raise ShapeInferenceError(
                cls.name, f"input must be float32 or uint8, got {dtype_name(src.element_type)}"
            )
        _float32_operand(cls.name, "map_xy", mp)
        if len(m) != 4 or m[3] != 2 or m[0] != s[0]:
            raise ShapeInferenceError(cls.name, f"map_xy must be ({s[0]}, OH, OW, 2), got shape {m}")
        return [TensorType(src.element_type, [s[0], s[1], m[1], m[2]])]


# CvtColor modes xmge implements, by input channels and output channels
CVT_COLOR_CHANNELS: dict[Any, tuple[int, int]] = {
    enums.CvtColorMode.RGB2GRAY: (3, 1), enums.CvtColorMode.BGR2GRAY: (3, 1),
    enums.CvtColorMode.RGB2YUV: (3, 3), enums.CvtColorMode.YUV2RGB: (3, 3),
    enums.CvtColorMode.GRAY2RGB: (1, 3), enums.CvtColorMode.RGBA2RGB: (4, 3),
    enums.CvtColorMode.RGBA2BGR: (4, 3), enums.CvtColorMode.RGBA2GRAY: (4, 1),
    enums.CvtColorMode.RGB2BGR: (3, 3), enums.CvtColorMode.BGR2RGB: (3, 3),
}  # fmt: skip
# the modes MegEngine's CPU kernels take float32 images in; the others are uint8 only
CVT_COLOR_FLOAT = frozenset(
    (enums.CvtColorMode.RGB2GRAY, enums.CvtColorMode.BGR2GRAY, enums.CvtColorMode.RGB2YUV,
     enums.CvtColorMode.YUV2RGB, enums.CvtColorMode.GRAY2RGB)
)  # fmt: skip


@irdl_op_definition
class CvtColorOp(MgbOp):
    """MegEngine's CvtColor on NHWC images: a per-pixel colour-space conversion (``mode``),
    float32 or uint8 (uint8 in MegEngine's 14-bit fixed point)."""

    name = "mgb.cvt_color"
    NO_GRADIENT: ClassVar[str | None] = "MegEngine's CvtColor has no backward (image preprocessing)"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    mode = prop_def(CvtColorModeAttr, default_value=CvtColorModeAttr(enums.CvtColorMode.RGB2GRAY))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = (_type(t) for t in operand_types)
        s = _shape(src)
        mode = params.get("mode", enums.CvtColorMode.RGB2GRAY)
        if mode not in CVT_COLOR_CHANNELS:
            raise ShapeInferenceError(cls.name, f"mode {mode.name} is not supported by xmge")
        dt = dtype_name(src.element_type)
        if dt not in ("float32", "uint8") or (dt == "float32" and mode not in CVT_COLOR_FLOAT):
            raise ShapeInferenceError(cls.name, f"mode {mode.name} does not take {dt} images")
        cin, cout = CVT_COLOR_CHANNELS[mode]
        if len(s) != 4 or s[3] != cin:
            raise ShapeInferenceError(
                cls.name, f"mode {mode.name} needs NHWC images of {cin} channels, got {s}"
            )
        return [TensorType(src.element_type, [*s[:3], cout])]


@irdl_op_definition
class DeformableConvOp(MgbOp):
    """MegEngine's DeformableConv (DCNv2, NCHW): a convolution whose tap (fh, fw) at output
    (oh, ow) reads the input bilinearly (zero outside) at its regular position shifted by
    ``offset`` (N, 2 * DG * FH * FW, OH, OW; (dy, dx) pairs per deformable group and tap) and
    scaled by ``mask`` (N, DG * FH * FW, OH, OW); the DG deformable groups split the input
    channels. Filter as ConvolutionOp's (GROUP: (G, OC/G, IC/G, FH, FW))."""

    name = "mgb.deformable_conv"
    src = operand_def(TensorType)
    filter = operand_def(TensorType)
    offset = operand_def(TensorType)
    mask = operand_def(TensorType)
    output = result_def(TensorType)
    stride = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    padding = prop_def(_I64Array, default_value=_I64_PAIR_ZERO)
    dilation = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    mode = prop_def(ConvModeAttr, default_value=ConvModeAttr(enums.ConvMode.CROSS_CORRELATION))
    sparse = prop_def(ConvSparseAttr, default_value=ConvSparseAttr(enums.ConvSparse.DENSE))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, filt, off, mask = (_type(t) for t in operand_types)
        for what, t in (("input", src), ("filter", filt), ("offset", off), ("mask", mask)):
            _float32_operand(cls.name, what, t)
        if params.get("mode", enums.ConvMode.CROSS_CORRELATION) != enums.ConvMode.CROSS_CORRELATION:
            raise ShapeInferenceError(cls.name, "only mode cross_correlation is supported")
        stride = _ints(params.get("stride", 1), 2, "stride", cls.name)
        padding = _ints(params.get("padding", 0), 2, "padding", cls.name)
        dilation = _ints(params.get("dilation", 1), 2, "dilation", cls.name)
        sparse = params.get("sparse", enums.ConvSparse.DENSE)
        fmt = enums.Format.NCHW
        n, oc, oh, ow = _conv_output(cls.name, src, filt, stride, padding, dilation, sparse, fmt)
        fh, fw = _shape(filt)[-2:]
        o, m = _shape(off), _shape(mask)
        if len(o) != 4 or o[0] != n or o[2:] != (oh, ow) or o[1] % (2 * fh * fw) or o[1] == 0:
            raise ShapeInferenceError(
                cls.name, f"offset must be ({n}, 2 * deformable groups * {fh * fw}, {oh}, {ow}), got {o}"
            )
        dg = o[1] // (2 * fh * fw)
        if m != (n, dg * fh * fw, oh, ow):
            raise ShapeInferenceError(cls.name, f"mask must be {(n, dg * fh * fw, oh, ow)}, got {m}")
        if _shape(src)[1] % dg:
            raise ShapeInferenceError(
                cls.name, f"{_shape(src)[1]} input channels do not split into {dg} deformable groups"
            )
        return [TensorType(src.element_type, [n, oc, oh, ow])]


@irdl_op_definition
class RegionRestrictedConvOp(MgbOp):
    """MegEngine's RegionRestrictedConvolution (NCHW, grouped filter (G, OC/G, IC/G, FH, FW)): a
    convolution in which tap (ih, iw) of output (oh, ow) counts only where the input region id
    ``rin[n, ih, iw]`` equals the output's ``rout[n, oh, ow]`` (padding counts nowhere); ``rin``
    (N, IH, IW) and ``rout`` (N, OH, OW) are int32 or uint8."""

    name = "mgb.region_restricted_conv"
    src = operand_def(TensorType)
    filter = operand_def(TensorType)
    rin = operand_def(TensorType)
    rout = operand_def(TensorType)
    output = result_def(TensorType)
    stride = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    padding = prop_def(_I64Array, default_value=_I64_PAIR_ZERO)
    dilation = prop_def(_I64Array, default_value=_I64_PAIR_ONE)
    mode = prop_def(ConvModeAttr, default_value=ConvModeAttr(enums.ConvMode.CROSS_CORRELATION))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, filt, rin, rout = (_type(t) for t in operand_types)
        _float32_operand(cls.name, "input", src)
        _float32_operand(cls.name, "filter", filt)
        if params.get("mode", enums.ConvMode.CROSS_CORRELATION) != enums.ConvMode.CROSS_CORRELATION:
            raise ShapeInferenceError(cls.name, "only mode cross_correlation is supported")
        stride = _ints(params.get("stride", 1), 2, "stride", cls.name)
        padding = _ints(params.get("padding", 0), 2, "padding", cls.name)
        dilation = _ints(params.get("dilation", 1), 2, "dilation", cls.name)
        group = enums.ConvSparse.GROUP
        n, oc, oh, ow = _conv_output(cls.name, src, filt, stride, padding, dilation, group, enums.Format.NCHW)
        kinds = {dtype_name(rin.element_type), dtype_name(rout.element_type)}
        if len(kinds) != 1 or not kinds <= {"int32", "uint8"}:
            raise ShapeInferenceError(
                cls.name, f"rin and rout must both be int32 or both uint8, got {sorted(kinds)}"
            )
        s = _shape(src)
        if _shape(rin) != (n, s[2], s[3]) or _shape(rout) != (n, oh, ow):
            raise ShapeInferenceError(
                cls.name,
                f"rin must be {(n, s[2], s[3])} and rout {(n, oh, ow)}, got {_shape(rin)} and {_shape(rout)}",
            )
        return [TensorType(src.element_type, [n, oc, oh, ow])]


@irdl_op_definition
class DeformablePSROIPoolingOp(MgbOp):
    """MegEngine's DeformablePSROIPooling (NCHW): for each roi row (batch index, x1, y1, x2, y2)
    (rounded to pixels, scaled by ``spatial_scale``), ``pooled_h`` x ``pooled_w`` bins, each the
    mean of up to ``sample_per_part``^2 bilinear samples, the bin moved (unless ``no_trans``) by
    ``trans_std`` x roi size x the roi's row of ``trans`` (R, 2, pooled_h, pooled_w) read on a
    ``part_size`` grid. Results: the pooled values (K, C, PH, PW) and each bin's sample count."""

    name = "mgb.deformable_psroi_pooling"
    src = operand_def(TensorType)
    rois = operand_def(TensorType)
    trans = operand_def(TensorType)
    output = result_def(TensorType)
    count = result_def(TensorType)
    no_trans = prop_def(IntegerAttr[IntegerType], default_value=IntegerAttr(1, IntegerType(1)))
    spatial_scale = prop_def(FloatAttr, default_value=FloatAttr(1.0, f64))
    trans_std = prop_def(FloatAttr, default_value=FloatAttr(1.0, f64))
    pooled_h = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    pooled_w = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    part_size = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    sample_per_part = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        src, rois, trans = (_type(t) for t in operand_types)
        k = _rois(cls.name, src, rois)
        _float32_operand(cls.name, "trans", trans)
        ph, pw = int(params.get("pooled_h", 1)), int(params.get("pooled_w", 1))
        part, spp = int(params.get("part_size", 1)), int(params.get("sample_per_part", 1))
        if min(ph, pw, part, spp) < 1:
            raise ShapeInferenceError(
                cls.name, f"pooled size {(ph, pw)}, part_size {part}, sample_per_part {spp} must be positive"
            )
        t = _shape(trans)
        if len(t) != 4 or t[1:] != (2, ph, pw):
            raise ShapeInferenceError(cls.name, f"trans must be (R, 2, {ph}, {pw}), got {t}")
        if not params.get("no_trans", True) and t[0] < k:
            raise ShapeInferenceError(cls.name, f"trans has {t[0]} rows for {k} rois (one per roi)")
        if part * part > ph * pw:
            # MegEngine reads the part grid from the (2, PH, PW) rows: beyond them it reads other memory
            raise ShapeInferenceError(cls.name, f"part_size {part} needs part_size^2 <= {ph} * {pw}")
        s = _shape(src)
        out = TensorType(src.element_type, [k, s[1], ph, pw])
        return [out, out]


# (op name, keyword property) -> the enum attribute class printed as that keyword
ENUM_ATTR_OF_PROP: dict[tuple[str, str], type[EnumAttribute[Any]]] = {
    ("mgb.elemwise", "mode"): ElemwiseModeAttr,
    ("mgb.elemwise_multi_type", "mode"): ElemwiseMultiTypeModeAttr,
    ("mgb.pooling", "mode"): PoolingModeAttr,
    ("mgb.adaptive_pooling", "mode"): PoolingModeAttr,
    ("mgb.reduce", "mode"): ReduceModeAttr,
}

TENSOR_OPS: tuple[type[MgbOp], ...] = (
    ConstOp,
    ConvolutionOp,
    ConvBiasOp,
    ElemwiseOp,
    ElemwiseMultiTypeOp,
    PoolingOp,
    AdaptivePoolingOp,
    MatrixMulOp,
    BatchedMatrixMulOp,
    ReshapeOp,
    BroadcastOp,
    DimshuffleOp,
    AxisAddRemoveOp,
    ConcatOp,
    SplitOp,
    SubtensorOp,
    ReduceOp,
    TypeCvtOp,
    SoftmaxOp,
    BatchNormOp,
    PaddingOp,
    ConvolutionBackwardDataOp,
    ResizeOp,
    LayerNormOp,
    ArgmaxOp,
    ArgminOp,
    SetSubtensorOp,
    IncrSubtensorOp,
    IndexingMultiAxisVecOp,
    IndexingSetMultiAxisVecOp,
    IndexingIncrMultiAxisVecOp,
    LinspaceOp,
    CumsumOp,
    IndexingOneHotOp,
    ArgsortOp,
    TopKOp,
    SVDOp,
    Convolution3DOp,
    WarpPerspectiveOp,
    ROIAlignOp,
    ROIPoolingOp,
    NMSKeepOp,
    CorrelationOp,
    WarpAffineOp,
    RemapOp,
    CvtColorOp,
    DeformableConvOp,
    RegionRestrictedConvOp,
    DeformablePSROIPoolingOp,
    GetVarShapeOp,
    ReshapeToOp,
    BroadcastToOp,
    CondTakeOp,
    AssertEqualOp,
)

Mgb = Dialect(
    "mgb",
    list(TENSOR_OPS),
    [*ENUM_ATTRS.values(), WeightAttr, QuantizedType],
)

__all__ = [op.__name__ for op in TENSOR_OPS] + ["Mgb", "MgbOp", "ShapeInferenceError", "TypeAttribute"]
