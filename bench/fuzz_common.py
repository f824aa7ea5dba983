"""What the fuzz campaigns share (bench/fuzz_mge.py, fuzz_onnx.py, fuzz_pickle.py): isolated worker
processes with an address-space cap, a per-case timeout, outcome classes, a resumable JSON-lines log.

Outcomes of a case:

* ``ok``: the file loaded (and ran);
* ``rejected``: one of the loader's documented xmge errors (a budget refusal, ``LimitExceeded``,
  included);
* ``bug``: any other exception (an undocumented error: type, message and the raising line);
* ``memory``: MemoryError that is not a budget refusal (the worker's address-space cap was hit:
  the file got past the budget);
* ``timeout``: the case ran longer than its timeout (a hang);
* ``crash``: the worker process died (a segfault, an abort).

Cases are numbered; case ``i`` depends only on (seeds, rng seed, ``i``), so a campaign is split
with ``--start``/``--count`` and resumed from its ``--log`` (cases already logged are skipped).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTCOMES = ("ok", "rejected", "bug", "memory", "timeout", "crash")


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` swallows it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise CaseTimeout


CLOCKS = {"wall": (signal.ITIMER_REAL, signal.SIGALRM), "cpu": (signal.ITIMER_PROF, signal.SIGPROF)}
"""``cpu``: the worker's own CPU time (ITIMER_PROF): on a shared machine a case waiting for a core
is not a hang; the parent's wall-clock watchdog still kills a worker that blocks without computing."""


@contextlib.contextmanager
def alarm(seconds: float, clock: str = "wall") -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the block after ``seconds`` on ``clock``."""
    timer, signum = CLOCKS[clock]
    old = signal.signal(signum, _on_alarm)
    signal.setitimer(timer, seconds)
    try:
        yield
    finally:
        signal.setitimer(timer, 0)
        signal.signal(signum, old)


def classify(
    exc: BaseException, documented: tuple[type[BaseException], ...], stage: str = ""
) -> tuple[str, str]:
    """(outcome, detail) of an exception a case raised."""
    from dialects.limits import LimitExceeded

    prefix = f"{stage}: " if stage else ""
    if isinstance(exc, CaseTimeout):
        return "timeout", stage
    if isinstance(exc, (LimitExceeded, *documented)):
        return "rejected", type(exc).__name__
    if isinstance(exc, MemoryError):
        return "memory", stage
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({os.path.relpath(tb[-1].filename, ROOT)}:{tb[-1].lineno})" if tb else ""
    try:
        message = str(exc)[:160]
    except Exception:  # noqa: BLE001 - an exception whose str() fails is still a finding
        message = "<str() failed>"
    return "bug", f"{prefix}{type(exc).__name__}: {message}{where}"


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    slowest_wall: float = 0.0
    slowest_cpu: float = 0.0
    over_1s: int = 0
    compiled: int = 0

    def add(self, index: int, label: str, outcome: str, detail: str) -> None:
        self.counts[outcome] += 1
        self.compiled += detail == "compiled"
        if outcome not in ("ok", "rejected"):
            self.examples.setdefault(outcome, [])
            if len(self.examples[outcome]) < 20:
                self.examples[outcome].append(f"case {index} ({label}): {detail}")

    def time(self, wall_s: float, cpu_s: float) -> None:
        self.slowest_wall = max(self.slowest_wall, wall_s)
        self.slowest_cpu = max(self.slowest_cpu, cpu_s)
        self.over_1s += wall_s > 1.0

    def line(self) -> str:
        total = sum(self.counts.values())
        return f"{total} cases: " + ", ".join(f"{o} {self.counts[o]}" for o in OUTCOMES)

    def bad(self) -> int:
        return sum(self.counts[o] for o in ("bug", "memory", "timeout", "crash"))

    def summary(self, compile_target: str | None = None) -> str:
        took = f" cases in {self.seconds:.1f}s:" if self.seconds else " cases:"
        lines = [self.line().replace(" cases:", took)]
        if self.slowest_wall:
            compiled = f"; {self.compiled} compiled for {compile_target} and run" if compile_target else ""
            lines.append(
                f"slowest case: {self.slowest_wall:.2f}s wall, {self.slowest_cpu:.2f}s CPU;"
                f" {self.over_1s} cases over 1s wall{compiled}"
            )
        for outcome, items in self.examples.items():
            lines.append(f"  {outcome}:")
            lines.extend(f"    {x}" for x in items)
        return "\n".join(lines)


def read_header(path: str) -> dict[str, Any] | None:
    """The campaign a log belongs to (its first line: seeds, rng seed), if the log has one."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        try:
            first = json.loads(f.readline() or "null")
        except ValueError:
            return None
    return first.get("campaign") if isinstance(first, dict) else None


def read_log(path: str) -> dict[int, dict[str, Any]]:
    """Cases already run by an earlier (interrupted) campaign writing to ``path``."""
    done: dict[int, dict[str, Any]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut by a kill
                if isinstance(rec, dict) and "i" in rec:
                    done[int(rec["i"])] = rec
    return done


@dataclass
class Campaign:
    """What a campaign runs: ``run(index)`` -> (outcome, detail), in a worker; ``label(index)`` names
    the case's seed; ``prepare()`` imports what the cases need before the memory cap applies."""

    run: Callable[[int], tuple[str, str]]
    label: Callable[[int], str]
    prepare: Callable[[], None] = lambda: None
    env: dict[str, str] = field(default_factory=dict)  # set in the workers unless already set


def _worker(conn: Any, campaign: Campaign, indices: Sequence[int], mem_mb: int) -> None:
    import resource

    for key, value in campaign.env.items():
        os.environ.setdefault(key, value)
    campaign.prepare()
    if mem_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))
    for index in indices:
        conn.send(("start", index))
        wall0, cpu0 = time.perf_counter(), time.process_time()
        outcome, detail = campaign.run(index)
        elapsed = (time.perf_counter() - wall0, time.process_time() - cpu0)
        conn.send(("done", index, outcome, detail, elapsed))
    conn.send(("end",))


def run_isolated(
    campaign: Campaign,
    start: int,
    count: int,
    jobs: int,
    mem_mb: int,
    hang_after_s: float,
    log: str | None = None,
    progress_every: int = 0,
    header: dict[str, Any] | None = None,
) -> Report:
    """Cases ``start .. start + count - 1`` over ``jobs`` forked workers. A worker that dies, or
    shows no progress for ``hang_after_s`` wall seconds, counts its current case as a crash (a
    timeout) and is restarted after it. With ``log`` every case is appended to that JSON-lines file
    as it ends; cases already there are counted and not run again. ``header`` (the seeds and rng
    seed that define the cases) is the log's first line; resuming a log of another campaign is an
    error, since its case numbers would name other files."""
    report = Report()
    t0 = time.perf_counter()
    if log and header is not None:
        previous = read_header(log)
        if previous is None and not os.path.exists(log):
            with open(log, "w") as f:
                f.write(json.dumps({"campaign": header}) + "\n")
        elif previous is not None and previous != header:
            raise SystemExit(f"{log} holds another campaign's cases ({previous}); use another --log")
    done = read_log(log) if log else {}
    for idx, rec in done.items():
        if start <= idx < start + count:
            report.add(idx, campaign.label(idx), str(rec["o"]), str(rec.get("d", "")))
            report.time(float(rec.get("w", 0.0)), float(rec.get("c", 0.0)))
    todo = [i for i in range(start, start + count) if i not in done]
    log_file = open(log, "a") if log else None  # noqa: SIM115 - closed below
    ctx = mp.get_context("fork")
    running: list[tuple[Any, Any, int]] = []
    lanes = {j: todo[j::jobs] for j in range(jobs)}

    def launch(lane: int, indices: list[int]) -> None:
        lanes[lane] = indices
        if not indices:
            return
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(child, campaign, indices, mem_mb))
        p.start()
        child.close()
        running.append((p, parent, lane))

    def record(idx: int, outcome: str, detail: str, elapsed: tuple[float, float]) -> None:
        report.add(idx, campaign.label(idx), outcome, detail)
        report.time(*elapsed)
        if log_file:
            rec: dict[str, Any] = {
                "i": idx,
                "o": outcome,
                "w": round(elapsed[0], 4),
                "c": round(elapsed[1], 4),
            }
            if detail:
                rec["d"] = detail
            log_file.write(json.dumps(rec) + "\n")
            log_file.flush()
        bar.advance(report.line())
        total = sum(report.counts.values())
        if progress_every and total % progress_every == 0:
            stamp = f"[{time.perf_counter() - t0:7.0f}s]"
            print(stamp, report.line(), f"(next case {idx + 1})", file=sys.stderr, flush=True)

    for lane in range(jobs):
        launch(lane, lanes[lane])
    from compiler.progress import start as start_progress

    bar = start_progress("fuzz", total=len(todo))  # a line a second on a terminal, nothing when piped
    current: dict[int, tuple[int, float]] = {}
    ended: set[int] = set()
    try:
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
                        record(msg[1], msg[2], msg[3], msg[4])
                        current.pop(lane, None)
                    else:
                        finished = True
                        ended.add(lane)
                        break
                started = current.get(lane)
                hung = started is not None and time.perf_counter() - started[1] > hang_after_s
                if finished or hung or not p.is_alive():
                    if hung:
                        p.kill()
                    p.join()
                    running.remove((p, conn, lane))
                    if started is None and lane not in ended and lanes[lane]:
                        # died before its first case (an import failed): no case can run in a worker
                        raise SystemExit(f"a fuzz worker died before its first case (exit code {p.exitcode})")
                    if started is not None:
                        idx = started[0]
                        wall = time.perf_counter() - started[1]
                        record(idx, "timeout" if hung else "crash", f"exit code {p.exitcode}", (wall, wall))
                        current.pop(lane, None)
                        rest = lanes[lane]
                        launch(lane, rest[rest.index(idx) + 1 :])
    finally:
        bar.finish()
        if log_file:
            log_file.close()
    report.seconds = time.perf_counter() - t0
    return report


def add_arguments(ap: argparse.ArgumentParser, *, count: int, jobs: int, mem_mb: int) -> None:
    """The options every campaign takes."""
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--count", "--cases", dest="count", type=int, default=count, help="number of cases")
    ap.add_argument("--rng-seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=jobs)
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per case")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="what --timeout measures")
    ap.add_argument("--mem-mb", type=int, default=mem_mb, help="address-space cap per worker (0: none)")
    ap.add_argument("--progress", type=int, default=0, help="print counts to stderr every N cases")
    ap.add_argument(
        "--log", help="JSON-lines file of finished cases; cases already in it are skipped (resume)"
    )


def summarize(logs: Sequence[str]) -> Report:
    """One report over the cases of ``logs`` (lanes of one campaign; a case logged twice counts once,
    the later log's record winning). Their headers must agree."""
    headers = [read_header(p) for p in logs]
    known = [h for h in headers if h is not None]
    if any(h != known[0] for h in known):
        raise SystemExit("the logs belong to different campaigns")
    cases: dict[int, dict[str, Any]] = {}
    for path in logs:
        cases.update(read_log(path))
    report = Report()
    for idx in sorted(cases):
        rec = cases[idx]
        report.add(idx, "", str(rec["o"]), str(rec.get("d", "")))
        report.time(float(rec.get("w", 0.0)), float(rec.get("c", 0.0)))
    plain = [r for r in cases.values() if not str(r.get("d", "")).startswith("compile")]
    if plain:  # the load-and-run cases alone (a compiled sample's wall time includes gcc)
        print(f"slowest load-and-run case: {max(float(r.get('w', 0)) for r in plain):.2f}s wall, "
              f"{max(float(r.get('c', 0)) for r in plain):.2f}s CPU")
    return report


if __name__ == "__main__":  # python bench/fuzz_common.py LOG [LOG ...]: the merged figures
    merged = summarize(sys.argv[1:])
    print(merged.summary("x86-avx2" if merged.compiled else None))
    sys.exit(1 if merged.bad() else 0)
