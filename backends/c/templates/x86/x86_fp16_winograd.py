"""Winograd ``F(m x m, 3 x 3)`` (``m`` = 2 or 4) for dense 3x3 stride-1 NCHW float16 convolutions on
AVX512-FP16 (``x86-avx512-fp16+ioc16``): ``conv2d_winograd_f16``.

``y = A^T [ (G g G^T) . (B^T d B) ] A`` per ``m x m`` output tile, summed over input channels, with the
Lavin & Gray matrices of :data:`backends.c.templates.x86.winograd.TRANSFORMS` (one source of the points).
The filter transform ``U = G g G^T`` is computed in float64 ahead of time and rounded once to float16.
At run time, by bands of tile rows whose ``V`` and ``M`` fit :data:`BAND_BYTES` (a quarter of L2; 7
bands at 56x56x64, 4 at 28x28x128, one where ``U`` streams from L3, 14x14x256):

1. input transform: per input channel and row of tiles, 32 tiles at a time (lane ``l`` = tile
   ``tx0 + l``; its ``(m + 2)^2`` patch values are stride-``m`` masked row loads, for ``F(2, 3)`` a
   row's 4 taps from 4 loads and 4 ``vpermt2w``, border taps read as zero), ``V = B^T d B`` (in float16
   where ``B^T`` is adds and subtracts, ``F(2, 3)``, else in float32 and rounded to float16) stored
   straight into the GEMM's packed ``B`` panels (the band's tiles flattened over rows, 32 per panel,
   each row padded to a divisor or multiple of 32 tiles where that wastes at most 1/8 of the lanes
   (:func:`padded_row_tiles`), so that a row's stores never straddle two panels; the points' panels
   :func:`spread_stride` apart, in distinct L1 sets); a tile row's first 2 input rows are its
   predecessor's last 2, loaded once;
2. one GEMM per transform point ``M[pt] = U[pt] (OC x IC) . V[pt] (IC x tiles)`` on the float16
   ``24 x 32`` micro-kernel of :mod:`backends.c.templates.x86.x86_fp16` (``16 x 32`` where OC is a multiple
   of 16 but not of 24; float16 accumulation);
3. output transform: ``A^T M A`` plus the bias (in float16 on all 32 lanes where ``A^T`` is adds and
   subtracts, ``F(2, 3)``, else in float32, its second 16 tiles only where a row chunk has them, and
   rounded to float16), the ``m`` tile columns
   interleaved into output rows (``vpermt2w``), residual and ReLU / ReLU6, masked stores at borders.

Numerics (``tests/test_x86_fp16.py``, ``docs/ARCHITECTURE.md``): the transforms in float32 where their
coefficients are not all +-1 (``F(4, 3)``) keep the rounding to the float16 roundings of ``V`` and
``M`` and the float16 accumulation of the GEMM; ``F(2, 3)``'s float16 transforms add two roundings
to each ``V`` value and three to each output, small against the GEMM's accumulation over ``IC``
terms (ResNet-18 / 50 ``+ioc16`` against float32: relative L2 error 2.2e-3 / 3.7e-3 with the float16
output transform, 2.2e-3 / 3.8e-3 with the float32 one); the output transform's coefficients (up
to 8 for ``F(4, 3)``) amplify the accumulation error of ``M``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates import sym_join
from backends.c.templates.x86.nchw88 import _guarded
from backends.c.templates.x86.winograd import TRANSFORMS, _lin, transform_filter
from backends.c.templates.x86.x86_fp16 import (
    ACT_CODES,
    COMMON,
    KC,
    LANES,
    MR_NARROW,
    NR,
    ConvUnitF16,
    _epilogue_words,
    conv_rows,
    f16_head,
    micro_kernel,
)
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# stride-m row loads (32 tiles' tap k: row[base + m * l]) and the zip of the output transform
WINO_HELPERS = """/* 32 halves row[base + 4 l] (lanes l < nv, indices in [0, len), else zero): 4 masked loads
   of 32, the 16 words 0 mod 4 of each pair picked by one vpermt2w, the halves blended */
static inline __m512h xm_h_row4(const xm_h* row, long base, long nv, long len) {
  const long lo = base < 0 ? -base : 0, hi = len - base < 4 * nv ? len - base : 4 * nv;
  __m512i q[4];
  for (int i = 0; i < 4; ++i) {
    const __mmask32 m = (__mmask32)(xm_h_mask(hi - 32 * i) & ~xm_h_mask(lo - 32 * i));
    q[i] = m ? _mm512_maskz_loadu_epi16(m, row + base + 32 * i) : _mm512_setzero_si512();
  }
  const __m512i idx = _mm512_set_epi16(60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0,
                                       60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
  const __m512i a = _mm512_permutex2var_epi16(q[0], idx, q[1]);
  const __m512i b = _mm512_permutex2var_epi16(q[2], idx, q[3]);
  return _mm512_castsi512_ph(_mm512_mask_blend_epi16((__mmask32)0xFFFF0000u, a, b));
}
/* F(2, 3)'s 4 taps of 32 tiles: t[k] lane l = row[base + 2 l + k] (lanes l < nv, indices in [0, len),
   else zero): taps 0, 1 the even and odd words of 64 halves from base, taps 2, 3 those from base + 2 */
static inline void xm_h_taps2(const xm_h* row, long base, long nv, long len, __m512h* t) {
  const __m512i ev = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32,
                                      30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_add_epi16(ev, _mm512_set1_epi16(1));
  for (int s = 0; s < 4; s += 2) {
    const long b = base + s, lo = b < 0 ? -b : 0, hi = len - b < 2 * nv ? len - b : 2 * nv;
    const __m512i q0 = _mm512_maskz_loadu_epi16((__mmask32)(xm_h_mask(hi) & ~xm_h_mask(lo)), row + b);
    const __m512i q1 = _mm512_maskz_loadu_epi16((__mmask32)(xm_h_mask(hi - 32) & ~xm_h_mask(lo - 32)),
                                                row + b + 32);
    t[s] = _mm512_castsi512_ph(_mm512_permutex2var_epi16(q0, ev, q1));
    t[s + 1] = _mm512_castsi512_ph(_mm512_permutex2var_epi16(q0, od, q1));
  }
}
/* lo = a0 b0 a1 b1 ... a15 b15, hi = a16 b16 ... a31 b31 */
static inline void xm_h_zip(__m512h a, __m512h b, __m512h* lo, __m512h* hi) {
  const __m512i il = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                      39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i ih = _mm512_add_epi16(il, _mm512_set1_epi16(16));
  *lo = _mm512_castsi512_ph(_mm512_permutex2var_epi16(_mm512_castph_si512(a), il, _mm512_castph_si512(b)));
  *hi = _mm512_castsi512_ph(_mm512_permutex2var_epi16(_mm512_castph_si512(a), ih, _mm512_castph_si512(b)));
}
static inline __m512 xm_h_lo_ps(__m512h v) { return _mm512_cvtxph_ps(_mm512_castph512_ph256(v)); }
static inline __m512 xm_h_hi_ps(__m512h v) {
  return _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_extracti64x4_epi64(_mm512_castph_si512(v), 1)));
}
static inline __m512h xm_h_from_ps(__m512 lo, __m512 hi) {
  return _mm512_castsi512_ph(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_castph_si256(
      _mm512_cvtxps_ph(lo))), _mm256_castph_si256(_mm512_cvtxps_ph(hi)), 1));
}
"""

_PS = {"add": "_mm512_add_ps", "sub": "_mm512_sub_ps", "fma": "_mm512_fmadd_ps", "set1": "_mm512_set1_ps"}
_PH = {"add": "_mm512_add_ph", "sub": "_mm512_sub_ph", "fma": "_mm512_fmadd_ph", "set1": "_mm512_set1_ph"}


def unit_entries(mat: Sequence[Sequence[Fraction]]) -> bool:
    """Every coefficient 0 or +-1 (F(2, 3)'s ``B^T``): the transform is adds and subtracts only."""
    return all(c in (0, 1, -1) for row in mat for c in row)


def transform_2d(
    mat: Sequence[Sequence[Fraction]], src: str, dst: str, n_in: int, half: bool = False
) -> list[str]:
    """Statements ``dst = mat . src . mat^T`` over ``__m512`` (float32) or, ``half``, ``__m512h`` arrays
    ``src[i * n_in + j]`` into ``dst[i * len(mat) + j]`` (zero coefficients dropped, +-1 as adds /
    subtracts)."""
    ops, vtype = (_PH, "__m512h") if half else (_PS, "__m512")
    n_out = len(mat)
    lines = []
    for i in range(n_out):  # t[i][j] = sum_k mat[i][k] src[k][j]
        for j in range(n_in):
            e = _lin(mat[i], [f"{src}[{k * n_in + j}]" for k in range(n_in)], **ops)
            lines.append(f"const {vtype} {dst}t{i}_{j} = {e};")
    for i in range(n_out):  # dst[i][j] = sum_k t[i][k] mat[j][k]
        for j in range(n_out):
            e = _lin(mat[j], [f"{dst}t{i}_{k}" for k in range(n_in)], **ops)
            lines.append(f"{dst}[{i * n_out + j}] = {e};")
    return [s.replace("_MUL_", "_mm512_mul_ph" if half else "_mm512_mul_ps") for s in lines]


# F(m, 3) against the direct GEMM (9 taps per output): m = 4 does 36 / 16 = 2.25 multiply-adds per
# output, m = 2 16 / 4 = 4, the direct kernel 9; the transforms cost about as much as 8 output channels
# of GEMM per tile, so layers with few channels or few tiles stay direct. Winograd must also win by
# WINOGRAD_MARGIN: its U is 16 / 9 (F(2, 3)) of the filter, and with one tile panel (7x7x512) the layer
# streams U from memory once, slower than the direct GEMM (measured 1.0 vs 0.8 ms)
WINOGRAD_MIN_CHANNELS = 16
TRANSFORM_COST_CHANNELS = 8
WINOGRAD_MARGIN = 0.8
# F(4, 3) in float16 is 3-4x less accurate than the direct GEMM (max error 2-4% of the output's scale
# against 0.5-1.3% direct, at 64-512 channels) and was not faster than F(2, 3) (56x56x64: 0.67 vs
# 0.74 ms); F(2, 3) is more accurate than the direct GEMM (each point's sum runs over IC terms, not
# 9 IC): only F(2, 3) is chosen
DEFAULT_TILES = (2,)
# V and M of one band of tile rows: a quarter of a Sapphire Rapids core's 2 MB L2, the rest for U and the
# input and output rows (against 1 MB: 56x56x64 0.41 -> 0.37 ms, 28x28x128 0.34 -> 0.32 ms)
BAND_BYTES = 1 << 19
# a U larger than this streams from L3 once per band: its layers take bands of up to 2 * BAND_BYTES
# (14x14x256, U 2.1 MB: one band, not three)
STREAMED_U_BYTES = 1 << 20
L1_SETS, LINE_BYTES = 64, 64  # the L1D's sets and line size (48 KB, 12 ways)


def spread_stride(halves: int, count: int) -> int:
    """``halves`` rounded up to whole cache lines, plus the fewest lines that put ``count`` lines ``stride``
    apart into distinct L1 sets: the input transform stores a tile vector into each of the ``(m + 2)^2``
    points' ``V`` panels at once, and with a point stride a multiple of 4 KB (every layer of ResNet-18)
    those stores all fall into one 12-way set (and alias the next input loads)."""
    per_line = LINE_BYTES // 2
    lines = -(-halves // per_line)
    for pad in range(L1_SETS):
        if len({(k * (lines + pad)) % L1_SETS for k in range(min(count, L1_SETS))}) == min(count, L1_SETS):
            return (lines + pad) * per_line
    return lines * per_line


def padded_row_tiles(tw: int, nr: int) -> int:
    """A band's tiles per tile row in the packed ``V`` panels: ``tw`` rounded up to a divisor or a
    multiple of the ``nr``-lane panel where that wastes at most 1/8 of the lanes, so that a row's 32-tile
    store never straddles two panels (two split masked stores per point; at 56x56 (28 tiles a row) they
    were a sixth of the layer's time), else ``tw`` (flattened rows, no lanes wasted)."""
    twp = -(-tw // nr) * nr if tw > nr else 1 << (tw - 1).bit_length()
    return twp if 8 * (twp - tw) <= twp else tw


def winograd_cost(p: dict[str, Any], m: int) -> float:
    """Vector multiply-add equivalents of ``F(m, 3)`` for a conv's parameters (tile lanes padded to 32)."""
    a = m + 2
    tiles = -(-p["oh"] // m) * -(-p["ow"] // m)
    lanes = -(-tiles // LANES) * LANES
    ocp = -(-p["oc"] // conv_rows(p["oc"])) * conv_rows(p["oc"])
    return a * a * lanes * (ocp * p["ic"] + TRANSFORM_COST_CHANNELS * (p["ic"] + p["oc"]))


def direct_cost(p: dict[str, Any]) -> float:
    lanes = -(-(p["oh"] * p["ow"]) // LANES) * LANES
    return 9 * lanes * -(-p["oc"] // conv_rows(p["oc"])) * conv_rows(p["oc"]) * p["ic"]


def winograd_tile(p: dict[str, Any], tiles: Sequence[int]) -> int | None:
    """The cheapest ``F(m, 3)`` among ``tiles`` for a conv's parameters, None where the direct GEMM is
    cheaper or the conv is not a dense 3x3 stride-1 one."""
    if p["groups"] != 1 or (p["fh"], p["fw"], p["sh"], p["sw"], p["dh"], p["dw"]) != (3, 3, 1, 1, 1, 1):
        return None
    if min(p["ic"], p["oc"]) < WINOGRAD_MIN_CHANNELS:
        return None
    best = min(tiles, key=lambda m: winograd_cost(p, m), default=None)
    return best if best is not None and winograd_cost(p, best) < WINOGRAD_MARGIN * direct_cost(p) else None


class ConvWinogradF16(ConvUnitF16):
    """``conv2d_winograd_f16``: dense 3x3 stride-1 NCHW float16 convolution by ``F(m x m, 3 x 3)``
    (module doc)."""
    examples = (
        E.conv2d((1, 24, 9, 11), 32, 3, pad=1, residual=True),
        E.conv2d((2, 40, 14, 13), 56, 3, pad=1, act="relu"),
    )

    family = "conv2d_winograd_f16"
    priority = 106  # ahead of conv2d_gemm_f16 (104) where winograd_tile says it wins
    tiles: tuple[int, ...] = DEFAULT_TILES  # the F(m, 3) candidates

    def match(self, op: Operation) -> Lowered | None:
        got = self.dense(op)
        if got is None:
            return None
        params, operands = got
        m = winograd_tile(params, self.tiles)
        if m is None:
            return None
        params = {k: v for k, v in params.items() if k not in ("fh", "fw", "sh", "sw", "dh", "dw", "groups")}
        # 16-row tiles where OC is a multiple of 16 but not of 24 (64, 128: no padding rows in U and M)
        params.update({"m": m, "mr": conv_rows(params["oc"]), "nr": NR, "kc": KC})
        return Lowered(params, operands)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, f"f{p['m']}", f"n{p['n']}", f"ic{p['ic']}", f"{p['ih']}x{p['iw']}", f"oc{p['oc']}",
            f"p{p['ph']}x{p['pw']}", *_epilogue_words(p),
        )  # fmt: skip

    @staticmethod
    def geometry(p: dict[str, Any]) -> dict[str, int]:
        m = p["m"]
        th, tw = -(-p["oh"] // m), -(-p["ow"] // m)
        twp = padded_row_tiles(tw, p["nr"])
        mp = -(-p["oc"] // p["mr"])
        # bands of BR tile rows whose V and M stay in L2 (a 56x56x64 layer's whole V and M are 3.2 MB)
        tile_bytes = (m + 2) ** 2 * (p["ic"] + mp * p["mr"]) * 2
        u_bytes = (m + 2) ** 2 * mp * p["mr"] * p["ic"] * 2
        budget = BAND_BYTES * (2 if u_bytes > STREAMED_U_BYTES else 1)
        br = max(1, min(th, budget // (twp * tile_bytes)))
        np_ = -(-br * twp // p["nr"])  # panels of the largest band
        vps = spread_stride(np_ * p["ic"] * p["nr"], (m + 2) ** 2)  # halves between two points' V
        return {"A": m + 2, "TH": th, "TW": tw, "TWP": twp, "BR": br, "NP": np_, "MP": mp, "VPS": vps}

    def _sizes(self, p: dict[str, Any]) -> tuple[int, int]:
        """Halves of the packed V and of M (both rounded up to 64 bytes)."""
        geo = self.geometry(p)
        pts, cols = geo["A"] ** 2, geo["NP"] * p["nr"]
        return pts * geo["VPS"], pts * geo["MP"] * p["mr"] * cols

    def workspace(self, p: dict[str, Any]) -> int:
        return sum(self._sizes(p)) * 2

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        geo = self.geometry(p)
        a, mp, mr, ic, oc = geo["A"], geo["MP"], p["mr"], p["ic"], p["oc"]
        u = transform_filter(np.asarray(array, np.float32).reshape(oc, ic, 3, 3), p["m"])  # (OC, IC, A, A)
        padded = np.zeros((a * a, mp * mr, ic), np.float16)
        padded[:, :oc] = u.reshape(oc, ic, a * a).transpose(2, 0, 1)
        # (PT, MP, MR, IC) -> (PT, MP, IC, MR): the micro-kernel's A panels, one GEMM per point
        packed = padded.reshape(a * a, mp, mr, ic).transpose(0, 1, 3, 2)
        return np.ascontiguousarray(packed), f"winograd_h{p['m']}_{mr}"

    def support(self, em: CEmitter) -> str:
        return (
            COMMON + micro_kernel(spread=True) + micro_kernel(MR_NARROW, spread=True)
            + _guarded("H_WINO", WINO_HELPERS)
        )  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        geo = self.geometry(p)
        m, mr, nr, kc = p["m"], p["mr"], p["nr"], p["kc"]
        a, th, tw, br, NP, MP = geo["A"], geo["TH"], geo["TW"], geo["BR"], geo["NP"], geo["MP"]
        twp, vps = geo["TWP"], geo["VPS"]
        n, ic, ih, iw, oc, oh, ow, ph, pw = (
            p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow", "ph", "pw")
        )
        bt, _, at = TRANSFORMS[m]
        v_halves, _ = self._sizes(p)
        u_lines, nkb = MP * mr * ic // LANES, -(-ic // kc)  # 64-byte lines of one point's U; K blocks
        cols, pts = NP * nr, a * a
        row_load = (
            "xm_h_row4(row, base, nt_, " + str(iw) + ")"
            if m == 4
            else (f"xm_h_row(row, base, 2, nt_, {iw}, _mm512_setzero_si512())")
        )
        # B^T of F(2, 3) is adds and subtracts: in float16 on all 32 lanes (V is stored as float16 anyway;
        # each V value is two roundings instead of one), else float32 in two halves of 16
        half = unit_entries(bt)
        in_tf = "\n        ".join(transform_2d(bt, "d", "v", a, half))
        if half:
            in_regs = f"__m512h d[{a * a}], v[{a * a}];"
            keep = "d[i * " + str(a) + " + k] = dv;"
            in_body = "{\n        " + in_tf + "\n          }"
            packed = "_mm512_castph_si512(v[pt])"
        else:
            in_regs = f"__m512 dl[{a * a}], dh[{a * a}], vl[{a * a}], vh[{a * a}];"
            keep = "dl[i * " + str(a) + " + k] = xm_h_lo_ps(dv); dh[i * " + str(a) + " + k] = xm_h_hi_ps(dv);"
            in_body = (
                "{ const __m512* d = dl; __m512* v = vl;\n        " + in_tf + "\n          }\n"
                "          { const __m512* d = dh; __m512* v = vh;\n        " + in_tf + "\n          }"
            )
            packed = "_mm512_castph_si512(xm_h_from_ps(vl[pt], vh[pt]))"
        if m == 2:
            fill = (
                f"if (ok) xm_h_taps2(row, (long)tx0 * 2 - {pw}, nt_, {iw}, tap); "
                "else tap[0] = tap[1] = tap[2] = tap[3] = _mm512_setzero_ph();"
            )
        else:
            fill = (
                f"for (int k = 0; k < {a}; ++k) {{ const long base = (long)tx0 * {m} - {pw} + k; "
                f"tap[k] = ok ? {row_load} : _mm512_setzero_ph(); }}"
            )

        def load_rows(first: str, last: str) -> str:
            """Input rows ``first .. last - 1`` of tile row ``ty``'s patch into the transform's inputs."""
            return f"""for (int i = {first}; i < {last}; ++i) {{
          const int yy = ty * {m} - {ph} + i;
          const int ok = (unsigned)yy < {ih}u;
          const xm_h* row = plane + (ok ? (long)yy * {iw} : 0);
          __m512h tap[{a}];
          {fill}
          for (int k = 0; k < {a}; ++k) {{
            const __m512h dv = tap[k];
            {keep}
          }}
        }}"""

        overlap = 2 * a  # patch values of the 2 shared rows
        regs = ("d",) if half else ("dl", "dh")
        shift = " ".join(f"for (int k = 0; k < {overlap}; ++k) {r}[k] = {r}[k + {m * a}];" for r in regs)
        # A^T of F(2, 3) is adds and subtracts too: the output transform on all 32 lanes in float16 (no
        # conversions; each output value three more float16 roundings, against the GEMM's accumulation
        # over IC terms), else float32 in two halves of 16
        half_out = unit_entries(at)
        out_tf = "\n          ".join(transform_2d(at, "q", "o", a, half_out))
        if half_out:
            bias = "((const xm_h*)bias_)[oc_]" if p["bias"] else "(xm_h)0"
        else:
            bias = "(float)((const xm_h*)bias_)[oc_]" if p["bias"] else "0.f"
        m_row = "mb + ((long)pt * " + str(MP * mr) + " + oc_) * " + str(cols) + " + t0"
        if half_out:
            out_bias = f"const __m512h bv = _mm512_set1_ph({bias});"
            out_body = f"""__m512h q[{pts}], o[{m * m}];
          for (int pt = 0; pt < {pts}; ++pt) q[pt] = xm_h_loadn({m_row}, nt_);
          {{
          {out_tf}
          }}"""
            out_row = f"r[jj] = _mm512_add_ph(o[i * {m} + jj], bv);"
        else:
            out_bias = f"const __m512 bv = _mm512_set1_ps({bias});"
            out_body = f"""/* tiles 16 .. 31 (the float32 transform's second half) only where there are
             any: at 28x28 and 14x14 (14 and 7 tiles a row) never */
          const int hi_ = nt_ > 16;
          __m512 ql[{pts}], qh[{pts}], ol[{m * m}], oh_[{m * m}];
          for (int pt = 0; pt < {pts}; ++pt) {{
            const __m512h mv = xm_h_loadn({m_row}, nt_);
            ql[pt] = xm_h_lo_ps(mv);
            qh[pt] = hi_ ? xm_h_hi_ps(mv) : _mm512_setzero_ps();
          }}
          {{ const __m512* q = ql; __m512* o = ol;
          {out_tf}
          }}
          if (hi_) {{ const __m512* q = qh; __m512* o = oh_;
          {out_tf}
          }} else
            for (int i = 0; i < {m * m}; ++i) oh_[i] = _mm512_setzero_ps();"""
            lo_hi = f"ol[i * {m} + jj], bv), _mm512_add_ps(oh_[i * {m} + jj], bv)"
            out_row = f"r[jj] = xm_h_from_ps(_mm512_add_ps({lo_hi});"
        if m == 4:
            zip_row = """__m512h ac0, ac1, bd0, bd1, z[4];
            xm_h_zip(r[0], r[2], &ac0, &ac1); xm_h_zip(r[1], r[3], &bd0, &bd1);
            xm_h_zip(ac0, bd0, &z[0], &z[1]); xm_h_zip(ac1, bd1, &z[2], &z[3]);"""
        else:
            zip_row = "__m512h z[2]; xm_h_zip(r[0], r[1], &z[0], &z[1]);"
        res = "v = _mm512_add_ph(v, xm_h_loadn((const xm_h*)res_ + yoff + q0, cnt));" if p["residual"] else ""
        return f"""
{f16_head(sym, p)}
  xm_h* vp = (xm_h*)ws;            /* [pt (stride {vps})][panel][ic][32] of one band */
  xm_h* mb = vp + {v_halves};      /* [pt][oc rows of MP panels][panel columns] of one band */
  for (int n = 0; n < {n}; ++n)
  for (int ty0 = 0; ty0 < {th}; ty0 += {br}) {{
    const xm_h* xn = x + (long)n * {ic * ih * iw};
    /* tile rows ty0 .. ty1 - 1: bt_ tiles flattened from 0 into bnp panels */
    const int ty1 = ty0 + {br} < {th} ? ty0 + {br} : {th};
    const int bt_ = (ty1 - ty0) * {twp}, bnp = (bt_ + {nr - 1}) / {nr};
    /* 1. input transform, straight into the packed B panels */
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int c = 0; c < {ic}; ++c) {{
      const xm_h* plane = xn + (long)c * {ih * iw};
      for (int tx0 = 0; tx0 < {tw}; tx0 += 32) {{
        const long nt_ = {tw} - tx0 < 32 ? {tw} - tx0 : 32;
        {in_regs}
        /* a tile row's first 2 input rows are its predecessor's last 2: loaded once, shifted down */
        int ty = ty0;
        {load_rows("0", "2")}
        for (; ty < ty1; ++ty) {{
          {load_rows("2", str(a))}
          {in_body}
          /* tiles t0 .. t0 + ns_ - 1 of the flattened order (lanes past nt_: the padding's zero tiles):
             the rest of panel j0, then panel j0 + 1 */
          const long t0 = (long)(ty - ty0) * {twp} + tx0, j0 = t0 / {nr}, off = t0 % {nr};
          const long ns_ = {twp} - tx0 < 32 ? {twp} - tx0 : 32;
          const __mmask32 m0 = xm_h_mask(ns_ < {nr} - off ? ns_ : {nr} - off);
          const __mmask32 m1 = (__mmask32)(xm_h_mask(ns_) & ~xm_h_mask({nr} - off));
          for (int pt = 0; pt < {pts}; ++pt) {{
            const __m512i hv = {packed};
            xm_h* dst = vp + (long)pt * {vps} + (j0 * {ic} + c) * {nr};
            _mm512_mask_storeu_epi16(dst + off, m0, hv);
            if (m1) _mm512_mask_storeu_epi16(dst + {ic * nr} - ({nr} - off), m1, hv);
          }}
          {shift}
        }}
      }}
      /* the last panel's lanes past the last tile: zeros, so that the GEMM reads defined values */
      if (bt_ % {nr})
        for (int pt = 0; pt < {pts}; ++pt)
          _mm512_mask_storeu_epi16(vp + (long)pt * {vps} + ((long)(bnp - 1) * {ic} + c) * {nr},
                                   (__mmask32)~xm_h_mask(bt_ % {nr}), _mm512_setzero_si512());
    }}
    /* 2. one GEMM per transform point: M[pt] (OC x tiles) = U[pt] (OC x IC) . V[pt] (IC x tiles).
       U (2 MB at 14x14x256) streams from L3 or memory once per band: each of a point's calls prefetches
       its share of the next point's U ({u_lines} lines) into L2 at an even rate over its K steps */
    const long ushare = ({u_lines} + bnp * {nkb * MP} - 1) / (bnp * {nkb * MP});
    #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
    for (int pt = 0; pt < {pts}; ++pt)
      for (int j = 0; j < bnp; ++j) {{
        const int nv = bt_ - j * {nr} < {nr} ? bt_ - j * {nr} : {nr};
        for (int k0 = 0; k0 < {ic}; k0 += {kc}) {{
          const long kl = {ic} - k0 < {kc} ? {ic} - k0 : {kc};
          const xm_h* B = vp + (long)pt * {vps} + ((long)j * {ic} + k0) * {nr};
          for (int mp = 0; mp < {MP}; ++mp) {{
            const long lo = (((long)j * {nkb} + k0 / {kc}) * {MP} + mp) * ushare;
            const long nl = pt + 1 < {pts} && lo < {u_lines}
                                ? ({u_lines} - lo < ushare ? {u_lines} - lo : ushare) : 0;
            xm_hukr_{mr}x{nr}_spread(kl, w + (((long)pt * {MP} + mp) * {ic} + k0) * {mr}, B,
                                     mb + ((long)pt * {MP * mr} + (long)mp * {mr}) * {cols} + (long)j * {nr},
                                     {cols}, k0 == 0, {mr}, nv, 0,
                                     nl ? w + (long)(pt + 1) * {MP * ic * mr} + lo * 32 : 0,
                                     (nl << 16) / kl);
          }}
        }}
      }}
    /* 3. output transform, bias, interleave, residual, activation */
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int oc_ = 0; oc_ < {oc}; ++oc_) {{
      {out_bias}
      for (int ty = ty0; ty < ty1; ++ty)
        for (int tx0 = 0; tx0 < {tw}; tx0 += 32) {{
          const long nt_ = {tw} - tx0 < 32 ? {tw} - tx0 : 32;
          const long t0 = (long)(ty - ty0) * {twp} + tx0;
          {out_body}
          for (int i = 0; i < {m}; ++i) {{
            const int yy = ty * {m} + i;
            if (yy >= {oh}) break;
            __m512h r[{m}];
            for (int jj = 0; jj < {m}; ++jj)
              {out_row}
            {zip_row}
            const long yoff = ((long)n * {oc} + oc_) * {oh * ow} + (long)yy * {ow};
            for (int qv = 0; qv < {m}; ++qv) {{
              const long q0 = (long)tx0 * {m} + qv * 32, cnt = {ow} - q0;
              if (cnt <= 0) break;
              __m512h v = z[qv];
              {res}
              xm_h_storen(y + yoff + q0, cnt, xm_h_act(v, {ACT_CODES[p["act"]]}));
            }}
          }}
        }}
    }}
  }}
}}
"""


KERNEL_UNITS = (ConvWinogradF16(),)
