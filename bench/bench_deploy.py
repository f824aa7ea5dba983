"""A compiled model as a deployed product: ResNet-18 on this machine's best x86 target.

    python bench/bench_deploy.py [--size 224] [--target T] [--iters 20] [--calls 40] [--callers 1,2,4]

Prints the CPU model (``/proc/cpuinfo``) and then:

* compile time: from the Module to a built library, with an empty build cache (a temporary
  ``$XMGE_CACHE_DIR``), against the load time of the saved package (``compiler.load_compiled``:
  hashes and CPU checked, no compiler), in this process and in a fresh one (import excluded);
* single-thread latency (median of ``--iters`` calls, after warm-up);
* throughput of ONE model instance called from 1, 2 and 4 threads at once (``--calls`` calls per
  caller, distinct inputs), each call's output checked bit for bit against the single-threaded
  output for its input.

Wall-clock figures on a shared machine are noisy: CPU time per call is printed beside them, and the
note says how loaded the machine was (load average against the core count).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compiler.driver.compile import benchmark, compile  # noqa: E402
from compiler.driver.demo import randomise_statistics  # noqa: E402
from compiler.driver.package import load_compiled  # noqa: E402
from compiler.driver.targets import host_target  # noqa: E402
from compiler.hub.resnet import resnet18  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def load_note() -> str:
    one, five, _ = os.getloadavg()
    cores = os.cpu_count() or 1
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min) on {cores} cores: " + (
        "the machine is busy, wall-clock figures are inflated" if one > 0.5 * cores else "fairly idle"
    )


FRESH_LOAD = """
import sys, time
import compiler
t0 = time.perf_counter()
m = compiler.load_compiled(sys.argv[1])
print(f"{(time.perf_counter() - t0) * 1e3:.2f}")
"""


def concurrent(
    model: object, inputs: list[np.ndarray], wants: list[np.ndarray], callers: int, calls: int
) -> dict:
    """``callers`` threads each make ``calls`` calls on the one ``model``; calls per second (wall),
    CPU ms per call, and how many outputs differ from the single-threaded ones."""
    wrong = [0] * callers
    barrier = threading.Barrier(callers + 1)

    def work(k: int) -> None:
        barrier.wait()
        for i in range(calls):
            j = (k * calls + i) % len(inputs)
            if not np.array_equal(model(inputs[j]), wants[j]):  # type: ignore[operator]
                wrong[k] += 1

    threads = [threading.Thread(target=work, args=(k,)) for k in range(callers)]
    for t in threads:
        t.start()
    cpu0 = time.process_time()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    n = callers * calls
    return {"per_s": n / wall, "cpu_ms": cpu / n * 1e3, "wrong": sum(wrong), "calls": n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--target", default=None, help="default: this machine's best x86 target")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--calls", type=int, default=40, help="calls per concurrent caller")
    parser.add_argument("--callers", default="1,2,4")
    args = parser.parse_args()
    target = args.target or str(host_target())
    print(f"CPU: {cpu_model()}")
    print(f"note: {load_note()}")
    rng = np.random.default_rng(0)
    net = resnet18()
    randomise_statistics(net, rng, spread=0.3)
    x = rng.standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="xmge-bench-deploy-") as tmp:
        os.environ["XMGE_CACHE_DIR"] = os.path.join(tmp, "cache")  # a cold build
        t0 = time.perf_counter()
        compiled = compile(net, target, [x], name="resnet18")
        compile_s = time.perf_counter() - t0
        package = os.path.join(tmp, "resnet18")
        t0 = time.perf_counter()
        compiled.save(package)
        save_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        model = load_compiled(package)
        load_s = time.perf_counter() - t0
        fresh = subprocess.run(
            [sys.executable, "-c", FRESH_LOAD, package],
            env=dict(os.environ, PYTHONPATH=ROOT),
            capture_output=True,
            text=True,
            check=True,
        )
        size = sum(os.path.getsize(os.path.join(package, f)) for f in os.listdir(package))
        print(f"ResNet-18, input {tuple(x.shape)}, target {compiled.target}")
        print(f"  compile (empty build cache)   {compile_s:8.2f} s")
        print(f"  save package ({size / 2**20:.1f} MiB)     {save_s * 1e3:8.1f} ms")
        print(f"  load package (this process)   {load_s * 1e3:8.1f} ms")
        print(f"  load package (fresh process)  {float(fresh.stdout.strip()):8.1f} ms  (import excluded)")
        assert np.array_equal(model(x), compiled(x)), "the loaded package differs from the compiled model"
        cpu0 = time.process_time()
        stats = benchmark(lambda: model(x), warmup=3, iters=args.iters)
        cpu_ms = (time.process_time() - cpu0) / (stats["runs"] + 3) * 1e3
        print(
            f"  single-thread latency         {stats['median_ms']:8.2f} ms median, {stats['min_ms']:.2f} min "
            f"({cpu_ms:.2f} ms CPU per call)"
        )
        inputs = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(16)]
        wants = [model(a) for a in inputs]
        print("  one instance, concurrent callers:")
        for callers in (int(c) for c in args.callers.split(",")):
            r = concurrent(model, inputs, wants, callers, args.calls)
            print(
                f"    {callers} caller(s): {r['per_s']:7.1f} calls/s, {r['cpu_ms']:.2f} ms CPU per call, "
                f"{r['wrong']} of {r['calls']} outputs differ from the single-threaded ones"
            )
        print(f"note: {load_note()}")


if __name__ == "__main__":
    main()
