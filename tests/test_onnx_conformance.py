"""The ONNX backend's node conformance cases (regenerated from the installed ``onnx`` package at
test time, cached under the build cache; see ``tests/onnx_conformance.py``) for every op type the
importer claims: no wrong answer, no crash, and no case worse than the checked-in expected status
(``tests/data/onnx_conformance.txt``): a case may only move up (refused → pass).

The reference run is the default; compiling every case for the host (hundreds of gcc runs) is
``slow``."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

pytest.importorskip("onnx")

from tests import onnx_conformance as conf  # noqa: E402


def _check(runner: str, cases: Sequence[conf.Case]) -> None:
    expected = conf.read_expected()
    assert expected, f"{conf.EXPECTED} is missing"
    worse, wrong, counts = [], [], {"pass": 0}
    for case, _, status, detail in conf.run_all(cases, [runner]):
        counts[status] = counts.get(status, 0) + 1
        if status == "wrong":
            wrong.append(f"{case.name}: {detail}")
        want = expected.get(case.name, {}).get(runner)
        if want is None or want == "skip" or status == "skip":
            continue
        if conf.RANK[status] < conf.RANK[want]:
            worse.append(f"{case.name}: {want} -> {status} ({detail})")
    assert not wrong, f"{len(wrong)} wrong answers:\n" + "\n".join(wrong)
    assert not worse, f"{len(worse)} cases regressed:\n" + "\n".join(worse)
    print(f"{runner}: {counts}")


@pytest.fixture(scope="module")
def cases() -> list[conf.Case]:
    return conf.claimed_cases()


def test_cases_are_regenerated_from_the_installed_onnx(cases: list[conf.Case]) -> None:
    assert len(cases) > 700  # onnx 1.23 writes 783 cases of the claimed op types
    claimed = conf.claimed_ops()
    assert {c.op_type for c in cases} <= claimed


def test_reference(cases: list[conf.Case]) -> None:
    _check("reference", cases)


@pytest.mark.slow
def test_compiled(cases: list[conf.Case]) -> None:
    _check("compiled", cases)


def test_compiled_sample(cases: list[conf.Case]) -> None:
    """A few cases compiled by default (one per op type of a small set), so the compiled path is
    exercised without the slow run."""
    want = {"Add", "Relu", "Conv", "Softmax", "ReduceMax", "Gemm"}
    sample, seen = [], set()
    for c in cases:
        if c.op_type in want and c.op_type not in seen and conf.read_expected().get(c.name, {}).get(
            "compiled"
        ) == "pass":
            sample.append(c)
            seen.add(c.op_type)
    assert sample
    _check("compiled", sample)
