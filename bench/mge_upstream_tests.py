"""Run MegEngine 1.13's own Python unit tests against xmge, with only `megengine` aliased to `compiler`.

The tests come from a MegEngine source tree (`--src`, the folder that holds `imperative/python/test`);
this script never needs MegEngine itself. MegEngine's conftest reaches into its C++ internals, so it is
replaced by a small one that keeps the markers it defines (GPU and distributed tests are skipped, as
the issue's yardstick excludes them). Each test file runs in its own pytest process with a time limit,
and the script prints passed/failed/error/skipped per file and in total.

    python bench/mge_upstream_tests.py --src /tmp/mge_src [--only functional,module] [--json out.json]
        [--failures] [--lenient-imports]

`--failures` also prints each failing test id with the first line of its error (pytest's short summary),
and `--json` then records them per file, so causes can be ranked by how many tests each breaks.
`--lenient-imports` splits each module-level MegEngine import per name and lets a missing name fail
only the tests that use it (the way the issue counts), instead of the whole file at collection.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ALIAS_PLUGIN = '''
import importlib, importlib.abc, importlib.util, sys

class _MegEngineAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `megengine[.x]` as `compiler[.x]`: the same module objects, not copies."""

    def find_spec(self, fullname, path, target=None):
        if fullname == "megengine" or fullname.startswith("megengine."):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("compiler" + spec.name[len("megengine"):])

    def exec_module(self, module):
        return None

sys.meta_path.insert(0, _MegEngineAlias())


class _XmgeMissing:
    """Stands for a name a test module imports from MegEngine that xmge lacks; using it raises."""

    def __init__(self, name, error):
        self._xmge_name, self._xmge_error = name, error

    def _xmge_raise(self, *args, **kwargs):
        raise ImportError(f"xmge lacks {self._xmge_name}: {self._xmge_error}")

    __call__ = _xmge_raise

    def __getattr__(self, attr):
        if attr.startswith("_xmge_"):
            raise AttributeError(attr)
        self._xmge_raise()
'''

LENIENT_ERRORS = "(ImportError, AttributeError)"

CONFTEST = '''
import os, sys
import pytest
sys.path.append(os.path.join(os.path.dirname(__file__), "helpers"))

def pytest_configure(config):
    for name in ("require_ngpu", "distributed_isolated", "isolated_distributed", "skip_xla"):
        config.addinivalue_line("markers", name)

@pytest.fixture(autouse=True)
def _skip_gpu_and_distributed(request):
    if request.node.get_closest_marker("require_ngpu"):
        pytest.skip("needs a GPU")
    if request.node.get_closest_marker("distributed_isolated") or request.node.get_closest_marker(
        "isolated_distributed"
    ):
        pytest.skip("distributed")
'''

SUMMARY = re.compile(r"(\d+) (passed|failed|error|errors|skipped|xfailed|xpassed)")


def _bound_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [a.asname or a.name.split(".")[0] for a in node.names]


def make_imports_lenient(path: Path) -> None:
    """Rewrite a test module so each missing MegEngine import fails only the tests that use the name:
    every module-level `import megengine...`/`from megengine... import a, b` is split per name and
    wrapped in try/except, binding a placeholder that raises ImportError when used."""
    source = path.read_text()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if not module.startswith("megengine") or any(a.name == "*" for a in node.names):
                continue
            stmts = [(f"from {module} import {a.name}" + (f" as {a.asname}" if a.asname else ""),
                      a.asname or a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            if not any(a.name.startswith("megengine") for a in node.names):
                continue
            stmts = [(f"import {a.name}" + (f" as {a.asname}" if a.asname else ""), name)
                     for a, name in zip(node.names, _bound_names(node), strict=True)]
        else:
            continue
        text = "".join(
            f"try:\n    {stmt}\nexcept {LENIENT_ERRORS} as _xmge_e:\n"
            f"    {name} = _XmgeMissing({stmt!r}, _xmge_e)\n" for stmt, name in stmts)
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, text))
    if not edits:
        return
    for start, end, text in reversed(edits):
        lines[start:end] = [text]
    header = "from xmge_megengine_alias import _XmgeMissing\n"
    first = 0
    # `from __future__` imports must stay first
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            first = node.end_lineno or node.lineno
    lines.insert(first, header)
    path.write_text("".join(lines))


def prepare(src: Path, work: Path, lenient: bool = False) -> Path:
    tests = src / "imperative" / "python" / "test"
    if not tests.is_dir():
        raise SystemExit(f"no MegEngine test tree at {tests}")
    dest = work / "test"
    shutil.copytree(tests, dest)
    for conftest in dest.rglob("conftest.py"):
        conftest.unlink()
    (dest / "conftest.py").write_text(CONFTEST)
    if lenient:
        for module in dest.rglob("*.py"):
            if module.name != "conftest.py":
                make_imports_lenient(module)
    (work / "xmge_megengine_alias.py").write_text(ALIAS_PLUGIN)
    return dest


FAILURE_LINE = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")


def run_file(path: Path, work: Path, timeout_s: int,
             failures: list[str] | None = None, deselect: tuple[str, ...] = ()) -> dict[str, int]:
    """Counts per outcome; with `failures`, appends "TEST_ID: first error line" per failed test."""
    # A wide terminal keeps pytest from cutting the short summary lines.
    env = dict(os.environ, PYTHONPATH=f"{work}{os.pathsep}{REPO}", COLUMNS="2000")
    report = "-rfE" if failures is not None else "-rN"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "xmge_megengine_alias", "-p", "no:cacheprovider",
           "--no-header", report, "--tb=short" if failures is not None else "--tb=no", str(path)]
    for test_id in deselect:
        cmd += ["--deselect", test_id]
    try:
        out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s).stdout
    except subprocess.TimeoutExpired:
        return {"timeout": 1}
    if failures is not None:
        # A collection error's summary line carries no message; its traceback's last "E   " line does.
        e_lines = [line[1:].strip() for line in out.splitlines() if line.startswith("E   ")]
        for line in out.splitlines():
            match = FAILURE_LINE.match(line)
            if match:
                message = match.group(3) or (e_lines[-1] if e_lines else match.group(1))
                failures.append(f"{match.group(2)}: {message.strip()}")
    counts: dict[str, int] = {}
    tail = out.strip().splitlines()[-1] if out.strip() else ""
    for number, kind in SUMMARY.findall(tail):
        counts["error" if kind == "errors" else kind] = int(number)
    if not counts:
        counts["error"] = 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--src", type=Path, required=True, help="MegEngine source tree")
    parser.add_argument("--only", default="unit", help="comma-separated path fragments to select files")
    parser.add_argument("--timeout-s", type=int, default=600, help="limit per test file")
    parser.add_argument("--json", type=Path, help="write the per-file counts here")
    parser.add_argument("--lenient-imports", action="store_true",
                        help="a missing MegEngine import fails only the tests that use the name")
    parser.add_argument("--deselect", action="append", default=[], metavar="TEST_ID",
                        help="skip a test (e.g. test/unit/functional/test_functional.py::test_x), "
                        "one that takes the reference kernels too long; repeatable")
    parser.add_argument("--failures", action="store_true",
                        help="print each failing test id and the first line of its error")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mge_upstream_") as tmp:
        work = Path(tmp)
        tests = prepare(args.src, work, args.lenient_imports)
        wanted = [w for w in args.only.split(",") if w]
        files = sorted(p for p in tests.rglob("test_*.py")
                       if "xla" not in p.parts and any(w in str(p.relative_to(tests)) for w in wanted))
        totals: dict[str, int] = {}
        per_file: dict[str, dict[str, int]] = {}
        failed_tests: dict[str, list[str]] = {}
        for index, path in enumerate(files, 1):
            rel = str(path.relative_to(tests))
            failures: list[str] | None = [] if args.failures else None
            counts = run_file(path, work, args.timeout_s, failures, tuple(args.deselect))
            per_file[rel] = counts
            for kind, number in counts.items():
                totals[kind] = totals.get(kind, 0) + number
            shown = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
            print(f"[{index}/{len(files)}] {rel}: {shown}", flush=True)
            if failures:
                failed_tests[rel] = failures
                for line in failures:
                    print(f"    {line[:300]}", flush=True)
        print("total: " + " ".join(f"{k}={v}" for k, v in sorted(totals.items())))
        if args.json:
            tmp_json = args.json.with_suffix(".tmp")
            record = {"totals": totals, "files": per_file, "failures": failed_tests}
            tmp_json.write_text(json.dumps(record, indent=1))
            tmp_json.replace(args.json)


if __name__ == "__main__":
    main()
