"""SIMD depthwise convolution for plain NCHW on x86 (``conv2d_depthwise`` on the ``avx2`` ISA, so
``x86-avx2`` and ``x86-avx512`` both use it): 8 output columns per ymm accumulator, every tap one
vector FMA. Stride 1 loads 8 consecutive inputs; stride 2 loads 16 and keeps the even lanes (one
shuffle and one lane permute). Columns whose taps all lie inside the row run vectorised without
checks, a remainder of them as one more vector overlapping the previous one; the few border
columns take the portable scalar path. Other strides fall back to the portable template.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import backends.c.examples as E
from backends.c.templates.portable.generic import ConvDepthwise, omp_parallel
from backends.c.templates.x86.nchw88 import ACT_CODES, COMMON

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


class ConvDepthwiseAvx2(ConvDepthwise):
    isa = "avx2"
    examples = (
        # channels not a multiple of 8 stay plain NCHW on the NCHW88 targets
        E.conv_case((1, 20, 9, 11, 20, 3, 1, 0, 1, 20, "hswish")),
        E.conv_case((2, 12, 10, 9, 12, 3, 2, 1, 1, 12, "residual")),
        E.conv2d((1, 12, 9, 11), 12, 3, pad=1, groups=12, act="relu"),
        E.conv2d((2, 9, 10, 13), 9, 3, stride=2, pad=1, groups=9),
        E.conv2d((1, 8, 7, 8), 8, 5, pad=2, groups=8, residual=True),
    )

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        if p["sw"] not in (1, 2) or p["act"] not in ACT_CODES:
            return super().render(em, sym, p)
        ih, iw, oh, ow, fh, fw = p["ih"], p["iw"], p["oh"], p["ow"], p["fh"], p["fw"]
        sh, sw, ph, pw, dh, dw = p["sh"], p["sw"], p["ph"], p["pw"], p["dh"], p["dw"]
        # interior columns: every tap in range (the vector loop reads sw * 8 floats from q * sw + off)
        lo, hi = self.interior(p)
        if sw == 2:  # 16 floats loaded per 8 outputs: the last vector may not read past the row
            hi = max(lo, min(hi, (iw - 16 + pw - (fw - 1) * dw) // 2 + 8))
        load = (
            "_mm256_loadu_ps(src)"
            if sw == 1
            else "_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps("
            "_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8), 0x88)), 0xD8))"
        )
        bias_v = "_mm256_set1_ps(bias[ch])" if p["bias"] else "_mm256_setzero_ps()"
        bias_s = "bias[ch]" if p["bias"] else "0.f"
        res_v = "v = _mm256_add_ps(v, _mm256_loadu_ps(rr + q));" if p["residual"] else ""
        res_s = "rr[qq]" if p["residual"] else "0.f"
        rrow = f"res + (long)nc * {oh * ow} + (long)r * {ow}" if p["residual"] else "0"
        vector_body = f"""        __m256 v = bv;
        for (int kh = 0; kh < {fh}; ++kh) {{
          const int ihh = r * {sh} - {ph} + kh * {dh};
          if ((unsigned)ihh >= {ih}u) continue;
          const float* row = xp + (long)ihh * {iw} + q * {sw} - {pw};
          for (int kw = 0; kw < {fw}; ++kw) {{
            const float* src = row + kw * {dw};
            v = _mm256_fmadd_ps(_mm256_set1_ps(wp[kh * {fw} + kw]), {load}, v);
          }}
        }}
        {res_v}
        _mm256_storeu_ps(yr + q, xm_n88_act(v, {ACT_CODES[p["act"]]}));"""
        # interior columns left over after the full vectors: one more vector ending at the last
        # one, overlapping columns already done (recomputed to the same values: the output never
        # aliases an input) instead of up to 7 scalar columns
        overlap = ""
        if hi - lo > 8 and (hi - lo) % 8:
            overlap = f"      {{\n        q = {hi - 8};\n{vector_body}\n        q = {hi};\n      }}"
        return f"""{COMMON}
{self.head(sym, p, omp_parallel(p["n"] * p["c"] * oh * ow * fh * fw))}
    const __m256 bv = {bias_v};
    for (int r = 0; r < {oh}; ++r) {{
      float* yr = yp + (long)r * {ow};
      const float* rr = {rrow};
      (void)rr;
      int q = {lo};
      for (; q + 8 <= {hi}; q += 8) {{
{vector_body}
      }}
{overlap}
      for (int qq = 0; qq < {ow}; ++qq) {{
        if (qq >= {lo} && qq < q) {{ qq = q - 1; continue; }}
        float a = 0.f;
        for (int kh = 0; kh < {fh}; ++kh) {{
          const int ihh = r * {sh} - {ph} + kh * {dh};
          if ((unsigned)ihh >= {ih}u) continue;
          for (int kw = 0; kw < {fw}; ++kw) {{
            const int iww = qq * {sw} - {pw} + kw * {dw};
            if ((unsigned)iww < {iw}u) a += wp[kh * {fw} + kw] * xp[(long)ihh * {iw} + iww];
          }}
        }}
        yr[qq] = xm_act_{p["act"]}(a + {bias_s} + {res_s});
      }}
    }}
  }}
}}
"""


KERNEL_UNITS = (ConvDepthwiseAvx2(),)
