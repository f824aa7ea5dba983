"""The ReLU6 float island of the int8 convolutions as a byte table lookup (AVX512-VBMI, ISA
``avx512vbmi``, the ``vbmi`` feature of x86 targets).

The island after a convolution (``typecvt -> relu6 -> typecvt``, :class:`x86_int8._Relu6Island`) is a
function of the convolution's int8 result ``r`` alone, and maps every ``r <= 0`` to 0, so its values
for ``r`` in [0, 127] (:func:`x86_int8.island_table`: the reference's own operations, all 256 values
checked by ``island_form``) are a 128-byte table: two zmm registers, one ``vpermi2b`` per 16 results
(the byte's bits 0-6 pick the entry), instead of the five or six float operations of the island's
``scale`` and ``float`` forms. A clamp island keeps its two operations. These units are the VNNI,
depthwise and AMX island families on this ISA (searched first), over the same convolutions. The
depthwise unit also builds its row windows by one ``vpermb`` and narrows four output rows at once
(two packs, one max, one lookup, one ``vpermb``) instead of a ``vpmovsdb``, a max and a lookup each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.c.templates.x86_amx import ISA as AMX_ISA
from backends.c.templates.x86_int8 import ISA as VNNI_ISA
from backends.c.templates.x86_int8 import ConvDepthwiseQ8Relu6Vnni, island_lut_index
from backends.c.templates.x86_int8_amx_island import Conv2dQ8Relu6Amx
from backends.c.templates.x86_int8_gemm import Conv2dQ8Relu6Vnni

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "avx512vbmi"

# byte 16i + 4k + j of four packed rows' island (row i, columns 4k + j) is the packs' byte 16k + 4i + j;
# _mm512_set_epi8 lists bytes from the last
ROWS4_INDEX = ", ".join(str(16 * (b // 4 % 4) + 4 * (b // 16) + b % 4) for b in reversed(range(64)))

VBMI_SUPPORT = r"""
#ifndef XM_X86_INT8_VBMI
#define XM_X86_INT8_VBMI
/* the island of 16 int8 results r in [0, 127] (the low 16 bytes of q) by its table lo:hi (r = 0..127) */
static inline __m128i xm_qisland_lut16(__m128i q, __m512i lo, __m512i hi) {
  return _mm512_castsi512_si128(_mm512_permutex2var_epi8(lo, _mm512_castsi128_si512(q), hi));
}
/* xm_q8_window16 by one vpermb (byte 4j + b of the windows is input byte j * stride + b: idx) instead
   of its vpermd and vpshufb: the window mode's shuffle port carries half the work */
static inline __m512i xm_q8_window16_vbmi(const int8_t* xp, int iy, int c0, __mmask64 m, __m512i idx,
                                          int ih, int iw) {
  if ((unsigned)iy >= (unsigned)ih) return _mm512_set1_epi8((char)0x80);
  const uintptr_t at = (uintptr_t)(xp + (long)iy * iw) + (uintptr_t)(intptr_t)c0;
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  return _mm512_permutexvar_epi8(idx, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, (const void*)at), flip));
}
/* the island of four rows' int32 lanes r0..r3 (int8-saturated, clamped at 0) by its table lo:hi, row
   i's 16 bytes in 128-bit lane i: vpackssdw / vpacksswb saturate as vpmovsdb does, and one max, one
   table lookup and one vpermb (rows_idx: lane k of the packs holds columns 4k..4k+3 of each row) serve
   all four rows */
static inline __m512i xm_qisland_lut_rows4(__m512i r0, __m512i r1, __m512i r2, __m512i r3, __m512i lo,
                                           __m512i hi) {
  const __m512i rows_idx = _mm512_set_epi8(""" + ROWS4_INDEX + r""");
  const __m512i q = _mm512_packs_epi16(_mm512_packs_epi32(r0, r1), _mm512_packs_epi32(r2, r3));
  const __m512i t = _mm512_permutex2var_epi8(lo, _mm512_max_epi8(q, _mm512_setzero_si512()), hi);
  return _mm512_permutexvar_epi8(rows_idx, t);
}
#endif
"""


class _IslandByTable:
    """The island of a ReLU6 int8 unit by its 128-byte table: the same unit on the ``avx512vbmi``
    ISA, searched before the one it extends (``producer_isa``: the ISA its products use)."""

    isa = ISA
    island_lut = True

    def support(self, em: CEmitter) -> str:
        return super().support(em) + VBMI_SUPPORT  # type: ignore[misc]


class Conv2dQ8Relu6Vbmi(_IslandByTable, Conv2dQ8Relu6Vnni):
    producer_isa = VNNI_ISA


class ConvDepthwiseQ8Relu6Vbmi(_IslandByTable, ConvDepthwiseQ8Relu6Vnni):
    producer_isa = VNNI_ISA

    def _packed_rows(self, p: dict[str, Any], rows: int) -> str:
        """Groups of four rows through ``xm_qisland_lut_rows4`` where the epilogue is the island table's
        (``island_lut_index``)."""
        if rows < 4 or island_lut_index(p, "a0", "fb") is None:
            return ""
        oh, ow = p["oh"], p["ow"]
        groups = []
        for g in range(0, rows // 4 * 4, 4):
            stores = " ".join(
                f"if (r0 + {g + i} < {oh}) _mm_mask_storeu_epi8(yp + (long)(r0 + {g + i}) * {ow} + q0, "
                f"out_mask, _mm512_extracti32x4_epi32(b, {i}));"
                for i in range(4)
            )
            forms = [island_lut_index(p, f"a{g + i}", "fb") or ("", "") for i in range(4)]
            exact, affine = ([form[k] for form in forms] for k in (0, 1))
            group = []
            for lanes in (affine, exact):
                if lanes[0]:
                    island = f"xm_qisland_lut_rows4({', '.join(lanes)}, island_lo, island_hi)"
                    group.append(f"{{ const __m512i b = {island}; {stores} }}")
            # a channel's affine form where it has one (fa != 0), else the exact epilogue
            groups.append(" else ".join(f"if (fa != 0.f) {c}" if i == 0 and len(group) == 2 else c
                                         for i, c in enumerate(group)))
        return "\n          ".join(groups)

    def _window_builder(self, sw: int) -> tuple[str, str]:
        """The window mode's row windows by one ``vpermb`` (``xm_q8_window16_vbmi``)."""
        idx = ", ".join(str(sw * j + b) for j in range(16) for b in range(4))
        decls = f"const __m512i idx = _mm512_set_epi8({', '.join(reversed(idx.split(', ')))});"
        return decls, "xm_q8_window16_vbmi(xp, {row}, c0, m, idx, {ih}, {iw})"


class Conv2dQ8Relu6AmxVbmi(_IslandByTable, Conv2dQ8Relu6Amx):
    producer_isa = AMX_ISA


KERNEL_UNITS = (Conv2dQ8Relu6Vbmi(), ConvDepthwiseQ8Relu6Vbmi(), Conv2dQ8Relu6AmxVbmi())

__all__ = ["ISA", "KERNEL_UNITS", "VBMI_SUPPORT"]
