"""Matrix-vector products for x86 (AVX2, AVX-512): the one-row float32 matmul of a classifier head
(``Linear`` on a pooled feature vector, batch 1) with constant weights.

Through the GEMM (:mod:`backends.c.templates.x86.gemm`) the single row fills one of the micro-kernel's
rows: the edge kernel issues the FMAs of the other rows for nothing, enough to make the product
compute-bound (MobileNetV2's 1280 x 1000 head ran at ~18 GB/s of weights). A matvec reads every weight
exactly once, so it is bound by the bandwidth the core gets from L2/L3 instead; here
``y[n] = sum_k a[k] * B[k, n]`` walks the weights as they are stored after packing: panels of one
vector of columns (16 on AVX-512, 8 on AVX2), each panel ``K x VL`` contiguous, ``B`` zero-padded to
whole panels. :data:`STREAMS` neighbouring panels run together, one accumulator each: independent
FMA chains and as many sequential streams for the hardware prefetchers (software prefetch far ahead
measured no better). Every column sums its ``k`` in order on any thread count; the groups of panels
are split between threads. The epilogue (bias along the columns, residual, any activation) runs on
each group's outputs while they are in L1, as the GEMM's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import Template, epilogue_sym, sym_join
from backends.c.templates.portable.generic import omp_parallel
from backends.c.templates.x86.gemm import (
    MATMUL_EPILOGUE,
    _epilogue_args,
    constant_b,
    matmul_common,
    matmul_sym,
)
from dialects import tensor as T
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# panels per group: 4 concurrent weight streams and FMA chains (more measured the same)
STREAMS = 4
# the registers of each ISA: (lanes, C vector type, intrinsic prefix)
VECTORS = {"avx512": (16, "__m512", "_mm512"), "avx2": (8, "__m256", "_mm256")}


class MatvecX86(Template):
    """``matmul_matvec``: ``(1, K) @ (K, N)`` float32 with constant weights (module doc)."""
    # MobileNetV2's and ShuffleNetV2's heads (a partial last panel in a partial last group); N a multiple
    # of 64 (whole groups); 3 panels only; N below one vector; K = 1; every fused epilogue
    examples = (
        E.matmul(1, 1280, 1000, tb=True, bias=True),
        E.matmul(1, 1024, 1000, tb=True),
        E.matmul(1, 37, 128, tb=True, bias=True, residual=True),
        E.matmul(1, 130, 40, tb=True, bias=True, act="relu6"),
        E.matmul(1, 5, 3, tb=True, bias=True, act="h_swish"),
        E.matmul(1, 1, 17, tb=True, bias=True),
        E.matmul(1, 33, 130, act="relu"),
    )

    family = "matmul_matvec"
    ops = (T.MatrixMulOp,)
    priority = 105  # ahead of matmul_gemm (100) for the one-row products it accepts
    epilogues = {"float32": MATMUL_EPILOGUE}

    def __init__(self, isa: str):
        self.isa = isa
        self.lanes, self.vtype, self.prefix = VECTORS[isa]

    def match(self, op: Operation) -> Lowered | None:
        lowered = matmul_common(op)
        if lowered is None:
            return None
        p = lowered.params
        # one row and weights known ahead of time; with one row, a is its K values in order
        # whether transposed or not
        if p["batch"] != 1 or p["m"] != 1 or not p["b_const"]:
            return None
        return lowered

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("matmul_matvec", self.isa, *matmul_sym(p), "f32", epilogue_sym(p))

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        b = constant_b(operand, array, p)
        if b is None:
            return None
        vl = self.lanes
        panels = -(-p["n"] // vl)
        padded = np.zeros((p["k"], panels * vl), np.float32)
        padded[:, : p["n"]] = b
        # (K, panels, VL) -> (panels, K, VL): one panel's weights are one stream
        return np.ascontiguousarray(padded.reshape(p["k"], panels, vl).transpose(1, 0, 2)), f"matvec_b{vl}"

    def _steps(self, k: int) -> int:
        """Steps of the inner loop over the row (one weight vector per stream each)."""
        return k

    def _row_vector(self) -> str:
        """The row's operand at step ``kk``, as a vector."""
        return f"{self.prefix}_set1_ps(a[kk])"

    def _product(self, s: int) -> str:
        """Stream ``s``'s accumulator after step ``kk``."""
        px, vl = self.prefix, self.lanes
        return f"{px}_fmadd_ps(av, {px}_loadu_ps(w{s} + (long)kk * {vl}), c{s})"

    def _group(self, streams: int, k: int) -> str:
        """C computing ``streams`` panels from panel ``j0`` into ``y`` (or ``tmp`` for the panel that
        holds the last, partial columns, given as ``last``)."""
        vl, vt, px = self.lanes, self.vtype, self.prefix
        steps = self._steps(k)
        lines = [f"const float* w{s} = b + (long)(j0 + {s}) * {steps * vl};" for s in range(streams)]
        lines.append(" ".join(f"{vt} c{s} = {px}_setzero_ps();" for s in range(streams)))
        lines.append(f"for (int kk = 0; kk < {steps}; ++kk) {{")
        lines.append(f"  const {vt} av = {self._row_vector()};")
        lines += [f"  c{s} = {self._product(s)};" for s in range(streams)]
        lines.append("}")
        for s in range(streams):
            lines.append(
                f"if (j0 + {s} == last) {{ {px}_storeu_ps(tmp, c{s}); "
                f"for (int c = 0; c < tail; ++c) y[(long)last * {vl} + c] = tmp[c]; }}"
                f" else {px}_storeu_ps(y + (long)(j0 + {s}) * {vl}, c{s});"
            )
        return "\n      ".join(lines)

    def prologue(self, p: dict[str, Any]) -> str:
        """C run once before the parallel region (a subclass preparing ``a``)."""
        return ""

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, k, vl = p["n"], p["k"], self.lanes
        panels = -(-n // vl)
        groups, rest = divmod(panels, STREAMS)
        extra, act = _epilogue_args(p)
        args = ", ".join(
            ["const float* a", "const float* b", *extra, "float* y", "unsigned char* ws", "int nt"]
        )
        tail = n - (panels - 1) * vl  # columns of the last panel (vl when n is whole panels)
        bias = "bias[c]" if p["bias"] else "0.f"
        res = "res[c]" if p["residual"] else "0.f"
        epilogue = f"for (int c = c0; c < c1; ++c) y[c] = {act}(y[c] + {bias} + {res});"
        # the last panel goes through tmp unless it is whole (then no panel index equals -1)
        last = panels - 1 if tail < vl else -1
        rest_group = ""
        if rest:
            rest_group = f"""
  {{
    float tmp[{vl}];
    const int j0 = {groups * STREAMS};
    const int c0 = j0 * {vl}, c1 = {n};
    {{
      {self._group(rest, k)}
    }}
    {epilogue}
  }}"""
        return f"""
static void {sym}({args}) {{
  (void)ws; (void)nt;{self.prologue(p)}
  const int last = {last}, tail = {tail};
  (void)tail;
  {omp_parallel(n * k)}
  for (int g = 0; g < {groups}; ++g) {{
    float tmp[{vl}];
    const int j0 = g * {STREAMS};
    const int c0 = j0 * {vl}, c1 = (j0 + {STREAMS}) * {vl} < {n} ? (j0 + {STREAMS}) * {vl} : {n};
    {{
      {self._group(STREAMS, k)}
    }}
    {epilogue}
  }}{rest_group}
}}
"""


KERNEL_UNITS = (MatvecX86("avx512"), MatvecX86("avx2"))
