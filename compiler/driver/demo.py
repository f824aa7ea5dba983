"""``make demo``: the main job end to end.

For the seed ConvNet and a ResNet-18: trace it, dump a ``.mge`` file, compile that file for this
machine (its best x86 target: AVX-512 where the CPU has it, else AVX2 with NCHW88), run it, and
print the largest difference from the reference interpreter next to the latency of the generated code
and of ONNX Runtime on the same graph and weights (skipped with a note when ``onnxruntime`` is not
installed: ``pip install onnxruntime onnx``).

    python -m compiler.driver.demo [--size 224] [--target x86-avx2-nchw88] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np

import compiler as xm
import compiler.jit as jit
from compiler.driver.compile import benchmark, compile, inference_clean
from compiler.driver.targets import host_target
from compiler.hub.convnet import ConvNet
from compiler.hub.resnet import resnet18
from semantics import run_module


def randomise_statistics(net: Any, rng: np.random.Generator, spread: float = 0.2) -> None:
    """Non-trivial batch-norm statistics and biases, as trained weights would have (variances in
    [0.5, 2], means and biases in [-spread, spread]), so that folding and fused epilogues change
    the arithmetic."""
    for name, t in net.named_tensors():
        if "running_var" in name:
            t._reset(rng.uniform(0.5, 2.0, t.shape).astype(np.float32))
        elif "running_mean" in name or name.endswith("bias"):
            t._reset(rng.uniform(-spread, spread, t.shape).astype(np.float32))


def _ort_ms(tensor_ir: Any, x: np.ndarray, threads: int) -> tuple[float, np.ndarray] | str:
    """ONNX Runtime's median latency and output on the same optimised graph, or why not."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime not installed (pip install onnxruntime onnx): skipped"
    from backends.onnx.export import to_onnx

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        to_onnx(inference_clean(tensor_ir), path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    y = sess.run(None, feed)[0]
    return benchmark(lambda: sess.run(None, feed), iters=20)["median_ms"], y


def run_one(
    title: str, net: Any, x: np.ndarray, target: str, threads: int, workdir: str, show_ir: bool = False
) -> None:
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data: xm.Tensor, *, net: Any) -> xm.Tensor:
        return net(data)

    eager = net(xm.tensor(x)).numpy()
    infer(xm.tensor(x), net=net)  # traces
    replay = infer(xm.tensor(x), net=net).numpy()  # runs the recorded IR on the reference interpreter
    if show_ir:
        print(f"{title}: tensor-dialect IR (weights elided)")
        print(infer.ir())
    path = os.path.join(workdir, f"{title}.mge")
    infer.dump(path, arg_names=["data"], optimize_for_inference=False)
    t0 = time.perf_counter()
    compiled = compile(path, target, threads=threads)
    seconds = time.perf_counter() - t0
    got = compiled(x)
    want = run_module(compiled._stages["tensor"], [x])[0]  # type: ignore[arg-type]
    err = float(np.abs(got - want).max())
    ms = benchmark(lambda: compiled(x), iters=20)["median_ms"]
    size = os.path.getsize(path) / 2**20
    build = getattr(compiled, "build", None)
    how = (
        "gcc build from the cache"
        if build is not None and getattr(build, "cached", False)
        else "built with gcc"
    )
    shape = "x".join(str(d) for d in x.shape)
    print(f"{title} ({shape} input, {size:.1f} MiB .mge): compiled in {seconds:.1f} s ({how})")
    print(f"  accuracy  max |xmge - reference| {err:.1e} on outputs up to {float(np.abs(want).max()):.1f}; "
          f"traced replay vs eager {float(np.abs(replay - eager).max()):.1e}")  # fmt: skip
    line = f"  latency   xmge {ms:.3f} ms ({threads} thread{'s' if threads > 1 else ''}, median of 20)"
    ort = _ort_ms(compiled._stages["tensor"], x, threads)
    if isinstance(ort, str):
        print(f"{line}; ONNX Runtime {ort}")
    else:
        ort_ms, y = ort
        print(f"{line}, ONNX Runtime {ort_ms:.3f} ms: xmge takes {ms / ort_ms:.2f}x ORT's time "
              f"(outputs agree to {float(np.abs(got - y).max()):.1e})")  # fmt: skip
    calls = compiled.ir("kernel-plan-memory").count("kernel.call")
    print(f"  memory    {calls} kernel calls, {compiled.arena_size / 2**20:.2f} MiB of activations, "
          f"{compiled.weights_size / 2**20:.2f} MiB of weights as the kernels read them "
          "(packed and Winograd-transformed: more than the .mge holds)")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=224, help="ResNet-18 input height and width")
    ap.add_argument("--target", default=None, help="default: this machine's best x86 target")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--show-ir", action="store_true", help="print the ConvNet's tensor-dialect IR")
    args = ap.parse_args(argv)
    target = args.target or str(host_target())
    if target == "ref":
        print("this CPU has no AVX2/FMA: the generated x86 code cannot run here; using the reference")
    rng = np.random.default_rng(0)
    print(
        f"xmge demo: each model is traced, dumped to a .mge file, compiled for {target} (this CPU: "
        f"{host_target()}), run, and checked against xmge's reference interpreter of the same file.\n"
    )
    with tempfile.TemporaryDirectory(prefix="xmge-demo-") as workdir:
        convnet = ConvNet()
        randomise_statistics(convnet, rng)
        run_one(
            "convnet",
            convnet,
            rng.standard_normal((1, 1, 28, 28)).astype(np.float32),
            target,
            args.threads,
            workdir,
            show_ir=args.show_ir,
        )
        print()
        net = resnet18()
        randomise_statistics(net, rng)
        x = rng.standard_normal((1, 3, args.size, args.size)).astype(np.float32)
        run_one("resnet18", net, x, target, args.threads, workdir)


if __name__ == "__main__":
    main()
