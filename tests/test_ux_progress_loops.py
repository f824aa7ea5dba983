"""Progress of long loops (compiler/progress.py ``track``/``start``): benchmarks over models, fuzzing
and mutation runs report items done with a percentage on a terminal, at most a line a second, and
nothing when piped; bench/fuzz_mge.py's isolated workers report through it."""

from __future__ import annotations

import io

import pytest

from compiler.progress import start, track


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_track_reports_each_item_with_its_detail_and_a_done_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XMGE_PROGRESS", raising=False)
    out = _Tty()
    seen = list(track(["resnet18", "mobilenet"], "bench x86", detail=str, every_s=0, stream=out))
    assert seen == ["resnet18", "mobilenet"]
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["[xmge bench x86] 1/2 (50%) resnet18", "[xmge bench x86] 2/2 (100%) mobilenet"]
    assert lines[2].startswith("[xmge bench x86] 2/2 (100%) done in ") and len(lines) == 3


def test_track_writes_a_line_a_second_and_always_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XMGE_PROGRESS", raising=False)
    out = _Tty()
    for _ in track(range(5000), "fuzz", stream=out):  # thousands of quick items: no flood
        pass
    lines = out.getvalue().splitlines()
    assert lines[0] == "[xmge fuzz] 1/5000 (0%)"
    assert lines[-2] == "[xmge fuzz] 5000/5000 (100%)" and "done in" in lines[-1]
    assert len(lines) <= 5


def test_track_is_silent_when_piped_and_has_no_done_line_after_a_break(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("XMGE_PROGRESS", raising=False)
    piped = io.StringIO()
    assert sum(track(range(3), "mutate", stream=piped)) == 3
    assert piped.getvalue() == ""
    out = _Tty()
    for i in track(range(10), "mutate", every_s=0, stream=out):
        if i == 2:
            break
    assert "done" not in out.getvalue() and out.getvalue().count("\n") == 2
    generator_total = list(track((i for i in range(3)), "fuzz", every_s=0, stream=out))  # no len: no total
    assert generator_total == [0, 1, 2]
    assert "[xmge fuzz] 3\n" in out.getvalue() and "[xmge fuzz] 3/" not in out.getvalue()


def test_start_for_an_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMGE_PROGRESS", "1")
    out = io.StringIO()  # not a terminal, but XMGE_PROGRESS=1 forces lines
    bar = start("diff fuzz", total=2, stream=out, every_s=0)
    bar.advance("graph 0: 0 bad")
    bar.advance("graph 1: 0 bad")
    bar.finish()
    assert out.getvalue().splitlines()[1] == "[xmge diff fuzz] 2/2 (100%) graph 1: 0 bad"
    monkeypatch.setenv("XMGE_PROGRESS", "0")
    quiet = io.StringIO()
    bar = start("diff fuzz", total=1, stream=quiet)
    bar.advance()
    bar.finish()
    assert quiet.getvalue() == ""


def test_fuzz_mge_workers_report_progress(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import backends.mge.reader  # noqa: F401 - imported before the fork, as the script's workers do
    from bench.fuzz_common import run_isolated
    from bench.fuzz_mge import DEFAULT_SEEDS, campaign

    monkeypatch.setenv("XMGE_PROGRESS", "1")
    cases = campaign(list(DEFAULT_SEEDS), 0, 5.0, "wall", 0, 600.0)
    report = run_isolated(cases, 0, 3, 1, 3072, hang_after_s=15.0)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[xmge fuzz]")]
    assert sum(report.counts.values()) == 3
    assert lines[-2] == f"[xmge fuzz] 3/3 (100%) {report.line()}" and "done in" in lines[-1]


def _tiny_verified_compile(flag: bool | None) -> None:
    import numpy as np

    import compiler as xm
    import compiler.functional as F

    xm.compile(lambda t: F.relu(t) * 2.0, "ref", [np.ones((1, 4), np.float32)], verify=True, progress=flag)


def test_compile_verify_reports_each_pass(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("XMGE_PROGRESS", raising=False)
    _tiny_verified_compile(True)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[xmge verify]")]
    assert len(lines) >= 2 and "done in" in lines[-1]
    assert lines[-2].startswith("[xmge verify] ") and "(100%)" in lines[-2]
    _tiny_verified_compile(False)
    assert capsys.readouterr().err == ""
