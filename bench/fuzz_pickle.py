"""Structure-aware fuzzing of the pickle and ``.tm`` loaders (issue 28).

Each case takes one real checkpoint or ``.tm`` (MegEngine's and xmge's), splits it into opcodes
(``pickletools.genops``) and applies one or two opcode-level mutations: drop, duplicate or swap
opcodes, replace an opcode byte by another, overwrite an integer argument with a boundary value,
cut at an opcode boundary. The result is loaded with ``compiler.load`` (MegEngine ``.tm`` seeds with
``load_megengine_tm`` too) and a loaded TracedModule is run once on a small input. Outcomes:

* ``ok`` / ``rejected`` (an ``XmgeError``, the documented family);
* ``bug``: any other exception; ``memory``: MemoryError other than a budget refusal;
* ``timeout``: over ``--timeout`` CPU seconds; ``crash``: the worker died.

Workers run with ``XMGE_MAX_TENSOR_BYTES`` at 64 MiB and an address-space cap, one process per
batch. Never part of the default test run::

    python bench/fuzz_pickle.py --cases 20000 --rng-seed 1
"""

from __future__ import annotations

import argparse
import collections
import io
import multiprocessing as mp
import os
import pickletools
import random
import resource
import signal
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SEEDS = [
    "tests/data/convnet/checkpoint.pkl",
    "tests/data/convnet/state_dict.pkl",
    "tests/data/convnet/convnet.tm",
    "tests/data/checkpoints/checkpoint_p2.pkl",
    "tests/data/checkpoints/checkpoint_p4.pkl",
    "tests/data/checkpoints/tensors_p2.pkl",
    "tests/data/checkpoints/tensors_p4.pkl",
]
BOUNDARY = [0, 1, -1, 255, 256, 2**31 - 1, 2**31, 2**32 + 1, -(2**31), 10**9, 2**62]
OPCODES = [bytes([op.code.encode("latin-1")[0]]) for op in pickletools.opcodes]


class _Timeout(Exception):
    pass


def _ops(data: bytes) -> list[tuple[int, int, Any]]:
    """(start, end, arg) of each opcode."""
    out: list[tuple[int, int, Any]] = []
    try:
        positions = [(pos, arg) for _, arg, pos in pickletools.genops(data)]
    except Exception:  # noqa: BLE001 - a seed that does not parse fully is used up to where it does
        positions = []
    for k, (pos, arg) in enumerate(positions):
        end = positions[k + 1][0] if k + 1 < len(positions) else len(data)
        out.append((pos, end, arg))
    return out


def mutate(data: bytes, rng: random.Random) -> bytes:
    ops = _ops(data)
    if not ops:
        return data[: rng.randrange(len(data) + 1)]
    for _ in range(rng.choice((1, 1, 2))):
        ops = _ops(data) or ops
        i = rng.randrange(len(ops))
        start, end, arg = ops[i]
        kind = rng.randrange(6)
        if kind == 0:  # drop
            data = data[:start] + data[end:]
        elif kind == 1:  # duplicate
            data = data[:end] + data[start:end] + data[end:]
        elif kind == 2:  # swap with another opcode
            j = rng.randrange(len(ops))
            s2, e2, _ = ops[j]
            if s2 > start:
                data = data[:start] + data[s2:e2] + data[end:s2] + data[start:end] + data[e2:]
        elif kind == 3:  # another opcode byte
            data = data[:start] + rng.choice(OPCODES) + data[start + 1 :]
        elif kind == 4 and isinstance(arg, int) and end - start > 1:  # boundary integer argument
            width = end - start - 1
            value = rng.choice(BOUNDARY)
            raw = (value % (1 << (8 * width))).to_bytes(width, "little")
            data = data[: start + 1] + raw + data[end:]
        else:  # cut at an opcode boundary
            data = data[:start]
    return data


def _run_one(data: bytes, megengine_tm: bool) -> str:
    import numpy as np

    import compiler as xm
    from compiler import traced_module as tm
    from dialects.errors import XmgeError
    from dialects.limits import LimitExceeded

    try:
        obj = tm.load_megengine_tm(data) if megengine_tm else xm.load(io.BytesIO(data))
        if isinstance(obj, tm.TracedModule):
            obj(xm.tensor(np.zeros((1, 1, 28, 28), np.float32)))
        return "ok"
    except LimitExceeded:
        return "rejected"
    except MemoryError:
        return "memory"
    except XmgeError:
        return "rejected"
    except _Timeout:
        return "timeout"
    except Exception as exc:  # noqa: BLE001 - the campaign's finding
        return f"bug: {type(exc).__name__}: {str(exc)[:120]}"


def _on_alarm(*_: Any) -> None:
    raise _Timeout


def _worker(args: tuple[int, int, int, float, int]) -> list[tuple[str, float]]:
    first, count, rng_seed, timeout, mem_mb = args
    resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))
    os.environ.setdefault("XMGE_MAX_TENSOR_BYTES", str(64 << 20))
    signal.signal(signal.SIGPROF, _on_alarm)
    seeds = [open(os.path.join(ROOT, s), "rb").read() for s in SEEDS]
    results = []
    for case in range(first, first + count):
        rng = random.Random(rng_seed * 1_000_003 + case)
        k = rng.randrange(len(seeds))
        data = mutate(seeds[k], rng)
        start = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, timeout)
        try:
            outcome = _run_one(data, megengine_tm=SEEDS[k].endswith(".tm") and rng.random() < 0.5)
        except _Timeout:
            outcome = "timeout"
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        results.append((outcome, time.process_time() - start))
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--rng-seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=5.0, help="CPU seconds per case")
    p.add_argument("--mem-mb", type=int, default=4096)
    p.add_argument("--batch", type=int, default=200)
    a = p.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    bugs: collections.Counter[str] = collections.Counter()
    slowest = 0.0
    batches = [
        (f, min(a.batch, a.cases - f), a.rng_seed, a.timeout, a.mem_mb) for f in range(0, a.cases, a.batch)
    ]
    t0 = time.monotonic()
    done = 0
    from compiler.progress import track  # here: spawned workers need not import it

    with mp.get_context("spawn").Pool(a.jobs, maxtasksperchild=1) as pool:
        it = pool.imap_unordered(_worker, batches)
        for b in track(batches, "fuzz pickle", detail=lambda b: f"batch at case {b[0]}"):
            try:
                results = it.next(timeout=a.batch * (a.timeout + 10))
            except (mp.TimeoutError, Exception) as exc:  # noqa: BLE001 - a dead worker is a crash
                counts["crash"] += b[1]
                print(f"batch crashed: {type(exc).__name__}", flush=True)
                continue
            for outcome, seconds in results:
                slowest = max(slowest, seconds)
                if outcome.startswith("bug"):
                    counts["bug"] += 1
                    if outcome not in bugs:
                        print(f"  new finding (batch at case {b[0]}): {outcome}", flush=True)
                    bugs[outcome] += 1
                else:
                    counts[outcome] += 1
            done += len(results)
            print(f"{done} cases, {time.monotonic() - t0:.0f} s: {dict(counts)} slowest {slowest:.2f} s CPU",
                  flush=True)
    for text, n in bugs.most_common(20):
        print(f"  {n} x {text}")


if __name__ == "__main__":
    main()
