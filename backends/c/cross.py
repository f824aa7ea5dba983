"""Cross-building for AArch64 and running under qemu.

* :func:`toolchain_problem` says why ARM code cannot be built or run here (``None`` when it can):
  ``aarch64-linux-gnu-gcc`` (Debian's ``gcc-aarch64-linux-gnu``) and ``qemu-aarch64``
  (``qemu-user``) must be on the PATH (``make toolchains`` installs both). ``$XMGE_AARCH64_CC`` and
  ``$XMGE_QEMU_AARCH64`` override the names.
* :func:`cross_build` compiles a generated ``model.c`` with the shared runtime into
  ``lib<prefix>.so`` (to deploy) and a statically linked ``runner`` (so qemu needs no sysroot),
  cached by content hash like :func:`backends.c.build.build`.
* :data:`QEMU_FLAGS` run it with ``-cpu max`` (ARMv8.2 dot product and FP16 arithmetic present).
  Timings under emulation mean nothing; :func:`count_instructions` counts what the emulated CPU
  executes instead, per function and per instruction class (NEON, ``sdot``, FP16), from qemu's
  translation log (``-d in_asm,exec,nochain``: each executed translation block is logged, and the
  instructions of each block once), since Debian's qemu ships no TCG plugins (``libinsn.so``).
* The Makefile / CMakeLists.txt a user builds the saved package with on the device are
  :mod:`backends.c.project`'s, shared with x86 packages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from backends.c.build import Build, BuildError, cached_build

QEMU_FLAGS = ("-cpu", "max")


class EmulationWarning(UserWarning):
    """A model runs under an emulator: its results are exact, its timings meaningless."""


EMULATION_NOTE = (
    "running the aarch64 build under qemu-aarch64 (user-mode emulation): results are exact, but "
    "timings under emulation mean nothing; count instructions with bench/bench_arm.py instead"
)


def cross_cc() -> str:
    return os.environ.get("XMGE_AARCH64_CC", "aarch64-linux-gnu-gcc")


def qemu() -> str:
    return os.environ.get("XMGE_QEMU_AARCH64", "qemu-aarch64")


def toolchain_problem() -> str | None:
    """Why ARM code cannot be cross-built and emulated on this machine, or ``None``."""
    missing = [
        f"{tool} ({pkg})"
        for tool, pkg in ((cross_cc(), "gcc-aarch64-linux-gnu"), (qemu(), "qemu-user"))
        if shutil.which(tool) is None
    ]
    if missing:
        return f"{' and '.join(missing)} not found: run `make toolchains` (apt-get) to install"
    return None


def launcher() -> tuple[str, ...]:
    return (qemu(), *QEMU_FLAGS)


def cross_build(model_c: str, cflags: Sequence[str]) -> Build:
    """Cross-compile ``model_c`` with the runtime: ``lib<prefix>.so`` and a static ``runner``."""
    problem = toolchain_problem()
    if problem:
        raise BuildError(f"cannot build for AArch64: {problem}")
    return cached_build(
        model_c, list(cflags), cc=cross_cc(), salt=b"aarch64\0", prefix="aarch64-",
        runner_flags=("-static",), launcher=launcher(),
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Instruction counting under qemu

_TRACE = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
_INSN = re.compile(r"^0x([0-9a-f]+):\s+([0-9a-f]{8})\s+(\S+)\s*(.*)$")
_VREG = re.compile(r"\bv\d+\.(\d*)([bhsd])\b|\b[qQ]\d+\b")
_HALF = re.compile(r"\bv\d+\.\d*h\b|\bh\d+\b")


def insn_class(mnemonic: str, operands: str, word: int = 0) -> str:
    """``dot`` (sdot/udot), ``fp16`` (half-precision arithmetic), ``neon`` (any other instruction on
    vector registers) or ``scalar``. qemu 7's disassembler prints the ARMv8.2 instructions it does
    not know as ``.byte``, so those are classified by their encoding (``word``)."""
    if mnemonic in ("sdot", "udot"):
        return "dot"
    if mnemonic == ".byte":
        if (word & 0xBFE0FC00) in (0x0E809400, 0x2E809400) or (word & 0xBFC0F400) in (0x0F80E000, 0x2F80E000):
            return "dot"  # SDOT/UDOT (vector), SDOT/UDOT (by element)
        if (
            (word & 0x9F60C400) == 0x0E400400  # three registers of the same type, half precision
            or (
                (word & 0xBFC00400) == 0x0F000000 and (word >> 12) & 0xF in (1, 5, 9)
            )  # FMLA/FMLS/FMUL by element
            or (word & 0xFF200000) == 0x1EE00000  # scalar half-precision data processing
            or (word & 0xFFC00000) == 0x1FC00000  # FMADD/FMSUB half
        ):
            return "fp16"
        return "neon" if (word >> 25) & 0x7 == 0x7 else "scalar"
    if mnemonic.startswith("f") and _HALF.search(operands) and "fcvt" not in mnemonic:
        return "fp16"
    if _VREG.search(operands):
        return "neon"
    return "scalar"


@dataclass
class InsnCounts:
    """Instructions an emulated run executed: in total, per function, and per class within the
    functions of interest."""

    total: int = 0
    per_function: Counter[str] = field(default_factory=Counter)
    per_class: Counter[str] = field(default_factory=Counter)

    def in_functions(self, names: set[str]) -> int:
        return sum(n for f, n in self.per_function.items() if f in names)


def count_instructions(
    command: Sequence[str], functions: set[str], *, cwd: str | None = None, timeout: float = 600
) -> InsnCounts:
    """Run ``command`` (an aarch64 program and its arguments) under qemu, counting the
    instructions executed; ``per_class`` covers only ``functions`` (e.g. the generated kernels)."""
    with tempfile.TemporaryDirectory(prefix="xmge-insn-") as d:
        fifo = os.path.join(d, "qemu.log")
        os.mkfifo(fifo)
        blocks: dict[int, list[str]] = {}  # pc -> instruction classes of the block at pc
        execs: Counter[int] = Counter()
        names: dict[int, str] = {}
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                with open(fifo) as log:
                    current: list[str] | None = None
                    for line in log:
                        if line.startswith("Trace"):
                            m = _TRACE.match(line)
                            if m:
                                pc = int(m.group(1), 16)
                                execs[pc] += 1
                                if pc not in names:
                                    names[pc] = line.rsplit(None, 1)[-1].strip()
                            current = None
                        elif line.startswith("IN:"):
                            current = None
                        elif line.startswith("0x"):
                            m = _INSN.match(line)
                            if m:
                                if current is None:
                                    current = blocks[int(m.group(1), 16)] = []
                                current.append(insn_class(m.group(3), m.group(4), int(m.group(2), 16)))
                        else:
                            current = None
            except BaseException as exc:  # surfaced by the caller
                errors.append(exc)

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        cmd = [qemu(), *QEMU_FLAGS, "-d", "in_asm,exec,nochain", "-D", fifo, *command]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout)
        t.join(timeout)
        if errors:
            raise errors[0]
        if proc.returncode != 0:
            raise BuildError(f"{' '.join(command)} failed under qemu:\n{proc.stderr[-3000:]}")
    out = InsnCounts()
    for pc, n in execs.items():
        classes = blocks.get(pc, [])
        fn = names.get(pc, "?")
        out.total += n * len(classes)
        out.per_function[fn] += n * len(classes)
        # gcc's outlined and cloned parts keep the function's name before a dot (f._omp_fn.0, ...)
        if fn.split(".", 1)[0] in functions:
            for c in classes:
                out.per_class[c] += n
    return out


_C_FUNCTION = re.compile(r"^(?:static\s+)?(?:inline\s+)?[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(", re.M)


def defined_functions(source: str) -> set[str]:
    """Names of the functions a generated translation unit defines (the model's own code)."""
    return {m.group(1) for m in _C_FUNCTION.finditer(source) if m.group(1) not in ("if", "for", "while")}


__all__ = [
    "EMULATION_NOTE",
    "EmulationWarning",
    "InsnCounts",
    "count_instructions",
    "cross_build",
    "defined_functions",
    "insn_class",
    "launcher",
    "toolchain_problem",
]
