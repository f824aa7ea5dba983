"""Serving throughput and latency on Ray Serve: dynamic batching vs one request at a time.

    python bench/bench_serve.py [--model resnet18] [--clients 1,4,16,64] [--requests 700]
                                [--max-seconds 120] [--threads 2] [--batch-sizes 1,4,8]

Starts a local Ray instance (one node here; ``--address`` joins a running cluster instead), deploys
the model compiled for this machine twice: with dynamic batching (``--batch-sizes``, batches filled
for ``--batch-wait-ms``) and as a baseline that runs one request at a time (batch size 1). A bounded
load generator on loopback (``--requests`` per client count, stopping after ``--max-seconds`` at the
latest) sends ``.npy`` bodies of one sample from each of 1, 4, 16, 64 concurrent clients over
keep-alive connections. Every answer is checked against the reference interpreter's output for
that input. Prints, per mode and client count: throughput, p50/p99 latency, the mean number of
samples per model run (from the replica's metrics), failed and wrong responses, and the CPU it ran on.
"""

from __future__ import annotations

import argparse
import http.client
import io
import os
import sys
import threading
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler as xm  # noqa: E402
from bench.bench_deploy import cpu_model, load_note  # noqa: E402
from compiler import jit, serving  # noqa: E402
from compiler.driver.targets import host_target  # noqa: E402


def dump_model(name: str, path: str) -> None:
    """The hub model ``name`` (random weights, non-trivial BN statistics) dumped to ``path``."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_x86 import make_model

    net = make_model(name)
    if net is None:
        raise SystemExit(f"unknown model {name}")

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(data: Any) -> Any:
        return net(data)

    f(xm.tensor(np.zeros((1, 3, 224, 224), np.float32)))
    buf = io.BytesIO()
    f.dump(buf, arg_names=["data"])
    with open(path, "wb") as out:
        out.write(buf.getvalue())


def reference_outputs(path: str, xs: list[np.ndarray]) -> list[np.ndarray]:
    from compiler.lite import Network

    net = Network(path)
    return [next(iter(net(data=x).values())) for x in xs]


def npy(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, x)
    return buf.getvalue()


def metrics(port: int, name: str) -> tuple[int, int]:
    """(samples, model runs) the replica has counted so far."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", f"/{name}/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    samples = runs = 0
    for line in text.splitlines():
        if line.startswith("xmge_samples_total"):
            samples = int(line.split()[-1])
        elif line.startswith("xmge_batches_total{"):
            runs += int(line.split()[-1])
    return samples, runs


def drive(
    port: int,
    name: str,
    clients: int,
    requests: int,
    max_seconds: float,
    bodies: list[bytes],
    wants: list[np.ndarray],
    output: str,
) -> dict[str, float]:
    """``requests`` one-sample requests from ``clients`` threads (each on its own keep-alive
    connection), stopping early after ``max_seconds``."""
    latencies: list[float] = []
    failed = wrong = 0
    lock = threading.Lock()
    counter = iter(range(requests))
    deadline = time.perf_counter() + max_seconds

    def client() -> None:
        nonlocal failed, wrong
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while time.perf_counter() < deadline:
            with lock:
                k = next(counter, None)
            if k is None:
                break
            i = k % len(bodies)
            t0 = time.perf_counter()
            try:
                conn.request(
                    "POST", f"/{name}", body=bodies[i], headers={"Content-Type": "application/x-npy"}
                )
                resp = conn.getresponse()
                body = resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                ok, body = False, b""
            dt = time.perf_counter() - t0
            good = ok and np.allclose(np.load(io.BytesIO(body))[output], wants[i], rtol=1e-3, atol=1e-3)
            with lock:
                latencies.append(dt)
                failed += not ok
                wrong += ok and not good
        conn.close()

    before = metrics(port, name)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = metrics(port, name)
    lat = np.sort(np.asarray(latencies)) * 1e3
    runs = max(1, after[1] - before[1])
    return {
        "requests": len(latencies),
        "throughput": len(latencies) / wall,
        "p50": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
        "p99": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
        "batch": (after[0] - before[0]) / runs,
        "failed": failed,
        "wrong": wrong,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--requests", type=int, default=700, help="requests per mode and client count")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="per mode and client count")
    ap.add_argument("--threads", type=int, default=2, help="threads per model run of the baseline")
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="concurrent runs sharing a batch (batched mode), each on threads/workers threads",
    )
    ap.add_argument("--batch-sizes", default="1,2,4,8")
    ap.add_argument("--batch-wait-ms", type=float, default=10.0)
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--address", default=None, help="a running Ray cluster (default: start one here)")
    ap.add_argument(
        "--inputs", type=int, default=8, help="distinct inputs, each checked against the reference"
    )
    args = ap.parse_args()

    import ray

    workdir = os.path.join(os.path.expanduser("~"), ".cache", "xmge", "bench_serve")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, f"{args.model}.mge")
    if not os.path.exists(path):
        dump_model(args.model, path)
    print(f"CPU: {cpu_model()} (target {host_target()}); before the run: {load_note()}", flush=True)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(args.inputs)]
    t0 = time.perf_counter()
    wants = reference_outputs(path, xs)
    print(f"reference outputs for {len(xs)} inputs in {time.perf_counter() - t0:.1f} s", flush=True)
    bodies = [npy(x) for x in xs]

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    init: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if args.address:
        init["address"] = args.address
    else:
        init["runtime_env"] = {"env_vars": {"PYTHONPATH": repo}}
    ray.init(**init)
    sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    modes = {
        "batched": serving.ServeOptions(
            name="batched",
            batch_sizes=sizes,
            max_batch=max(sizes),
            batch_wait_ms=args.batch_wait_ms,
            threads=max(1, args.threads // args.workers),
            workers=args.workers,
        ),
        "one-at-a-time": serving.ServeOptions(
            name="single", batch_sizes=(1,), max_batch=1, batch_wait_ms=0, threads=args.threads
        ),
    }
    results: dict[tuple[str, int], dict[str, float]] = {}
    try:
        for mode, options in modes.items():
            t0 = time.perf_counter()
            serving.run(path, options, port=args.port, address=args.address)
            print(f"deployed {mode} in {time.perf_counter() - t0:.1f} s", flush=True)
            output = serving.load_served_model(path, batch_sizes=(1,)).outputs[0].name
            drive(args.port, options.name or mode, 2, 8, 60, bodies, wants, output)  # warm-up
            for clients in (int(c) for c in args.clients.split(",")):
                r = drive(
                    args.port,
                    options.name or mode,
                    clients,
                    args.requests,
                    args.max_seconds,
                    bodies,
                    wants,
                    output,
                )
                results[(mode, clients)] = r
                print(
                    f"  {mode:>13} clients={clients:>3}: {r['throughput']:6.1f} req/s  "
                    f"p50 {r['p50']:7.1f} ms  "
                    f"p99 {r['p99']:7.1f} ms  samples/run {r['batch']:4.2f}  requests {r['requests']:.0f}  "
                    f"failed {r['failed']:.0f}  wrong {r['wrong']:.0f}",
                    flush=True,
                )
    finally:
        serving.shutdown()

    print()
    print(
        f"{args.model} on Ray Serve {ray.__version__}, {cpu_model()} (target {host_target()}), "
        f"{os.cpu_count()} CPUs, "
        f"batched: {args.workers} concurrent run(s) of {max(1, args.threads // args.workers)} thread(s), "
        f"batch sizes {list(sizes)}, wait {args.batch_wait_ms} ms; one-at-a-time: 1 run of "
        f"{args.threads} thread(s)"
    )
    print(
        f"{'clients':>7} | {'batched req/s':>13} {'p50 ms':>8} {'p99 ms':>8} {'samples/run':>11} | "
        f"{'single req/s':>12} {'p50 ms':>8} {'p99 ms':>8} | speed-up"
    )
    total = failed = wrong = 0
    for clients in (int(c) for c in args.clients.split(",")):
        b, s = results.get(("batched", clients)), results.get(("one-at-a-time", clients))
        if b is None or s is None:
            continue
        print(
            f"{clients:>7} | {b['throughput']:13.1f} {b['p50']:8.1f} {b['p99']:8.1f} {b['batch']:11.2f} | "
            f"{s['throughput']:12.1f} {s['p50']:8.1f} {s['p99']:8.1f} | "
            f"{b['throughput'] / s['throughput']:.2f}x"
        )
    for r in results.values():
        total += int(r["requests"])
        failed += int(r["failed"])
        wrong += int(r["wrong"])
    print(f"{total} requests, {failed} failed, {wrong} wrong (checked against the reference interpreter)")
    return 0 if failed == 0 and wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
