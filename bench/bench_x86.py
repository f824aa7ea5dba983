"""xmge's generated x86 code against ONNX Runtime and PyTorch on the CPU, side by side in one run.

    python bench/bench_x86.py [--models resnet18,resnet50,mobilenet_v2,shufflenet_v2] [--threads 1,2]
                              [--targets x86-avx2-nchw88,x86-avx512-nchw88,x86-avx512]
                              [--size 224] [--iters 20] [--int8 | --no-int8]

For each model (batch 1, float32): trace, compile for every x86 target this machine runs (compile
time reported; ResNet-50's, from traced function to built library, is checked against the 60 s
budget), export the *same* optimised graph and weights to ONNX (:mod:`backends.onnx`, so
every runtime computes the identical function), run it in ONNX Runtime, and run the same graph op by
op with PyTorch's CPU kernels. Latencies are medians, taken in interleaved rounds (the best round's
median, so that a noisy shared machine penalises every runtime alike). Prints medians, ratios
(xmge / ORT and xmge / torch, lower is better), GFLOP/s against the measured single-core FMA peak
(a register-only FMA loop compiled for the same ISA), and the slowest kernels of each model's best
target (per-kernel profile build).

float16 (``--ioc16``, on by default where the CPU has AVX512-FP16): the model compiled for
``x86-avx512-fp16+ioc16`` (float16 storage and arithmetic inside, float32 in and out) joins the
interleaved rounds; its table gives the latency against xmge's best float32 target at the same
thread count (issue 14's goal: at most 0.6x) and the output's relative L2 error against float32.

int8 (``--int8``, on by default): the float model is quantized post-training
(``compiler.quantization.quantize`` with one calibration batch: the same graph, int8 convolutions)
and compiled for the host target (its ``vnni`` feature selects the AVX512-VNNI kernels, ``amx``
the AMX-INT8 tile convolutions where Linux grants tile data; then the ``vnni ms`` column is the same
target without ``amx``, timed in the same interleaved rounds); the
int8 table gives its latency against xmge's best float32 target at the same thread count (timed in
the same interleaved rounds; ``cpu i/f``: the ratio of single-thread CPU times, which a shared
machine's load does not skew), the
outputs' exactness against the reference interpreter, and ONNX Runtime's int8 latency on a QDQ
model that ``onnxruntime.quantization.quantize_static`` makes from the same float ONNX graph
(activations u8, weights s8, its own calibration on the same batch). OpenVINO's columns appear when
``openvino`` is importable (float32, and its default CPU inference precision: bfloat16 on AMX), else
a note says so; the int8 table's ``OV def`` column is OpenVINO's default.

Contended (``--contended``, a mode of its own): each model's float32 latency is timed at 1 and 2
threads, xmge and ONNX Runtime, in interleaved rounds, first on the machine as it is, then with a
``nice -n 10`` CPU-bound process pinned to the last CPU running during the timed rounds (the output
says so); xmge also at 2 threads with ``XMGE_ADAPT_THREADS=0`` ("2 fixed": the runtime's choice
between all threads and one off, so the thread pool's own behaviour,
``backends/c/runtime/xm_parallel.c``, shows) and on libgomp (``XMGE_LIBGOMP=1``, "2 gomp": what the
pool replaced). Goals (issue 33): without the burner a 2-thread speed-up >= 1.5 on MobileNetV2 and
ShuffleNetV2 (on a quiet machine); with it, 2-thread latency <= 1-thread latency. ``--burners
10,0,0all`` adds phases: a ``nice -n 0`` burner on the last CPU, and one on every CPU (both cores
busy: the adaptive choice's reason to exist, where its goal is to fall back to about 1-thread
latency). Burners are niced relative to this process.

Tuned (``--tune``, on by default): each model is tuned on this machine for each thread count
(``compile(..., tune=True)``: every kernel family that matches each op and, for the host target,
plain NCHW against NCHW88, measured; :mod:`compiler.driver.tuner`) into a fresh tuning file per thread
count (or ``--tuning-file F.json``: ``F.t1.json``, ``F.t2.json``, whose entries are re-used without
timing), and the tuned model, the untuned
host model and ONNX Runtime are timed in the same interleaved rounds. The table gives the tuning time
(ResNet-50's checked against the 60 s budget), both latencies, the tuned/untuned ratio of wall and
(one thread) CPU medians, and the ratios to ORT and to OpenVINO float32 (timed in the same rounds,
where ``openvino`` is importable); ``kept`` says which one a user should run: the
untuned model when the tuned one was slower in this final timing (so the kept column is never slower
than untuned).

bfloat16 (``--bf16``, on by default where the CPU has AVX512-BF16): the model compiled for
``x86-avx512-vnni-amx+bf16`` where the CPU has AMX-BF16 and Linux grants tile data, else for
``x86-avx512-nchw88[-vnni]+bf16`` (``vdpbf16ps`` on the NCHW88 graph; :func:`bf16_target`) (float32
convolutions and matrix products on bfloat16 inputs) joins the interleaved rounds; its table gives the
latency against xmge's best float32 target and OpenVINO's default, at 1 thread the same two ratios
in process CPU time (interleaved run by run: ``cpu b/f``, ``cpu b/OV``), and the output's error
against float32 (relative L2, max abs / max |y|).
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from xdsl.dialects.builtin import ModuleOp, TensorType  # noqa: E402

from backends.onnx.export import to_onnx  # noqa: E402
from compiler.driver.compile import benchmark, compile  # noqa: E402
from compiler.progress import track  # noqa: E402
from dialects import enums  # noqa: E402
from dialects import tensor as T  # noqa: E402

E = enums.ElemwiseMode
IOC16_TARGET = "x86-avx512-fp16+ioc16"
BF16_TARGET = "x86-avx512-vnni-amx+bf16"


def cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo (every figure here belongs to one CPU)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def bf16_target() -> str | None:
    """The ``+bf16`` target this CPU runs best: AMX-BF16 tiles where the CPU has them and Linux grants
    tile data, else AVX512-BF16 (``vdpbf16ps``, e.g. AMD EPYC Zen 4) on the NCHW88 graph (its
    depthwise, pooling and Winograd layers are the float32 NCHW88 kernels), else none."""
    from backends.c.templates.x86.x86_amx_os import amx_permitted
    from compiler.driver.targets import parse_target, runs_here

    if runs_here(parse_target(BF16_TARGET)) and amx_permitted():
        return BF16_TARGET
    for text in ("x86-avx512-nchw88-vnni+bf16", "x86-avx512-nchw88+bf16"):
        if runs_here(parse_target(text)):
            return text
    return None


# ----------------------------------------------------------------------------------------------
# Models


MODELS = {
    "resnet18": ("resnet", "resnet18"),
    "resnet50": ("resnet", "resnet50"),
    "mobilenet_v2": ("mobilenet_v2", "mobilenet_v2"),
    "shufflenet_v2": ("shufflenet_v2", "shufflenet_v2_x1_0"),
}


def make_model(name: str) -> Any:
    """A hub model by bench name (``module:function`` also works), with non-trivial BN statistics."""
    import importlib

    module, fn = MODELS.get(name, tuple(name.split(":")) if ":" in name else (name, name))
    try:
        net = getattr(importlib.import_module(f"compiler.hub.{module}"), fn)()
    except (ImportError, AttributeError):
        return None
    rng = np.random.default_rng(0)
    for pname, t in net.named_tensors():
        if "running_var" in pname:
            t._reset(rng.uniform(0.5, 2.0, t.shape).astype(np.float32))
        elif "running_mean" in pname or pname.endswith("bias"):
            t._reset(rng.uniform(-0.1, 0.1, t.shape).astype(np.float32))
    net.eval()
    return net


def conv_flops(module: ModuleOp) -> float:
    """Multiply-adds x 2 of convolutions and matrix products in the tensor IR."""
    total = 0.0
    for op in module.walk():
        if isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
            w = op.operands[1].type
            out = op.results[0].type
            assert isinstance(w, TensorType) and isinstance(out, TensorType)
            ws = w.get_shape()
            per_out = math.prod(ws[-3:])  # ICg * FH * FW
            total += 2.0 * math.prod(out.get_shape()) * per_out
        elif isinstance(op, T.MatrixMulOp):
            a, out = op.operands[0].type, op.results[0].type
            assert isinstance(a, TensorType) and isinstance(out, TensorType)
            k = a.get_shape()[0] if op.params()["transpose_a"] else a.get_shape()[-1]
            total += 2.0 * math.prod(out.get_shape()) * k
    return total


# ----------------------------------------------------------------------------------------------
# FMA peak


def fma_peak(isa: str) -> float:
    """Single-core float32 GFLOP/s of independent FMA chains held in registers."""
    vec, vt, set1, fma, hadd = {
        "avx512": (16, "__m512", "_mm512_set1_ps", "_mm512_fmadd_ps", "_mm512_reduce_add_ps({v})"),
        "avx2": (8, "__m256", "_mm256_set1_ps", "_mm256_fmadd_ps", "_mm256_cvtss_f32({v})"),
    }[isa]
    n = 12
    add = "_mm512_add_ps" if isa == "avx512" else "_mm256_add_ps"
    src = f"""
#include <immintrin.h>
float xm_peak(long iters) {{
  {" ".join(f"{vt} a{i} = {set1}(1.f + {i} * 1e-3f);" for i in range(n))}
  const {vt} b = {set1}(0.999999f), c = {set1}(1e-7f);
  for (long k = 0; k < iters; ++k) {{
    {" ".join(f"a{i} = {fma}(a{i}, b, c);" for i in range(n))}
    __asm__ volatile("" : {", ".join(f'"+v"(a{i})' for i in range(n))});
  }}
  {vt} s = a0; {" ".join(f"s = {add}(s, a{i});" for i in range(1, n))}
  return {hadd.format(v="s")};
}}
"""
    flags = ["-O2", "-mavx2", "-mfma"] + (["-mavx512f"] if isa == "avx512" else [])
    with tempfile.TemporaryDirectory() as d:
        c, so = os.path.join(d, "peak.c"), os.path.join(d, "peak.so")
        with open(c, "w") as f:
            f.write(src)
        subprocess.run(["gcc", *flags, "-shared", "-fPIC", c, "-o", so], check=True)
        lib = ctypes.CDLL(so)
        lib.xm_peak.restype = ctypes.c_float
        lib.xm_peak.argtypes = [ctypes.c_long]
        iters = 20_000_000
        best = 0.0
        for _ in range(3):
            t0 = time.perf_counter()
            lib.xm_peak(iters)
            dt = time.perf_counter() - t0
            best = max(best, iters * n * vec * 2 / dt / 1e9)
        return best


# ----------------------------------------------------------------------------------------------


def interleaved(runners: dict[str, Any], iters: int, rounds: int = 3) -> dict[str, float]:
    """Median latency (ms) of each runner: ``rounds`` interleaved rounds, the best round's median."""
    best = {k: math.inf for k in runners}
    for _ in range(rounds):
        for k, run in runners.items():
            best[k] = min(best[k], benchmark(run, warmup=2, iters=max(3, iters // rounds))["median_ms"])
    return best


def openvino_runners(ov: Any, plain: ModuleOp, x: np.ndarray, threads: int) -> dict[str, Any]:
    """OpenVINO on the same ONNX graph: float32 precision, and the CPU plugin's default precision."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        to_onnx(plain, path)
        core = ov.Core()
        model = core.read_model(path)
        out: dict[str, Any] = {}
        for key, cfg in (("openvino f32", {"INFERENCE_PRECISION_HINT": "f32"}), ("openvino default", {})):
            compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, **cfg})
            request = compiled.create_infer_request()
            out[key] = lambda r=request: r.infer({0: x})
        return out


def ort_qdq_session(ort: Any, plain: ModuleOp, x: np.ndarray, threads: int) -> Any:
    """ONNX Runtime's static QDQ int8 model of the same float graph (u8 activations, s8 weights)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class OneBatch(CalibrationDataReader):
        def __init__(self, name: str) -> None:
            self.items = iter([{name: x}])

        def get_next(self) -> Any:
            return next(self.items, None)

    with tempfile.TemporaryDirectory() as d:
        fp, qp = os.path.join(d, "f32.onnx"), os.path.join(d, "int8.onnx")
        to_onnx(plain, fp)
        name = ort.InferenceSession(fp, providers=["CPUExecutionProvider"]).get_inputs()[0].name
        quantize_static(fp, qp, OneBatch(name), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        return ort.InferenceSession(qp, so, providers=["CPUExecutionProvider"]), name


def cpu_medians(
    runners: dict[str, Any], iters: int, clock: Callable[[], float] = time.thread_time
) -> dict[str, float]:
    """Median CPU time (ms, this thread's clock) of each runner, runs interleaved one by one: on a
    shared machine, what a single-threaded model costs regardless of the other processes.
    ``clock=time.process_time`` counts every thread of the process (OpenVINO infers on its own)."""
    times: dict[str, list[float]] = {k: [] for k in runners}
    for run in runners.values():
        run()
    for _ in range(iters):
        for k, run in runners.items():
            t0 = clock()
            run()
            times[k].append((clock() - t0) * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}


def int8_report(
    net: Any,
    name: str,
    x: np.ndarray,
    threads: list[int],
    f32_models: dict[int, Any],
    ort: Any,
    iters: int,
    notes: list[str],
    ov_default: dict[int, float] | None = None,
    profile_kernels: int = 0,
) -> list[str]:
    """Rows of the int8 table for one model (see the module docstring): the fastest float32 model
    runs in the same interleaved rounds (one load for both sides of the ratio), and at one thread
    the ratio of CPU times too."""
    from compiler.driver.targets import host_target
    from compiler.quantization import quantize
    from semantics import run_module

    host = host_target()
    target = str(host)
    # the amx column's baseline: the same target on the VNNI kernels
    vnni_target = target.replace("-amx", "") if "amx" in host.features else None
    qnet = quantize(net, [x])
    first = compile(qnet, target, [x], threads=threads[0])
    models = {threads[0]: first}
    for t in threads[1:]:
        models[t] = compile(first._stages["tensor"], target, threads=t)  # type: ignore[arg-type]
    vnni_models = {
        t: compile(first._stages["tensor"], vnni_target, threads=t)  # type: ignore[arg-type]
        for t in (threads if vnni_target else ())
    }
    want = run_module(first._stages["tensor"], [x])[0]  # type: ignore[arg-type]
    exact = all(np.array_equal(m(x), want) for m in (*models.values(), *vnni_models.values()))
    rows = []
    for t in threads:
        runners: dict[str, Any] = {"int8": lambda m=models[t]: m(x), "f32": lambda m=f32_models[t]: m(x)}
        if t in vnni_models:
            runners["vnni"] = lambda m=vnni_models[t]: m(x)
        if ort is not None:
            try:
                session, in_name = ort_qdq_session(ort, inference_clean_of(net, x), x, t)
                runners["ortq"] = lambda s=session, f={in_name: x}: s.run(None, f)
            except Exception as exc:  # noqa: BLE001 - a missing quantizer is a note, not a failure
                notes.append(f"{name}: ORT QDQ int8 model not made ({type(exc).__name__}: {exc})")
        ms = interleaved(runners, iters)
        q, f, o = ms["int8"], ms["f32"], ms.get("ortq", math.nan)
        v = ms.get("vnni", math.nan)
        cpu = cpu_medians({k: runners[k] for k in ("int8", "f32")}, iters) if t == 1 else {}
        c = cpu.get("int8", math.nan) / cpu.get("f32", math.nan)
        ov = (ov_default or {}).get(t, math.nan)
        rows.append(
            f"{name:<14}{target:<30}{t:>4}{q:>9.2f}{v:>9.2f}{f:>9.2f}{q / f:>9.2f}{c:>9.2f}{o:>9.2f}"
            f"{q / o:>7.2f}{ov:>9.2f}{q / ov:>7.2f}  " + ("yes" if exact else "NO")
        )
    if first.times:
        notes.append(f"{name} int8 {target}: compile {sum(first.times.values()):.1f} s")
    if profile_kernels:
        notes += profile_notes(first, x, f"{name} int8 {target} (1 thread)", profile_kernels)
    return rows


def tuned_report(
    net: Any,
    name: str,
    x: np.ndarray,
    threads: list[int],
    iters: int,
    sessions: dict[int, Any],
    tuning_file: str | None,
    notes: list[str],
    peers: Callable[[int], dict[str, Any]] = lambda t: {},
) -> list[str]:
    """Rows of the tuned table for one model (see the module docstring); ``peers(t)``: other
    runtimes' runners at ``t`` threads to time in the same rounds (OpenVINO float32)."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for t in threads:
            # a tuning file holds one thread count's choices: one file per count
            path = f"{os.path.splitext(tuning_file or os.path.join(d, 'tuning.json'))[0]}.t{t}.json"
            untuned = compile(net, None, [x], threads=t)
            t0 = time.perf_counter()
            tuned = compile(net, None, [x], threads=t, tune=True, tuning_file=path, progress=False)
            total = time.perf_counter() - t0
            report = tuned.tune_report
            runners: dict[str, Any] = {"untuned": lambda m=untuned: m(x), "tuned": lambda m=tuned: m(x)}
            if t in sessions:
                feed = {sessions[t].get_inputs()[0].name: x}
                runners["ort"] = lambda s=sessions[t], f=feed: s.run(None, f)
            runners.update(peers(t))
            ms = interleaved(runners, iters)
            cpu = cpu_medians({k: runners[k] for k in ("untuned", "tuned")}, iters) if t == 1 else {}
            kept = "tuned" if ms["tuned"] <= ms["untuned"] else "untuned"
            best = ms[kept]
            moved = sum(r.chosen != r.candidates[0] for rs in report.signatures.values() for r in rs)
            ort = ms.get("ort", math.nan)
            budget = ("  met" if report.seconds <= 60 else "  MISSED") if name == "resnet50" else ""
            rows.append(
                f"{name:<14}{str(tuned.target):<30}{t:>4}{report.seconds:>8.1f}{budget:<7}"
                f"{ms['untuned']:>9.2f}{ms['tuned']:>9.2f}{ms['tuned'] / ms['untuned']:>8.2f}"
                f"{cpu.get('tuned', math.nan) / cpu.get('untuned', math.nan):>9.2f}{best / ort:>9.2f}"
                f"{best / ms.get('openvino f32', math.nan):>9.2f}{moved:>6}  {kept}"
            )
            phases = ", ".join(f"{k} {v:.1f}" for k, v in report.phases.items())
            notes.append(
                f"{name} tuned ({t} thr): tune {report.seconds:.1f} s + compile "
                f"{total - report.seconds:.1f} s "
                f"({report.builds} timing builds; {phases}); " + "; ".join(report.notes[:2])
            )
    return rows


def profile_notes(model: Any, x: np.ndarray, title: str, count: int) -> list[str]:
    """The ``count`` slowest kernels of one run of ``model``, as note lines."""
    from compiler.driver.compile import profile

    prof = profile(model, [x])
    total = sum(v for _, v in prof) or 1.0
    return [f"{title} slowest kernels of {total:.2f} ms:"] + [
        f"    {v:7.3f} ms {100 * v / total:4.1f}%  {k}" for k, v in prof[:count]
    ]


def inference_clean_of(net: Any, x: np.ndarray) -> ModuleOp:
    """The float model's optimised plain graph (what ORT's quantizer starts from)."""
    from compiler.driver.compile import inference_clean

    m = compile(net, "ref", [x])
    return inference_clean(m._stages["tensor"])  # type: ignore[arg-type]


def burner_cpu() -> int:
    """The CPU the contended mode's CPU burner is pinned to: the last one this process may use."""
    return max(os.sched_getaffinity(0))


def start_burner(cpu: int, nice: int = 10) -> subprocess.Popen[bytes]:
    """A ``nice -n NICE`` CPU-bound process pinned to ``cpu`` (the "other core" of issue 33)."""
    return subprocess.Popen(
        ["nice", "-n", str(nice), sys.executable, "-c", "while True: pass"],
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )


def start_burners(spec: str, cpu: int) -> list[subprocess.Popen[bytes]]:
    """``spec``: ``N`` (one ``nice -n N`` burner on ``cpu``) or ``Nall`` (one on every usable CPU:
    every core busy, where two threads really lose and one should be chosen)."""
    nice = int(spec.removesuffix("all"))
    cpus = sorted(os.sched_getaffinity(0)) if spec.endswith("all") else [cpu]
    return [start_burner(c, nice) for c in cpus]


def burner_title(spec: str, cpu: int) -> str:
    nice = spec.removesuffix("all")
    if spec.endswith("all"):
        return f"a nice -n {nice} CPU burner on every CPU"
    return f"a nice -n {nice} CPU burner pinned to CPU {cpu}"


def ort_session(ort: Any, plain: ModuleOp, threads: int) -> Any:
    """ONNX Runtime on the same optimised float graph, ``threads`` intra-op threads."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        to_onnx(plain, path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def contended_report(
    models: list[str], target: str, size: int, iters: int, burners: tuple[str, ...] = ("10",)
) -> None:
    """1- vs 2-thread latency of each model, xmge and ONNX Runtime, without and then next to CPU
    burners (``--contended``; ``burners``: :func:`start_burners` specs, default a ``nice -n 10``
    one pinned to the other core)."""
    from compiler.driver.compile import inference_clean
    from compiler.driver.targets import parse_target, runs_here

    if not runs_here(parse_target(target)):
        print(f"this CPU cannot run {target}: the contended table is skipped")
        return
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
        print("onnxruntime is not installed: the ORT columns are skipped")
    cpu = burner_cpu()
    phases = ("", *burners)
    rows: dict[str, list[str]] = {b: [] for b in phases}
    for name in models:
        net = make_model(name)
        if net is None:
            print(f"{name}: not in compiler.hub, skipped")
            continue
        x = np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)
        one = compile(net, target, [x], threads=1)
        tensor = one._stages["tensor"]
        two = compile(tensor, target, threads=2)  # type: ignore[arg-type]
        fixed = compile(tensor, target, threads=2)  # type: ignore[arg-type]
        os.environ["XMGE_LIBGOMP"] = "1"  # read by the build
        try:
            gomp = compile(tensor, target, threads=2)  # type: ignore[arg-type]
        finally:
            del os.environ["XMGE_LIBGOMP"]
        one(x), two(x)
        os.environ["XMGE_ADAPT_THREADS"] = "0"  # read when the instance is created: at its first run
        try:
            fixed(x), gomp(x)
        finally:
            del os.environ["XMGE_ADAPT_THREADS"]
        models = (("1", one), ("2", two), ("2 fixed", fixed), ("2 gomp", gomp))
        runners = {k: (lambda m=m, a=x: m(a)) for k, m in models}
        if ort is not None:
            plain = inference_clean(tensor)  # type: ignore[arg-type]
            for t in (1, 2):
                s = ort_session(ort, plain, t)
                feed = {s.get_inputs()[0].name: x}
                runners[f"ort {t}"] = lambda s=s, f=feed: s.run(None, f)
        for phase in phases:
            # burners start after the builds (gcc would share their core) and run through every round
            running = start_burners(phase, cpu) if phase else []
            try:
                time.sleep(0.2)
                ms = interleaved(runners, iters * 3)
            finally:
                for b in running:
                    b.kill()
                    b.wait()
            o1, o2 = ms.get("ort 1", math.nan), ms.get("ort 2", math.nan)
            if phase == "10":
                goal = "met" if max(ms["2"], ms["2 fixed"]) <= ms["1"] else "NOT met"
            elif phase:  # the adaptive choice must fall back to one thread where two lose
                goal = "met" if ms["2"] <= 1.05 * ms["1"] else "NOT met"
            else:
                goal = "met" if ms["1"] / ms["2"] >= 1.5 else "NOT met"
            rows[phase].append(
                f"{name:<14}{ms['1']:>8.2f}{ms['2']:>8.2f}{ms['2 fixed']:>9.2f}{ms['2 gomp']:>8.2f}"
                f"{ms['1'] / ms['2']:>7.2f}{ms['1'] / ms['2 fixed']:>9.2f}{ms['1'] / ms['2 gomp']:>8.2f}"
                f"{o1:>8.2f}{o2:>8.2f}{o1 / o2:>7.2f}  {goal}"
            )
        print(f"{name} done", flush=True)
    header = (
        f"{'model':<14}{'1 thr':>8}{'2 thr':>8}{'2 fixed':>9}{'2 gomp':>8}{'1/2':>7}{'1/fixed':>9}"
        f"{'1/gomp':>8}{'ORT 1':>8}{'ORT 2':>8}{'O1/O2':>7}  goal"
    )
    print(
        f"{target}, wall ms (best round's median), speed-ups as 1-thread/2-thread; '2 fixed': the "
        "runtime's choice between 2 threads and 1 off (XMGE_ADAPT_THREADS=0), the thread pool alone; "
        "'2 gomp': the same kernels on libgomp (XMGE_LIBGOMP=1), fixed 2 threads"
    )
    print("no burner (goal, issue 33: 2-thread speed-up >= 1.5 on MobileNetV2 and ShuffleNetV2)")
    print(header)
    print("\n".join(rows[""]))
    for phase in burners:
        goal = (
            "goal: 2-thread <= 1-thread, '2 thr' and '2 fixed'"
            if phase == "10"
            else "goal: '2 thr' (the adaptive choice) <= 1.05 x 1-thread"
        )
        print(f"contended: {burner_title(phase, cpu)} during the timed rounds ({goal})")
        print(header)
        print("\n".join(rows[phase]))
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")


def main() -> None:  # noqa: C901 - one report
    from compiler.driver.compile import inference_clean
    from compiler.driver.targets import parse_target, runs_here

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,shufflenet_v2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--targets", default="x86-avx2-nchw88,x86-avx512-nchw88,x86-avx512")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--iters", type=int, default=21)
    ap.add_argument("--profile", type=int, default=6, help="kernels to list per model (0: no profile)")
    ap.add_argument(
        "--int8",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also quantize each model and time xmge's int8 kernels (and ORT's QDQ int8)",
    )
    ap.add_argument(
        "--ioc16",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"also time {IOC16_TARGET} (float16 compute) where the CPU has AVX512-FP16",
    )
    ap.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time +bf16 (bfloat16 inputs: AMX-BF16 tiles, else AVX512-BF16) where the CPU has it",
    )
    ap.add_argument(
        "--contended",
        action="store_true",
        help="only the threads tables: 1 vs 2 threads, xmge and ORT, without and next to a nice -n 10 "
        "CPU burner pinned to the last CPU",
    )
    ap.add_argument("--contended-target", default="x86-avx512-nchw88")
    ap.add_argument(
        "--burners",
        default="10",
        help="--contended: comma-separated burner phases, each a nice value (one burner pinned to the "
        "last CPU) or NICEall (one on every CPU), e.g. 10,0,0all",
    )
    ap.add_argument(
        "--tune",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also tune each model here (compile(tune=True)) and time it against the untuned model",
    )
    ap.add_argument(
        "--tuning-file", default=None, help="--tune: re-use and extend FILE.tN.json (N: the thread count)"
    )
    args = ap.parse_args()
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs), load average {os.getloadavg()}")
    if args.contended:
        burners = tuple(b for b in args.burners.split(",") if b)
        contended_report(args.models.split(","), args.contended_target, args.size, args.iters, burners)
        return
    try:
        import onnxruntime as ort

        ort.set_default_logger_severity(3)  # the quantizer's sessions warn per unused initializer
    except ImportError:
        ort = None
        print("onnxruntime is not installed (pip install onnxruntime onnx): ORT columns are skipped")
    try:
        import torch
    except ImportError:
        torch = None
        print("torch is not installed: torch columns are skipped")

    targets = [t for t in args.targets.split(",") if runs_here(parse_target(t))]
    skipped = [t for t in args.targets.split(",") if t not in targets]
    if skipped:
        print(f"this CPU cannot run {', '.join(skipped)}: skipped")
    peaks = {isa: fma_peak(isa) for isa in {"avx512" if "avx512" in t else "avx2" for t in targets}}
    print("measured single-core FMA peak: " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in peaks.items()))
    threads = [int(t) for t in args.threads.split(",")]
    header = (
        f"{'model':<14}{'target':<17}{'thr':>4}{'xmge ms':>9}{'ORT ms':>9}{'torch ms':>9}{'x/ORT':>7}"
        f"{'x/torch':>8}{'GFLOP/s':>9}{'%peak':>7}"
    )
    rows: list[str] = []
    int8_rows: list[str] = []
    ioc16_rows: list[str] = []
    ioc16 = args.ioc16 and runs_here(parse_target(IOC16_TARGET))
    if args.ioc16 and not ioc16:
        print(f"this CPU cannot run {IOC16_TARGET} (no AVX512-FP16): the float16 table is skipped")
    tuned_rows: list[str] = []
    bf16_rows: list[str] = []
    bf16_tgt = bf16_target() if args.bf16 else None
    bf16 = bf16_tgt is not None
    if args.bf16 and not bf16:
        print("this CPU has neither AMX-BF16 (with tile data) nor AVX512-BF16: the bfloat16 table is skipped")
    notes: list[str] = []
    try:
        import openvino
    except ImportError:
        openvino = None
        notes.append("openvino is not installed in this venv: OpenVINO columns are skipped")
    for name in track(args.models.split(","), "bench x86", detail=str):
        net = make_model(name)
        if net is None:
            print(f"{name}: not in compiler.hub, skipped")
            continue
        x = np.random.default_rng(1).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
        compiled: dict[tuple[str, int], Any] = {}
        for tgt in targets:
            t0 = time.perf_counter()
            first = compile(net, tgt, [x], threads=threads[0])
            ctime = time.perf_counter() - t0
            compiled[(tgt, threads[0])] = first
            for t in threads[1:]:
                compiled[(tgt, t)] = compile(first._stages["tensor"], tgt, threads=t)  # type: ignore[arg-type]
            budget = "  (budget 60 s: " + ("met)" if ctime < 60 else "MISSED)") if name == "resnet50" else ""
            notes.append(
                f"{name} {tgt}: compile {ctime:.1f} s (build {first.times.get('build', 0):.1f} s){budget}, "
                f"arena {first.arena_size / 2**20:.1f} MiB, weights {first.weights_size / 2**20:.1f} MiB"
            )
        brain: dict[int, Any] = {}
        if bf16:
            assert bf16_tgt is not None
            brain = {t: compile(net, bf16_tgt, [x], threads=t) for t in threads}
        ov_default: dict[int, float] = {}
        half: dict[int, Any] = {}
        if ioc16:
            half = {t: compile(net, IOC16_TARGET, [x], threads=t) for t in threads}
        base = compiled[(targets[0], threads[0])]
        plain = inference_clean(base._stages["tensor"])  # type: ignore[arg-type]
        flops = conv_flops(plain)
        sessions: dict[int, Any] = {}
        if ort is not None:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, f"{name}.onnx")
                to_onnx(plain, path)
                for t in threads:
                    so = ort.SessionOptions()
                    so.intra_op_num_threads = t
                    so.inter_op_num_threads = 1
                    so.log_severity_level = 3
                    sessions[t] = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            feed = {sessions[threads[0]].get_inputs()[0].name: x}
            y_ref = sessions[threads[0]].run(None, feed)[0]
            for tgt in targets:
                err = float(np.abs(compiled[(tgt, threads[0])](x) - y_ref).max())
                notes.append(f"{name} {tgt}: max |xmge - ORT| = {err:.2e} ({flops / 1e9:.2f} GFLOP)")
        trun = None
        if torch is not None:
            from backends.onnx.torch_runner import torch_runner

            trun = torch_runner(plain)
        best_target, best_ms = targets[0], math.inf
        f32_best: dict[int, float] = {}
        for t in threads:
            runners: dict[str, Any] = {tgt: (lambda m=compiled[(tgt, t)], a=x: m(a)) for tgt in targets}
            if t in sessions:
                runners["ort"] = lambda s=sessions[t], f=feed: s.run(None, f)
            if trun is not None and torch is not None:
                torch.set_num_threads(t)
                tx = torch.from_numpy(x)

                def run_torch(r: Any = trun, a: Any = tx) -> Any:
                    with torch.inference_mode():
                        return r(a)

                runners["torch"] = run_torch
            if openvino is not None:
                runners.update(openvino_runners(openvino, plain, x, t))
            if t in half:
                runners[IOC16_TARGET] = lambda m=half[t], a=x: m(a)
            if t in brain:
                runners["bf16"] = lambda m=brain[t], a=x: m(a)
            ms = interleaved(runners, args.iters)
            if "openvino default" in ms:
                ov_default[t] = ms["openvino default"]
            for key in ("openvino f32", "openvino default"):
                if key in ms:
                    notes.append(f"{name} {key} ({t} thr): {ms[key]:.2f} ms")
            f32_best[t] = min(ms[tgt] for tgt in targets)
            if t in half:
                y32 = compiled[(targets[0], t)](x)
                rel = float(np.linalg.norm(half[t](x) - y32) / np.linalg.norm(y32))
                h_ms = ms[IOC16_TARGET]
                ioc16_rows.append(
                    f"{name:<14}{t:>4}{h_ms:>10.2f}{f32_best[t]:>9.2f}{h_ms / f32_best[t]:>11.2f}{rel:>12.2e}"
                )
            if t in brain:
                y32 = compiled[(targets[0], t)](x)
                yb = brain[t](x)
                rel = float(np.linalg.norm(yb - y32) / np.linalg.norm(y32))
                mx = float(np.abs(yb - y32).max() / np.abs(y32).max())
                b_ms, ov = ms["bf16"], ov_default.get(t, math.nan)
                # 1 thread: process CPU time too (a loaded machine's wall times mislead), interleaved
                keys = ("bf16", min(targets, key=lambda k: ms[k]), "openvino default")
                mine = {k: runners[k] for k in keys if k in runners}
                cpu = cpu_medians(mine, args.iters, time.process_time) if t == 1 else {}
                cpu_bf = cpu["bf16"] / cpu[keys[1]] if cpu else math.nan
                cpu_bo = cpu["bf16"] / cpu[keys[2]] if keys[2] in cpu else math.nan
                bf16_rows.append(
                    f"{name:<14}{t:>4}{b_ms:>9.2f}{f32_best[t]:>9.2f}{b_ms / f32_best[t]:>10.2f}{ov:>9.2f}"
                    f"{b_ms / ov:>8.2f}{cpu_bf:>9.2f}{cpu_bo:>9.2f}{rel:>12.2e}{mx:>12.2e}"
                )
            for tgt in targets:
                xm_ms = ms[tgt]
                if t == threads[0] and xm_ms < best_ms:
                    best_target, best_ms = tgt, xm_ms
                gf = flops / xm_ms / 1e6
                peak = peaks["avx512" if "avx512" in tgt else "avx2"] * t
                ort_ms, th_ms = ms.get("ort", math.nan), ms.get("torch", math.nan)
                rows.append(
                    f"{name:<14}{tgt:<17}{t:>4}{xm_ms:>9.2f}{ort_ms:>9.2f}{th_ms:>9.2f}{xm_ms / ort_ms:>7.2f}"
                    f"{xm_ms / th_ms:>8.2f}{gf:>9.1f}{100 * gf / peak:>6.0f}%"
                )
        if args.profile:
            notes += profile_notes(
                compiled[(best_target, threads[0])],
                x,
                f"{name} {best_target} (fastest, 1 thread)",
                args.profile,
            )
        if args.tune:
            tuned_rows += tuned_report(
                net, name, x, threads, args.iters, sessions, args.tuning_file, notes,
                peers=lambda t, g=plain, a=x: {
                    k: v for k, v in openvino_runners(openvino, g, a, t).items() if k == "openvino f32"
                } if openvino is not None else {},
            )  # fmt: skip
        if args.int8:
            best = {t: compiled[(best_target, t)] for t in threads}
            int8_rows += int8_report(
                net, name, x, threads, best, ort, args.iters, notes, ov_default, args.profile
            )
        print(f"{name} done", flush=True)
    notes.append(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    print("\n".join(notes))
    print(header)
    print("\n".join(rows))
    if int8_rows:
        print(
            f"\n{'model':<14}{'int8 target':<30}{'thr':>4}{'int8 ms':>9}{'vnni ms':>9}{'f32 ms':>9}"
            f"{'int8/f32':>9}{'cpu i/f':>9}{'ORT q ms':>9}{'x/ORTq':>7}{'OV def':>9}{'x/OV':>7}  exact"
        )
        print("\n".join(int8_rows))
    if tuned_rows:
        print(
            "\ntuned float32 (host target; layout and kernels measured here; cpu t/u: 1-thread CPU times)"
            f"\n{'model':<14}{'tuned target':<30}{'thr':>4}{'tune s':>8}{'':<7}{'untuned':>9}{'tuned':>9}"
            f"{'t/u':>8}{'cpu t/u':>9}{'kept/ORT':>9}{'kept/OVf':>9}{'moved':>6}  kept"
        )
        print("\n".join(tuned_rows))
    if bf16_rows:
        print(f"\nbfloat16: {bf16_tgt}")
        print(
            f"{'model':<14}{'thr':>4}{'bf16 ms':>9}{'f32 ms':>9}{'bf16/f32':>10}{'OV def':>9}{'x/OV':>8}"
            f"{'cpu b/f':>9}{'cpu b/OV':>9}{'rel L2 err':>12}{'max/scale':>12}"
        )
        print("\n".join(bf16_rows))
    if ioc16_rows:
        print(f"\n{'model':<14}{'thr':>4}{'ioc16 ms':>10}{'f32 ms':>9}{'ioc16/f32':>11}{'rel L2 err':>12}")
        print("\n".join(ioc16_rows))


if __name__ == "__main__":
    main()
