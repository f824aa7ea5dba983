"""Portable CUDA kernels (ISA ``generic`` of the CUDA registry): one thread per output element, every
op the C backends compile. The availability rules, parameters, symbols and packings are the C
units' (subclassed here) or the shared helpers of ``backends/c/match.py``; only the rendering is
CUDA. Float32 kernels accumulate with explicit ``fmaf`` (the build disables implicit contraction so
that the quantized kernels repeat the reference's float32 operations exactly).

Families: ``conv2d_gemm`` (dense or grouped float32 convolution, fused bias / residual /
activation), ``conv2d_depthwise``, ``matmul_gemm``, ``pool2d``, ``elemwise``, ``softmax``,
``reduce``, ``copy``, ``concat``, ``split``, ``relayout``, ``typecvt`` and the int8 NCHW families
``elemwise_q``, ``pool2d_q8``, ``matmul_q8``, ``conv2d_q8``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import conv_common
from backends.c.templates import conv_sym, epilogue_sym
from backends.c.templates import strided_index as linear
from backends.c.templates import sym_join as c_sym_join
from backends.c.templates.portable import generic, typed
from backends.c.templates.portable.generic import BYTES_CTYPE, ESIZE
from backends.c.templates.portable.requant import CTYPES as OUT_CTYPES
from backends.c.templates.portable.requant import (
    REQUANT_C,
    bias_ctype,
    exact,
    int_activation,
    post_processed,
    result_expr,
)
from backends.c.templates.portable.typed import CTYPES, deq, quant
from backends.c.templates.x86 import gemm
from backends.cuda.templates import CudaRender, pointwise, unflatten
from dialects import tensor as T
from passes.lowering.kernels import FULL_EPILOGUE, KernelUnit, Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# CUDA spellings of the element types (float16 is __half, converted explicitly)
CUDA_TYPES = {**CTYPES, "f16": "__half"}


def load_real(code: str, scale: float, zp: int, x: str) -> str:
    """Float value of element ``x`` of type ``code`` (the C units' ``deq``; __half converted)."""
    return f"__half2float({x})" if code == "f16" else deq(code, scale, zp, x)


def store_as(code: str, scale: float, zp: int, v: str) -> str:
    return f"__float2half({v})" if code == "f16" else quant(code, scale, zp, v)


def epilogue(p: dict[str, Any], acc: str, channel: str, out_index: str) -> str:
    """``act(acc + bias[channel] + res[out_index])`` for a float32 kernel's fused epilogue."""
    bias = f" + bias[{channel}]" if p.get("bias") else ""
    res = f" + res[{out_index}]" if p.get("residual") else ""
    return f"xm_act_{p.get('act', 'identity')}({acc}{bias}{res})"


def epilogue_args(p: dict[str, Any]) -> list[tuple[str, str]]:
    return [("const float*", "bias")] * bool(p.get("bias")) + [("const float*", "res")] * bool(
        p.get("residual")
    )


def _float_args(p: dict[str, Any], a: str, b: str) -> list[tuple[str, str]]:
    """The kernel parameters of a float32 conv or matmul: inputs ``a`` and ``b``, the fused bias and
    residual, the output ``y``."""
    return [("const float*", a), ("const float*", b), *epilogue_args(p), ("float*", "y")]


def _window_rows(p: dict[str, Any], indent: str, dilated: bool) -> str:
    """The opening lines of the loops over output ``(oy, ox)``'s window taps: row ``r`` at input row
    ``yy`` (rows outside the input skipped), then column ``s`` at input column ``xx``, which the
    caller checks; it closes both loops. Lines after the first are indented by ``indent``."""
    r_step, s_step = (f" * {p['dh']}", f" * {p['dw']}") if dilated else ("", "")
    lines = [
        f"for (int r = 0; r < {p['fh']}; ++r) {{",
        f"  const int yy = (int)oy * {p['sh']} - {p['ph']} + r{r_step};",
        f"  if ((unsigned)yy >= {p['ih']}u) continue;",
        f"  for (int s = 0; s < {p['fw']}; ++s) {{",
        f"    const int xx = (int)ox * {p['sw']} - {p['pw']} + s{s_step};",
    ]
    return f"\n{indent}".join(lines)


def _conv_outputs(p: dict[str, Any]) -> int:
    return p["n"] * p["oc"] * p["oh"] * p["ow"]


def _conv_taps(p: dict[str, Any], elem: str, acc_decl: str, multiply_add: Callable[[str, str], str]) -> str:
    """A dense or grouped NCHW convolution's thread up to its epilogue: the output index ``(nn, o, oy,
    ox)`` of thread ``i``, ``xg`` at the input channels of ``o``'s group and ``wo`` at ``o``'s filter
    (both of C type ``elem``), ``acc_decl`` declaring ``acc``, then ``multiply_add(x_tap, w_tap)``
    over every in-range tap (the float32 and int8 convolutions differ only in these)."""
    ic, ih, iw, oc, oh, ow = (p[k] for k in ("ic", "ih", "iw", "oc", "oh", "ow"))
    fh, fw = p["fh"], p["fw"]
    icg, ocg = ic // p["groups"], oc // p["groups"]
    x_tap = f"xg[c * {ih * iw}L + yy * {iw} + xx]"
    w_tap = f"wo[(c * {fh} + r) * {fw} + s]"
    return f"""const long ox = i % {ow}, oy = i / {ow} % {oh};
    const long o = i / {ow * oh} % {oc}, nn = i / {ow * oh * oc};
    const {elem}* xg = x + (nn * {ic} + o / {ocg} * {icg}) * {ih * iw}L;
    const {elem}* wo = w + o * {icg * fh * fw}L;
    {acc_decl}
    for (int c = 0; c < {icg}; ++c)
      {_window_rows(p, "      ", True)}
          if ((unsigned)xx < {iw}u)
            {multiply_add(x_tap, w_tap)}
        }}
      }}"""


# ----------------------------------------------------------------------------------------------
# float32 convolution and matrix multiplication


class ConvDirect(CudaRender, KernelUnit):
    """``conv2d_gemm`` on CUDA: dense or grouped NCHW float32 convolution, one thread per output,
    filters as given (OIHW; a true convolution's filter flipped by the shared rule)."""
    examples = (
        E.conv2d((1, 13, 9, 11), 19, 3, pad=1, act="relu"),
        E.conv2d((2, 6, 7, 5), 10, 1, stride=2, residual=True),
        E.conv2d((1, 12, 6, 7), 9, 3, pad=1, groups=3, act="sigmoid"),
        E.conv2d((1, 4, 9, 9), 5, 3, pad=2, dil=2, act="h_swish"),
    )

    family = "conv2d_gemm"
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 100
    epilogues = {"float32": FULL_EPILOGUE}  # epilogue(): xm_act_<act> of acc + bias + res

    def match(self, op: Operation) -> Lowered | None:
        got = conv_common(op)
        return None if got is None else Lowered(*got)

    def symbol(self, p: dict[str, Any]) -> str:
        return c_sym_join(
            "conv2d_cuda",
            *conv_sym(p, explicit=True),
            "f32",
            epilogue_sym(p),
        )

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        taps = _conv_taps(p, "float", "float acc = 0.f;", lambda x, w: f"acc = fmaf({x}, {w}, acc);")
        body = f"""{taps}
    y[i] = {epilogue(p, "acc", "o", "i")};"""
        return pointwise(sym, _float_args(p, "x", "w"), _conv_outputs(p), body)


class ConvDepthwise(CudaRender, generic.ConvDepthwise):
    """Depthwise float32 convolution (the C unit's rule and filter packing: ``(C, FH*FW)``)."""

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        c, ih, iw, oh, ow = p["c"], p["ih"], p["iw"], p["oh"], p["ow"]
        fh, fw, sh, sw, ph, pw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw"))
        body = f"""const long ox = i % {ow}, oy = i / {ow} % {oh}, nc = i / {ow * oh}, ch = nc % {c};
    const float* xp = x + nc * {ih * iw}L;
    const float* wp = w + ch * {fh * fw};
    float acc = 0.f;
    {_window_rows(p, "    ", True)}
        if ((unsigned)xx < {iw}u) acc = fmaf(xp[yy * {iw} + xx], wp[r * {fw} + s], acc);
      }}
    }}
    y[i] = {epilogue(p, "acc", "ch", "i")};"""
        return pointwise(sym, _float_args(p, "x", "w"), p["n"] * c * oh * ow, body)


class Matmul(CudaRender, KernelUnit):
    """``matmul_gemm`` on CUDA: (batched) ``op(a) @ op(b)``, float32, fused epilogue along N."""
    examples = (
        E.matmul(5, 17, 9, tb=True),
        E.matmul(13, 7, 21, bias=True, act="relu"),
        E.matmul(6, 11, 3, ta=True, const_b=False),
        E.matmul(4, 9, 6, batch=3, const_b=False),
    )

    family = "matmul_gemm"
    ops = (T.MatrixMulOp, T.BatchedMatrixMulOp)
    priority = 100
    epilogues = {"float32": gemm.MATMUL_EPILOGUE}

    def match(self, op: Operation) -> Lowered | None:
        return gemm.matmul_common(op)

    def symbol(self, p: dict[str, Any]) -> str:
        return c_sym_join(
            "matmul_cuda",
            *gemm.matmul_sym(p, explicit=True),
            "f32",
            epilogue_sym(p),
        )

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        m, n, k = p["m"], p["n"], p["k"]
        a_at, b_at, head = _matmul_thread(p, "float")
        body = f"""{head}
    float acc = 0.f;
    for (int kk = 0; kk < {k}; ++kk) acc = fmaf({a_at}, {b_at}, acc);
    y[i] = {epilogue(p, "acc", "j", "i")};"""
        return pointwise(sym, _float_args(p, "a_", "b_"), p["batch"] * m * n, body)


# ----------------------------------------------------------------------------------------------
# pooling, elementwise, reductions


class Pool2d(CudaRender, generic.Pool2d):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        return _pool(sym, p, "float", "-INFINITY", "float", "a = e > a ? e : a;", _float_pool_result(p))


def _float_pool_result(p: dict[str, Any]) -> str:
    if p["mode"] == "max":
        return "a"
    if p["mode"] == "average":
        return f"a * {1.0 / (p['fh'] * p['fw'])!r}f"
    return "a / (float)cnt"


def _pool(sym: str, p: dict[str, Any], elem: str, init: str, acc_t: str, max_step: str, result: str) -> str:
    ih, iw, oh, ow = p["ih"], p["iw"], p["oh"], p["ow"]
    step = max_step if p["mode"] == "max" else "a += e;"
    init = init if p["mode"] == "max" else "0"
    body = f"""const long ox = i % {ow}, oy = i / {ow} % {oh}, nc = i / {ow * oh};
    const {elem}* xp = x + nc * {ih * iw}L;
    {acc_t} a = {init};
    int cnt = 0;
    {_window_rows(p, "    ", False)}
        if ((unsigned)xx >= {iw}u) continue;
        const {acc_t} e = xp[yy * {iw} + xx];
        {step}
        ++cnt;
      }}
    }}
    (void)cnt;
    y[i] = ({elem})({result});"""
    return pointwise(sym, [(f"const {elem}*", "x"), (f"{elem}*", "y")], p["n"] * p["c"] * oh * ow, body)


class Elemwise(CudaRender, generic.Elemwise):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        # the operand and result types follow the op's (int32, bool), as in the C kernel
        n = len(p["strides"])
        ctypes, expr = generic.elemwise_c(p)
        loads = " ".join(
            f"const {ctypes[k]} {'abcd'[k]} = in{k}[{linear(st)}];" for k, st in enumerate(p["strides"])
        )
        body = f"{unflatten(p['shape'])}\n    {loads}\n    out0[i] = {expr};"
        args = [*((f"const {ctypes[k]}*", f"in{k}") for k in range(n)), (f"{ctypes[n]}*", "out0")]
        return pointwise(sym, args, math.prod(p["shape"]), body)


class Softmax(CudaRender, generic.Softmax):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        o, a, i = p["outer"], p["axis"], p["inner"]
        body = f"""const long base = (i / {i}) * {a * i}L + i % {i};
    float m = -INFINITY, s = 0.f;
    for (int k = 0; k < {a}; ++k) {{ const float e = x[base + k * {i}L]; m = e > m ? e : m; }}
    for (int k = 0; k < {a}; ++k) {{
      const float e = expf(x[base + k * {i}L] - m);
      y[base + k * {i}L] = e;
      s += e;
    }}
    const float inv = 1.f / s;
    for (int k = 0; k < {a}; ++k) y[base + k * {i}L] *= inv;"""
        return pointwise(sym, [("const float*", "x"), ("float*", "y")], o * i, body)


class Reduce(CudaRender, generic.Reduce):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        o, a, i, mode = p["outer"], p["axis"], p["inner"], p["mode"]
        init = {"max": "-INFINITY", "min": "INFINITY", "product": "1.f"}.get(mode, "0.f")
        step = {
            "max": "v = e > v ? e : v;",
            "min": "v = fminf(v, e);",
            "product": "v *= e;",
            "sum_sqr": "v += e * e;",
        }.get(mode, "v += e;")
        fin = f"v * {1.0 / a!r}f" if mode == "mean" else "v"
        body = f"""const long base = (i / {i}) * {a * i}L + i % {i};
    float v = {init};
    for (int k = 0; k < {a}; ++k) {{ const float e = x[base + k * {i}L]; {step} }}
    y[i] = {fin};"""
        return pointwise(sym, [("const float*", "x"), ("float*", "y")], o * i, body)


# ----------------------------------------------------------------------------------------------
# data movement


def _moved_type(elem: str) -> str:
    return "float" if elem == "f32" else BYTES_CTYPE[ESIZE[elem]]


class Copy(CudaRender, generic.Copy):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        t = _moved_type(p["elem"])
        body = f"{unflatten(p['shape'])}\n    out0[i] = in0[{p['offset']}L + {linear(p['strides'])}];"
        return pointwise(sym, [(f"const {t}*", "in0"), (f"{t}*", "out0")], math.prod(p["shape"]), body)


def _chunk_walk(chunks: tuple[int, ...], gather: bool) -> str:
    """Per element of the wide row-major (outer x sum(chunks)) tensor: the narrow tensor it comes
    from (gather) or goes to, as an if-chain over the chunk offsets."""
    total = sum(chunks)
    lines = [f"const long r = i / {total}, col = i % {total};"]
    off = 0
    for k, c in enumerate(chunks):
        cond = "if" if k == 0 else "else if"
        move = (
            f"out0[i] = in{k}[r * {c}L + col - {off}];"
            if gather
            else f"out{k}[r * {c}L + col - {off}] = in0[i];"
        )
        lines.append(f"{cond} (col < {off + c}) {move}")
        off += c
    return "\n    ".join(lines)


class Concat(CudaRender, generic.Concat):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        t = _moved_type(p["elem"])
        n = len(p["chunks"])
        args = [*((f"const {t}*", f"in{k}") for k in range(n)), (f"{t}*", "out0")]
        return pointwise(sym, args, p["outer"] * sum(p["chunks"]), _chunk_walk(p["chunks"], True))


class Split(CudaRender, generic.Split):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        t = _moved_type(p["elem"])
        n = len(p["chunks"])
        args = [(f"const {t}*", "in0"), *((f"{t}*", f"out{k}") for k in range(n))]
        return pointwise(sym, args, p["outer"] * sum(p["chunks"]), _chunk_walk(p["chunks"], False))


class Relayout(CudaRender, typed.Relayout):
    """Plain <-> blocked (any layout of ``dialects/layout.py``), one thread per element of the padded
    index space; padding written as zero into a blocked destination."""

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        split = p["split"]
        t = BYTES_CTYPE[p["esize"]]
        body = f"{unflatten(split)}\n    {self.move(p, f'({t})0')}"
        return pointwise(sym, [(f"const {t}*", "in"), (f"{t}*", "out")], math.prod(split), body)


class TypeCvt(CudaRender, typed.TypeCvt):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        if "f16" in (p["src"], p["dst"]):
            v = load_real(p["src"], p["s_in"], p["zp_in"], "in[i]")
            value = store_as(p["dst"], p["s_out"], p["zp_out"], v)
        else:
            value = typed.convert(p, "in[i]")
        args = [(f"const {CUDA_TYPES[p['src']]}*", "in"), (f"{CUDA_TYPES[p['dst']]}*", "out")]
        return exact(pointwise(sym, args, p["size"], f"out[i] = {value};"))

    def support(self, em: CEmitter) -> str:
        return REQUANT_C


# ----------------------------------------------------------------------------------------------
# int8, NCHW (the reference's quantized semantics, operation for operation)


class ElemwiseQ(CudaRender, typed.ElemwiseQ):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n = len(p["strides"])
        dts, scs, zps = p["dtypes"], p["scales"], p["zps"]
        loads = " ".join(
            f"const float {'abcd'[k]} = {deq(dts[k], scs[k], zps[k], f'in{k}[{linear(st)}]')};"
            for k, st in enumerate(p["strides"])
        )
        result = quant(dts[n], scs[n], zps[n], typed.quantized_float_op(p["mode"]))
        body = f"{unflatten(p['shape'])}\n    {loads}\n    out0[i] = {result};"
        args = [*((f"const {CTYPES[dts[k]]}*", f"in{k}") for k in range(n)), (f"{CTYPES[dts[n]]}*", "out0")]
        return exact(pointwise(sym, args, math.prod(p["shape"]), body))

    def support(self, em: CEmitter) -> str:
        return REQUANT_C


def int_average(p: dict[str, Any]) -> str:
    """The reference's integer average: the window sum over the count, rounded half away from zero."""
    cn = str(p["fh"] * p["fw"]) if p["mode"] == "average" else "cnt"
    return f"(a >= 0 ? (2 * a + {cn}) / (2 * {cn}) : -((2 * -a + {cn}) / (2 * {cn})))"


class Pool2dQ8(CudaRender, typed.Pool2dQ8):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        result = "a" if p["mode"] == "max" else int_average(p)
        return _pool(sym, p, "int8_t", "-128", "int32_t", "if (e > a) a = e;", result)


def _matmul_thread(p: dict[str, Any], ctype: str) -> tuple[str, str, str]:
    """One output element per thread of a (batched) matmul: the C expressions of A's and B's element
    ``kk`` (transposes applied) and the code locating the thread's row, column and batch."""
    m, n, k = p["m"], p["n"], p["k"]
    a_at = f"a[kk * {m}L + r]" if p["ta"] else f"a[r * {k}L + kk]"
    b_at = f"b[j * {k}L + kk]" if p["tb"] else f"b[kk * {n}L + j]"
    b_step = 0 if p["b_const"] else n * k
    head = f"""const long j = i % {n}, r = i / {n} % {m}, bt = i / {m * n};
    const {ctype}* a = a_ + bt * {m * k}L;
    const {ctype}* b = b_ + bt * {b_step}L;"""
    return a_at, b_at, head


class MatmulQ8(CudaRender, typed.MatmulQ8):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        m, n, k = p["m"], p["n"], p["k"]
        a_at, b_at, head = _matmul_thread(p, "int8_t")
        body = f"""{head}
    int32_t acc = 0;
    for (int kk = 0; kk < {k}; ++kk) acc += (int32_t){a_at} * {b_at};
    y[i] = {result_expr(p, "acc")};"""
        args = [("const int8_t*", "a_"), ("const int8_t*", "b_"), (f"{OUT_CTYPES[p['out']]}*", "y")]
        return exact(pointwise(sym, args, p["batch"] * m * n, body))

    def support(self, em: CEmitter) -> str:
        return REQUANT_C


class Conv2dQ8(CudaRender, typed.Conv2dQ8):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        acc = f"int32_t acc = {'bias[o]' if p['bias'] and not post_processed(p) else '0'};"
        taps = _conv_taps(p, "int8_t", acc, lambda x, w: f"acc += (int32_t){x} * {w};")
        body = f"""{taps}
    {int_activation(p, "acc")}
    y[i] = {result_expr(p, "acc", "bias[o]")};"""
        args = [
            ("const int8_t*", "x"),
            ("const int8_t*", "w"),
            *([(f"const {bias_ctype(p)}*", "bias")] * p["bias"]),
            (f"{OUT_CTYPES[p['out']]}*", "y"),
        ]
        return exact(pointwise(sym, args, _conv_outputs(p), body))

    def support(self, em: CEmitter) -> str:
        return REQUANT_C


KERNEL_UNITS = (
    ConvDirect(),
    ConvDepthwise(),
    Matmul(),
    Pool2d(),
    Elemwise(),
    Softmax(),
    Reduce(),
    Copy(),
    Concat(),
    Split(),
    Relayout(),
    TypeCvt(),
    ElemwiseQ(),
    Pool2dQ8(),
    MatmulQ8(),
    Conv2dQ8(),
)
