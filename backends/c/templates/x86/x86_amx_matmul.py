"""int8 matrix products on AMX tiles (family ``matmul_q8_amx``, ISA ``amx``): ``y = op(a) @ op(b)``
with a constant ``b`` (classifier heads, the linear layers of quantized models), exact int32
accumulation and the portable ``matmul_q8``'s result expression (``requant.result_expr``), so the
bytes are the reference's.

Both operands are signed, so ``tdpbssd`` needs no offset correction. ``b`` is packed at compile time
as B tiles, ``[N/16][K/64][16 k-quads][16 columns][4]`` (zero-padded), one KiB of contiguous bytes a
tile; ``a`` is packed per call into A tiles ``[M/16][K/64][16 rows][64]`` in the workspace. A work
item is up to 32 rows x 32 columns (four accumulators, two A and two B tiles). Without tile data
(Linux refused it, or ``XMGE_AMX=0``) the same packed operands give the same integers through a
plain C loop: a one-row product (the usual head) is bound by reading ``b`` either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import sym_join
from backends.c.templates.portable.requant import REQUANT_C, exact, result_expr
from backends.c.templates.portable.typed import HEADER, MatmulQ8
from backends.c.templates.x86.x86_amx import AMX_SUPPORT, ISA, TILE_BYTES, TILE_K, TILE_ROWS, amx_tile_block
from backends.c.templates.x86.x86_int8 import PARALLEL_WORK
from dialects import tensor as T
from passes.lowering.kernels import Lowered, const_array

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


def _ceil(a: int, b: int) -> int:
    return -(-a // b) * b


class MatmulQ8Amx(MatmulQ8):
    """int8 ``op(a) @ op(b)``, ``b`` constant, on AMX-INT8 tiles (see the module docstring)."""
    examples = (E.matmul_q8_const(37, 128, 70), E.matmul_q8_const(5, 64, 33))

    family = "matmul_q8_amx"
    isa = ISA
    ops = (T.MatrixMulOp,)
    priority = 96  # ahead of the portable matmul_q8 (90)

    def match(self, op: Operation) -> Lowered | None:
        lowered = super().match(op)
        if lowered is None or not isinstance(op, T.MatrixMulOp) or const_array(op.operands[1]) is None:
            return None
        p = dict(lowered.params)
        m, n, k = p["m"], p["n"], p["k"]
        if m * n * k == 0:
            return None
        mb, nb = -(-m // TILE_ROWS), -(-n // 16)
        p.update(kp=_ceil(k, TILE_K), mt=2 if mb > 1 else 1, ntile=2 if nb > 1 else 1)
        p.update(mbp=_ceil(mb, p["mt"]), nbp=_ceil(nb, p["ntile"]))
        return Lowered(p, list(lowered.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("amx", MatmulQ8.symbol(self, p))

    def workspace(self, p: dict[str, Any]) -> int:
        return p["mbp"] * p["kp"] * TILE_ROWS

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        b = np.asarray(array).view(np.int8).reshape((p["n"], p["k"]) if p["tb"] else (p["k"], p["n"]))
        full = np.zeros((p["kp"], p["nbp"] * 16), np.int8)
        full[: p["k"], : p["n"]] = b.T if p["tb"] else b
        # (K/64, 16 quads, 4, NB, 16) -> (NB, K/64, 16 quads, 16 columns, 4)
        tiles = full.reshape(p["kp"] // TILE_K, TILE_ROWS, 4, p["nbp"], 16).transpose(3, 0, 1, 4, 2)
        return np.ascontiguousarray(tiles), "amx_q8_b16x16x4"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        M, N, K, kp, mt, ntl = p["m"], p["n"], p["k"], p["kp"], p["mt"], p["ntile"]
        kb, mbp, nbp = kp // TILE_K, p["mbp"], p["nbp"]
        otype = {"q32_same": "int32_t", "f32": "float"}.get(p["out"], "int8_t")
        a_at = f"a[(long)kk * {M} + r]" if p["ta"] else f"a[(long)r * {K} + kk]"
        # tiles: accumulators 0-3 (row block i, column block j at i * ntl + j), A 4-5, B 6-7
        b_loads = [f"_tile_loadd({6 + j}, xb{j} + (long)kt * {TILE_BYTES}, 64);" for j in range(ntl)]
        amx = amx_tile_block(mt, ntl, kb, b_loads, "_tile_dpbssd", "\n          ")
        blocks_c = " ".join(
            f"const uint8_t* xb{j} = bp + (long)(t % {nbp // ntl} * {ntl} + {j}) * {kb * TILE_BYTES};"
            for j in range(ntl)
        )
        work = M * N * K
        return exact(f"""
static void {sym}(const void* a_, const void* b_, void* y_, unsigned char* ws, int nt) {{
  const int8_t* a = (const int8_t*)a_;
  const uint8_t* bp = (const uint8_t*)b_;
  {otype}* y = ({otype}*)y_;
  int8_t* ap = (int8_t*)ws;
  const int use_amx = xm_amx_ready();
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  {{
    if (use_amx) xm_amx_configure();
    #pragma omp for schedule(static)
    for (int item = 0; item < {mbp * kb}; ++item) {{  /* A tiles: 16 rows of 64 k, zero-padded */
      const int mb = item / {kb}, kt = item % {kb};
      int8_t* tile = ap + (long)item * {TILE_BYTES};
      for (int rr = 0; rr < {TILE_ROWS}; ++rr) {{
        const int r = mb * {TILE_ROWS} + rr;
        for (int k0 = 0; k0 < {TILE_K}; ++k0) {{
          const int kk = kt * {TILE_K} + k0;
          tile[rr * {TILE_K} + k0] = r < {M} && kk < {K} ? {a_at} : 0;
        }}
      }}
    }}
    #pragma omp for schedule(static)
    for (int t = 0; t < {mbp // mt * (nbp // ntl)}; ++t) {{
      const int mb0 = t / {nbp // ntl} * {mt};
      {blocks_c}
      const int8_t* wa = ap + (long)mb0 * {kb * TILE_BYTES};
      int32_t acc[{TILE_ROWS * mt}][{16 * ntl}] __attribute__((aligned(64)));
      if (use_amx) {{
          {amx}
      }} else {{  /* the same integers from the same tiles */
        memset(acc, 0, sizeof acc);
        for (int i = 0; i < {TILE_ROWS * mt}; ++i)
          for (int kt = 0; kt < {kb}; ++kt) {{
            const int8_t* ar = wa + ((long)(i / {TILE_ROWS}) * {kb} + kt) * {TILE_BYTES};
            ar += i % {TILE_ROWS} * {TILE_K};
            for (int j = 0; j < {16 * ntl}; ++j) {{
              const int8_t* bt = (const int8_t*)xb0 + ((long)(j / 16) * {kb} + kt) * {TILE_BYTES};
              bt += j % 16 * 4;
              int32_t s = 0;
              for (int kk = 0; kk < {TILE_K}; ++kk) s += (int32_t)ar[kk] * bt[kk / 4 * 64 + kk % 4];
              acc[i][j] += s;
            }}
          }}
      }}
      for (int i = 0; i < {TILE_ROWS * mt}; ++i) {{
        const int row = mb0 * {TILE_ROWS} + i;
        if (row >= {M}) break;
        for (int j = 0; j < {16 * ntl}; ++j) {{
          const int col = (t % {nbp // ntl} * {ntl}) * 16 + j;
          if (col >= {N}) break;
          const int32_t v = acc[i][j];
          y[(long)row * {N} + col] = {result_expr(p, "v")};
        }}
      }}
    }}
    if (use_amx) _tile_release();
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER + REQUANT_C + AMX_SUPPORT


KERNEL_UNITS = (MatmulQ8Amx(),)

__all__ = ["KERNEL_UNITS"]
