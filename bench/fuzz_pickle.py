"""Structure-aware fuzzing of the pickle and ``.tm`` loaders (issue 28).

Each case takes one real checkpoint or ``.tm`` (MegEngine's and xmge's), splits it into opcodes
(``pickletools.genops``) and applies one or two opcode-level mutations: drop, duplicate or swap
opcodes, replace an opcode byte by another, overwrite an integer argument with a boundary value,
cut at an opcode boundary. The result is loaded with ``compiler.load`` (MegEngine ``.tm`` seeds with
``load_megengine_tm`` too) and a loaded TracedModule is run once on a small input. Outcomes:

* ``ok`` / ``rejected`` (an ``XmgeError``, the documented family);
* ``bug``: any other exception; ``memory``: MemoryError other than a budget refusal;
* ``timeout``: over ``--timeout`` seconds; ``crash``: the worker died.

Workers (:mod:`bench.fuzz_common`) run with ``XMGE_MAX_TENSOR_BYTES`` at 64 MiB and an address-space
cap. Never part of the default test run::

    python bench/fuzz_pickle.py --count 20000 --rng-seed 1 --clock cpu --log /tmp/fuzz_pickle.jsonl
"""

from __future__ import annotations

import argparse
import io
import os
import pickletools
import random
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.fuzz_common import Campaign, add_arguments, alarm, classify, run_isolated  # noqa: E402

SEEDS = [
    "tests/data/convnet/checkpoint.pkl",
    "tests/data/convnet/state_dict.pkl",
    "tests/data/convnet/convnet.tm",
    "tests/data/checkpoints/checkpoint_p2.pkl",
    "tests/data/checkpoints/checkpoint_p4.pkl",
    "tests/data/checkpoints/tensors_p2.pkl",
    "tests/data/checkpoints/tensors_p4.pkl",
    "xmge:convnet.tm",  # xmge's own TracedModule of the same ConvNet, saved by compiler.save
]
BOUNDARY = [0, 1, -1, 255, 256, 2**31 - 1, 2**31, 2**32 + 1, -(2**31), 10**9, 2**62]
OPCODES = [bytes([op.code.encode("latin-1")[0]]) for op in pickletools.opcodes]


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


def _seed_bytes(name: str) -> bytes:
    if name == "xmge:convnet.tm":
        import numpy as np

        import compiler as xm
        from compiler import traced_module as tm
        from compiler.hub.convnet import ConvNet

        buf = io.BytesIO()
        xm.save(tm.trace_module(ConvNet(), xm.tensor(np.zeros((1, 1, 28, 28), np.float32))), buf)
        return buf.getvalue()
    with open(os.path.join(ROOT, name), "rb") as f:
        return f.read()


def run_one(data: bytes, megengine_tm: bool, timeout_s: float, clock: str) -> tuple[str, str]:
    import numpy as np

    import compiler as xm
    from compiler import traced_module as tm
    from dialects.errors import XmgeError

    stage = "load"
    try:
        with alarm(timeout_s, clock):
            obj = tm.load_megengine_tm(data) if megengine_tm else xm.load(io.BytesIO(data))
            if isinstance(obj, tm.TracedModule):
                stage = "replay"
                obj(xm.tensor(np.zeros((1, 1, 28, 28), np.float32)))
        return "ok", ""
    except BaseException as exc:  # noqa: BLE001 - classified: documented, timeout, memory or a bug
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return classify(exc, (XmgeError,), stage)


def campaign(rng_seed: int, timeout_s: float, clock: str) -> Campaign:
    seeds: list[bytes] = []

    def prepare() -> None:
        import compiler  # noqa: F401 - imported before the memory cap applies
        from compiler import traced_module  # noqa: F401

        seeds.extend(_seed_bytes(s) for s in SEEDS)

    def pick(index: int) -> tuple[random.Random, int]:
        rng = random.Random(rng_seed * 1_000_003 + index)
        return rng, rng.randrange(len(SEEDS))

    def label(index: int) -> str:
        return SEEDS[pick(index)[1]]

    def run(index: int) -> tuple[str, str]:
        rng, k = pick(index)
        data = mutate(seeds[k], rng)
        megengine = SEEDS[k].endswith(".tm") and not SEEDS[k].startswith("xmge:") and rng.random() < 0.5
        return run_one(data, megengine, timeout_s, clock)

    return Campaign(run=run, label=label, prepare=prepare, env={"XMGE_MAX_TENSOR_BYTES": str(64 << 20)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap, count=2000, jobs=1, mem_mb=4096)
    a = ap.parse_args(argv)
    report = run_isolated(
        campaign(a.rng_seed, a.timeout, a.clock),
        a.start,
        a.count,
        a.jobs,
        a.mem_mb,
        hang_after_s=a.timeout + 10,
        log=a.log,
        progress_every=a.progress,
        header={"seeds": SEEDS, "rng_seed": a.rng_seed},
    )
    print(f"{len(SEEDS)} seeds: {' '.join(SEEDS)}")
    print(f"cases {a.start}..{a.start + a.count - 1}, rng seed {a.rng_seed}")
    print(report.summary())
    return 1 if report.bad() else 0


if __name__ == "__main__":
    sys.exit(main())
