"""MegEngine's quantization vocabulary: quantization modes, dtype ranges, ``QParams`` and the
fake-quantize function every QAT module applies.

``fake_quant_tensor`` is quantize-then-dequantize composed from elementwise ops (DIV, ROUND,
clip, MUL), so a QAT model traces and dumps with existing operators; rounding is MegEngine's
(half away from zero, megdnn's ``round``).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

import numpy as np

import compiler.dtype as D
from compiler.module.module import Module
from compiler.tensor import Tensor, as_tensor


class QuantMode(Enum):
    """MegEngine's modes, spelled as MegEngine spells them."""

    SYMMERTIC = 1
    ASYMMERTIC = 2


class QuantDtypeMeta(
    NamedTuple(
        "QuantDtypeMeta",
        [
            ("name", str),
            ("cname", "str | None"),
            ("np_dtype_str", str),
            ("qmin", int),
            ("qmax", int),
            ("is_unsigned", bool),
        ],
    )
):
    """MegEngine's metadata of a quantized dtype: a unique ``name``, the C++ dtype name ``cname``
    it is dumped as (None: no dump form, as for MegEngine's 2-bit kinds), the numpy storage dtype
    ``np_dtype_str``, the integer range and whether it is unsigned (inferred from the storage).
    Custom metas (for QAT that only exports metadata) are made the same way."""

    def __new__(
        cls,
        name: str,
        cname: str | None,
        np_dtype_str: str,
        qmin: int,
        qmax: int,
        is_unsigned: bool | None = None,
    ) -> QuantDtypeMeta:
        if not isinstance(np_dtype_str, str):
            raise TypeError(f"np_dtype_str must be a str such as 'int8', got {np_dtype_str!r}")
        unsigned = np_dtype_str[0] == "u" if is_unsigned is None else bool(is_unsigned)
        return super().__new__(cls, name, cname, np_dtype_str, qmin, qmax, unsigned)

    @property
    def is_signed(self) -> bool:
        return not self.is_unsigned

    def __copy__(self) -> QuantDtypeMeta:
        return self

    def __deepcopy__(self, memo: Any) -> QuantDtypeMeta:
        # one object per dtype, so identity checks against the built-in metas keep working
        return self


_builtin_quant_dtypes: dict[str, QuantDtypeMeta] = {
    "quint8": QuantDtypeMeta("quint8", "Quantized8Asymm", "uint8", 0, 255),
    "qint8": QuantDtypeMeta("qint8", "QuantizedS8", "int8", -128, 127),
    "qint8_narrow": QuantDtypeMeta("qint8_narrow", "QuantizedS8", "int8", -127, 127),
    "quint4": QuantDtypeMeta("quint4", "Quantized4Asymm", "uint8", 0, 15),
    "qint4": QuantDtypeMeta("qint4", "QuantizedS4", "int8", -8, 7),
    "qint1": QuantDtypeMeta("qint1", "QuantizedS1", "int8", 0, 1),
    "qint32": QuantDtypeMeta("qint32", "QuantizedS32", "int32", -(2**31), 2**31 - 1),
    # MegEngine has no dump form for the 2-bit kinds: usable for fake quantization only
    "quint2": QuantDtypeMeta("quint2", None, "uint8", 0, 3),
    "qint2": QuantDtypeMeta("qint2", None, "int8", -2, 1),
}


def _meta_of(dtype: str | QuantDtypeMeta) -> QuantDtypeMeta:
    if isinstance(dtype, QuantDtypeMeta):
        return dtype
    try:
        return _builtin_quant_dtypes[dtype]
    except KeyError:
        raise ValueError(
            f"unknown quantized dtype {dtype!r}; expected one of {sorted(_builtin_quant_dtypes)}"
        ) from None


class QParams:
    """Quantization parameters of one tensor: mode, dtype meta, scale and zero point (Tensors)."""

    def __init__(
        self,
        mode: QuantMode,
        dtype_meta: QuantDtypeMeta,
        scale: Tensor | None,
        zero_point: Tensor | None = None,
    ) -> None:
        self.mode, self.dtype_meta = mode, dtype_meta
        self.scale, self.zero_point = scale, zero_point

    def update(self, other: QParams) -> None:
        self.mode, self.dtype_meta = other.mode, other.dtype_meta
        self.scale, self.zero_point = other.scale, other.zero_point

    def __repr__(self) -> str:
        return f"QParams(mode={self.mode.name}, dtype={self.dtype_meta.name}, scale={self.scale})"


def create_qparams(
    mode: QuantMode = QuantMode.SYMMERTIC,
    dtype_meta: str | QuantDtypeMeta | None = None,
    scale: Any = None,
    zero_point: Any = None,
) -> QParams:
    meta = _meta_of("qint8" if dtype_meta is None else dtype_meta)
    return QParams(mode, meta, _as_param(scale), _as_param(zero_point))


def _as_param(value: Any) -> Tensor | None:
    if value is None:
        return None
    return as_tensor(np.float32(value) if np.isscalar(value) else value)


def get_qparam_dict(qparams: QParams) -> dict[str, Any]:
    return {
        "mode": qparams.mode,
        "dtype_meta": qparams.dtype_meta,
        "scale": qparams.scale,
        "zero_point": qparams.zero_point,
    }


def get_quantized_dtype(qparams: QParams) -> np.dtype:
    """The ``compiler.dtype`` quantized dtype these parameters describe."""
    if qparams.scale is None:
        raise ValueError("quantization parameters have no scale yet (run the observer first)")
    scale = float(np.asarray(qparams.scale.numpy()).reshape(-1)[0])
    meta = qparams.dtype_meta
    kind = D._KIND_BY_CNAME.get(meta.cname or "")
    if kind is None:
        raise ValueError(
            f"dtype {meta.name} has no dump form (cname {meta.cname!r}); it can only fake-quantize"
        )
    if meta.is_unsigned:
        zp = 0 if qparams.zero_point is None else int(np.asarray(qparams.zero_point.numpy()).reshape(-1)[0])
        return getattr(D, kind)(scale, zp)
    return getattr(D, kind)(scale)


def fake_quant_tensor(inp: Tensor, qparams: QParams) -> Tensor:
    """``(clip(round(x / scale) + zp, qmin, qmax) - zp) * scale`` in float32."""
    import compiler.functional as F

    if qparams.scale is None:
        raise ValueError("fake_quant_tensor: the quantization parameters have no scale")
    meta = qparams.dtype_meta
    inp = as_tensor(inp)
    scale = qparams.scale
    q = F.round(inp / scale)
    zp: Any = 0.0
    if qparams.mode == QuantMode.ASYMMERTIC and qparams.zero_point is not None:
        zp = qparams.zero_point
    # the zero point is added even when it is 0, as in MegEngine: that turns round()'s -0.0 into 0.0
    return (F.clip(q + zp, meta.qmin, meta.qmax) - zp) * scale


class _DtypeModule(Module):
    """What observers and fake quantizers share: the quantized dtype they serve (with its integer
    range) and an on/off switch."""

    def __init__(self, dtype: str = "qint8", enable: bool = True, **kwargs: Any) -> None:
        super().__init__()
        self.dtype = _meta_of(dtype)
        self.qmin, self.qmax = self.dtype.qmin, self.dtype.qmax
        self.enabled = enable

    def enable(self) -> None:
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False


__all__ = [
    "QParams",
    "QuantDtypeMeta",
    "QuantMode",
    "create_qparams",
    "fake_quant_tensor",
    "get_qparam_dict",
    "get_quantized_dtype",
]
