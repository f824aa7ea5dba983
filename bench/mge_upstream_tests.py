"""Run MegEngine 1.13's own Python unit tests against xmge, with only `megengine` aliased to `compiler`.

The tests come from a MegEngine source tree (`--src`, the folder that holds `imperative/python/test`);
this script never needs MegEngine itself. MegEngine's conftest reaches into its C++ internals, so it is
replaced by a small one that keeps the markers it defines (GPU and distributed tests are skipped, as
the issue's yardstick excludes them). Each test file runs in its own pytest process with a time limit,
and the script prints passed/failed/error/skipped per file and in total.

    python bench/mge_upstream_tests.py --src /tmp/mge_src [--only functional,module] [--json out.json]
"""

from __future__ import annotations

import argparse
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
'''

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


def prepare(src: Path, work: Path) -> Path:
    tests = src / "imperative" / "python" / "test"
    if not tests.is_dir():
        raise SystemExit(f"no MegEngine test tree at {tests}")
    dest = work / "test"
    shutil.copytree(tests, dest)
    for conftest in dest.rglob("conftest.py"):
        conftest.unlink()
    (dest / "conftest.py").write_text(CONFTEST)
    (work / "xmge_megengine_alias.py").write_text(ALIAS_PLUGIN)
    return dest


def run_file(path: Path, work: Path, timeout_s: int) -> dict[str, int]:
    env = dict(os.environ, PYTHONPATH=f"{work}{os.pathsep}{REPO}")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "xmge_megengine_alias", "-p", "no:cacheprovider",
           "--no-header", "-rN", str(path)]
    try:
        out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s).stdout
    except subprocess.TimeoutExpired:
        return {"timeout": 1}
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mge_upstream_") as tmp:
        work = Path(tmp)
        tests = prepare(args.src, work)
        wanted = [w for w in args.only.split(",") if w]
        files = sorted(p for p in tests.rglob("test_*.py")
                       if "xla" not in p.parts and any(w in str(p.relative_to(tests)) for w in wanted))
        totals: dict[str, int] = {}
        per_file: dict[str, dict[str, int]] = {}
        for index, path in enumerate(files, 1):
            rel = str(path.relative_to(tests))
            counts = run_file(path, work, args.timeout_s)
            per_file[rel] = counts
            for kind, number in counts.items():
                totals[kind] = totals.get(kind, 0) + number
            shown = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
            print(f"[{index}/{len(files)}] {rel}: {shown}", flush=True)
        print("total: " + " ".join(f"{k}={v}" for k, v in sorted(totals.items())))
        if args.json:
            tmp_json = args.json.with_suffix(".tmp")
            tmp_json.write_text(json.dumps({"totals": totals, "files": per_file}, indent=1))
            tmp_json.replace(args.json)


if __name__ == "__main__":
    main()
