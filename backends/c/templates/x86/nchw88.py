"""NCHW88 kernels for x86 (AVX2 + FMA, float16 storage through F16C): MegEngine's x86 ``NCHW88``
direct convolutions, registered on the ``avx2`` ISA (so ``x86-avx512`` finds them too).

* ``conv2d_nchw88``: activations ``(N, C/8, H, W, 8)``; filters dense ``KCRSc8k8``, group
  ``GKCRSc8k8`` or, for a first layer with fewer than 8 plain NCHW input channels, hybrid ``KRSCk8``.
  An output tile is ``J`` blocks of 8 output channels x ``I`` output columns held in ``J * I``
  vector accumulators (2 x 6, or 3 x 4 for short rows such as 7 columns: 12 of the 16 ymm
  registers, :meth:`ConvNchw88.tile`); per input channel, ``J`` filter vectors (8 output channels
  each) are multiplied by ``I`` broadcast input values; a row's columns are split into tiles of
  balanced widths (no narrow tail tile). Input channels run in chunks whose filters (one tile's,
  :data:`WCHUNK_BYTES`) stay in L1 while the tile sweeps up to :data:`UNITS` output positions; a
  chunk other than the last stores float32 partial sums into the output, which the next chunk
  reloads (float16 storage: one chunk), and only the last applies the epilogue. On AVX-512 the next
  chunk's filters are prefetched into L2 while a chunk's units run, a few lines per reduction step
  of each micro-kernel call (:data:`PREFETCH_STEP`).
* ``conv2d_nchw88_chan``: channel-wise (depthwise) ``C11RSc8`` filters: 8 channels per vector, so
  every tap is one vector FMA per output column, no broadcasts.
* ``pool2d_nchw88``: max / average pooling on 8-channel vectors.
* ``typecvt`` (``avx2``): float16 <-> float32 with ``_mm256_cvtph_ps`` / ``_mm256_cvtps_ph``; other
  conversions fall back to the portable template.

``dtype`` ``"f16"`` is float16 storage with float32 compute (``+io16xc32``): inputs, outputs,
filters and residuals are float16 in memory (converted on load / store), accumulation is float32;
the input is widened while it is copied into the padded workspace, the bias is packed as float32.

Padding is done once per image by a copy into the workspace (zero borders), so the inner loops have
no bounds checks. Every activation and filter offset is generated from
:meth:`dialects.layout.LayoutSpec.dim_strides` (:func:`offset`): no layout math lives here. The
micro-kernels are shared by every convolution of a model (runtime strides, one copy per
``(J, I)``), each specialised convolution only holds its loops and constants.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import Operation

import backends.c.examples as E
from backends.c.match import blocked_conv_geometry, code, conv_bias_epilogue, logical, pool_geometry, storage
from backends.c.templates import Template, conv_sym, epilogue_sym, plane_sym, sym_join
from backends.c.templates.portable.generic import omp_for, omp_parallel
from backends.c.templates.portable.typed import Relayout, TypeCvt
from backends.c.templates.x86.gemm import broadcast_fma
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.layout import SPECS, Layout, LayoutSpec
from passes.lowering.kernels import FULL_EPILOGUE, EpilogueSupport, Lowered, const_array

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

VEC = 8
WCHUNK_BYTES = 8192  # bytes of one register tile's filters per input-channel chunk (L1 resident)
# AVX2 register tiles (J filter vectors x I columns): 12 accumulators + J weights + 1 broadcast <= 16
TILES_AVX2 = ((2, 6), (3, 4))
UNITS = 64  # register tiles (row, column tile) that one filter chunk sweeps while it sits in L1
# the smallest filters (bytes) whose next chunks are prefetched: smaller ones stay in L2 between the
# layer's tiles, or come from L3 quickly, and the prefetches cost more than they hide (MobileNetV2's
# 221 KB 96 -> 576 and ResNet-50's 256 KB 128 -> 512 1x1 convs: 3-5% slower with them); from
# 512 KB (a quarter of L2) up they save 9-25% where the filters come from memory
PREFETCH_MIN_BYTES = 512 << 10
I_CHAN = 8  # columns per channel-wise tile
ACT_CODES = {"identity": 0, "relu": 1, "relu6": 2, "sigmoid": 3, "hswish": 4}
# float32: bias, residual, every activation (xm_n88_act). Float16 storage computes in float32 and
# rounds once at the store: of the activations only those commuting with that rounding fuse, so the
# fused kernel stores exactly what the convolution followed by the activation would
EPILOGUES = {
    "float32": FULL_EPILOGUE,
    "float16": EpilogueSupport(activations=frozenset({"identity", "relu", "relu6"})),
}
DENSE_FILTERS = {"dense": Layout.KCRSc8k8, "group": Layout.GKCRSc8k8, "hybrid": Layout.KRSCk8}


def strides(layout: Layout | LayoutSpec | None, logical_shape: Sequence[int]) -> dict[str, int]:
    """Element strides of each physical dim (``"C/8"``, ``"C%8"``, ``"H"``, ...) of a contiguous
    tensor, from the layout's one definition; ``None`` is plain row-major NCHW / KCRS."""
    if layout is None:
        names = "NCHW" if len(logical_shape) == 4 else "KCRS"
        return {n: int(np.prod(logical_shape[i + 1 :])) for i, n in enumerate(names)}
    spec = layout if isinstance(layout, LayoutSpec) else SPECS[layout]
    return spec.dim_strides(logical_shape)


def offset(
    layout: Layout | LayoutSpec | None, logical_shape: Sequence[int], coords: Mapping[str, str]
) -> str:
    """The C expression of the element offset of ``coords`` (physical dim name -> C expression)."""
    st = strides(layout, logical_shape)
    terms = [f"(long)({expr}) * {st[dim]}L" for dim, expr in coords.items() if st[dim] and expr != "0"]
    return " + ".join(terms) or "0L"


# ----------------------------------------------------------------------------------------------
# Shared C: loads/stores per storage type, vector activations, micro-kernels


def _ld(dt: str, p: str) -> str:
    return (
        f"_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)({p})))" if dt == "f16" else f"_mm256_loadu_ps({p})"
    )


def _st(dt: str, p: str, v: str) -> str:
    if dt == "f16":
        return f"_mm_storeu_si128((__m128i*)({p}), _mm256_cvtps_ph({v}, _MM_FROUND_TO_NEAREST_INT))"
    return f"_mm256_storeu_ps({p}, {v})"


def _ctype(dt: str) -> str:
    return "uint16_t" if dt == "f16" else "float"


COMMON = """#include <stdint.h>
#ifndef XM_N88_COMMON
#define XM_N88_COMMON
static inline __m256 xm_n88_act(__m256 v, int act) {
  switch (act) {
    /* maxps / minps return their second operand when either is NaN: v goes second, so NaN stays */
    case 1: return _mm256_max_ps(_mm256_setzero_ps(), v);
    case 2: return _mm256_min_ps(_mm256_set1_ps(6.f), _mm256_max_ps(_mm256_setzero_ps(), v));
    case 3: { float t[8]; _mm256_storeu_ps(t, v); for (int l = 0; l < 8; ++l) t[l] = xm_act_sigmoid(t[l]);
              return _mm256_loadu_ps(t); }
    case 4: { const __m256 r = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, _mm256_set1_ps(3.f)),
                _mm256_setzero_ps()), _mm256_set1_ps(6.f));
              return _mm256_mul_ps(v, _mm256_mul_ps(r, _mm256_set1_ps(1.f / 6.f))); }
    default: return v;
  }
}
#endif
"""


def _epilogue(dt: str, acc: str, bias: str, res: str, y: str) -> list[str]:
    """Bias (float32, NULL: none), residual (``dt``, NULL: none), activation, store as ``dt``."""
    return [
        f"    __m256 v = {acc};",
        f"    if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps({bias}));",
        f"    if (res) v = _mm256_add_ps(v, {_ld(dt, res)});",
        "    v = xm_n88_act(v, act);",
        f"    {_st(dt, y, 'v')};",
    ]


def _fma_loop(
    j: int,
    i: int,
    cb: int,
    wt: str,
    x_ow: int,
    vtype: str,
    lanes: int,
    load_w: Callable[[str], str],
    bcast_x: Callable[[str], str],
    fma: str,
    per_tap: Sequence[str] = (),
) -> list[str]:
    """The dense micro-kernel's reduction over input channels and the filter window, for one ISA:
    ``j`` filter vectors times ``i`` broadcast inputs into the ``c{a}_{b}`` accumulators
    (``per_tap``: statements each step runs first)."""
    lines = [
        "  for (int k = 0; k < nk; ++k)",
        "  for (int kh = 0; kh < fh; ++kh)",
        "  for (int kw = 0; kw < fw; ++kw) {",
        "    const float* xp = x + k * x_k + kh * x_kh + kw * x_kw;",
        # at stride 1 a tap's columns are the previous tap's shifted by one: gcc's predictive
        # commoning then carries the inputs across taps as scalars (spilled, and broadcast from a
        # register on the shuffle port, an FMA port) instead of broadcasting them from memory; an
        # opaque pointer per tap keeps every broadcast a load (the 512-channel 7x7 3x3 conv of
        # ResNet: 106 -> 145 GFLOP/s)
        "    __asm__(\"\" : \"+r\"(xp));",
        f"    const {wt}* wp = w + k * w_k + kh * w_kh + kw * w_kw;",
        *per_tap,
    ]
    for c in range(cb):
        lines.append("    {")
        lines += broadcast_fma(
            vtype,
            [load_w(f"wp + {a} * w_j + {c * lanes}") for a in range(j)],
            [bcast_x(f"xp + {b * x_ow + c}") for b in range(i)],
            lambda b, a: f"c{a}_{b}",
            lambda x, w, acc: f"{fma}({w}, {x}, {acc})",
            vec="w",
            scalar="xb",
        )
        lines.append("    }")
    lines.append("  }")
    return lines


def ukr_name(isa: str, dt: str, cb: int, x_ow: int, prefetch: bool = False) -> str:
    """The name prefix of the dense NCHW88 micro-kernels of ``isa`` (``avx2``: :func:`dense_ukr`,
    ``avx512``: :func:`dense_ukr512`); a ``J x I`` tile's function is ``<prefix>_JxI``."""
    return f"xm_n88_{isa}_{'conv_pf' if prefetch else 'conv'}_{dt}_c{cb}_o{x_ow}"


def tile_calls(
    ukr: str, jmax: int, widths: Sequence[int], call_args: str, kernel: Callable[[int, int], str]
) -> tuple[list[str], str]:
    """The calls of micro-kernel ``{ukr}_{j}x{i}`` chosen by a tile's ``jv`` (1..``jmax``) and ``iv``
    (one of ``widths``), and those micro-kernels' definitions (``kernel(j, i)``, shared by name)."""
    inner = []
    for j in range(1, jmax + 1):
        variants = [(str(i), f"{ukr}_{j}x{i}") for i in widths]
        inner.append(f"if (jv == {j}) {_dispatch('iv', variants, call_args)}")
    shared = "".join(shared_ukr(f"{ukr}_{j}x{i}", kernel(j, i)) for j in range(1, jmax + 1) for i in widths)
    return inner, shared


def shared_ukr(name: str, code: str) -> str:
    """A micro-kernel's definition under its include guard (its name in capitals): one definition per
    translation unit, whichever kernels call it."""
    return _guarded(name.upper(), code)


def dense_ukr(j: int, i: int, cb: int, dt: str, x_ow: int) -> str:
    """``J x I`` tile over ``nk`` input-channel steps of ``cb`` channels (8: blocked input, 1: plain
    input of the hybrid first layer), every tap of an ``fh x fw`` window; ``x_ow`` (the input
    distance of neighbouring output columns) is a constant, so one register addresses every column."""
    name = f"{ukr_name('avx2', dt, cb, x_ow)}_{j}x{i}"
    wt, ot = _ctype(dt), _ctype(dt)
    lines = [
        f"static void {name}(const float* restrict x, const {wt}* restrict w, int nk, int fh, int fw,",
        "    long x_k, long x_kh, long x_kw, long w_k, long w_kh, long w_kw, long w_j,",
        f"    const float* bias, const {ot}* res, {ot}* y, long y_j, long y_i, int act, int nb, int acc) {{",
        "  (void)nb;",
    ]
    for a in range(j):
        for b in range(i):
            init = "_mm256_setzero_ps()"
            if dt == "f32":  # a later input-channel chunk: continue from the partial sums in y
                init = f"(acc & 1) ? _mm256_loadu_ps(y + {a} * y_j + {b} * y_i) : {init}"
            lines.append(f"  __m256 c{a}_{b} = {init};")
    lines += _fma_loop(
        j, i, cb, wt, x_ow, "__m256", VEC,
        lambda q: _ld(dt, q), lambda q: f"_mm256_broadcast_ss({q})", "_mm256_fmadd_ps",
    )  # fmt: skip
    if dt == "f32":  # not the last input-channel chunk: store the partial sums, no epilogue
        lines.append("  if (!(acc & 2)) {")
        for a in range(j):
            lines += [f"    _mm256_storeu_ps(y + {a} * y_j + {b} * y_i, c{a}_{b});" for b in range(i)]
        lines.append("    return;\n  }")
    else:
        lines.append("  (void)acc;")
    for a in range(j):
        for b in range(i):
            lines.append("  {")
            lines += _epilogue(
                dt,
                f"c{a}_{b}",
                f"bias + {a * VEC}",
                f"res + {a} * y_j + {b} * y_i",
                f"y + {a} * y_j + {b} * y_i",
            )
            lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def chan_ukr(i: int, dt: str) -> str:
    """Channel-wise tile: ``I`` output columns of 8 channels, one vector FMA per tap and column."""
    name = f"xm_n88_chan_{dt}_{i}"
    wt = ot = _ctype(dt)
    lines = [
        f"static void {name}(const float* restrict x, const {wt}* restrict w, int fh, int fw,",
        "    long x_kh, long x_kw, long x_ow, long w_kh, long w_kw,",
        f"    const float* bias, const {ot}* res, {ot}* y, long y_i, int act) {{",
    ]
    for b in range(i):
        lines.append(f"  __m256 c{b} = _mm256_setzero_ps();")
    lines += [
        "  for (int kh = 0; kh < fh; ++kh)",
        "  for (int kw = 0; kw < fw; ++kw) {",
        "    const float* xp = x + kh * x_kh + kw * x_kw;",
        f"    const __m256 wv = {_ld(dt, 'w + kh * w_kh + kw * w_kw')};",
    ]
    for b in range(i):
        lines.append(f"    c{b} = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp + {b} * x_ow), c{b});")
    lines.append("  }")
    for b in range(i):
        lines.append("  {")
        lines += _epilogue(dt, f"c{b}", "bias", f"res + {b} * y_i", f"y + {b} * y_i")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _guarded(key: str, body: str) -> str:
    """Shared code emitted once per translation unit however many kernels include it."""
    return f"#ifndef XM_{key}\n#define XM_{key}\n{body}#endif\n"


def _dispatch(name: str, variants: Sequence[tuple[str, str]], args: str) -> str:
    """``switch`` over (case, function) pairs calling each with ``args``."""
    cases = " ".join(f"case {case}: {fn}({args}); break;" for case, fn in variants)
    return f"switch ({name}) {{ {cases} default: break; }}"


# ----------------------------------------------------------------------------------------------
# Padded (and widened) input copies


def _pad_copy(
    dt: str, src_layout: Layout | None, c: int, ih: int, iw: int, ph: int, pw: int, omp: str = ""
) -> tuple[str, int]:
    """C statements copying image ``n`` of ``x`` into ``xs`` (float32, zero borders written row by
    row), and the float count of the padded copy. Both tensors are indexed through their layouts.
    ``omp``: the worksharing pragma of the (channel block, row) loop inside the caller's region."""
    ihp, iwp = ih + 2 * ph, iw + 2 * pw
    if src_layout is None:  # plain NCHW (hybrid first layer): one padded plane per channel
        shp, pshp = (1, c, ih, iw), (1, c, ihp, iwp)
        row = offset(None, pshp, {"C": "ch", "H": "rp"})
        x_at = offset(None, shp, {"C": "ch", "H": "rp - " + str(ph), "W": "q"})
        conv = "(float)" if dt == "f32" else "xm_h2f"
        body = f"""
    {omp}
    for (int ch = 0; ch < {c}; ++ch)
      for (int rp = 0; rp < {ihp}; ++rp) {{
        float* d = xs + {row};
        if (rp < {ph} || rp >= {ph + ih}) {{ for (int q = 0; q < {iwp}; ++q) d[q] = 0.f; continue; }}
        for (int q = 0; q < {pw}; ++q) d[q] = 0.f;
        for (int q = 0; q < {iw}; ++q) d[{pw} + q] = {conv}(xn[{x_at}]);
        for (int q = {pw + iw}; q < {iwp}; ++q) d[q] = 0.f;
      }}"""
        return body, c * ihp * iwp
    cb = -(-c // VEC)
    shp, pshp = (1, cb * VEC, ih, iw), (1, cb * VEC, ihp, iwp)
    pst = strides(src_layout, pshp)
    row = offset(src_layout, pshp, {"C/8": "cb", "H": "rp"})
    x_at = offset(src_layout, shp, {"C/8": "cb", "H": "rp - " + str(ph), "W": "q"})
    wst = pst["W"]
    body = f"""
    {omp}
    for (int cb = 0; cb < {cb}; ++cb)
      for (int rp = 0; rp < {ihp}; ++rp) {{
        float* d = xs + {row};
        const __m256 z = _mm256_setzero_ps();
        if (rp < {ph} || rp >= {ph + ih}) {{
          for (int q = 0; q < {iwp}; ++q) _mm256_storeu_ps(d + q * {wst}, z);
          continue;
        }}
        for (int q = 0; q < {pw}; ++q) _mm256_storeu_ps(d + q * {wst}, z);
        for (int q = 0; q < {iw}; ++q) _mm256_storeu_ps(d + (q + {pw}) * {wst}, {_ld(dt, f"xn + {x_at}")});
        for (int q = {pw + iw}; q < {iwp}; ++q) _mm256_storeu_ps(d + q * {wst}, z);
      }}"""
    return body, cb * VEC * ihp * iwp


def _subsample_copy(dt: str, p: dict[str, Any], omp: str) -> str:
    """C statements copying every ``sh``-th row and ``sw``-th column of image ``n`` of ``x``
    (NCHW88, ``dt``) into ``xs`` (float32 NCHW88, ``OH x OW``): the input of a strided 1x1
    convolution seen as a stride-1 one. ``omp``: as :func:`_pad_copy`'s."""
    cb = -(-p["ic"] // VEC)
    shp, sshp = (1, cb * VEC, p["ih"], p["iw"]), (1, cb * VEC, p["oh"], p["ow"])
    d_at = offset(Layout.NCHW88, sshp, {"C/8": "cb", "H": "r", "W": "q"})
    x_at = offset(Layout.NCHW88, shp, {"C/8": "cb", "H": f"r * {p['sh']}", "W": f"q * {p['sw']}"})
    return f"""
    {omp}
    for (int cb = 0; cb < {cb}; ++cb)
      for (int r = 0; r < {p["oh"]}; ++r)
        for (int q = 0; q < {p["ow"]}; ++q) _mm256_storeu_ps(xs + {d_at}, {_ld(dt, f"xn + {x_at}")});"""


H2F = """#ifndef XM_H2F
#define XM_H2F
static inline float xm_h2f(uint16_t h) { return _cvtsh_ss(h); }
#endif
"""


def static_share(sizes: Sequence[int], threads: int) -> float:
    """The busiest thread's work over the mean, for OpenMP's ``schedule(static)`` (contiguous
    ranges, the first ``len % threads`` one iteration longer) of iterations of these sizes."""
    q, r = divmod(len(sizes), threads)
    starts = [t * q + min(t, r) for t in range(threads + 1)]
    busiest = max(sum(sizes[starts[t] : starts[t + 1]]) for t in range(threads))
    return busiest * threads / max(1, sum(sizes))


def balanced_block(items: int, units: int, block: int, threads: Sequence[int] = (2,)) -> int:
    """Units per block of a parallel loop over ``items`` x (``units`` in blocks): ``block`` or a
    smaller one (down to a quarter) whose blocks a static schedule shares out most evenly over
    ``threads`` (ties go to the larger block, which sweeps each L1 filter chunk over more units).
    A 1x1 convolution at 7x7 or 14x14 has 3 or 5 output-channel tiles of one block each: two
    threads would do 2 and 1 (or 3 and 2) tiles; halved blocks make that 3 and 3 (5 and 5)."""

    def cost(b: int) -> float:
        per_item = [min(b, units - u) for u in range(0, units, b)]
        return max(static_share(per_item * items, t) for t in threads)

    candidates = range(block, max(1, block // 4) - 1, -1)
    best = min(cost(b) for b in candidates)
    return next(b for b in candidates if cost(b) <= best * 1.02)


def _signature(ct: str, p: dict[str, Any]) -> tuple[str, str]:
    """The C parameters of a convolution (untyped pointers, as the emitter passes them) and the
    typed views of them."""
    names = ["x", "w", *(["bias"] if p["bias"] else []), *(["res"] if p["residual"] else [])]
    types = {"x": ct, "w": ct, "bias": "float", "res": ct}
    args = ", ".join([*(f"const void* {a}_" for a in names), "void* y_", "unsigned char* ws", "int nt"])
    casts = " ".join(
        [*(f"const {types[a]}* {a} = (const {types[a]}*){a}_;" for a in names), f"{ct}* y = ({ct}*)y_;"]
    )
    return args, casts


def _conv_opening(
    sym: str,
    args: str,
    casts: str,
    ct: str,
    p: dict[str, Any],
    region: str,
    x_img: str,
    y_img: str,
    pad_body: str,
    xbase: str,
    copy: bool,
) -> str:
    """The C opening of an NCHW88 convolution (dense and channel-wise): typed views of the
    arguments, the parallel region, the image loop with the image's input / output / residual
    pointers and padded copy, the source ``xb`` (``xbase``: the copy or the input) and the
    worksharing pragma of the caller's loop over the image's work, which follows."""
    n = p["n"]
    return f"""static void {sym}({args}) {{
  {casts}
  float* xs = (float*)ws;
  (void)xs;
  {region}
  for (int n = 0; n < {n}; ++n) {{
    const {ct}* xn = x + {x_img};
    {ct}* yn = y + {y_img};
    const {ct}* rn = {"res + " + y_img if p["residual"] else "0"};
    (void)rn;
    {pad_body}
    const float* xb = (const float*){xbase};
    {omp_for(region, 2, nowait=n == 1 or not copy)}"""


FILTER_MODES = {
    Layout.KCRSc8k8: "dense",
    Layout.GKCRSc8k8: "group",
    Layout.KRSCk8: "hybrid",
    Layout.C11RSc8: "chan",
}


# the geometry a channel-wise or dense NCHW88 conv names first, in its parameters' order
_PLANE_KEYS = ("n", "ih", "iw", "oh", "ow", "fh", "fw", "sh", "sw", "ph", "pw", "dh", "dw")


def conv_nchw88(op: Operation, chan: bool) -> Lowered | None:
    assert isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
    p = op.params()
    if p["format"] != enums.Format.NCHW88 or p["mode"] != enums.ConvMode.CROSS_CORRELATION:
        return None
    x, w, *rest = op.operands
    geometry = blocked_conv_geometry(op, FILTER_MODES, 8)
    dt = storage(op)
    if geometry is None or (geometry["mode"] == "chan") != chan or dt is None or const_array(w) is None:
        return None
    oc = geometry["oc"]
    params: dict[str, Any] = {k: geometry[k] for k in _PLANE_KEYS}
    params.update(dtype=dt, bias=0, residual=0, act="identity")
    if chan:
        params["c"] = oc
    else:
        params.update({k: geometry[k] for k in ("mode", "ic", "oc", "groups")})
    operands: list[Any] = [x, w]
    if isinstance(op, T.ConvBiasOp):
        if any(L.layout_of(v.type) != Layout.NCHW88 for v in rest):  # type: ignore[arg-type]
            return None
        # a constant per-channel bias (read as float32) and/or a full-shape addend (bias or z)
        if not conv_bias_epilogue(
            op, params, operands, lambda v: logical(v) == (1, oc, 1, 1) and const_array(v) is not None
        ):
            return None
    return Lowered(params, operands)


class _Nchw88Base(Template):
    isa = "avx2"
    ops = (T.ConvolutionOp, T.ConvBiasOp)

    def _geometry(self, p: dict[str, Any]) -> dict[str, Any]:
        """Whether the input is copied (padding, float16 widening), and the shape conv loops see."""
        copy = bool(p["ph"] or p["pw"] or p["dtype"] == "f16")
        return {"copy": copy, "ihp": p["ih"] + 2 * p["ph"], "iwp": p["iw"] + 2 * p["pw"]}

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand == 2 and p["bias"]:  # the bias is read as float32 whatever the storage type
            return np.ascontiguousarray(np.asarray(array, np.float32).reshape(-1)), "bias_f32"
        if operand == 1 and p["dtype"] == "f16" and array.dtype != np.float16:
            return np.ascontiguousarray(array.astype(np.float16)), "f16"
        return None


class ConvNchw88(_Nchw88Base):
    """``conv2d_nchw88``: dense, group and hybrid (first layer) NCHW88 convolutions."""
    examples = (
        E.conv2d((2, 16, 23, 21), 40, 1, act="relu"),
        E.conv2d((1, 24, 9, 11), 32, 3, pad=1, residual=True),
        E.conv2d((2, 40, 13, 11), 24, 1, stride=2, act="h_swish"),
        E.conv2d((1, 16, 9, 9), 16, 3, pad=1, groups=2, act="relu"),
        E.conv2d((1, 3, 17, 15), 16, 3, stride=2, pad=1, act="relu"),
        # pointwise: few input channels, partial column tiles, input-channel chunks (test_x86_f32_pw)
        E.conv_case((2, 16, 23, 21, 40, 1, 1, 0, 1, 1, "relu")),
        E.conv_case((1, 24, 29, 31, 72, 1, 1, 0, 1, 1, "none")),
        E.conv_case((1, 200, 7, 7, 328, 1, 1, 0, 1, 1, "residual")),
        E.conv_case((2, 1032, 5, 5, 48, 1, 1, 0, 1, 1, "hswish")),
        # strided 1x1 on a subsampled copy (test_x86_f32_dense)
        E.conv_case((2, 40, 29, 27, 72, 1, 2, 0, 1, 1, "residual")),
        E.conv_case((1, 48, 15, 15, 48, 1, 3, 0, 1, 1, "none")),
    )

    family = "conv2d_nchw88"
    priority = 280
    epilogues = EPILOGUES

    def match(self, op: Operation) -> Lowered | None:
        return conv_nchw88(op, chan=False)

    kblock = VEC  # output channels per filter vector
    tiles: tuple[tuple[int, int], ...] = TILES_AVX2
    wchunk_bytes = WCHUNK_BYTES
    common = ""
    prefetch = False  # whether big filters' micro-kernels prefetch the next chunk's (:meth:`ukr`)

    def filter_spec(self, mode: str) -> LayoutSpec:
        return SPECS[DENSE_FILTERS[mode]]

    def tile(self, nvec: int, ow: int) -> tuple[int, int]:
        """The register tile (filter vectors J x columns I) of a conv with ``nvec`` filter vectors
        per group and ``ow`` output columns: the candidate of :attr:`tiles` with the most
        accumulators per tile on average, after balancing the columns over the row (14 = 7 + 7, not
        12 + 2) and the vectors over the tiles: too few independent accumulators leave the FMA
        latency exposed (a 7-column row is 4 + 3 columns, 7 x 2 accumulators; 3 x 4 keeps 10.5).
        Ties go to the first candidate."""

        def accs(t: tuple[int, int]) -> float:
            j, i = t
            return nvec / -(-nvec // j) * ow / -(-ow // i)

        return max(self.tiles, key=accs)

    def ukr(self, j: int, i: int, cb: int, dt: str, x_ow: int, prefetch: bool = False) -> str:
        assert not prefetch, "the AVX2 micro-kernels do not prefetch"
        return dense_ukr(j, i, cb, dt, x_ow)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("conv2d_nchw88", p["mode"], *conv_sym(p), p["dtype"], epilogue_sym(p))

    def _prefetch_next_chunk(self, b: dict[str, int]) -> tuple[str, str, str]:
        """C statements before a chunk's unit loop (the next chunk's filters: this tile's next input
        channels, else the next (tile, unit block)'s first ones), per unit (its slice of them) and
        the prefetching micro-kernel's last arguments (that slice): filters are read once per
        (chunk, unit block) from L3 or memory, and a small plane has too few units to hide that
        latency behind (ResNet-50's 7x7 1x1 convolutions read 4 MB of filters each). ``b``: the
        loop bounds and filter strides (elements) of :meth:`render`; ``tail``: what one vector
        block's last step reads beyond its start."""
        if not b["prefetch"]:
            return "", "", ""
        nk, kc, ublk, tiles, tb = (b[k] for k in ("nk", "kc", "ublk", "tiles", "tile_blocks"))
        per_vec = b["per_vec"]
        span = f"((long)(pnk - 1) * {b['w_k']}L + {b['tail']}L) * {b['esize']}"  # bytes per vector block
        before = f"""
        int pk = k0 + {kc}, pt = t;
        if (pk >= {nk}) {{ pk = 0; pt = ub + 1 < {b["nub"]} ? t : t + 1; }}
        const int last = pt >= {b["g"] * tiles};  /* nothing follows: no lines (pointers stay in w) */
        if (last) pt = t;
        const int pj0 = (pt % {tiles}) * {tb}, pnk = {nk} - pk < {kc} ? {nk} - pk : {kc};
        const int pnb = {b["njb"]} - pj0 < {tb} ? {b["njb"]} - pj0 : {tb};
        /* lines per vector block (one more for an unaligned start), none after the last chunk */
        const int plv = last ? 0 : (int)(({span} + 63) / 64) + 1;
        const long pvb = pnb > {per_vec} ? {b["w_j"] * b["esize"]}L : 0L;
        const char* pw = (const char*)(w + (long)(pt / {tiles}) * {b["w_g"]}L
                                         + (long)(pj0 / {per_vec}) * {b["w_j"]}L + (long)pk * {b["w_k"]}L);
        const int ppu = (plv + u1 - ub * {ublk} - 1) / (u1 - ub * {ublk});
        const int pps = (ppu + nkc * {b["taps"]} - 1) / (nkc * {b["taps"]});  /* lines a reduction step */"""
        unit = f"""
          const int pl0 = (u - ub * {ublk}) * ppu;
          const int pfn = plv - pl0 < ppu ? (plv - pl0 > 0 ? plv - pl0 : 0) : ppu;"""
        return before, unit, ", pw + (long)pl0 * 64, pvb, pfn, pps"

    @staticmethod
    def _subsampled(p: dict[str, Any]) -> bool:
        """A strided 1x1 convolution without padding: every ``sh``-th row and ``sw``-th column of
        the input, copied once into the workspace, make it a stride-1 one, which runs as one row of
        ``OH * OW`` columns (ResNet-50's downsampling 1x1 convs: 7 or 28 columns a row otherwise)."""
        geometry = (p["fh"], p["fw"], p["ph"], p["pw"])
        return p["mode"] != "hybrid" and geometry == (1, 1, 0, 0) and (p["sh"], p["sw"]) != (1, 1)

    def workspace(self, p: dict[str, Any]) -> int:
        if self._subsampled(p):
            return -(-p["ic"] // VEC) * VEC * p["oh"] * p["ow"] * 4
        geo = self._geometry(p)
        if not geo["copy"]:
            return 0
        c = p["ic"] if p["mode"] == "hybrid" else -(-p["ic"] // VEC) * VEC
        return c * geo["ihp"] * geo["iwp"] * 4

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        pointwise = (p["fh"], p["fw"], p["sh"], p["sw"], p["ph"], p["pw"]) == (1, 1, 1, 1, 0, 0)
        subsampled = self._subsampled(p)
        given = p  # the convolution's own input geometry (the remaps below change its view)
        if subsampled:
            p = {**p, "ih": p["oh"], "iw": p["ow"], "sh": 1, "sw": 1}
        if (pointwise or subsampled) and p["mode"] != "hybrid":
            # a 1x1 stride-1 conv maps pixel to pixel: H x W is one row of H * W columns in NCHW88
            # (W is contiguous in H), so the register tiles never straddle a short row's end
            p = {**p, "ih": 1, "iw": p["ih"] * p["iw"], "oh": 1, "ow": p["oh"] * p["ow"]}
        dt, mode, g = p["dtype"], p["mode"], p["groups"]
        n, ic, ih, iw, oc, oh, ow = (p[k] for k in ("n", "ic", "ih", "iw", "oc", "oh", "ow"))
        fh, fw, sh, sw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "dh", "dw"))
        geo = self._geometry(p)
        if subsampled:  # the subsampled copy is the source
            geo = {"copy": True, "ihp": ih, "iwp": iw}
        hybrid = mode == "hybrid"
        icg, ocg = ic // g, oc // g
        ocp = -(-oc // VEC) * VEC
        icp = ic if hybrid else -(-ic // VEC) * VEC
        cb = 1 if hybrid else VEC
        # activations: the source (padded copy or the input itself) and the output, via layout.py
        src_layout = None if hybrid else Layout.NCHW88
        src_shape = (1, icp, geo["ihp"], geo["iwp"]) if geo["copy"] else (n, icp, ih, iw)
        xs = strides(src_layout, src_shape)
        c_outer = "C" if hybrid else "C/8"
        x_k = xs[c_outer]
        x_kh, x_kw, x_ow = xs["H"] * dh, xs["W"] * dw, xs["W"] * sw
        x_row = xs["H"] * sh
        out_shape = (n, ocp, oh, ow)
        ys = strides(Layout.NCHW88, out_shape)
        # filter: the packed layout's strides over its logical shape
        kb = self.kblock
        fshape = (g, ocg, icg, fh, fw) if mode == "group" else (oc, icg, fh, fw)
        wst = strides(self.filter_spec(mode), fshape)
        w_k = wst["C"] if hybrid else wst["C/8"]
        w_kh, w_kw, w_j = wst["R"], wst["S"], wst[f"K/{kb}"]
        w_g = wst.get("G", 0)
        nk = icg if hybrid else icg // VEC
        njb = ocg // VEC  # output channel blocks per group
        per_vec = kb // VEC  # channel blocks per filter vector
        jmax, imax = self.tile(-(-njb // per_vec), ow)
        tile_blocks = jmax * per_vec
        tiles = -(-njb // tile_blocks)
        # a row's columns in tpr register tiles of balanced widths: the first `wide` tiles one column
        # wider than the rest (196 = 9 x 12 + 8 x 11, not 16 x 12 + a 4-column tail whose 8
        # accumulators leave the FMA latency exposed: 3% of a 14x14 1x1 conv)
        tpr = -(-ow // imax)
        narrow, wide = divmod(ow, tpr)
        widths = [narrow + 1, narrow] if wide else [narrow]
        # input-channel chunks: one tile's filters of a chunk (fh x fw x 8 x kc x 8 x tile_blocks
        # floats) stay in L1 while the tile sweeps a block of output positions; later chunks continue
        # from the float32 partial sums stored in y (float16 storage: one chunk)
        step_bytes = tile_blocks * VEC * cb * fh * fw * (2 if dt == "f16" else 4)
        kc = nk if dt == "f16" or hybrid else max(1, min(nk, self.wchunk_bytes // step_bytes))
        kc = -(-nk // -(-nk // kc))  # balanced chunks
        # output positions: (row, column tile) units, in blocks of about UNITS per chunk sweep
        units = oh * tpr
        region = omp_parallel(n * oc * oh * ow * icg * fh * fw, "parallel")
        ublk = -(-units // -(-units // UNITS))
        if region:  # several threads: blocks that share out evenly (one thread keeps the L1 blocking)
            ublk = balanced_block(g * tiles, units, ublk)
        nub = -(-units // ublk)
        ct = _ctype(dt)
        args, casts = _signature(ct, p)
        pad_omp = omp_for(region, 2)
        pad_body = _pad_copy(dt, src_layout, ic, ih, iw, p["ph"], p["pw"], pad_omp)[0] if geo["copy"] else ""
        if subsampled:
            pad_body = _subsample_copy(dt, given, pad_omp)
        x_img = offset(src_layout, (n, icp, given["ih"], given["iw"]), {"N": "n"})
        y_img = offset(Layout.NCHW88, out_shape, {"N": "n"})
        y_at = offset(Layout.NCHW88, out_shape, {"C/8": "jb", "H": "r", "W": "q0"})
        x_at = f"(long)gc * {x_k * (1 if hybrid else icg // VEC)}L + (long)r * {x_row}L + (long)q0 * {x_ow}L"
        w_at = f"(long)gg * {w_g}L + (long)(jl / {per_vec}) * {w_j}L"
        # filters of PREFETCH_MIN_BYTES and more: the prefetching micro-kernels; smaller ones run
        # the plain ones (no extra arguments nor per-step test: 2-5% of a 16 -> 96 1x1 conv)
        prefetching = self.prefetch and oc * icg * fh * fw * (2 if dt == "f16" else 4) >= PREFETCH_MIN_BYTES
        ukr = ukr_name(self.isa, dt, cb, x_ow, prefetching)
        esize = 2 if dt == "f16" else 4
        prefetch, prefetch_unit, prefetch_args = self._prefetch_next_chunk(
            dict(nk=nk, kc=kc, nub=nub, ublk=ublk, tiles=tiles, tile_blocks=tile_blocks, njb=njb, g=g,
                 per_vec=per_vec, w_g=w_g, w_j=w_j, w_k=w_k, esize=esize,
                 tail=(fh - 1) * w_kh + (fw - 1) * w_kw + cb * kb, taps=fh * fw,
                 prefetch=prefetching)
        )  # fmt: skip
        call_args = (
            f"xb + {x_at} + (long)k0 * {x_k}L, w + {w_at} + (long)k0 * {w_k}L, nkc, {fh}, {fw}, {x_k}L, "
            f"{x_kh}L, {x_kw}L, {w_k}L, {w_kh}L, {w_kw}L, {w_j}L, {'bias + jb * 8' if p['bias'] else '0'}, "
            f"{f'rn + {y_at}' if p['residual'] else '0'}, yn + {y_at}, {ys['C/8']}L, {ys['W']}L, "
            f"{ACT_CODES[p['act']]}, nb, acc{prefetch_args}"
        )
        inner, shared = tile_calls(
            ukr, jmax, widths, call_args, lambda j, i: self.ukr(j, i, cb, dt, x_ow, prefetching)
        )
        xbase = "xs" if geo["copy"] else "xn"
        return f"""{COMMON}{self.common}{H2F if dt == "f16" else ""}{shared}
{_conv_opening(sym, args, casts, ct, p, region, x_img, y_img, pad_body, xbase, geo["copy"])}
    for (int t = 0; t < {g * tiles}; ++t)
    for (int ub = 0; ub < {nub}; ++ub) {{
      const int gg = t / {tiles}, j0 = (t % {tiles}) * {tile_blocks};
      const int jl = j0, jb = gg * {njb} + j0, gc = gg;
      const int nb = {njb} - j0 < {tile_blocks} ? {njb} - j0 : {tile_blocks};
      const int jv = (nb + {per_vec - 1}) / {per_vec};
      const int u1 = ub * {ublk} + {ublk} < {units} ? ub * {ublk} + {ublk} : {units};
      (void)gc;
      for (int k0 = 0; k0 < {nk}; k0 += {kc}) {{
        const int nkc = {nk} - k0 < {kc} ? {nk} - k0 : {kc};
        const int acc = (k0 > 0) | (k0 + {kc} >= {nk}) << 1;{prefetch}
        for (int u = ub * {ublk}; u < u1; ++u) {{
          const int r = u / {tpr}, ut = u % {tpr};{prefetch_unit}
          const int q0 = ut * {narrow} + (ut < {wide} ? ut : {wide}), iv = {narrow} + (ut < {wide});
          {chr(10).join("          " + s for s in inner).lstrip()}
        }}
      }}
    }}
  }}
}}
"""


# ----------------------------------------------------------------------------------------------
# AVX-512: 16 output channels (two NCHW88 blocks) per zmm register


# the filters of the AVX-512 kernels: pairs of KCRSc8k8 output blocks interleaved, so that one zmm
# load is 16 output channels of one input channel (a repacking of the same weights, done ahead of
# time through layout.py's pack / unpack)
K16_FILTERS = {
    "dense": LayoutSpec("KCRS", "K/16 C/8 R S C%8 K%16"),
    "group": LayoutSpec("GKCRS", "G K/16 C/8 R S C%8 K%16"),
    "hybrid": LayoutSpec("KCRS", "K/16 R S C K%16"),
}

COMMON512 = """#ifndef XM_N88_COMMON512
#define XM_N88_COMMON512
static inline __m512 xm_n88_act512(__m512 v, int act) {
  /* ReLU and ReLU6 on the whole vector, as xm_n88_act on each half (v second: NaN stays) */
  switch (act) {
    case 0: return v;
    case 1: return _mm512_max_ps(_mm512_setzero_ps(), v);
    case 2: return _mm512_min_ps(_mm512_set1_ps(6.f), _mm512_max_ps(_mm512_setzero_ps(), v));
    default: break;
  }
  return _mm512_insertf32x8(_mm512_castps256_ps512(xm_n88_act(_mm512_castps512_ps256(v), act)),
                            xm_n88_act(_mm512_extractf32x8_ps(v, 1), act), 1);
}
#endif
"""


# the statements of a prefetching micro-kernel (dense_ukr512(prefetch=True)): its pfn lines of one
# or two filter vector blocks (pf_vb bytes apart; 0: one) requested into L2, pf_per a reduction
# step, so that the requests spread over the whole reduction (a burst of them between micro-kernel
# calls holds the line fill buffers the FMAs' loads need: ResNet-50's 7x7 1x1 convs ran 5-14% slower)
PREFETCH_SETUP = "  int pf_at = 0;"
PREFETCH_STEP = """    for (int q = 0; q < pf_per && pf_at < pfn; ++q, ++pf_at) {
      _mm_prefetch(pf + (long)pf_at * 64, _MM_HINT_T1);
      if (pf_vb) _mm_prefetch(pf + pf_vb + (long)pf_at * 64, _MM_HINT_T1);
    }"""


def dense_ukr512(j: int, i: int, cb: int, dt: str, x_ow: int, prefetch: bool = False) -> str:
    """:func:`dense_ukr` with zmm accumulators of 16 output channels: block ``2a`` in the low and
    ``2a + 1`` in the high half (stored only when ``2a + 1 < nb``, the tile's valid blocks).
    ``prefetch``: ``xm_n88_avx512_conv_pf_*``, which also takes ``pf, pf_vb, pfn, pf_per``: filter
    lines of a later call to request into L2 while it computes (:data:`PREFETCH_STEP`)."""
    name = f"{ukr_name('avx512', dt, cb, x_ow, prefetch)}_{j}x{i}"
    wt = ot = _ctype(dt)
    wload = (
        "_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)({p})))"
        if dt == "f16"
        else "_mm512_loadu_ps({p})"
    )
    lines = [
        f"static void {name}(const float* restrict x, const {wt}* restrict w, int nk, int fh, int fw,",
        "    long x_k, long x_kh, long x_kw, long w_k, long w_kh, long w_kw, long w_j,",
        f"    const float* bias, const {ot}* res, {ot}* y, long y_j, long y_i, int act, int nb, int acc"
        + (", const char* pf, long pf_vb, int pfn, int pf_per) {" if prefetch else ") {"),
        *([PREFETCH_SETUP] if prefetch else []),
    ]
    if dt == "f32":
        lines += zmm_accumulators(j, i)
    else:
        lines += [f"  __m512 c{a}_{b} = _mm512_setzero_ps();" for a in range(j) for b in range(i)]
    lines += _fma_loop(
        j, i, cb, wt, x_ow, "__m512", 16,
        lambda q: wload.format(p=q), lambda q: f"_mm512_set1_ps(*({q}))", "_mm512_fmadd_ps",
        [PREFETCH_STEP] if prefetch else (),
    )  # fmt: skip
    lines += zmm_partial_sums(j, i) if dt == "f32" else ["  (void)acc;"]
    lines += zmm_epilogue(j, i, dt)
    lines.append("}")
    return "\n".join(lines) + "\n"


def zmm_accumulators(j: int, i: int) -> list[str]:
    """A ``J x I`` tile of zmm accumulators (blocks ``2a``/``2a + 1`` in the low/high half): zero, or
    on a later input-channel chunk (``acc & 1``) the float32 partial sums stored in ``y``."""
    lines = []
    for a in range(j):
        for b in range(i):
            lo, hi = f"y + {2 * a} * y_j + {b} * y_i", f"y + {2 * a + 1} * y_j + {b} * y_i"
            lines.append(
                f"  __m512 c{a}_{b} = (acc & 1) ? _mm512_insertf32x8(_mm512_castps256_ps512("
                f"_mm256_loadu_ps({lo})), {2 * a + 1} < nb ? _mm256_loadu_ps({hi}) : _mm256_setzero_ps(), 1)"
                " : _mm512_setzero_ps();"
            )
    return lines


def zmm_partial_sums(j: int, i: int) -> list[str]:
    """All but the last input-channel chunk (``acc & 2`` clear): store the partial sums, no epilogue."""
    lines = ["  if (!(acc & 2)) {"]
    for a in range(j):
        for b in range(i):
            lines += [
                f"    _mm256_storeu_ps(y + {2 * a} * y_j + {b} * y_i, _mm512_castps512_ps256(c{a}_{b}));",
                f"    if ({2 * a + 1} < nb) _mm256_storeu_ps(y + {2 * a + 1} * y_j + {b} * y_i, "
                f"_mm512_extractf32x8_ps(c{a}_{b}, 1));",
            ]
    lines.append("    return;\n  }")
    return lines


def zmm_epilogue(
    j: int,
    i: int,
    dt: str,
    res_load: Callable[[str], str] | None = None,
    store: Callable[[str, str], list[str]] | None = None,
) -> list[str]:
    """Bias, residual (``dt`` storage) and activation on a ``J x I`` zmm tile, stored as ``dt``.
    Other storage (the bfloat16 family's): ``res_load(offset)`` reads a residual half (8 channels,
    a ``__m256``), ``store(lo_offset, hi_offset)`` stores ``v``'s two halves (the high one when
    ``two``)."""

    def load(at: str) -> str:
        return res_load(at) if res_load else _ld(dt, f"res + {at}")

    def put(lo_at: str, hi_at: str) -> list[str]:
        if store:
            return store(lo_at, hi_at)
        return [
            f"    {_st(dt, f'y + {lo_at}', '_mm512_castps512_ps256(v)')};",
            f"    if (two) {_st(dt, f'y + {hi_at}', '_mm512_extractf32x8_ps(v, 1)')};",
        ]

    lines = []
    for a in range(j):
        lo, hi = f"{2 * a} * y_j", f"{2 * a + 1} * y_j"
        for b in range(i):
            lines += [
                "  {",
                f"    __m512 v = c{a}_{b};",
                f"    const int two = {2 * a + 1} < nb;",
                f"    if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + {16 * a}));",
                "    if (res) {",
                f"      const __m256 rl = {load(f'{lo} + {b} * y_i')};",
                f"      const __m256 rh = two ? {load(f'{hi} + {b} * y_i')} : _mm256_setzero_ps();",
                "      v = _mm512_add_ps(v, _mm512_insertf32x8(_mm512_castps256_ps512(rl), rh, 1));",
                "    }",
                "    v = xm_n88_act512(v, act);",
                *put(f"{lo} + {b} * y_i", f"{hi} + {b} * y_i"),
                "  }",
            ]
    return lines


class ConvNchw88Avx512(ConvNchw88):
    """``conv2d_nchw88`` on AVX-512: the same loops with 2 x 16 output channels x 12 columns per
    register tile (24 of the 32 zmm registers), filters repacked to :data:`K16_FILTERS`."""

    isa = "avx512"
    kblock = 16
    tiles = ((2, 12),)
    # 32 output channels per tile: a 3x3 conv's input-channel step is 9 KB of filters, so 24 KB
    # chunks hold 2 steps (16 KB: 1, a partial-sum round trip through y every 8 input channels;
    # ResNet-50's 3x3 convs 3-7% faster); 1x1 convs are unchanged to within noise
    wchunk_bytes = 3 * WCHUNK_BYTES
    common = COMMON512
    prefetch = True

    def filter_spec(self, mode: str) -> LayoutSpec:
        return K16_FILTERS[mode]

    def ukr(self, j: int, i: int, cb: int, dt: str, x_ow: int, prefetch: bool = False) -> str:
        return dense_ukr512(j, i, cb, dt, x_ow, prefetch=prefetch)

    def pack(self, operand: int, array: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        if operand == 2 and p["bias"]:  # float32, padded to whole zmm vectors
            b = np.asarray(array, np.float32).reshape(-1)
            return np.ascontiguousarray(np.pad(b, (0, -len(b) % 16))), "bias_f32x16"
        if operand != 1:
            return None
        logical = SPECS[DENSE_FILTERS[p["mode"]]].unpack(np.asarray(array))
        packed = K16_FILTERS[p["mode"]].pack(logical)
        if p["dtype"] == "f16":
            packed = packed.astype(np.float16)
        return np.ascontiguousarray(packed), "k16"


class ConvNchw88Chan(_Nchw88Base):
    """``conv2d_nchw88_chan``: channel-wise (depthwise) NCHW88 convolutions, ``C11RSc8`` filters."""
    examples = (
        E.conv2d((1, 16, 9, 11), 16, 5, pad=2, groups=16, act="relu"),
        E.conv2d((2, 24, 7, 9), 24, 3, pad=2, dil=2, groups=24),
    )

    family = "conv2d_nchw88_chan"
    priority = 300  # channel-wise filters only
    epilogues = EPILOGUES

    def match(self, op: Operation) -> Lowered | None:
        return conv_nchw88(op, chan=True)

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("conv2d_nchw88_chan", *plane_sym(p, dilation=None), p["dtype"], epilogue_sym(p))

    def workspace(self, p: dict[str, Any]) -> int:
        geo = self._geometry(p)
        return -(-p["c"] // VEC) * VEC * geo["ihp"] * geo["iwp"] * 4 if geo["copy"] else 0

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        dt = p["dtype"]
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, dh, dw = (p[k] for k in ("fh", "fw", "sh", "sw", "dh", "dw"))
        geo = self._geometry(p)
        cp = -(-c // VEC) * VEC
        src_shape = (1, cp, geo["ihp"], geo["iwp"]) if geo["copy"] else (n, cp, ih, iw)
        xs = strides(Layout.NCHW88, src_shape)
        out_shape = (n, cp, oh, ow)
        ys = strides(Layout.NCHW88, out_shape)
        wst = strides(Layout.C11RSc8, (c, 1, 1, fh, fw))
        ct = _ctype(dt)
        args, casts = _signature(ct, p)
        region = omp_parallel(n * cp * oh * ow * fh * fw, "parallel")
        pad_omp = omp_for(region, 2)
        pad_body = ""
        if geo["copy"]:
            pad_body = _pad_copy(dt, Layout.NCHW88, c, ih, iw, p["ph"], p["pw"], pad_omp)[0]
        x_img = offset(Layout.NCHW88, (n, cp, ih, iw), {"N": "n"})
        y_img = offset(Layout.NCHW88, out_shape, {"N": "n"})
        x_at = offset(Layout.NCHW88, src_shape, {"C/8": "cb", "H": f"r * {sh}", "W": f"q0 * {sw}"})
        y_at = offset(Layout.NCHW88, out_shape, {"C/8": "cb", "H": "r", "W": "q0"})
        w_at = offset(Layout.C11RSc8, (c, 1, 1, fh, fw), {"G/8": "cb"})
        call_args = (
            f"xb + {x_at}, w + {w_at}, {fh}, {fw}, {xs['H'] * dh}L, {xs['W'] * dw}L, {xs['W'] * sw}L, "
            f"{wst['R']}L, {wst['S']}L, {'bias + cb * 8' if p['bias'] else '0'}, "
            f"{f'rn + {y_at}' if p['residual'] else '0'}, yn + {y_at}, {ys['W']}L, {ACT_CODES[p['act']]}"
        )
        variants = [(str(i), f"xm_n88_chan_{dt}_{i}") for i in range(1, I_CHAN + 1)]
        shared = "".join(
            _guarded(f"N88_CHAN_{dt}_{i}".upper(), chan_ukr(i, dt)) for i in range(1, I_CHAN + 1)
        )
        xbase = "xs" if geo["copy"] else "xn"
        return f"""{COMMON}{shared}
{_conv_opening(sym, args, casts, ct, p, region, x_img, y_img, pad_body, xbase, geo["copy"])}
    for (int cb = 0; cb < {cp // VEC}; ++cb)
    for (int r = 0; r < {oh}; ++r)
      for (int q0 = 0; q0 < {ow}; q0 += {I_CHAN}) {{
        const int iv = {ow} - q0 < {I_CHAN} ? {ow} - q0 : {I_CHAN};
        {_dispatch("iv", variants, call_args)}
      }}
  }}
}}
"""


class PoolNchw88(Template):
    """``pool2d_nchw88``: max / average (padding counted or not) pooling on 8-channel vectors."""
    examples = (
        E.conv_chain((1, 8, 9, 11), (16, 1, 1, 1, "relu"), pool=("max", 3, 2, 1)),
        E.conv_chain((2, 8, 7, 6), (8, 3, 1, 1, "identity"), pool=("average", 2, 2, 0)),
        E.conv_chain((1, 8, 7, 7), (24, 1, 1, 1, "relu"), pool=("average_count_exclude_padding", 3, 1, 1)),
    )

    family = "pool2d_nchw88"
    isa = "avx2"
    ops = (T.PoolingOp, T.AdaptivePoolingOp)
    priority = 300

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.PoolingOp | T.AdaptivePoolingOp)
        if op.params()["format"] != enums.Format.NCHW88:
            return None
        dt = code(op.operands[0])
        if dt not in ("f32", "f16") or code(op.results[0]) != dt:
            return None
        params = pool_geometry(op)
        if params is None:
            return None
        params["dtype"] = dt
        return Lowered(params, [op.operands[0]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("pool2d_nchw88", p["mode"], *plane_sym(p), p["dtype"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        dt, mode = p["dtype"], p["mode"]
        n, c, ih, iw, oh, ow = (p[k] for k in ("n", "c", "ih", "iw", "oh", "ow"))
        fh, fw, sh, sw, ph, pw = (p[k] for k in ("fh", "fw", "sh", "sw", "ph", "pw"))
        cp = -(-c // VEC) * VEC
        x_at = offset(Layout.NCHW88, (n, cp, ih, iw), {"N": "n", "C/8": "cb", "H": "ihh", "W": "iww"})
        y_at = offset(Layout.NCHW88, (n, cp, oh, ow), {"N": "n", "C/8": "cb", "H": "r", "W": "q"})
        ct = _ctype(dt)
        if mode == "max":
            # MAXPS returns its second operand when either is NaN: a NaN input wins (v second), and a
            # NaN already in the accumulator stays (blend back the unordered lanes), as the reference
            init = "_mm256_set1_ps(-INFINITY)"
            step = "a = _mm256_blendv_ps(_mm256_max_ps(a, {v}), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));"
            fin = "a"
        else:
            init, step = "_mm256_setzero_ps()", "a = _mm256_add_ps(a, {v});"
            div = f"(float){fh * fw}" if mode == "average" else "(float)cnt"
            fin = f"_mm256_mul_ps(a, _mm256_set1_ps(1.f / {div}))"
        return f"""
static void {sym}(const void* x_, void* y_, unsigned char* ws, int nt) {{
  const {ct}* x = (const {ct}*)x_;
  {ct}* y = ({ct}*)y_;
  (void)ws;
  {omp_parallel(n * cp * oh * ow * fh * fw, "parallel for collapse(3) schedule(static)")}
  for (int n = 0; n < {n}; ++n)
  for (int cb = 0; cb < {cp // VEC}; ++cb)
  for (int r = 0; r < {oh}; ++r)
    for (int q = 0; q < {ow}; ++q) {{
      __m256 a = {init};
      int cnt = 0;
      for (int kh = 0; kh < {fh}; ++kh) {{
        const int ihh = r * {sh} - {ph} + kh;
        if ((unsigned)ihh >= {ih}u) continue;
        for (int kw = 0; kw < {fw}; ++kw) {{
          const int iww = q * {sw} - {pw} + kw;
          if ((unsigned)iww >= {iw}u) continue;
          ++cnt;
          {step.format(v=_ld(dt, f"x + {x_at}"))}
        }}
      }}
      (void)cnt;
      {_st(dt, f"y + {y_at}", fin)};
    }}
}}
"""


class TypeCvtF16C(TypeCvt):
    """``typecvt`` on x86: float16 <-> float32 eight lanes at a time with F16C; other element types
    as the portable template."""
    examples = (
        E.typecvt((3, 7, 37), "f32", "q8"),
        E.typecvt((2, 45), "q8", "f32"),
        E.typecvt((5, 19), "f32", "f16"),
        E.typecvt((4, 21), "f16", "f32"),
    )

    isa = "avx2"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        pair = (p["src"], p["dst"])
        if pair not in (("f16", "f32"), ("f32", "f16")):
            return super().render(em, sym, p)  # float16_t: _Float16 on x86 (xm_kernels.h)
        size = p["size"]
        src_t, dst_t = _ctype(p["src"]), _ctype(p["dst"])
        tail_src = "_cvtsh_ss(in[i])" if p["src"] == "f16" else "in[i]"
        tail = tail_src if p["dst"] == "f32" else "_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT)"
        return f"""
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const {src_t}* in = (const {src_t}*)in_;
  {dst_t}* out = ({dst_t}*)out_;
  (void)ws;
  #pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1 && {size} > 65536)
  for (long i = 0; i < {size // VEC * VEC}; i += 8) {_st(p["dst"], "out + i", _ld(p["src"], "in + i"))};
  for (long i = {size // VEC * VEC}; i < {size}; ++i) out[i] = {tail};
}}
"""


# ----------------------------------------------------------------------------------------------
# Relayout NCHW <-> NCHW88 (float32): 8 x 8 register transposes


TRANSPOSE8 = """#ifndef XM_TR8X8
#define XM_TR8X8
static inline void xm_tr8x8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20); r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20); r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31); r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31); r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
#endif
"""


# The fewest elements for which a float32 NCHW <-> NCHW88 relayout opens a parallel region. The
# transpose is bound by memory traffic, so a second thread saves little of it: measured (issue 33,
# ShuffleNetV2 on an EPYC, 1 vs 2 threads) 5.9 -> 6.2 us at 75k elements and 7.5 -> 7.7 us at 94k,
# i.e. ~6% saved against ~0.7 us of fork/join, which breaks even near 130k elements.
RELAYOUT_MIN_PARALLEL = 1 << 17


class RelayoutNchw88(Relayout):
    """``relayout`` on x86: float32 NCHW <-> NCHW88 as 8 x 8 transposes of (8 channels x 8 pixels)
    blocks (H x W is one run of pixels on both sides); padded channels are written as zero into
    NCHW88 and skipped from it. Every other relayout is the portable strided walk."""
    examples = (E.conv2d((1, 8, 7, 9), 16, 3, pad=1, act="relu"), E.conv2d((2, 8, 5, 5), 8, 1))

    isa = "avx2"

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        pair = {p["src"], p["dst"]}
        if pair != {"plain", Layout.NCHW88.value} or p["esize"] != 4 or len(p["logical"]) != 4:
            return super().render(em, sym, p)
        n, c, h, w = p["logical"]
        hw, cb = h * w, -(-c // VEC)
        shape = (n, c, h, w)
        # the pixel run: W of a contiguous H x W plane on both sides (checked, not assumed)
        bst = strides(Layout.NCHW88, shape)
        assert bst["H"] == w * bst["W"]
        blk = offset(Layout.NCHW88, shape, {"N": "n", "C/8": "b", "W": "q"})
        pln = offset(None, shape, {"N": "n", "C": "b * 8 + l", "W": "q"})
        pw_ = bst["W"]
        if p["dst"] == "plain":  # NCHW88 -> NCHW
            vec = f"""
        __m256 r[8];
        for (int l = 0; l < 8; ++l) r[l] = _mm256_loadu_ps(src + {blk} + l * {pw_});
        xm_tr8x8(r);
        for (int l = 0; l < nl; ++l) _mm256_storeu_ps(dst + {pln}, r[l]);"""
            tail = f"for (int l = 0; l < nl; ++l) dst[{pln}] = src[{blk} + l];"
        else:  # NCHW -> NCHW88
            vec = f"""
        __m256 r[8];
        for (int l = 0; l < 8; ++l) r[l] = l < nl ? _mm256_loadu_ps(src + {pln}) : _mm256_setzero_ps();
        xm_tr8x8(r);
        for (int l = 0; l < 8; ++l) _mm256_storeu_ps(dst + {blk} + l * {pw_}, r[l]);"""
            tail = f"for (int l = 0; l < 8; ++l) dst[{blk} + l] = l < nl ? src[{pln}] : 0.f;"
        region = (
            "#pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if(nt > 1)"
            if n * c * hw >= RELAYOUT_MIN_PARALLEL
            else "(void)nt;"
        )
        return f"""{TRANSPOSE8}
static void {sym}(const void* in_, void* out_, unsigned char* ws, int nt) {{
  const float* src = (const float*)in_;
  float* dst = (float*)out_;
  (void)ws;
  {region}
  for (int n = 0; n < {n}; ++n)
    for (int b = 0; b < {cb}; ++b) {{
      const int nl = {c} - b * 8 < 8 ? {c} - b * 8 : 8;
      int q = 0;
      for (; q + 8 <= {hw}; q += 8) {{{vec}
      }}
      for (; q < {hw}; ++q) {{
        {tail}
      }}
    }}
}}
"""


# TypeCvtF16C's unit is x86_int8_avx2.TypeCvtQ8Avx2 (the family's avx2 place: it adds the int8 pairs)
KERNEL_UNITS = (ConvNchw88(), ConvNchw88Avx512(), ConvNchw88Chan(), PoolNchw88(), RelayoutNchw88())
