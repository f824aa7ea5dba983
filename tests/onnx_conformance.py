"""The ONNX backend's node conformance cases, run on xmge (``tests/test_onnx_conformance.py``).

The cases are regenerated from the installed ``onnx`` package's case definitions
(``onnx.backend.test.case.node``, what its ``backend-test-tools`` writes to disk) and cached under
the build cache (``$XMGE_CACHE_DIR/../onnx-node-cases/<onnx version>``) in the package's own layout:
one folder per case with ``model.onnx`` and ``test_data_set_0/{input,output}_K.pb`` (TensorProtos, no
pickles). Nothing generated is committed.

Each case whose (first) node is an op type the importer claims (:data:`claimed_ops`) gets a status
per runner (``reference``: the reference interpreter, ``compiled``: the C backend for the host):

- ``pass``: right answer;
- ``refused``: an :class:`XmgeError` with a one-line message (the importer or the compiler said
  what it cannot do);
- ``error``: anything else (a crash, a multi-line error, a non-xmge exception);
- ``wrong``: it ran and the answer differs (always a test failure).

``python -m tests.onnx_conformance [--compiled] [--write]`` prints the counts and the failures, and
with ``--write`` rewrites the checked-in expected-status list (``tests/data/onnx_conformance.txt``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EXPECTED = Path(__file__).parent / "data" / "onnx_conformance.txt"
RANK = {"wrong": 0, "error": 1, "refused": 2, "pass": 3}
RUNNERS = ("reference", "compiled")


@dataclass
class Case:
    name: str
    op_type: str
    folder: Path

    def model_bytes(self) -> bytes:
        return (self.folder / "model.onnx").read_bytes()

    def data(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        from onnx import TensorProto, numpy_helper

        def read(kind: str) -> list[np.ndarray]:
            out = []
            folder = self.folder / "test_data_set_0"
            files = sorted(folder.glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
            for f in files:
                t = TensorProto()
                t.ParseFromString(f.read_bytes())
                out.append(numpy_helper.to_array(t))
            return out

        return read("input"), read("output")


def cache_dir() -> Path:
    import onnx

    from backends.c.build import cache_root

    return Path(cache_root()).parent / "onnx-node-cases" / onnx.__version__


def _write_case(root: Path, case: object) -> None:
    """One case in the onnx backend-test layout, written atomically (a temp folder renamed)."""
    from onnx import numpy_helper

    model = case.model  # type: ignore[attr-defined]
    name = case.name  # type: ignore[attr-defined]
    inputs, outputs = case.data_sets[0]  # type: ignore[attr-defined]
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    try:
        (tmp / "model.onnx").write_bytes(model.SerializeToString())
        data = tmp / "test_data_set_0"
        data.mkdir()
        graph = model.graph
        for kind, arrays, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for k, (a, info) in enumerate(zip(arrays, infos, strict=False)):
                if isinstance(a, np.ndarray | np.generic):
                    t = numpy_helper.from_array(np.asarray(a), info.name)
                elif hasattr(a, "SerializeToString"):  # already a TensorProto
                    t = a
                else:  # sequences, optionals, maps: not tensors, the case cannot be stored
                    raise TypeError(f"{kind} {k} is a {type(a).__name__}")
                (data / f"{kind}_{k}.pb").write_bytes(t.SerializeToString())
        try:
            os.replace(tmp, root / name)
        except OSError:  # another process stored it first
            if not (root / name).is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except TypeError:
        shutil.rmtree(tmp, ignore_errors=True)
        (root / f"{name}.skip").write_text(f"non-tensor data: {sys.exc_info()[1]}\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def generate(root: Path) -> None:
    """Regenerate every node case of the installed onnx package into ``root`` (idempotent)."""
    import onnx.backend.test.case.node as node_cases

    root.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    for case in cases:
        if not (root / case.name).is_dir() and not (root / f"{case.name}.skip").exists():
            _write_case(root, case)
    (root / "COMPLETE").write_text(f"{len(cases)}\n")


def all_cases() -> list[Case]:
    """Every stored node case (not the function-expanded ones), generating them on first use."""
    import onnx

    root = cache_dir()
    if not (root / "COMPLETE").exists():
        generate(root)
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if "_expanded" in folder.name:
            continue
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        if not model.graph.node:
            continue
        out.append(Case(folder.name, model.graph.node[0].op_type, folder))
    return out


def claimed_ops() -> set[str]:
    from backends.onnx.reader import claimed_op_types

    return claimed_op_types()


def claimed_cases() -> list[Case]:
    ops = claimed_ops()
    return [c for c in all_cases() if c.op_type in ops]


# ----------------------------------------------------------------------------------------------
# Running one case


def _one_line(exc: BaseException) -> bool:
    text = str(exc).strip()
    return bool(text) and "\n" not in text and "Traceback" not in text


def close(ours: np.ndarray, want: np.ndarray, rtol: float = 1e-3, atol: float = 1e-7) -> str | None:
    """None if ``ours`` is ``want`` within the backend tests' tolerances (int64 / float64 results
    are compared in xmge's int32 / float32), else what differs."""
    ours, want = np.asarray(ours), np.asarray(want)
    if ours.shape != want.shape:
        return f"shape {ours.shape} != {want.shape}"
    if want.dtype.kind in "biu" or want.dtype == np.bool_:
        if not np.array_equal(ours.astype(np.int64), want.astype(np.int64)):
            return f"values differ at {int((ours.astype(np.int64) != want.astype(np.int64)).sum())} places"
        return None
    if want.dtype.kind not in "fc":
        return None if np.array_equal(ours, want) else "values differ"
    o, w = ours.astype(np.float64), want.astype(np.float64)
    if want.dtype == np.float64:  # xmge computes it in float32
        rtol, atol = max(rtol, 1e-5), max(atol, 1e-6)
    if want.dtype == np.float16:
        rtol, atol = max(rtol, 2e-3), max(atol, 1e-3)
    nan_ok = np.isnan(o) == np.isnan(w)
    if not nan_ok.all():
        return "NaN at different places"
    inf = np.isinf(w)
    if (o[inf] != w[inf]).any():
        return "inf differs"
    fin = ~np.isnan(w) & ~inf
    bad = np.abs(o[fin] - w[fin]) > atol + rtol * np.abs(w[fin])
    if bad.any():
        return f"max abs diff {float(np.abs(o[fin] - w[fin]).max()):.3g}"
    return None


def _feed(module: object, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The case's inputs in the dtypes xmge keeps them in (int64 → int32, float64 → float32)."""
    out = []
    for a in inputs:
        a = np.asarray(a)
        if a.dtype == np.int64 or a.dtype == np.uint64 or a.dtype == np.uint32:
            a = a.astype(np.int32)
        elif a.dtype == np.float64:
            a = a.astype(np.float32)
        out.append(a)
    return out


def compilable(inputs: Sequence[np.ndarray]) -> bool:
    """Cases the compiled runner tries: float32 and integer / bool inputs only."""
    return all(np.asarray(a).dtype == np.float32 or np.asarray(a).dtype.kind in "biu" for a in inputs)


_MUST_BIND = re.compile(r"pass input_values=\{'([^']+)'")


def run_case(case: Case, runner: str) -> tuple[str, str]:
    """(status, detail) of one case on one runner. A graph input the importer says must be known
    when compiling (a shape, axes, sizes given as an input) is bound to the case's value with
    ``input_values`` (the detail then says ``bound: NAMES``), as a user who knows it would."""
    from backends.onnx.reader import read_onnx
    from dialects.errors import XmgeError

    inputs, outputs = case.data()
    model = case.model_bytes()
    import onnx

    names = [i.name for i in onnx.load_from_string(model).graph.input]
    names = [n for n in names if n not in {t.name for t in onnx.load_from_string(model).graph.initializer}]
    by_name = dict(zip(names, inputs, strict=False))
    bound: dict[str, np.ndarray] = {}
    while True:
        try:
            module = read_onnx(model, input_values=bound or None)
            break
        except XmgeError as exc:
            m = _MUST_BIND.search(str(exc))
            if m is None or m.group(1) in bound or m.group(1) not in by_name:
                return _refusal(exc)
            bound[m.group(1)] = by_name[m.group(1)]
        except Exception as exc:  # noqa: BLE001 - every other exception is what this test looks for
            return _error(exc)
    note = f"bound: {', '.join(sorted(bound))}" if bound else ""
    try:
        feeds = _feed(module, [by_name[n] for n in names if n not in bound])
        if runner == "reference":
            from semantics import run_module

            with np.errstate(all="ignore"):
                got = run_module(module, feeds)
        else:
            from compiler.driver.compile import compile as xcompile

            got = xcompile(module, "x86").run(feeds)
    except XmgeError as exc:
        return _refusal(exc)
    except Exception as exc:  # noqa: BLE001
        return _error(exc)
    if len(got) != len(outputs):
        return "wrong", f"{len(got)} outputs, expected {len(outputs)}"
    for k, (a, b) in enumerate(zip(got, outputs, strict=True)):
        diff = close(a, b)
        if diff is not None:
            return "wrong", f"output {k}: {diff}"
    return "pass", note


def _refusal(exc: BaseException) -> tuple[str, str]:
    text = str(exc).strip()
    return ("refused" if _one_line(exc) else "error"), f"{type(exc).__name__}: {text.splitlines()[0]}"


def _error(exc: BaseException) -> tuple[str, str]:
    text = str(exc).strip()
    return "error", f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


# ----------------------------------------------------------------------------------------------
# The expected-status list


def read_expected(path: Path = EXPECTED) -> dict[str, dict[str, str]]:
    """{case: {runner: status}} from lines ``name reference=STATUS compiled=STATUS``."""
    out: dict[str, dict[str, str]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, *fields = line.split()
        out[name] = dict(f.split("=", 1) for f in fields)
    return out


def write_expected(results: dict[str, dict[str, str]], path: Path = EXPECTED) -> None:
    lines = [
        "# ONNX node conformance cases of the op types xmge's importer claims: the status each must keep",
        "# or improve (wrong < error < refused < pass); regenerate with python -m tests.onnx_conformance",
        "# --compiled --write. 'skip' means the runner does not try it (non-float32/int inputs).",
    ]
    for runner in RUNNERS:
        passed = sum(r.get(runner) == "pass" for r in results.values())
        lines.append(
            f"# {runner}: {passed} of {len(results)} pass ({100 * passed / max(len(results), 1):.1f}%)"
        )
    for name in sorted(results):
        fields = " ".join(f"{r}={results[name][r]}" for r in RUNNERS if r in results[name])
        lines.append(f"{name} {fields}")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def run_all(cases: Sequence[Case], runners: Sequence[str]) -> Iterator[tuple[Case, str, str, str]]:
    """(case, runner, status, detail) of every case on every runner. The compiled runner loads a
    shared library per case: it runs in worker processes (:func:`_compiled_in_workers`) so that a
    crash in one case is that case's ``error`` and not the end of the run."""
    compiled = "compiled" in runners and len(cases) > 1
    results: dict[str, tuple[str, str]] = dict(_compiled_in_workers(cases)) if compiled else {}
    for case in cases:
        for runner in runners:
            if runner == "compiled" and not compilable(case.data()[0]):
                yield case, runner, "skip", ""
            elif runner == "compiled" and compiled:
                yield case, runner, *results[case.name]
            else:
                yield case, runner, *run_case(case, runner)


WORKER_CASES = 60  # cases per worker process (a fresh process bounds the libraries loaded in one)


def _compiled_in_workers(cases: Sequence[Case]) -> Iterator[tuple[str, tuple[str, str]]]:
    import json
    import subprocess

    todo = [c for c in cases if compilable(c.data()[0])]
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    while todo:
        chunk, todo = todo[:WORKER_CASES], todo[WORKER_CASES:]
        cmd = [sys.executable, "-m", "tests.onnx_conformance", "--worker", *(c.name for c in chunk)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, check=False)
        done = {}
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                done[row["name"]] = (row["status"], row["detail"])
        for k, c in enumerate(chunk):
            if c.name in done:
                yield c.name, done[c.name]
            else:  # the worker died on this case: record it, run the rest in a new worker
                yield c.name, ("error", f"the compiled run crashed (worker exit status {proc.returncode})")
                todo = list(chunk[k + 1 :]) + todo
                break


def _worker(names: Sequence[str]) -> int:
    import json

    by_name = {c.name: c for c in all_cases()}
    for name in names:
        status, detail = run_case(by_name[name], "compiled")
        print(json.dumps({"name": name, "status": status, "detail": detail}), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--compiled", action="store_true", help="also compile every case for the host")
    parser.add_argument("--write", action="store_true", help="rewrite the expected-status list")
    parser.add_argument("--op", action="append", help="only these op types")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every failure")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)  # run_all's worker processes
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.worker)
    cases = claimed_cases()
    if args.op:
        cases = [c for c in cases if c.op_type in args.op]
    runners = RUNNERS if args.compiled else RUNNERS[:1]
    results: dict[str, dict[str, str]] = {c.name: {} for c in cases}
    bound = {r: 0 for r in runners}
    previous = read_expected()
    for case, runner, status, detail in run_all(cases, runners):
        results[case.name][runner] = status
        bound[runner] += status == "pass" and detail.startswith("bound")
        if status != "pass" and status != "skip" and args.verbose:
            print(f"{runner:9} {status:7} {case.name}: {detail}")
    for runner in runners:
        statuses = [r[runner] for r in results.values()]
        counts = {s: statuses.count(s) for s in ("pass", "refused", "error", "wrong", "skip")}
        share = 100 * counts["pass"] / len(cases)
        print(
            f"{runner}: {counts['pass']} of {len(cases)} pass ({share:.1f}%; {bound[runner]} of them with "
            f"shape/axes inputs bound by input_values), {counts}"
        )
    if args.write:
        if not args.compiled:  # keep the compiled statuses already recorded
            for name, r in results.items():
                if "compiled" in previous.get(name, {}):
                    r["compiled"] = previous[name]["compiled"]
        write_expected(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
