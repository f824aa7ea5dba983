"""The one mapping between MegEngine dtype names, numpy dtypes and xDSL element types.

Quantized dtypes (``qint8(scale)`` and friends) are element types of their own that carry the
quantization parameters; their storage is the matching plain integer numpy dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    f64,
)
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from dialects.errors import XmgeError


@dataclass(frozen=True)
class PlainDType:
    """A dtype without quantization parameters."""

    name: str  # MegEngine's spelling, e.g. "float32"
    numpy: np.dtype
    element: Attribute


PLAIN_DTYPES: tuple[PlainDType, ...] = (
    PlainDType("float32", np.dtype(np.float32), Float32Type()),
    PlainDType("float16", np.dtype(np.float16), Float16Type()),
    PlainDType("int32", np.dtype(np.int32), IntegerType(32)),
    PlainDType("int16", np.dtype(np.int16), IntegerType(16)),
    PlainDType("int8", np.dtype(np.int8), IntegerType(8)),
    PlainDType("uint8", np.dtype(np.uint8), IntegerType(8, Signedness.UNSIGNED)),
    PlainDType("uint16", np.dtype(np.uint16), IntegerType(16, Signedness.UNSIGNED)),
    # ONNX's uint32 (and uint64, narrowed like int64): the reference runs it; kernels refuse it
    PlainDType("uint32", np.dtype(np.uint32), IntegerType(32, Signedness.UNSIGNED)),
    PlainDType("bool", np.dtype(np.bool_), IntegerType(1)),
)

# bfloat16 (a float32's high half) exists only between kernels (``+bf16`` activations): numpy has
# no such type, so its bits are stored as uint16; it is no MegEngine dtype (not in PLAIN_DTYPES)
BFLOAT16_STORAGE = np.dtype(np.uint16)

# name -> storage numpy dtype; the quantized kinds MegEngine knows.
QUANTIZED_STORAGE: dict[str, np.dtype] = {
    "qint8": np.dtype(np.int8),
    "qint32": np.dtype(np.int32),
    "quint8": np.dtype(np.uint8),
    "qint4": np.dtype(np.int8),
    "quint4": np.dtype(np.uint8),
    "qint16": np.dtype(np.int16),
    "qint1": np.dtype(np.int8),
}

# xmge kind -> MegEngine's C++ name (the ``name`` in a quantized numpy dtype's metadata)
QUANTIZED_CNAME: dict[str, str] = {
    "qint8": "QuantizedS8",
    "qint32": "QuantizedS32",
    "quint8": "Quantized8Asymm",
    "qint4": "QuantizedS4",
    "quint4": "Quantized4Asymm",
    "qint16": "QuantizedS16",
    "qint1": "QuantizedS1",
}
# value range of each quantized kind (qint4/quint4 are stored unpacked, one value per byte)
QUANTIZED_RANGE: dict[str, tuple[int, int]] = {
    "qint8": (-128, 127),
    "qint32": (-(2**31), 2**31 - 1),
    "quint8": (0, 255),
    "qint4": (-8, 7),
    "quint4": (0, 15),
    "qint16": (-(2**15), 2**15 - 1),
    "qint1": (0, 1),  # MegEngine's QuantizedS1: a bit, one per byte here
}
_KIND_OF_CNAME = {v: k for k, v in QUANTIZED_CNAME.items()}
METADATA_KEY = "mgb_dtype"  # MegEngine's key in numpy dtype metadata

_BY_NAME = {d.name: d for d in PLAIN_DTYPES}
_BY_NUMPY = {d.numpy: d for d in PLAIN_DTYPES}
_BY_ELEMENT = {d.element: d for d in PLAIN_DTYPES}


class DTypeError(XmgeError, TypeError):
    """A dtype that xmge does not support."""


@irdl_attr_definition
class QuantizedType(ParametrizedAttribute, TypeAttribute):
    """``!mgb.quant<qint8, 0.05>`` or ``!mgb.quant<quint8, 0.05, 128>``."""

    name = "mgb.quant"
    kind: StringAttr
    scale: FloatAttr
    zero_point: IntAttr

    def __init__(self, kind: str, scale: float, zero_point: int = 0):
        super().__init__(StringAttr(kind), FloatAttr(float(scale), f64), IntAttr(int(zero_point)))

    @property
    def storage(self) -> np.dtype:
        return QUANTIZED_STORAGE[self.kind.data]

    @property
    def dtype_name(self) -> str:
        return self.kind.data

    @property
    def scale_value(self) -> float:
        return float(self.scale.value.data)

    @property
    def zero_point_value(self) -> int:
        return int(self.zero_point.data)

    @property
    def qrange(self) -> tuple[int, int]:
        return QUANTIZED_RANGE[self.kind.data]

    def numpy_dtype(self) -> np.dtype:
        """The storage dtype carrying the parameters as MegEngine does (``metadata["mgb_dtype"]``)."""
        return quantized_numpy_dtype(self.kind.data, self.scale_value, self.zero_point_value)

    def verify(self) -> None:
        if self.kind.data not in QUANTIZED_STORAGE:
            raise VerifyException(
                f"unknown quantized dtype {self.kind.data!r}; expected one of {sorted(QUANTIZED_STORAGE)}"
            )
        if not self.scale.value.data > 0:
            raise VerifyException(f"quantized dtype {self.kind.data} needs a positive scale")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            kind = parser.parse_identifier()
            parser.parse_punctuation(",")
            scale = parser.parse_float()
            zero_point = parser.parse_integer() if parser.parse_optional_punctuation(",") else 0
        return [StringAttr(kind), FloatAttr(scale, f64), IntAttr(zero_point)]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(f"{self.kind.data}, {float_literal(self.scale.value.data)}")
            if self.zero_point.data:
                printer.print_string(f", {self.zero_point.data}")


def float_literal(value: float) -> str:
    """The shortest exact text of ``value`` that MLIR's float grammar accepts (``1.0e-07``, not ``1e-07``)."""
    text = repr(float(value))
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


def quantized_numpy_dtype(kind: str, scale: float, zero_point: int = 0) -> np.dtype:
    """MegEngine's numpy spelling of a quantized dtype: the storage dtype with
    ``metadata={"mgb_dtype": {"name": "QuantizedS8", "scale": ..., "zero_point": ...}}``."""
    if kind not in QUANTIZED_STORAGE:
        raise DTypeError(f"unknown quantized dtype {kind!r}; expected one of {sorted(QUANTIZED_STORAGE)}")
    asym = kind in ("quint8", "quint4")
    meta = {
        "name": QUANTIZED_CNAME[kind],
        "scale": float(scale),
        "zero_point": int(zero_point) if asym else None,
    }
    return np.dtype(QUANTIZED_STORAGE[kind], metadata={METADATA_KEY: meta})


def quantized_type_of(dtype: np.dtype) -> QuantizedType | None:
    """The quantized element type a numpy dtype's metadata describes, or None for a plain dtype."""
    meta = (getattr(dtype, "metadata", None) or {}).get(METADATA_KEY)
    if meta is None:
        return None
    kind = _KIND_OF_CNAME.get(meta.get("name"))
    if kind is None:
        raise DTypeError(f"unsupported quantized dtype {meta.get('name')!r}")
    scale = meta.get("scale")
    if scale is None or not float(scale) > 0:
        raise DTypeError(f"quantized dtype {meta['name']} needs a positive scale, got {scale!r}")
    return QuantizedType(kind, float(scale), int(meta.get("zero_point") or 0))


def element_type(dtype: str | np.dtype | type | Attribute) -> Attribute:
    """The xDSL element type for a dtype given by name, numpy dtype or element type."""
    if isinstance(dtype, Attribute):
        if dtype in _BY_ELEMENT or isinstance(dtype, QuantizedType):
            return dtype
        raise DTypeError(f"unsupported element type {dtype}")
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype].element
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as exc:
        raise DTypeError(f"unsupported dtype {dtype!r}") from exc
    quantized = quantized_type_of(np_dtype)
    if quantized is not None:
        return quantized
    if np_dtype == np.float64:
        np_dtype = np.dtype(np.float32)
    elif np_dtype == np.int64:
        np_dtype = np.dtype(np.int32)
    elif np_dtype == np.uint64:
        np_dtype = np.dtype(np.uint32)
    if np_dtype not in _BY_NUMPY:
        raise DTypeError(f"unsupported dtype {np_dtype}; xmge supports {[d.name for d in PLAIN_DTYPES]}")
    return _BY_NUMPY[np_dtype].element


def numpy_dtype(element: Attribute) -> np.dtype:
    """The numpy dtype that stores values of an element type (for a quantized type, the storage
    dtype with MegEngine's quantization metadata)."""
    if isinstance(element, QuantizedType):
        return element.numpy_dtype()
    if isinstance(element, BFloat16Type):
        return BFLOAT16_STORAGE
    if element not in _BY_ELEMENT:
        raise DTypeError(f"unsupported element type {element}")
    return _BY_ELEMENT[element].numpy


def dtype_name(element: Attribute) -> str:
    """MegEngine's name of an element type, e.g. ``float32`` or ``qint8``."""
    if isinstance(element, QuantizedType):
        return element.kind.data
    if isinstance(element, BFloat16Type):
        return "bfloat16"
    return _BY_ELEMENT[element].name


def tensor_type(shape: Sequence[int], dtype: str | np.dtype | Attribute) -> TensorType:
    return TensorType(element_type(dtype), [int(s) for s in shape])


def is_float(element: Attribute) -> bool:
    return isinstance(element, Float32Type | Float16Type)
