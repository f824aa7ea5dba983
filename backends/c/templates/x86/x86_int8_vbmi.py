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
(two packs, one max, one lookup, one ``vpermb``) instead of a ``vpmovsdb``, a max and a lookup each;
and it fills the vectors the 16-column row blocks leave part empty: planes whose rows are under 8
columns (7x7) run 16 output pixels a vector across rows, their windows ``vpermi2b`` of the plane held
in registers (``_flat_plan``); a plane's last 8 or fewer columns (56 = 3 * 16 + 8) run two rows a
vector (``xm_q8_window8x2_vbmi``). Wide stride-1 planes are flipped once into a padded stack copy
(``_padded_plane``), and full row vectors are stored straight from the register."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.c.templates.portable.requant import exact
from backends.c.templates.x86.x86_amx import ISA as AMX_ISA
from backends.c.templates.x86.x86_int8 import (
    DW_ROWS,
    ConvDepthwiseQ8Relu6Vnni,
    _depthwise_plane_loop,
    _depthwise_signature,
    _out_ctype,
    island_lut_index,
)
from backends.c.templates.x86.x86_int8 import ISA as VNNI_ISA
from backends.c.templates.x86.x86_int8_amx_island import Conv2dQ8Relu6Amx
from backends.c.templates.x86.x86_int8_gemm import Conv2dQ8Relu6Vnni

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
/* the windows of 8 output columns from c0 of two input rows, iy in lanes 0-7 and iy + d in lanes 8-15
   (idx2: byte 4j + b from the first row's byte j * stride + b, 64 + that from the second's): a plane's
   last 8 or fewer columns two rows to a vector; a row outside [0, ih) is padding, 128 */
static inline __m512i xm_q8_window8x2_vbmi(const int8_t* xp, int iy, int d, int c0, __mmask64 m,
                                           __m512i idx2, int ih, int iw) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  __m512i rows[2];
  for (int i = 0; i < 2; ++i) {
    const int y = iy + i * d;
    const uintptr_t at = (uintptr_t)(xp + (long)y * iw) + (uintptr_t)(intptr_t)c0;
    rows[i] = (unsigned)y >= (unsigned)ih ? flip
            : _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, (const void*)at), flip);
  }
  return _mm512_permutex2var_epi8(rows[0], idx2, rows[1]);
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


@dataclass(frozen=True)
class Shuffle:
    """64 bytes gathered from registers ``reg`` and ``reg + 1`` (of a family ``Q`` or ``P``) by one
    ``vpermi2b`` with ``index``; where ``mask`` is nonzero its zero bits keep the index's byte 0x80 (the
    padding's 128)."""

    reg: int
    index: tuple[int, ...]
    mask: int = 0


@dataclass(frozen=True)
class FlatPlan:
    """A small plane's flat form (``_flat_plan``): the input plane in ``raw`` registers ``Q`` (bytes +
    128), the padded plane (rows ``stride`` bytes apart, 128 around the input) in registers ``P`` built
    by ``padded`` (None: every byte padding), and for each vector of 16 output pixels in plane order,
    each filter row's windows from ``P``."""

    raw: int
    padded: list[Shuffle | None]
    windows: list[list[Shuffle]]


FULL_STORE = "_mm_storeu_si128((__m128i*)({at}), _mm512_extracti32x4_epi32(b, {i}));"
MASKED_STORE = "_mm_mask_storeu_epi8({at}, out_mask, _mm512_extracti32x4_epi32(b, {i}));"
FLAT_PLANE = 256  # the largest plane (bytes, input and padded) the flat depthwise form holds in registers
FLAT_OW = 8  # below this output width a row fills less than half a vector: the flat form serves it


def _pair_shuffle(offsets: list[int | None], pad: bool) -> Shuffle | None:
    """The ``Shuffle`` gathering byte ``offsets[i]`` of a register family into byte i, None if some
    two offsets lie more than one register apart; a None offset is padding (``pad``: 128, by the mask)
    or else any byte (a zero weight's)."""
    valid = [o for o in offsets if o is not None]
    reg = min(valid) // 64
    if max(valid) >= 64 * (reg + 2):
        return None
    filler = 0x80 if pad else valid[0] - 64 * reg
    index = tuple(filler if o is None else o - 64 * reg for o in offsets)
    mask = sum(1 << i for i, o in enumerate(offsets) if o is not None) if pad else 0
    return Shuffle(reg, index, mask)


def _flat_plan(p: dict[str, Any]) -> FlatPlan | None:
    """The flat form of a depthwise convolution on small planes: the output pixels run 16 to a vector
    in plane order (a vector spans rows), lane j's dword of filter row ``kh`` the four padded-plane
    bytes output pixel ``16 v + j`` reads with that row (taps past the filter's width read any byte of
    the window: their weight is 0). None where a plane is too big for registers, the rows fill half a
    vector already (``FLAT_OW``), or a window's bytes lie in more than two adjacent registers."""
    ih, iw, oh, ow, fh, fw = (p[k] for k in ("ih", "iw", "oh", "ow", "fh", "fw"))
    sh, sw, ph, pw, dh = (p[k] for k in ("sh", "sw", "ph", "pw", "dh"))
    if ih * iw > FLAT_PLANE or ow >= FLAT_OW or fw > 4 or p["dw"] != 1:
        return None
    stride = pw + max(iw, (ow - 1) * sw + fw - pw)  # the padded row: every column a tap reads
    height = max(ih + ph, (oh - 1) * sh + (fh - 1) * dh + 1)
    if height * stride > FLAT_PLANE:
        return None
    padded: list[Shuffle | None] = []
    for r in range(-(-height * stride // 64)):
        offsets: list[int | None] = []
        for at in range(64 * r, 64 * r + 64):
            iy, ix = at // stride - ph, at % stride - pw
            offsets.append(iy * iw + ix if 0 <= iy < ih and 0 <= ix < iw else None)
        if any(o is not None for o in offsets):
            build = _pair_shuffle(offsets, True)
            if build is None:
                return None
            padded.append(build)
        else:
            padded.append(None)
    windows = _flat_windows(p, stride, ph, pw, False)
    if windows is None:  # a stride-2 window over three padded registers: the input plane's, masked
        padded, windows = [], _flat_windows(p, iw, 0, 0, True)
    if windows is None:
        return None
    return FlatPlan(-(-ih * iw // 64), padded, windows)


def _flat_windows(
    p: dict[str, Any], stride: int, top: int, left: int, masked: bool
) -> list[list[Shuffle]] | None:
    """The flat form's windows, each vector's for each filter row, from a plane whose input rows lie
    ``stride`` bytes apart after ``top`` rows and ``left`` columns of padding: the padded plane
    (``top``, ``left`` the convolution's padding: every byte a tap reads is there), or the input plane
    itself (0, 0, ``masked``: a tap outside it is padding, by the mask; ``reg`` -1: every tap)."""
    ih, iw, oh, ow, fh, fw = (p[k] for k in ("ih", "iw", "oh", "ow", "fh", "fw"))
    sh, sw, ph, pw, dh = (p[k] for k in ("sh", "sw", "ph", "pw", "dh"))
    windows: list[list[Shuffle]] = []
    for v in range(-(-oh * ow // 16)):
        vector = []
        for kh in range(fh):
            taps: list[int | None] = []
            for j in range(16):
                oy, ox = divmod(16 * v + j, ow)
                iy = oy * sh - ph + kh * dh
                for b in range(4):
                    ix = ox * sw - pw + b
                    inside = oy < oh and b < fw and (not masked or (0 <= iy < ih and 0 <= ix < iw))
                    taps.append((iy + top) * stride + ix + left if inside else None)
            if not any(t is not None for t in taps):  # every tap padding: the constant 128s
                vector.append(Shuffle(-1, ()))
                continue
            window = _pair_shuffle(taps, masked)
            if window is None:
                return None
            vector.append(window)
        windows.append(vector)
    return windows


PAD_BYTES = 32 << 10  # the largest padded plane (stack bytes) the depthwise window mode copies
# the copy pays for itself on stride-1 rows this wide (measured: 56 and 112 columns gain 7-10%); on
# rows of 28 or 14 and at stride 2 (two input rows an output row) the copy and the loads that wait
# for its stores cost more than the flips they save
PAD_MIN_OW = 48


def _padded_plane(p: dict[str, Any]) -> tuple[int, int, int] | None:
    """The geometry of a depthwise window-mode plane padded in a stack buffer, flipped (+ 128): (top
    padding rows, row stride, buffer bytes). Input row iy is buffer row iy + top, its column ix at
    ix + pw; every byte a valid output column reads outside the input is 128, and the buffer holds every
    row a block of ``DW_ROWS`` output rows reads plus one 64-byte load's overrun. None where it is
    bigger than ``PAD_BYTES``."""
    ih, iw, oh, ow, fh, sh, sw, ph, pw, dh = (
        p[k] for k in ("ih", "iw", "oh", "ow", "fh", "sh", "sw", "ph", "pw", "dh")
    )
    rows = min(DW_ROWS, oh)
    last_block = (oh - 1) // rows * rows
    bottom = last_block * sh - ph + (rows - 1) * sh + (fh - 1) * dh  # the last input row read
    if sh != 1 or sw != 1 or ow < PAD_MIN_OW:
        return None
    right = max(0, (ow - 1) * sw + 3 - pw - iw + 1)  # columns read past the row (a dword's four bytes)
    stride = pw + iw + right
    height = max(bottom + ph + 1, ph + ih)
    size = (height * stride + 64 + 63) // 64 * 64 + 64
    return None if size > PAD_BYTES else (ph, stride, size)


def _island_rows4(p: dict[str, Any], accs: list[str], stores: str) -> str:
    """Four accumulators' int8 island results through ``xm_qisland_lut_rows4`` as ``b`` (accumulator
    i's 16 bytes in 128-bit lane i), then ``stores``: a channel's affine form where it has one
    (``fa != 0``), else the exact epilogue."""
    forms = [island_lut_index(p, a, "fb") or ("", "") for a in accs]
    group = []
    for lanes in ([form[1] for form in forms], [form[0] for form in forms]):
        if lanes[0]:
            island = f"xm_qisland_lut_rows4({', '.join(lanes)}, island_lo, island_hi)"
            group.append(f"{{ const __m512i b = {island}; {stores} }}")
    both = len(group) == 2
    return " else ".join(f"if (fa != 0.f) {c}" if i == 0 and both else c for i, c in enumerate(group))


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
            # a full vector's row stores straight from the register (vextracti32x4 to memory takes no
            # shuffle port, the masked store's extraction does); a row's last partial vector is masked
            full, masked = (" ".join(
                f"if (r0 + {g + i} < {oh}) {store.format(at=f'yp + (long)(r0 + {g + i}) * {ow} + q0', i=i)}"
                for i in range(4)
            ) for store in (FULL_STORE, MASKED_STORE))  # fmt: skip
            stores = full if ow % 16 == 0 else f"if (q0 + 16 <= {ow}) {{ {full} }} else {{ {masked} }}"
            groups.append(_island_rows4(p, [f"a{g + i}" for i in range(4)], stores))
        return "\n          ".join(groups)

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        plan = _flat_plan(p) if p["mode"] == "window" else None
        if plan is None or island_lut_index(p, "a0", "fb") is None:
            return super().render(em, sym, p)
        return self._render_flat(sym, p, plan)

    def _render_flat(self, sym: str, p: dict[str, Any], plan: FlatPlan) -> str:
        """A small plane (``_flat_plan``): the plane's bytes (+ 128) in registers ``Q0..``, padded in
        registers ``P0..`` (one masked ``vpermi2b`` each), the output pixels in plane order 16 to a
        vector (a 7x7 plane's four vectors, where its rows fill 7 of 16 lanes), each filter row's
        windows by one ``vpermi2b`` from ``P``, and four vectors through one table island and one
        64-byte store."""
        n, c, ih, iw, oh, ow, fh = (p[k] for k in ("n", "ic", "ih", "iw", "oh", "ow", "fh"))
        otype = _out_ctype(p["out"])
        plane = ih * iw
        builds = [b for b in plan.padded if b is not None]
        table = builds + [w for vector in plan.windows for w in vector if w.reg >= 0]
        idx_rows = ",\n    ".join("{" + ", ".join(map(str, t.index)) + "}" for t in table)
        masks = ", ".join(f"0x{t.mask:016x}ull" for t in table)

        def shuffle(family: str, at: int) -> str:
            t, idx = table[at], f"_mm512_load_si512((const void*)flat_idx[{at}])"
            if not t.mask:
                return f"_mm512_permutex2var_epi8({family}{t.reg}, {idx}, {family}{t.reg + 1})"
            mask = f"(__mmask64)flat_mask[{at}]"
            return f"_mm512_mask2_permutex2var_epi8({family}{t.reg}, {idx}, {mask}, {family}{t.reg + 1})"

        regs = [
            f"const __m512i Q{r} = _mm512_xor_si512(_mm512_maskz_loadu_epi8("
            f"0x{(1 << min(64, plane - 64 * r)) - 1:x}ull, xp + {64 * r}), flip);"
            for r in range(plan.raw)
        ] + [f"const __m512i Q{plan.raw} = flip; (void)Q{plan.raw};"]
        for r, build in enumerate(plan.padded):
            value = "flip" if build is None else shuffle("Q", builds.index(build))
            regs.append(f"const __m512i P{r} = {value};")
        regs.append(f"const __m512i P{len(plan.padded)} = flip; (void)P{len(plan.padded)};")
        source = "P" if plan.padded else "Q"
        groups, at = [], len(builds)
        for g in range(0, len(plan.windows), 4):
            accs = [f"a{i}" for i in range(4)]
            steps = []
            for v, vector in enumerate(plan.windows[g : g + 4]):
                for kh, w in enumerate(vector):
                    window = "flip" if w.reg < 0 else shuffle(source, at)
                    steps.append(f"XM_DPBUSD({accs[v]}, {window}, wr[{kh}]);")
                    at += w.reg >= 0
            count = min(64, oh * ow - 16 * g)
            store = f"_mm512_mask_storeu_epi8(yp + {16 * g}, 0x{(1 << count) - 1:x}ull, b);"
            groups.append(
                "{ " + " ".join(f"__m512i {a} = bv;" for a in accs) + "\n      "
                + "\n      ".join(steps) + "\n      " + _island_rows4(p, accs, store) + " }"
            )
        work = n * c * oh * ow * fh * p["fw"]
        body = "\n    ".join(groups)
        return exact(f"""
static const uint8_t {sym}_idx[{len(table)}][64] __attribute__((aligned(64))) = {{
    {idx_rows}}};
static const unsigned long long {sym}_mask[{len(table)}] = {{{masks}}};
{_depthwise_signature(sym, p, otype)}
  const uint8_t (*flat_idx)[64] = {sym}_idx;
  const unsigned long long* flat_mask = {sym}_mask;
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  {_depthwise_plane_loop(p, work, otype, "wr", fh)}
    {" ".join(regs)}
    {body}
  }}
}}
""")

    def _plane_prologue(self, p: dict[str, Any]) -> str:
        """The plane's bytes + 128 in the padded stack buffer ``pad`` (``_padded_plane``), where one
        fits: each input row flipped once (64 bytes per ``vpxor``), not once per window that reads it."""
        geometry = _padded_plane(p)
        if geometry is None:
            return ""
        top, stride, size = geometry
        ih, iw, pw = p["ih"], p["iw"], p["pw"]
        chunks = -(-stride // 64)  # a row's stores reach the next row's left padding
        rows = " ".join(
            f"_mm512_storeu_si512((void*)(dst + {64 * k}), _mm512_xor_si512(_mm512_maskz_loadu_epi8("
            f"0x{(1 << max(0, min(64, iw - 64 * k))) - 1:x}ull, src + {64 * k}), flip));"
            for k in range(chunks)
        )
        return f"""uint8_t pad[{size}] __attribute__((aligned(64)));
    {{
      const __m512i flip = _mm512_set1_epi8((char)0x80);
      for (int i = 0; i < {top * stride + pw}; i += 64) _mm512_storeu_si512((void*)(pad + i), flip);
      for (int iy = 0; iy < {ih}; ++iy) {{
        const int8_t* src = xp + (long)iy * {iw};
        uint8_t* dst = pad + (long)(iy + {top}) * {stride} + {pw};
        {rows}
      }}
      for (int i = {(top + ih) * stride}; i + 64 <= {size}; i += 64)
        _mm512_storeu_si512((void*)(pad + i), flip);
    }}"""

    def _narrow_columns(self, p: dict[str, Any]) -> tuple[int, str]:
        """A plane's last 8 or fewer output columns (56 = 3 * 16 + 8) two rows to a vector where the
        epilogue is the island table's (``xm_q8_window8x2_vbmi``; blocks of 8 rows, four vectors):
        half the vectors, products and epilogues the 16-column blocks would spend on them."""
        ih, iw, oh, ow, fh, sh, sw, ph, pw, dh = (
            p[k] for k in ("ih", "iw", "oh", "ow", "fh", "sh", "sw", "ph", "pw", "dh")
        )
        narrow = ow % 16
        if not 0 < narrow <= 8 or ow < 16 or island_lut_index(p, "a0", "fb") is None:
            return 0, ""
        idx2 = [64 * (j // 8) + sw * (j % 8) + b for j in range(16) for b in range(4)]
        uses: dict[int, list[tuple[int, int]]] = {}  # a pair's first input row (from iy0): (pair, kh)
        for pair in range(4):
            for kh in range(fh):
                uses.setdefault(2 * pair * sh + kh * dh, []).append((pair, kh))
        steps = [
            f"{{ const __m512i x = xm_q8_window8x2_vbmi(xp, iy0 + {t}, {sh}, c0, m2, idx2, {ih}, {iw});"
            + "".join(f" XM_DPBUSD(a{pair}, x, wr[{kh}]);" for pair, kh in pairs)
            + " }"
            for t, pairs in sorted(uses.items())
        ]
        lo = (1 << narrow) - 1
        stores = " ".join(
            f"if (r0 + {2 * i + half} < {oh}) _mm_mask_storeu_epi8(yp + (long)(r0 + {2 * i + half}) * {ow}"
            f" + q0{' - 8' if half else ''}, 0x{lo << 8 * half:x}, _mm512_extracti32x4_epi32(b, {i}));"
            for i in range(4)
            for half in (0, 1)
        )
        epilogue = _island_rows4(p, [f"a{i}" for i in range(4)], stores)
        newline = "\n        "
        return narrow, f"""{{
      const int q0 = {ow - narrow}, c0 = q0 * {sw} - {pw};
      const __mmask64 m2 = xm_q8_span64(c0, {7 * sw + 4}, {iw});
      const __m512i idx2 = _mm512_set_epi8({", ".join(str(i) for i in reversed(idx2))});
      for (int r0 = 0; r0 < {oh}; r0 += 8) {{
        const int iy0 = r0 * {sh} - {ph};
        __m512i a0 = bv, a1 = bv, a2 = bv, a3 = bv;
        {newline.join(steps)}
        {epilogue}
      }}
    }}"""

    def _window_builder(self, p: dict[str, Any]) -> tuple[str, str]:
        """The window mode's row windows by one ``vpermb``: of a load from the padded plane
        (``_plane_prologue``) where there is one, else ``xm_q8_window16_vbmi`` (masked load, flip)."""
        sw = p["sw"]
        idx = ", ".join(str(sw * j + b) for j in range(16) for b in range(4))
        decls = f"const __m512i idx = _mm512_set_epi8({', '.join(reversed(idx.split(', ')))});"
        geometry = _padded_plane(p)
        if geometry is None:
            return decls, "xm_q8_window16_vbmi(xp, {row}, c0, m, idx, {ih}, {iw})"
        top, stride, _ = geometry
        load = f"_mm512_loadu_si512((const void*)(pad + (long)({{row}} + {top}) * {stride} + q0 * {sw}))"
        return decls, f"_mm512_permutexvar_epi8(idx, {load})"

class Conv2dQ8Relu6AmxVbmi(_IslandByTable, Conv2dQ8Relu6Amx):
    producer_isa = AMX_ISA


KERNEL_UNITS = (Conv2dQ8Relu6Vbmi(), ConvDepthwiseQ8Relu6Vbmi(), Conv2dQ8Relu6AmxVbmi())

__all__ = ["ISA", "KERNEL_UNITS", "VBMI_SUPPORT"]
