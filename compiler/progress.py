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

A reporter is thread-safe: several worker threads may call ``advance`` on the same one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO


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
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _start: float = field(default_factory=time.monotonic, repr=False)

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

    def stage(self, name: str) -> None:
        with self._lock:
            self.current_stage = name
            self._write("")

    def advance(self, detail: str = "", n: int = 1) -> None:
        with self._lock:
            self.done += n
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
) -> Iterator[ProgressReporter]:
    """A reporter for ``task``; writes a final 'done' line only when the block ends without error."""
    reporter = ProgressReporter(task, total, progress_enabled(enabled, stream), stream)
    yield reporter
    reporter.finish()
