"""Matrix-vector products for AArch64: the one-row float32 matmul of a classifier head (``Linear`` on
a flattened feature vector, batch 1), register-blocked over the columns.

Through the GEMM (:mod:`backends.c.templates.x86.gemm`) a single row fills one of the micro-kernel's 8
rows: the edge kernel runs the other seven for nothing and the weights are packed for a tile shape
made for square products. Here ``y[n] = sum_k a[k] * B[k, n]`` walks the constant weights once, as
they are stored after packing: panels of :data:`COLS` columns, each panel ``K x COLS`` contiguous
(``B`` zero-padded to whole panels). Per 4 values of ``a`` (one vector) and panel, 8 accumulators take
4 x 8 ``fmla`` by lane from 8 weight vectors per ``k`` (``ld1`` of 4 registers): the product is a
stream of loads and multiply-adds with no shuffles. The epilogue (bias along the columns, ReLU or
ReLU6) runs on the registers; the last panel's columns past ``n`` are dropped through a small copy.
float16 models on ``arm-fp16`` reach it after ``kernel-widen-f16`` (float32 arithmetic).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import is_f32
from backends.c.templates import Template, sym_join
from dialects import tensor as T
from passes.lowering.kernels import EpilogueSupport, Lowered, const_array, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

COLS = 32  # columns per panel: 8 float32x4 accumulators
VECS = COLS // 4
ACTS = {"identity": "{v}", "relu": "vmaxq_f32({v}, vdupq_n_f32(0.f))",
        "relu6": "vminq_f32(vmaxq_f32({v}, vdupq_n_f32(0.f)), vdupq_n_f32(6.f))"}  # fmt: skip
SCALAR_ACTS = {"identity": "{v}", "relu": "({v} > 0.f ? {v} : 0.f)",
               "relu6": "({v} > 0.f ? ({v} < 6.f ? {v} : 6.f) : 0.f)"}  # fmt: skip


class MatvecNeon(Template):
    """``matmul_matvec``: ``(1, K) @ (K, N)`` float32 with constant weights (module doc)."""
    # partial last panels (N % 32: 8, 5, 17), whole panels, K % 4 in 0..3, a Linear layer's (n, k) weight
    examples = (
        E.matmul(1, 1024, 1000, tb=True, bias=True),
        E.matmul(1, 1023, 64, tb=True, bias=True, act="relu"),
        E.matmul(1, 3, 5, tb=True),
        E.matmul(1, 130, 49, tb=True, act="relu"),
        E.matmul(1, 67, 37, bias=True, act="relu"),
    )

    family = "matmul_matvec"
    ops = (T.MatrixMulOp,)
    priority = 105  # ahead of matmul_gemm (100) for the one-row products it accepts
    epilogues = {"float32": EpilogueSupport(bias="columns", activations=frozenset(ACTS))}

    def __init__(self, isa: str = "neon"):
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.MatrixMulOp)
        if not is_f32(*op.operands, *op.results):
            return None
        p = op.params()
        a, b = op.operands
        sa, sb = shape(a), shape(b)
        m = sa[-1] if p["transpose_a"] else sa[-2]
        if m != 1 or const_array(b) is None:
            return None  # a one-row product with the weights known ahead of time only
        k = sa[-2] if p["transpose_a"] else sa[-1]
        n = sb[-2] if p["transpose_b"] else sb[-1]
        # with one row, a is its K values in order whether transposed or not
        params = {
            "n": n,
            "k": k,
            "tb": int(bool(p["transpose_b"])),
            "bias": 0,
            "residual": 0,
            "act": "identity",
        }
        return Lowered(params, [a, b])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "matmul_matvec", self.isa, f"n{p['n']}", f"k{p['k']}", "tb" if p["tb"] else "", "f32",
            "bias" if p["bias"] else "", p["act"].upper() if p["act"] != "identity" else "",
        )  # fmt: skip

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        b = np.asarray(array, np.float32).reshape((p["n"], p["k"]) if p["tb"] else (p["k"], p["n"]))
        if p["tb"]:
            b = b.T
        panels = -(-p["n"] // COLS)
        padded = np.zeros((p["k"], panels * COLS), np.float32)
        padded[:, : p["n"]] = b
        # (K, panels, COLS) -> (panels, K, COLS): one panel's weights are one stream
        return np.ascontiguousarray(
            padded.reshape(p["k"], panels, COLS).transpose(1, 0, 2)
        ), f"matvec_b{COLS}"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, k = p["n"], p["k"]
        panels, tail = -(-n // COLS), n % COLS
        k4 = k // 4 * 4
        args = ["const float* a", "const float* b", *(["const float* bias"] if p["bias"] else []), "float* y",
                "unsigned char* ws", "int nt"]  # fmt: skip
        accs = ", ".join(f"c{i} = vdupq_n_f32(0.f)" for i in range(VECS))
        load = f"const float32x4x4_t w0 = vld1q_f32_x4(w), w1 = vld1q_f32_x4(w + 16); w += {COLS};"
        by_lane = []
        for lane in range(4):
            by_lane.append(f"{{ {load}")
            by_lane += [
                f"  c{i} = vfmaq_laneq_f32(c{i}, w{i // 4}.val[{i % 4}], av, {lane});" for i in range(VECS)
            ]
            by_lane.append("}")
        rest = [
            load,
            *(f"c{i} = vfmaq_n_f32(c{i}, w{i // 4}.val[{i % 4}], a[kk]);" for i in range(VECS)),
        ]
        act = ACTS[p["act"]]
        finish = []
        for i in range(VECS):
            v = f"c{i}"
            if p["bias"]:
                finish.append(f"if (full) {v} = vaddq_f32({v}, vld1q_f32(bias + col0 + {4 * i}));")
            finish.append(f"{v} = {act.format(v=v)};")
        store = " ".join(f"vst1q_f32(out + {4 * i}, c{i});" for i in range(VECS))
        bias_tail = " + bias[col0 + c]" if p["bias"] else ""
        # the last panel: bias added per column (the bias array ends at n), then the activation
        tail_act = SCALAR_ACTS[p["act"]].format(v="t")
        lines = "\n      ".join(by_lane)
        return f"""
static void {sym}({", ".join(args)}) {{
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
  for (int j = 0; j < {panels}; ++j) {{
    const int col0 = j * {COLS};
    const int full = {"1" if not tail else f"j < {panels - 1}"};
    const float* w = b + (long)j * {k * COLS};
    float32x4_t {accs};
    for (int kk = 0; kk < {k4}; kk += 4) {{
      const float32x4_t av = vld1q_f32(a + kk);
      {lines}
    }}
    for (int kk = {k4}; kk < {k}; ++kk) {{
      {" ".join(rest)}
    }}
    {(chr(10) + "    ").join(finish) if not tail else ""}
    {"" if not tail else "if (full) { " + " ".join(finish) + " }"}
    if (full) {{
      float* out = y + col0;
      {store}
    }} else {{
      float tmp[{COLS}];
      float* out = tmp;
      {store}
      for (int c = 0; c < {tail or COLS}; ++c) {{
        const float t = tmp[c]{bias_tail};
        y[col0 + c] = {tail_act};
      }}
    }}
  }}
}}
"""


KERNEL_UNITS = (MatvecNeon(),)
