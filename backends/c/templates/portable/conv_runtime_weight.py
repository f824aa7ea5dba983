"""Portable C (ISA ``generic``) for a float32 NCHW convolution whose filter is computed at run time
(an ONNX ``Conv`` whose weight is a graph input or the result of other ops): every other
convolution family packs a constant filter ahead of time and declines such a convolution.

A direct convolution, the reference kernel's sum in the same order per output (input channels,
then filter rows, then filter columns), dense or grouped, any stride, padding and dilation, the
true ``CONVOLUTION`` mode reading the filter flipped. It is the slowest convolution family and
serves only what none of the others accepts (lowest priority).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import code
from backends.c.templates import Template, conv_sym, sym_join
from dialects import enums
from dialects import tensor as T
from passes.lowering.kernels import Lowered, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


class ConvRuntimeWeight(Template):
    family = "conv2d_runtime_weight"
    ops = (T.ConvolutionOp,)
    priority = 10
    examples = (
        E.conv2d_runtime_weight((1, 3, 7, 6), (5, 3, 3, 3), pad=1),
        E.conv2d_runtime_weight((2, 4, 5, 5), (3, 4, 1, 1), stride=2),
    )

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ConvolutionOp)
        p = op.params()
        if p["format"] != enums.Format.NCHW or any(code(v) != "f32" for v in (*op.operands, *op.results)):
            return None
        x, w = op.operands
        n, ic, ih, iw = shape(x)
        _, oc, oh, ow = shape(op.results[0])
        ws = shape(w)
        groups = ws[0] if p["sparse"] == enums.ConvSparse.GROUP else 1
        fh, fw = ws[-2:]
        params = {
            "n": n, "ic": ic, "ih": ih, "iw": iw, "oc": oc, "oh": oh, "ow": ow, "fh": fh, "fw": fw,
            "sh": p["stride"][0], "sw": p["stride"][1], "ph": p["padding"][0], "pw": p["padding"][1],
            "dh": p["dilation"][0], "dw": p["dilation"][1], "groups": groups,
            "flip": int(p["mode"] == enums.ConvMode.CONVOLUTION),
        }  # fmt: skip
        return Lowered(params, [x, w])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("conv2d_rtw", *conv_sym(p, explicit=True), "flip" if p["flip"] else "", "f32")

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        g = p["groups"]
        icg, ocg = p["ic"] // g, p["oc"] // g
        ky = f"({p['fh'] - 1} - ky)" if p["flip"] else "ky"
        kx = f"({p['fw'] - 1} - kx)" if p["flip"] else "kx"
        args = "const float* in0, const float* in1, float* out0, unsigned char* ws, int nt"
        return f"""static void {sym}({args}) {{
  (void)ws; (void)nt;
  for (long b = 0; b < {p["n"]}; ++b)
    for (long o = 0; o < {p["oc"]}; ++o) {{
      const long grp = o / {ocg};
      const float* filt = in1 + o * {icg * p["fh"] * p["fw"]}L;
      for (long y = 0; y < {p["oh"]}; ++y)
        for (long x = 0; x < {p["ow"]}; ++x) {{
          float acc = 0.f;
          for (long c = 0; c < {icg}; ++c) {{
            const float* plane = in0 + ((b * {p["ic"]} + grp * {icg} + c) * {p["ih"]}L) * {p["iw"]};
            for (long ky = 0; ky < {p["fh"]}; ++ky) {{
              const long iy = y * {p["sh"]} - {p["ph"]} + ky * {p["dh"]};
              if (iy < 0 || iy >= {p["ih"]}) continue;
              for (long kx = 0; kx < {p["fw"]}; ++kx) {{
                const long ix = x * {p["sw"]} - {p["pw"]} + kx * {p["dw"]};
                if (ix < 0 || ix >= {p["iw"]}) continue;
                acc += plane[iy * {p["iw"]} + ix] * filt[(c * {p["fh"]} + {ky}) * {p["fw"]} + {kx}];
              }}
            }}
          }}
          out0[((b * {p["oc"]} + o) * {p["oh"]} + y) * {p["ow"]} + x] = acc;
        }}
    }}
}}
"""


KERNEL_UNITS = (ConvRuntimeWeight(),)
