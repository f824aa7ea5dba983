"""MegEngine's ``megengine.core.ops.builtin``: operator descriptions (OpDefs) over xmge's ``mgb`` ops.

An OpDef names one ``mgb`` op and its parameters, MegEngine-style (``Elemwise(mode="add")``,
``Elemwise(Elemwise.Mode.ADD)``, ``Reduce(mode="sum", axis=1)``); ``core._imperative_rt.core2.apply``
runs it on tensors through :func:`compiler.core.apply`, so it is traced and differentiated like any
functional call. Only the OpDefs below exist; MegEngine has several hundred.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, ClassVar

import numpy as np

from dialects import enums
from dialects import tensor as T

__all__ = [
    "BatchedMatrixMul",
    "Concat",
    "Convolution",
    "Dimshuffle",
    "Elemwise",
    "MatrixMul",
    "NMSKeep",
    "OpDef",
    "Pooling",
    "Reduce",
    "TypeCvt",
]


def _enum(enum_cls: type[Enum], value: Any, what: str) -> Any:
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        key = value.upper()
        if key in enum_cls.__members__:
            return enum_cls[key]
    raise ValueError(f"{what}: {value!r} is not one of {', '.join(enum_cls.__members__)}")


class OpDef:
    """One operator with its parameters; equal OpDefs describe the same computation."""

    op_cls: ClassVar[type[T.MgbOp]]
    _PARAMS: ClassVar[tuple[str, ...]] = ()  # positional order, MegEngine's
    _ENUMS: ClassVar[dict[str, type[Enum]]] = {}
    _DEFAULTS: ClassVar[dict[str, Any]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(self._PARAMS):
            raise TypeError(f"{type(self).__name__} takes at most {len(self._PARAMS)} positional parameters")
        params = dict(self._DEFAULTS)
        params.update(zip(self._PARAMS, args, strict=False))
        for k, v in kwargs.items():
            if k not in self._PARAMS:
                raise TypeError(
                    f"{type(self).__name__} has no parameter {k!r} (has {', '.join(self._PARAMS)})"
                )
            params[k] = v
        for k, enum_cls in self._ENUMS.items():
            if k in params:
                params[k] = _enum(enum_cls, params[k], f"{type(self).__name__}.{k}")
        self.__dict__["_params"] = params

    def __getattr__(self, name: str) -> Any:
        params = self.__dict__.get("_params", {})
        if name in params:
            return params[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._PARAMS:
            raise AttributeError(f"{type(self).__name__} has no parameter {name!r}")
        enum_cls = self._ENUMS.get(name)
        self._params[name] = _enum(enum_cls, value, name) if enum_cls else value

    def op_params(self) -> dict[str, Any]:
        """The parameters as the ``mgb`` op takes them."""
        return dict(self._params)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._params == self._params  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted((k, str(v)) for k, v in self._params.items()))))

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in self._params.items())
        return f"{type(self).__name__}({body})"


class Elemwise(OpDef):
    op_cls = T.ElemwiseOp
    Mode = enums.ElemwiseMode
    _PARAMS = ("mode",)
    _ENUMS = {"mode": enums.ElemwiseMode}


class Reduce(OpDef):
    """Reduce over ``axis`` keeping it as size 1 (MegEngine's operator; ``F.sum`` drops it)."""

    op_cls = T.ReduceOp
    Mode = enums.ReduceMode
    _PARAMS = ("mode", "axis")
    _ENUMS = {"mode": enums.ReduceMode}


class MatrixMul(OpDef):
    op_cls = T.MatrixMulOp
    ComputeMode = enums.ComputeMode
    _PARAMS = ("transposeA", "transposeB", "compute_mode")
    _ENUMS = {"compute_mode": enums.ComputeMode}

    def op_params(self) -> dict[str, Any]:
        p = dict(self._params)
        out = {
            "transpose_a": bool(p.pop("transposeA", False)),
            "transpose_b": bool(p.pop("transposeB", False)),
        }
        out.update(p)
        return out


class BatchedMatrixMul(MatrixMul):
    op_cls = T.BatchedMatrixMulOp


class Convolution(OpDef):
    op_cls = T.ConvolutionOp
    Mode = enums.ConvMode
    Sparse = enums.ConvSparse
    ComputeMode = enums.ComputeMode
    _PARAMS = (
        "mode",
        "pad_h",
        "pad_w",
        "stride_h",
        "stride_w",
        "dilate_h",
        "dilate_w",
        "sparse",
        "compute_mode",
    )
    _ENUMS = {"mode": enums.ConvMode, "sparse": enums.ConvSparse, "compute_mode": enums.ComputeMode}
    _DEFAULTS = {"pad_h": 0, "pad_w": 0, "stride_h": 1, "stride_w": 1, "dilate_h": 1, "dilate_w": 1}

    def op_params(self) -> dict[str, Any]:
        p = self._params
        out = {
            "stride": (p["stride_h"], p["stride_w"]),
            "padding": (p["pad_h"], p["pad_w"]),
            "dilation": (p["dilate_h"], p["dilate_w"]),
        }
        for k in ("mode", "sparse", "compute_mode"):
            if k in p:
                out[k] = p[k]
        return out


class Pooling(OpDef):
    op_cls = T.PoolingOp
    Mode = enums.PoolingMode
    _PARAMS = ("mode", "pad_h", "pad_w", "stride_h", "stride_w", "window_h", "window_w")
    _ENUMS = {"mode": enums.PoolingMode}
    _DEFAULTS = {"pad_h": 0, "pad_w": 0, "stride_h": 1, "stride_w": 1}

    def op_params(self) -> dict[str, Any]:
        p = self._params
        return {
            "mode": p["mode"],
            "window": (p["window_h"], p["window_w"]),
            "stride": (p["stride_h"], p["stride_w"]),
            "padding": (p["pad_h"], p["pad_w"]),
        }


class Concat(OpDef):
    op_cls = T.ConcatOp
    _PARAMS = ("axis",)
    _DEFAULTS = {"axis": 0}


class Dimshuffle(OpDef):
    op_cls = T.DimshuffleOp
    _PARAMS = ("pattern",)

    def op_params(self) -> dict[str, Any]:
        return {"pattern": tuple(int(i) for i in self._params["pattern"])}


class TypeCvt(OpDef):
    """Convert to ``dtype`` (the result type is the input's shape with that dtype)."""

    op_cls = T.TypeCvtOp
    _PARAMS = ("dtype",)

    def op_params(self) -> dict[str, Any]:
        return {}

    @property
    def target_dtype(self) -> np.dtype:
        return np.dtype(self._params["dtype"])


class NMSKeep(OpDef):
    """Non-maximum suppression of score-sorted boxes (B, N, 4): (kept indices (B, max_output), count (B,))."""

    op_cls = T.NMSKeepOp
    _PARAMS = ("iou_thresh", "max_output")

    def op_params(self) -> dict[str, Any]:
        return {
            "iou_thresh": float(self._params["iou_thresh"]),
            "max_output": int(self._params["max_output"]),
        }
