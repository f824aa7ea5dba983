"""Portable C templates (ISA ``generic``): every C target can run them, and gcc vectorises their inner
loops for the target's flags. Shapes, strides and windows are compile-time constants of each
specialisation, so the loops have known trip counts and no index arithmetic survives in inner loops.

Families: ``conv2d_depthwise`` (direct, interior/border split), ``pool2d``, ``elemwise`` (any broadcast,
as collapsed strided loops), ``softmax``, ``reduce``, ``copy`` (strided copy: transposes, slices,
broadcasts), ``concat``, ``split``; the last three for every element type (``elem``: ``f32``, or
``e<bytes>`` moved as raw words).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import (
    POOL_NAMES,
    axis_split,
    code,
    conv_common,
    depthwise_lowered,
    esize,
    is_f32,
    same_plain_type,
    strided_view,
)
from backends.c.templates import Template, epilogue_sym, plane_sym, strided_index, sym_join
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.lowering.kernels import FULL_EPILOGUE, Lowered, broadcast_strides, collapse, shape
from semantics.kernels import adaptive_pool_params

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

_PAR = "#pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {work} > 32768)"


def _ptr_args(n_in: int, n_out: int) -> str:
    ins = [f"const void* in{i}_" for i in range(n_in)]
    outs = [f"void* out{i}_" for i in range(n_out)]
    return ", ".join([*ins, *outs, "unsigned char* ws", "int nt"])


BYTES_CTYPE = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}
# C types of the element types the portable float kernels also read or write
ELEM_CTYPES = {"f32": "float", "b1": "uint8_t", "i32": "int32_t"}
ESIZE = {f"e{n}": n for n in BYTES_CTYPE}


def moved_elements(op: Operation, blocked: bool = False) -> str | None:
    """How the data movement kernels (copy, concat, split) move ``op``'s elements: ``f32`` as floats
    (any layout), ``e<bytes>`` as raw words for another element type shared by every operand and
    result in plain layout (or, with ``blocked``, in one common layout: concat and split along a
    physical axis of blocked tensors, e.g. the C/4 blocks of two int8 NCHW44 tensors, are the same
    row copies as in plain layout), None otherwise."""
    if is_f32(*op.operands, *op.results):
        return "f32"
    if same_plain_type(op):
        return f"e{esize(op.operands[0])}"
    values = [*op.operands, *op.results]
    layouts = {L.layout_of(v.type) for v in values}
    types = {v.type.element_type for v in values}  # type: ignore[attr-defined]
    if blocked and len(layouts) == 1 and len(types) == 1 and code(values[0]) not in ("f32", None):
        return f"e{esize(values[0])}"
    return None


def _par(work: int) -> str:
    return _PAR.format(work=work)


# Threads for the vectorised float32 kernels (x86 NCHW88, Winograd, packed GEMM, depthwise). One
# parallel region costs a fork and a join: a few microseconds with the other thread spinning, tens
# when it has to be woken. A kernel runs on a thread only for every MIN_WORK_PER_THREAD units of
# its work (multiply-adds; window taps for pooling), about 5-10 us of vectorised work on one core,
# so that the region's cost stays small against each thread's share; below two shares it opens no
# parallel region at all (the 7x7 and 14x14 layers of MobileNetV2 and ShuffleNetV2 with few channels).
MIN_WORK_PER_THREAD = 1 << 18


def parallel_threads(work: int) -> int:
    """The most threads a kernel of ``work`` units runs on (1: no parallel region)."""
    return max(1, work // MIN_WORK_PER_THREAD)


def omp_parallel(work: int, construct: str = "parallel for schedule(static)") -> str:
    """``#pragma omp <construct>`` on at most :func:`parallel_threads` of the model's ``nt`` threads,
    or nothing where ``work`` is too small for two threads (the loop then runs in the caller)."""
    cap = parallel_threads(work)
    if cap < 2:
        return ""
    return f"#pragma omp {construct} num_threads(nt < {cap} ? nt : {cap}) if(nt > 1)"


def omp_for(region: str, collapse: int = 1, nowait: bool = False) -> str:
    """The worksharing ``for`` inside a region opened by :func:`omp_parallel` (nothing without one):
    several loops of one kernel share one region, each ending at a barrier unless ``nowait`` (the
    last loop of the region, whose end is the join, or one that no later loop depends on)."""
    if not region:
        return ""
    return (
        "#pragma omp for schedule(static)"
        + (f" collapse({collapse})" if collapse > 1 else "")
        + (" nowait" if nowait else "")
    )


# ----------------------------------------------------------------------------------------------
# Elementwise


# mode -> C expression over a, b, c, d (the operands in order), computed as the reference does
# (backends/reference/kernels.py: ELEMWISE); float32 operands unless BOOL_MODES / INT_MODES say more
ELEMWISE_C: dict[str, str] = {
    "relu": "(a <= 0.f ? 0.f : a)",
    "abs": "fabsf(a)",
    "acos": "acosf(a)",
    "asin": "asinf(a)",
    "ceil": "ceilf(a)",
    "floor": "floorf(a)",
    "cos": "cosf(a)",
    "sin": "sinf(a)",
    "tan": "tanf(a)",
    "exp": "expf(a)",
    "expm1": "expm1f(a)",
    "log": "logf(a)",
    "log1p": "log1pf(a)",
    "negate": "-a",
    "sigmoid": "xm_act_sigmoid(a)",
    "tanh": "tanhf(a)",
    "fast_tanh": "tanhf(a)",
    "sinh": "sinhf(a)",
    "cosh": "coshf(a)",
    "asinh": "asinhf(a)",
    "acosh": "acoshf(a)",
    "atanh": "atanhf(a)",
    "round": "(a >= 0.f ? floorf(a + 0.5f) : ceilf(a - 0.5f))",
    "erf": "erff(a)",
    "erfc": "(1.f - erff(a))",
    "gelu": "(float)((double)(0.5f * a) * (1.0 + erf((double)a * 0.70710678118654752440)))",
    "softplus": "xm_logaddexpf(0.f, a)",
    "logsigmoid": "(-xm_logaddexpf(0.f, -a))",
    "sign": "(a > 0.f ? 1.f : a < 0.f ? -1.f : a)",
    "add": "a + b",
    "sub": "a - b",
    "mul": "a * b",
    "true_div": "a / b",
    "floor_div": "floorf(a / b)",
    "mod": "fmodf(a, b)",
    "max": "xm_maxf(a, b)",
    "min": "xm_minf(a, b)",
    "pow": "powf(a, b)",
    "atan2": "atan2f(a, b)",
    "log_sum_exp": "xm_logaddexpf(a, b)",
    "abs_grad": "(a > 0.f ? b : a < 0.f ? -b : 0.f)",
    "sigmoid_grad": "b * a * (1.f - a)",
    "tanh_grad": "b * (1.f - a * a)",
    "fast_tanh_grad": "b * (1.f - a * a)",
    "h_swish_grad": "(a < -3.f ? 0.f : a > 3.f ? b : b * (2.f * a + 3.f) / 6.f)",
    "relu6_grad": "(a > 0.f && a < 6.f ? b : 0.f)",
    "fuse_add_relu": "(a + b <= 0.f ? 0.f : a + b)",
    "fuse_add_sigmoid": "xm_act_sigmoid(a + b)",
    "fuse_add_tanh": "tanhf(a + b)",
    "fuse_add_h_swish": "xm_act_hswish(a + b)",
    "fuse_mul_add3": "a * b + c",
    "fuse_mul_add4": "a * b + c * d",
    "cond_leq_mov": "(a <= b ? c : 0.f)",
    "cond_lt_mov": "(a < b ? c : 0.f)",
    "h_swish": "xm_act_hswish(a)",
    "relu6": "xm_act_relu6(a)",
    "hsigmoid": "xm_minf(xm_maxf(a + 3.f, 0.f), 6.f) / 6.f",
    "silu": "a * xm_act_sigmoid(a)",
    "sqrt": "sqrtf(a)",
    "square": "a * a",
    "clip": "xm_minf(xm_maxf(a, b), c)",
    "switch_gt0": "a > 0.f ? b : 0.f",
    "prelu": "a > 0.f ? a : a * b",
    # bool results (one byte, 0 or 1), float or bool operands
    "lt": "(a < b)",
    "leq": "(a <= b)",
    "eq": "(a == b)",
    "neq": "(a != b)",
    "isnan": "(a != a)",
    "isinf": "(isinf(a) != 0)",
    "not": "(!a)",
    "and": "(a && b)",
    "or": "(a || b)",
    "xor": "((!a) != (!b))",
}

# modes whose result is a bool, and those whose operands are bools
BOOL_RESULT_MODES = frozenset({"lt", "leq", "eq", "neq", "isnan", "isinf", "not", "and", "or", "xor"})
BOOL_OPERAND_MODES = frozenset({"not", "and", "or", "xor"})
# modes also run on int32 operands (the expression is the same in integers)
INT_MODES = frozenset({"add", "sub", "mul", "negate", "lt", "leq", "eq", "neq", "switch_gt0"})
# int32 arithmetic wraps around as numpy's (and the reference's) does: computed in uint32, where C
# defines overflow, instead of signed int32, where it is undefined behaviour
INT_WRAPPING_C = {
    "add": "(int32_t)((uint32_t)a + (uint32_t)b)",
    "sub": "(int32_t)((uint32_t)a - (uint32_t)b)",
    "mul": "(int32_t)((uint32_t)a * (uint32_t)b)",
    "negate": "(int32_t)(0u - (uint32_t)a)",
}


def elemwise_c(p: dict[str, Any]) -> tuple[list[str], str]:
    """The C types of an elementwise kernel's operands and result (``p["dtypes"]``, float32 when
    absent) and the C expression computing one element: the one definition the C and CUDA kernels
    render."""
    n = len(p["strides"])
    dtypes = p.get("dtypes", ("f32",) * (n + 1))
    expr = INT_WRAPPING_C.get(p["mode"]) if dtypes[0] == "i32" else None
    return [ELEM_CTYPES[c] for c in dtypes], expr or ELEMWISE_C[p["mode"]]


def elemwise_codes(mode: str, codes: Sequence[str | None]) -> bool:
    """Whether the portable elementwise kernel runs ``mode`` on these element-type codes (operands,
    then the result): float32 (or int32 for :data:`INT_MODES`) operands, bool ones for the logical
    modes, a bool result for comparisons."""
    *ins, out = codes
    if mode not in ELEMWISE_C:
        return False
    if mode in BOOL_OPERAND_MODES:
        return all(c == "b1" for c in ins) and out == "b1"
    operand = ins[0]
    if operand not in ("f32", "i32") or any(c != operand for c in ins):
        return False
    if operand == "i32" and mode not in INT_MODES:
        return False
    return out == ("b1" if mode in BOOL_RESULT_MODES else operand)


def _strided_loops(
    shape: Sequence[int], strides: Sequence[Sequence[int]], body: str, nt_work: int, pragma: str | None = None
) -> str:
    """Nested loops over ``shape``; ``body`` uses ``o`` (output offset) and ``x0..`` (operand offsets).
    The outer loop is shared over threads by ``pragma`` (default: the portable threshold on
    ``nt_work``); one of a single iteration opens no region."""
    nd = len(shape)
    lines = []
    out_strides = [math.prod(shape[i + 1 :]) for i in range(nd)]
    for i, d in enumerate(shape):
        if i == 0 and d > 1:
            lines.append(_par(nt_work) if pragma is None else pragma)
        lines.append(f"{'  ' * i}for (long i{i} = 0; i{i} < {d}; ++i{i}) {{")
    ind = "  " * nd
    o = " + ".join(f"i{i} * {out_strides[i]}L" for i in range(nd))
    lines.append(f"{ind}const long o = {o};")
    for k, st in enumerate(strides):
        lines.append(f"{ind}const long x{k} = {strided_index(st)};")
    lines.append(f"{ind}{body}")
    lines.extend("  " * i + "}" for i in range(nd - 1, -1, -1))
    return "\n".join(lines)


class Elemwise(Template):
    family = "elemwise"
    epilogue_consumer = True
    ops = (T.ElemwiseOp,)
    priority = 100
    examples = (
        E.elemwise("add", (3, 1, 5), (1, 4, 5)),
        E.elemwise("fuse_mul_add3", (2, 3, 5), (1, 3, 1), (2, 3, 5)),
        E.elemwise("sigmoid", (3, 7)),
        E.elemwise("true_div", (4, 9), (4, 9)),
        E.elemwise("lt", (5, 3), (5, 3), dtype="i32"),
    )

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ElemwiseOp)
        mode = op.params()["mode"].value
        codes = tuple(code(v) for v in (*op.operands, *op.results))
        if not elemwise_codes(mode, codes):
            return None
        out = shape(op.results[0])
        strides = [broadcast_strides(shape(v), out) for v in op.operands]
        cshape, cstrides = collapse(out, strides)
        # in place over operand 0 when it is read exactly where the result is written
        in_place = shape(op.operands[0]) == out and codes[0] == codes[-1]
        params = {"mode": mode, "shape": cshape, "strides": cstrides, "inplace": int(in_place)}
        if set(codes) != {"f32"}:
            params["dtypes"] = codes
        return Lowered(params, list(op.operands))

    in_place_operand = 0

    def symbol(self, p: dict[str, Any]) -> str:
        st = "_".join("s" + "x".join(map(str, s)) for s in p["strides"])
        types = "_".join(p["dtypes"]) if "dtypes" in p else "f32"
        return sym_join("elemwise", p["mode"], "x".join(map(str, p["shape"])), st, types)

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n = len(p["strides"])
        names = "abcd"[:n]
        ctypes, expr = elemwise_c(p)
        ins = [f"const {ctypes[i]}* in{i}" for i in range(n)]
        args = ", ".join([*ins, f"{ctypes[n]}* out0", "unsigned char* ws", "int nt"])
        loads = " ".join(f"const {ctypes[i]} {names[i]} = in{i}[x{i}];" for i in range(n))
        body = f"{loads} out0[o] = {expr};"
        total = math.prod(p["shape"])
        return (
            f"static void {sym}({args}) {{\n  (void)ws;\n"
            + _strided_loops(p["shape"], p["strides"], body, total)
            + "\n}\n"
        )


# ----------------------------------------------------------------------------------------------
# Depthwise convolution


class ConvDepthwise(Template):
    """Depthwise (one input and one output channel per group) direct convolution, NCHW."""
    # channel counts no blocked layout takes (the ARM targets keep them NCHW): strides 1 and 2,
    # padding, dilation, 5x5 windows
    examples = (
        E.conv_case((1, 5, 11, 13, 5, 3, 2, 1, 1, 5, "relu")),
        E.conv_case((2, 3, 9, 10, 3, 3, 1, 1, 1, 3, "none")),
        E.conv_case((1, 6, 12, 9, 6, 5, 2, 2, 1, 6, "sigmoid")),
        E.conv_case((1, 7, 10, 11, 7, 3, 2, 2, 2, 7, "none")),
        E.conv2d((2, 5, 10, 7), 5, 3, stride=2, groups=5),
        E.conv2d((1, 3, 8, 9), 3, 5, pad=2, dil=2, groups=3, act="h_swish"),
    )

    family = "conv2d_depthwise"
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 110  # before conv2d_gemm, which also runs depthwise convolutions (as groups)
    epilogues = {"float32": FULL_EPILOGUE}  # xm_act_<act> on every output: every activation

    def match(self, op: Operation) -> Lowered | None:
        return depthwise_lowered(op, conv_common(op))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("conv2d_dw", *plane_sym(p, dilation=None), "f32", epilogue_sym(p))

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        return np.ascontiguousarray(np.asarray(array, np.float32).reshape(p["c"], p["fh"] * p["fw"])), "dw"

    @staticmethod
    def head(sym: str, p: dict[str, Any], pragma: str | None = None) -> str:
        """The C function's head and the loop over (image, channel) planes with each plane's input,
        filter and output pointers (``xp``, ``wp``, ``yp``): how every depthwise kernel opens.
        ``pragma``: the planes' parallel loop (default: the portable kernels' threshold)."""
        extra = (["const float* bias"] if p["bias"] else []) + (["const float* res"] if p["residual"] else [])
        args = ", ".join(
            ["const float* x", "const float* w", *extra, "float* y", "unsigned char* ws", "int nt"]
        )
        c, oh, ow, fh, fw = p["c"], p["oh"], p["ow"], p["fh"], p["fw"]
        return f"""static void {sym}({args}) {{
  (void)ws;
  {_par(p["n"] * c * oh * ow * fh * fw) if pragma is None else pragma}
  for (int nc = 0; nc < {p["n"] * c}; ++nc) {{
    const int ch = nc % {c};
    const float* xp = x + (long)nc * {p["ih"] * p["iw"]};
    const float* wp = w + (long)ch * {fh * fw};
    float* yp = y + (long)nc * {oh * ow};"""

    @staticmethod
    def interior(p: dict[str, Any]) -> tuple[int, int]:
        """The output columns ``[lo, hi)`` whose every tap is inside the row: no checks in their loop."""
        ow, iw, sw, pw = p["ow"], p["iw"], p["sw"], p["pw"]
        lo = min(ow, max(0, -(-pw // sw)))
        return lo, max(lo, min(ow, (iw - 1 + pw - (p["fw"] - 1) * p["dw"]) // sw + 1))

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        ih, iw, oh, ow, fh, fw = p["ih"], p["iw"], p["oh"], p["ow"], p["fh"], p["fw"]
        sh, sw, ph, pw, dh, dw = p["sh"], p["sw"], p["ph"], p["pw"], p["dh"], p["dw"]
        lo, hi = self.interior(p)
        bias = "bias[ch]" if p["bias"] else "0.f"
        res = f"res[(long)nc * {oh * ow} + (long)r * {ow} + q]" if p["residual"] else "0.f"
        return f"""
{self.head(sym, p)}
    for (int r = 0; r < {oh}; ++r) {{
      float acc[{ow}];
      for (int q = 0; q < {ow}; ++q) acc[q] = 0.f;
      for (int kh = 0; kh < {fh}; ++kh) {{
        const int ihh = r * {sh} - {ph} + kh * {dh};
        if ((unsigned)ihh >= {ih}u) continue;
        const float* row = xp + (long)ihh * {iw};
        for (int kw = 0; kw < {fw}; ++kw) {{
          const float wv = wp[kh * {fw} + kw];
          const int off = kw * {dw} - {pw};
          for (int q = 0; q < {lo}; ++q) {{
            const int iww = q * {sw} + off;
            if ((unsigned)iww < {iw}u) acc[q] += wv * row[iww];
          }}
          for (int q = {lo}; q < {hi}; ++q) acc[q] += wv * row[q * {sw} + off];
          for (int q = {hi}; q < {ow}; ++q) {{
            const int iww = q * {sw} + off;
            if ((unsigned)iww < {iw}u) acc[q] += wv * row[iww];
          }}
        }}
      }}
      for (int q = 0; q < {ow}; ++q) yp[r * {ow} + q] = xm_act_{p["act"]}(acc[q] + {bias} + {res});
    }}
  }}
}}
"""


# ----------------------------------------------------------------------------------------------
# Pooling


class Pool2d(Template):
    family = "pool2d"
    ops = (T.PoolingOp, T.AdaptivePoolingOp)
    priority = 100
    examples = (
        E.pool2d((2, 5, 9, 7), "max", 3, 2, 1),
        E.pool2d((1, 3, 8, 11), "average", 2, 2),
        E.pool2d((1, 4, 7, 7), "average_count_exclude_padding", 3, 1, 1),
        E.adaptive_pool2d((1, 5, 9, 7), "average", (2, 3)),
    )

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
        p = op.params()
        if p["format"] != enums.Format.NCHW or not is_f32(*op.operands, *op.results):
            return None
        if isinstance(op, T.AdaptivePoolingOp):
            window, stride = adaptive_pool_params(shape(op.operands[0])[2:], p["out_shape"])
            pad: tuple[int, int] = (0, 0)
        else:
            window, stride, pad = p["window"], p["stride"], p["padding"]
        n, c, ih, iw = shape(op.operands[0])
        _, _, oh, ow = shape(op.results[0])
        params = {
            "mode": POOL_NAMES[p["mode"]], "n": n, "c": c, "ih": ih, "iw": iw, "oh": oh, "ow": ow,
            "fh": window[0], "fw": window[1], "sh": stride[0], "sw": stride[1], "ph": pad[0], "pw": pad[1],
        }  # fmt: skip
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("pool2d", p["mode"], *plane_sym(p), "f32")

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        ih, iw, oh, ow, fh, fw = p["ih"], p["iw"], p["oh"], p["ow"], p["fh"], p["fw"]
        sh, sw, ph, pw = p["sh"], p["sw"], p["ph"], p["pw"]
        mode = p["mode"]
        # as the depthwise kernel: per output row, taps outermost and a check-free interior run of
        # output columns innermost, so the reduction vectorises across the row
        lo = min(ow, max(0, -(-pw // sw)))
        hi = max(lo, min(ow, (iw - 1 + pw - (fw - 1)) // sw + 1))
        if mode == "max":
            # a comparison, not fmaxf: gcc calls libm's fmaxf (NaN rules) instead of vectorising
            # a NaN input wins and then stays (NaN compares false against everything), as the reference
            init = "-INFINITY"
            step = "{{ const float v_ = {v}; acc[q] = (v_ > acc[q] || v_ != v_) ? v_ : acc[q]; }}"
        else:
            init, step = "0.f", "acc[q] += {v};"
        checked = step.format(v="row[iww]")
        if mode == "max":
            fin = "acc[q]"
        elif mode == "average":
            fin = f"acc[q] * {1.0 / (fh * fw)!r}f"
        else:
            fin = "acc[q] / (float)(rows * (kw_hi - kw_lo))"
        return f"""
static void {sym}(const float* x, float* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(p["n"] * p["c"] * oh * ow * fh * fw)}
  for (int nc = 0; nc < {p["n"] * p["c"]}; ++nc) {{
    const float* xp = x + (long)nc * {ih * iw};
    float* yp = y + (long)nc * {oh * ow};
    for (int r = 0; r < {oh}; ++r) {{
      float acc[{ow}];
      int rows = 0;
      for (int q = 0; q < {ow}; ++q) acc[q] = {init};
      for (int kh = 0; kh < {fh}; ++kh) {{
        const int ihh = r * {sh} - {ph} + kh;
        if ((unsigned)ihh >= {ih}u) continue;
        ++rows;
        const float* row = xp + (long)ihh * {iw};
        for (int kw = 0; kw < {fw}; ++kw) {{
          const int off = kw - {pw};
          for (int q = 0; q < {lo}; ++q) {{
            const int iww = q * {sw} + off;
            if ((unsigned)iww < {iw}u) {checked}
          }}
          for (int q = {lo}; q < {hi}; ++q) {step.format(v=f"row[q * {sw} + off]")}
          for (int q = {hi}; q < {ow}; ++q) {{
            const int iww = q * {sw} + off;
            if ((unsigned)iww < {iw}u) {checked}
          }}
        }}
      }}
      (void)rows;
      for (int q = 0; q < {ow}; ++q) {{
        int kw_lo = {pw} - q * {sw}, kw_hi = {iw} + {pw} - q * {sw};
        if (kw_lo < 0) kw_lo = 0;
        if (kw_hi > {fw}) kw_hi = {fw};
        (void)kw_lo; (void)kw_hi;
        yp[r * {ow} + q] = {fin};
      }}
    }}
  }}
}}
"""


# ----------------------------------------------------------------------------------------------
# Softmax and reductions (over one axis: outer x axis x inner)


class Softmax(Template):
    family = "softmax"
    ops = (T.SoftmaxOp,)
    priority = 100
    examples = (E.softmax((3, 7), 1), E.softmax((2, 5, 3), 1))

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.SoftmaxOp)
        if not is_f32(*op.operands):
            return None
        return Lowered(axis_split(shape(op.operands[0]), op.params()["axis"]), [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("softmax", f"o{p['outer']}", f"a{p['axis']}", f"i{p['inner']}", "f32")

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        o, a, i = p["outer"], p["axis"], p["inner"]
        return f"""
static void {sym}(const float* x, float* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(o * a * i * 8)}
  for (long t = 0; t < {o * i}; ++t) {{
    const long base = (t / {i}) * {a * i} + t % {i};
    float m = -INFINITY, s = 0.f;
    for (int k = 0; k < {a}; ++k) {{ const float e = x[base + (long)k * {i}]; m = e > m ? e : m; }}
    for (int k = 0; k < {a}; ++k) {{
      const float e = expf(x[base + (long)k * {i}] - m);
      y[base + (long)k * {i}] = e;
      s += e;
    }}
    const float inv = 1.f / s;
    for (int k = 0; k < {a}; ++k) y[base + (long)k * {i}] *= inv;
  }}
}}
"""


FLOAT32_REDUCE_TYPES = (
    enums.ReduceDataType.DEFAULT,
    enums.ReduceDataType.FLOAT_IO16xC32,
    enums.ReduceDataType.FLOAT_O32xC32,
    enums.ReduceDataType.FLOAT_O16xC32,
)


class Reduce(Template):
    family = "reduce"
    ops = (T.ReduceOp,)
    priority = 100
    examples = (E.reduce((3, 7, 5), "sum", 1), E.reduce((4, 9), "max", 0), E.reduce((2, 3, 6), "mean", 2))

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ReduceOp)
        p = op.params()
        # every float data type computes in float32: on float32 operands they are all the default
        if not is_f32(*op.operands, *op.results) or p["data_type"] not in FLOAT32_REDUCE_TYPES:
            return None
        params = {"mode": p["mode"].value, **axis_split(shape(op.operands[0]), p["axis"])}
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("reduce", p["mode"], f"o{p['outer']}", f"a{p['axis']}", f"i{p['inner']}", "f32")

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        o, a, i, mode = p["outer"], p["axis"], p["inner"], p["mode"]
        init = {"max": "-INFINITY", "min": "INFINITY", "product": "1.f"}.get(mode, "0.f")
        step = {
            "max": "v = (e > v || e != e) ? e : v;",  # NaN wins, as numpy's max
            "min": "v = (e < v || e != e) ? e : v;",
            "product": "v *= e;",
            "sum_sqr": "v += e * e;",
        }.get(mode, "v += e;")
        fin = f"v * {1.0 / a!r}f" if mode == "mean" else "v"
        return f"""
static void {sym}(const float* x, float* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(o * a * i)}
  for (long t = 0; t < {o * i}; ++t) {{
    const long base = (t / {i}) * {a * i} + t % {i};
    float v = {init};
    for (int k = 0; k < {a}; ++k) {{ const float e = x[base + (long)k * {i}]; {step} }}
    y[t] = {fin};
  }}
}}
"""


# ----------------------------------------------------------------------------------------------
# Data movement


class Copy(Template):
    """``out[idx] = in[offset + sum(idx * strides)]``: transposes, slices and broadcasts."""
    examples = (
        E.dimshuffle((2, 3, 5), (2, 0, 1)),
        E.broadcast((3, 1, 5), (2, 3, 4, 5)),
        E.subtensor((5, 7, 6), [(1, 1, 6, 2), (2, 5, 0, -2)]),
    )

    family = "copy"
    ops = (T.DimshuffleOp, T.BroadcastOp, T.SubtensorOp)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        elem = moved_elements(op)
        if elem is None:
            return None
        out, strides, offset = strided_view(op)
        cshape, (cstrides,) = collapse(out, [strides])
        params = {"shape": cshape, "strides": cstrides, "offset": offset, "elem": elem}
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "copy",
            "x".join(map(str, p["shape"])),
            "s" + "x".join(map(str, p["strides"])),
            f"o{p['offset']}",
            p["elem"],
        )

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        if p["elem"] != "f32":
            return self._render_bytes(sym, p)
        body = f"out0[o] = in0[{p['offset']}L + x0];"
        size = math.prod(p["shape"])  # floats moved: the work of a vectorised copy
        return (
            f"static void {sym}(const float* in0, float* out0, unsigned char* ws, int nt) {{\n  (void)ws;\n"
            + _strided_loops(p["shape"], [p["strides"]], body, size, omp_parallel(size))
            + "\n}\n"
        )

    def _render_bytes(self, sym: str, p: dict[str, Any]) -> str:
        t = BYTES_CTYPE[ESIZE[p["elem"]]]
        body = f"out0[o] = in0[{p['offset']}L + x0];"
        return (
            f"static void {sym}(const void* in0_, void* out0_, unsigned char* ws, int nt) {{\n"
            f"  const {t}* in0 = (const {t}*)in0_;\n  {t}* out0 = ({t}*)out0_;\n  (void)ws;\n"
            + _strided_loops(p["shape"], [p["strides"]], body, math.prod(p["shape"]))
            + "\n}\n"
        )


class _Chunks(Template):
    """Concatenation (``gather``) or split along an axis, as ``outer`` rows of per-tensor contiguous
    chunks (``chunks[i]`` elements each): one ``memcpy`` per tensor and row."""

    gather: ClassVar[bool]

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, self.ops)
        elem = moved_elements(op, blocked=True)
        if elem is None:
            return None
        axis = op.params()["axis"]
        # the one tensor spanning whole rows, and the pieces each holding a chunk of every row
        whole, pieces = (op.results[0], op.operands) if self.gather else (op.operands[0], op.results)
        chunks = tuple(math.prod(shape(v)[axis:]) for v in pieces)
        outer = math.prod(shape(whole)[:axis])
        return Lowered({"outer": outer, "chunks": chunks, "elem": elem}, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(self.family, f"o{p['outer']}", "c" + "x".join(map(str, p["chunks"])), p["elem"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        chunks, outer = p["chunks"], p["outer"]
        total = sum(chunks)
        n = len(chunks)
        if p["elem"] == "f32":
            wide, narrow = ("out", "in") if self.gather else ("in", "out")
            pointers = {"in": "const float*", "out": "float*"}
            args = ", ".join(
                [
                    *(f"{pointers['in']} in{i}" for i in range(n if self.gather else 1)),
                    *(f"{pointers['out']} out{i}" for i in range(1 if self.gather else n)),
                    "unsigned char* ws",
                    "int nt",
                ]
            )
            # rows of memcpy: a region only for several rows of enough floats for two threads
            prologue = ["(void)ws;", omp_parallel(outer * total) if outer > 1 else "(void)nt;"]
            rows = [
                (f"{wide}0 + r * {total}L + {off}", f"{narrow}{i} + r * {c}L", c * 4)
                for i, c, off in _runs(chunks)
            ]
        else:
            e = ESIZE[p["elem"]]
            args = _ptr_args(n, 1) if self.gather else _ptr_args(1, n)
            view = "char* out = (char*)out0_;" if self.gather else "const char* in = (const char*)in0_;"
            prologue = [view, "(void)ws; (void)nt;"]
            wide = "out" if self.gather else "in"
            narrow = "(const char*)in{i}_" if self.gather else "(char*)out{i}_"
            rows = [
                (f"{wide} + (r * {total}L + {off}) * {e}", f"{narrow.format(i=i)} + r * {c * e}L", c * e)
                for i, c, off in _runs(chunks)
            ]
        body = [
            f"    memcpy({w}, {s}, {size});" if self.gather else f"    memcpy({s}, {w}, {size});"
            for w, s, size in rows
        ]
        return f"""
static void {sym}({args}) {{
{chr(10).join("  " + line for line in prologue)}
  for (long r = 0; r < {outer}; ++r) {{
{chr(10).join(body)}
  }}
}}
"""


def _runs(chunks: Sequence[int]) -> list[tuple[int, int, int]]:
    """(index, size, offset in the row) of each chunk."""
    offsets = [sum(chunks[:i]) for i in range(len(chunks))]
    return list(zip(range(len(chunks)), chunks, offsets, strict=True))


class Concat(_Chunks):
    family = "concat"
    ops = (T.ConcatOp,)
    priority = 100
    gather = True
    examples = (E.concat([(2, 3, 5), (2, 4, 5), (2, 1, 5)], 1), E.concat([(3, 2), (3, 5)], 1, dtype="i32"))


class Split(_Chunks):
    family = "split"
    ops = (T.SplitOp,)
    priority = 100
    gather = False
    examples = (E.split((2, 9, 3), 1, (4, 5)), E.split((7, 4), 0, (2, 2, 3)))


KERNEL_UNITS = (Elemwise(), ConvDepthwise(), Pool2d(), Softmax(), Reduce(), Copy(), Concat(), Split())
