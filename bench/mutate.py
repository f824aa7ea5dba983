"""Mutation check: does the test suite catch deliberate, realistic bugs?

Each mutation is one (file, old text, new text) edit. It is applied in a temporary copy of the tree
(never in place), a chosen subset of tests runs there (``pytest -x -q`` with a timeout), and the
mutation is *caught* when those tests fail. Usage::

    python bench/mutate.py --list          # the mutations and the tests each one runs
    python bench/mutate.py                 # all of them
    python bench/mutate.py NAME [NAME...]  # some of them

Exit status 1 when a mutation is missed or no longer applies (its old text is gone or not unique).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TIMEOUT_S = 900


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]
    why: str


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "enum-max-min",
        "dialects/enums.py",
        "FLOOR_DIV MAX MIN MOD",
        "FLOOR_DIV MIN MAX MOD",
        ("tests/test_enum_numbers.py",),
        "ElemwiseMode MAX/MIN swapped: F.maximum would be dumped as MegEngine's MIN",
    ),
    Mutation(
        "neon-int8-index",
        "backends/c/templates/arm/neon.py",
        "vget_high_s16(w01), x[1]);",
        "vget_high_s16(w01), x[2]);",
        ("tests/test_arm_kernels.py", "tests/test_arm_int8_nchw44.py"),
        "int8 NCHW44 kernel without dot product multiplies the wrong input channel",
    ),
    Mutation(
        "relu-nan",
        "semantics/kernels.py",
        "return np.maximum(x, np.zeros((), x.dtype))",
        "return np.where(x > 0, x, np.zeros((), x.dtype))",
        ("tests/test_relu_nan.py", "tests/test_functional.py"),
        "reference ReLU maps NaN to 0 (MegEngine and torch keep NaN)",
    ),
    Mutation(
        "depthwise-stride-off-by-one",
        "backends/c/templates/portable/generic.py",
        "const int ihh = r * {sh} - {ph} + kh * {dh};",
        "const int ihh = r * {sh} - {ph} + kh * {dh} + ({sh} > 1);",
        ("tests/test_codegen_depthwise.py", "tests/test_arm_kernels.py", "tests/test_arm_depthwise_nchw.py"),
        "generic depthwise convolution reads one row too far down when strided",
    ),
    Mutation(
        "dtype-code",
        "backends/mge/schema.py",
        '    "QuantizedS32",\n    "QuantizedS8",\n',
        '    "QuantizedS8",\n    "QuantizedS32",\n',
        ("tests/test_enum_numbers.py",),
        "QuantizedS8 and QuantizedS32 dtype codes swapped in .mge files",
    ),
    Mutation(
        "param-tag",
        "backends/mge/schema.py",
        'ParamDef("Reduce", 23,',
        'ParamDef("Reduce", 24,',
        ("tests/test_enum_numbers.py",),
        "param.Reduce written under param.Cumsum's union tag",
    ),
)
BY_NAME = {m.name: m for m in MUTATIONS}


def copy_tree(dest: str) -> None:
    """The files git knows (tracked, and untracked but not ignored) into ``dest``."""
    listed = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):  # deleted in the work tree but still in the index
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))


def apply(tree: str, m: Mutation) -> str:
    """Edits the copy; returns the file's original text (to restore it)."""
    path = os.path.join(tree, m.path)
    with open(path) as f:
        text = f.read()
    count = text.count(m.old)
    if count != 1:
        raise LookupError(f"{m.path}: the old text occurs {count} times (expected once); update the mutation")
    with open(path, "w") as f:
        f.write(text.replace(m.old, m.new))
    return text


def run_tests(tree: str, tests: tuple[str, ...], timeout_s: int) -> tuple[str, str, float]:
    """(verdict, detail, seconds): caught (tests failed), missed (they passed), timeout."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", f"no verdict within {timeout_s}s", time.perf_counter() - start
    seconds = time.perf_counter() - start
    out = done.stdout + done.stderr
    if done.returncode == 0:
        summary = out.strip().splitlines()[-1] if out.strip() else ""
        return "missed", summary, seconds
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    if failed:
        return "caught", f"by {failed[0]}", seconds
    return "caught", f"pytest exit status {done.returncode}: {out.strip().splitlines()[-1:]}", seconds


def check_imports_from(tree: str) -> None:
    """The tests in the copy must import the copy's packages, not the original tree's."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import compiler, dialects; print(compiler.__file__); print(dialects.__file__)",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    outside = [p for p in probe if not os.path.realpath(p).startswith(os.path.realpath(tree))]
    if outside:
        raise SystemExit(f"the copy imports {outside} from outside {tree}; cannot test mutations there")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="seconds per mutation")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:30} {m.path}: {m.why}\n{'':30} tests: {' '.join(m.tests)}")
        return 0
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown mutation(s) {', '.join(unknown)}; valid: {', '.join(BY_NAME)}")
    chosen = [BY_NAME[n] for n in args.names] or list(MUTATIONS)
    results: list[tuple[str, str]] = []
    sys.path.insert(0, ROOT)
    from compiler.progress import track

    with tempfile.TemporaryDirectory(prefix="xmge-mutate-") as tree:
        copy_tree(tree)
        check_imports_from(tree)
        for m in track(chosen, "mutate", detail=lambda m: m.name):
            try:
                original = apply(tree, m)
            except LookupError as exc:
                results.append((m.name, "stale"))
                print(f"{m.name:30} STALE    {exc}", flush=True)
                continue
            try:
                verdict, detail, seconds = run_tests(tree, m.tests, args.timeout)
            finally:
                with open(os.path.join(tree, m.path), "w") as f:
                    f.write(original)
            results.append((m.name, verdict))
            print(f"{m.name:30} {verdict.upper():8} {seconds:6.1f}s  {detail}", flush=True)
    caught = sum(v == "caught" for _, v in results)
    print(f"{caught}/{len(results)} mutations caught")
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
