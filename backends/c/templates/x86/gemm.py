"""GEMM-based kernels for SIMD ISAs: convolution as packed GEMM (im2col fused into the packing of B) and
matrix multiplication, sharing one register-blocked FMA micro-kernel per ISA.

The micro-kernel computes an ``MR x NR`` tile of C from a packed panel of A (``K x MR``, row-interleaved)
and a packed panel of B (``K x NR``): per k it loads NR/vec vectors of B, broadcasts MR values of A and
issues MR*NR/vec FMAs into registers. ``MR``/``NR`` come from the ISA's emitter knobs (6x16 on AVX2, 12x32
on AVX-512) and the code is generated here, unrolled, from the same Python for every ISA (XNNPACK's
``xngen`` idea). K is blocked by ``KC`` so that one B slice stays in L1 while every A panel streams past.

Convolution (NCHW): ``out[oc, p] = sum_k W[oc, k] * col[k, p]`` with ``k = (ic, kh, kw)`` and ``p = (oh,
ow)``. The weights are A, packed ahead of time (zero rows pad OC to a multiple of MR). B is built at run
time straight into NR-column panels: for 1x1 stride-1 convolutions it is a copy; when output rows are
wide enough, panels are aligned to output rows, so that a panel's NR inputs for a given (ic, kh, kw) are
one contiguous run (vector copies); otherwise a general gather. The epilogue (bias, residual, activation)
runs on each finished tile while it is still in L1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.isa_facts import ISA_FACTS, IsaFacts
from backends.c.match import code, conv_common, gemm_blocking
from backends.c.templates import Template, conv_sym, epilogue_sym, sym_join
from backends.c.templates.portable.generic import omp_for, omp_parallel
from dialects import tensor as T
from passes.lowering.kernels import ACTIVATIONS, FULL_EPILOGUE, EpilogueSupport, Lowered, const_array, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


def _knobs(isa: str) -> IsaFacts:
    return ISA_FACTS[isa]


def broadcast_fma(
    vtype: str,
    loads: Sequence[str],
    broadcasts: Sequence[str],
    acc: Callable[[int, int], str],
    fma: Callable[[str, str, str], str],
    vec: str,
    scalar: str,
) -> list[str]:
    """One reduction step of a register tile (every x86 micro-kernel's inner body): the vectors
    ``loads`` into ``{vec}0, {vec}1, ...``, then per broadcast scalar ``i`` (named ``scalar``) one
    ``fma(scalar, vector, accumulator)`` into each accumulator ``acc(i, j)``."""
    lines = [f"    const {vtype} {vec}{j} = {load};" for j, load in enumerate(loads)]
    for i, bcast in enumerate(broadcasts):
        lines.append(f"    {{ const {vtype} {scalar} = {bcast};")
        lines += [f"      {acc(i, j)} = {fma(scalar, f'{vec}{j}', acc(i, j))};" for j in range(len(loads))]
        lines.append("    }")
    return lines


def micro_kernel(isa: str, mr: int, nr: int) -> str:
    """``xm_ukr_<isa>_<mr>x<nr>(K, A, B, C, ldc, acc)``: C[mr x nr] (+)= A-panel x B-panel, and its
    ``_edge`` twin for partial tiles (rows >= mv and columns >= nv are neither read nor written:
    masked vector loads and stores, so edge tiles cost no extra pass)."""
    em = _knobs(isa)
    nv = nr // em.vec
    assert nv * em.vec == nr
    c = [[f"c{i}_{j}" for j in range(nv)] for i in range(mr)]

    def body(edge: bool) -> list[str]:
        name = f"xm_ukr_{isa}_{mr}x{nr}" + ("_edge" if edge else "")
        extra = ", int mv, int nv" if edge else ""
        lines = [
            f"static inline void {name}(long K, const float* restrict A, const float* restrict B,",
            f"                          float* restrict C, long ldc, int acc{extra}) {{",
        ]
        if edge:
            for j in range(nv):
                lines.append(f"  const {em.mask_type} m{j} = {em.mask_make.format(n=f'nv - {j * em.vec}')};")
        for i in range(mr):
            for j in range(nv):
                p = f"C + {i} * ldc + {j * em.vec}"
                src = em.maskload.format(p=p, m=f"m{j}") if edge else em.loadu.format(p=p)
                guard = f"acc && {i} < mv" if edge else "acc"
                lines.append(f"  {em.vtype} {c[i][j]} = {guard} ? {src} : {em.zero};")
        lines.append("  #pragma GCC unroll 2")
        lines.append("  for (long k = 0; k < K; ++k) {")
        lines += broadcast_fma(
            em.vtype,
            [em.load.format(p=f"B + k * {nr} + {j * em.vec}") for j in range(nv)],
            [em.set1.format(x=f"A[k * {mr} + {i}]") for i in range(mr)],
            lambda i, j: c[i][j],
            lambda a, b, acc: em.fma.format(a=a, b=b, c=acc),
            vec="b",
            scalar="a",
        )
        lines.append("  }")
        for i in range(mr):
            for j in range(nv):
                p = f"C + {i} * ldc + {j * em.vec}"
                if edge:
                    lines.append(f"  if ({i} < mv) " + em.maskstore.format(p=p, m=f"m{j}", v=c[i][j]) + ";")
                else:
                    lines.append("  " + em.storeu.format(p=p, v=c[i][j]) + ";")
        lines.append("}")
        return lines

    return "\n".join(body(False) + body(True)) + "\n"


def isa_micro_kernel(isa: str) -> str:
    """The micro-kernel of the ISA's own register tile (its emitter's ``gemm_mr`` x ``gemm_nr``)."""
    knobs = _knobs(isa)
    return micro_kernel(isa, knobs.gemm_mr, knobs.gemm_nr)


def _tile_call(isa: str, mr: int, nr: int) -> str:
    """C statements running the micro-kernel on a tile that may be partial (mv < MR or nv < NR)."""
    ukr = f"xm_ukr_{isa}_{mr}x{nr}"
    return f"""
        if (mv == {mr} && nv == {nr}) {ukr}(kl, A, B, Ct, ldc, k0 > 0);
        else {ukr}_edge(kl, A, B, Ct, ldc, k0 > 0, mv, nv);"""


def _epilogue_args(p: dict[str, Any]) -> tuple[list[str], str]:
    """Extra kernel parameters (bias, residual) and the C call applying the epilogue to a tile."""
    params = []
    if p["bias"]:
        params.append("const float* bias")
    if p["residual"]:
        params.append("const float* res")
    return params, "xm_act_" + p["act"]


# a matrix product's bias runs along its columns (the Linear layer's bias)
MATMUL_EPILOGUE = EpilogueSupport(bias="columns", residual=True, activations=frozenset(ACTIVATIONS))


def filter_panels(array: np.ndarray, p: dict[str, Any], geo: dict[str, int], dtype: Any) -> np.ndarray:
    """Filters ``(OC, IC/G, FH, FW)`` as the GEMM micro-kernels' A panels ``(G, MP, K, MR)`` of
    ``dtype``, output channels zero-padded to whole panels: the micro-kernel reads MR consecutive
    rows per k."""
    g, mr = p["groups"], p["mr"]
    padded = np.zeros((g, geo["MP"] * mr, geo["K"]), dtype)
    padded[:, : geo["ocg"]] = np.asarray(array, dtype).reshape(g, geo["ocg"], geo["K"])
    return np.ascontiguousarray(padded.reshape(g, geo["MP"], mr, geo["K"]).transpose(0, 1, 3, 2))


class ConvGemm(Template):
    """``conv2d_gemm``: dense or grouped convolution, NCHW, float32, with a fused epilogue."""
    examples = (
        E.conv2d((1, 13, 9, 11), 19, 3, pad=1, act="relu"),
        E.conv2d((2, 6, 7, 5), 10, 1, stride=2, residual=True),
        E.conv2d((1, 12, 6, 7), 9, 3, pad=1, groups=3, act="sigmoid"),
        E.conv2d((1, 4, 9, 9), 5, 3, pad=2, dil=2, act="h_swish"),
        E.conv2d((1, 3, 23, 21), 10, 7, stride=2, pad=3, bias=False),
    )

    family = "conv2d_gemm"
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 100
    epilogues = {"float32": FULL_EPILOGUE}  # the tile epilogue calls xm_act_<act>: every activation

    def __init__(self, isa: str):
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        got = conv_common(op)
        if got is None:
            return None
        params, operands = got
        params.update(gemm_blocking(self.isa))
        params["pack"] = conv_pack_mode(params, params["nr"])
        # loop order: keep the smaller operand cache-resident and stream the larger one once. With more
        # filter bytes than im2col bytes (deep layers, small images) the m panels go outermost, so each
        # weight is read from memory once; otherwise the B panels go outermost
        geo = self.geometry(params)
        params["order"] = "m" if geo["MP"] * params["mr"] > geo["NP"] * params["nr"] else "n"
        return Lowered(params, operands)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "conv2d_gemm",
            self.isa,
            *conv_sym(p),
            p["pack"],
            "mfirst" if p.get("order") == "m" else "",
            "f32",
            epilogue_sym(p),
        )

    @staticmethod
    def geometry(p: dict[str, Any]) -> dict[str, int]:
        g = p["groups"]
        icg, ocg = p["ic"] // g, p["oc"] // g
        k = icg * p["fh"] * p["fw"]
        mr, nr = p["mr"], p["nr"]
        if p["pack"] == "rows":
            rp = -(-p["ow"] // nr)
            npan = p["oh"] * rp
        else:
            rp = 0
            npan = -(-(p["oh"] * p["ow"]) // nr)
        return {"icg": icg, "ocg": ocg, "K": k, "MP": -(-ocg // mr), "NP": npan, "RP": rp}

    # the element type of the packed panels (filters at compile time, im2col in the workspace) and the
    # packed filters' layout tag
    panel_dtype: ClassVar[type[np.generic]] = np.float32
    panel_tag: ClassVar[str] = "gemm_a"

    def workspace(self, p: dict[str, Any]) -> int:
        geo = self.geometry(p)
        return geo["NP"] * geo["K"] * p["nr"] * np.dtype(self.panel_dtype).itemsize

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        return filter_panels(array, p, self.geometry(p), self.panel_dtype), f"{self.panel_tag}{p['mr']}"

    def support(self, em: CEmitter) -> str:
        return isa_micro_kernel(self.isa)

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        geo = self.geometry(p)
        mr, nr, kc = p["mr"], p["nr"], p["kc"]
        extra, act = _epilogue_args(p)
        args = ", ".join(
            ["const float* x", "const float* w", *extra, "float* y", "unsigned char* ws", "int nt"]
        )
        ih, iw, oh, ow = p["ih"], p["iw"], p["oh"], p["ow"]
        sh, sw, ph, pw, dh, dw = p["sh"], p["sw"], p["ph"], p["pw"], p["dh"], p["dw"]
        K, NP, MP, RP = geo["K"], geo["NP"], geo["MP"], geo["RP"]
        P = oh * ow
        # one region for the packing and the product of every (image, group)
        region = omp_parallel(p["n"] * p["oc"] * P * K, "parallel")
        last = p["n"] * p["groups"] == 1  # no later packing rewrites what the product reads
        if p["pack"] == "copy":
            pack = f"""
      const int p0 = j * {nr}; const int nv = {P} - p0 < {nr} ? {P} - p0 : {nr};
      for (int k = 0; k < {K}; ++k) {{
        const float* s = xg + (long)k * {P} + p0;
        float* d = dst + (long)k * {nr};
        if (nv == {nr}) {{ for (int c = 0; c < {nr}; ++c) d[c] = s[c]; }}
        else {{ for (int c = 0; c < {nr}; ++c) d[c] = c < nv ? s[c] : 0.f; }}
      }}"""
        elif p["pack"] == "rows":
            pack = f"""
      const int orow = j / {RP}, ow0 = (j % {RP}) * {nr};
      int k = 0;
      for (int ic = 0; ic < {geo["icg"]}; ++ic) {{
        const float* plane = xg + (long)ic * {ih * iw};
        for (int kh = 0; kh < {p["fh"]}; ++kh) {{
          const int ihh = orow * {sh} - {ph} + kh * {dh};
          for (int kw = 0; kw < {p["fw"]}; ++kw, ++k) {{
            float* d = dst + (long)k * {nr};
            if ((unsigned)ihh >= {ih}u) {{ for (int c = 0; c < {nr}; ++c) d[c] = 0.f; continue; }}
            const float* row = plane + (long)ihh * {iw};
            const int iw0 = ow0 * {sw} - {pw} + kw * {dw};
            /* the columns c whose input lies inside the row: one unconditional (vectorisable) run */
            int lo = iw0 < 0 ? (-iw0 + {sw - 1}) / {sw} : 0;
            int hi = {iw} - iw0 > 0 ? ({iw} - iw0 + {sw - 1}) / {sw} : 0;
            if (hi > {ow} - ow0) hi = {ow} - ow0;
            if (hi > {nr}) hi = {nr};
            if (lo > hi) lo = hi;
            for (int c = 0; c < lo; ++c) d[c] = 0.f;
            for (int c = lo; c < hi; ++c) d[c] = row[iw0 + c * {sw}];
            for (int c = hi; c < {nr}; ++c) d[c] = 0.f;
          }}
        }}
      }}"""
        else:
            pack = f"""
      int ihb[{nr}], iwb[{nr}];
      for (int c = 0; c < {nr}; ++c) {{
        const int q = j * {nr} + c;
        if (q < {P}) {{ ihb[c] = (q / {ow}) * {sh} - {ph}; iwb[c] = (q % {ow}) * {sw} - {pw}; }}
        else {{ ihb[c] = -(1 << 28); iwb[c] = 0; }}
      }}
      int k = 0;
      for (int ic = 0; ic < {geo["icg"]}; ++ic) {{
        const float* plane = xg + (long)ic * {ih * iw};
        for (int kh = 0; kh < {p["fh"]}; ++kh)
          for (int kw = 0; kw < {p["fw"]}; ++kw, ++k) {{
            float* d = dst + (long)k * {nr};
            for (int c = 0; c < {nr}; ++c) {{
              const int ihh = ihb[c] + kh * {dh}, iww = iwb[c] + kw * {dw};
              d[c] = ((unsigned)ihh < {ih}u && (unsigned)iww < {iw}u) ? plane[ihh * {iw} + iww] : 0.f;
            }}
          }}
      }}"""
        if p["pack"] == "rows":
            cols = (
                f"const int col0 = (j / {RP}) * {ow} + (j % {RP}) * {nr}; "
                f"const int nv0 = {ow} - (j % {RP}) * {nr};"
            )
        else:
            cols = f"const int col0 = j * {nr}; const int nv0 = {P} - col0;"
        resg = f"res + ((long)n * {p['oc']} + (long)g * {geo['ocg']}) * {P}" if p["residual"] else "0"
        epi_bias = "bias[g * " + str(geo["ocg"]) + " + m0 + i]" if p["bias"] else "0.f"
        epi_res = f"resg[(long)(m0 + i) * {P} + col0 + c]" if p["residual"] else "0.f"
        # The product's work is split into whole MR x NR tiles, each thread taking an equal contiguous
        # run of the MP x NP tiles (outer index first, the loop order's), so that a ragged edge (14x14
        # images: 7 column panels of 32) does not leave one of two threads a whole panel more. Every
        # tile (full or edge) costs the same vector work, and a tile's sum runs over k in the same
        # order whichever thread takes it: results are the same bits at any thread count.
        outer, inner = ("mp", "j") if p.get("order") == "m" else ("j", "mp")
        n_outer, n_inner = (MP, NP) if p.get("order") == "m" else (NP, MP)
        tid = "omp_get_thread_num()" if region else "0"
        nth = "omp_get_num_threads()" if region else "1"
        split = f"""
    {{
    const int xm_t = {tid}, xm_nt = {nth};
    const long u0 = {n_outer * n_inner}L * xm_t / xm_nt, u1 = {n_outer * n_inner}L * (xm_t + 1) / xm_nt;
    for (long u = u0; u < u1;) {{
      const int {outer} = (int)(u / {n_inner});
      const int lo = (int)(u % {n_inner});
      const long base = (long){outer} * {n_inner};
      const int hi = base + {n_inner} <= u1 ? {n_inner} : (int)(u1 - base);
      u = base + hi;"""
        tile = f"""
          const int m0 = mp * {mr};
          const int mv = {geo["ocg"]} - m0 < {mr} ? {geo["ocg"]} - m0 : {mr};
          {cols}
          const int nv = nv0 < {nr} ? nv0 : {nr};
          const long ldc = {P};"""
        epilogue = f"""
      for (int {inner} = lo; {inner} < hi; ++{inner}) {{
        {tile}
        for (int i = 0; i < mv; ++i) {{
          float* row = yg + (long)(m0 + i) * ldc + col0;
          const float b = {epi_bias};
          for (int c = 0; c < nv; ++c) row[c] = {act}(row[c] + b + {epi_res});
        }}
      }}"""
        compute = f"""{split}
      for (int k0 = 0; k0 < {K}; k0 += {kc}) {{
        const long kl = {K} - k0 < {kc} ? {K} - k0 : {kc};
        for (int {inner} = lo; {inner} < hi; ++{inner}) {{
          {tile}
          const float* A = wg + (long)mp * {K * mr} + (long)k0 * {mr};
          const float* B = bp + (long)j * {K * nr} + (long)k0 * {nr};
          float* Ct = yg + (long)m0 * ldc + col0;
          {_tile_call(self.isa, mr, nr)}
        }}
      }}{epilogue}
    }}
    }}"""
        if region and not last:  # the next (image, group)'s packing rewrites the panels read here
            compute += "\n    #pragma omp barrier"
        # the product splits its tiles by thread id (xmge's OpenMP runtime, or libgomp, defines these)
        omp = "int omp_get_thread_num(void);\nint omp_get_num_threads(void);\n" if region else ""
        return f"""
{omp}static void {sym}({args}) {{
  float* bp = (float*)ws;
  {region}
  for (int n = 0; n < {p["n"]}; ++n)
  for (int g = 0; g < {p["groups"]}; ++g) {{
    const float* xg = x + ((long)n * {p["ic"]} + (long)g * {geo["icg"]}) * {ih * iw};
    float* yg = y + ((long)n * {p["oc"]} + (long)g * {geo["ocg"]}) * {P};
    const float* resg = {resg};
    const float* wg = w + (long)g * {MP * K * mr};
    (void)resg;
    {omp_for(region)}
    for (int j = 0; j < {NP}; ++j) {{
      float* dst = bp + (long)j * {K * nr};
      {pack}
    }}
    {compute}
  }}
}}
"""


def matmul_common(op: Operation, element: str = "f32") -> Lowered | None:
    """A (batched) matrix multiply's geometry (``batch m n k``, transposes ``ta tb``, whether b is a
    constant to pack ahead of time) and a plain epilogue, for every float matmul kernel: operands and
    result of element-type code ``element`` (:func:`backends.c.match.code`), float32 unless told."""
    assert isinstance(op, T.MatrixMulOp | T.BatchedMatrixMulOp)
    if any(code(v) != element for v in (*op.operands, *op.results)):
        return None
    p = op.params()
    a, b = op.operands
    sa, sb = shape(a), shape(b)
    batched = isinstance(op, T.BatchedMatrixMulOp)
    params = {
        "batch": sa[0] if batched else 1,
        "m": sa[-1] if p["transpose_a"] else sa[-2],
        "n": sb[-2] if p["transpose_b"] else sb[-1],
        "k": sa[-2] if p["transpose_a"] else sa[-1],
        "ta": int(bool(p["transpose_a"])), "tb": int(bool(p["transpose_b"])),
        "b_const": int(not batched and const_array(b) is not None),
        "bias": 0, "residual": 0, "act": "identity",
    }  # fmt: skip
    return Lowered(params, [a, b])


def matmul_sym(p: dict[str, Any], *, explicit: bool = False) -> tuple[str, ...]:
    """Symbol words naming a matmul's geometry (:func:`matmul_common`): the batch always
    (``explicit``) or unless 1, ``m n k``, the transposes and a constant b."""
    return (
        f"b{p['batch']}" if explicit or p["batch"] != 1 else "", f"m{p['m']}", f"n{p['n']}", f"k{p['k']}",
        "ta" if p["ta"] else "", "tb" if p["tb"] else "", "bconst" if p["b_const"] else "",
    )  # fmt: skip


class MatmulGemm(Template):
    """``matmul_gemm``: (batched) ``y = op(a) @ op(b)`` with ``op`` an optional transpose; a constant b
    is packed ahead of time (the Linear layer's weight), otherwise both sides are packed at run time.
    Epilogue: bias along N, residual, activation."""
    examples = (
        E.matmul(5, 17, 9, tb=True),
        E.matmul(13, 7, 21, bias=True, act="relu"),
        E.matmul(6, 11, 3, ta=True, const_b=False),
        E.matmul(4, 9, 6, batch=3, const_b=False),
    )

    family = "matmul_gemm"
    ops = (T.MatrixMulOp, T.BatchedMatrixMulOp)
    priority = 100
    epilogues = {"float32": MATMUL_EPILOGUE}

    def __init__(self, isa: str):
        self.isa = isa

    def match(self, op: Operation) -> Lowered | None:
        lowered = matmul_common(op)
        if lowered is not None:
            lowered.params.update(gemm_blocking(self.isa))
        return lowered

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            "matmul_gemm",
            self.isa,
            *matmul_sym(p),
            "f32",
            epilogue_sym(p),
        )

    @staticmethod
    def geometry(p: dict[str, Any]) -> dict[str, int]:
        return {"MP": -(-p["m"] // p["mr"]), "NP": -(-p["n"] // p["nr"])}

    def _a_floats(self, p: dict[str, Any]) -> int:
        # packed A, rounded up so that packed B after it stays 64-byte aligned for aligned loads
        return -(-self.geometry(p)["MP"] * p["mr"] * p["k"] // 16) * 16

    def workspace(self, p: dict[str, Any]) -> int:
        geo = self.geometry(p)
        size = self._a_floats(p) * 4
        if not p["b_const"]:
            size += geo["NP"] * p["nr"] * p["k"] * 4
        return size

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        b = constant_b(operand, array, p)
        if b is None:
            return None
        geo = self.geometry(p)
        nr = p["nr"]
        padded = np.zeros((p["k"], geo["NP"] * nr), np.float32)
        padded[:, : p["n"]] = b
        # (K, NP, NR) -> (NP, K, NR)
        return np.ascontiguousarray(padded.reshape(p["k"], geo["NP"], nr).transpose(1, 0, 2)), f"gemm_b{nr}"

    def support(self, em: CEmitter) -> str:
        return isa_micro_kernel(self.isa)

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        geo = self.geometry(p)
        mr, nr, kc = p["mr"], p["nr"], p["kc"]
        M, N, Kd, MP, NP = p["m"], p["n"], p["k"], geo["MP"], geo["NP"]
        extra, act = _epilogue_args(p)
        args = ", ".join(
            ["const float* a", "const float* b", *extra, "float* y", "unsigned char* ws", "int nt"]
        )
        a_at = "a0[(long)k * " + str(M) + " + r]" if p["ta"] else "a0[(long)r * " + str(Kd) + " + k]"
        b_at = "b0[(long)c * " + str(Kd) + " + k]" if p["tb"] else "b0[(long)k * " + str(N) + " + c]"
        # one region for both packings and the product of every batch
        region = omp_parallel(p["batch"] * M * N * Kd, "parallel")
        if p["b_const"]:
            bpack = "const float* bp = b;"
        else:
            bpack = f"""
    float* bp = ap + {self._a_floats(p)};
    {omp_for(region)}
    for (int j = 0; j < {NP}; ++j)
      for (int k = 0; k < {Kd}; ++k)
        for (int q = 0; q < {nr}; ++q) {{
          const int c = j * {nr} + q;
          bp[((long)j * {Kd} + k) * {nr} + q] = c < {N} ? {b_at} : 0.f;
        }}"""
        bias = "bias[col0 + c]" if p["bias"] else "0.f"
        res = f"rb[(long)(m0 + i) * {N} + col0 + c]" if p["residual"] else "0.f"
        return f"""
static void {sym}({args}) {{
  float* ap = (float*)ws;
  {region}
  for (int bt = 0; bt < {p["batch"]}; ++bt) {{
    const float* a0 = a + (long)bt * {M * Kd};
    const float* b0 = b + (long)bt * {0 if p["b_const"] else N * Kd};
    float* yb = y + (long)bt * {M * N};
    const float* rb = {"res + (long)bt * " + str(M * N) if p["residual"] else "0"};
    (void)b0; (void)rb;
    {omp_for(region)}
    for (int mp = 0; mp < {MP}; ++mp)
      for (int k = 0; k < {Kd}; ++k)
        for (int q = 0; q < {mr}; ++q) {{
          const int r = mp * {mr} + q;
          ap[((long)mp * {Kd} + k) * {mr} + q] = r < {M} ? {a_at} : 0.f;
        }}
    {bpack}
    {omp_for(region, nowait=p["batch"] == 1)}
    for (int j = 0; j < {NP}; ++j) {{
      const int col0 = j * {nr};
      const int nv = {N} - col0 < {nr} ? {N} - col0 : {nr};
      const long ldc = {N};
      for (int k0 = 0; k0 < {Kd}; k0 += {kc}) {{
        const long kl = {Kd} - k0 < {kc} ? {Kd} - k0 : {kc};
        const float* B = bp + (long)j * {Kd * nr} + (long)k0 * {nr};
        for (int mp = 0; mp < {MP}; ++mp) {{
          const int m0 = mp * {mr};
          const int mv = {M} - m0 < {mr} ? {M} - m0 : {mr};
          const float* A = ap + (long)mp * {Kd * mr} + (long)k0 * {mr};
          float* Ct = yb + (long)m0 * ldc + col0;
          {_tile_call(self.isa, mr, nr)}
        }}
      }}
      for (int m0 = 0; m0 < {M}; m0 += {mr}) {{
        const int mv = {M} - m0 < {mr} ? {M} - m0 : {mr};
        for (int i = 0; i < mv; ++i) {{
          float* row = yb + (long)(m0 + i) * ldc + col0;
          for (int c = 0; c < nv; ++c) row[c] = {act}(row[c] + {bias} + {res});
        }}
      }}
    }}
  }}
}}
"""


def conv_pack_mode(p: dict[str, Any], nr: int) -> str:
    """How B is built for a convolution: ``copy`` (1x1, stride 1, no padding), ``rows`` (panels
    aligned to output rows, when that wastes at most ~15% of the columns), else ``gather``."""
    if (p["fh"], p["fw"], p["sh"], p["sw"], p["ph"], p["pw"]) == (1, 1, 1, 1, 0, 0):
        return "copy"
    waste = math.ceil(p["ow"] / nr) * nr / p["ow"]
    return "rows" if waste <= 1.15 else "gather"


# the shared GEMM generator with each ISA's knobs (scalar knobs for the portable build)
GEMM_ISAS = ("avx512", "avx2", "neon", "generic")
KERNEL_UNITS = (*(ConvGemm(isa) for isa in GEMM_ISAS), *(MatmulGemm(isa) for isa in GEMM_ISAS))


def constant_b(operand: int, array: np.ndarray, p: dict[str, Any]) -> np.ndarray | None:
    """A float matrix product's constant right operand as float32 ``[K][N]`` (``transpose_b``
    undone), the matrix the units pack; None for another operand or a run-time ``b``."""
    if operand != 1 or not p["b_const"]:
        return None
    b = np.asarray(array, np.float32)
    return b.T if p["tb"] else b
