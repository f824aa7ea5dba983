"""Latency of every zoo architecture in ``compiler.hub`` compiled for this machine (issue 11).

    python bench/bench_zoo.py [--models resnet18,bert,...] [--threads 1,2] [--iters 20]
                              [--seconds 4] [--json OUT.json] [--cache-dir DIR]

For each model at its real input size (batch 1; 224x224 classification, BERT at sequence length 128,
CLIP at 224; the detectors at a stated reduced size, see SIZE_NOTE): trace it, compile the traced
function for the host target (the compile time is traced function -> built library, with the C
build in a fresh cache unless ``--cache-dir`` names one), check the compiled output against the eager
run the trace made (largest error relative to the output's largest magnitude; int8: exact), and
print the median latency for each thread count (each count compiled on its own: the memory plan
depends on it). A model that fails to compile gets a row with the error and the run goes on.
``--json`` writes the rows (atomically) for later comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler as xm  # noqa: E402
from compiler import hub, jit  # noqa: E402
from compiler.driver.compile import benchmark, compile, to_module  # noqa: E402
from compiler.driver.targets import host_target  # noqa: E402
from compiler.progress import track  # noqa: E402

SIZE_NOTE = (
    "RetinaNet/FCOS run at 512x512 instead of the zoo's 800-pixel short side: tracing runs the model "
    "eagerly on the numpy reference first, which at 800x1333 takes minutes per model on this machine"
)

# a traceable function and its example inputs
Workload = tuple[Callable[..., Any], list[np.ndarray]]


@dataclass(frozen=True)
class ZooBench:
    config: str  # the entry and input size, as printed
    make: Callable[[], Workload]
    int8: bool = False


def _image(*shape: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def _module_workload(module: Any, inputs: list[np.ndarray]) -> Workload:
    module.eval()
    return (lambda *xs: module(*xs)), inputs


def _classifier(entry: str, size: int = 224) -> Callable[[], Workload]:
    def make() -> Workload:
        import importlib

        module, fn = entry.split(":")
        return _module_workload(
            getattr(importlib.import_module(f"compiler.hub.{module}"), fn)(), [_image(1, 3, size, size)]
        )

    return make


def _quantized(entry: str, size: int = 224) -> Callable[[], Workload]:
    def make() -> Workload:
        import compiler.hub.quantized as Q

        x = _image(1, 3, size, size)
        return _module_workload(getattr(Q, entry)(quantized=True, calibration_shape=x.shape), [x])

    return make


def _zoo_entry(entry: str, *shape: int, **kwargs: Any) -> Callable[[], Workload]:
    def make() -> Workload:
        return _module_workload(hub.load("megengine/models", entry, **kwargs), [_image(*shape)])

    return make


def _bert(length: int = 128) -> Workload:
    bert = hub.load("megengine/models", "uncased_L_12_H_768_A_12")
    bert.eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, bert.config.vocab_size, (1, length)).astype(np.int32)
    token_types = np.zeros((1, length), np.int32)
    mask = np.ones((1, length), np.int32)

    def run(i: Any, t: Any, m: Any) -> Any:
        return bert(i, t, m, output_all_encoded_layers=False)

    return run, [ids, token_types, mask]


def _clip(entry: str, image_tower_only: bool) -> Callable[[], Workload]:
    def make() -> Workload:
        clip = hub.load("megengine/models", entry)
        clip.eval()
        size = clip.config.image_resolution
        image = _image(1, 3, size, size)
        if image_tower_only:
            return (lambda x: clip.encode_image(x)), [image]
        vocab, length = clip.config.vocab_size, clip.config.context_length
        text = np.random.default_rng(0).integers(1, vocab - 1, (1, length)).astype(np.int32)
        text[:, 10] = vocab - 1  # the end-of-text token: the largest id
        return (lambda x, t: clip(x, t)), [image, text]

    return make


MODELS: dict[str, ZooBench] = {
    "resnet18": ZooBench("resnet18 224", _classifier("resnet:resnet18")),
    "resnet50": ZooBench("resnet50 224", _classifier("resnet:resnet50")),
    "resnext50_32x4d": ZooBench("resnext50_32x4d 224", _classifier("resnext:resnext50_32x4d")),
    "shufflenet_v2_x2_0": ZooBench("shufflenet_v2_x2_0 224", _classifier("shufflenet_v2:shufflenet_v2_x2_0")),
    "mobilenet_v2": ZooBench("mobilenet_v2 224", _classifier("mobilenet_v2:mobilenet_v2")),
    "quantized_resnet18": ZooBench("int8 resnet18 224", _quantized("quantized_resnet18"), int8=True),
    "quantized_mobilenet_v2": ZooBench(
        "int8 mobilenet_v2 224", _quantized("quantized_mobilenet_v2"), int8=True
    ),
    "quantized_shufflenet_v1": ZooBench(
        "int8 shufflenet_v1 g3 224", _quantized("quantized_shufflenet_v1"), int8=True
    ),
    "retinanet": ZooBench(
        "retinanet_res50 512x512*", _zoo_entry("retinanet_res50_coco_3x_800size", 1, 3, 512, 512)
    ),
    "fcos": ZooBench("fcos_res50 (GN) 512x512*", _zoo_entry("fcos_res50_coco_3x_800size", 1, 3, 512, 512)),
    "deeplabv3plus": ZooBench(
        "deeplabv3plus_res101 512", _zoo_entry("deeplabv3plus_res101_voc_512size", 1, 3, 512, 512)
    ),
    "simplebaseline": ZooBench(
        "simplebaseline_res50 256x192", _zoo_entry("simplebaseline_res50", 1, 3, 256, 192)
    ),
    "dcgan_generator": ZooBench("dcgan_generator nz100 ->64", _zoo_entry("dcgan_generator", 1, 100)),
    "wgan_generator": ZooBench("wgan_generator nz128 ->32", _zoo_entry("wgan_generator", 1, 128)),
    "bert": ZooBench("bert base seq128", _bert),
    "clip_vit_b_32": ZooBench("clip vit_b_32 224 + text77", _clip("vit_b_32", False)),
    "clip_rn50": ZooBench("clip rn50 224 + text77", _clip("rn50", False)),
    "clip_vit_b_32_image": ZooBench("clip vit_b_32 image 224", _clip("vit_b_32", True)),
    "clip_rn50_image": ZooBench("clip rn50 image 224", _clip("rn50", True)),
}


@dataclass
class Row:
    model: str
    config: str
    target: str
    trace_s: float = float("nan")
    compile_s: float = float("nan")
    build_s: float = float("nan")
    max_rel_err: float = float("nan")
    median_ms: dict[int, float] = field(default_factory=dict)
    error: str = ""


def _relative_error(got: list[np.ndarray], want: list[np.ndarray], int8: bool) -> float:
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        diff = float(np.abs(g.astype(np.float64) - w).max())
        worst = max(worst, diff if int8 else diff / max(float(np.abs(w).max()), 1e-6))
    return worst


def _iterations(run: Callable[[], Any], iters: int, seconds: float) -> int:
    """As many runs as fit ``seconds`` (at least 3, at most ``iters``), from one timed run."""
    t0 = time.perf_counter()
    run()
    once = time.perf_counter() - t0
    return max(3, min(iters, int(seconds / max(once, 1e-6))))


def bench_model(name: str, threads: list[int], iters: int, seconds: float) -> Row:
    spec = MODELS[name]
    target = host_target()
    row = Row(name, spec.config, str(target))
    try:
        t0 = time.perf_counter()
        fn, inputs = spec.make()
        traced = jit.trace(fn, symbolic=True, capture_as_const=True)
        eager = traced(*[xm.tensor(x) for x in inputs])
        eager_list = [e.numpy() for e in ([eager] if isinstance(eager, xm.Tensor) else eager)]
        row.trace_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        first = compile(traced, target, threads=threads[0])
        row.compile_s = time.perf_counter() - t0
        row.build_s = first.times.get("build", float("nan"))
        row.max_rel_err = _relative_error(first.run(inputs), eager_list, spec.int8)
        module = to_module(traced)
        for t in threads:
            compiled = first if t == threads[0] else compile(module, target, threads=t)

            def run(c: Any = compiled) -> Any:
                return c.run(inputs)

            n = _iterations(run, iters, seconds)
            row.median_ms[t] = benchmark(run, warmup=1, iters=n)["median_ms"]
    except Exception as exc:  # one model's failure is a row, not the end of the run
        row.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        traceback.print_exc(limit=-3)
    return row


def _format(rows: list[Row], threads: list[int]) -> str:
    head = f"{'model':<24}{'config':<30}{'trace s':>8}{'compile s':>10}{'(gcc s)':>8}{'max err':>9}"
    head += "".join(f"{f'{t} thr ms':>11}" for t in threads)
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.error:
            lines.append(f"{r.model:<24}{r.config:<30}FAILED: {r.error}")
            continue
        line = f"{r.model:<24}{r.config:<30}{r.trace_s:>8.1f}{r.compile_s:>10.1f}{r.build_s:>8.1f}"
        line += f"{r.max_rel_err:>9.1e}" + "".join(
            f"{r.median_ms.get(t, float('nan')):>11.2f}" for t in threads
        )
        lines.append(line)
    return "\n".join(lines)


def _write_json(path: str, payload: dict[str, Any]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".bench_zoo.", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated names (default: all)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iters", type=int, default=20, help="most timed runs per thread count")
    ap.add_argument("--seconds", type=float, default=4.0, help="timing budget per model and thread count")
    ap.add_argument("--json", metavar="OUT", help="write the rows as JSON to OUT")
    ap.add_argument("--cache-dir", help="C build cache to use (default: a fresh one, so gcc time counts)")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    try:
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        ap.error(f"--threads takes comma-separated integers, got {args.threads!r}")
    if not threads or min(threads) < 1:
        ap.error(f"--threads takes counts >= 1, got {args.threads!r}")
    with tempfile.TemporaryDirectory(prefix="xmge-bench-zoo-") as fresh:
        os.environ["XMGE_CACHE_DIR"] = args.cache_dir or fresh
        load_before = _load()
        print(f"target {host_target()}, threads {threads}, load average {load_before}", flush=True)
        rows = []
        for name in track(names, "bench zoo", detail=str):
            rows.append(bench_model(name, threads, args.iters, args.seconds))
            r = rows[-1]
            status = r.error or f"{', '.join(f'{t} thr {ms:.2f} ms' for t, ms in r.median_ms.items())}"
            print(f"{name}: {status}", flush=True)
    print()
    print(_format(rows, threads))
    print(f"* {SIZE_NOTE}")
    print(f"load average before {load_before}, after {_load()}")
    if args.json:
        payload = {
            "target": str(host_target()),
            "threads": threads,
            "load_average": [load_before, _load()],
            "size_note": SIZE_NOTE,
            "rows": [asdict(r) for r in rows],
        }
        _write_json(args.json, payload)
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
