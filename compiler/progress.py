"""Progress output for long work (compile, verify, fuzzing, tuning).

Lines go to stderr only when it is a terminal, so piped or captured output stays clean. A caller
turns it off with ``enabled=False`` (e.g. ``compile(progress=False)``), and the environment with
``XMGE_PROGRESS=0``; ``XMGE_PROGRESS=1`` forces it on (useful for tests and CI logs).

Usage::

    with progress("compile", total=len(kernels)) as p:
        p.stage("lowering")
        for k in kernels:
            build(k)
            p.advance(f"kernel {k.name}")

A loop over many items (fuzz cases, benchmark models) reports through :func:`track`, which writes
at most one line per ``every_s`` seconds (and always the last)::

    for case in track(cases, "fuzz", total=n, detail=lambda c: f"case {c.index}"):
        run(case)

A reporter is thread-safe: several worker threads may call ``advance`` on the same one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

T = TypeVar("T")


def progress_enabled(enabled: bool | None = None, stream: TextIO | None = None) -> bool:
    """Whether progress lines should be written: explicit choice, then XMGE_PROGRESS, then isatty."""
    if enabled is not None:
        return enabled
    env = os.environ.get("XMGE_PROGRESS", "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    out = stream if stream is not None else sys.stderr
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


@dataclass
class ProgressReporter:
    """Counts done items of a task and writes one status line per update (or nothing if disabled)."""

    task: str
    total: int | None = None
    enabled: bool = True
    stream: TextIO | None = None
    done: int = 0
    current_stage: str = ""
    # an advance writes a line only this long after the last one (the last item always writes)
    every_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _start: float = field(default_factory=time.monotonic, repr=False)
    _last_line: float = field(default=float("-inf"), repr=False)

    def _write(self, detail: str) -> None:
        # Caller holds the lock, so lines of concurrent threads never interleave.
        if not self.enabled:
            return
        out = self.stream if self.stream is not None else sys.stderr
        parts = [f"[xmge {self.task}]"]
        if self.current_stage:
            parts.append(self.current_stage)
        if self.total:
            parts.append(f"{self.done}/{self.total} ({100 * self.done // self.total}%)")
        elif self.done:
            parts.append(str(self.done))
        if detail:
            parts.append(detail)
        out.write(" ".join(parts) + "\n")
        out.flush()
        self._last_line = time.monotonic()

    def stage(self, name: str) -> None:
        with self._lock:
            self.current_stage = name
            self._write("")

    def advance(self, detail: str = "", n: int = 1) -> None:
        with self._lock:
            self.done += n
            last = self.total is not None and self.done >= self.total
            if last or time.monotonic() - self._last_line >= self.every_s:
                self._write(detail)

    def set_total(self, total: int) -> None:
        with self._lock:
            self.total = total

    def finish(self) -> None:
        with self._lock:
            if self.enabled:
                self.current_stage = ""
                self._write(f"done in {time.monotonic() - self._start:.1f} s")


@contextmanager
def progress(
    task: str,
    total: int | None = None,
    enabled: bool | None = None,
    stream: TextIO | None = None,
    every_s: float = 0.0,
) -> Iterator[ProgressReporter]:
    """A reporter for ``task``; writes a final 'done' line only when the block ends without error."""
    reporter = start(task, total, enabled=enabled, stream=stream, every_s=every_s)
    yield reporter
    reporter.finish()


def start(
    task: str,
    total: int | None = None,
    *,
    enabled: bool | None = None,
    stream: TextIO | None = None,
    every_s: float = 1.0,
) -> ProgressReporter:
    """A reporter for a loop no ``with`` block fits around (an event loop over worker processes):
    the caller calls ``advance`` per item and ``finish`` at the end."""
    return ProgressReporter(task, total, progress_enabled(enabled, stream), stream, every_s=every_s)


def track(
    items: Iterable[T],
    task: str,
    total: int | None = None,
    *,
    detail: Callable[[T], str] | None = None,
    every_s: float = 1.0,
    enabled: bool | None = None,
    stream: TextIO | None = None,
) -> Iterator[T]:
    """``items``, reporting each one done (when the loop body for it ends) as progress of
    ``task``; ``total`` defaults to ``len(items)`` where it has one. ``detail(item)`` names the item
    on its line. At most one line per ``every_s`` seconds, so thousands of quick items do not flood
    the terminal; the 'done' line comes only when the loop runs to its end."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(task, total, enabled, stream, every_s) as p:
        for item in items:
            yield item
            p.advance(detail(item) if detail is not None else "")
