"""Time to dump and to load a ResNet-50 as .mge: python bench/bench_mge.py [--repeat N]."""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler as xm  # noqa: E402
from compiler import jit  # noqa: E402
from compiler.lite import Network  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from compiler.hub.resnet import resnet50  # being written by another engineer

    net = resnet50()
    net.eval()
    x = xm.tensor(np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data):  # type: ignore[no-untyped-def]
        return net(data)

    t0 = time.perf_counter()
    infer(x)
    print(f"trace: {time.perf_counter() - t0:.2f}s")
    for fmt in ("FBS_V2", "FBS"):
        dumps, loads = [], []
        for _ in range(args.repeat):
            buf = io.BytesIO()
            t0 = time.perf_counter()
            infer.dump(buf, arg_names=["data"], dump_format=fmt)
            dumps.append(time.perf_counter() - t0)
            data = buf.getvalue()
            t0 = time.perf_counter()
            Network(data)
            loads.append(time.perf_counter() - t0)
        size = len(data) / 2**20
        print(f"{fmt}: {size:.1f} MiB, dump {min(dumps):.3f}s, load {min(loads):.3f}s (best of {args.repeat})")  # noqa: E501


if __name__ == "__main__":
    main()
