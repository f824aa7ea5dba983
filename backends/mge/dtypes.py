"""Conversion between ``.mge`` file dtypes (``DType`` tables) and xmge element types."""

from __future__ import annotations

from xdsl.ir import Attribute

from backends.mge import schema as S
from backends.mge.container import RawDType
from backends.mge.fbs import MgeFormatError
from dialects.dtypes import QuantizedType, dtype_name, element_type

_BITS = {
    "Float32": 32,
    "Uint8": 8,
    "Int8": 8,
    "Int16": 16,
    "Int32": 32,
    "IntB1": 1,
    "IntB2": 2,
    "IntB4": 4,
    "Byte": 8,
    "Float16": 16,
    "UintB4": 4,
    "Quantized8Asymm": 8,
    "QuantizedS32": 32,
    "QuantizedS8": 8,
    "Quantized4Asymm": 4,
    "QuantizedS4": 4,
    "QuantizedS16": 16,
    "BFloat16": 16,
    "Bool": 8,
    "Uint16": 16,
    "QuantizedS1": 1,
    "Complex64": 64,
}


def storage_bits(dtype: RawDType) -> int:
    return _BITS[dtype.name]


def to_element(dtype: RawDType, where: str = "", offset: int | None = None) -> Attribute:
    """The xmge element type of a file dtype; MgeFormatError for dtypes xmge cannot hold."""
    name = S.DTYPE_TO_XMGE.get(dtype.name)
    if name is None or name in ("qint4", "quint4"):
        raise MgeFormatError(f"{where}unsupported dtype {dtype.name}", offset)
    if dtype.scale is not None:
        if not dtype.scale > 0:
            raise MgeFormatError(
                f"{where}quantized dtype {dtype.name} has invalid scale {dtype.scale}", offset
            )
        return QuantizedType(name, dtype.scale, dtype.zero_point or 0)
    return element_type(name)


def from_element(elem: Attribute) -> RawDType:
    """The file dtype of an xmge element type."""
    name = dtype_name(elem)
    if isinstance(elem, QuantizedType):
        file_name = S.XMGE_TO_DTYPE[name]
        zp = int(elem.zero_point.data) if file_name in S.ASYMMETRIC else None
        return RawDType(file_name, float(elem.scale.value.data), zp)
    return RawDType(S.XMGE_TO_DTYPE[name])
