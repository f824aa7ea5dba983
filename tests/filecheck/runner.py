"""Runs the RUN lines of a FileCheck test in-process: ``xmge-opt`` through ``compiler.driver.opt.main``
and ``filecheck`` through its Python API, so a RUN line costs milliseconds instead of two process
start-ups. Supports what our tests use: ``%s``/``%S``, pipes, ``not`` and ``2>&1``; anything else is
an error (``lit -v tests/filecheck`` runs the same lines through real processes)."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
import tempfile
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class RunLine:
    path: str
    line: int  # 1-based line of the RUN: comment
    command: str

    @property
    def id(self) -> str:
        return f"{os.path.relpath(self.path, HERE)}:{self.line}"


def run_lines(path: str) -> list[RunLine]:
    found = []
    with open(path) as f:
        for i, text in enumerate(f, start=1):
            _, sep, cmd = text.partition("RUN:")
            if sep and text.lstrip().startswith("//"):
                found.append(RunLine(path, i, cmd.strip()))
    return found


def filecheck_files(*subdirs: str) -> list[str]:
    out = []
    for sub in subdirs:
        root = os.path.join(HERE, sub)
        out += [os.path.join(root, f) for f in sorted(os.listdir(root)) if f.endswith(".mlir")]
    return out


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def _run_xmge_opt(args: list[str], stdin: str) -> Result:
    from compiler.driver.opt import main

    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdin = saved_stdin
    return Result(code, out.getvalue(), err.getvalue())


def _run_filecheck(args: list[str], stdin: str) -> Result:
    from filecheck.matcher import Matcher
    from filecheck.options import parse_argv_options

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(stdin)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            opts = parse_argv_options(["filecheck", *args, "--input-file", f.name])
            code = Matcher.from_opts(opts).run()
    finally:
        os.unlink(f.name)
    return Result(code, "", err.getvalue())


TOOLS = {"xmge-opt": _run_xmge_opt, "filecheck": _run_filecheck}


def execute(run: RunLine) -> tuple[bool, str]:
    """Run one RUN line; returns (passed, a transcript for the failure message)."""
    command = run.command.replace("%s", run.path).replace("%S", os.path.dirname(run.path))
    data, log = "", [f"RUN at {run.id}: {command}"]
    for stage in command.split("|"):
        argv = shlex.split(stage)
        expect_failure = argv[:1] == ["not"]
        argv = argv[1:] if expect_failure else argv
        merge_stderr = "2>&1" in argv
        argv = [a for a in argv if a != "2>&1"]
        if not argv or argv[0] not in TOOLS:
            return False, f"unsupported command in RUN line: {stage.strip()!r}"
        result = TOOLS[argv[0]](argv[1:], data)
        data = result.stdout + (result.stderr if merge_stderr else "")
        log.append(f"$ {' '.join(argv)}  -> exit {result.code}\n{result.stderr}")
        if (result.code != 0) != expect_failure:
            log.append(f"stdout was:\n{result.stdout}")
            return False, "\n".join(log)
    return True, "\n".join(log)
