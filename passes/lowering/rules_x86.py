"""Kernel-selection rules for the x86 NCHW88 kernels (:mod:`backends.c.templates.nchw88`), appended
to the one registry of :mod:`passes.lowering.rules`.

``enable-nchw88`` decides which convolutions run blocked (their ``format`` and filter layout); these
rules map each blocked convolution onto ``conv2d_nchw88`` (dense, group and hybrid first-layer
filters) or ``conv2d_nchw88_chan`` (channel-wise), and NCHW88 pooling onto ``pool2d_nchw88``. Both
float32 and float16 storage with float32 accumulation (``compute_mode = float32``, i.e.
``+io16xc32``) are served; float16 arithmetic is not (x86 has none), so such ops are widened.
"""

from __future__ import annotations

from typing import Any

from xdsl.ir import Operation

from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.lowering.rules import ACT, Lowered, candidate, const_array, shape
from passes.lowering.rules_typed import _pool_geometry, code, logical

Layout = L.Layout
FILTER_MODES = {
    Layout.KCRSc8k8: "dense",
    Layout.GKCRSc8k8: "group",
    Layout.KRSCk8: "hybrid",
    Layout.C11RSc8: "chan",
}


def storage(op: Operation) -> str | None:
    """``f32``, or ``f16`` for float16 storage computed in float32; None for anything else."""
    dt = code(op.operands[0])
    if dt not in ("f32", "f16") or any(code(v) != dt for v in (*op.operands, *op.results)):
        return None
    if dt == "f16" and op.params().get("compute_mode") != enums.ComputeMode.FLOAT32:
        return None
    return dt


def _conv_nchw88(op: Operation, chan: bool) -> Lowered | None:
    assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
    p = op.params()
    if p["format"] != enums.Format.NCHW88 or p["mode"] != enums.ConvMode.CROSS_CORRELATION:
        return None
    x, w, *rest = op.operands
    mode = FILTER_MODES.get(L.layout_of(w.type))  # type: ignore[arg-type]
    dt = storage(op)
    if mode is None or (mode == "chan") != chan or dt is None or const_array(w) is None:
        return None
    n, ic, ih, iw = logical(x)
    _, oc, oh, ow = logical(op.results[0])
    wl = logical(w)
    groups = wl[0] if mode in ("group", "chan") else 1
    if oc % 8 or (mode in ("dense", "group") and (ic // groups) % 8) or (mode == "chan" and groups % 8):
        return None
    params: dict[str, Any] = {
        "n": n, "ih": ih, "iw": iw, "oh": oh, "ow": ow, "fh": wl[-2], "fw": wl[-1],
        "sh": p["stride"][0], "sw": p["stride"][1], "ph": p["padding"][0], "pw": p["padding"][1],
        "dh": p["dilation"][0], "dw": p["dilation"][1], "dtype": dt, "bias": 0, "residual": 0,
        "act": "identity",
    }  # fmt: skip
    if chan:
        params["c"] = oc
    else:
        params.update(mode=mode, ic=ic, oc=oc, groups=groups)
    operands: list[Any] = [x, w]
    if isinstance(op, T.ConvBiasOp):
        params["act"] = ACT.get(p["nonline_mode"], "")
        if not params["act"]:
            return None
        bias = residual = None
        # a constant per-channel bias (read as float32) and/or a full-shape addend (bias or z)
        for v in rest:
            if L.layout_of(v.type) != Layout.NCHW88:  # type: ignore[arg-type]
                return None
            if logical(v) == (1, oc, 1, 1) and bias is None and const_array(v) is not None:
                bias = v
            elif shape(v) == shape(op.results[0]) and residual is None:
                residual = v
            else:
                return None
        if bias is not None:
            params["bias"] = 1
            operands.append(bias)
        if residual is not None:
            params["residual"] = 1
            operands.append(residual)
    return Lowered(params, operands)


# Winograd F(m x m, 3 x 3) where it beats the direct kernels (measured per layer with
# bench/bench_x86.py's profiles on AVX2 and AVX-512: F(4, 3) 1.7-5x faster from 8x8 outputs and 16
# channels up; at 7x7 the 4x4 tiles waste 30% and U is 4x the filter, F(2, 3) wins there, except
# with very many channels: in a whole model ResNet's 7x7x512 U (16 MiB) streams from memory, slower
# than the direct kernel's 9 MiB of filters)
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_F2_MAX_MACS = 256 * 256  # IC x OC of an F(2, 3) conv
WINOGRAD_F4_MIN_SPATIAL = 8
WINOGRAD_F2_MIN_SPATIAL = 4


def winograd_tile(p: dict[str, Any]) -> int | None:
    """The Winograd output tile ``m`` for a dense NCHW88 conv's parameters (None: direct)."""
    if p.get("mode") != "dense" or p["dtype"] != "f32":
        return None
    if (p["fh"], p["fw"], p["sh"], p["sw"], p["dh"], p["dw"]) != (3, 3, 1, 1, 1, 1):
        return None
    if min(p["ic"], p["oc"]) < WINOGRAD_MIN_CHANNELS:
        return None
    spatial = min(p["oh"], p["ow"])
    if spatial >= WINOGRAD_F4_MIN_SPATIAL:
        return 4
    small = spatial >= WINOGRAD_F2_MIN_SPATIAL and p["ic"] * p["oc"] <= WINOGRAD_F2_MAX_MACS
    return 2 if small else None


def _winograd_nchw88(op: Operation, isa: str) -> Lowered | None:
    lowered = _conv_nchw88(op, False)
    if lowered is None:
        return None
    m = winograd_tile(lowered.params)
    if m is None:
        return None
    drop = ("fh", "fw", "sh", "sw", "dh", "dw", "mode", "groups")
    params = {k: v for k, v in lowered.params.items() if k not in drop}
    params["m"] = m
    return Lowered(params, lowered.operands)


for _cls in (T.ConvolutionOp, T.ConvBiasOp):
    candidate(_cls, "conv2d_nchw88_chan")(lambda op, isa: _conv_nchw88(op, True))
    candidate(_cls, "conv2d_winograd_nchw88")(_winograd_nchw88)
    candidate(_cls, "conv2d_nchw88")(lambda op, isa: _conv_nchw88(op, False))


def _pool_nchw88(op: Operation, isa: str) -> Lowered | None:
    assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
    if op.params()["format"] != enums.Format.NCHW88:
        return None
    dt = code(op.operands[0])
    if dt not in ("f32", "f16") or code(op.results[0]) != dt:
        return None
    params = _pool_geometry(op)
    if params is None:
        return None
    params["dtype"] = dt
    return Lowered(params, [op.operands[0]])


for _cls in (T.PoolingOp, T.AdaptivePoolingOp):
    candidate(_cls, "pool2d_nchw88")(_pool_nchw88)
