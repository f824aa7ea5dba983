"""Register-tiled NCHW44 depthwise 3x3 convolutions for AArch64 (ncnn's ``convdw3x3s1_pack4`` /
``convdw3x3s2_pack4`` and their float16 ``pack8`` forms), family ``conv2d_nchw44_dw3x3``.

In NCHW44 a pixel of one channel block is one 4-channel vector, and a depthwise tap is one vector FMA
per output pixel: ``acc[ox] += w[r, s] * x[oy * sh - ph + r, ox * sw - pw + s]``, all lanes
independent. Per channel block the 9 weight vectors (and the bias) stay in registers; per output row
the kernel walks

* the interior columns (every tap inside the row) in register tiles of output pixels, each input
  vector of a filter row loaded once and shared by the tile's outputs: float32 ``.4s``, 4 pixels per
  tile; float16 ``.8h``, 8 pixels per tile as 4 accumulators of 2 pixels (stride 1: a pair of
  neighbouring input pixels is one load, the odd pairs ``ext`` of two; stride 2: one ``ld2 .2d``
  splits 4 input pixels into the even and odd pairs, the third tap is an ``ext`` of two even pairs);
* the few border columns one pixel at a time with only their in-range taps (known when rendering).

Rows above or below the image read a static row of zeros, so the vertical padding needs no branch
and no padded copy of the input. The epilogue (bias as the accumulators' start, a residual, ReLU or
ReLU6) runs on the registers before the single store. Float16 computes in float16 (``+ioc16``, the
``fp16`` ISA); float16 storage computed in float32 stays with the direct kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import backends.c.examples as E
from backends.c.templates import sym_join
from backends.c.templates.arm.neon import STORAGE, FloatConvNchw44, conv_args
from dialects import tensor as T
from dialects.layout import SPECS, Layout
from passes.lowering.kernels import EpilogueSupport

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# epilogue activations the kernel applies in registers
ACTIVATIONS = ("identity", "relu", "relu6")


@dataclass(frozen=True)
class DwVec:
    """The vector operations of one element type: ``q`` a full register (float32: one pixel;
    float16: two pixels), ``d`` one pixel (float16's half register; float32's is ``q`` itself)."""

    dtype: str
    tile: int  # output pixels per interior register tile
    q_t: str
    d_t: str
    ld_d: str
    st_d: str
    fma_d: str
    max_d: str
    min_d: str
    add_d: str
    dup_d: str


F32 = DwVec(
    "f32", 4, "float32x4_t", "float32x4_t", "vld1q_f32({p})", "vst1q_f32({p}, {v})",
    "vfmaq_f32({a}, {x}, {w})", "vmaxq_f32({a}, {b})", "vminq_f32({a}, {b})", "vaddq_f32({a}, {b})",
    "vdupq_n_f32({x})",
)  # fmt: skip
F16 = DwVec(
    "f16", 8, "float16x8_t", "float16x4_t", "vld1_f16({p})", "vst1_f16({p}, {v})",
    "vfma_f16({a}, {x}, {w})", "vmax_f16({a}, {b})", "vmin_f16({a}, {b})", "vadd_f16({a}, {b})",
    "vdup_n_f16({x})",
)  # fmt: skip
# float16 output pixel pairs: one full .8h register per accumulator (the interior tiles' epilogue)
F16_PAIR = DwVec(
    "f16", 8, "float16x8_t", "float16x8_t", "vld1q_f16({p})", "vst1q_f16({p}, {v})",
    "vfmaq_f16({a}, {x}, {w})", "vmaxq_f16({a}, {b})", "vminq_f16({a}, {b})", "vaddq_f16({a}, {b})",
    "vdupq_n_f16({x})",
)  # fmt: skip
VECS = {"f32": F32, "f16": F16}


class ConvDepthwise3x3Nchw44(FloatConvNchw44):
    """``conv2d_nchw44_dw3x3``: channel-wise 3x3 NCHW44 convolution, stride 1 or 2 (see the module doc)."""
    examples = (
        E.conv2d((1, 8, 13, 11), 8, 3, pad=1, groups=8, act="relu"),
        E.conv2d((2, 12, 11, 14), 12, 3, stride=2, pad=1, groups=12),
        E.conv2d((1, 4, 9, 7), 4, 3, groups=4, act="relu6"),
    )

    family = "conv2d_nchw44_dw3x3"
    ops = (T.ConvolutionOp, T.ConvBiasOp)
    priority = 192  # ahead of the direct conv2d_nchw44 (190), which keeps every other channel-wise conv
    # what kernel-fuse-epilogue may fold in: float16 takes only the activations whose fused result is
    # what the unfused graph computes (bias and residual would round differently)
    epilogues = {
        "float32": EpilogueSupport(bias="channels", residual=True, activations=ACTIVATIONS),
        "float16": EpilogueSupport(activations=ACTIVATIONS),
    }

    def accepts(self, p: dict[str, Any]) -> bool:
        if p["mode"] != "chan" or (p["fh"], p["fw"], p["dh"], p["dw"]) != (3, 3, 1, 1):
            return False
        return p["sh"] == p["sw"] and p["sw"] in (1, 2) and p["act"] in ACTIVATIONS

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(
            self.family, self.isa, f"n{p['n']}", f"c{p['oc']}", f"{p['ih']}x{p['iw']}",
            f"s{p['sh']}", f"p{p['ph']}x{p['pw']}", p["dtype"], "bias" if p["bias"] else "",
            "res" if p.get("residual") else "", p["act"].upper() if p["act"] != "identity" else "",
        )  # fmt: skip

    # -- code ------------------------------------------------------------------------------------
    def columns(self, p: dict[str, Any]) -> tuple[int, int]:
        """``[lo, hi)``: the output columns whose three taps all lie inside the input row."""
        sw, pw, iw, ow = p["sw"], p["pw"], p["iw"], p["ow"]
        lo = min(ow, -(-pw // sw))
        hi = max(lo, min(ow, (iw - 3 + pw) // sw + 1)) if iw - 3 + pw >= 0 else lo
        return lo, hi

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        v = VECS[p["dtype"]]
        ctype = STORAGE[p["dtype"]]
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "oc", "ih", "iw", "oh", "ow"))
        sh, sw, ph, pw = p["sh"], p["sw"], p["ph"], p["pw"]
        xs = SPECS[Layout.NCHW44].dim_strides((n, c, ih, iw))
        ys = SPECS[Layout.NCHW44].dim_strides((n, c, oh, ow))
        ws = SPECS[Layout.C11RSc4].dim_strides((c, 1, 1, 3, 3))
        lo, hi = self.columns(p)
        tile = v.tile
        full_end = lo + (hi - lo) // tile * tile

        lines = [f"static void {sym}({conv_args(p)}) {{"]
        lines.append(f"  const {ctype}* x = (const {ctype}*)x_;")
        lines.append(f"  const {ctype}* w = (const {ctype}*)w_;")
        lines.append(f"  {ctype}* y = ({ctype}*)y_;")
        lines.append(f"  const {ctype}* bias = {'(const ' + ctype + '*)bias_' if p['bias'] else '0'};")
        lines.append(f"  const {ctype}* res = {'(const ' + ctype + '*)res_' if p.get('residual') else '0'};")
        # rows above and below the image read zeros
        lines.append(f"  static const {ctype} zero_row[{iw * 4}] = {{0}};")
        lines.append("  (void)ws; (void)bias; (void)res;")
        lines.append("  #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)")
        lines.append(f"  for (int nn = 0; nn < {n}; ++nn)")
        lines.append(f"  for (int cb = 0; cb < {c // 4}; ++cb) {{")
        lines.append(f"    const {ctype}* xb = x + (long)nn * {xs['N']} + (long)cb * {xs['C/4']};")
        lines.append(f"    {ctype}* yb = y + (long)nn * {ys['N']} + (long)cb * {ys['C/4']};")
        block = f"(long)nn * {ys['N']} + (long)cb * {ys['C/4']}"
        lines.append(f"    const {ctype}* rsb = res ? res + {block} : 0;")
        lines.append("    (void)rsb;")
        lines.append(f"    const {ctype}* wb = w + (long)cb * {ws['G/4']};")
        for r in range(3):
            for s in range(3):
                tap = v.ld_d.format(p=f"wb + {r * ws['R'] + s * ws['S']}")
                lines.append(f"    const {v.d_t} w{r}{s} = {tap};")
                if v.dtype == "f16":
                    lines.append(f"    const {v.q_t} W{r}{s} = vcombine_f16(w{r}{s}, w{r}{s});")
        binit = v.ld_d.format(p="bias + (long)cb * 4") if p["bias"] else v.dup_d.format(x=0)
        lines.append(f"    const {v.d_t} bv = {binit};")
        if v.dtype == "f16":
            lines.append(f"    const {v.q_t} BV = vcombine_f16(bv, bv);")
        lines.append(f"    for (int oy = 0; oy < {oh}; ++oy) {{")
        for r in range(3):
            lines.append(f"      const int iy{r} = oy * {sh} + {r - ph};")
            row = f"xb + (long)iy{r} * {xs['H']}"
            lines.append(f"      const {ctype}* x{r} = (unsigned)iy{r} < {ih}u ? {row} : zero_row;")
        lines.append(f"      {ctype}* yr = yb + (long)oy * {ys['H']};")
        lines.append(f"      const {ctype}* rr = rsb ? rsb + (long)oy * {ys['H']} : 0;")
        lines.append("      (void)rr;")
        # interior: full tiles, then the shorter tail tile
        if full_end > lo:
            lines.append(f"      for (int ox = {lo}; ox < {full_end}; ox += {tile}) {{")
            lines += ["        " + t for t in self._tile(p, v, tile, "ox")]
            lines.append("      }")
        if hi > full_end:
            lines.append("      {")
            lines.append(f"        const int ox = {full_end};")
            lines += ["        " + t for t in self._tile(p, v, hi - full_end, "ox")]
            lines.append("      }")
        # border columns: only their in-range taps
        for ox in [*range(lo), *range(hi, ow)]:
            taps = [s for s in range(3) if 0 <= ox * sw - pw + s < iw]
            lines.append("      {")
            lines.append(f"        {v.d_t} a = bv;")
            for r in range(3):
                for s in taps:
                    xv = v.ld_d.format(p=f"x{r} + {(ox * sw - pw + s) * 4}")
                    lines.append(f"        a = {v.fma_d.format(a='a', x=xv, w=f'w{r}{s}')};")
            lines += ["        " + t for t in self._epilogue_d(p, v, "a", str(ox * 4))]
            lines.append("      }")
        lines.append("    }")
        lines.append("  }")
        lines.append("}")
        return "\n" + "\n".join(lines) + "\n"

    def _epilogue_d(self, p: dict[str, Any], v: DwVec, a: str, off: str) -> list[str]:
        """Residual, activation and store of accumulator ``a`` (one pixel, or ``F16_PAIR``'s two) at
        output offset ``off`` (elements from the row start, a C expression)."""
        out = []
        if p.get("residual"):
            out.append(f"{a} = {v.add_d.format(a=a, b=v.ld_d.format(p=f'rr + {off}'))};")
        if p["act"] in ("relu", "relu6"):
            out.append(f"{a} = {v.max_d.format(a=a, b=v.dup_d.format(x=0))};")
        if p["act"] == "relu6":
            out.append(f"{a} = {v.min_d.format(a=a, b=v.dup_d.format(x=6))};")
        out.append(v.st_d.format(p=f"yr + {off}", v=a) + ";")
        return out

    def _tile(self, p: dict[str, Any], v: DwVec, nb: int, ox: str) -> list[str]:
        """``nb`` interior output pixels from column ``ox`` (a C expression)."""
        if v.dtype == "f32":
            return self._tile_f32(p, nb, ox)
        return self._tile_f16(p, nb, ox)

    def _tile_f32(self, p: dict[str, Any], nb: int, ox: str) -> list[str]:
        sw, pw = p["sw"], p["pw"]
        out = [f"const long ix = (long){ox} * {sw} - {pw};"]
        out += [f"float32x4_t a{j} = bv;" for j in range(nb)]
        npix = (nb - 1) * sw + 3  # input pixels of one filter row the tile reads
        for r in range(3):
            out.append("{")
            out += [f"  const float32x4_t v{k} = vld1q_f32(x{r} + (ix + {k}) * 4);" for k in range(npix)]
            for s in range(3):
                out += [f"  a{j} = vfmaq_f32(a{j}, v{j * sw + s}, w{r}{s});" for j in range(nb)]
            out.append("}")
        for j in range(nb):
            out += self._epilogue_d(p, F32, f"a{j}", f"({ox} + {j}) * 4")
        return out

    def _tile_f16(self, p: dict[str, Any], nb: int, ox: str) -> list[str]:
        """Pairs of output pixels in ``.8h`` accumulators, an odd last pixel in a ``.4h`` one."""
        sw, pw = p["sw"], p["pw"]
        npair, single = divmod(nb, 2)
        out = [f"const long ix = (long){ox} * {sw} - {pw};"]
        out += [f"float16x8_t a{k} = BV;" for k in range(npair)]
        if single:
            out.append("float16x4_t as = bv;")
        for r in range(3):
            xr = f"x{r}"
            out.append("{")
            if npair and sw == 1:
                # L_m: input pixels (2m, 2m + 1); the pair at an odd start is an ext of two
                for m in range(npair + 1):
                    out.append(f"  const float16x8_t L{m} = vld1q_f16({xr} + (ix + {2 * m}) * 4);")
                out += _pair_fmas(r, npair, lambda k: (f"L{k}", _straddle("L", k), f"L{k + 1}"))
            elif npair:
                # pixels 4k .. 4k + 3 split into E_k = (4k, 4k + 2) and O_k = (4k + 1, 4k + 3)
                for k in range(npair):
                    src = f"(const uint64_t*)({xr} + (ix + {4 * k}) * 4)"
                    out.append(f"  const uint64x2x2_t P{k} = vld2q_u64({src});")
                    out.append(f"  const float16x8_t E{k} = vreinterpretq_f16_u64(P{k}.val[0]);")
                    out.append(f"  const float16x8_t O{k} = vreinterpretq_f16_u64(P{k}.val[1]);")
                last = f"vld1_f16({xr} + (ix + {4 * npair}) * 4)"
                out.append(f"  const float16x8_t E{npair} = vcombine_f16({last}, {last});")
                out += _pair_fmas(r, npair, lambda k: (f"E{k}", f"O{k}", _straddle("E", k)))
            if single:
                j = 2 * npair
                for s in range(3):
                    xv = f"vld1_f16({xr} + (ix + {j * sw + s}) * 4)"
                    out.append(f"  as = vfma_f16(as, {xv}, w{r}{s});")
            out.append("}")
        for k in range(npair):
            out += self._epilogue_d(p, F16_PAIR, f"a{k}", f"({ox} + {2 * k}) * 4")
        if single:
            out += self._epilogue_d(p, F16, "as", f"({ox} + {2 * npair}) * 4")
        return out


def _straddle(name: str, k: int) -> str:
    """The pixel pair straddling registers ``{name}k`` and ``{name}k+1``: the upper half of the first
    and the lower half of the second."""
    return f"vextq_f16({name}{k}, {name}{k + 1}, 4)"


def _pair_fmas(r: int, npair: int, taps: Callable[[int], tuple[str, str, str]]) -> list[str]:
    """Filter row ``r``'s three taps on each float16 accumulator pair ``a{k}``: ``taps(k)`` names the
    input pixel pairs under taps 0, 1 and 2."""
    return [f"  a{k} = vfmaq_f16(a{k}, {x}, W{r}{s});" for k in range(npair) for s, x in enumerate(taps(k))]


KERNEL_UNITS = tuple(ConvDepthwise3x3Nchw44(isa) for isa in ("neon", "fp16"))
