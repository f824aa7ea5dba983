"""Register-blocked NCHW44 convolutions for AArch64 (ncnn's / MegEngine's packed ``conv1x1`` and
``conv3x3 direct`` kernels): dense float32 (``fmla .4s``) and float16 (``fmla .8h``) convolutions of
any kernel size, stride and dilation, as an implicit GEMM over the NCHW44 activations.

``out[k, p] = sum_{c, r, s} W[k, c, r, s] * x[c, p + (r, s)]``. A register tile is ``MB`` blocks of 4
output channels times ``NB`` output pixels of one row (or, for 1x1 stride-1 convolutions without
padding, ``NB`` consecutive pixels of the flattened image: the GEMM proper, no row edges). Per input
block of 4 channels and tap, the tile loads the ``4 x 4 MB`` weights once (contiguous: the filter is
repacked ahead of time into panels of ``4 MB`` output channels, :data:`PANEL_LAYOUT`) and one 4-channel
vector per pixel, then issues ``4 MB / L * NB`` by-lane FMAs (``L`` lanes per accumulator: 4 in
float32; 8 in float16, where one ``.8h`` accumulator holds two output blocks of a pixel):

* float32 ``MB = 2, NB = 8``: 16 accumulators, 8 weight vectors, 64 ``fmla`` per 2 + 8 loads;
* float16 ``MB = 4, NB = 8``: 16 ``.8h`` accumulators (16 output channels x 8 pixels), 8 weight
  vectors, 64 ``fmla .8h`` (512 multiply-adds) per 8 + 4 loads (two pixels per load), the ``fmla``s
  as inline assembly (:func:`fmla_f16_asm`: gcc's ``vfmaq_lane_f16`` spills).

The epilogue (bias, residual, ReLU) runs on the registers before the single store. Float16 here is
float16 arithmetic (``+ioc16``, the ``fp16`` ISA); ``+io16xc32`` stays with the direct kernels.
Partial tiles (the last output-channel panel, the last pixels of a row) are their own fully unrolled
specialisations. Padding is done once per image by a copy into the workspace, as in the direct kernels
(:mod:`backends.c.templates.arm.neon`), whose availability rule and geometry these units share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

import backends.c.examples as E
from backends.c.templates import conv_sym, epilogue_sym, sym_join
from backends.c.templates.arm.neon import STORAGE, ConvNchw44, FloatConvNchw44, conv_head
from dialects.layout import SPECS, Layout, LayoutSpec
from passes.lowering.kernels import EpilogueSupport

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


def panel_layout(mb: int) -> LayoutSpec:
    """The repacked dense filter: panels of ``4 mb`` output channels; per panel, input block and tap
    one contiguous ``4 x 4 mb`` matrix (input channel major), so a tile's weights are one stream."""
    return LayoutSpec("KCRS", f"K/{4 * mb} C/4 R S C%4 K%{4 * mb}")


def hybrid_panel_layout(mb: int) -> LayoutSpec:
    """The repacked filter of a first layer (plain NCHW input, any channel count): per panel, input
    channel and tap the ``4 mb`` output channels' weights, contiguous."""
    return LayoutSpec("KCRS", f"K/{4 * mb} C R S K%{4 * mb}")


@dataclass(frozen=True)
class FloatVec:
    """How one element type spells the micro-kernel's vector operations (float32 ``.4s`` or float16
    ``.8h`` accumulators; the input pixel is always one 4-channel vector)."""

    dtype: str
    lanes: int  # accumulator lanes: 4 output channels (f32) or 8 (f16: two blocks)
    mb: int  # output blocks per register tile
    nb: int  # pixels per register tile
    acc_t: str
    x_t: str
    ld_acc: str  # a full accumulator from memory (weights, bias)
    ld_x: str
    fma_lane: str  # acc + w * x[lane] (float32; float16's is inline assembly: fmla_f16_asm)
    zero: str
    relu: str
    relu6: str  # min(max(v, 0), 6): NEON fmax / fmin return NaN when an operand is, as the reference
    add: str

    def ld_block(self, p: str) -> str:
        """One block of 4 channels into the low half of an accumulator (f16), or the accumulator."""
        if self.lanes == 4:
            return self.ld_acc.format(p=p)
        return f"vcombine_f16(vld1_f16({p}), vdup_n_f16(0))"

    def ld_pair(self, p: str, q: str) -> str:
        """Two blocks of 4 channels (not adjacent in memory) into one f16 accumulator."""
        return f"vcombine_f16(vld1_f16({p}), vld1_f16({q}))"

    def st_block(self, p: str, v: str, half: int) -> str:
        if self.lanes == 4:
            return f"vst1q_f32({p}, {v});"
        return f"vst1_f16({p}, {'vget_low_f16' if half == 0 else 'vget_high_f16'}({v}));"

    def zip(self, v0: str, v1: str, half: int) -> str:
        """float16: block ``half`` (the low or high 4 lanes) of two pixels' accumulators, side by side."""
        zip_ = "vzip1q_f64" if half == 0 else "vzip2q_f64"
        return f"vreinterpretq_f16_f64({zip_}(vreinterpretq_f64_f16({v0}), vreinterpretq_f64_f16({v1})))"


F32 = FloatVec(
    "f32", 4, 2, 8, "float32x4_t", "float32x4_t", "vld1q_f32({p})", "vld1q_f32({p})",
    "vfmaq_laneq_f32({a}, {w}, {x}, {c})", "vdupq_n_f32(0.f)", "vmaxq_f32({v}, vdupq_n_f32(0.f))",
    "vminq_f32(vmaxq_f32({v}, vdupq_n_f32(0.f)), vdupq_n_f32(6.f))", "vaddq_f32({a}, {b})",
)  # fmt: skip
F16 = FloatVec(
    "f16", 8, 4, 8, "float16x8_t", "float16x4_t", "vld1q_f16({p})", "vld1_f16({p})",
    "", "vdupq_n_f16(0)", "vmaxq_f16({v}, vdupq_n_f16(0))",
    "vminq_f16(vmaxq_f16({v}, vdupq_n_f16(0)), vdupq_n_f16(6))", "vaddq_f16({a}, {b})",
)  # fmt: skip
VECS = {"f32": F32, "f16": F16}
# applied to the accumulators before the single store: float32 takes bias, residual, ReLU and ReLU6;
# float16 (float16 arithmetic) the activations only, which commute with the accumulators' rounding
GEMM_ACTIVATIONS = frozenset({"identity", "relu", "relu6"})
EPILOGUES = {
    "float32": EpilogueSupport(bias="channels", residual=True, activations=GEMM_ACTIVATIONS),
    "float16": EpilogueSupport(activations=GEMM_ACTIVATIONS),
}


def fmla_f16_asm(fmas: list[tuple[str, str, str, int]], indent: str) -> list[str]:
    """``acc += w * x[lane]`` for each ``(acc, w, x, lane)`` (float16x8_t variables; ``x`` may be a
    float16x4_t) as one inline-assembly statement of by-element ``fmla .8h``. Written with
    ``vfmaq_lane_f16``, gcc 12 breaks each lane out of the pixel vector (an ``ldr h`` or a GPR
    round trip per lane, spills, ``mov`` shuffles: ~2.7 instructions per ``fmla``), because the
    half-precision by-element form reads only v0-v15: here ``x`` is an ``x`` operand (v0-v15), the
    rest ``w``. gcc takes at most 30 operands (an accumulator counts twice): callers cut their
    products into statements of a few pixels."""
    accs = list(dict.fromkeys(a for a, _, _, _ in fmas))
    srcs = list(dict.fromkeys(w for _, w, _, _ in fmas)), list(dict.fromkeys(x for _, _, x, _ in fmas))
    assert 2 * len(accs) + len(srcs[0]) + len(srcs[1]) <= 30, "too many operands for one asm statement"
    body = "\\n\\t".join(f"fmla %[{a}].8h, %[{w}].8h, %[{x}].h[{lane}]" for a, w, x, lane in fmas)
    outs = ", ".join(f'[{a}] "+w"({a})' for a in accs)
    ins = ", ".join([*(f'[{w}] "w"({w})' for w in srcs[0]), *(f'[{x}] "x"({x})' for x in srcs[1])])
    return [f'{indent}__asm__("{body}"', f"{indent}  : {outs}", f"{indent}  : {ins});"]


def _step_f16(na: int, nb: int, xpix: int) -> list[str]:
    """One input block and tap of the float16 tile (``na`` accumulators per pixel, ``nb`` pixels
    ``xpix`` elements apart): 4 na weight vectors, neighbouring pixels two per load, the ``fmla``s in
    :func:`fmla_f16_asm` statements of 4 (na 2) or 8 pixels."""
    # the operands sit in fixed registers, weights v0-v7 and pixels v8-v15, so that the accumulators
    # get v16-v31: left to choose, gcc puts some in v8-v15 and moves them out of the pixels' way
    # around every statement
    wpair = [(i, c) for c in range(4) for i in range(na)]
    lines = [
        f'    register float16x8_t w{i}_{c} __asm__("v{k}") = vld1q_f16(wk + {16 * c + 8 * i});'
        for k, (i, c) in enumerate(wpair)
    ]
    lines.append("    wk += 64;")
    # neighbouring pixels (xpix 4) share a register: pixel j is register j // 2 from lane 4 (j % 2)
    regs: dict[int, tuple[str, int]] = {}
    for j in range(nb):
        if j in regs:
            continue
        reg = f'__asm__("v{8 + len(set(regs.values()))}")'
        if xpix == 4 and j + 1 < nb:
            lines.append(f"    register float16x8_t x{j} {reg} = vld1q_f16(xt + {4 * j});")
            regs[j], regs[j + 1] = (f"x{j}", 0), (f"x{j}", 4)
        else:
            lines.append(f"    register float16x4_t x{j} {reg} = vld1_f16(xt + {xpix * j});")
            regs[j] = (f"x{j}", 0)
    group = 4 if na == 2 else 8
    for g in range(0, nb, group):
        pix = range(g, min(nb, g + group))
        fmas = [
            (f"a{i}_{j}", f"w{i}_{c}", regs[j][0], regs[j][1] + c)
            for c in range(4)
            for j in pix
            for i in range(na)
        ]
        lines += fmla_f16_asm(fmas, "    ")
    return lines


class ConvGemmNchw44(FloatConvNchw44, ConvNchw44):
    """``conv2d_nchw44_gemm``: dense float NCHW44 convolution by register-blocked implicit GEMM."""
    examples = (
        E.conv2d((2, 8, 5, 5), 8, 1),
        E.conv2d((1, 3, 23, 21), 10, 7, stride=2, pad=3, bias=False),
        E.conv2d((1, 12, 7, 9), 20, 1, stride=2, act="relu"),
    )

    family = "conv2d_nchw44_gemm"
    priority = 195  # ahead of the direct conv2d_nchw44 (190) for every dense float conv it accepts
    epilogues = EPILOGUES
    kind = "float"  # the direct kernel's float helpers (support code, filter layouts) apply

    def accepts(self, p: dict[str, Any]) -> bool:
        return p["mode"] in ("dense", "hybrid") and p["act"] in GEMM_ACTIVATIONS

    def symbol(self, p: dict[str, Any]) -> str:
        # dense convolutions only: conv_sym writes no groups word
        return sym_join(self.family, self.isa, *conv_sym(p), p["dtype"], epilogue_sym(p))

    source_layout = Layout.KCRSc4k4

    def panel(self, mb: int, mode: str) -> LayoutSpec:
        """The repacked filter's layout for panels of ``mb`` output blocks."""
        return hybrid_panel_layout(mb) if mode == "hybrid" else panel_layout(mb)

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        mb = self.tiling(p)[0]
        source = Layout.KRSCk4 if p["mode"] == "hybrid" else self.source_layout
        logical = SPECS[source].unpack(np.asarray(array), (p["oc"], p["ic"], p["fh"], p["fw"]))
        return self.pack_panels(logical, p, mb), f"{self.family}_{p['mode']}_panel_k{4 * mb}"

    def pack_panels(self, logical: np.ndarray, p: dict[str, Any], mb: int) -> np.ndarray:
        """The logical ``(K, C, R, S)`` filter in the kernel's panels."""
        return np.ascontiguousarray(self.panel(mb, p["mode"]).pack(logical))

    def support(self, em: CEmitter) -> str:
        return ""

    @staticmethod
    def flat(p: dict[str, Any]) -> bool:
        """1x1, stride 1, no padding: the output pixels are one GEMM dimension (no row edges)."""
        return (p["fh"], p["fw"], p["sh"], p["sw"], p["ph"], p["pw"]) == (1, 1, 1, 1, 0, 0)

    # -- code ------------------------------------------------------------------------------------
    def tiling(self, p: dict[str, Any]) -> tuple[int, int]:
        """(output blocks, pixels) of a full register tile."""
        v = VECS[p["dtype"]]
        return v.mb, v.nb

    def types(self, p: dict[str, Any]) -> tuple[str, str]:
        """C element types of the activations and of the bias."""
        return STORAGE[p["dtype"]], STORAGE[p["dtype"]]

    def weight_type(self, p: dict[str, Any]) -> str:
        """C element type of the packed filter."""
        return self.types(p)[0]

    def _tile(self, name: str, p: dict[str, Any], mb: int, nb: int, geo: dict[str, int]) -> str:
        """``name(xb, wk, yb, bb, rb)``: ``mb`` output blocks x ``nb`` pixels, fully unrolled."""
        v = VECS[p["dtype"]]
        ctype = STORAGE[p["dtype"]]
        kv = v.lanes // 4  # output blocks per accumulator
        na = -(-mb // kv)  # accumulators per pixel
        wstride = 4 * v.mb  # weights per input channel in a panel (whole panel width)
        xpix = p["sw"] * 4  # input elements between neighbouring output pixels
        ys_c = geo["y_c"]

        def block_init(i: int) -> str:
            if not p["bias"]:
                return v.zero
            b0 = i * kv
            if kv == 1 or b0 + 1 >= mb:
                return v.ld_block(f"bb + {b0 * 4}")
            return v.ld_acc.format(p=f"bb + {b0 * 4}")  # bias blocks are adjacent

        lines = [
            f"static inline __attribute__((always_inline)) void {name}(const {ctype}* restrict xb, "
            f"const {ctype}* restrict wk, {ctype}* restrict yb, const {ctype}* restrict bb, "
            f"const {ctype}* restrict rb) {{",
            "  (void)bb; (void)rb;",
        ]
        lines += [f"  {v.acc_t} a{i}_{j} = {block_init(i)};" for i in range(na) for j in range(nb)]
        lines.append(f"  for (int cb = 0; cb < {geo['cbn']}; ++cb) {{")
        lines.append(f"    const {ctype}* xc = xb + (long)cb * {geo['x_c']};")
        hybrid = p["mode"] == "hybrid"
        lane = 1 if hybrid else 4
        if p["fh"] * p["fw"] > 1:
            # a first layer's step is short (na weights, a few pixel loads): unrolled, no loop overhead
            unroll = [f"    #pragma GCC unroll {p['fh'] * p['fw']}"] if hybrid else []
            lines += [*unroll, f"    for (int r = 0; r < {p['fh']}; ++r)"]
            lines += [*unroll, f"    for (int s = 0; s < {p['fw']}; ++s) {{"]
            tap = f"(long)r * {p['dh'] * geo['x_h']} + s * {p['dw'] * lane}"
            lines.append(f"    const {ctype}* xt = xc + {tap};")
        else:
            lines.append(f"    {{ const {ctype}* xt = xc;")
        if hybrid:
            lines += self._hybrid_step(p, v, na, nb)
        elif v.dtype == "f16":
            lines += _step_f16(na, nb, xpix)
        else:
            lines += [
                f"    const {v.acc_t} w{i}_{c} = {v.ld_acc.format(p=f'wk + {c * wstride + i * v.lanes}')};"
                for c in range(4)
                for i in range(na)
            ]
            lines.append(f"    wk += {4 * wstride};")
            for j in range(nb):
                lines.append(f"    {{ const {v.x_t} xv = {v.ld_x.format(p=f'xt + {j * xpix}')};")
                for c in range(4):
                    for i in range(na):
                        fma = v.fma_lane.format(a=f"a{i}_{j}", w=f"w{i}_{c}", x="xv", c=c)
                        lines.append(f"      a{i}_{j} = {fma};")
                lines.append("    }")
        lines.append("    }")
        lines.append("  }")
        # epilogue: residual, activation, store (bias was the accumulators' start)
        act = getattr(v, p["act"]) if p["act"] in ("relu", "relu6") else None
        for i in range(na):
            blocks = [b for b in (i * kv, i * kv + 1) if b < mb][:kv]
            # float16: a pixel pair's accumulators hold two blocks each; zipped, each block's two
            # pixels are one vector (one residual load, one store) instead of two halves
            pairs = nb // 2 if kv == 2 else 0
            for j in range(0, 2 * pairs, 2):
                for half, b in enumerate(blocks):
                    o = f"o{i}_{j}_{half}"
                    lines.append(f"  {v.acc_t} {o} = {v.zip(f'a{i}_{j}', f'a{i}_{j + 1}', half)};")
                    if p.get("residual"):
                        r = v.ld_acc.format(p=f"rb + {b * ys_c + j * 4}")
                        lines.append(f"  {o} = {v.add.format(a=o, b=r)};")
                    if act:
                        lines.append(f"  {o} = {act.format(v=o)};")
                    lines.append(f"  vst1q_f16(yb + {b * ys_c + j * 4}, {o});")
            for j in range(2 * pairs, nb):
                acc = f"a{i}_{j}"
                if p.get("residual"):
                    ptrs = [f"rb + {b * ys_c + j * 4}" for b in blocks]
                    if kv == 1:
                        r = v.ld_acc.format(p=ptrs[0])
                    elif len(ptrs) == 2:
                        r = v.ld_pair(*ptrs)
                    else:
                        r = v.ld_block(ptrs[0])
                    lines.append(f"  {acc} = {v.add.format(a=acc, b=r)};")
                if act:
                    lines.append(f"  {acc} = {act.format(v=acc)};")
                for half, b in enumerate(blocks):
                    lines.append("  " + v.st_block(f"yb + {b * ys_c + j * 4}", acc, half))
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _hybrid_step(self, p: dict[str, Any], v: FloatVec, na: int, nb: int) -> list[str]:
        """One input channel and tap of a first layer: ``na`` weight vectors, each pixel's scalar input
        by lane from vectors of 4 pixels (stride 1: one load; stride 2 from the padded copy: the even
        half of a de-interleaving load), left-over pixels one by one."""
        f16 = p["dtype"] == "f16"
        sw = p["sw"]
        lines = [f"    const {v.acc_t} w{i} = {v.ld_acc.format(p=f'wk + {i * v.lanes}')};" for i in range(na)]
        lines.append(f"    wk += {4 * v.mb};")
        grouped = nb // 4 * 4 if sw == 1 or (sw == 2 and self._needs_pad(p)) else 0
        for g in range(grouped // 4):
            if sw == 1:
                load = f"vld1_f16(xt + {4 * g})" if f16 else f"vld1q_f32(xt + {4 * g})"
            else:
                load = f"vld2_f16(xt + {8 * g}).val[0]" if f16 else f"vld2q_f32(xt + {8 * g}).val[0]"
            lines.append(f"    {{ const {v.x_t} xv = {load};")
            if f16:
                fmas = [(f"a{i}_{4 * g + jj}", f"w{i}", "xv", jj) for jj in range(4) for i in range(na)]
                lines += fmla_f16_asm(fmas, "      ")
            else:
                for jj in range(4):
                    j = 4 * g + jj
                    lines += [
                        f"      a{i}_{j} = {v.fma_lane.format(a=f'a{i}_{j}', w=f'w{i}', x='xv', c=jj)};"
                        for i in range(na)
                    ]
            lines.append("    }")
        fman = "vfmaq_n_f16" if f16 else "vfmaq_n_f32"
        for j in range(grouped, nb):
            lines += [f"    a{i}_{j} = {fman}(a{i}_{j}, w{i}, xt[{j * sw}]);" for i in range(na)]
        return lines

    def workspace(self, p: dict[str, Any]) -> int:
        # de-interleaving loads of a strided first layer may read one vector past the padded copy
        size = super().workspace(p)
        return size + 64 if size else 0

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        mb_full, nb_full = self.tiling(p)
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        ctype, btype = self.types(p)
        wtype = self.weight_type(p)
        pad = self._needs_pad(p)
        ihp, iwp = self._padded(p)
        hybrid = p["mode"] == "hybrid"
        lane = 1 if hybrid else 4  # input elements per pixel and channel step (plain NCHW: 1)
        _, xs, ys = self._strides(p, pad)
        kblocks = oc // 4
        kp_n = -(-kblocks // mb_full)
        mb_tail = kblocks - (kp_n - 1) * mb_full
        geo = {"cbn": ic if hybrid else ic // 4, "x_c": xs["C/4"], "x_h": xs["H"], "y_c": ys["C/4"]}
        wpanel = self.panel(mb_full, p["mode"]).dim_strides((oc, ic, p["fh"], p["fw"]))[f"K/{4 * mb_full}"]
        flat = self.flat(p)
        cols = oh * ow if flat else ow  # pixels the tiles walk along
        nb_tail = cols % nb_full
        variants = {(mb, nb) for mb in {mb_full, mb_tail} for nb in {nb_full, nb_tail} if nb and cols >= nb}
        tiles = "".join(self._tile(f"{sym}_t{mb}x{nb}", p, mb, nb, geo) for mb, nb in sorted(variants))

        def call(mb: int, nb: int, xo: str, yo: str) -> str:
            return f"{sym}_t{mb}x{nb}(xr + {xo}, wk, yr + {yo}, bb, rb0 ? rb0 + {yo} : 0);"

        def by_panel(nb: int, xo: str, yo: str) -> str:
            if mb_tail == mb_full:
                return call(mb_full, nb, xo, yo)
            return f"if (mb == {mb_full}) {call(mb_full, nb, xo, yo)} else {call(mb_tail, nb, xo, yo)}"

        full = cols - nb_tail
        tile_calls = ""
        if full:
            step = by_panel(nb_full, f"(long)q * {lane * p['sw']}", "(long)q * 4")
            tile_calls += f"for (int q = 0; q < {full}; q += {nb_full}) {{ {step} }}\n"
        if nb_tail:
            tile_calls += by_panel(nb_tail, str(full * lane * p["sw"]), str(full * 4))

        if flat:
            rows = "const int oy = 0;"
        else:
            rows = f"for (int oy = 0; oy < {oh}; ++oy) {{"
        x_row = f"xp + (long)oy * {p['sh'] * xs['H']}"
        y_row = f"y + (long)nn * {ys['N']} + (long)kp * {mb_full * ys['C/4']} + (long)oy * {ys['H']}"
        r_row = f"res + (long)nn * {ys['N']} + (long)kp * {mb_full * ys['C/4']} + (long)oy * {ys['H']}"
        pad_code = self._input_of_image(p, ctype, pad, geo["cbn"], self.workspace(p))
        return f"""{tiles}
{conv_head(sym, p, ctype, wtype, btype)}
  (void)ws; (void)bias; (void)res;
  for (int nn = 0; nn < {n}; ++nn) {{{pad_code}
    #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int kp = 0; kp < {kp_n}; ++kp) {{
      const int mb = kp == {kp_n - 1} ? {mb_tail} : {mb_full};
      const {wtype}* wk = w + (long)kp * {wpanel};
      const {btype}* bb = bias ? bias + (long)kp * {4 * mb_full} : 0;
      {rows}
        const {ctype}* xr = {x_row};
        {ctype}* yr = {y_row};
        const {ctype}* rb0 = res ? {r_row} : 0;
        (void)rb0; (void)mb;
        {tile_calls}
      {"" if flat else "}"}
    }}
  }}
}}
"""


KERNEL_UNITS = tuple(ConvGemmNchw44(isa) for isa in ("neon", "fp16"))
