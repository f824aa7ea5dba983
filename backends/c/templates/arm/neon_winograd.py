"""Winograd NCHW44 convolutions for AArch64 (ncnn's / MegEngine's ``conv3x3s1_winograd`` pack4
kernels): dense 3x3 stride-1 float32 (``neon``) and float16 (``fp16``, float16 arithmetic) convolutions
by ``F(m x m, 3 x 3)``, ``m`` = 6, 4 or 2 chosen per convolution by :func:`winograd_tile`.

``y = A^T [ (G g G^T) . (B^T d B) ] A`` per ``m x m`` output tile and ``(m + 2)^2`` input patch
(matrices: :mod:`backends.c.templates.x86.winograd_transforms`). The filter transform ``U = G g G^T``
happens at compile time (:meth:`ConvWinogradNchw44.pack`, float64, rounded once); per image, the input
is copied into a zero-bordered workspace covering every tile, then per block of ``TB`` tiles:

1. input transform, per 4-channel block and tile: ``A x A`` NEON vectors (4 channels each) into
   ``V``, per transform point a 1x1-convolution input of ``TB`` "pixels" (:data:`SCRATCH`);
2. one GEMM per transform point, ``M[e] = U[e] V[e]``: exactly a 1x1 stride-1 convolution, run by
   :mod:`neon_gemm`'s register-blocked tile (float32 8 output channels x 8 tiles, float16 16 x 8),
   ``U[e]`` packed as that kernel's panels (:func:`filter_layout`);
3. output transform per 4 output channels and tile, then bias, residual and activation (the epilogue
   neon_gemm's units declare) and the store; border tiles store only their valid pixels.

Numerics: float32 ``F(6, 3)`` and ``F(4, 3)`` stay within ~1e-5 of the output's scale. Float16 stores
``U`` and ``V`` and accumulates ``M`` in float16: ``F(4, 3)`` was measured 2-3% of the output's range
off the reference (transforms computed in float32 around the float16 GEMM: still 2.4%, the float16
``V``, ``U`` and ``M`` dominate), ``F(2, 3)`` 0.1-0.3% (the direct float16 GEMM's order), so float16
uses ``F(2, 3)`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import sym_join
from backends.c.templates.arm.neon import STORAGE, conv_head
from backends.c.templates.arm.neon_gemm import VECS, ConvGemmNchw44
from backends.c.templates.x86.winograd_transforms import (
    TRANSFORMS,
    VectorOps,
    plan_2d,
    plan_ops,
    transform_filter,
)
from dialects.layout import SPECS, Layout, LayoutSpec
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# The per-point scratch ``V`` (transformed inputs) and ``M`` (GEMM results) of a block of tiles: logical
# (A, A, tiles, channels), per point a 1x1-convolution activation in NCHW44 (4-channel blocks of all
# tiles), so neon_gemm's tile reads ``V`` and writes ``M`` as it would a flattened image.
SCRATCH = LayoutSpec("RSNC", "R S C/4 N C%4")


def filter_layout(mb: int) -> LayoutSpec:
    """The transformed filter ``U`` (logical ``(K, C, A, A)``): per transform point, neon_gemm's
    1x1 panels of ``4 mb`` output channels (:func:`neon_gemm.panel_layout` with R = S = 1)."""
    return LayoutSpec("KCRS", f"R S K/{4 * mb} C/4 C%4 K%{4 * mb}")


# vector operations of the transforms: float32 .4s, float16 .4h (one NCHW44 block either way)
TRANSFORM_OPS = {
    "f32": VectorOps("float32x4_t", "vaddq_f32({a}, {b})", "vsubq_f32({a}, {b})", "vmulq_n_f32({a}, {c})",
                     "vfmaq_n_f32({a}, {b}, {c})", "vdupq_n_f32(0.f)"),
    "f16": VectorOps("float16x4_t", "vadd_f16({a}, {b})", "vsub_f16({a}, {b})", "vmul_n_f16({a}, {c})",
                     "vfma_n_f16({a}, {b}, {c})", "vdup_n_f16(0)"),
}  # fmt: skip
LOADS = {"f32": "vld1q_f32({p})", "f16": "vld1_f16({p})"}
STORES = {"f32": "vst1q_f32({p}, {v});", "f16": "vst1_f16({p}, {v});"}
ACTS = {
    "f32": {"relu": "vmaxq_f32({v}, vdupq_n_f32(0.f))",
            "relu6": "vminq_f32(vmaxq_f32({v}, vdupq_n_f32(0.f)), vdupq_n_f32(6.f))"},
    "f16": {"relu": "vmax_f16({v}, vdup_n_f16(0))",
            "relu6": "vmin_f16(vmax_f16({v}, vdup_n_f16(0)), vdup_n_f16(6))"},
}  # fmt: skip

# -- which tile ----------------------------------------------------------------------------------
# float16 keeps to F(2, 3) (see the module doc)
TILES = {"f32": (6, 4, 2), "f16": (2,)}
WINOGRAD_GAIN = 0.85  # Winograd only where its modelled cost is below this fraction of the GEMM's
BLOCK_BYTES = 512 * 1024  # V + M of one tile block (L2-resident)


def _gemm_overhead(cols: int, nb: int) -> float:
    """Instructions per FMA of neon_gemm's tile over ``cols`` pixels: the weight loads (one per
    ``nb`` FMAs of a full tile), the pixel loads (one per 8 FMAs: 4 channels x 2 accumulators)."""
    return 1 + 1 / min(cols, nb) + 1 / 8


def gemm_cost(p: dict[str, Any]) -> float:
    """Modelled vector instructions of the direct register-blocked GEMM (neon_gemm) on one image."""
    v = VECS[p["dtype"]]
    fmas = p["oh"] * p["ow"] * 9 * p["ic"] * p["oc"] / v.lanes
    return fmas * _gemm_overhead(p["ow"], v.nb)


def winograd_cost(p: dict[str, Any], m: int) -> float:
    """Modelled vector instructions of ``F(m, 3)`` on one image: the GEMMs over the tiles (padded
    to whole tiles), the transforms (:func:`plan_ops` plus loads and stores) and the input copy."""
    v = VECS[p["dtype"]]
    a = m + 2
    th, tw = -(-p["oh"] // m), -(-p["ow"] // m)
    tiles = th * tw
    bt, _, at = TRANSFORMS[m]
    gemm = a * a * tiles * p["ic"] * p["oc"] / v.lanes * _gemm_overhead(tiles, v.nb)
    transform_in = tiles * p["ic"] / 4 * (2 * a * a + plan_ops(bt))
    transform_out = tiles * p["oc"] / 4 * (a * a + plan_ops(at) + 3 * m * m)
    copy = p["ic"] / 4 * (th * m + 2) * (tw * m + 2)
    return gemm + transform_in + transform_out + copy


def winograd_tile(p: dict[str, Any]) -> int | None:
    """The output tile ``m`` of the cheapest Winograd form of a dense NCHW44 conv, or None where
    the direct GEMM is cheaper (or the conv is not 3x3 stride 1)."""
    if p.get("mode") != "dense" or p["dtype"] not in TILES:
        return None
    if (p["fh"], p["fw"], p["sh"], p["sw"], p["dh"], p["dw"]) != (3, 3, 1, 1, 1, 1):
        return None
    m = min(TILES[p["dtype"]], key=lambda t: winograd_cost(p, t))
    return m if winograd_cost(p, m) < WINOGRAD_GAIN * gemm_cost(p) else None


class ConvWinogradNchw44(ConvGemmNchw44):
    """``conv2d_nchw44_winograd``: dense 3x3 stride-1 float NCHW44 convolution by ``F(m x m, 3 x 3)``
    (its GEMMs are neon_gemm's register tile, inherited with the epilogue support)."""
    examples = (
        E.conv2d((1, 8, 7, 9), 16, 3, pad=1, act="relu"),
        E.conv2d((2, 16, 10, 11), 8, 3, pad=1, residual=True),
        E.conv2d((1, 32, 14, 13), 32, 3, pad=1, act="relu"),
    )

    family = "conv2d_nchw44_winograd"
    priority = 197  # ahead of conv2d_nchw44_gemm (195) where winograd_tile says it pays off

    def match(self, op: Operation) -> Lowered | None:
        lowered = super().match(op)
        if lowered is None:
            return None
        m = winograd_tile(lowered.params)
        if m is None:
            return None
        return Lowered({**lowered.params, "m": m}, lowered.operands)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, self.isa, f"f{p['m']}", f"n{p['n']}", f"ic{p['ic']}", f"{p['ih']}x{p['iw']}",
            f"oc{p['oc']}", f"p{p['ph']}x{p['pw']}", p["dtype"], "bias" if p["bias"] else "",
            "res" if p.get("residual") else "", p["act"].upper() if p["act"] != "identity" else "",
        )  # fmt: skip

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        mb = self.tiling(p)[0]
        arr = np.asarray(array)
        logical = SPECS[Layout.KCRSc4k4].unpack(arr, (p["oc"], p["ic"], 3, 3))
        u = transform_filter(logical, p["m"], arr.dtype.type)
        return np.ascontiguousarray(filter_layout(mb).pack(u)), f"{self.family}_f{p['m']}_k{4 * mb}"

    # -- geometry --------------------------------------------------------------------------------
    def geometry(self, p: dict[str, Any]) -> dict[str, int]:
        """Tiles, the tile block and the padded input copy of one image."""
        m = p["m"]
        a = m + 2
        th, tw = -(-p["oh"] // m), -(-p["ow"] // m)
        tiles = th * tw
        nb = self.tiling(p)[1]
        per_tile = a * a * (p["ic"] + p["oc"]) * self._esize(p)
        tb = max(nb, BLOCK_BYTES // per_tile // nb * nb)
        if tb >= tiles:
            tb = tiles
        return {"A": a, "TH": th, "TW": tw, "T": tiles, "TB": tb, "HP": th * m + 2, "WP": tw * m + 2}

    def _sizes(self, p: dict[str, Any]) -> tuple[int, int, int]:
        """Elements of the padded input copy, ``V`` and ``M`` (each rounded to 64 bytes)."""
        g = self.geometry(p)
        a, tb = g["A"], g["TB"]
        xs = p["ic"] * g["HP"] * g["WP"]
        v = a * a * tb * p["ic"]
        mm = a * a * tb * p["oc"]
        align = 64 // self._esize(p)
        return tuple(-(-n // align) * align for n in (xs, v, mm))  # type: ignore[return-value]

    def workspace(self, p: dict[str, Any]) -> int:
        return sum(self._sizes(p)) * self._esize(p)

    # -- code ------------------------------------------------------------------------------------
    def _gemm(
        self, sym: str, p: dict[str, Any], tn: int, g: dict[str, int]
    ) -> tuple[str, set[tuple[int, int]]]:
        """``sym_gemm{tn}(V, U, M, nt)``: the per-point GEMMs of a block of ``tn`` tiles, and the
        register tiles it calls."""
        mb_full, nb_full = self.tiling(p)
        kblocks = p["oc"] // 4
        kp_n = -(-kblocks // mb_full)
        mb_tail = kblocks - (kp_n - 1) * mb_full
        vst = SCRATCH.dim_strides((g["A"], g["A"], g["TB"], p["ic"]))
        mst = SCRATCH.dim_strides((g["A"], g["A"], g["TB"], p["oc"]))
        ust = filter_layout(mb_full).dim_strides((p["oc"], p["ic"], g["A"], g["A"]))
        nb_tail = tn % nb_full
        full = tn - nb_tail
        used = {(mb, nb) for mb in {mb_full, mb_tail} for nb in {nb_full if full else 0, nb_tail} if nb}

        def call(nb: int, q: str) -> str:
            def one(mb: int) -> str:
                return f"{sym}_t{mb}x{nb}(xr + {q}, wk, yr + {q}, 0, 0);"

            if mb_tail == mb_full:
                return one(mb_full)
            return f"if (kp < {kp_n - 1}) {one(mb_full)} else {one(mb_tail)}"

        calls = ""
        if full:
            calls += f"for (long q = 0; q < {4 * full}; q += {4 * nb_full}) {{ {call(nb_full, 'q')} }}\n"
        if nb_tail:
            calls += call(nb_tail, str(4 * full))
        ctype = STORAGE[p["dtype"]]
        code = f"""
static void {sym}_gemm{tn}(const {ctype}* restrict V, const {ctype}* restrict U, {ctype}* restrict M,
                           int nt) {{
  (void)nt;
  #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
  for (int e = 0; e < {g["A"] ** 2}; ++e)
    for (int kp = 0; kp < {kp_n}; ++kp) {{
      const {ctype}* xr = V + (long)e * {vst["S"]};
      const {ctype}* wk = U + (long)e * {ust["S"]} + (long)kp * {ust[f"K/{4 * mb_full}"]};
      {ctype}* yr = M + (long)e * {mst["S"]} + (long)kp * {mb_full * mst["C/4"]};
      {calls}
    }}
}}
"""
        return code, used

    def _input_transform(self, sym: str, p: dict[str, Any], g: dict[str, int]) -> str:
        """``sym_in(xs, V, t0, tn, nt)``: tiles ``t0 ..`` of the padded copy into ``V``."""
        dt, m, a = p["dtype"], p["m"], g["A"]
        ops, ctype = TRANSFORM_OPS[dt], STORAGE[dt]
        xst = SPECS[Layout.NCHW44].dim_strides((1, p["ic"], g["HP"], g["WP"]))
        vst = SCRATCH.dim_strides((a, a, g["TB"], p["ic"]))
        xh = xst["H"]
        body = [f"const {ops.vtype} d{i}_{j} = {LOADS[dt].format(p=f'dp + {i * xh + j * 4}')};"
                for i in range(a) for j in range(a)]  # fmt: skip
        body += ops.statements(plan_2d(TRANSFORMS[m][0], "d", "v"))
        vs = vst["S"]
        body += [
            STORES[dt].format(p=f"vp + {(i * a + j) * vs}", v=f"v{i}_{j}") for i in range(a) for j in range(a)
        ]
        ind = "\n      "
        return f"""
static void {sym}_in(const {ctype}* restrict xs, {ctype}* restrict V, int t0, int tn, int nt) {{
  (void)nt;
  #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
  for (int cb = 0; cb < {p["ic"] // 4}; ++cb)
    for (int tl = 0; tl < tn; ++tl) {{
      const int th = (t0 + tl) / {g["TW"]}, tw = (t0 + tl) % {g["TW"]};
      const {ctype}* dp = xs + (long)cb * {xst["C/4"]} + (long)th * {m * xst["H"]} + (long)tw * {m * 4};
      {ctype}* vp = V + (long)cb * {vst["C/4"]} + (long)tl * 4;
      {ind.join(body)}
    }}
}}
"""

    def _output_transform(self, sym: str, p: dict[str, Any], g: dict[str, int]) -> str:
        """``sym_out(M, y, bias, res, t0, tn, nt)``: the output transform of tiles ``t0 ..`` with the
        epilogue, stored into the NCHW44 output of one image."""
        dt, m, a = p["dtype"], p["m"], g["A"]
        ops, ctype = TRANSFORM_OPS[dt], STORAGE[dt]
        mst = SCRATCH.dim_strides((a, a, g["TB"], p["oc"]))
        yst = SPECS[Layout.NCHW44].dim_strides((1, p["oc"], p["oh"], p["ow"]))
        ms = mst["S"]
        body = [f"const {ops.vtype} mm{i}_{j} = {LOADS[dt].format(p=f'mp + {(i * a + j) * ms}')};"
                for i in range(a) for j in range(a)]  # fmt: skip
        body += ops.statements(plan_2d(TRANSFORMS[m][2], "mm", "o"))

        def store(i: int, j: int) -> str:
            off = i * yst["H"] + j * 4
            steps = [f"{ops.vtype} r = o{i}_{j};"]
            if p["bias"]:
                steps.append(f"r = {ops.add.format(a='r', b='bv')};")
            if p.get("residual"):
                steps.append(f"r = {ops.add.format(a='r', b=LOADS[dt].format(p=f'rp + {off}'))};")
            if p["act"] != "identity":
                steps.append(f"r = {ACTS[dt][p['act']].format(v='r')};")
            steps.append(STORES[dt].format(p=f"yp + {off}", v="r"))
            return "{ " + " ".join(steps) + " }"

        full = [store(i, j) for i in range(m) for j in range(m)]
        edge = [f"if ({i} < rv && {j} < qv) {store(i, j)}" for i in range(m) for j in range(m)]
        ind = "\n        "
        bias = f"const {ops.vtype} bv = {LOADS[dt].format(p='bias + kb * 4')};" if p["bias"] else ""
        return f"""
static void {sym}_out(const {ctype}* restrict M, {ctype}* restrict y, const {ctype}* restrict bias,
                      const {ctype}* restrict res, int t0, int tn, int nt) {{
  (void)nt; (void)bias; (void)res;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
  for (int kb = 0; kb < {p["oc"] // 4}; ++kb) {{
    {bias}
    for (int tl = 0; tl < tn; ++tl) {{
      const int th = (t0 + tl) / {g["TW"]}, tw = (t0 + tl) % {g["TW"]};
      const int rv = {p["oh"]} - th * {m}, qv = {p["ow"]} - tw * {m};
      const long at = (long)kb * {yst["C/4"]} + (long)th * {m * yst["H"]} + (long)tw * {m * 4};
      const {ctype}* mp = M + (long)kb * {mst["C/4"]} + (long)tl * 4;
      {ctype}* yp = y + at;
      const {ctype}* rp = res ? res + at : 0;
      (void)rp;
      {ind.join(body)}
      if (rv >= {m} && qv >= {m}) {{
        {ind.join(full)}
      }} else {{
        {ind.join(edge)}
      }}
    }}
  }}
}}
"""

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        g = self.geometry(p)
        ctype = STORAGE[p["dtype"]]
        tb, tiles = g["TB"], g["T"]
        nfull, last = divmod(tiles, tb)
        xs_n, v_n, _ = self._sizes(p)
        xin = SPECS[Layout.NCHW44].dim_strides((n, ic, ih, iw))
        xst = SPECS[Layout.NCHW44].dim_strides((1, ic, g["HP"], g["WP"]))
        ys = SPECS[Layout.NCHW44].dim_strides((n, oc, oh, ow))
        gemms, used = self._gemm(sym, p, tb, g)
        if last:
            code, more = self._gemm(sym, p, last, g)
            gemms, used = gemms + code, used | more
        # the GEMM is neon_gemm's 1x1 stride-1 tile over V's "pixels" (tiles) and input blocks
        gp = {**p, "mode": "dense", "fh": 1, "fw": 1, "sw": 1, "dh": 1, "dw": 1, "bias": 0, "residual": 0,
              "act": "identity"}  # fmt: skip
        geo = {"cbn": ic // 4, "x_c": 4 * tb, "x_h": 0, "y_c": 4 * tb}
        tiles_c = "".join(self._tile(f"{sym}_t{mb}x{nb}", gp, mb, nb, geo) for mb, nb in sorted(used))

        def block(t0: str, tn: int) -> str:
            return (f"{sym}_in(xs, V, {t0}, {tn}, nt); {sym}_gemm{tn}(V, w, M, nt); "
                    f"{sym}_out(M, yn, bias, rn, {t0}, {tn}, nt);")  # fmt: skip

        blocks = f"for (int b = 0; b < {nfull}; ++b) {{ {block(f'b * {tb}', tb)} }}" if nfull else ""
        if last:
            blocks += "\n    " + block(str(nfull * tb), last)
        return f"""{tiles_c}{gemms}{self._input_transform(sym, p, g)}{self._output_transform(sym, p, g)}
{conv_head(sym, p, ctype, ctype, ctype)}
  {ctype}* xs = ({ctype}*)ws;
  {ctype}* V = xs + {xs_n};
  {ctype}* M = V + {v_n};
  (void)bias; (void)res;
  for (int nn = 0; nn < {n}; ++nn) {{
    const {ctype}* xn = x + (long)nn * {xin["N"]};
    {ctype}* yn = y + (long)nn * {ys["N"]};
    const {ctype}* rn = res ? res + (long)nn * {ys["N"]} : 0;
    (void)rn;
    memset(xs, 0, {xs_n * self._esize(p)});
    for (int c = 0; c < {ic // 4}; ++c)
      for (int yy = 0; yy < {ih}; ++yy)
        memcpy(xs + (long)c * {xst["C/4"]} + (long)(yy + {p["ph"]}) * {xst["H"]} + {4 * p["pw"]},
               xn + (long)c * {xin["C/4"]} + (long)yy * {xin["H"]}, {iw * 4 * self._esize(p)});
    {blocks}
  }}
}}
"""


KERNEL_UNITS = tuple(ConvWinogradNchw44(isa) for isa in ("neon", "fp16"))
