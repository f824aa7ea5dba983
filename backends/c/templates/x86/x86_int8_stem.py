"""The int8 first layer on AMX tiles (``conv2d_q8_stem``): MobileNetV2's 3x3 stride-2 convolution on 3
plain NCHW channels (an image's: at most 4), ahead of ``x86_amx.Conv2dQ8Amx``, whose ``rows`` mode
packs the whole input first and whose per-16-pixel epilogue narrows, looks up and stores each vector
on its own.

Here a work item is 64 consecutive output pixels of one image (the output plane flattened, so the
item's store is one 64-byte line per channel; a 16-pixel block that crosses a row end takes its
last lanes from the next row). Its B tiles are built in place from the input, no packing pass:
tile row ``q`` is the quad of filter row ``r`` of channel ``c`` (``q = c * FH + r``, its ``FW <= 4``
taps and zero filter bytes past them), the 16 lanes' windows of one input row cut by
``xm_q8_window16`` (one masked load, a ``vpermd`` and a ``vpshufb``; padding is ``x = 0``, the
byte 128 of the ``x + 128`` operands). So ``C * FH <= 16`` (one K tile).

Where the convolution's int8 input is the model's float32 input quantized (``typecvt f32 -> q8``, zero
point 0) and the convolution its only reader, the unit reads the float32 input instead
(``xm_q8_window16_f32``): a thread quantizes an input row on its first read into one of its channel's
``ROW_SLOTS`` row slots (``x86_int8``'s ``xm_quantize16``, the typecvt's own rounding) and cuts the
windows from those bytes, so each row is quantized about once. The typecvt's call is left unread and
kernel-select drops it: the 150 KB int8 image of a 224x224 input is neither written nor read back.
Where the int8 input has another reader the typecvt runs anyway and the stem reads its bytes (a
quarter of the floats' size); so it does where the slots would not fit ``ROW_CACHE_BYTES``.

The A tiles are the filters, ``[OC/16][16 channels][64 k]``. ``tdpbsud`` multiplies; where Linux
refuses tile data the same integers come from ``vpdpbusd`` on the same tiles in memory.

The epilogue is ``x86_int8_requant``'s affine form where a channel has it: ``floor(u * a + b)`` of
four 16-pixel vectors, narrowed
together by two ``vpackssdw`` and one ``vpacksswb`` (the saturation of ``vpmovsdb``), put back in
pixel order by one ``vpermd``, then the activation's bound (``max`` 0 after a RELU) or the ReLU6
island as ``x86_int8`` defines it: its byte table (AVX512-VBMI, ``xm_qisland_lut16``'s ``vpermi2b``)
or a clamp (the island's scale and float forms take ``x86_int8``'s epilogue a vector at a time). A
channel without the affine form takes the exact epilogue, its table island's indices narrowed four
vectors together too. Threads share the items
statically: results are bit-identical on any thread count."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation, SSAValue

import backends.c.examples as E
from backends.c.match import code
from backends.c.templates import Template
from backends.c.templates.portable.requant import REQUANT_C, exact, f32, inverse
from backends.c.templates.portable.typed import Conv2dQ8
from backends.c.templates.x86.x86_amx import AMX_SUPPORT
from backends.c.templates.x86.x86_amx import ISA as AMX_ISA
from backends.c.templates.x86.x86_int8 import (
    PARALLEL_WORK,
    QUANTIZE_C,
    SUPPORT,
    _affine_tag,
    _bias_decls,
    _channel_vectors,
    _dense_conv_q8,
    _epilogue,
    _has_fbias,
    _island_by_lut,
    _kernel_args,
    _Relu6Island,
    _requant_operands,
    island_form,
    island_lut_index,
)
from backends.c.templates.x86.x86_int8_gemm import GEMM_SUPPORT
from backends.c.templates.x86.x86_int8_vbmi import _IslandByTable
from dialects import kernel as K
from passes.lowering.kernels import Lowered

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

LANES = 16  # pixels of a B tile (its columns) and of one vector
ITEM = 4 * LANES  # pixels of a work item: four accumulator tiles, one 64-byte store per channel
QUADS = 16  # rows of a B tile: (channel, filter row) pairs
IMAGE_CHANNELS = 4  # the input channels of a first layer: an image's (RGB, RGBA)


def pixel_order(lanes: str) -> str:
    """The C expression of four vectors of int32 results (pixels 16j..16j+15 in the j-th of ``lanes``)
    as 64 int8 in pixel order, saturated as vpmovsdb saturates: x86_int8_gemm's pack-order narrowing,
    then one vpermd."""
    return f"xm_q8_dword_transpose64(xm_q8_narrow64({lanes}))"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _row_stride(iw: int) -> int:
    """The bytes of a quantized row's slot: whole 16-byte stores, 64-byte aligned."""
    return _ceil_div(iw, ITEM) * ITEM


def quantized_input(x: SSAValue, size: int) -> tuple[SSAValue, float] | None:
    """The float32 value and the scale of ``x`` where ``x`` is the result of a ``typecvt f32 -> q8``
    call (zero point 0, ``size`` values) that only the convolution reads; kernel-select lowered it
    already (program order)."""
    call = x.owner
    if not isinstance(call, K.CallOp) or not x.has_one_use() or len(call.outputs) != 1:
        return None
    d = call.definition()
    if d.family.data != "typecvt":
        return None
    tp = d.param_values()
    if (tp["src"], tp["dst"], tp["zp_out"], tp["size"]) != ("f32", "q8", 0, size):
        return None
    src = call.args[0]
    return (src, float(tp["s_out"])) if code(src) == "f32" else None


# a thread's quantized input rows: each channel's rows in ROW_SLOTS direct-mapped slots (row iy in
# slot iy % ROW_SLOTS, a power of two; tagged by image and row), more than the input rows one 64-pixel
# item reads (at most 4 * 2 + 4 = 12), so a row is quantized about once however many filter rows and
# items read it
ROW_SLOTS = 16
ROW_CACHE_BYTES = 48 * 1024  # on each thread's stack, beside the 8 KB of tiles and accumulators

# the windows of a float32 input row: the row quantized into its slot on its first read (16 values
# at a time as the typecvt quantizes: xm_quantize16, NaN, infinities, -0.0, ties and saturation
# included), then x86_int8's xm_q8_window16 on its bytes
WINDOW_F32_C = r"""
#ifndef XM_Q8_WINDOW16_F32
#define XM_Q8_WINDOW16_F32
static inline __m512i xm_q8_window16_f32(int8_t* rows, int* tags, int slots, int stride, int key,
                                         const float* xp, int iy, int c0, __mmask64 m, __m512i perm,
                                         __m512i shuf, int ih, int iw, __m512 inv) {
  if ((unsigned)iy >= (unsigned)ih) return _mm512_set1_epi8((char)0x80);
  const int slot = iy & (slots - 1);
  int8_t* row = rows + (long)slot * stride;
  if (tags[slot] != key + iy) {
    const float* src = xp + (long)iy * iw;
    /* the two rows below (a stride-2 stem's next output row reads them first): rows arrive in bursts
       the stream prefetch starts late on (MobileNetV2's stem, fastest of 40 profiles under load:
       0.081 - 0.097 ms with, 0.089 - 0.111 ms without) */
    if (iy + 2 < ih)
      for (int j = 0; j < 2 * iw; j += 16) _mm_prefetch((const char*)(src + 2L * iw + j), _MM_HINT_T0);
    int i = 0;
    for (; i + 64 <= iw; i += 64) {
      _mm512_store_si512((void*)(row + i), xm_quantize64(src + i, inv));
    }
    for (; i < iw; i += 16) {
      const __mmask16 lanes = xm_q8_lanes(iw - i);
      _mm_store_si128((__m128i*)(row + i), xm_quantize16(_mm512_maskz_loadu_ps(lanes, src + i), inv));
    }
    tags[slot] = key + iy;
  }
  return xm_q8_window16(row, 0, c0, m, perm, shuf, 1, iw);
}
#endif
"""


class Conv2dQ8StemAmx(Template):
    """First-layer int8 NCHW convolutions (an image's ``C <= 4`` channels, ``C * FH <= 16`` quads of
    ``FW <= 4`` taps, stride 1 or 2, no dilation or groups, an int8 result) on AMX tiles built in place;
    see the module docstring."""
    # a stem: an image's few channels, 16 or more output columns
    examples = (
        E.conv2d_q8((1, 3, 19, 37), 16, 3, stride=2, pad=1),
        E.conv2d_q8((2, 3, 11, 35), 32, 4, stride=2, pad=1),
    )

    family = "conv2d_q8_stem"
    isa = AMX_ISA
    ops = Conv2dQ8.ops
    priority = 98  # ahead of the AMX conv2d_q8_amx (97), which takes what this declines

    def match(self, op: Operation) -> Lowered | None:
        got = _dense_conv_q8(op)
        if got is None:
            return None
        p, operands, wv = got
        if p["groups"] != 1 or (p["dh"], p["dw"]) != (1, 1) or p["sw"] > 2 or p["out"] != "q8":
            return None
        # a stem's window (a 1x1 convolution's quads would hold one tap each); a block of 16 pixels
        # crosses at most one row end; one K tile
        if not (2 <= p["fw"] <= 4 and p["fh"] >= 2 and p["ow"] >= LANES and p["ic"] * p["fh"] <= QUADS):
            return None
        if p["ic"] > IMAGE_CHANNELS:  # few-channel layers deeper in a network stay with x86_amx
            return None
        biases = _requant_operands(p, operands, wv, -128 * wv.reshape(p["oc"], -1).sum(axis=1))
        if biases is None:
            return None
        x = operands[0]
        assert isinstance(x, SSAValue)
        fused = quantized_input(x, p["n"] * p["ic"] * p["ih"] * p["iw"])
        if fused is not None and p["ic"] * ROW_SLOTS * _row_stride(p["iw"]) <= ROW_CACHE_BYTES:
            x, scale = fused
            p["quantize_in"] = inverse(scale)  # 1.0f / s, the typecvt's multiplier
        return Lowered(p, [x, operands[1], *biases])

    def symbol(self, p: dict[str, Any]) -> str:
        fused = "_f32in" if "quantize_in" in p else ""
        return "amxstem_" + Conv2dQ8.symbol(Conv2dQ8(), p) + _affine_tag(p) + fused

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand != 1:
            return None
        oc, ic, fh, fw = p["oc"], p["ic"], p["fh"], p["fw"]
        w = np.asarray(array).view(np.int8).reshape(oc, ic * fh, fw)
        # [OC/16][16 channels][16 quads][4]: k = 4 * (c * FH + r) + s, zero past each row's FW taps
        tiles = np.zeros((_ceil_div(oc, LANES) * LANES, QUADS, 4), np.int8)
        tiles[:oc, : ic * fh, :fw] = w
        return np.ascontiguousarray(tiles), "amx_stem_a16x64"

    def support(self, em: CEmitter) -> str:
        return REQUANT_C + SUPPORT + AMX_SUPPORT + GEMM_SUPPORT + QUANTIZE_C + WINDOW_F32_C

    @staticmethod
    def _narrows(p: dict[str, Any]) -> bool:
        """Whether the affine channels' results of four vectors are narrowed together: no island, or
        an island that is its byte table or a clamp."""
        island = p.get("island")
        if island is None or _island_by_lut(p):
            return True
        return island_form(float(np.float32(island[0])), float(np.float32(island[1])))[0] == "clamp"

    def _narrowed(self, p: dict[str, Any]) -> str:
        """The C expression of the item's 64 result bytes of channel ``o`` from its accumulator row
        ``a`` (four vectors of 16 pixels), ``va`` and ``vo`` the channel's slope and offset."""
        lanes = ", ".join(
            f"xm_qaffine16(_mm512_load_si512((const void*)(a + {LANES * j})), va, vo)" for j in range(4)
        )
        q = pixel_order(lanes)
        lo = p["affine"][0] if p.get("affine") else -128
        island = p.get("island")
        if island is None:
            return q if lo < 0 else f"_mm512_max_epi8({q}, _mm512_setzero_si512())"
        q = f"_mm512_max_epi8({q}, _mm512_setzero_si512())"  # the island maps every r <= 0 to 0
        if _island_by_lut(p):
            return f"_mm512_permutex2var_epi8(island_lo, {q}, island_hi)"
        _, _, hi = island_form(float(np.float32(island[0])), float(np.float32(island[1])))  # a clamp
        return f"_mm512_min_epi8({q}, _mm512_set1_epi8({hi}))"

    def _channel_epilogue(self, p: dict[str, Any]) -> str:
        """The C statements storing the item's results of channel ``o`` (accumulator row ``a``) at
        ``yo``: the affine form (:meth:`_narrowed`) where the channel has one, else the exact one;
        where four vectors are not narrowed together (:meth:`_narrows`), ``x86_int8``'s epilogue."""
        affine = p.get("affine")
        fbias = "fbias[o]" if _has_fbias(p) else "0.f"
        if not self._narrows(p):  # the island's scale / float forms: x86_int8's epilogue, a vector at a time
            vectors = " ".join(
                f"{{ __m512i v = _mm512_add_epi32(_mm512_load_si512((const void*)(a + {LANES * j})), bv); "
                f"{_epilogue(p, 'v', 'fb', f'yo + {LANES * j}', f'(__mmask16)(keep >> {LANES * j})')} }}"
                for j in range(4)
            )
            return f"{_channel_vectors(p, 'o')} const float fb = {fbias}; (void)fb; {vectors}"
        fast = (
            f"const __m512 va = _mm512_set1_ps(afc[o]), vo = _mm512_set1_ps(afc[{p['oc']} + o]);"
            f" _mm512_mask_storeu_epi8(yo, keep, {self._narrowed(p)});"
        )
        if affine and affine[1]:
            return fast
        exact_p = {k: v for k, v in p.items() if k != "affine"}
        loads = " ".join(
            f"__m512i v{j} = _mm512_add_epi32(_mm512_load_si512((const void*)(a + {LANES * j})), bv);"
            for j in range(4)
        )
        tables = [island_lut_index(exact_p, f"v{j}", "fb") for j in range(4)]
        if tables[0] is not None:  # the table's indices (in [0, 127]) of four vectors, one lookup
            lanes = ", ".join(t[0] for t in tables if t)
            vectors = (
                f"{loads} _mm512_mask_storeu_epi8(yo, keep, "
                f"_mm512_permutex2var_epi8(island_lo, {pixel_order(lanes)}, island_hi));"
            )
        else:
            vectors = loads + " " + " ".join(
                _epilogue(exact_p, f"v{j}", "fb", f"yo + {LANES * j}", f"(__mmask16)(keep >> {LANES * j})")
                for j in range(4)
            )
        slow = f"const __m512i bv = _mm512_set1_epi32(bias[o]); const float fb = {fbias}; (void)fb; {vectors}"
        return f"if (afc[o] != 0.f) {{ {fast} }} else {{ {slow} }}" if affine else slow

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        pixels = oh * ow
        items = _ceil_div(pixels, ITEM)
        ocb = _ceil_div(oc, LANES)
        quads = ic * fh
        span = (LANES - 1) * sw + fw  # the input values a row's 16 windows read
        fused = "quantize_in" in p
        xtype = "float" if fused else "int8_t"

        def window(channel: int, iy: str, c: str) -> str:
            """The C expression of row ``iy``'s 16 windows from column ``c`` (the channel's plane
            ``xc``)."""
            args = f"xc, {iy}, {c}, xm_q8_span64({c}, {span}, {iw}), perm, shuf, {ih}, {iw}"
            if fused:  # from the channel's quantized rows
                cache = f"rows[{channel}][0], tags[{channel}], {ROW_SLOTS}, {_row_stride(iw)}, key"
                return f"xm_q8_window16_f32({cache}, {args}, inv)"
            return f"xm_q8_window16({args})"
        # vpermd: 128-bit lane k holds the 16 bytes from 4k * sw; vpshufb: its dword i, bytes from i * sw
        perm = ", ".join(str(sw * k + d) for k in range(4) for d in range(4))
        shuf = ", ".join(str(sw * i + b) for i in range(4) for b in range(4))
        windows = "\n".join(
            f"""          {{ /* channel {q // fh}, filter row {q % fh} */
            const {xtype}* xc = xn + {q // fh * ih * iw};
            const int iy = oy * {sh} + {q % fh - ph};
            __m512i v = {window(q // fh, "iy", "c0")};
            if (rest < {LANES}) {{ /* the next row's windows in the lanes past the row end */
              const __m512i u = {window(q // fh, f"iy + {sh}", "c1")};
              v = _mm512_mask_mov_epi32(v, (__mmask16)(0xFFFFu << rest), u);
            }}
            _mm512_store_si512((void*)(bt[blk] + {64 * q}), v);
          }}"""
            for q in range(quads)
        )
        vnni = f"""for (int r = 0; r < {LANES}; ++r)
              for (int j = 0; j < 4; ++j) {{
                __m512i c = _mm512_setzero_si512();
                for (int q = 0; q < {quads}; ++q)
                  c = _mm512_dpbusd_epi32(c, _mm512_load_si512((const void*)(bt[j] + 64 * q)),
                                          _mm512_set1_epi32(((const int32_t*)(wa + {4 * QUADS} * r))[q]));
                _mm512_store_si512((void*)&acc[r][{LANES} * j], c);
              }}"""
        channel = self._channel_epilogue(p)
        work = n * oc * pixels * quads * 4
        fbias_void = " (void)fbias;" if _has_fbias(p) else ""
        inv = f"\n  const __m512 inv = _mm512_set1_ps({f32(p['quantize_in'])});" if fused else ""
        # the thread's quantized rows (tags -1: none yet); a row's key is image * IH + row
        cache_decls = (
            f"\n    int8_t rows[{ic}][{ROW_SLOTS}][{_row_stride(iw)}] __attribute__((aligned(64)));"
            f"\n    int tags[{ic}][{ROW_SLOTS}];"
            "\n    memset(tags, 0xFF, sizeof tags);"
            if fused
            else ""
        )
        key = f"\n      const int key = nn * {ih};" if fused else ""
        return exact(f"""
static void {sym}({_kernel_args(p)}) {{
  const {xtype}* x = (const {xtype}*)x_;
  const int8_t* wpk = (const int8_t*)w_;
  {_bias_decls(p)}
  int8_t* y = (int8_t*)y_;
  (void)bias; (void)ws;{fbias_void}
  const __m512i perm = _mm512_setr_epi32({perm});
  const __m512i shuf = _mm512_broadcast_i32x4(_mm_setr_epi8({shuf}));{inv}
  const int use_amx = xm_amx_ready();
  #pragma omp parallel num_threads(nt) if(nt > 1 && {work}L > {PARALLEL_WORK}L)
  {{
    /* B tiles: four blocks of 16 pixels, a 64-byte row per quad (the rows past the quads stay 0) */
    uint8_t bt[4][{QUADS * 64}] __attribute__((aligned(64)));
    int32_t acc[{LANES}][{ITEM}] __attribute__((aligned(64)));
    memset(bt, 0, sizeof bt);{cache_decls}
    if (use_amx) xm_amx_configure();
    #pragma omp for schedule(static)
    for (int item = 0; item < {n * items}; ++item) {{
      const int nn = item / {items}, p0 = item % {items} * {ITEM};
      const {xtype}* xn = x + (long)nn * {ic * ih * iw};{key}
      for (int blk = 0; blk < 4; ++blk) {{
        /* lanes [0, rest) are columns ox.. of row oy, the others columns 0.. of row oy + 1 */
        const int pb = p0 + {LANES} * blk, oy = pb / {ow}, ox = pb % {ow}, rest = {ow} - ox;
        const int c0 = ox * {sw} - {pw}, c1 = -rest * {sw} - {pw};
        (void)c1;
{windows}
      }}
      const int count = {pixels} - p0 < {ITEM} ? {pixels} - p0 : {ITEM};
      const __mmask64 keep = count == {ITEM} ? ~(__mmask64)0 : (((__mmask64)1 << count) - 1);
      for (int cb = 0; cb < {ocb}; ++cb) {{
        const int8_t* wa = wpk + (long)cb * {LANES * QUADS * 4};
        if (use_amx) {{
          _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
          _tile_loadd(4, wa, 64);
          _tile_loadd(5, bt[0], 64); _tile_loadd(6, bt[1], 64); _tile_loadd(7, bt[2], 64);
          _tile_dpbsud(0, 4, 5); _tile_dpbsud(1, 4, 6); _tile_dpbsud(2, 4, 7);
          _tile_loadd(5, bt[3], 64);
          _tile_dpbsud(3, 4, 5);
          _tile_stored(0, &acc[0][0], {ITEM * 4}); _tile_stored(1, &acc[0][16], {ITEM * 4});
          _tile_stored(2, &acc[0][32], {ITEM * 4}); _tile_stored(3, &acc[0][48], {ITEM * 4});
        }} else {{
          {vnni}
        }}
        for (int r = 0; r < {LANES} && cb * {LANES} + r < {oc}; ++r) {{
          const int o = cb * {LANES} + r;
          const int32_t* a = acc[r];
          int8_t* yo = y + ((long)nn * {oc} + o) * {pixels} + p0;
          {channel}
        }}
      }}
    }}
    if (use_amx) _tile_release();
  }}
}}
""")


class Conv2dQ8StemRelu6Amx(_Relu6Island, Conv2dQ8StemAmx):
    """The stem with its ReLU6 float island in the epilogue (a clamp narrowed with the others; the
    scale and float forms a vector at a time)."""
    examples = (E.q8_stem_relu6((1, 3, 19, 37), 16), E.q8_stem_relu6((2, 3, 11, 35), 32, 4))

    family = "conv2d_q8_stem_relu6"
    conv_family = Conv2dQ8StemAmx.family
    producer_isa = AMX_ISA
    priority = 104  # ahead of the AMX island (103), whose convolution this family's declines


class Conv2dQ8StemRelu6Vbmi(_IslandByTable, Conv2dQ8StemRelu6Amx):
    """The same with the island's byte table (every form but a clamp)."""


KERNEL_UNITS = (Conv2dQ8StemAmx(), Conv2dQ8StemRelu6Amx(), Conv2dQ8StemRelu6Vbmi())

__all__ = ["KERNEL_UNITS"]
