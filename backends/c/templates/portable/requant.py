"""int8 requantization in generated code: the one C definition every family calls (portable C, NEON,
CUDA), and the Python helpers that spell a kernel's epilogue with it.

:data:`REQUANT_C` repeats ``backends/reference/quant_kernels.py`` (MegEngine's x86 requantization)
float32 operation for float32 operation:

* ``xm_qround``: ``trunc(y + copysign(0.5, y))`` with the addition in float32 (``round_x86``; not
  ``roundf``: ``0.49999997f`` becomes 1);
* ``xm_qsat``: plus the zero point, clamped to the result type, NaN to 0 (``saturate``);
* ``xm_qhswish``: ``x * clamp(x + 3, 0, 6) * (1.0f / 6)`` (``hswish_x86``);
* ``xm_qpost``: the conv-bias post-process to an 8-bit result (``_post_process``): the accumulator and
  the bias are scaled to float32 separately, added, activated, then multiplied by ``1.0f / s_dst``;
* a conversion between quantized types (an accumulator without bias or activation, TypeCvt) is one
  float32 multiplication by ``s_src / s_dst`` (``from_accumulator``, ``typecvt``).

The generated code is compiled without floating-point contraction (``-ffp-contract=off`` in the C
emitters, ``--fmad=false`` / ``-ffp-contract=off`` for CUDA): a fused ``y * inv + 0.5`` would skip the
rounding of the product that decides the ties.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from dialects import enums
from dialects import layout as L
from dialects.dtypes import QuantizedType, numpy_dtype
from passes.lowering.kernels import const_array
from semantics.quant_kernels import _to_acc_scale, dequantize

REQUANT_C = r"""#ifndef XM_REQUANT_DEFINED
#define XM_REQUANT_DEFINED
#include <math.h>
#include <stdint.h>
#if defined(__CUDACC__)
/* inline, not static: nvcc (-Werror all-warnings) reports unreferenced static functions */
#define XM_QFN __host__ __device__ __forceinline__
#else
#define XM_QFN static inline
#endif
/* no floating-point contraction in int8 kernels: a fused y * inv + 0.5 skips the rounding of the
   product that decides the ties (gcc contracts by default in GNU C where FMA exists: x86 -mfma,
   every aarch64; nvcc builds with --fmad=false) */
#if defined(__CUDACC__)
#define XM_EXACT_BEGIN
#define XM_EXACT_END
#elif defined(__clang__)
#define XM_EXACT_BEGIN _Pragma("clang fp contract(off)")
#define XM_EXACT_END _Pragma("clang fp contract(on)")
#else
#define XM_EXACT_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=off\")")
#define XM_EXACT_END _Pragma("GCC pop_options")
#endif
XM_EXACT_BEGIN
enum { XM_QACT_IDENTITY = 0, XM_QACT_RELU = 1, XM_QACT_HSWISH = 2 };
/* round_x86: trunc(y + copysign(0.5, y)), the addition in float32 (y >= 0 picks +0.5) */
XM_QFN float xm_qround(float y) { return truncf(y + (y >= 0.f ? 0.5f : -0.5f)); }
/* saturate: the rounded value plus the zero point, clamped to [lo, hi]; NaN becomes 0 */
XM_QFN int32_t xm_qsat(float r, int32_t zp, int32_t lo, int32_t hi) {
  double v = (double)r + zp;
  if (!(v == v)) v = 0.0;
  return v < lo ? lo : v > hi ? hi : (int32_t)v;
}
/* scaled_to: a float32 already divided by the result's scale, as a stored value */
XM_QFN int32_t xm_qscaled(float y, int32_t zp, int32_t lo, int32_t hi) {
  return xm_qsat(xm_qround(y), zp, lo, hi);
}
/* quantize: y * (1.0f / s) */
XM_QFN int32_t xm_quantize(float y, float inv_scale, int32_t zp, int32_t lo, int32_t hi) {
  return xm_qscaled(y * inv_scale, zp, lo, hi);
}
/* hswish_x86: x * min(max(x + 3, 0), 6) * (1.0f / 6); NaN stays NaN */
XM_QFN float xm_qhswish(float x) {
  float r6 = x + 3.f;
  r6 = r6 > 6.f ? 6.f : r6;
  r6 = r6 < 0.f ? 0.f : r6;
  return (x * r6) * (1.f / 6.f);
}
XM_QFN float xm_qact(float y, int act) {
  if (act == XM_QACT_RELU) return y < 0.f ? 0.f : y;
  if (act == XM_QACT_HSWISH) return xm_qhswish(y);
  return y;
}
/* _post_process: act(float(acc) * s_acc [+ bias]) * (1.0f / s_dst), before rounding */
XM_QFN float xm_qpost(int32_t acc, float s_acc, int has_bias, float bias, int act, float inv_dst) {
  float y = (float)acc * s_acc;
  if (has_bias) y = y + bias;
  return xm_qact(y, act) * inv_dst;
}
XM_EXACT_END
#endif
"""


def exact(code: str) -> str:
    """Kernel code (C or CUDA) compiled without floating-point contraction."""
    return f"\nXM_EXACT_BEGIN\n{code}\nXM_EXACT_END\n"

# the nonlinearities an int8 product's epilogue applies (the reference's QUANTIZED_NONLINEARITY but
# SIGMOID, whose expf is not numpy's exp to the last bit)
INT8_ACT = {
    enums.NonlineMode.IDENTITY: "identity",
    enums.NonlineMode.RELU: "relu",
    enums.NonlineMode.H_SWISH: "hswish",
}
ACT_CODES = {"identity": "XM_QACT_IDENTITY", "relu": "XM_QACT_RELU", "hswish": "XM_QACT_HSWISH"}
QRANGE = {"q8": (-128, 127), "q32": (-(2**31), 2**31 - 1), "u8": (0, 255)}
CTYPES = {"q8": "int8_t", "q32": "int32_t", "u8": "uint8_t", "q32_same": "int32_t", "f32": "float"}


def f32(x: float) -> str:
    """A float32 value as an exact C literal (hexadecimal)."""
    v = float(np.float32(x))
    if not np.isfinite(v):
        raise ValueError(f"quantization parameter {x!r} is not a finite float32")
    return f"{v.hex()}f"


def ratio(s_src: float, s_dst: float) -> float:
    """MegEngine's ``s_src / s_dst`` of a conversion between quantized types, in float32."""
    return float(np.float32(np.float32(s_src) / np.float32(s_dst)))


def inverse(s: float) -> float:
    """``1.0f / s`` in float32."""
    return float(np.float32(1.0) / np.float32(s))


def _range(code: str) -> str:
    """``lo, hi`` of a quantized type as C int32 arguments (INT32_MIN spelled without overflow)."""
    lo, hi = QRANGE[code]
    return f"{lo if lo > -(2**31) else '(-2147483647 - 1)'}, {hi}"


def quantize_expr(code: str, scale: float, zp: int, v: str) -> str:
    """C expression storing the float32 value ``v`` as quantized type ``code`` (``quantize``)."""
    return f"({CTYPES[code]})xm_quantize({v}, {f32(inverse(scale))}, {zp}, {_range(code)})"


def convert_expr(code: str, s_src: float, s_dst: float, zp: int, centered: str) -> str:
    """C expression of a conversion between quantized types: ``centered`` (an integer, the source's
    zero point removed) times float32 ``s_src / s_dst``, rounded and saturated."""
    scaled = f"(float)({centered}) * {f32(ratio(s_src, s_dst))}"
    return f"({CTYPES[code]})xm_qscaled({scaled}, {zp}, {_range(code)})"


def post_processed(p: dict[str, Any]) -> bool:
    """Whether an int8 product's result goes through the float post-process (an 8-bit result with a
    bias or an activation); otherwise the bias joins the int32 accumulator."""
    return p["out"] in ("q8", "u8") and bool(p.get("bias") or p.get("act", "identity") != "identity")


def int_activation(p: dict[str, Any], acc: str) -> str:
    """The statement applying an integer RELU to ``acc`` where the activation works on integers."""
    if not post_processed(p) and p.get("act") == "relu":
        return f"if ({acc} < 0) {acc} = 0;"
    return ""


def result_expr(p: dict[str, Any], acc: str, bias: str | None = None) -> str:
    """The stored value of an int32 accumulator ``acc`` (``int_activation`` already applied) of an int8
    product (``requant_params``' ``out``, ``s_acc``, ``s_out``, ``zp_out``; ``act``; ``bias``: the C
    float expression of the dequantized bias where :func:`post_processed`)."""
    out, act = p["out"], p.get("act", "identity")
    if out == "q32_same":
        return acc
    if post_processed(p):
        has_bias = int(bool(p.get("bias")))
        value = (
            f"xm_qpost({acc}, {f32(p['s_acc'])}, {has_bias}, {bias if has_bias else '0.f'}, "
            f"{ACT_CODES[act]}, {f32(inverse(p['s_out']))})"
        )
        return f"({CTYPES[out]})xm_qscaled({value}, {p['zp_out']}, {_range(out)})"
    if act == "hswish":  # a float nonlinearity on the accumulator, then the result type (_from_float)
        y = f"xm_qhswish((float)({acc}) * {f32(p['s_acc'])})"
        return y if out == "f32" else quantize_expr(out, p["s_out"], p["zp_out"], y)
    if out == "f32":
        return f"(float)({acc}) * {f32(p['s_acc'])}"
    return convert_expr(out, p["s_acc"], p["s_out"], p["zp_out"], acc)


def bias_values(v: SSAValue, acc_scale: float, p: dict[str, Any]) -> np.ndarray | None:
    """A constant bias per logical channel in the form :func:`result_expr` uses: float32
    ``dequantize(bias)`` where :func:`post_processed`, else int32 at the accumulator's scale
    (``_to_acc_scale``); None when it is not a constant or does not fit."""
    arr = const_array(v)
    if arr is None:
        return None
    t = v.type
    assert isinstance(t, TensorType)
    if isinstance(t.element_type, QuantizedType):
        arr = np.asarray(arr).view(numpy_dtype(t.element_type))
    lay = L.layout_of(t)
    if lay is not None:
        arr = L.SPECS[lay].unpack(arr)
    if post_processed({**p, "bias": 1}):
        return np.ascontiguousarray(dequantize(arr).reshape(-1), np.float32)
    out = _to_acc_scale(arr, acc_scale).reshape(-1)
    return None if np.abs(out).max(initial=0) >= 2**31 else out.astype(np.int32)


def bias_ctype(p: dict[str, Any]) -> str:
    return "float" if post_processed(p) else "int32_t"
