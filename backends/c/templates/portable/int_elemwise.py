"""Portable C (ISA ``generic``) for what the float32 / int32 templates leave out on integer and bool
element types, so that every model the reference runs on them also compiles (ONNX models carry
int8 / int16 / uint8 / uint16 arithmetic, integer Max / Min / Mod / Pow, uint8 max pooling and
bool reductions):

* ``elemwise_int``: add, sub, mul, max, min, mod, floor_div, pow and the comparisons on ``i8``,
  ``i16``, ``i32``, ``ui8``, ``ui16`` (any broadcast, the strided loops of the float kernel);
* ``pool2d_int``: max pooling of plain NCHW integer tensors;
* ``reduce_bool``: min / max (all / any) of bool tensors along one axis;
* ``typecvt_plain``: conversions to and from uint16.

Each computes what its reference kernel computes (``backends/reference/kernels.py``): numpy's
integer semantics, i.e. arithmetic wrapping around in the element type (computed in a wider
unsigned type, where C defines overflow), Python's modulo and floor division (the divisor's sign),
0 for a division by zero, and a negative integer power truncated toward zero.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import Float32Type, IntegerType, Signedness, TensorType
from xdsl.ir import Operation, SSAValue

import backends.c.examples as E
from backends.c.templates import Template, sym_join
from backends.c.templates.portable.generic import _strided_loops
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.lowering.kernels import Lowered, broadcast_strides, collapse, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# element-type code -> (C type, the unsigned type its wrapping arithmetic runs in)
INT_CTYPES = {
    "i8": ("int8_t", "uint32_t"),
    "i16": ("int16_t", "uint32_t"),
    "i32": ("int32_t", "uint32_t"),
    "ui8": ("uint8_t", "uint32_t"),
    "ui16": ("uint16_t", "uint32_t"),
}
INT_MIN_C = {"i8": "INT8_MIN", "i16": "INT16_MIN", "i32": "INT32_MIN", "ui8": "0", "ui16": "0"}
BOOL = "b1"


def int_code(v: SSAValue) -> str | None:
    """``i8`` / ``i16`` / ``i32`` / ``ui8`` / ``ui16`` / ``b1`` for a plain integer or bool value."""
    t = v.type
    if not isinstance(t, TensorType) or L.layout_of(t) is not None:
        return None
    e = t.element_type
    if not isinstance(e, IntegerType):
        return None
    width, unsigned = e.width.data, e.signedness.data == Signedness.UNSIGNED
    if width == 1:
        return BOOL
    c = f"{'ui' if unsigned else 'i'}{width}"
    return c if c in INT_CTYPES else None


# mode -> C expression of a, b in the operands' C type T (U: the wrapping type); comparisons give bool
_ARITH = {
    "add": "(T)((U)a + (U)b)",
    "sub": "(T)((U)a - (U)b)",
    "mul": "(T)((U)a * (U)b)",
    "max": "(a > b ? a : b)",
    "min": "(a < b ? a : b)",
    "mod": "xm_int_mod_T(a, b)",
    "floor_div": "xm_int_floor_div_T(a, b)",
    "pow": "xm_int_pow_T(a, b)",
}
_COMPARE = {"lt": "(a < b)", "leq": "(a <= b)", "eq": "(a == b)", "neq": "(a != b)"}
# int32 add / sub / mul / comparisons have kernels in the portable elemwise family already
_COVERED_I32 = {"add", "sub", "mul", "lt", "leq", "eq", "neq"}


def _helpers(code: str) -> str:
    """Python's modulo and floor division and numpy's integer power for one C type."""
    t, u = INT_CTYPES[code]
    signed = not code.startswith("ui")
    fix = "if (r != 0 && ((r < 0) != (b < 0))) r += b;" if signed else ""
    neg_one = "if (b == -1) return 0;" if signed else ""  # INT_MIN % -1 is undefined in C
    neg_one_div = f"if (b == -1) return ({t})(0u - (uint32_t)a);" if signed else ""
    neg_pow = "if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;" if signed else ""
    return f"""
static inline {t} xm_int_mod_{code}({t} a, {t} b) {{
  if (b == 0) return 0;
  {neg_one}
  {t} r = ({t})(a % b);
  {fix}
  return r;
}}
static inline {t} xm_int_floor_div_{code}({t} a, {t} b) {{
  if (b == 0) return 0;
  {neg_one_div}
  {t} q = ({t})(a / b);
  {"if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;" if signed else ""}
  return q;
}}
static inline {t} xm_int_pow_{code}({t} a, {t} b) {{
  {neg_pow}
  {u} base = ({u})a, acc = 1;
  for ({u} e = ({u})b; e; e >>= 1) {{
    if (e & 1) acc *= base;
    base *= base;
  }}
  return ({t})acc;
}}
"""


class IntElemwise(Template):
    family = "elemwise_int"
    ops = (T.ElemwiseOp,)
    priority = 89
    examples = (
        E.elemwise("add", (3, 5), (3, 5), dtype="i16"),
        E.elemwise("mul", (2, 7), (2, 7), dtype="i8"),
        E.elemwise("floor_div", (4, 6), (4, 6), dtype="i32"),
        E.elemwise("lt", (3, 4), (3, 4), dtype="ui8"),
    )

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ElemwiseOp)
        mode = op.params()["mode"].value
        if len(op.operands) != 2:
            return None
        codes = [int_code(v) for v in (*op.operands, *op.results)]
        a, b, out = codes
        if a is None or a == BOOL or a != b:
            return None
        if mode in _COMPARE:
            if out != BOOL:
                return None
        elif mode not in _ARITH or out != a:
            return None
        if a == "i32" and mode in _COVERED_I32:
            return None
        res = shape(op.results[0])
        strides = [broadcast_strides(shape(v), res) for v in op.operands]
        cshape, cstrides = collapse(res, strides)
        return Lowered({"mode": mode, "shape": cshape, "strides": cstrides, "code": a}, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        st = "_".join("s" + "x".join(map(str, s)) for s in p["strides"])
        return sym_join("elemwise_int", p["mode"], "x".join(map(str, p["shape"])), st, p["code"])

    def support(self, em: CEmitter) -> str:
        return "".join(_helpers(c) for c in INT_CTYPES)

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        t, u = INT_CTYPES[p["code"]]
        mode = p["mode"]
        if mode in _COMPARE:
            out_t, expr = "uint8_t", _COMPARE[mode]
        else:
            out_t = t
            expr = (
                _ARITH[mode]
                .replace("_T(", f"_{p['code']}(")
                .replace("(T)", f"({t})")
                .replace("(U)", f"({u})")
            )
        args = f"const {t}* in0, const {t}* in1, {out_t}* out0, unsigned char* ws, int nt"
        body = f"const {t} a = in0[x0]; const {t} b = in1[x1]; out0[o] = {expr};"
        total = math.prod(p["shape"])
        return (
            f"static void {sym}({args}) {{\n  (void)ws;\n"
            + _strided_loops(p["shape"], p["strides"], body, total)
            + "\n}\n"
        )


class IntMaxPool(Template):
    """Max pooling of plain NCHW integer tensors (the window's padding never wins: it is the
    type's smallest value, as in the reference)."""
    examples = (
        E.pool2d((1, 3, 7, 8), "max", 3, 2, 1, dtype="i32"),
        E.pool2d((2, 2, 5, 5), "max", 2, 1, dtype="i16"),
    )

    family = "pool2d_int"
    ops = (T.PoolingOp,)
    priority = 89

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PoolingOp)
        p = op.params()
        c = int_code(op.operands[0])
        if c is None or c == BOOL:
            return None
        if c is None or c == BOOL or c != int_code(op.results[0]) or p["mode"] != enums.PoolingMode.MAX:
            return None
        if p.get("format", enums.Format.NCHW) != enums.Format.NCHW:
            return None
        n, ch, ih, iw = shape(op.operands[0])
        _, _, oh, ow = shape(op.results[0])
        (fh, fw), (sh, sw), (ph, pw) = p["window"], p["stride"], p["padding"]
        params = {
            "code": c, "nc": n * ch, "ih": ih, "iw": iw, "oh": oh, "ow": ow,
            "fh": fh, "fw": fw, "sh": sh, "sw": sw, "ph": ph, "pw": pw,
        }  # fmt: skip
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "maxpool_int", p["code"], f"nc{p['nc']}", f"{p['ih']}x{p['iw']}", f"k{p['fh']}x{p['fw']}",
            f"s{p['sh']}x{p['sw']}", f"p{p['ph']}x{p['pw']}",
        )  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        t, _ = INT_CTYPES[p["code"]]
        return f"""static void {sym}(const {t}* in0, {t}* out0, unsigned char* ws, int nt) {{
  (void)ws; (void)nt;
  for (long c = 0; c < {p["nc"]}L; ++c)
    for (long y = 0; y < {p["oh"]}; ++y)
      for (long x = 0; x < {p["ow"]}; ++x) {{
        {t} best = {INT_MIN_C[p["code"]]};
        for (long ky = 0; ky < {p["fh"]}; ++ky) {{
          const long iy = y * {p["sh"]} - {p["ph"]} + ky;
          if (iy < 0 || iy >= {p["ih"]}) continue;
          for (long kx = 0; kx < {p["fw"]}; ++kx) {{
            const long ix = x * {p["sw"]} - {p["pw"]} + kx;
            if (ix < 0 || ix >= {p["iw"]}) continue;
            const {t} v = in0[(c * {p["ih"]} + iy) * {p["iw"]} + ix];
            if (v > best) best = v;
          }}
        }}
        out0[(c * {p["oh"]} + y) * {p["ow"]} + x] = best;
      }}
}}
"""


class BoolReduce(Template):
    """Min / max of a bool tensor along one axis: all / any (an empty axis gives true / false, the
    identities the reference starts from)."""
    examples = (E.reduce((3, 5, 4), "min", 1, dtype="b1"), E.reduce((6, 7), "max", 0, dtype="b1"))

    family = "reduce_bool"
    ops = (T.ReduceOp,)
    priority = 89

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ReduceOp)
        p = op.params()
        if int_code(op.operands[0]) != BOOL or int_code(op.results[0]) != BOOL:
            return None
        mode = p["mode"]
        if mode not in (enums.ReduceMode.MIN, enums.ReduceMode.MAX):
            return None
        s = shape(op.operands[0])
        axis = p["axis"]
        outer, n, inner = math.prod(s[:axis]), s[axis], math.prod(s[axis + 1 :])
        return Lowered(
            {"all": int(mode == enums.ReduceMode.MIN), "outer": outer, "n": n, "inner": inner},
            [op.operands[0]],
        )

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("reduce_bool", "all" if p["all"] else "any", p["outer"], p["n"], p["inner"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        init, stop = ("1", "!v") if p["all"] else ("0", "v")
        return f"""static void {sym}(const uint8_t* in0, uint8_t* out0, unsigned char* ws, int nt) {{
  (void)ws; (void)nt;
  for (long o = 0; o < {p["outer"]}L; ++o)
    for (long i = 0; i < {p["inner"]}L; ++i) {{
      uint8_t r = {init};
      for (long k = 0; k < {p["n"]}L; ++k) {{
        const uint8_t v = in0[(o * {p["n"]}L + k) * {p["inner"]}L + i] != 0;
        if ({stop}) {{ r = v; break; }}
      }}
      out0[o * {p["inner"]}L + i] = r;
    }}
}}
"""


class PlainTypeCvt(Template):
    """Conversions between float32 and the plain integer / bool types that the ``typecvt`` family
    (element-type codes of :func:`backends.c.match.code`) does not name: uint16. C's conversion
    is numpy's ``astype`` for in-range values (floats truncate toward zero; bool is ``!= 0``)."""
    examples = (E.typecvt((3, 5), "f32", "ui16"), E.typecvt((4, 3), "ui16", "f32"))

    family = "typecvt_plain"
    ops = (T.TypeCvtOp,)
    priority = 89

    def match(self, op: Operation) -> Lowered | None:
        src, dst = (_plain_code(v) for v in (op.operands[0], op.results[0]))
        if src is None or dst is None or "ui16" not in (src, dst):
            return None
        return Lowered({"src": src, "dst": dst, "size": math.prod(shape(op.results[0]))}, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("typecvt_plain", p["src"], "to", p["dst"], f"n{p['size']}")

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        ct = {**{c: t for c, (t, _) in INT_CTYPES.items()}, BOOL: "uint8_t", "f32": "float"}
        src_t, dst_t = ct[p["src"]], ct[p["dst"]]
        value = "(in0[i] != 0)" if p["dst"] == BOOL else f"({dst_t})in0[i]"
        return f"""static void {sym}(const {src_t}* in0, {dst_t}* out0, unsigned char* ws, int nt) {{
  (void)ws; (void)nt;
  for (long i = 0; i < {p["size"]}L; ++i) out0[i] = {value};
}}
"""


def _plain_code(v: SSAValue) -> str | None:
    t = v.type
    if isinstance(t, TensorType) and L.layout_of(t) is None and isinstance(t.element_type, Float32Type):
        return "f32"
    return int_code(v)


KERNEL_UNITS = (IntElemwise(), IntMaxPool(), BoolReduce(), PlainTypeCvt())
