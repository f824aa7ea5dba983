"""ResNet-50 through the IR: trace, verify, print (weights elided and in full), parse.

    .venv/bin/python bench/bench_ir.py [--size 224] [--repeat 3] [--full]

Prints wall and CPU seconds (best of ``--repeat``) per stage, the op count and the text size.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.parser import Parser

import compiler as xm
from compiler import jit
from compiler.hub.resnet import resnet50
from dialects.tensor import Mgb
from dialects.weights import full_weights


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float]:
    """(result, best wall seconds, best CPU seconds)."""
    best_wall = best_cpu = float("inf")
    result = None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - w)
        best_cpu = min(best_cpu, time.process_time() - c)
    return result, best_wall, best_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also print and parse with full weights")
    args = ap.parse_args()

    ctx = Context()
    for d in (Builtin, Func, Mgb):
        ctx.load_dialect(d)
    net = resnet50().eval()
    x = xm.tensor(np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(np.float32))

    def trace() -> Any:
        infer = jit.trace(lambda data, *, net: net(data), symbolic=True, capture_as_const=True)
        infer(x, net=net)
        return infer.module

    rows = []
    module, wall, cpu = timed(trace, 1)
    rows.append(("trace (eager run + record)", wall, cpu))
    _, wall, cpu = timed(module.verify, args.repeat)
    rows.append(("verify", wall, cpu))
    text, wall, cpu = timed(lambda: str(module), args.repeat)
    rows.append(("print (elided weights)", wall, cpu))
    parsed, wall, cpu = timed(lambda: Parser(ctx, text).parse_module(), args.repeat)
    rows.append(("parse (elided weights)", wall, cpu))
    assert str(parsed) == text, "print -> parse -> print changed the text"
    full_text = ""
    if args.full:
        def print_full() -> str:
            with full_weights():
                return str(module)

        full_text, wall, cpu = timed(print_full, 1)
        rows.append(("print (full weights)", wall, cpu))
        _, wall, cpu = timed(lambda: Parser(ctx, full_text).parse_module(), 1)
        rows.append(("parse (full weights)", wall, cpu))

    n_ops = sum(1 for _ in module.walk())
    print(f"ResNet-50, input 1x3x{args.size}x{args.size}: {n_ops} ops, text {len(text) / 1e6:.2f} MB elided"
          + (f", {len(full_text) / 1e6:.1f} MB full" if full_text else ""))
    print(f"{'stage':32} {'wall s':>8} {'cpu s':>8}")
    for name, wall, cpu in rows:
        print(f"{name:32} {wall:8.3f} {cpu:8.3f}")


if __name__ == "__main__":
    main()
