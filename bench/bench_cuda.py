"""xmge's generated CUDA code against ONNX Runtime's CUDA provider on the GPU.

    python bench/bench_cuda.py [--models resnet18,mobilenet_v2] [--targets cuda,cuda+io16xc32]
                               [--size 224] [--iters 50]

Per model (batch 1): compile for each CUDA target, export the same optimised float32 graph to ONNX
and run it with ``CUDAExecutionProvider``; print median latencies (host to host: input upload, the
launches, output download, as ``CompiledModel.__call__`` does) and the ratio xmge / ORT. Without a
GPU (libcudart missing or no device) it prints why and exits 0: the CPU harness's timings mean
nothing. PyTorch on the GPU is not compared yet (``backends.onnx.torch_runner`` runs CPU kernels).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from backends.cuda.backend import gpu_problem  # noqa: E402
from backends.onnx.export import to_onnx  # noqa: E402
from compiler.driver.compile import benchmark, compile, inference_clean  # noqa: E402
from compiler.progress import track  # noqa: E402

MODELS = {"resnet18": ("resnet", "resnet18"), "mobilenet_v2": ("mobilenet_v2", "mobilenet_v2")}


def make_model(name: str) -> Any:
    import importlib

    module, fn = MODELS[name]
    net = getattr(importlib.import_module(f"compiler.hub.{module}"), fn)()
    net.eval()
    return net


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--targets", default="cuda,cuda+io16xc32")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args(argv)
    problem = gpu_problem()
    if problem is not None:
        print(f"bench_cuda: skipped: {problem} (here the CPU harness runs the kernels: no timings)")
        return 0
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    for name in track(args.models.split(","), "bench cuda", detail=str):
        net = make_model(name)
        x = np.random.default_rng(0).random((1, 3, args.size, args.size), dtype=np.float32)
        rows: dict[str, float] = {}
        first = None
        for target in args.targets.split(","):
            compiled = compile(net, target, [x])
            first = first or compiled
            rows[f"xmge {target}"] = benchmark(lambda m=compiled, a=x: m(a), iters=args.iters)["median_ms"]
        assert first is not None
        if ort is not None and "CUDAExecutionProvider" in ort.get_available_providers():
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, f"{name}.onnx")
                to_onnx(inference_clean(first._stages["tensor"]), path)  # type: ignore[arg-type]
                sess = ort.InferenceSession(path, providers=["CUDAExecutionProvider"])
            feed = {sess.get_inputs()[0].name: x}
            rows["onnxruntime cuda"] = benchmark(lambda s=sess, f=feed: s.run(None, f), iters=args.iters)[
                "median_ms"
            ]
        else:
            print(f"{name}: onnxruntime with CUDAExecutionProvider is not installed")
        ort_ms = rows.get("onnxruntime cuda")
        for label, ms in rows.items():
            ratio = f"  ({ms / ort_ms:.2f}x ORT)" if ort_ms and label.startswith("xmge") else ""
            print(f"{name:14s} {label:24s} {ms:8.3f} ms{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
