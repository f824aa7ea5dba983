"""Portable C templates for 3-D convolution and the image ops detection graphs run at inference:
``mgb.convolution3d`` (``conv3d``), ``mgb.warp_perspective``, ``mgb.roi_align`` and ``mgb.nms_keep``.

Each repeats its reference kernel (``semantics/vision_kernels.py``) operation for operation in
float32, in the same order (the emitters compile without floating-point contraction), so the
results are bit-identical; the geometry that only depends on shapes and parameters is folded into
the specialisation. A matrix index or roi batch index outside the input is reported through the
runtime's error channel (``xm_index_error``), as the reference raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation

from backends.c.match import is_f32
from backends.c.templates import Template, sym_join
from backends.c.templates.portable.generic import _par
from backends.c.templates.portable.portable import _plain, c_float
from dialects import enums
from dialects import tensor as T
from passes.lowering.kernels import Lowered, shape
from semantics.vision_kernels import COORD_LIMIT

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# gcc contracts a * b + c into an FMA by default in GNU C where FMA exists (x86 -mfma, aarch64),
# which rounds once where the reference rounds twice: these kernels compile without contraction
HEADER = """#include <math.h>
#include <float.h>
#include <stdint.h>
#ifndef XM_VISION_EXACT
#define XM_VISION_EXACT
#if defined(__clang__)
#define XM_VISION_EXACT_BEGIN _Pragma("clang fp contract(off)")
#define XM_VISION_EXACT_END _Pragma("clang fp contract(on)")
#else
#define XM_VISION_EXACT_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\\"fp-contract=off\\")")
#define XM_VISION_EXACT_END _Pragma("GCC pop_options")
#endif
#endif
"""


# Until the kernel-unit ``examples`` (the conformance harness) reach this branch, each unit says
# where its kernel is checked; the harness accepts a unit with a reason in place of examples.
_CHECKED_IN = (
    "checked bit for bit against the reference by tests/test_mge_ops_vision.py (x86-avx2, "
    "ASan/UBSan, arm-nchw44 under qemu); conformance-harness examples to follow"
)


def _exact(code: str) -> str:
    """``code`` compiled without floating-point contraction."""
    return f"\nXM_VISION_EXACT_BEGIN{code}XM_VISION_EXACT_END\n"


# ----------------------------------------------------------------------------------------------
# Convolution3D


class Conv3d(Template):
    """Direct NCDHW float32 convolution, any groups, stride, padding and dilation: each output sums
    its taps in (input channel, kd, kh, kw) order from 0, out-of-image taps reading 0 (as the
    reference's zero padding does); threads split the (image, output channel, depth) planes."""

    family = "conv3d"
    examples_reason = _CHECKED_IN
    ops = (T.Convolution3DOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.Convolution3DOp)
        if not is_f32(*op.operands, *op.results) or not _plain(*op.operands):
            return None
        p = op.params()
        n, c, d, h, w = shape(op.operands[0])
        fshape = shape(op.operands[1])
        groups = fshape[0] if p["sparse"] == enums.ConvSparse.GROUP else 1
        ocpg, icpg, kd, kh, kw = fshape[-5:]
        _, oc, od, oh, ow = shape(op.results[0])
        params = {"n": n, "c": c, "in": (d, h, w), "oc": oc, "groups": groups, "icpg": icpg,
                  "k": (kd, kh, kw), "out": (od, oh, ow), "stride": tuple(p["stride"]),
                  "pad": tuple(p["padding"]), "dil": tuple(p["dilation"]),
                  "flip": int(p["mode"] == enums.ConvMode.CONVOLUTION)}  # fmt: skip
        return Lowered(params, [op.operands[0], op.operands[1]])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("conv3d", f"n{p['n']}", f"c{p['c']}", p["in"], f"oc{p['oc']}", f"g{p['groups']}",
                        "k", p["k"], "s", p["stride"], "p", p["pad"], "d", p["dil"],
                        "flip" if p["flip"] else "", "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        d, h, w = p["in"]
        kd, kh, kw = p["k"]
        od, oh, ow = p["out"]
        (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = p["stride"], p["pad"], p["dil"]
        oc, icpg, groups = p["oc"], p["icpg"], p["groups"]
        ocpg = oc // groups
        # a true convolution reads the filter mirrored on all three axes
        fa, fb, fc = (f"({k - 1} - {v})" if p["flip"] else v for k, v in ((kd, "a"), (kh, "b"), (kw, "q")))
        planes = p["n"] * oc * od
        return _exact(f"""
static void {sym}(const float* x, const float* wt, float* y, unsigned char* ws, int nt) {{
  (void)ws;
  {_par(planes * oh * ow * icpg * kd * kh * kw)}
  for (long t = 0; t < {planes}; ++t) {{
    const long n = t / {oc * od};
    const long o = (t / {od}) % {oc};
    const long z = t % {od};
    const long g = o / {ocpg};
    const float* xg = x + (n * {p["c"]} + g * {icpg}) * {d * h * w}L;
    const float* wo = wt + o * {icpg * kd * kh * kw}L;
    float* yo = y + t * {oh * ow}L;
    for (long r = 0; r < {oh}; ++r) {{
      for (long s = 0; s < {ow}; ++s) {{
        float acc = 0.0f;
        for (long ic = 0; ic < {icpg}; ++ic) {{
          for (long a = 0; a < {kd}; ++a) {{
            const long iz = z * {sd} - {pd} + a * {dd};
            for (long b = 0; b < {kh}; ++b) {{
              const long iy = r * {sh} - {ph} + b * {dh};
              for (long q = 0; q < {kw}; ++q) {{
                const long ix = s * {sw} - {pw} + q * {dw};
                const int inside = iz >= 0 && iz < {d} && iy >= 0 && iy < {h} && ix >= 0 && ix < {w};
                const float v = inside ? xg[((ic * {d} + iz) * {h} + iy) * {w}L + ix] : 0.0f;
                acc += v * wo[((ic * {kd} + {fa}) * {kh} + {fb}) * {kw}L + {fc}];
              }}
            }}
          }}
        }}
        yo[r * {ow} + s] = acc;
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# WarpPerspective


def _border_c(bmode: Any) -> str:
    """MegEngine's get_real_coord for one border mode, as a C statement on ``p`` and ``n``."""
    B = enums.BorderMode
    if bmode == B.REPLICATE:
        return "if (p < 0) p = 0; else if (p >= n) p = n - 1;"
    if bmode in (B.REFLECT, B.REFLECT_101):
        delta = int(bmode == B.REFLECT_101)
        return (f"if (n == 1) return 0;\n  while (p < 0 || p >= n) p = p < 0 ? -p - 1 + {delta} "
                f": n - 1 - (p - n) - {delta};")  # fmt: skip
    if bmode == B.WRAP:
        return "p %= n; if (p < 0) p += n;"
    return "p = -1;"  # CONSTANT


class WarpPerspective(Template):
    """Bilinear NCHW float32 warp by per-image 3x3 matrices (with an optional matrix-to-image
    index), any border mode MegEngine's naive kernel has: per output pixel the reference's float32
    source position, floor, border mapping and four-tap blend; threads split output rows."""

    family = "warp_perspective"
    examples_reason = _CHECKED_IN
    ops = (T.WarpPerspectiveOp,)
    priority = 100
    fails = True

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.WarpPerspectiveOp)
        if not is_f32(op.operands[0], op.operands[1], *op.results) or not _plain(*op.operands):
            return None
        p = op.params()
        n, c, ih, iw = shape(op.operands[0])
        nmat, _, oh, ow = shape(op.results[0])
        params = {"n": n, "nmat": nmat, "c": c, "ih": ih, "iw": iw, "oh": oh, "ow": ow,
                  "bmode": enums.number(p["bmode"]), "border_val": float(p["border_val"]),
                  "idx": int(len(op.operands) == 3)}  # fmt: skip
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        bmode = list(enums.BorderMode)[p["bmode"]].value
        bv = c_float(p["border_val"]).rstrip("f") if p["bmode"] == 4 else ""
        return sym_join("warp_perspective", bmode, f"bv{bv}" if bv else "", f"n{p['n']}", f"m{p['nmat']}",
                        f"c{p['c']}", f"{p['ih']}x{p['iw']}", "to", f"{p['oh']}x{p['ow']}",
                        "idx" if p["idx"] else "", "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        bmode = list(enums.BorderMode)[p["bmode"]]
        constant = bmode == enums.BorderMode.CONSTANT
        c, ih, iw, oh, ow, nmat = (p[k] for k in ("c", "ih", "iw", "oh", "ow", "nmat"))
        bv = c_float(p["border_val"])
        lim = f"{float(COORD_LIMIT)!r}f"
        idx_arg = "const int32_t* mat_idx, " if p["idx"] else ""
        if p["idx"]:
            pick = (f"const long src_n = mat_idx[m];\n    if (src_n < 0 || src_n >= {p['n']}) "
                    f"{{ xm_index_error(ctx, \"{sym}\", src_n, {p['n']}); continue; }}")  # fmt: skip
        else:
            pick = "const long src_n = m;"
        if constant:
            at = f"((hh) == -1 || (ww) == -1 ? {bv} : xp[(long)(hh) * {iw} + (ww)])"
            store = f"yo[(long)ch * {oh * ow}] = isfinite(val) ? val : {bv};"
        else:
            at = f"xp[(long)(hh) * {iw} + (ww)]"
            store = f"yo[(long)ch * {oh * ow}] = val;"
        return _exact(f"""
static int {sym}_coord(float f, int n) {{
  /* the reference clamps to +-2^24 (NaN to -2^24) before the integer conversion */
  int p = f != f ? -{COORD_LIMIT} : f > {lim} ? {COORD_LIMIT} : f < -{lim} ? -{COORD_LIMIT} : (int)f;
  if (p >= 0 && p < n) return p;
  {_border_c(bmode)}
  return p;
}}

static void {sym}(const float* x, const float* mat, {idx_arg}float* y, unsigned char* ws, int nt,
                  xm_ctx* ctx) {{
  (void)ws;
  {_par(nmat * oh * ow * c * 8)}
  for (long t = 0; t < {nmat * oh}; ++t) {{
    const long m = t / {oh};
    const long r = t % {oh};
    {pick}
    const float* mm = mat + m * 9;
    const float* xs = x + src_n * {c * ih * iw}L;
    float* yr = y + m * {c * oh * ow}L + r * {ow};
    for (long s = 0; s < {ow}; ++s) {{
      const float fs = (float)s, fr = (float)r;
      const float nw = mm[0] * fs + mm[1] * fr + mm[2];
      const float nh = mm[3] * fs + mm[4] * fr + mm[5];
      const float den = mm[6] * fs + mm[7] * fr + mm[8];
      const float aw = nw / den, ah = nh / den;
      const float fw = floorf(aw), fh = floorf(ah);
      const int w0 = {sym}_coord(fw, {iw}), w1 = {sym}_coord(fw + 1.0f, {iw});
      const int h0 = {sym}_coord(fh, {ih}), h1 = {sym}_coord(fh + 1.0f, {ih});
      const float bw = aw - fw, bh = ah - fh;
      float* yo = yr + s;
      for (int ch = 0; ch < {c}; ++ch) {{
        const float* xp = xs + (long)ch * {ih * iw};
#define AT(hh, ww) {at}
        const float val = AT(h0, w0) * (1.0f - bw) * (1.0f - bh) + AT(h0, w1) * bw * (1.0f - bh)
                          + AT(h1, w0) * (1.0f - bw) * bh + AT(h1, w1) * bw * bh;
#undef AT
        {store}
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# ROIAlign


class ROIAlign(Template):
    """RoI Align of NCHW float32 features: per roi the reference's float32 bin geometry, per bin
    its samples' zero-bordered bilinear values, max (strictly greater wins, its sample index kept)
    or averaged in sample order; threads split the rois."""

    family = "roi_align"
    examples_reason = _CHECKED_IN
    ops = (T.ROIAlignOp,)
    priority = 100
    fails = True

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.ROIAlignOp)
        if not is_f32(*op.operands, op.results[0]) or not _plain(*op.operands):
            return None
        p = op.params()
        n, c, h, w = shape(op.operands[0])
        k = shape(op.operands[1])[0]
        params = {"n": n, "c": c, "h": h, "w": w, "k": k, "pooled": tuple(p["pooled_shape"]),
                  "sample": tuple(p["sample_shape"]), "scale": float(p["spatial_scale"]),
                  "offset": float(p["offset"]), "max": int(p["mode"] == enums.ROIMode.MAX)}  # fmt: skip
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("roi_align", "max" if p["max"] else "avg", f"n{p['n']}", f"c{p['c']}",
                        f"{p['h']}x{p['w']}", f"k{p['k']}", "to", p["pooled"], "s", p["sample"],
                        "sc" + c_float(p["scale"]).rstrip("f"), "off" + c_float(p["offset"]).rstrip("f"),
                        "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        c, h, w, k = p["c"], p["h"], p["w"], p["k"]
        ph, pw = p["pooled"]
        sh, sw = p["sample"]
        if p["max"]:
            init, feed = "-FLT_MAX", f"if (v > acc) {{ acc = v; best = i * {sw} + j; }}"
            done = "yb[q] = acc; ib[q] = best;"
        else:
            init, feed, done = "0.0f", "acc = acc + v;", f"yb[q] = acc / {float(sh * sw)!r}f; ib[q] = -1;"
        return _exact(f"""
static float {sym}_at(const float* plane, int hh, int ww) {{
  return hh >= 0 && hh < {h} && ww >= 0 && ww < {w} ? plane[(long)hh * {w} + ww] : 0.0f;
}}

static void {sym}(const float* x, const float* rois, float* y, int32_t* index, unsigned char* ws, int nt,
                  xm_ctx* ctx) {{
  (void)ws;
  {_par(k * c * ph * pw * sh * sw * 16)}
  for (long rk = 0; rk < {k}; ++rk) {{
    const float* roi = rois + rk * 5;
    const long b = (long)roi[0];
    if (b < 0 || b >= {p["n"]}) {{ xm_index_error(ctx, "{sym}", b, {p["n"]}); continue; }}
    const float x1 = roi[1] * {c_float(p["scale"])} - {c_float(p["offset"])};
    const float y1 = roi[2] * {c_float(p["scale"])} - {c_float(p["offset"])};
    const float x2 = roi[3] * {c_float(p["scale"])} - {c_float(p["offset"])};
    const float y2 = roi[4] * {c_float(p["scale"])} - {c_float(p["offset"])};
    const float rh = y2 - y1, rw = x2 - x1;
    const float bin_h = (rh > 0.0f ? rh : 0.0f) / {float(ph)!r}f;
    const float bin_w = (rw > 0.0f ? rw : 0.0f) / {float(pw)!r}f;
    const float rate_h = 1.0f / {float(sh)!r}f, rate_w = 1.0f / {float(sw)!r}f;
    for (long ch = 0; ch < {c}; ++ch) {{
      const float* plane = x + (b * {c} + ch) * {h * w}L;
      float* yb = y + (rk * {c} + ch) * {ph * pw}L;
      int32_t* ib = index + (rk * {c} + ch) * {ph * pw}L;
      for (long q = 0; q < {ph * pw}; ++q) {{
        const float fr = (float)(q / {pw}), fc = (float)(q % {pw});
        float acc = {init};
        int32_t best = -1;
        (void)best;
        for (int i = 0; i < {sh}; ++i) {{
          const float hc = y1 + bin_h * (fr + rate_h * ((float)i + 0.5f));
          const int h0 = (int)floorf(hc);
          const float dh = hc - (float)h0;
          for (int j = 0; j < {sw}; ++j) {{
            const float wc = x1 + bin_w * (fc + rate_w * ((float)j + 0.5f));
            const int w0 = (int)floorf(wc);
            const float dw = wc - (float)w0;
            const float tl = {sym}_at(plane, h0, w0), tr = {sym}_at(plane, h0, w0 + 1);
            const float bl = {sym}_at(plane, h0 + 1, w0), br = {sym}_at(plane, h0 + 1, w0 + 1);
            const float top = tl + (tr - tl) * dw;
            const float bottom = bl + (br - bl) * dw;
            const float v = top + (bottom - top) * dh;
            {feed}
          }}
        }}
        {done}
      }}
    }}
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# NMSKeep


class NMSKeep(Template):
    """MegEngine's CPU NMS per image: boxes in order, each kept unless it overlaps a kept one by
    more than the threshold (the reference's float32 IoU test, inter > union * thresh), up to
    ``max_output``; the tail repeats the last kept index. The workspace holds the kept list."""

    family = "nms_keep"
    examples_reason = _CHECKED_IN
    ops = (T.NMSKeepOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.NMSKeepOp)
        if not is_f32(op.operands[0]) or not _plain(*op.operands):
            return None
        p = op.params()
        b, n, _ = shape(op.operands[0])
        return Lowered({"b": b, "n": n, "keep": int(p["max_output"]), "thresh": float(p["iou_thresh"])},
                       [op.operands[0]])  # fmt: skip

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("nms_keep", f"b{p['b']}", f"n{p['n']}", f"k{p['keep']}",
                        "t" + c_float(p["thresh"]).rstrip("f"), "f32")  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        n, keep = p["n"], p["keep"]
        return _exact(f"""
static void {sym}(const float* boxes, int32_t* idx, int32_t* count, unsigned char* ws, int nt) {{
  (void)ws; (void)nt;
  const float th = {c_float(p["thresh"])};
  for (long b = 0; b < {p["b"]}; ++b) {{
    const float* bx = boxes + b * {n * 4}L;
    int32_t* out = idx + b * {keep}L;
    long kept = 0;
    for (long i = 0; i < {n} && kept < {keep}; ++i) {{
      const float* a = bx + i * 4;
      const float area_a = (a[2] - a[0]) * (a[3] - a[1]);
      int suppressed = 0;
      for (long k = 0; k < kept && !suppressed; ++k) {{
        const float* o = bx + (long)out[k] * 4;
        const float area_o = (o[2] - o[0]) * (o[3] - o[1]);
        const float left = fmaxf(o[0], a[0]), right = fminf(o[2], a[2]);
        const float top = fmaxf(o[1], a[1]), bottom = fminf(o[3], a[3]);
        const float iw = right - left, ih = bottom - top;
        const float inter = (iw > 0.0f ? iw : 0.0f) * (ih > 0.0f ? ih : 0.0f);
        suppressed = inter > (area_a + area_o - inter) * th;
      }}
      if (!suppressed) out[kept++] = (int32_t)i;
    }}
    count[b] = (int32_t)kept;
    for (long k = kept; k < {keep}; ++k) out[k] = kept ? out[kept - 1] : 0;
  }}
}}
""")

    def support(self, em: CEmitter) -> str:
        return HEADER


KERNEL_UNITS = (Conv3d(), WarpPerspective(), ROIAlign(), NMSKeep())
