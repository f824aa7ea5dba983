"""How close xmge's int8 ResNets can get to ONNX Runtime's QDQ int8 latency on this CPU (issue 33).

    python bench/vnni_peak.py [--models resnet18,resnet50] [--iters 20] [--no-ort] [--no-layers]

1. The measured single-core int8 multiply-accumulate peak: a C loop of independent ``vpdpbusd zmm``
   chains held in registers (enough accumulators to hide the instruction's latency), compiled with
   gcc for AVX512-VNNI, timed on this thread's CPU clock (a shared machine's load does not skew it).
   One ``vpdpbusd zmm`` is 16 lanes x 4 u8*s8 products = 64 MACs. The int16 ``vpdpwssd`` (32 MACs)
   the same way: what an exact int16 Winograd F(2,3) could gain at best.
2. For each model: its convolution and matrix-product GMAC, the lower bound in ms at that peak, ONNX
   Runtime's QDQ int8 latency (``bench_x86.ort_qdq_session``: the same float graph, quantized by ORT;
   omitted without onnxruntime), xmge's int8 latency (and whether its output equals the reference
   interpreter's), and the fraction of peak that 0.8x ORT would need.
3. A per-layer table of xmge's int8 model (one profiled build, 1 thread: each kernel call timed):
   call, kernel family, shape, GMAC, ms and % of the measured peak, so the layers that fall short
   show; then each convolution shape at the best of its calls (:func:`layer_table`).

Latencies are wall-clock medians (``compiler.driver.compile.benchmark``, the best of three
interleaved rounds) and, on a loaded machine the steadier figure, thread-CPU-time medians
(``bench_x86.cpu_medians``, the least of three); the profile is the least of five means over
``--iters`` runs (wall clock per call: on a loaded machine only the best of equal-shape calls is
a fair efficiency figure). The load average is printed beside them.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from xdsl.dialects.builtin import TensorType  # noqa: E402

from dialects import tensor as T  # noqa: E402

ACCS = 12  # independent accumulators: > latency (4-5 cycles) x throughput (1-2 per cycle)


PEAK_INSTRUCTIONS = {
    # name: (intrinsic, u/a operand, s/b operand, MACs per zmm instruction)
    "vpdpbusd": ("_mm512_dpbusd_epi32", "_mm512_set1_epi8(3)", "_mm512_set1_epi8(-2)", 64),
    "vpdpwssd": ("_mm512_dpwssd_epi32", "_mm512_set1_epi16(3)", "_mm512_set1_epi16(-2)", 32),
}


def vnni_peak(instruction: str = "vpdpbusd", iters: int = 20_000_000, repeats: int = 5) -> float:
    """Single-core GMAC/s of ``ACCS`` independent chains of ``instruction`` on zmm registers (int8
    ``vpdpbusd``: 64 MACs each; int16 ``vpdpwssd``: 32), the best of ``repeats`` timings on this
    thread's CPU clock."""
    n = ACCS
    fn, ua, sb, macs = PEAK_INSTRUCTIONS[instruction]
    src = f"""
#include <immintrin.h>
int xm_vnni_peak(long iters) {{
  {" ".join(f"__m512i a{i} = _mm512_set1_epi32({i});" for i in range(n))}
  const __m512i u = {ua}, s = {sb};
  for (long k = 0; k < iters; ++k) {{
    {" ".join(f"a{i} = {fn}(a{i}, u, s);" for i in range(n))}
    __asm__ volatile("" : {", ".join(f'"+v"(a{i})' for i in range(n))});
  }}
  __m512i t = a0; {" ".join(f"t = _mm512_add_epi32(t, a{i});" for i in range(1, n))}
  return _mm512_reduce_add_epi32(t);
}}
"""
    with tempfile.TemporaryDirectory() as d:
        c, so = os.path.join(d, "peak.c"), os.path.join(d, "peak.so")
        with open(c, "w") as f:
            f.write(src)
        flags = ["-O2", "-mavx512f", "-mavx512bw", "-mavx512vnni"]
        subprocess.run(["gcc", *flags, "-shared", "-fPIC", c, "-o", so], check=True)
        lib = ctypes.CDLL(so)
        lib.xm_vnni_peak.restype = ctypes.c_int
        lib.xm_vnni_peak.argtypes = [ctypes.c_long]
        lib.xm_vnni_peak(iters // 10)
        best = 0.0
        for _ in range(repeats):
            t0 = time.thread_time()
            lib.xm_vnni_peak(iters)
            dt = time.thread_time() - t0
            best = max(best, iters * n * macs / dt / 1e9)
        return best


def cpu_model() -> tuple[str, list[str]]:
    """``lscpu``'s model name and the int8-relevant ISA flags of this CPU."""
    name, flags = platform.processor(), []
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return name, flags
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model name":
            name = value.strip()
        elif key.strip() == "Flags":
            want = ("avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512vbmi", "avx512_bf16",
                    "amx_int8", "amx_tile", "avx512_fp16")  # fmt: skip
            have = set(value.split())
            flags = [f for f in want if f in have]
    return name, flags


def model_gmac(module: Any) -> float:
    """GMAC of the convolutions and matrix products in the tensor IR."""
    total = 0.0
    for op in module.walk():
        if isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
            w, y = op.operands[1].type, op.results[0].type
            assert isinstance(w, TensorType) and isinstance(y, TensorType)
            mac = math.prod(y.get_shape()) * math.prod(w.get_shape()[-3:])
        elif isinstance(op, T.MatrixMulOp):
            a, y = op.operands[0].type, op.results[0].type
            assert isinstance(a, TensorType) and isinstance(y, TensorType)
            k = a.get_shape()[0] if op.params()["transpose_a"] else a.get_shape()[-1]
            mac = math.prod(y.get_shape()) * k
        else:
            continue
        total += mac / 1e9
    return total


CONV_SYMBOL = re.compile(
    r"conv2d_q8_n(\d+)_ic(\d+)_(\d+)x(\d+)_oc(\d+)_k(\d+)x(\d+)_s(\d+)x(\d+)_p(\d+)x(\d+)_d(\d+)x(\d+)_g(\d+)"
)


def conv_of_symbol(sym: str) -> tuple[str, float] | None:
    """(shape text, GMAC) of an int8 convolution kernel, read from its symbol (the x86 int8 families
    name their shape: ``..._n1_ic64_56x56_oc64_k3x3_s1x1_p1x1_d1x1_g1_...``)."""
    m = CONV_SYMBOL.search(sym)
    if m is None:
        return None
    n, ic, h, w, oc, fh, fw, sh, sw, ph, pw, dh, dw, g = (int(v) for v in m.groups())
    oh = (h + 2 * ph - dh * (fh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (fw - 1) - 1) // sw + 1
    shape = f"{ic}x{h}x{w}->{oc}x{oh}x{ow} k{fh}"
    shape += (f" s{sh}" if sh != 1 else "") + (f" g{g}" if g != 1 else "")
    return shape, n * oc * oh * ow * (ic // g) * fh * fw / 1e9


def layer_table(model: Any, x: np.ndarray, peak: float, iters: int, repeats: int = 5) -> list[str]:
    """The per-layer efficiency tables of one compiled int8 model (see the module docstring): every
    call, its time the least of ``repeats`` profiled means (wall clock: the machine's other load only
    adds), then each convolution shape once, at the least time of its calls. A model repeats shapes
    (ResNet-50 runs ``256x14x14 -> 1024`` six times), so the best of equal calls is the figure a
    loaded machine inflates least; the sum over every call at its shape's best is the model's
    convolution time on a quiet core, at most."""
    from compiler.driver.compile import profile_layers

    runs = [profile_layers(model, [x], iters) for _ in range(repeats)]
    rows = [min(calls, key=lambda r: r.ms) for calls in zip(*runs, strict=True)]
    total = sum(r.ms for r in rows) or 1.0
    lines = [f"  {'#':>3} {'family':<22}{'shape':<30}{'GMAC':>7}{'ms':>8}{'%peak':>7}{'%time':>7}"]
    shapes: dict[str, list[float]] = {}
    gmacs: dict[str, float] = {}
    conv_ms = conv_gmac = 0.0
    for i, r in enumerate(rows):
        shape, gmac = conv_of_symbol(r.kernel) or (r.kernel.split("_")[1] if "_" in r.kernel else "", 0.0)
        eff = f"{100 * gmac / (r.ms * 1e-3) / peak:6.1f}%" if gmac and r.ms > 0 else "      "
        if gmac:
            conv_ms += r.ms
            conv_gmac += gmac
            shapes.setdefault(shape, []).append(r.ms)
            gmacs[shape] = gmac
        lines.append(
            f"  {i:>3} {r.family[:21]:<22}{shape[:29]:<30}{gmac:>7.3f}{r.ms:>8.3f}{eff:>7}"
            f"{100 * r.ms / total:>6.1f}%"
        )
    eff = 100 * conv_gmac / (conv_ms * 1e-3) / peak if conv_ms else math.nan
    lines.append(
        f"  sum {total:.2f} ms: convolutions {conv_ms:.2f} ms ({conv_gmac:.3f} GMAC) at {eff:.1f}% of peak, "
        f"other kernels {total - conv_ms:.2f} ms"
    )
    lines.append(
        f"\n  {'convolution shape':<30}{'calls':>6}{'best ms':>9}{'worst ms':>9}{'%peak':>7}"
        f"{'ms x calls':>11}"
    )
    at_best = 0.0
    for shape, times in sorted(shapes.items(), key=lambda kv: -min(kv[1]) * len(kv[1])):
        best = min(times)
        at_best += best * len(times)
        lines.append(
            f"  {shape[:29]:<30}{len(times):>6}{best:>9.3f}{max(times):>9.3f}"
            f"{100 * gmacs[shape] / (best * 1e-3) / peak:>6.1f}%{best * len(times):>11.3f}"
        )
    lines.append(
        f"  every convolution at its shape's best: {at_best:.2f} ms, "
        f"{100 * conv_gmac / (at_best * 1e-3) / peak:.1f}% of peak"
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime's QDQ int8 model")
    ap.add_argument("--no-layers", action="store_true", help="skip the per-layer profile")
    args = ap.parse_args()

    name, flags = cpu_model()
    print(f"CPU: {name}; ISA: {' '.join(flags) or '(none of the int8 extensions)'}")
    if "avx512_vnni" not in flags:
        print("no AVX512-VNNI on this CPU: the vpdpbusd peak cannot be measured")
        return
    peak = vnni_peak("vpdpbusd")
    print(f"vpdpbusd zmm peak, 1 core: {peak:.1f} GMAC/s ({ACCS} independent chains, CPU time)")
    wssd = vnni_peak("vpdpwssd")
    print(
        f"vpdpwssd zmm peak (int16, what a Winograd F(2,3) would multiply with): {wssd:.1f} GMAC/s, "
        f"{wssd / peak:.2f}x int8's; F(2,3) does 16 products per 4 outputs of a 3x3 tap set (36 direct): "
        f"at best {peak / wssd * 16 / 36:.3f}x the direct instructions before its transforms"
    )
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")

    from bench_x86 import cpu_medians, inference_clean_of, make_model, ort_qdq_session

    from compiler.driver.compile import benchmark, compile
    from compiler.driver.targets import host_target
    from compiler.quantization import quantize
    from semantics import run_module

    try:
        import onnxruntime as ort

        ort.set_default_logger_severity(3)
    except ImportError:
        ort = None
    if args.no_ort:
        ort = None
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    summary, tables = [], []
    for m in args.models.split(","):
        net = make_model(m)
        if net is None:
            print(f"{m}: no such hub model, skipped")
            continue
        qnet = quantize(net, [x])
        model = compile(qnet, str(host_target()), [x], threads=1)
        gmac = model_gmac(model._stages["tensor"])
        want = run_module(model._stages["tensor"], [x])[0]
        exact = "yes" if np.array_equal(model(x), want) else "NO"
        bound = gmac / peak * 1e3
        runners: dict[str, Any] = {"xmge": lambda mm=model: mm(x)}
        if ort is not None:
            session, in_name = ort_qdq_session(ort, inference_clean_of(net, x), x, 1)
            runners["ort"] = lambda s=session, f={in_name: x}: s.run(None, f)
        best = {k: math.inf for k in runners}
        for _ in range(3):  # interleaved rounds, the best round's median
            for k, run in runners.items():
                best[k] = min(best[k], benchmark(run, warmup=2, iters=max(3, args.iters // 3))["median_ms"])
        # one thread each (ORT's intra-op pool of 1 runs on the caller): this thread's CPU time
        cpu = {k: math.inf for k in runners}
        for _ in range(3):
            for k, v in cpu_medians(runners, args.iters).items():
                cpu[k] = min(cpu[k], v)
        for label, t in (("wall", best), ("cpu", cpu)):
            o = t.get("ort", math.nan)
            if o == o:
                peer = f"{o:>9.2f}{0.8 * o:>9.2f}{100 * bound / (0.8 * o):>9.1f}%"
                ratio = f"{t['xmge'] / o:>8.3f}"
            else:  # no ONNX Runtime: its columns stay empty
                peer, ratio = f"{'-':>9}{'-':>9}{'-':>10}", f"{'-':>8}"
            summary.append(
                f"{m:<10}{label:<5}{gmac:>8.3f}{bound:>10.2f}{peer}"
                f"{t['xmge']:>9.2f}{100 * bound / t['xmge']:>8.1f}%{ratio}  {exact}"
            )
        if not args.no_layers:
            tables.append(f"\n{m} int8 ({model.target}, 1 thread), per layer:")
            tables += layer_table(model, x, peak, args.iters)
    print(
        f"\n{'model':<10}{'time':<5}{'GMAC':>8}{'bound ms':>10}{'ORT q ms':>9}{'0.8xORT':>9}{'needs':>10}"
        f"{'xmge ms':>9}{'xmge %':>9}{'x/ORT':>8}  exact"
    )
    print("\n".join(summary))
    print("\n".join(tables))
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
