"""Data movement in NEON registers for AArch64 (``neon`` and ``fp16`` ISAs), any element size of 2 or
4 bytes (float16 and float32 alike: a float16 tensor moves twice the elements per instruction).

* ``relayout`` between plain NCHW and NCHW44 (channels a multiple of 4): the 4 channel planes of a
  block are one ``st4`` interleave of 4 row loads (``ld4`` de-interleaves the other way), 8 pixels per
  instruction for 2-byte elements, 4 for 4-byte ones (then half that, then one pixel); other
  relayouts keep the portable strided walk.
* ``copy`` (transposes, slices, broadcasts) whose innermost dimension is contiguous in the source:
  16-byte vector loads and stores along it (then 8 bytes, then one element); other copies keep the
  portable loop.

Both subclass the portable templates (:mod:`backends.c.templates.portable.typed`, ``generic``), whose
availability rules and parameters they keep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backends.c.templates import strided_index
from backends.c.templates.portable.generic import BYTES_CTYPE, ESIZE, Copy
from backends.c.templates.portable.typed import Relayout

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# element bytes -> (lane type suffix, lanes per q register)
LANES = {2: ("u16", 8), 4: ("u32", 4)}


def loop_nest(head: list[str], outer: Sequence[int], body: list[str]) -> str:
    """A C function: ``head`` (its signature line and set-up), then ``body`` (empty lines dropped)
    inside one ``for (long iD ...)`` loop per ``outer`` dimension."""
    lines = list(head)
    for d, size in enumerate(outer):
        lines.append(f"{'  ' * (d + 1)}for (long i{d} = 0; i{d} < {size}; ++i{d}) {{")
    ind = "  " * (len(outer) + 1)
    lines += [ind + b for b in body if b]
    lines += ["  " * (d + 1) + "}" for d in range(len(outer) - 1, -1, -1)]
    lines.append("}")
    return "\n".join(lines) + "\n"


class RelayoutNeon(Relayout):
    """Plain NCHW <-> NCHW44 as ``ld1``/``st4`` (``ld4``/``st1``) register interleaves."""

    def __init__(self, isa: str):
        self.isa = isa

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        pair = {p["src"], p["dst"]}
        logical = p["logical"]
        if pair != {"plain", "nchw44"} or len(logical) != 4 or logical[1] % 4 or p["esize"] not in LANES:
            return super().render(em, sym, p)
        n, c, h, w = logical
        hw = h * w
        t = BYTES_CTYPE[p["esize"]]
        sfx, lanes = LANES[p["esize"]]
        to_blocked = p["dst"] == "nchw44"
        if to_blocked:
            vec = (
                f"{{ uint{sfx[1:]}x{lanes}x4_t v; "
                + " ".join(f"v.val[{k}] = vld1q_{sfx}(ib + {k * hw} + q);" for k in range(4))
                + f" vst4q_{sfx}(ob + q * 4, v); }}"
            )
            half = (
                f"{{ uint{sfx[1:]}x{lanes // 2}x4_t v; "
                + " ".join(f"v.val[{k}] = vld1_{sfx}(ib + {k * hw} + q);" for k in range(4))
                + f" vst4_{sfx}(ob + q * 4, v); }}"
            )
            one = "for (int k = 0; k < 4; ++k) ob[q * 4 + k] = ib[k * " + str(hw) + " + q];"
        else:
            vec = (
                f"{{ const uint{sfx[1:]}x{lanes}x4_t v = vld4q_{sfx}(ib + q * 4); "
                + " ".join(f"vst1q_{sfx}(ob + {k * hw} + q, v.val[{k}]);" for k in range(4))
                + " }"
            )
            half = (
                f"{{ const uint{sfx[1:]}x{lanes // 2}x4_t v = vld4_{sfx}(ib + q * 4); "
                + " ".join(f"vst1_{sfx}(ob + {k * hw} + q, v.val[{k}]);" for k in range(4))
                + " }"
            )
            one = "for (int k = 0; k < 4; ++k) ob[k * " + str(hw) + " + q] = ib[q * 4 + k];"
        return f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const {t}* in = (const {t}*)in_;
  {t}* out = ({t}*)out_;
  (void)ws; (void)nt;
  for (long b = 0; b < {n * c // 4}; ++b) {{
    const {t}* ib = in + b * {4 * hw};
    {t}* ob = out + b * {4 * hw};
    long q = 0;
    for (; q + {lanes} <= {hw}; q += {lanes}) {vec}
    if (q + {lanes // 2} <= {hw}) {{ {half} q += {lanes // 2}; }}
    for (; q < {hw}; ++q) {one}
  }}
}}
"""


class CopyNeon(Copy):
    """Strided copies with a contiguous innermost source dimension, 16 bytes per load and store."""

    def __init__(self, isa: str):
        self.isa = isa

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        esize = 4 if p["elem"] == "f32" else ESIZE[p["elem"]]
        dims, strides = p["shape"], p["strides"]
        if esize not in LANES or strides[-1] != 1:
            return super().render(em, sym, p)
        # float32 moves as floats (as the portable template's), other types as raw words
        t, (sfx, lanes) = ("float", ("f32", 4)) if p["elem"] == "f32" else (BYTES_CTYPE[esize], LANES[esize])
        inner = dims[-1]
        out_strides = [math.prod(dims[i + 1 :]) for i in range(len(dims))]
        src, dst = strided_index(strides[:-1]), strided_index(out_strides[:-1])
        body = [
            f"const {t}* s = in0 + {p['offset']}L + {src};",
            f"{t}* d = out0 + {dst};",
            "long j = 0;",
            f"for (; j + {lanes} <= {inner}; j += {lanes}) vst1q_{sfx}(d + j, vld1q_{sfx}(s + j));",
            f"if (j + {lanes // 2} <= {inner}) {{ vst1_{sfx}(d + j, vld1_{sfx}(s + j)); j += {lanes // 2}; }}"
            if inner % lanes >= lanes // 2
            else "",
            f"for (; j < {inner}; ++j) d[j] = s[j];" if inner % (lanes // 2) else "",
        ]
        head = [
            f"static void {sym}(const void* in0_, void* out0_, unsigned char* ws, int nt) {{",
            f"  const {t}* in0 = (const {t}*)in0_;",
            f"  {t}* out0 = ({t}*)out0_;",
            "  (void)ws; (void)nt;",
        ]
        return loop_nest(head, dims[:-1], body)


KERNEL_UNITS = (
    *(RelayoutNeon(isa) for isa in ("neon", "fp16")),
    *(CopyNeon(isa) for isa in ("neon", "fp16")),
)
