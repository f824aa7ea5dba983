"""Fuzzing the .mge reader and the reference interpreter with mutated golden files.

Each case mutates one seed file (bit flips, 32-bit words overwritten with boundary values, cuts,
inserted bytes), loads it with ``read_mge`` and, when it loads, runs every graph on the reference
interpreter with random inputs. Outcomes:

* ``ok``: loaded and ran;
* ``rejected``: MgeFormatError / MgeUnsupportedError on load, or InterpreterError at run time
  (the documented error types);
* ``bug``: any other exception (type and message are reported);
* ``memory``: MemoryError (the per-case address-space cap was hit);
* ``timeout``: the case ran longer than ``--timeout`` seconds (5 by default), measured on the
  ``--clock``: ``wall`` (default) or ``cpu`` (the worker's own CPU time, ITIMER_PROF: on a shared
  machine a case waiting for a core is not a hang; a wall-clock watchdog at timeout + 10 s still
  kills a worker that blocks without computing);
* ``crash``: the worker process died (a segfault, an abort).

Workers run with ``XMGE_MAX_TENSOR_BYTES`` at 4 MiB (:data:`FUZZ_TENSOR_BYTES`) unless the
environment sets it (reading and running stay fast; the default cap is for real models) and an
address-space limit (``--mem-mb``).

    python bench/fuzz_mge.py --cases 100000 --jobs 2              # the long run
    python bench/fuzz_mge.py --cases 2000 --seeds convnet/fbs_v1 int8/plain

The in-suite slice (tests/test_mge_fuzz.py) calls :func:`run_cases` in-process with a few hundred
cases.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import struct
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DATA = os.path.join(ROOT, "tests", "data")
# FBS v2 float, FBS v1, int8, blocked layouts (NCHW88 / NCHW44), float16, append=True, multi-IO
DEFAULT_SEEDS: tuple[str, ...] = (
    "convnet/plain",
    "convnet/fbs_v1",
    "int8/plain",
    "int8/nchw44",
    "convnet/nchw88",
    "convnet/ioc16",
    "multi_io/append",
    "multi_io/named",
    "mini_resnet/plain",
)
FUZZ_TENSOR_BYTES = 4 << 20
"""The seeds' largest tensors are well under 1 MiB; a mutated shape beyond 4 MiB is a legitimately
big model that the numpy reference (int8 convolutions especially) may take seconds to run, which
says nothing about the reader's robustness."""
OUTCOMES = ("ok", "rejected", "bug", "memory", "timeout", "crash")


def seed_bytes(name: str) -> bytes:
    with open(os.path.join(DATA, f"{name}.mge"), "rb") as f:
        return f.read()


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    kind = int(rng.integers(0, 5))
    if kind == 0:
        for _ in range(int(rng.integers(1, 8))):
            b[int(rng.integers(0, len(b)))] ^= 1 << int(rng.integers(0, 8))
    elif kind in (1, 2):  # 32-bit words: offsets, sizes, shapes, params (kind 2: small deltas)
        p = int(rng.integers(0, len(b) - 4)) & ~3 if kind == 2 else int(rng.integers(0, len(b) - 4))
        if kind == 1:
            value = int(rng.choice([0, 1, 2, 0xFFFFFFFF, 0x7FFFFFFF, 0x10000, 4_300_000_000 % 2**32, len(b)]))
        else:
            value = (struct.unpack_from("<I", b, p)[0] + int(rng.integers(-3, 300))) % 2**32
        struct.pack_into("<I", b, p, value)
    elif kind == 3:
        b = b[: int(rng.integers(0, len(b)))]
    else:
        p = int(rng.integers(0, len(b)))
        b[p:p] = rng.bytes(int(rng.integers(1, 16)))
    return bytes(b)


@dataclass
class Case:
    index: int
    seed: str
    data: bytes


def case_seed(seeds: Sequence[str], index: int) -> str:
    return seeds[index % len(seeds)]


def make_case(seeds: Sequence[str], index: int, rng_seed: int, originals: dict[str, bytes]) -> Case:
    """Case ``index`` alone (its own random stream), so that workers build only their cases."""
    seed = case_seed(seeds, index)
    if seed not in originals:
        originals[seed] = seed_bytes(seed)
    return Case(index, seed, mutate(originals[seed], np.random.default_rng([rng_seed, index])))


def cases(seeds: Sequence[str], n: int, rng_seed: int, start: int = 0, step: int = 1) -> Iterator[Case]:
    originals: dict[str, bytes] = {}
    for i in range(start, n, step):
        yield make_case(seeds, i, rng_seed, originals)


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` swallows it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise CaseTimeout


CLOCKS = {"wall": (signal.ITIMER_REAL, signal.SIGALRM), "cpu": (signal.ITIMER_PROF, signal.SIGPROF)}


def run_one(data: bytes, timeout_s: float, clock: str = "wall") -> tuple[str, str]:
    """(outcome, detail) of loading and running one file."""
    from backends.mge.fbs import MgeFormatError
    from backends.mge.reader import read_mge
    from dialects.dtypes import numpy_dtype
    from semantics.interpreter import InterpreterError, run_function

    np.seterr(all="ignore")  # random inputs overflow float16 and int8 models: not a finding
    timer, signum = CLOCKS[clock]
    old = signal.signal(signum, _on_alarm)
    signal.setitimer(timer, timeout_s)
    try:
        module = read_mge(data)
        rng = np.random.default_rng(0)
        for fn in module.ops:
            args = []
            for a in fn.body.block.args:  # type: ignore[attr-defined]
                dt = numpy_dtype(a.type.element_type)
                shape = tuple(a.type.get_shape())
                args.append((rng.standard_normal(shape) * 3).astype(dt))
            run_function(fn, args)  # type: ignore[arg-type]
        return "ok", ""
    except (MgeFormatError, InterpreterError) as exc:
        return "rejected", type(exc).__name__
    except CaseTimeout:
        return "timeout", ""
    except MemoryError:
        return "memory", ""
    except Exception as exc:  # noqa: BLE001 - everything else is what the fuzzer looks for
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        return (
            "bug",
            f"{type(exc).__name__}: {str(exc)[:160]} ({os.path.relpath(tb.filename, ROOT)}:{tb.lineno})",
        )
    finally:
        signal.setitimer(timer, 0)
        signal.signal(signum, old)


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    slowest_wall: float = 0.0
    slowest_cpu: float = 0.0
    over_1s: int = 0

    def add(self, case: Case, outcome: str, detail: str) -> None:
        self.counts[outcome] += 1
        if outcome not in ("ok", "rejected"):
            self.examples.setdefault(outcome, [])
            if len(self.examples[outcome]) < 20:
                self.examples[outcome].append(f"case {case.index} ({case.seed}): {detail}")

    def time(self, wall_s: float, cpu_s: float) -> None:
        self.slowest_wall = max(self.slowest_wall, wall_s)
        self.slowest_cpu = max(self.slowest_cpu, cpu_s)
        self.over_1s += wall_s > 1.0

    def line(self) -> str:
        total = sum(self.counts.values())
        return f"{total} cases: " + ", ".join(f"{o} {self.counts[o]}" for o in OUTCOMES)

    def bad(self) -> int:
        return sum(self.counts[o] for o in ("bug", "memory", "timeout", "crash"))

    def summary(self) -> str:
        lines = [f"{self.line().replace(' cases:', f' cases in {self.seconds:.1f}s:')}"]
        if self.slowest_wall:
            lines.append(
                f"slowest case: {self.slowest_wall:.2f}s wall, {self.slowest_cpu:.2f}s CPU;"
                f" {self.over_1s} cases over 1s wall"
            )
        for outcome, items in self.examples.items():
            lines.append(f"  {outcome}:")
            lines.extend(f"    {x}" for x in items)
        return "\n".join(lines)


def run_cases(seeds: Sequence[str], n: int, rng_seed: int = 0, timeout_s: float = 5.0) -> Report:
    """All cases in this process (no crash isolation, no memory cap): the in-suite slice."""
    report = Report()
    t0 = time.perf_counter()
    # the fuzz cap holds for these cases only: the process (a test session) goes on with its own
    previous = os.environ.get("XMGE_MAX_TENSOR_BYTES")
    os.environ.setdefault("XMGE_MAX_TENSOR_BYTES", str(FUZZ_TENSOR_BYTES))
    try:
        for case in cases(seeds, n, rng_seed):
            report.add(case, *run_one(case.data, timeout_s))
    finally:
        if previous is None:
            del os.environ["XMGE_MAX_TENSOR_BYTES"]
        else:
            os.environ["XMGE_MAX_TENSOR_BYTES"] = previous
    report.seconds = time.perf_counter() - t0
    return report


# ----------------------------------------------------------------------------------------------
# isolated workers


def _worker(
    conn: mp.connection.Connection,
    seeds: Sequence[str],
    n: int,
    rng_seed: int,
    start: int,
    step: int,
    timeout_s: float,
    mem_mb: int,
    clock: str,
) -> None:
    import resource

    import backends.mge.reader  # noqa: F401 - imported before the memory cap applies
    import semantics.interpreter  # noqa: F401

    os.environ.setdefault("XMGE_MAX_TENSOR_BYTES", str(FUZZ_TENSOR_BYTES))
    if mem_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))
    for case in cases(seeds, n, rng_seed, start, step):
        conn.send(("start", case.index))
        wall0, cpu0 = time.perf_counter(), time.process_time()
        outcome, detail = run_one(case.data, timeout_s, clock)
        elapsed = (time.perf_counter() - wall0, time.process_time() - cpu0)
        conn.send(("done", case.index, outcome, detail, elapsed))
    conn.send(("end",))


def run_isolated(
    seeds: Sequence[str],
    n: int,
    rng_seed: int,
    jobs: int,
    timeout_s: float,
    mem_mb: int,
    clock: str = "wall",
    progress_every: int = 0,
) -> Report:
    """Cases spread over ``jobs`` worker processes; a worker that dies (or hangs past the
    timeout's reach) counts its current case as a crash (timeout) and is restarted after it."""
    report = Report()
    t0 = time.perf_counter()
    ctx = mp.get_context("fork")
    pending = [(j, j) for j in range(jobs)]  # (first case, residue) per worker lane
    running: list[tuple[mp.Process, mp.connection.Connection, int]] = []

    def launch(first: int, lane: int) -> None:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(
            target=_worker, args=(child, seeds, n, rng_seed, first, jobs, timeout_s, mem_mb, clock)
        )
        p.start()
        child.close()
        running.append((p, parent, lane))

    for first, lane in pending:
        if first < n:
            launch(first, lane)
    from compiler.progress import start

    bar = start("fuzz", total=n)  # a line a second on a terminal, nothing when piped
    current: dict[int, tuple[int, float]] = {}
    while running:
        for p, conn, lane in list(running):
            finished = False
            while conn.poll(0.05):
                try:
                    msg = conn.recv()
                except EOFError:
                    finished = True
                    break
                if msg[0] == "start":
                    current[lane] = (msg[1], time.perf_counter())
                elif msg[0] == "done":
                    report.add(Case(msg[1], case_seed(seeds, msg[1]), b""), msg[2], msg[3])
                    report.time(*msg[4])
                    bar.advance(report.line())
                    current.pop(lane, None)
                    done = sum(report.counts.values())
                    if progress_every and done % progress_every == 0:
                        stamp = f"[{time.perf_counter() - t0:7.0f}s]"
                        print(stamp, report.line(), file=sys.stderr, flush=True)
                else:
                    finished = True
                    break
            started = current.get(lane)
            hung = started is not None and time.perf_counter() - started[1] > timeout_s + 10
            if finished or hung or not p.is_alive():
                if hung:
                    p.kill()
                p.join()
                running.remove((p, conn, lane))
                if started is not None and (hung or p.exitcode != 0 or finished is False):
                    idx = started[0]
                    outcome = "timeout" if hung else "crash"
                    report.add(Case(idx, case_seed(seeds, idx), b""), outcome, f"exit code {p.exitcode}")
                    bar.advance(report.line())
                    current.pop(lane, None)
                    if idx + jobs < n:
                        launch(idx + jobs, lane)
        if not running:
            break
    bar.finish()
    report.seconds = time.perf_counter() - t0
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--seeds", nargs="+", default=list(DEFAULT_SEEDS), help="tests/data/<name>.mge files")
    ap.add_argument("--rng-seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per case")
    ap.add_argument("--mem-mb", type=int, default=3072, help="address-space cap per worker (0: none)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="what --timeout measures")
    ap.add_argument("--progress", type=int, default=0, help="print counts to stderr every N cases")
    args = ap.parse_args(argv)
    report = run_isolated(
        args.seeds, args.cases, args.rng_seed, args.jobs, args.timeout, args.mem_mb, args.clock, args.progress
    )
    print(f"seeds: {' '.join(args.seeds)}")
    print(report.summary())
    return 1 if report.bad() else 0


if __name__ == "__main__":
    sys.exit(main())
