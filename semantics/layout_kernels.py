"""Reference kernels of the ``layout`` dialect, and of ``mgb`` ops in blocked formats.

``layout.relayout`` is ``dialects.layout.relayout_array``. A conv or pooling in a blocked format
unpacks its operands with the layouts its ``format`` implies (``dialects.layout.conv_operand_layouts``),
runs the NCHW kernel and packs the result: the index math is the dialect's, never repeated here.
Elementwise ops, typecvt, concat and reduce need nothing: the NCHW kernels work on the physical
arrays as they are (their shape inference keeps the operands in one layout).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import semantics.kernels as K
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from semantics.kernels import ResultSpec


@K.kernel(L.RelayoutOp)
def relayout(
    args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, src: Any, dst: Any, channels: int | None
) -> list[np.ndarray]:
    (x,) = args
    if src is not None:
        logical = L.SPECS[src].logical_shape(x.shape, channels)
    else:
        logical = x.shape
    return [L.relayout_array(x, src, dst, logical).astype(results[0].dtype, copy=False)]


def _logical_spec(spec: ResultSpec, layout: L.Layout | None) -> ResultSpec:
    if layout is None:
        return spec
    return ResultSpec(L.SPECS[layout].logical_shape(spec.shape), spec.dtype)


def _unpack(x: np.ndarray, layout: L.Layout | None) -> np.ndarray:
    return x if layout is None or x.size == 1 and x.ndim != L.SPECS[layout].rank else L.unpack(x, layout)


def _pack(y: np.ndarray, layout: L.Layout | None) -> np.ndarray:
    return y if layout is None else L.pack(y, layout)


def _blocked_conv(nchw_kernel: K.Kernel) -> K.Kernel:
    def run(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
        if p.get("format", enums.Format.NCHW) == enums.Format.NCHW:
            return nchw_kernel(args, results, **p)
        lay = L.conv_operand_layouts(p["format"], p["sparse"], args[1].ndim)
        src, filt, *rest = args
        logical = [_unpack(src, lay.src), _unpack(filt, lay.filter), *(_unpack(a, lay.dst) for a in rest)]
        (y,) = nchw_kernel(
            logical, [_logical_spec(results[0], lay.dst)], **{**p, "format": enums.Format.NCHW}
        )
        return [_pack(y, lay.dst)]

    run.__name__ = f"blocked_{nchw_kernel.__name__}"
    return run


def _blocked_pooling(nchw_kernel: K.Kernel) -> K.Kernel:
    def run(args: Sequence[np.ndarray], results: Sequence[ResultSpec], **p: Any) -> list[np.ndarray]:
        if p.get("format", enums.Format.NCHW) == enums.Format.NCHW:
            return nchw_kernel(args, results, **p)
        act = L.ACTIVATION_OF_FORMAT[p["format"]]
        (y,) = nchw_kernel(
            [L.unpack(args[0], act)], [_logical_spec(results[0], act)], **{**p, "format": enums.Format.NCHW}
        )
        return [L.pack(y, act)]

    run.__name__ = f"blocked_{nchw_kernel.__name__}"
    return run


def _install() -> None:
    for op in (T.ConvolutionOp, T.ConvBiasOp):
        base = K.KERNELS[op]
        if not base.__name__.startswith("blocked_"):
            K.KERNELS[op] = _blocked_conv(base)
    for op in (T.PoolingOp, T.AdaptivePoolingOp):
        base = K.KERNELS[op]
        if not base.__name__.startswith("blocked_"):
            K.KERNELS[op] = _blocked_pooling(base)


_install()
