"""Direct NCHW44 convolutions for AArch64 (MegCC/MegEngine's ``conv2d_*_NCHW44`` kernels), one template
for every element type and ISA:

* ``conv2d_nchw44`` (float32 on ``neon``, float16 on ``fp16``): activations ``(N, C/4, H, W, 4)``;
  filters dense ``KCRSc4k4``, group ``GKCRSc4k4``, channel-wise ``C11RSc4`` or, for the first layer
  of a network (input channels < 4, plain NCHW input), hybrid ``KRSCk4``. Per 4 output channels and
  a tile of ``OWB`` output columns, accumulators are vectors of 4 output channels; a 4x4 filter
  block times one input pixel (4 channels) is four by-lane FMAs (``vfmaq_laneq_f32`` /
  ``vfma_lane_f16``). Float16 accumulates in float16 (``+ioc16``) or, storage-only, converts to
  float32 around float32 FMAs (``+io16xc32``, ``acc = "f32"``).
* ``conv2d_nchw44_dot`` (``dot``, int8): ``KCRSk4c4`` / ``GKCRSk4c4`` filters, each 16-byte block
  one ``vdotq_s32`` against the 4 input channels of a pixel broadcast to all lanes: 4 output
  channels x 4 input channels per instruction, int32 accumulation.
* ``conv2d_nchw44_q8`` (``neon``, int8 without the dot product): channel-wise ``C11RSc4``, hybrid
  ``KRSCk4`` (int8 first layer) and ``KCRSc4k4``/``GKCRSc4k4``, widening ``vmlal_s16``.

int8 results go through the reference's epilogue (MegEngine's x86 requantization), lane by lane with
the one C definition of :mod:`backends.c.templates.portable.requant`: the accumulator and the float32 bias
scaled separately, added, RELU / h-swish, times ``1.0f / s_out``, rounded ``trunc(y ± 0.5)``;
without bias or activation one multiplication by ``s_acc / s_out``.

Each template also has a ``generic`` instance: the same loops with the vector operations spelled as
scalar C (``bench/bench_arm.py`` compares the two under qemu). Padding is done once per image by a
copy into the workspace, so the inner loops have no bounds checks. All layout offsets come from
:meth:`dialects.layout.LayoutSpec.dim_strides`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation, SSAValue

import backends.c.examples as E
from backends.c.match import (
    ACT,
    acc_scale,
    blocked_conv_geometry,
    code,
    pool_geometry,
    qparams,
    requant_params,
    same_type,
)
from backends.c.templates import Template, conv_sym, epilogue_sym, plane_sym, sym_join, window_taps
from backends.c.templates.portable.requant import (
    CTYPES as OUT_CTYPES,
)
from backends.c.templates.portable.requant import (
    INT8_ACT,
    REQUANT_C,
    bias_ctype,
    bias_values,
    exact,
    int_activation,
    post_processed,
    result_expr,
)
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.layout import SPECS, Layout
from passes.lowering.kernels import ACTIVATIONS, FULL_EPILOGUE, EpilogueSupport, Lowered, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

OWB = 4  # output columns per register tile

# filter layout of each (family kind, mode)
FILTERS: dict[tuple[str, str], Layout] = {
    ("float", "dense"): Layout.KCRSc4k4,
    ("float", "group"): Layout.GKCRSc4k4,
    ("float", "chan"): Layout.C11RSc4,
    ("float", "hybrid"): Layout.KRSCk4,
    ("dot", "dense"): Layout.KCRSk4c4,
    ("dot", "group"): Layout.GKCRSk4c4,
    ("q8", "dense"): Layout.KCRSc4k4,
    ("q8", "group"): Layout.GKCRSc4k4,
    ("q8", "chan"): Layout.C11RSc4,
    ("q8", "hybrid"): Layout.KRSCk4,
}

# ----------------------------------------------------------------------------------------------
# 4-lane vector operations per (ISA kind, element type): NEON intrinsics or scalar C, same names

_NEON_F32 = """#define xm_v_neon_f32 float32x4_t
#define xm_ld_neon_f32(p) vld1q_f32(p)
#define xm_st_neon_f32(p, v) vst1q_f32(p, v)
#define xm_dup_neon_f32(x) vdupq_n_f32(x)
#define xm_fmal_neon_f32(a, w, x, l) vfmaq_laneq_f32(a, w, x, l)
#define xm_fma_neon_f32(a, w, x) vfmaq_f32(a, w, x)
#define xm_fman_neon_f32(a, w, s) vfmaq_n_f32(a, w, s)
#define xm_max0_neon_f32(v) vmaxq_f32(v, vdupq_n_f32(0.f))
#define xm_add_neon_f32(a, b) vaddq_f32(a, b)
"""
_NEON_F16 = """#define xm_v_neon_f16 float16x4_t
#define xm_ld_neon_f16(p) vld1_f16(p)
#define xm_st_neon_f16(p, v) vst1_f16(p, v)
#define xm_dup_neon_f16(x) vdup_n_f16(x)
#define xm_fmal_neon_f16(a, w, x, l) vfma_lane_f16(a, w, x, l)
#define xm_fma_neon_f16(a, w, x) vfma_f16(a, w, x)
#define xm_fman_neon_f16(a, w, s) vfma_n_f16(a, w, s)
#define xm_max0_neon_f16(v) vmax_f16(v, vdup_n_f16(0))
#define xm_add_neon_f16(a, b) vadd_f16(a, b)
"""
_NEON_F16C32 = """#define xm_v_neon_f16c32 float32x4_t
#define xm_ld_neon_f16c32(p) vcvt_f32_f16(vld1_f16(p))
#define xm_st_neon_f16c32(p, v) vst1_f16(p, vcvt_f16_f32(v))
#define xm_dup_neon_f16c32(x) vdupq_n_f32((float)(x))
#define xm_fmal_neon_f16c32(a, w, x, l) vfmaq_laneq_f32(a, w, x, l)
#define xm_fma_neon_f16c32(a, w, x) vfmaq_f32(a, w, x)
#define xm_fman_neon_f16c32(a, w, s) vfmaq_n_f32(a, w, (float)(s))
#define xm_max0_neon_f16c32(v) vmaxq_f32(v, vdupq_n_f32(0.f))
#define xm_add_neon_f16c32(a, b) vaddq_f32(a, b)
"""


def _scalar_ops(tag: str, storage: str, compute: str) -> str:
    """The same operations as plain C on a 4-element struct."""
    v = f"xm_v_{tag}"
    return f"""typedef struct {{ {compute} v[4]; }} {v};
static inline {v} xm_ld_{tag}(const {storage}* p) {{
  {v} r;
  for (int i = 0;
  i < 4;
  ++i) r.v[i] = ({compute})p[i];
  return r;
}}
static inline void xm_st_{tag}({storage}* p, {v} a) {{
  for (int i = 0;
  i < 4;
  ++i) p[i] = ({storage})a.v[i];
}}
static inline {v} xm_dup_{tag}({compute} x) {{ {v} r; for (int i = 0; i < 4; ++i) r.v[i] = x; return r; }}
static inline {v} xm_fmal_{tag}({v} a, {v} w, {v} x, int l) {{
  for (int i = 0;
  i < 4;
  ++i) a.v[i] += w.v[i] * x.v[l];
  return a;
}}
static inline {v} xm_fma_{tag}({v} a, {v} w, {v} x) {{
  for (int i = 0;
  i < 4;
  ++i) a.v[i] += w.v[i] * x.v[i];
  return a;
}}
static inline {v} xm_fman_{tag}({v} a, {v} w, {compute} s) {{
  for (int i = 0;
  i < 4;
  ++i) a.v[i] += w.v[i] * s;
  return a;
}}
static inline {v} xm_add_{tag}({v} a, {v} b) {{
  for (int i = 0; i < 4; ++i) a.v[i] += b.v[i];
  return a;
}}
static inline {v} xm_max0_{tag}({v} a) {{
  for (int i = 0;
  i < 4;
  ++i) a.v[i] = a.v[i] <= 0 ? 0 : a.v[i];
  return a;
}}
"""


# int8: a 4x4 filter block times the 4 input channels of one pixel into 4 int32 accumulators
_NEON_Q8 = """#define xm_vq_neon int32x4_t
#define xm_qzero_neon() vdupq_n_s32(0)
/* dot: acc[k] += sum_c w[k*4 + c] * x[c] (KCRSk4c4 block), one sdot */
#define xm_qdot_neon(a, w, x) \\
  vdotq_s32(a, vld1q_s8(w), vreinterpretq_s8_s32(vld1q_dup_s32((const int32_t*)(x))))
/* c4k4 block without dot: acc[k] += sum_c w[c*4 + k] * x[c] */
static inline int32x4_t xm_qc4k4_neon(int32x4_t a, const int8_t* w, const int8_t* x) {
  const int16x8_t w01 = vmovl_s8(vld1_s8(w)), w23 = vmovl_s8(vld1_s8(w + 8));
  a = vmlal_n_s16(a, vget_low_s16(w01), x[0]);
  a = vmlal_n_s16(a, vget_high_s16(w01), x[1]);
  a = vmlal_n_s16(a, vget_low_s16(w23), x[2]);
  return vmlal_n_s16(a, vget_high_s16(w23), x[3]);
}
/* channel-wise: acc[k] += w[k] * x[k] */
static inline int32x4_t xm_qmul4_neon(int32x4_t a, const int8_t* w, const int8_t* x) {
  int16x4_t w16 = vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vld1_dup_s32((const int32_t*)w))));
  int16x4_t x16 = vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vld1_dup_s32((const int32_t*)x))));
  return vmlal_s16(a, w16, x16);
}
/* hybrid: acc[k] += w[k] * s */
static inline int32x4_t xm_qman_neon(int32x4_t a, const int8_t* w, int8_t s) {
  int16x4_t w16 = vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vld1_dup_s32((const int32_t*)w))));
  return vmlal_n_s16(a, w16, s);
}
/* the 4 lanes of an accumulator, for the scalar requantization (requant.py) */
static inline void xm_qlanes_neon(int32_t* lanes, int32x4_t a) { vst1q_s32(lanes, a); }
"""

_C_Q8 = """typedef struct { int32_t v[4]; } xm_vq_c;
static inline xm_vq_c xm_qzero_c(void) { xm_vq_c r = {{0, 0, 0, 0}}; return r; }
static inline xm_vq_c xm_qdot_c(xm_vq_c a, const int8_t* w, const int8_t* x) {
  for (int k = 0; k < 4; ++k) for (int c = 0; c < 4; ++c) a.v[k] += (int32_t)w[k * 4 + c] * x[c];
  return a;
}
static inline xm_vq_c xm_qc4k4_c(xm_vq_c a, const int8_t* w, const int8_t* x) {
  for (int c = 0; c < 4; ++c) for (int k = 0; k < 4; ++k) a.v[k] += (int32_t)w[c * 4 + k] * x[c];
  return a;
}
static inline xm_vq_c xm_qmul4_c(xm_vq_c a, const int8_t* w, const int8_t* x) {
  for (int k = 0; k < 4; ++k) a.v[k] += (int32_t)w[k] * x[k];
  return a;
}
static inline xm_vq_c xm_qman_c(xm_vq_c a, const int8_t* w, int8_t s) {
  for (int k = 0; k < 4; ++k) a.v[k] += (int32_t)w[k] * s;
  return a;
}
static inline void xm_qlanes_c(int32_t* lanes, xm_vq_c a) {
  for (int k = 0; k < 4; ++k) lanes[k] = a.v[k];
}
"""


def float_tag(isa: str, dtype: str, acc: str) -> str:
    """The vector-operation family a float kernel uses."""
    kind = "c" if isa == "generic" else "neon"
    if dtype == "f32":
        return f"{kind}_f32"
    return f"{kind}_f16c32" if acc == "f32" else f"{kind}_f16"


STORAGE = {"f32": "float", "f16": "float16_t"}

# The float kernels' epilogue: float32 takes bias, residual and every activation. Float16 results take
# the activations only: ReLU and ReLU6 on the accumulators (they commute with the rounding to float16),
# sigmoid and h_swish on the stored float16 value, in float32: what the graph computes without fusion
FLOAT_EPILOGUES = {
    "float32": FULL_EPILOGUE,
    "float16": EpilogueSupport(activations=frozenset(ACTIVATIONS)),
}


def relu6_helper(tag: str) -> str:
    """``xm_relu6_<tag>(v)``: ``min(max(v, 0), 6)`` per lane with NaN kept, as the reference's (NEON
    ``fmax``/``fmin`` return NaN when an operand is; the scalar form compares so that NaN passes).
    Emitted beside the kernels that use it, so code without ReLU6 is unchanged."""
    v = f"xm_v_{tag}"
    if tag == "neon_f16":
        body = "return vmin_f16(vmax_f16(a, vdup_n_f16(0)), vdup_n_f16(6));"
    elif tag.startswith("neon"):
        body = "return vminq_f32(vmaxq_f32(a, vdupq_n_f32(0.f)), vdupq_n_f32(6.f));"
    else:
        body = (
            "for (int i = 0; i < 4; ++i) { a.v[i] = a.v[i] <= 0 ? 0 : a.v[i]; "
            "a.v[i] = a.v[i] >= 6 ? 6 : a.v[i]; } return a;"
        )
    guard = f"XM_RELU6_{tag.upper()}"
    return f"#ifndef {guard}\n#define {guard}\nstatic inline {v} xm_relu6_{tag}({v} a) {{ {body} }}\n#endif\n"


MODES = {
    Layout.KCRSc4k4: "dense", Layout.KCRSk4c4: "dense", Layout.GKCRSc4k4: "group", Layout.GKCRSk4c4: "group",
    Layout.C11RSc4: "chan", Layout.KRSCk4: "hybrid",
}  # fmt: skip


DOT_FILTERS = (Layout.KCRSk4c4, Layout.GKCRSk4c4)


def nchw44_common(
    op: Operation, isa: str
) -> tuple[dict[str, Any], list[SSAValue | np.ndarray], Layout] | None:
    assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
    p = op.params()
    if p["format"] not in (enums.Format.NCHW44, enums.Format.NCHW44_DOT):
        return None
    if p["mode"] != enums.ConvMode.CROSS_CORRELATION:
        return None
    x, w, *rest = op.operands
    geometry = blocked_conv_geometry(op, MODES, 4)
    if geometry is None:
        return None
    flayout = L.layout_of(w.type)
    oc = geometry["oc"]
    params: dict[str, Any] = {**geometry, "bias": 0, "act": "identity"}
    operands: list[SSAValue | np.ndarray] = [x, w]
    if isinstance(op, T.ConvBiasOp):
        params["act"] = ACT.get(p["nonline_mode"], "")
        if not params["act"]:
            return None
        # a per-channel bias and/or a tensor of the result's shape (a fused residual add)
        out_type = op.results[0].type
        bias = [b for b in rest if math.prod(shape(b)) == oc and L.layout_of(b.type) in (Layout.NCHW44, None)]
        res = [b for b in rest if b.type == out_type and b not in bias]
        if len(bias) > 1 or len(res) > 1 or len(bias) + len(res) != len(rest):
            return None
        if bias:
            params["bias"] = 1
            operands.append(bias[0])
        if res:
            params["residual"] = 1
            operands.append(res[0])
    return params, operands, flayout


def conv_args(p: dict[str, Any]) -> str:
    """The C parameters of a NEON convolution kernel: input, filter, the bias and residual it fuses,
    output, workspace and thread count."""
    return ", ".join(
        ["const void* x_", "const void* w_", *(["const void* bias_"] if p["bias"] else []),
         *(["const void* res_"] if p.get("residual") else []), "void* y_", "unsigned char* ws", "int nt"]
    )  # fmt: skip


def conv_head(sym: str, p: dict[str, Any], ctype: str, wtype: str, btype: str) -> str:
    """A NEON convolution kernel's signature line and the typed input, filter, output, bias and
    residual pointers (the absent ones null)."""
    return f"""static void {sym}({conv_args(p)}) {{
  const {ctype}* x = (const {ctype}*)x_;
  const {wtype}* w = (const {wtype}*)w_;
  {ctype}* y = ({ctype}*)y_;
  const {btype}* bias = {"(const " + btype + "*)bias_" if p["bias"] else "0"};
  const {ctype}* res = {"(const " + ctype + "*)res_" if p.get("residual") else "0"};"""


def nchw44_float(op: Operation, isa: str) -> Lowered | None:
    got = nchw44_common(op, isa)
    if got is None:
        return None
    params, operands, flayout = got
    dt = code(op.operands[0])
    if dt not in ("f32", "f16") or any(code(v) != dt for v in (*op.operands, *op.results)):
        return None
    acc = dt
    if dt == "f16" and op.params().get("compute_mode") == enums.ComputeMode.FLOAT32:
        acc = "f32"
    if dt == "f16" and acc == "f16" and isa not in ("fp16", "generic"):
        return None  # float16 arithmetic needs ARMv8.2 FP16 (the fp16 ISA)
    params.update(dtype=dt, acc=acc)
    return Lowered(params, operands)


class FloatConvNchw44(Template):
    """A float NCHW44 convolution unit of one ISA: :func:`nchw44_float`'s convolutions that
    :meth:`accepts` keeps, float16 ones only when computed in float16 on the ``fp16`` ISA."""

    def __init__(self, isa: str):
        self.isa = isa

    def accepts(self, p: dict[str, Any]) -> bool:
        raise NotImplementedError

    def match(self, op: Operation) -> Lowered | None:
        lowered = nchw44_float(op, self.isa)
        if lowered is None or not self.accepts(lowered.params):
            return None
        p = lowered.params
        if p["dtype"] == "f16" and (p["acc"] != "f16" or self.isa != "fp16"):
            return None  # float16 storage computed in float32 stays with the direct kernel
        return lowered


def nchw44_int8(op: Operation, isa: str, dot: bool) -> Lowered | None:
    got = nchw44_common(op, isa)
    if got is None:
        return None
    params, operands, flayout = got
    x, w = op.operands[0], op.operands[1]
    if code(x) != "q8" or code(w) != "q8" or (flayout in DOT_FILTERS) != dot or params.get("residual"):
        return None
    if qparams(x)[1] or qparams(w)[1] or params["act"] not in INT8_ACT.values():
        return None
    rq = requant_params(x, w, op.results[0])
    if rq is None or rq["out"] not in ("q8", "q32_same") or rq["zp_out"]:
        return None
    params.update(dtype="q8", out=rq["out"], s_acc=rq["s_acc"], s_out=rq["s_out"], zp_out=0, qid=rq["qid"])
    if params["bias"]:
        b = bias_values(op.operands[2], acc_scale(x, w), params)
        if b is None or b.size != params["oc"]:
            return None
        operands[2] = b
    return Lowered(params, operands)


class ConvNchw44(Template):
    """Direct NCHW44 convolution; ``kind`` is ``float``, ``dot`` or ``q8`` (see the module doc)."""
    examples = (
        E.conv2d((1, 8, 9, 11), 12, 3, pad=1, act="relu"),
        E.conv2d((2, 4, 7, 6), 8, 3, stride=2, pad=1, residual=True),
        E.conv2d((1, 8, 7, 7), 8, 3, pad=2, dil=2, groups=2),
        E.conv2d_q8((1, 8, 9, 11), 12, 3, pad=1, act="relu"),
        E.conv2d_q8((2, 4, 7, 6), 8, 1, stride=2),
        E.conv2d_q8((1, 8, 9, 7), 8, 3, pad=1, groups=8),
        E.conv2d_q8((1, 16, 7, 7), 8, 3, pad=1, groups=2),
        E.conv2d_q8((1, 8, 9, 9), 12, 3, pad=2, dil=2),
    )

    FAMILIES = {"float": "conv2d_nchw44", "dot": "conv2d_nchw44_dot", "q8": "conv2d_nchw44_q8"}
    # the filter layout and element type decide which kind serves; int8 tries dot products first
    PRIORITIES = {"dot": 200, "float": 190, "q8": 180}
    ops = (T.ConvolutionOp, T.ConvBiasOp)

    def __init__(self, kind: str, isa: str):
        self.kind = kind
        self.family = self.FAMILIES[kind]  # type: ignore[misc]
        self.priority = self.PRIORITIES[kind]  # type: ignore[misc]
        self.epilogues = FLOAT_EPILOGUES if kind == "float" else {}  # type: ignore[misc]
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        if self.kind == "float":
            return nchw44_float(op, self.isa)
        return nchw44_int8(op, self.isa, dot=self.kind == "dot")

    # -- naming, sizes ---------------------------------------------------------------------------
    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family,
            self.isa,
            p["mode"],
            *conv_sym(p),
            p["dtype"] + ("c32" if p.get("acc") == "f32" and p["dtype"] == "f16" else ""),
            epilogue_sym(p),
            f"q{p['qid']}" if "qid" in p else "",
        )

    def _esize(self, p: dict[str, Any]) -> int:
        return {"f32": 4, "f16": 2, "q8": 1}[p["dtype"]]

    def _padded(self, p: dict[str, Any]) -> tuple[int, int]:
        return p["ih"] + 2 * p["ph"], p["iw"] + 2 * p["pw"]

    def _needs_pad(self, p: dict[str, Any]) -> bool:
        return bool(p["ph"] or p["pw"])

    def _strides(self, p: dict[str, Any], padded: bool) -> tuple[dict[str, int], ...]:
        """Per dimension (``N``, ``C/4``, ``H``): the strides of the input, of the input the kernel reads
        (the zero-padded copy of one image when ``padded``) and of the output; a hybrid (first) layer's
        input is plain NCHW."""
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        ihp, iwp = self._padded(p)
        nchw44 = SPECS[Layout.NCHW44]
        if p["mode"] == "hybrid":
            xin = {"N": ic * ih * iw, "C/4": ih * iw, "H": iw}
            xs = {"N": 0, "C/4": ihp * iwp, "H": iwp} if padded else xin
        else:
            xin = nchw44.dim_strides((n, ic, ih, iw))
            xs = nchw44.dim_strides((1, ic, ihp, iwp)) if padded else xin
        return xin, xs, nchw44.dim_strides((n, oc, oh, ow))

    def _input_of_image(self, p: dict[str, Any], ctype: str, padded: bool, channels: int, nbytes: int) -> str:
        """C (after a newline) pointing ``xp`` at image ``nn`` of the input: the input itself, or its
        zero-padded copy of ``channels`` planes (``nbytes`` in all) written into the workspace."""
        xin, xs, _ = self._strides(p, padded)
        if not padded:
            return f"\n    const {ctype}* xp = x + (long)nn * {xin['N']};"
        lane = 1 if p["mode"] == "hybrid" else 4  # input elements per pixel and channel step
        row_bytes = p["iw"] * lane * self._esize(p)
        return f"""
    {ctype}* xp = ({ctype}*)ws;
    memset(xp, 0, {nbytes});
    for (int c = 0; c < {channels}; ++c)
      for (int yy = 0; yy < {p["ih"]}; ++yy)
        memcpy(xp + (long)c * {xs["C/4"]} + (long)(yy + {p["ph"]}) * {xs["H"]} + {p["pw"] * lane},
               x + (long)nn * {xin["N"]} + (long)c * {xin["C/4"]} + (long)yy * {xin["H"]}, {row_bytes});"""

    def workspace(self, p: dict[str, Any]) -> int:
        if not self._needs_pad(p):
            return 0
        ihp, iwp = self._padded(p)
        channels = p["ic"] if p["mode"] == "hybrid" else -(-p["ic"] // 4) * 4
        return channels * ihp * iwp * self._esize(p)

    def support(self, em: CEmitter) -> str:
        if self.kind == "float":
            if self.isa == "generic":
                return "".join(
                    _scalar_ops(t, s, c)
                    for t, s, c in (("c_f32", "float", "float"), ("c_f16", "float16_t", "float16_t"),
                                    ("c_f16c32", "float16_t", "float"))
                )  # fmt: skip
            return _NEON_F32 + (_NEON_F16 + _NEON_F16C32 if self.isa == "fp16" else _NEON_F16C32)
        return "#include <stdint.h>\n" + (_C_Q8 if self.isa == "generic" else _NEON_Q8) + REQUANT_C

    # -- code ------------------------------------------------------------------------------------
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        mode, g = p["mode"], p["groups"]
        hybrid = mode == "hybrid"
        is_float = self.kind == "float"
        ctype = STORAGE[p["dtype"]] if is_float else "int8_t"
        otype = ctype if is_float else OUT_CTYPES[p["out"]]  # int8, or the int32 accumulator
        ihp, iwp = self._padded(p)
        pad = self._needs_pad(p)
        # activation strides (layout.py): input (padded copy or the input itself) and output
        src_layout = None if hybrid else SPECS[Layout.NCHW44]
        out_st = SPECS[Layout.NCHW44].dim_strides((n, oc, oh, ow))
        in_shape = (1, ic, ihp, iwp) if pad else (n, ic, ih, iw)
        if src_layout is not None:
            xs = src_layout.dim_strides(in_shape)
            xs_img = src_layout.dim_strides((n, ic, ih, iw))
            x_c, x_h, x_w, x_img = xs["C/4"], xs["H"], xs["W"], xs_img["N"]
        else:  # plain NCHW input
            x_c, x_h, x_w, x_img = ihp * iwp if pad else ih * iw, iwp if pad else iw, 1, ic * ih * iw
        wl = FILTERS[(self.kind if self.kind != "float" else "float", mode)]
        wst = SPECS[wl].dim_strides(self._filter_logical(p))
        ocb_per_g = oc // g // 4 if mode != "chan" else 1
        groups_b = g if mode != "chan" else g // 4  # loop count of the outer group index
        icb_per_g = (ic // g) // 4 if mode in ("dense", "group") else 0
        # the weight block of (group gi, output block kb in group, input block cb, r, s)
        if mode == "dense":
            wblk = f"kb * {wst['K/4']} + cb * {wst['C/4']} + r * {wst['R']} + s * {wst['S']}"
        elif mode == "group":
            wblk = (
                f"gi * {wst['G']} + kb * {wst['K/4']} + cb * {wst['C/4']} + r * {wst['R']} + s * {wst['S']}"
            )
        elif mode == "chan":
            wblk = f"gi * {wst['G/4']} + r * {wst['R']} + s * {wst['S']}"
        else:
            wblk = f"kb * {wst['K/4']} + r * {wst['R']} + s * {wst['S']} + c * {wst['C']}"
        # the absolute output block and input block
        kabs = "gi" if mode == "chan" else f"(gi * {ocb_per_g} + kb)"
        cabs = "gi" if mode == "chan" else f"(gi * {icb_per_g} + cb)"
        xpix = f"xp + (long)(oy * {sh} + r * {dh}) * {x_h} + (long)((ox + j) * {sw} + s * {dw}) * {x_w}"

        # the accumulation statement for output column j
        if is_float:
            tag = float_tag(self.isa, p["dtype"], p.get("acc", p["dtype"]))
            vt = f"xm_v_{tag}"
            zero = f"xm_dup_{tag}(0)"
            if mode in ("dense", "group"):
                pre = "".join(f"const {vt} w{c} = xm_ld_{tag}(wb + {c * wst['C%4']});\n" for c in range(4))
                step = (
                    f"{{ const {vt} xv = xm_ld_{tag}(xc + {{off}}); "
                    + " ".join(f"acc[j] = xm_fmal_{tag}(acc[j], w{c}, xv, {c});" for c in range(4))
                    + " }"
                )
            elif mode == "chan":
                pre = f"const {vt} w0 = xm_ld_{tag}(wb);\n"
                step = f"acc[j] = xm_fma_{tag}(acc[j], w0, xm_ld_{tag}(xc + {{off}}));"
            else:
                pre = f"const {vt} w0 = xm_ld_{tag}(wb);\n"
                step = f"acc[j] = xm_fman_{tag}(acc[j], w0, (xc + {{off}})[0]);"
        else:
            tag = "c" if self.isa == "generic" else "neon"
            vt = f"xm_vq_{tag}"
            zero = f"xm_qzero_{tag}()"
            pre = ""
            fn = (
                {"dot": "qdot", "q8": "qc4k4"}[self.kind]
                if mode in ("dense", "group")
                else ("qmul4" if mode == "chan" else "qman")
            )
            if mode == "hybrid":
                step = f"acc[j] = xm_{fn}_{tag}(acc[j], wb, (xc + {{off}})[0]);"
            else:
                step = f"acc[j] = xm_{fn}_{tag}(acc[j], wb, xc + {{off}});"
        off = f"(long)(oy * {sh} + r * {dh}) * {x_h} + (long)((ox + j) * {sw} + s * {dw}) * {x_w}"
        step = step.replace("{off}", off)
        del xpix

        # reduction loops over input channels (blocks) and taps
        if mode in ("dense", "group"):
            red_open = (
                f"for (int cb = 0; cb < {icb_per_g}; ++cb) {{\n"
                f" const {ctype}* xc = xp + (long){cabs} * {x_c};"
            )
        elif mode == "chan":
            red_open = f"{{ const {ctype}* xc = xp + (long)gi * {x_c};"
        else:
            red_open = f"for (int c = 0; c < {ic}; ++c) {{\n const {ctype}* xc = xp + (long)c * {x_c};"
        taps = (
            f"for (int r = 0; r < {fh}; ++r) for (int s = 0; s < {fw}; ++s) {{\n"
            f"  const {ctype}* wb = w + {wblk};\n  {pre}"
            f"  for (int j = 0; j < jn; ++j) {step}\n}}"
        )

        # epilogue: bias (float) / int32 bias at the accumulator scale (int8), activation, store
        yblk = f"y + (long)nn * {out_st['N']} + (long){kabs} * {out_st['C/4']} + (long)oy * {out_st['H']}"
        if is_float:
            init = f"xm_ld_{tag}(bias + (long){kabs} * 4)" if p["bias"] else zero
            fin = ""
            if p.get("residual"):
                roff = f"(yo - y) + (long)(ox + j) * {out_st['W']}"
                fin = f"acc[j] = xm_add_{tag}(acc[j], xm_ld_{tag}(res + {roff}));"
            if p["act"] == "relu":
                fin += f" acc[j] = xm_max0_{tag}(acc[j]);"
            elif p["act"] == "relu6":
                fin += f" acc[j] = xm_relu6_{tag}(acc[j]);"
            store = f"xm_st_{tag}(yo + (long)(ox + j) * {out_st['W']}, acc[j]);"
            if p["act"] not in ("identity", "relu", "relu6"):
                store += (
                    f" for (int k = 0; k < 4; ++k) {{ {ctype}* e = yo + (long)(ox + j) * {out_st['W']} + k;"
                    f" *e = ({ctype})xm_act_{p['act']}((float)*e); }}"
                )
            bias_param = f"const {ctype}* bias = (const {ctype}*)bias_;" if p["bias"] else ""
            if p.get("residual"):
                bias_param += f" const {ctype}* res = (const {ctype}*)res_;"
        else:
            # an int8 result: the float32 bias joins after scaling (requant.post_processed); the
            # int32 accumulator as the result: the int32 bias joins the integers
            init = zero
            fin = f"int32_t lanes[4]; xm_qlanes_{tag}(lanes, acc[j]);"
            bias_at = f"bias[(long){kabs} * 4 + k]"
            int_bias = f"lanes[k] += {bias_at};" if p["bias"] and not post_processed(p) else ""
            value = result_expr(p, "lanes[k]", bias_at)
            store = (
                f"for (int k = 0; k < 4; ++k) {{ {int_bias} {int_activation(p, 'lanes[k]')} "
                f"yo[(long)(ox + j) * {out_st['W']} + k] = {value}; }}"
            )
            bias_param = f"const {bias_ctype(p)}* bias = (const {bias_ctype(p)}*)bias_;" if p["bias"] else ""

        # the padded copy of one image
        if pad:
            channels = ic if hybrid else -(-ic // 4)
            lane = 1 if hybrid else 4
            pad_code = f"""
    {ctype}* xp = ({ctype}*)ws;
    memset(xp, 0, {self.workspace(p)});
    for (int c = 0; c < {channels}; ++c)
      for (int yy = 0; yy < {ih}; ++yy)
        memcpy(xp + (long)c * {x_c} + (long)(yy + {ph}) * {x_h} + (long){pw} * {x_w},
               x + (long)nn * {x_img} + (long)c * {(ih * iw * lane)} + (long)yy * {iw * lane},
               {iw * lane * self._esize(p)});"""
        else:
            pad_code = f"\n    const {ctype}* xp = x + (long)nn * {x_img};"

        helpers = relu6_helper(tag) if is_float and p["act"] == "relu6" else ""
        code = f"""{helpers}
static void {sym}({conv_args(p)}) {{
  const {ctype}* x = (const {ctype}*)x_;
  const {ctype}* w = (const {ctype}*)w_;
  {otype}* y = ({otype}*)y_;
  {bias_param}
  (void)ws;
  for (int nn = 0; nn < {n}; ++nn) {{{pad_code}
    #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
    for (int gi = 0; gi < {groups_b}; ++gi)
    for (int kb = 0; kb < {ocb_per_g}; ++kb) {{
      for (int oy = 0; oy < {oh}; ++oy) {{
        {otype}* yo = {yblk};
        for (int ox = 0; ox < {ow}; ox += {OWB}) {{
          const int jn = {ow} - ox < {OWB} ? {ow} - ox : {OWB};
          {vt} acc[{OWB}];
          for (int j = 0; j < {OWB}; ++j) acc[j] = {init};
          {red_open}
            {taps}
          }}
          for (int j = 0; j < jn; ++j) {{ {fin} {store} }}
        }}
      }}
    }}
  }}
}}
"""
        return code if is_float else exact(code)

    def _filter_logical(self, p: dict[str, Any]) -> tuple[int, ...]:
        mode, g = p["mode"], p["groups"]
        if mode in ("dense", "hybrid"):
            return (p["oc"], p["ic"], p["fh"], p["fw"])
        return (g, p["oc"] // g, p["ic"] // g, p["fh"], p["fw"])


class PoolNchw44(Template):
    """Max / average pooling of NCHW44 activations, 4 channels per vector (float32, float16, int8)."""
    examples = (
        E.conv_chain((1, 4, 9, 11), (8, 1, 1, 1, "relu"), pool=("max", 3, 2, 1)),
        E.conv_chain((2, 4, 7, 6), (4, 3, 1, 1, "identity"), pool=("average", 2, 2, 0)),
    )

    family = "pool2d_nchw44"
    ops = (T.PoolingOp, T.AdaptivePoolingOp)
    priority = 200

    def __init__(self, isa: str):
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
        if op.params()["format"] != enums.Format.NCHW44 or not same_type(op):
            return None
        dt = code(op.operands[0])
        if dt not in ("f32", "f16", "q8") or (dt == "q8" and qparams(op.operands[0])[1]):
            return None
        params = pool_geometry(op)
        if params is None or params["c"] % 4:
            return None
        params["dtype"] = dt
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("pool2d_nchw44", self.isa, p["mode"], *plane_sym(p), p["dtype"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        xs = SPECS[Layout.NCHW44].dim_strides((n, c, ih, iw))
        ys = SPECS[Layout.NCHW44].dim_strides((n, c, oh, ow))
        dtype, mode = p["dtype"], p["mode"]
        ctype = {"f32": "float", "f16": "float16_t", "q8": "int8_t"}[dtype]
        # accumulate in float for float types, exactly in int32 for int8
        acc_t = "int32_t" if dtype == "q8" else "float"
        if mode == "max":
            init = "-128" if dtype == "q8" else "-INFINITY"
            step = "if (e > a[k]) a[k] = e;"
        else:
            init = "0"
            step = "a[k] += e;"
        if mode == "max":
            fin = f"({ctype})a[k]"
        elif dtype == "q8":
            # round(total / count), ties away from zero, in integers (the reference's pooler)
            fin = "(int8_t)(a[k] >= 0 ? (2 * a[k] + cn) / (2 * cn) : -((2 * -a[k] + cn) / (2 * cn)))"
        else:
            fin = f"({ctype})(a[k] / (float)cn)"
        cn = str(fh * fw) if mode == "average" else "cnt"
        vec = self.isa != "generic" and dtype == "f32" and mode == "max"  # NEON: a pixel is a vector
        scalar_tap = [
            f"const {ctype}* e4 = xb + (long)yy * {xs['H']} + (long)xx * {xs['W']};",
            f"for (int k = 0; k < 4; ++k) {{ const {acc_t} e = ({acc_t})e4[k]; {step} }}",
            "++cnt;",
        ]
        body_scalar = f"""
          {acc_t} a[4] = {{{init}, {init}, {init}, {init}}};
          int cnt = 0;
{window_taps(p, scalar_tap, " " * 10)}
          const int cn = {cn};
          (void)cn;
          for (int k = 0; k < 4; ++k) yb[(long)oy * {ys["H"]} + (long)ox * {ys["W"]} + k] = {fin};"""
        neon_tap = f"a = vmaxq_f32(a, vld1q_f32(xb + (long)yy * {xs['H']} + (long)xx * {xs['W']}));"
        body_neon = f"""
          float32x4_t a = vdupq_n_f32(-INFINITY);
{window_taps(p, [neon_tap], " " * 10)}
          vst1q_f32(yb + (long)oy * {ys["H"]} + (long)ox * {ys["W"]}, a);"""
        body = body_neon if vec else body_scalar
        return pool_planes(sym, ctype, n, c, xs, ys, f"""      for (int oy = 0; oy < {oh}; ++oy)
        for (int ox = 0; ox < {ow}; ++ox) {{{body}
        }}""")


def pool_planes(
    sym: str, ctype: str, n: int, c: int, xs: dict[str, int], ys: dict[str, int], body: str
) -> str:
    """An NCHW44 pooling kernel over ``ctype`` activations: ``body`` run once per (image, 4-channel
    block) plane, in parallel, with ``xb``/``yb`` at the plane's input and output."""
    return f"""
static void {sym}(const void* x_, void* y_, unsigned char* ws, int nt) {{
  const {ctype}* x = (const {ctype}*)x_;
  {ctype}* y = ({ctype}*)y_;
  (void)ws;
  #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
  for (int nn = 0; nn < {n}; ++nn)
    for (int cb = 0; cb < {c // 4}; ++cb) {{
      const {ctype}* xb = x + (long)nn * {xs["N"]} + (long)cb * {xs["C/4"]};
      {ctype}* yb = y + (long)nn * {ys["N"]} + (long)cb * {ys["C/4"]};
{body}
    }}
}}
"""


KERNEL_UNITS = (
    *(ConvNchw44("float", isa) for isa in ("neon", "fp16", "generic")),
    *(ConvNchw44("dot", isa) for isa in ("dot", "generic")),
    *(ConvNchw44("q8", isa) for isa in ("neon", "generic")),
    *(PoolNchw44(isa) for isa in ("neon", "generic")),
)
