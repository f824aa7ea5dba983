"""Float16 elementwise and pooling kernels in ARMv8.2 FP16 arithmetic (the ``fp16`` ISA, ``arm-fp16``).

Without them every float16 elementwise op is widened by ``kernel-widen-f16`` (a ``typecvt`` to float32,
the float32 kernel, a ``typecvt`` back: three passes over the tensor) and float16 pooling runs the
NCHW44 pooling template's scalar loop.

* ``elemwise_f16``: the common modes (activations, arithmetic, fused add-activations) on float16
  operands of one shape or broadcast along whole dimensions, 8 lanes per ``.8h`` instruction along the
  innermost contiguous dimension (then 4 lanes, then one element). Each operation rounds to float16 as
  the reference interpreter's float16 numpy does (``h_swish`` is ``x * clip(x + 3, 0, 6)`` then
  ``/ 6``, no fused multiply-add).
* ``pool2d_nchw44_f16``: max pooling of NCHW44 float16 activations, a pixel's 4 channels one ``.4h``
  vector, its window's taps unrolled with out-of-range taps read from the nearest in-range row and
  column (exact for max; no per-tap bounds checks: ShuffleNetV2's 3x3/2 pool 64x64 165k -> 27k
  instructions); average pooling sums in float32 (``fcvtl``) and divides once, as the scalar template.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import code, pool_geometry, same_type
from backends.c.templates import Template, plane_sym, strided_index, sym_join, window_taps
from backends.c.templates.arm.neon import pool_planes
from backends.c.templates.arm.neon_move import loop_nest
from dialects import enums
from dialects import tensor as T
from dialects.layout import SPECS, Layout
from passes.lowering.kernels import Lowered, broadcast_strides, collapse, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# mode -> vector expression over a, b, c (``{q}`` is ``q`` for .8h and empty for .4h intrinsics,
# ``{t}`` the lane count for vdup), matching the reference's float16 arithmetic operation by operation
_CLAMP6 = "vmin{q}_f16(vmax{q}_f16({x}, vdup{q}_n_f16(0)), vdup{q}_n_f16(6))"
ELEMWISE_F16: dict[str, str] = {
    "relu": "vmax{q}_f16(a, vdup{q}_n_f16(0))",
    "relu6": _CLAMP6.replace("{x}", "a"),
    "add": "vadd{q}_f16(a, b)",
    "sub": "vsub{q}_f16(a, b)",
    "mul": "vmul{q}_f16(a, b)",
    "true_div": "vdiv{q}_f16(a, b)",
    "max": "vmax{q}_f16(a, b)",
    "min": "vmin{q}_f16(a, b)",
    "negate": "vneg{q}_f16(a)",
    "abs": "vabs{q}_f16(a)",
    "square": "vmul{q}_f16(a, a)",
    "fuse_add_relu": "vmax{q}_f16(vadd{q}_f16(a, b), vdup{q}_n_f16(0))",
    "h_swish": "vdiv{q}_f16(vmul{q}_f16(a, "
    + _CLAMP6.replace("{x}", "vadd{q}_f16(a, vdup{q}_n_f16(3))")
    + "), vdup{q}_n_f16(6))",
    "fuse_add_h_swish": "xm_hswish{q}_f16(vadd{q}_f16(a, b))",
    "hsigmoid": "vdiv{q}_f16("
    + _CLAMP6.replace("{x}", "vadd{q}_f16(a, vdup{q}_n_f16(3))")
    + ", vdup{q}_n_f16(6))",
    "fuse_mul_add3": "vadd{q}_f16(vmul{q}_f16(a, b), c)",
    "clip": "vmin{q}_f16(vmax{q}_f16(a, b), c)",
}

_SUPPORT = """
static inline float16x8_t xm_hswishq_f16(float16x8_t a) {
  const float16x8_t r = vminq_f16(vmaxq_f16(vaddq_f16(a, vdupq_n_f16(3)), vdupq_n_f16(0)), vdupq_n_f16(6));
  return vdivq_f16(vmulq_f16(a, r), vdupq_n_f16(6));
}
static inline float16x4_t xm_hswish_f16(float16x4_t a) {
  const float16x4_t r = vmin_f16(vmax_f16(vadd_f16(a, vdup_n_f16(3)), vdup_n_f16(0)), vdup_n_f16(6));
  return vdiv_f16(vmul_f16(a, r), vdup_n_f16(6));
}
"""


class ElemwiseF16(Template):
    """``elemwise_f16``: float16 elementwise ops along a contiguous innermost dimension (module doc)."""
    examples = (
        E.elemwise("add", (2, 13, 9, 11), (2, 13, 9, 11)),
        E.elemwise("mul", (3, 37), (1, 37)),
        E.elemwise("relu", (5, 19)),
        E.elemwise("h_swish", (4, 33)),
    )

    family = "elemwise_f16"
    epilogue_consumer = True
    ops = (T.ElemwiseOp,)
    priority = 97  # float16 only: no other elementwise family accepts these ops

    def __init__(self, isa: str = "fp16"):
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ElemwiseOp)
        mode = op.params()["mode"].value
        if mode not in ELEMWISE_F16 or any(code(v) != "f16" for v in (*op.operands, *op.results)):
            return None
        out = shape(op.results[0])
        strides = [broadcast_strides(shape(v), out) for v in op.operands]
        cshape, cstrides = collapse(out, [[math.prod(out[i + 1 :]) for i in range(len(out))], *strides])
        # the output is contiguous; every operand walks the innermost dimension contiguously or not at all
        if any(st[-1] not in (0, 1) for st in cstrides[1:]):
            return None
        in_place = shape(op.operands[0]) == out
        params = {"mode": mode, "shape": cshape, "strides": cstrides[1:], "inplace": int(in_place)}
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        st = "_".join("s" + "x".join(map(str, s)) for s in p["strides"])
        return sym_join("elemwise_f16", p["mode"], "x".join(map(str, p["shape"])), st)

    def support(self, em: CEmitter) -> str:
        return _SUPPORT

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        dims, strides = p["shape"], p["strides"]
        n_in = len(strides)
        names = "abc"[:n_in]
        inner = dims[-1]
        ins = [f"const float16_t* in{i}" for i in range(n_in)]
        args = ", ".join([*ins, "float16_t* out0", "unsigned char* ws", "int nt"])
        out_strides = [math.prod(dims[i + 1 :]) for i in range(len(dims))]

        def step(width: int) -> str:
            """One ``width``-lane (8, 4 or 1) step at inner index ``j``."""
            if width == 1:
                load = "vld1_dup_f16({p})"
                store = "vst1_lane_f16({p}, {v}, 0)"
            else:
                load = "vld1q_f16({p})" if width == 8 else "vld1_f16({p})"
                store = "vst1q_f16({p}, {v})" if width == 8 else "vst1_f16({p}, {v})"
            vt = "float16x8_t" if width == 8 else "float16x4_t"
            q = "q" if width == 8 else ""
            loads = []
            for i, st in enumerate(strides):
                ptr = f"in{i} + x{i} + j" if st[-1] else f"in{i} + x{i}"
                dup = f"vdup{q}_n_f16(*({ptr}))" if not st[-1] else load.format(p=ptr)
                loads.append(f"const {vt} {names[i]} = {dup};")
            expr = ELEMWISE_F16[p["mode"]].replace("{q}", q)
            return " ".join(loads) + " " + store.format(p="out0 + o + j", v=expr) + ";"

        body = [
            *(f"const long x{i} = {strided_index(st[:-1])};" for i, st in enumerate(strides)),
            f"const long o = {strided_index(out_strides[:-1])};",
            "long j = 0;",
            f"for (; j + 8 <= {inner}; j += 8) {{ {step(8)} }}",
            f"if (j + 4 <= {inner}) {{ {step(4)} j += 4; }}" if inner % 8 >= 4 else "",
            f"for (; j < {inner}; ++j) {{ {step(1)} }}" if inner % 4 else "",
        ]
        return loop_nest([f"static void {sym}({args}) {{", "  (void)ws; (void)nt;"], dims[:-1], body)


class PoolF16Nchw44(Template):
    """``pool2d_nchw44_f16``: max / average pooling of float16 NCHW44 activations, one ``.4h`` per pixel."""
    examples = (
        E.conv_chain((1, 4, 9, 11), (8, 1, 1, 1, "relu"), pool=("max", 3, 2, 1)),
        E.conv_chain((2, 4, 7, 6), (4, 3, 1, 1, "identity"), pool=("average", 2, 2, 0)),
    )

    family = "pool2d_nchw44_f16"
    ops = (T.PoolingOp, T.AdaptivePoolingOp)
    priority = 210  # ahead of the NCHW44 pooling template (200), float16 only

    def __init__(self, isa: str = "fp16"):
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
        if op.params()["format"] != enums.Format.NCHW44 or not same_type(op) or code(op.operands[0]) != "f16":
            return None
        params = pool_geometry(op)
        if params is None or params["c"] % 4:
            return None
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(self.family, p["mode"], *plane_sym(p))

    @staticmethod
    def clamps_exactly(p: dict[str, Any]) -> bool:
        """Max pooling may read a window's out-of-range taps from its nearest in-range row and column
        (max is idempotent: a tap read twice changes nothing) when every window holds an in-range
        tap; small windows only (every tap is unrolled)."""
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        inside = (
            ph < fh and pw < fw and (p["oh"] - 1) * sh - ph < p["ih"] and (p["ow"] - 1) * sw - pw < p["iw"]
        )
        return p["mode"] == "max" and inside and fh * fw <= 25

    def _render_max_clamped(self, sym: str, p: dict[str, Any]) -> str:
        """Max pooling without per-tap bounds checks: each output row reads its window rows clamped
        into the image; interior columns (every tap inside the row) in a loop, the few border
        columns unrolled with their taps clamped when rendering."""
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        xs = SPECS[Layout.NCHW44].dim_strides((n, c, ih, iw))
        ys = SPECS[Layout.NCHW44].dim_strides((n, c, oh, ow))
        lo = min(ow, -(-pw // sw))
        hi = max(lo, min(ow, (iw - fw + pw) // sw + 1)) if iw - fw + pw >= 0 else lo

        def window(col: str, taps: list[str]) -> list[str]:
            loads = [f"vld1_f16(x{r} + {col}{t})" for r in range(fh) for t in taps]
            return [f"float16x4_t a = {loads[0]};", *(f"a = vmax_f16(a, {v});" for v in loads[1:])]

        rows = []
        for r in range(fh):
            clamp = f"yy{r} < 0 ? 0 : yy{r} > {ih - 1} ? {ih - 1} : yy{r}"
            rows.append(f"int yy{r} = oy * {sh} + {r - ph}; yy{r} = {clamp};")
            rows.append(f"const float16_t* x{r} = xb + (long)yy{r} * {xs['H']};")
        body = [f"for (int ox = {lo}; ox < {hi}; ++ox) {{"] if hi > lo else []
        if hi > lo:
            taps = [f" {'-' if s < pw else '+'} {4 * abs(s - pw)}" for s in range(fw)]
            body += ["  " + t for t in window(f"(long)ox * {4 * sw}", taps)]
            body += ["  vst1_f16(yr + (long)ox * 4, a);", "}"]
        for ox in [*range(lo), *range(hi, ow)]:
            cols = sorted({min(iw - 1, max(0, ox * sw - pw + s)) for s in range(fw)})
            body += [
                "{",
                *("  " + t for t in window("", [str(4 * x) for x in cols])),
                f"  vst1_f16(yr + {4 * ox}, a);",
                "}",
            ]
        inner = "\n".join(
            "        " + line for line in [*rows, f"float16_t* yr = yb + (long)oy * {ys['H']};", *body]
        )
        return pool_planes(sym, "float16_t", n, c, xs, ys, f"""      for (int oy = 0; oy < {oh}; ++oy) {{
{inner}
      }}""")

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        if self.clamps_exactly(p):
            return self._render_max_clamped(sym, p)
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        xs = SPECS[Layout.NCHW44].dim_strides((n, c, ih, iw))
        ys = SPECS[Layout.NCHW44].dim_strides((n, c, oh, ow))
        pix = f"xb + (long)yy * {xs['H']} + (long)xx * {xs['W']}"
        if p["mode"] == "max":
            init = "float16x4_t a = vdup_n_f16(-INFINITY);"
            acc = f"a = vmax_f16(a, vld1_f16({pix}));"
            fin = "a"
        else:
            init = "float32x4_t a = vdupq_n_f32(0.f); int cnt = 0; (void)cnt;"
            acc = f"a = vaddq_f32(a, vcvt_f32_f16(vld1_f16({pix}))); ++cnt;"
            count = str(fh * fw) if p["mode"] == "average" else "cnt"
            fin = f"vcvt_f16_f32(vdivq_f32(a, vdupq_n_f32((float){count})))"
        return pool_planes(sym, "float16_t", n, c, xs, ys, f"""      for (int oy = 0; oy < {oh}; ++oy)
        for (int ox = 0; ox < {ow}; ++ox) {{
          {init}
{window_taps(p, [acc], " " * 10)}
          vst1_f16(yb + (long)oy * {ys["H"]} + (long)ox * {ys["W"]}, {fin});
        }}""")


KERNEL_UNITS = (ElemwiseF16(), PoolF16Nchw44())
