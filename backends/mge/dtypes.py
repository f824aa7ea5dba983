"""Conversion between ``.mge`` file dtypes (``DType`` tables) and xmge element types."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.ir import Attribute

import backends.mge.schema as S
from backends.mge.fbs import MgeFormatError
from dialects.dtypes import DTypeError, QuantizedType, dtype_name, element_type


@dataclass
class RawDType:
    name: str  # file enum name, e.g. "Float32", "QuantizedS8"
    scale: float | None = None
    zero_point: int | None = None

    def describe(self) -> str:
        if self.scale is None:
            return self.name
        zp = f", zero_point={self.zero_point}" if self.zero_point is not None else ""
        return f"{self.name}(scale={self.scale:.9g}{zp})"


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


def storage_bytes(shape: Sequence[int], dtype: RawDType) -> int:
    """Bytes of a tensor's value in a file. Quantized low-bit tensors (QuantizedS4,
    Quantized4Asymm, QuantizedS1) are laid out by megdnn's LowbitsAlignedToBytes format: each
    innermost row starts on a byte; other dtypes are packed back to back."""
    bits = storage_bits(dtype)
    n = math.prod(shape)
    if bits < 8 and dtype.name in LOWBIT_ALIGNED and shape:
        return n // shape[-1] * ((shape[-1] * bits + 7) // 8) if shape[-1] else 0
    return (n * bits + 7) // 8


LOWBIT_ALIGNED = frozenset({"QuantizedS4", "Quantized4Asymm", "QuantizedS1"})
FOUR_BIT = frozenset({"QuantizedS4", "Quantized4Asymm"})  # held a byte per value in xmge


def pack_4bit(values: np.ndarray, dtype: RawDType) -> bytes:
    """One byte per element (int8 for QuantizedS4, uint8 for Quantized4Asymm) -> MegEngine's
    packed bytes: element i of a row in the low nibble of byte i // 2 when i is even, the high
    nibble when odd (``lowbit_memcpy_byte2compact``), every innermost row starting on a byte."""
    a = np.asarray(values)
    lo, hi = (-8, 7) if dtype.name == "QuantizedS4" else (0, 15)
    if a.size and (a.min() < lo or a.max() > hi):
        raise ValueError(f"{dtype.name}: values outside [{lo}, {hi}]")
    rows = a.reshape(-1, a.shape[-1] if a.ndim else 1).astype(np.int16) & 0xF
    if rows.shape[1] % 2:
        rows = np.concatenate([rows, np.zeros((rows.shape[0], 1), rows.dtype)], axis=1)
    packed = rows[:, 0::2] | (rows[:, 1::2] << 4)
    return packed.astype(np.uint8).tobytes()


def unpack_4bit(data: bytes, shape: Sequence[int], dtype: RawDType) -> np.ndarray:
    """The inverse of :func:`pack_4bit`: int8 (QuantizedS4, sign-extended) or uint8 values."""
    shape = tuple(shape) or (1,)
    width = shape[-1]
    row_bytes = (width + 1) // 2
    raw = np.frombuffer(data, np.uint8).reshape(-1, row_bytes)
    nibbles = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(raw.shape[0], -1)[:, :width]
    if dtype.name == "QuantizedS4":
        return ((nibbles.astype(np.int16) ^ 8) - 8).astype(np.int8).reshape(shape)
    return nibbles.astype(np.uint8).reshape(shape)


def to_element(dtype: RawDType, where: str = "", offset: int | None = None) -> Attribute:
    """The xmge element type of a file dtype; MgeFormatError for dtypes xmge cannot hold."""
    name = S.DTYPE_TO_XMGE.get(dtype.name)
    if name is None:
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
    if name not in S.XMGE_TO_DTYPE:  # ONNX's uint32, which the reference interpreter runs
        raise DTypeError(f"MegEngine's .mge format has no {name} dtype")
    if isinstance(elem, QuantizedType):
        file_name = S.XMGE_TO_DTYPE[name]
        zp = int(elem.zero_point.data) if file_name in S.ASYMMETRIC else None
        return RawDType(file_name, float(elem.scale.value.data), zp)
    return RawDType(S.XMGE_TO_DTYPE[name])
