"""Portable C templates (ISA ``generic``) for element types other than float32: layout conversion,
type conversion and the int8 operators MegEngine's quantized graphs use around their convolutions.

Element types travel as short codes in the kernel parameters: ``f32``, ``f16``, ``q8`` (qint8),
``q32`` (qint32), ``u8`` (quint8), each quantized one with a float32 scale and a zero point.
Semantics are those of the reference (``semantics.quant_kernels``), operation for
operation in float32: dequantize ``(float)(q - zp) * s``; quantize, conversions between quantized
types and the int8 products' epilogues through the one C definition of requantization
(:mod:`backends.c.templates.portable.requant`); int32 accumulation for int8 products; pooling averages rounded
half away from zero in integers.

Families: ``relayout`` (any layout pair, from :meth:`dialects.layout.LayoutSpec.split_strides`),
``typecvt``, ``elemwise_q`` (elementwise and ElemwiseMultiType Q-modes on dequantized values),
``pool2d_q8`` (NCHW), ``matmul_q8``, ``conv2d_q8`` (NCHW, any groups). Data movement of every element
type is the ``copy``, ``concat`` and ``split`` families of :mod:`backends.c.templates.portable.generic`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation, SSAValue

import backends.c.examples as E
from backends.c.match import (
    acc_scale,
    code,
    dtype_key,
    esize,
    pool_geometry,
    qparams,
    requant_params,
    same_type,
)
from backends.c.templates import Template, conv_sym, plane_sym, strided_index, sym_join, window_taps
from backends.c.templates.portable.generic import (
    BOOL_RESULT_MODES,
    BYTES_CTYPE,
    ELEMWISE_C,
    _par,
    _ptr_args,
    _strided_loops,
)
from backends.c.templates.portable.requant import CTYPES as OUT_CTYPES
from backends.c.templates.portable.requant import (
    INT8_ACT,
    QRANGE,
    REQUANT_C,
    bias_ctype,
    bias_values,
    convert_expr,
    exact,
    int_activation,
    post_processed,
    quantize_expr,
    result_expr,
)
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.lowering.kernels import Lowered, broadcast_strides, collapse, const_array, shape
from semantics.quant_kernels import Q_MODES

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

CTYPES = {"f32": "float", "f16": "float16_t", "q8": "int8_t", "q32": "int32_t", "u8": "uint8_t",
          "b1": "uint8_t", "i32": "int32_t", "i16": "int16_t", "i8": "int8_t", "ui8": "uint8_t"}  # fmt: skip
HEADER = "#include <stdint.h>\n"
# float32 operations whose quantized form is MegEngine's SIMD one (quant_kernels.QUANTIZED_ELEMWISE)
QUANTIZED_ELEMWISE_C = {"h_swish": "xm_qhswish(a)", "fuse_add_h_swish": "xm_qhswish(a + b)"}


def is_quantized(code: str) -> bool:
    return code in QRANGE


def deq(code: str, scale: float, zp: int, x: str) -> str:
    """C float expression of the real value of element ``x``."""
    if code == "f32":
        return x
    if not is_quantized(code):
        return f"(float)({x})"
    centered = f"((int64_t)({x}) - {zp})" if zp else f"({x})"
    return f"((float){centered} * {scale!r}f)"


def quant(code: str, scale: float, zp: int, v: str) -> str:
    """C expression storing the float ``v`` as element type ``code``."""
    if code == "b1":
        return f"(uint8_t)(({v}) != 0)"  # numpy's astype(bool): any non-zero value is true
    if not is_quantized(code):
        return f"({CTYPES[code]})({v})"
    return quantize_expr(code, scale, zp, v)


def convert(p: dict[str, Any], x: str) -> str:
    """C expression converting element ``x`` from type ``p["src"]`` to ``p["dst"]`` (TypeCvt)."""
    src, dst = p["src"], p["dst"]
    if is_quantized(src) and is_quantized(dst):  # one float32 multiplication by s_src / s_dst
        centered = f"(int64_t)({x}) - {p['zp_in']}" if p["zp_in"] else x
        return convert_expr(dst, p["s_in"], p["s_out"], p["zp_out"], centered)
    return quant(dst, p["s_out"], p["zp_out"], deq(src, p["s_in"], p["zp_in"], x))


def quantized_float_op(mode: str) -> str:
    """The C float32 expression a quantized elementwise op applies between dequantization and
    quantization."""
    return QUANTIZED_ELEMWISE_C.get(mode, ELEMWISE_C[mode])



# ----------------------------------------------------------------------------------------------


class Relayout(Template):
    """Between a plain tensor and a blocked layout, as one strided walk (padding written as zero
    into a blocked destination, skipped from a blocked source)."""
    # relayouts come from the target's layout pass, around a blocked convolution
    examples = (E.conv2d((1, 8, 7, 9), 16, 3, pad=1, act="relu"), E.conv2d((2, 8, 5, 5), 8, 1))

    family = "relayout"
    ops = (L.RelayoutOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, L.RelayoutOp)
        p = op.params()
        if (p["src"] is None) == (p["dst"] is None):
            return None  # blocked -> blocked: not needed by the NCHWxx passes
        blocked = p["src"] if p["src"] is not None else p["dst"]
        ls, ld = op.logical_shapes()
        split, lst, pst, bounds = L.SPECS[blocked].split_strides(ls)
        params = {
            "src": p["src"].value if p["src"] is not None else "plain",
            "dst": p["dst"].value if p["dst"] is not None else "plain",
            "logical": ls, "split": split, "lstrides": lst, "pstrides": pst,
            "bounds": bounds, "esize": esize(op.operands[0]),
        }  # fmt: skip
        return Lowered(params, [op.operands[0]])


    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "relayout", p["src"], "to", p["dst"], "x".join(map(str, p["logical"])), f"e{p['esize']}"
        )

    @staticmethod
    def move(p: dict[str, Any], zero: str) -> str:
        """The C statement moving element ``(i0..)`` of the split (padded) index space from ``in`` to
        ``out``: padding written as ``zero`` into a blocked destination, skipped from a blocked
        source."""
        split, lst, pst, bounds = p["split"], p["lstrides"], p["pstrides"], p["bounds"]
        to_blocked = p["dst"] != "plain"
        dst_st, src_st = (pst, lst) if to_blocked else (lst, pst)
        valid = (
            " && ".join(
                f"(i{o} * {split[k]} + i{k}) < {n}" if k >= 0 else f"i{o} < {n}" for o, k, n in bounds
            )
            or "1"
        )
        src, dst = strided_index(src_st), strided_index(dst_st)
        if to_blocked:
            return f"out[{dst}] = ({valid}) ? in[{src}] : {zero};"
        return f"if ({valid}) out[{dst}] = in[{src}];"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        shape = p["split"]
        body = self.move(p, "0")
        t = BYTES_CTYPE[p["esize"]]
        loops = [f"{'  ' * k}for (long i{k} = 0; i{k} < {d}; ++i{k})" for k, d in enumerate(shape)]
        return f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const {t}* in = (const {t}*)in_;
  {t}* out = ({t}*)out_;
  (void)ws; (void)nt;
{chr(10).join("  " + lp for lp in loops)}
  {"  " * len(shape)}{body}
}}
"""


class TypeCvt(Template):
    family = "typecvt"
    ops = (T.TypeCvtOp,)
    priority = 100
    examples = (
        E.typecvt((3, 7, 5), "f32", "q8"),
        E.typecvt((2, 9), "f32", "u8"),
        E.typecvt((4, 5), "f32", "f16"),
        E.typecvt((3, 4), "f32", "i32"),
    )

    def match(self, op: Operation) -> Lowered | None:
        src, dst = code(op.operands[0]), code(op.results[0])
        if src is None or dst is None:
            return None
        s_in, zp_in = qparams(op.operands[0])
        s_out, zp_out = qparams(op.results[0])
        params = {
            "src": src, "dst": dst, "size": math.prod(shape(op.results[0])), "s_in": s_in, "zp_in": zp_in,
            "s_out": s_out, "zp_out": zp_out, "qid": dtype_key((src, dst), (s_in, s_out), (zp_in, zp_out)),
        }  # fmt: skip
        return Lowered(params, [op.operands[0]])


    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("typecvt", p["src"], "to", p["dst"], f"n{p['size']}", p["qid"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        out = convert(p, "in[i]")
        return exact(f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const {CTYPES[p["src"]]}* in = (const {CTYPES[p["src"]]}*)in_;
  {CTYPES[p["dst"]]}* out = ({CTYPES[p["dst"]]}*)out_;
  (void)ws;
  {_par(p["size"])}
  for (long i = 0; i < {p["size"]}; ++i) out[i] = {out};
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER + REQUANT_C


def elemwise_q(op: Operation, float_mode: str) -> Lowered | None:
    values = [*op.operands, op.results[0]]
    codes = [code(v) for v in values]
    if float_mode not in ELEMWISE_C or float_mode in BOOL_RESULT_MODES or None in codes or "f16" in codes:
        return None
    if not any(c in ("q8", "q32", "u8") for c in codes):
        return None  # float32 elementwise ops have their own kernel
    out = shape(op.results[0])
    strides = [broadcast_strides(shape(v), out) for v in op.operands]
    cshape, cstrides = collapse(out, strides)
    qp = [qparams(v) for v in values]
    scales, zps = tuple(s for s, _ in qp), tuple(z for _, z in qp)
    params = {
        "mode": float_mode, "shape": cshape, "strides": cstrides, "dtypes": tuple(codes), "scales": scales,
        "zps": zps, "qid": dtype_key(tuple(c or "" for c in codes), scales, zps),
    }  # fmt: skip
    return Lowered(params, list(op.operands))


def contiguous_q8_elemwise(op: Operation, modes: Any, unary: Any) -> Lowered | None:
    """:class:`ElemwiseQ`'s lowering of ``op`` where a vector kernel takes it: a mode of ``modes`` with
    its arity (one input for the modes in ``unary``, else two), qint8 operands without zero points, one
    contiguous dimension and no broadcast (broadcasts stay portable)."""
    lowered = ElemwiseQ.match(ElemwiseQ(), op)
    if lowered is None:
        return None
    p = lowered.params
    if p["mode"] not in modes or len(p["strides"]) != (1 if p["mode"] in unary else 2):
        return None
    if set(p["dtypes"]) != {"q8"} or any(p["zps"]) or len(p["shape"]) != 1:
        return None
    if any(s != (1,) for s in p["strides"]):
        return None
    return lowered


class ElemwiseQ(Template):
    """``out = quantize(f(dequantize(a), dequantize(b), ...))`` with any broadcast."""
    examples = (E.elemwise_q8("qadd", (2, 3, 5), (2, 3, 5)), E.elemwise_q8("qmul", (3, 7), (1, 7)))

    family = "elemwise_q"
    ops = (T.ElemwiseOp, T.ElemwiseMultiTypeOp)
    priority = 90  # after the float32 elemwise

    def match(self, op: Operation) -> Lowered | None:
        if isinstance(op, T.ElemwiseMultiTypeOp):
            mode = op.params()["mode"]
            return elemwise_q(op, Q_MODES[mode].value) if mode in Q_MODES else None
        assert isinstance(op, T.ElemwiseOp)
        return elemwise_q(op, op.params()["mode"].value)

    def symbol(self, p: dict[str, Any]) -> str:
        st = "_".join("s" + "x".join(map(str, s)) for s in p["strides"])
        return sym_join("elemwise_q", p["mode"], "x".join(map(str, p["shape"])), st, p["qid"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n = len(p["strides"])
        names = "abcd"[:n]
        dts, scs, zps = p["dtypes"], p["scales"], p["zps"]
        decl = [f"const {CTYPES[dts[i]]}* in{i} = (const {CTYPES[dts[i]]}*)in{i}_;" for i in range(n)]
        decl.append(f"{CTYPES[dts[n]]}* out0 = ({CTYPES[dts[n]]}*)out0_;")
        loads = " ".join(
            f"const float {names[i]} = {deq(dts[i], scs[i], zps[i], f'in{i}[x{i}]')};" for i in range(n)
        )
        body = f"{loads} out0[o] = {quant(dts[n], scs[n], zps[n], quantized_float_op(p['mode']))};"
        return exact(
            f"static void {sym}({_ptr_args(n, 1)}) {{\n  (void)ws;\n  "
            + "\n  ".join(decl)
            + "\n"
            + _strided_loops(p["shape"], p["strides"], body, math.prod(p["shape"]))
            + "\n}\n"
        )

    def support(self, em: CEmitter) -> str:
        return HEADER + REQUANT_C


class Pool2dQ8(Template):
    """int8 max / average pooling, NCHW: integer window sums, averages rounded half away from zero."""
    examples = (
        E.pool2d((1, 5, 9, 7), "max", 3, 2, 1, dtype="q8"),
        E.pool2d((2, 3, 6, 6), "average", 2, 2, dtype="q8"),
    )

    family = "pool2d_q8"
    ops = (T.PoolingOp, T.AdaptivePoolingOp)
    priority = 90

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
        if op.params()["format"] != enums.Format.NCHW or not same_type(op) or code(op.operands[0]) != "q8":
            return None
        if qparams(op.operands[0])[1]:
            return None
        params = pool_geometry(op)
        return None if params is None else Lowered(params, [op.operands[0]])


    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("pool2d_q8", p["mode"], *plane_sym(p))

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        ih, iw, oh, ow, fh, fw = p["ih"], p["iw"], p["oh"], p["ow"], p["fh"], p["fw"]
        mode = p["mode"]
        step = "if (e > a) a = e;" if mode == "max" else "a += e;"
        init = "-128" if mode == "max" else "0"
        cn = str(fh * fw) if mode == "average" else "cnt"
        fin = "a" if mode == "max" else "(a >= 0 ? (2 * a + cn) / (2 * cn) : -((2 * -a + cn) / (2 * cn)))"
        return f"""
static void {sym}(const void* x_, void* y_, unsigned char* ws, int nt) {{
  const int8_t* x = (const int8_t*)x_;
  int8_t* y = (int8_t*)y_;
  (void)ws;
  {_par(p["n"] * p["c"] * oh * ow * fh * fw)}
  for (int nc = 0; nc < {p["n"] * p["c"]}; ++nc)
    for (int oy = 0; oy < {oh}; ++oy)
      for (int ox = 0; ox < {ow}; ++ox) {{
        int32_t a = {init}; int cnt = 0;
{window_taps(p, [f"const int32_t e = x[(long)nc * {ih * iw} + yy * {iw} + xx]; {step} ++cnt;"], " " * 8)}
        const int32_t cn = {cn}; (void)cn;
        y[(long)nc * {oh * ow} + oy * {ow} + ox] = (int8_t){fin};
      }}
}}
"""

    def support(self, em: CEmitter) -> str:
        return HEADER


def matmul_q8_head(sym: str, p: dict[str, Any]) -> str:
    """The opening of an int8 (batched) matmul kernel up to its batch loop's body: per batch ``bt``,
    ``a``, ``b`` (one matrix when constant) and the result ``y`` (``OUT_CTYPES[p["out"]]``) at its
    matrices."""
    m, n, k = p["m"], p["n"], p["k"]
    otype = OUT_CTYPES[p["out"]]
    return f"""
static void {sym}(const void* a_, const void* b_, void* y_, unsigned char* ws, int nt) {{
  (void)ws;
  for (int bt = 0; bt < {p["batch"]}; ++bt) {{
    const int8_t* a = (const int8_t*)a_ + (long)bt * {m * k};
    const int8_t* b = (const int8_t*)b_ + (long)bt * {n * k if not p["b_const"] else 0};
    {otype}* y = ({otype}*)y_ + (long)bt * {m * n};"""


class MatmulQ8(Template):
    """int8 ``y = op(a) @ op(b)``, exact int32 accumulation, result int32 or requantized."""
    examples = (E.matmul_q8(5, 13, 7), E.matmul_q8(3, 9, 4, tb=True))

    family = "matmul_q8"
    ops = (T.MatrixMulOp, T.BatchedMatrixMulOp)
    priority = 90

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.MatrixMulOp | T.BatchedMatrixMulOp)
        a, b = op.operands
        if code(a) != "q8" or code(b) != "q8" or qparams(a)[1] or qparams(b)[1]:
            return None
        rq = requant_params(a, b, op.results[0])
        if rq is None:
            return None
        p = op.params()
        sa, sb = shape(a), shape(b)
        batched = isinstance(op, T.BatchedMatrixMulOp)
        params = {
            "batch": sa[0] if batched else 1, "m": sa[-1] if p["transpose_a"] else sa[-2],
            "k": sa[-2] if p["transpose_a"] else sa[-1], "n": sb[-2] if p["transpose_b"] else sb[-1],
            "ta": int(bool(p["transpose_a"])), "tb": int(bool(p["transpose_b"])), "b_const": int(not batched),
            **rq,
        }  # fmt: skip
        return Lowered(params, [a, b])


    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("matmul_q8", f"b{p['batch']}", f"m{p['m']}", f"n{p['n']}", f"k{p['k']}",
                        "ta" if p["ta"] else "", "tb" if p["tb"] else "", p["out"], p["qid"])  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        M, N, Kd = p["m"], p["n"], p["k"]
        a_at = f"a[(long)kk * {M} + i]" if p["ta"] else f"a[(long)i * {Kd} + kk]"
        b_at = f"b[(long)j * {Kd} + kk]" if p["tb"] else f"b[(long)kk * {N} + j]"
        return exact(f"""{matmul_q8_head(sym, p)}
    {_par(M * N * Kd)}
    for (int i = 0; i < {M}; ++i)
      for (int j = 0; j < {N}; ++j) {{
        int32_t acc = 0;
        for (int kk = 0; kk < {Kd}; ++kk) acc += (int32_t){a_at} * {b_at};
        y[(long)i * {N} + j] = {result_expr(p, "acc")};
      }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER + REQUANT_C


class Conv2dQ8(Template):
    """int8 NCHW convolution (any groups, stride, padding, dilation), int32 accumulation, the
    reference's epilogue (:func:`backends.c.templates.portable.requant.result_expr`): the fallback for the
    int8 convs the NCHW44 passes leave in NCHW."""
    examples = (
        E.conv2d_q8((1, 5, 7, 6), 7, 3, pad=1, act="relu"),
        E.conv2d_q8((2, 4, 6, 5), 6, 1, stride=2, groups=2),
    )

    family = "conv2d_q8"
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 90

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
        p = op.params()
        x, w, *rest = op.operands
        if (
            p["format"] != enums.Format.NCHW
            or code(x) != "q8"
            or code(w) != "q8"
            or qparams(x)[1]
            or qparams(w)[1]
        ):
            return None
        if L.layout_of(w.type) is not None:
            return None
        rq = requant_params(x, w, op.results[0])
        if rq is None:
            return None
        wv = const_array(w)
        w_operand: SSAValue | np.ndarray = w
        if p["mode"] == enums.ConvMode.CONVOLUTION:
            if wv is None:
                return None
            w_operand = np.ascontiguousarray(wv[..., ::-1, ::-1])
        n, ic, ih, iw = shape(x)
        _, oc, oh, ow = shape(op.results[0])
        ws = shape(w)
        groups = ws[0] if p["sparse"] == enums.ConvSparse.GROUP else 1
        params: dict[str, Any] = {
            "n": n, "ic": ic, "ih": ih, "iw": iw, "oc": oc, "oh": oh, "ow": ow, "fh": ws[-2], "fw": ws[-1],
            "sh": p["stride"][0], "sw": p["stride"][1], "ph": p["padding"][0], "pw": p["padding"][1],
            "dh": p["dilation"][0], "dw": p["dilation"][1], "groups": groups, "bias": 0, "act": "identity",
            **rq,
        }  # fmt: skip
        operands: list[SSAValue | np.ndarray] = [x, w_operand]
        if isinstance(op, T.ConvBiasOp):
            params["act"] = INT8_ACT.get(p["nonline_mode"], "")
            if not params["act"] or len(rest) > 1:
                return None
            if rest:
                if math.prod(shape(rest[0])) != oc:
                    return None
                params["bias"] = 1
                bias = bias_values(rest[0], acc_scale(x, w), params)
                if bias is None:
                    return None
                operands.append(bias)
        return Lowered(params, operands)


    def symbol(self, p: dict[str, Any]) -> str:
        bias = "bias" if p["bias"] else ""
        return sym_join("conv2d_q8", *conv_sym(p, explicit=True), bias, p["act"].upper(), p["out"], p["qid"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, ph, pw, dh, dw, g = (
            p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw", "groups")
        )
        icg, ocg = ic // g, oc // g
        int_bias = p["bias"] and not post_processed(p)
        otype = OUT_CTYPES[p["out"]]
        args = ["const void* x_", "const void* w_", *(["const void* b_"] if p["bias"] else []), "void* y_",
                "unsigned char* ws", "int nt"]  # fmt: skip
        return exact(f"""
static void {sym}({", ".join(args)}) {{
  const int8_t* x = (const int8_t*)x_;
  const int8_t* w = (const int8_t*)w_;
  {otype}* y = ({otype}*)y_;
  {f"const {bias_ctype(p)}* bias = (const {bias_ctype(p)}*)b_;" if p["bias"] else ""}
  (void)ws;
  {_par(n * oc * oh * ow * icg * fh * fw)}
  for (int no = 0; no < {n * oc}; ++no) {{
    const int nn = no / {oc}, o = no % {oc}, gi = o / {ocg};
    for (int oy = 0; oy < {oh}; ++oy)
      for (int ox = 0; ox < {ow}; ++ox) {{
        int32_t acc = {"bias[o]" if int_bias else "0"};
        for (int c = 0; c < {icg}; ++c) {{
          const int8_t* xc = x + ((long)nn * {ic} + gi * {icg} + c) * {ih * iw};
          const int8_t* wc = w + ((long)o * {icg} + c) * {fh * fw};
          for (int r = 0; r < {fh}; ++r) {{
            const int yy = oy * {sh} - {ph} + r * {dh};
            if ((unsigned)yy >= {ih}u) continue;
            for (int s = 0; s < {fw}; ++s) {{
              const int xx = ox * {sw} - {pw} + s * {dw};
              if ((unsigned)xx < {iw}u) acc += (int32_t)xc[yy * {iw} + xx] * wc[r * {fw} + s];
            }}
          }}
        }}
        {int_activation(p, "acc")}
        y[((long)nn * {oc} + o) * {oh * ow} + oy * {ow} + ox] = {result_expr(p, "acc", "bias[o]")};
      }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER + REQUANT_C


KERNEL_UNITS = (
    Relayout(), TypeCvt(), ElemwiseQ(), Pool2dQ8(), MatmulQ8(), Conv2dQ8(),
)  # fmt: skip
