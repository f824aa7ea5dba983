"""Direct float16 convolution for a network's first layer on AVX512-FP16 (``x86-avx512-fp16+ioc16``):
``conv2d_stem_f16``, dense NCHW convolutions with a few input channels (RGB) and column stride 1 or 2,
such as ResNet's 7x7 stride-2 conv on 3 channels.

The GEMM kernel (:mod:`backends.c.templates.x86.x86_fp16`) spends a third of such a layer building its
im2col panels (``K = 3 x 7 x 7`` strided, masked row loads per 32 pixels). Here the input is copied once
into a zero-bordered workspace with its columns split by phase modulo the stride (column ``q`` of phase
``r`` holds padded column ``q * sw + r``), so that every tap of 32 consecutive output pixels is one plain
unaligned load: tap ``(c, kh, kw)`` of output row ``oy``, columns ``ox0 ..`` reads phase ``kw % sw``, row
``oy * sh + kh``, columns ``ox0 + kw // sw ..``. The register tile is 16 output channels x 32 pixels
(16 accumulators; each filter value an embedded-broadcast ``vfmadd231ph``), accumulated in float16 as
the GEMM kernel; bias, residual and ReLU / ReLU6 on the registers before the store. Where a row ends in
a vector of at most 16 pixels (112 = 3 x 32 + 16), two rows share that vector (each in 16 lanes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.templates.x86.x86_fp16 import (
    ACT_CODES,
    COMMON,
    LANES,
    ConvUnitF16,
    f16_args,
)
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

STEM_MR = 16  # output channels per register tile (64-channel stems: no padded rows)
STEM_MAX_CHANNELS = 4  # input channels: deeper layers are the GEMM's, whose panels amortise the im2col
STEM_STRIDES = (1, 2)


class ConvStemF16(ConvUnitF16):
    """``conv2d_stem_f16``: direct NCHW float16 convolution of a few input channels (module doc)."""
    examples = (
        E.conv2d((1, 3, 17, 15), 16, 3, stride=2, pad=1, act="relu"),
        E.conv2d((1, 3, 23, 21), 10, 7, stride=2, pad=3),
    )

    family = "conv2d_stem_f16"
    priority = 105  # ahead of conv2d_gemm_f16 (104); the Winograd unit (106) needs 16 channels

    def match(self, op: Operation) -> Lowered | None:
        got = self.dense(op)
        if got is None:
            return None
        params, operands = got
        if params["ic"] > STEM_MAX_CHANNELS:
            return None
        if params["sw"] not in STEM_STRIDES or (params["dh"], params["dw"]) != (1, 1):
            return None
        params = {k: v for k, v in params.items() if k not in ("dh", "dw", "groups")}
        return Lowered(params, operands)

    @staticmethod
    def geometry(p: dict[str, Any]) -> dict[str, int]:
        """Rows and columns (per phase) of the split input workspace, channel-row groups."""
        hp = (p["oh"] - 1) * p["sh"] + p["fh"]  # padded rows any tap reads
        wq = -(-p["ow"] // LANES) * LANES + (p["fw"] - 1) // p["sw"]  # a full last vector stays inside
        return {"HP": hp, "WQ": wq, "MP": -(-p["oc"] // STEM_MR), "K": p["ic"] * p["fh"] * p["fw"]}

    def workspace(self, p: dict[str, Any]) -> int:
        geo = self.geometry(p)
        return p["ic"] * p["sw"] * geo["HP"] * geo["WQ"] * 2

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        geo = self.geometry(p)
        w = np.zeros((geo["MP"] * STEM_MR, geo["K"]), np.float16)
        w[: p["oc"]] = np.asarray(array, np.float16).reshape(p["oc"], geo["K"])
        # (MP, MR, K) -> (MP, K, MR): MR consecutive output channels per tap
        packed = w.reshape(geo["MP"], STEM_MR, geo["K"]).transpose(0, 2, 1)
        return np.ascontiguousarray(packed), f"stem_h{STEM_MR}"

    def support(self, em: CEmitter) -> str:
        return COMMON

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        geo = self.geometry(p)
        hp, wq, mp, kk = geo["HP"], geo["WQ"], geo["MP"], geo["K"]
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        mr = STEM_MR
        # element offset of tap k = (c, kh, kw) from the workspace address of output (0, 0)
        offsets = [
            ((c * sw + kw % sw) * hp + kh) * wq + kw // sw
            for c in range(ic)
            for kh in range(fh)
            for kw in range(fw)
        ]
        args = f16_args(p)
        acc = [f"c{i}" for i in range(mr)]
        fmas = "\n".join(
            f"        {c} = _mm512_fmadd_ph(_mm512_set1_ph(a[{i}]), b, {c});" for i, c in enumerate(acc)
        )
        bias = "epi_b = _mm512_set1_ph(((const xm_h*)bias_)[o]);" if p["bias"] else ""
        act = ACT_CODES[p["act"]]
        zero_acc = f"__m512h {', '.join(f'{c} = _mm512_setzero_ph()' for c in acc)};"
        # a row's last vector with at most 16 pixels (ResNet's 112 = 3 x 32 + 16) shares its vector with the
        # next row's: lanes 16.. hold that row's same columns, loaded and stored 16 halves back (no
        # padding lanes in the FMAs); rows past 32 columns only, so that the shifted addresses stay in
        # the row's workspace and output
        tail = ow % LANES
        paired = 0 < tail <= LANES // 2 and ow > LANES
        full = ow - tail if paired else ow

        def block(ox0: str, pair: bool) -> str:
            """One vector of output pixels from column ``ox0`` of row ``oy`` (``pair``: and of ``oy + 1``)."""
            load = "_mm512_loadu_ph(base + off[k])"
            if pair:
                load = (
                    f"_mm512_castsi512_ph(_mm512_mask_loadu_epi16(_mm512_castph_si512({load}), "
                    f"(__mmask32)0xFFFF0000u, base + {sh * wq - LANES // 2} + off[k]))"
                )
            res = ""
            if p["residual"]:
                res = "v = _mm512_add_ph(v, xm_h_loadn((const xm_h*)res_ + yoff, nv));"
                if pair:
                    rows = (
                        "_mm512_mask_loadu_epi16(_mm512_castph_si512(xm_h_loadn((const xm_h*)res_ + yoff, "
                        f"nv)), hi_m, (const xm_h*)res_ + yoff + {ow - 16})"
                    )
                    res = f"v = _mm512_add_ph(v, _mm512_castsi512_ph({rows}));"
            store = f"xm_h_storen(y + yoff, nv, xm_h_act(v, {act}));"
            if pair:
                store = (
                    f"v = xm_h_act(v, {act}); xm_h_storen(y + yoff, nv, v);\n"
                    f"        _mm512_mask_storeu_epi16(y + yoff + {ow - 16}, hi_m, _mm512_castph_si512(v));"
                )
            epilogue = "\n".join(
                f"""      if (m0 + {i} < {oc}) {{
        const int o = m0 + {i};
        const long yoff = (((long)nn * {oc} + o) * {oh} + oy) * {ow} + ox0;
        __m512h epi_b = _mm512_setzero_ph(); {bias}
        __m512h v = _mm512_add_ph({c}, epi_b);
        {res}
        {store}
      }}"""
                for i, c in enumerate(acc)
            )
            return f"""{{
        const int ox0 = {ox0};
        const long nv = {ow} - ox0 < 32 ? {ow} - ox0 : 32;
        const __mmask32 hi_m = (__mmask32)(xm_h_mask(nv) << 16);
        (void)hi_m;
        const xm_h* base = xs + (long)oy * {sh * wq} + ox0;
        {zero_acc}
        for (int k = 0; k < {kk}; ++k) {{
          const __m512h b = {load};
          const xm_h* a = wp + k * {mr};
{fmas}
        }}
{epilogue}
      }}"""

        tail_blocks = ""
        if paired:
            tail_blocks = f"""/* rows oy, oy + 1: their last {tail} columns in one vector */
      if (!(oy & 1)) {{
        if (oy + 1 < {oh}) {block(str(full), True)}
        else {block(str(full), False)}
      }}"""
        return f"""
static void {sym}({args}) {{
  static const int off[{kk}] = {{{", ".join(map(str, offsets))}}};
  const xm_h* x = (const xm_h*)x_;
  const xm_h* w = (const xm_h*)w_;
  xm_h* y = (xm_h*)y_;
  xm_h* xs = (xm_h*)ws;  /* [ic][phase][HP][WQ], zero outside the input */
  for (int nn = 0; nn < {n}; ++nn) {{
    #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
    for (int cr = 0; cr < {ic * sw}; ++cr)
      for (int r = 0; r < {hp}; ++r) {{
        const int c = cr / {sw}, phase = cr % {sw}, yy = r - {ph};
        xm_h* dst = xs + ((long)cr * {hp} + r) * {wq};
        const int ok = (unsigned)yy < {ih}u;
        const xm_h* row = x + (((long)nn * {ic} + c) * {ih} + (ok ? yy : 0)) * {iw};
        for (int q = 0; q < {wq}; q += 32) {{
          const long nv = ok ? ({wq} - q < 32 ? {wq} - q : 32) : 0;
          xm_h_storen(dst + q, {wq} - q,
                      xm_h_row(row, (long)q * {sw} + phase - {pw}, {sw}, nv, {iw}, _mm512_setzero_si512()));
        }}
      }}
    #pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)
    for (int mp = 0; mp < {mp}; ++mp)
    for (int oy = 0; oy < {oh}; ++oy) {{
      const int m0 = mp * {mr};
      const xm_h* wp = w + (long)mp * {kk * mr};
      for (int ox0_ = 0; ox0_ < {full}; ox0_ += 32) {block("ox0_", False)}
      {tail_blocks}
    }}
  }}
}}
"""


KERNEL_UNITS = (ConvStemF16(),)
