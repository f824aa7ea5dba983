"""The ReLU6 float island of the int8 convolutions as a byte table lookup (AVX512-VBMI, ISA
``avx512vbmi``, the ``vbmi`` feature of x86 targets).

The island after a convolution (``typecvt -> relu6 -> typecvt``, :class:`x86_int8._Relu6Island`) is a
function of the convolution's int8 result ``r`` alone, and maps every ``r <= 0`` to 0, so its values
for ``r`` in [0, 127] (:func:`x86_int8.island_table`: the reference's own operations, all 256 values
checked by ``island_form``) are a 128-byte table: two zmm registers, one ``vpermi2b`` per 16 results
(the byte's bits 0-6 pick the entry), instead of the five or six float operations of the island's
``scale`` and ``float`` forms. A clamp island keeps its two operations. These units are the VNNI,
depthwise and AMX island families on this ISA (searched first), over the same convolutions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from backends.c.templates.x86_amx import ISA as AMX_ISA
from backends.c.templates.x86_int8 import ISA as VNNI_ISA
from backends.c.templates.x86_int8 import ConvDepthwiseQ8Relu6Vnni
from backends.c.templates.x86_int8_amx_island import Conv2dQ8Relu6Amx
from backends.c.templates.x86_int8_gemm import Conv2dQ8Relu6Vnni

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

ISA = "avx512vbmi"

VBMI_SUPPORT = r"""
#ifndef XM_X86_INT8_VBMI
#define XM_X86_INT8_VBMI
/* the island of 16 int8 results r in [0, 127] (the low 16 bytes of q) by its table lo:hi (r = 0..127) */
static inline __m128i xm_qisland_lut16(__m128i q, __m512i lo, __m512i hi) {
  return _mm512_castsi512_si128(_mm512_permutex2var_epi8(lo, _mm512_castsi128_si512(q), hi));
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


class Conv2dQ8Relu6AmxVbmi(_IslandByTable, Conv2dQ8Relu6Amx):
    producer_isa = AMX_ISA


KERNEL_UNITS = (Conv2dQ8Relu6Vbmi(), ConvDepthwiseQ8Relu6Vbmi(), Conv2dQ8Relu6AmxVbmi())

__all__ = ["ISA", "KERNEL_UNITS", "VBMI_SUPPORT"]
