"""Tuning files: the kernel family measured fastest for each op signature on one machine.

A file is JSON keyed by the CPU model string, its ISA feature set and the thread count; each entry
maps an op signature (:func:`passes.lowering.select.op_signature`: op kind, shapes, dtypes,
attributes) to a family, so models sharing layers share choices; an entry ``layout:<model key>``
holds a model's whole-graph layout (:mod:`compiler.driver.tuner` measures both kinds). A file made on
another CPU, ISA set or thread count is ignored with a one-line warning naming the difference: a
choice measured elsewhere may be slower here. Writes are atomic (temp file + rename) and merge under
a process lock so concurrent tuners never lose or corrupt entries.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from dialects.errors import XmgeError
from passes.target import Target

FORMAT = 1
# entries under this prefix hold a model's whole-graph layout, not an op's kernel family
LAYOUT_PREFIX = "layout:"
# the tuning file a saved package carries (the choices its kernels were compiled with)
PACKAGE_FILE = "tuning.json"
_WRITE_LOCK = threading.Lock()


class TuningFileError(XmgeError):
    """A tuning file that cannot be read (not JSON, wrong format)."""


class TuningWarning(UserWarning):
    """A tuning file made under another key (CPU, ISA set, thread count): ignored."""


def cpu_model() -> str:
    """The CPU model string (``/proc/cpuinfo``'s ``model name``, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class TuningKey:
    """What a measurement depends on besides the op: the machine and the thread count."""

    cpu: str
    isa: tuple[str, ...]
    threads: int

    def difference(self, other: TuningKey) -> str | None:
        """A short description of how ``other`` differs from this key, ``None`` when equal."""
        if self.cpu != other.cpu:
            return f"CPU {other.cpu!r} is not this machine's {self.cpu!r}"
        if self.isa != other.isa:
            return f"ISA features {'+'.join(other.isa)} are not this machine's {'+'.join(self.isa)}"
        if self.threads != other.threads:
            return f"thread count {other.threads} is not {self.threads}"
        return None


@dataclass
class TuningFile:
    """Choices (op signature -> kernel family) measured under ``key``."""

    key: TuningKey
    choices: dict[str, str] = field(default_factory=dict)

    def as_option(self) -> tuple[tuple[str, str], ...]:
        """The kernel choices as ``LowerToKernelPass(choices=...)`` takes them (layout entries are
        whole-graph choices, read by ``compile()`` itself)."""
        return tuple(sorted((s, f) for s, f in self.choices.items() if not s.startswith(LAYOUT_PREFIX)))

    def layout(self, entry: str) -> str | None:
        """The whole-graph layout (``nchw``, ``nchw88``) measured fastest for the model ``entry``
        (:func:`compiler.driver.tuner.layout_entry`), if tuned."""
        return self.choices.get(entry) if entry.startswith(LAYOUT_PREFIX) else None

    def restricted(self, signatures: set[str]) -> TuningFile:
        """The entries for ``signatures`` only (what one model used: a package ships these)."""
        return TuningFile(self.key, {s: f for s, f in self.choices.items() if s in signatures})

    def to_json(self) -> str:
        k = self.key
        body = {"format": FORMAT, "cpu": k.cpu, "isa": list(k.isa), "threads": k.threads,
                "choices": dict(sorted(self.choices.items()))}
        return json.dumps(body, indent=1)

    @classmethod
    def from_json(cls, text: str, where: str = "<tuning file>") -> TuningFile:
        try:
            body = json.loads(text)
            if body.get("format") != FORMAT:
                got = body.get("format")
                raise TuningFileError(f"{where}: tuning file format {got!r}, expected {FORMAT}")
            key = TuningKey(str(body["cpu"]), tuple(str(i) for i in body["isa"]), int(body["threads"]))
            choices = {str(s): str(f) for s, f in body["choices"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise TuningFileError(f"{where}: not a tuning file ({type(e).__name__}: {e})") from None
        return cls(key, choices)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically, merged with the choices already in ``path`` under the same key (a
        concurrent tuner's entries survive; ours win on the same signature)."""
        path = Path(path)
        with _WRITE_LOCK:
            merged = dict(self.choices)
            if path.exists():
                try:
                    old = TuningFile.from_json(path.read_text(encoding="utf-8"), str(path))
                    if old.key == self.key:
                        merged = {**old.choices, **self.choices}
                except TuningFileError:
                    pass  # a corrupt file is replaced, not merged
            text = TuningFile(self.key, merged).to_json()
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise


def key_for(target: Target, threads: int) -> TuningKey:
    """This machine's key for code generated for ``target`` on ``threads`` threads."""
    return TuningKey(cpu_model(), tuple(target.isas), threads)


def load_for(path: str | os.PathLike[str], key: TuningKey) -> TuningFile | None:
    """The tuning file at ``path`` (or a saved package folder's ``tuning.json``) if it was made under
    ``key``; otherwise ``None`` with a one-line warning naming the difference (a missing file is
    ``None`` silently: nothing tuned yet)."""
    p = Path(path)
    if p.is_dir():
        p = p / PACKAGE_FILE
    if not p.exists():
        return None
    return checked(TuningFile.from_json(p.read_text(encoding="utf-8"), str(p)), key, str(p))


def checked(tf: TuningFile, key: TuningKey, where: str) -> TuningFile | None:
    """``tf`` if it was made under ``key``, else ``None`` with a one-line warning naming ``where``
    and the difference."""
    diff = key.difference(tf.key)
    if diff is not None:
        warnings.warn(f"{where}: tuning file ignored: {diff}", TuningWarning, stacklevel=3)
        return None
    return tf


__all__ = [
    "LAYOUT_PREFIX",
    "PACKAGE_FILE",
    "TuningFile",
    "TuningFileError",
    "TuningKey",
    "TuningWarning",
    "checked",
    "cpu_model",
    "key_for",
    "load_for",
]
