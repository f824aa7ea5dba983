"""Kernel choice by measurement (compiler/driver/tuner.py): compile(tune=True), `xmge tune`, Lite's algo
policy and the tuning file a package ships. Small models; every build is cached after a first run."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import compiler as xm
import compiler.functional as F
from compiler.driver import tuner
from compiler.driver.compile import compile as xcompile
from compiler.driver.compile import to_module
from compiler.driver.targets import host_target, runs_here
from compiler.tuning import TuningFile, TuningKey, TuningWarning, cpu_model, key_for, load_for
from semantics import run_module

GOLDEN = Path(__file__).resolve().parents[1] / ".." / "shared" / "golden" / "convnet" / "plain.mge"
pytestmark = pytest.mark.skipif(
    host_target().arch != "x86" or not runs_here(host_target()), reason="tuning measures on an x86 host"
)


def _plain() -> Any:
    """The host's ISA in plain NCHW: one layout, so a tune times only kernel families."""
    return tuner.with_layout(host_target(), "nchw")


def _model() -> ModuleOp:
    rng = np.random.default_rng(0)
    w1 = xm.tensor(rng.standard_normal((8, 4, 3, 3)).astype(np.float32))
    w2 = xm.tensor(rng.standard_normal((8, 8, 1, 1)).astype(np.float32))
    m = xm.tensor(rng.standard_normal((512, 16)).astype(np.float32))

    def f(x: xm.Tensor) -> xm.Tensor:
        y = F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2)
        return F.matmul(F.flatten(y, 1), m)

    traced = xm.jit.trace(f, symbolic=True, capture_as_const=True)
    traced(xm.tensor(np.zeros((1, 4, 8, 8), np.float32)))
    return to_module(traced)


X = np.random.default_rng(3).standard_normal((1, 4, 8, 8)).astype(np.float32)


def _close_to_reference(compiled: Any, module: ModuleOp) -> None:
    want = run_module(module, [X])[0]
    np.testing.assert_allclose(compiled(X), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def _no_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: Any, **k: Any) -> None:
        raise AssertionError("tuning timed something")

    monkeypatch.setattr(tuner._Tuner, "_build_rounds", refuse)
    monkeypatch.setattr(tuner, "whole_model_ms", refuse)


def test_tune_picks_a_family_writes_the_file_and_a_second_compile_times_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    module = _model()
    first = xcompile(module, _plain(), tune=True, tuning_file=path, progress=False)
    report = first.tune_report
    results = report.signatures[str(_plain())]
    assert report.timed and report.builds >= 2 and len(results) >= 2  # the convolutions, the matmul
    saved = load_for(path, key_for(_plain(), 1))
    assert saved is not None
    for r in results:
        assert r.chosen in r.candidates and saved.choices[r.signature] == r.chosen
        assert set(r.ms) <= set(r.candidates) and r.candidates[0] in r.ms
    _close_to_reference(first, module)
    _no_timing(monkeypatch)
    second = xcompile(module, _plain(), tune=True, tuning_file=path, progress=False)
    assert not second.tune_report.timed
    assert all(r.reused for r in second.tune_report.signatures[str(_plain())])
    assert second.ir("kernel-select") == first.ir("kernel-select")
    _, third = tuner.tune(module, _plain(), tuning_file=saved)  # a TuningFile in memory works too
    assert not third.timed


def test_tuning_needs_a_kernel_target_that_runs_here() -> None:
    with pytest.raises(tuner.TuneError, match="generates no kernels"):
        tuner.tune(_model(), "ref")
    with pytest.raises(tuner.TuneError, match="does not run on this machine"):
        tuner.tune(_model(), "arm-nchw44")


def test_measurement_overrides_the_priority_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the candidates listed slowest first (the generic runtime-weight convolution ahead of
    the packed GEMM), the tuner's measurement must still pick the faster family."""
    real = tuner.candidates

    def reversed_order(op: Any, target: Any) -> list[str]:
        return list(reversed(real(op, target)))

    monkeypatch.setattr(tuner, "candidates", reversed_order)
    module = _model()
    tf, report = tuner.tune(module, _plain(), progress=False)
    convs = [r for r in report.signatures[str(_plain())] if "conv2d_runtime_weight" in r.candidates]
    assert convs, "the plain target offers two convolution families"
    for r in convs:
        assert r.candidates[0] == "conv2d_runtime_weight" and r.chosen != "conv2d_runtime_weight", r
        assert tf.choices[r.signature] == r.chosen
    compiled = xcompile(module, _plain(), tuning_file=tf)
    assert '"conv2d_runtime_weight"' not in compiled.ir("kernel-select")
    _close_to_reference(compiled, module)


def test_a_candidate_that_differs_from_the_reference_cannot_win(monkeypatch: pytest.MonkeyPatch) -> None:
    real_check = tuner._Tuner.check
    calls: list[int] = []

    class Bad:
        ok = False
        ratio = 10.0

        def __str__(self) -> str:
            return "output[0]: error 1 > allowed 0.1"

    def check(self: Any, got: Any, target: Any) -> Any:
        calls.append(1)
        return real_check(self, got, target) if len(calls) == 1 else Bad()  # round 0 agrees

    monkeypatch.setattr(tuner._Tuner, "check", check)
    _, report = tuner.tune(_model(), _plain(), progress=False)
    results = report.signatures[str(_plain())]
    for r in results:
        assert r.chosen == r.candidates[0]
        assert all("differs from the reference" in why for why in r.rejected.values()) and r.rejected


def test_budget_stops_timing_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    tf, report = tuner.tune(_model(), _plain(), budget_s=1e-3, tuning_file=path, progress=False)
    assert report.budget_hit and not report.timed and not path.exists()
    assert report.target == _plain()
    with pytest.raises(tuner.TuneError, match="budget must be > 0"):
        tuner.tune(_model(), _plain(), budget_s=0)


def test_a_file_from_another_cpu_is_ignored_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    module = _model()
    TuningFile(TuningKey("Some Other CPU", tuple(_plain().isas), 1), {"x": "y"}).save(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tf, report = tuner.tune(module, _plain(), budget_s=1e-3, tuning_file=path, progress=False)
    assert any("Some Other CPU" in str(w.message) and "ignored" in str(w.message) for w in caught)
    assert "x" not in tf.choices and tf.key.cpu == cpu_model()


def test_host_target_chooses_the_layout_and_compile_applies_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = host_target()
    if len(tuner.layout_alternatives(host)) < 2:
        pytest.skip("the host target has no second layout")
    path = tmp_path / "t.json"
    module = _model()
    tuned = xcompile(module, None, tune=True, tuning_file=path, progress=False)
    report = tuned.tune_report
    assert set(report.layouts_ms) == {str(t) for t in tuner.layout_alternatives(host)}
    assert report.tuned_ms is not None and report.untuned_ms is not None
    assert report.tuned_ms <= report.untuned_ms  # never slower than untuned, as measured
    saved = load_for(path, key_for(host, 1))
    assert saved is not None and saved.layout(tuner.layout_entry(module)) == tuned.target.layout
    _no_timing(monkeypatch)
    again = xcompile(module, None, tuning_file=path)
    assert again.target == tuned.target
    _close_to_reference(again, module)


def _rehash(package: Path, rel: str) -> None:
    manifest = json.loads((package / "model.json").read_text())
    manifest["files"][rel] = hashlib.sha256((package / rel).read_bytes()).hexdigest()
    (package / "model.json").write_text(json.dumps(manifest))


def test_a_package_ships_its_tuning_and_another_cpus_is_ignored(tmp_path: Path) -> None:
    module = _model()
    path = tmp_path / "t.json"
    compiled = xcompile(module, _plain(), tune=True, tuning_file=path, progress=False)
    package = tmp_path / "pkg"
    compiled.save(package)
    shipped = json.loads((package / "tuning.json").read_text())
    assert json.loads((package / "model.json").read_text())["tuning"] == "tuning.json"
    assert shipped["choices"] and set(shipped["choices"]) <= set(load_for(path, key_for(_plain(), 1)).choices)
    loaded = xm.load_compiled(package)
    assert loaded.tuning is not None and loaded.tuning.choices == shipped["choices"]
    np.testing.assert_array_equal(loaded(X), compiled(X))
    # the package folder works as a tuning file for another compile
    again = xcompile(module, _plain(), tuning_file=package)
    assert again.ir("kernel-select") == compiled.ir("kernel-select")
    shipped["cpu"] = "Some Other CPU"
    (package / "tuning.json").write_text(json.dumps(shipped))
    _rehash(package, "tuning.json")
    with pytest.warns(TuningWarning, match="Some Other CPU.*ignored"):
        foreign = xm.load_compiled(package)
    assert foreign.tuning is None
    np.testing.assert_array_equal(foreign(X), compiled(X))  # it still runs


def test_cli_tune(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from compiler.driver.cli import main

    out = tmp_path / "t.json"
    target = str(_plain())
    assert main(["tune", str(GOLDEN), "--target", target, "-o", str(out), "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert f"tuned for {target}" in text and str(out) in text
    saved = load_for(out, key_for(_plain(), 1))
    assert saved is not None and saved.choices
    _no_timing(monkeypatch)
    assert main(["tune", str(GOLDEN), "--target", target, "-o", str(out), "-q"]) == 0
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("XMGE_PROGRESS", "1")  # progress lines as on a terminal
    assert main(["tune", str(GOLDEN), "--target", target, "-o", str(out)]) == 0
    streams = capsys.readouterr()
    assert "[xmge tune] frontend" in streams.err and "all from the file" in streams.out
    monkeypatch.delenv("XMGE_PROGRESS")
    pkg = tmp_path / "pkg"
    assert main(["compile", str(GOLDEN), "-t", target, "--tuning-file", str(out), "-o", str(pkg), "-q"]) == 0
    assert (pkg / "tuning.json").exists()
    assert main(["tune", str(GOLDEN), "--budget-s", "0"]) == 1
    assert "--budget-s must be > 0" in capsys.readouterr().err
    assert main(["tune", str(GOLDEN), "--target", "x86-avx2-nchw99"]) == 1
    assert "unknown feature 'nchw99'" in capsys.readouterr().err


def test_lite_algo_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from compiler.lite import LiteAlgoSelectStrategy as S
    from compiler.lite import LiteGlobal, LiteNetwork, NetworkError

    monkeypatch.setattr(LiteGlobal, "persistent_cache", None)
    LiteGlobal.set_persistent_cache(str(tmp_path / "cache.json"))
    target = str(_plain())
    net = LiteNetwork(target=target)
    net.set_network_algo_policy(S.LITE_ALGO_PROFILE | S.LITE_ALGO_OPTIMIZED | S.LITE_ALGO_REPRODUCIBLE)
    net.load(str(GOLDEN))
    assert net.tune_report is not None and net.tune_report.timed
    assert (tmp_path / "cache.json").exists()
    x = np.random.default_rng(1).standard_normal((1, 1, 28, 28)).astype(np.float32)
    net.get_io_tensor("data").set_data_by_copy(x)
    net.forward()
    got = net.get_io_tensor(net.get_output_name(0)).to_numpy()
    ref = LiteNetwork()
    ref.load(str(GOLDEN))
    ref.get_io_tensor("data").set_data_by_copy(x)
    ref.forward()
    want = ref.get_io_tensor(ref.get_output_name(0)).to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    net.set_network_algo_policy(S.LITE_ALGO_HEURISTIC)  # after load: compiled again, untuned
    assert net.tune_report is None
    _no_timing(monkeypatch)
    again = LiteNetwork(target=target)
    again.set_network_algo_policy(S.LITE_ALGO_PROFILE)
    again.load(str(GOLDEN))  # the persistent cache holds every choice: nothing is timed
    assert again.tune_report is not None and not again.tune_report.timed
    heuristic = LiteNetwork(target=target)
    heuristic.load(str(GOLDEN))
    assert heuristic.tune_report is None
    heuristic.set_network_algo_policy(S.LITE_ALGO_PROFILE)  # after load: tuned from the cache
    assert heuristic.tune_report is not None and not heuristic.tune_report.timed
    bad = LiteNetwork(target=target)
    for policy, words in (
        (0, "not a combination"),
        (16, "not a combination"),
        (S.LITE_ALGO_HEURISTIC | S.LITE_ALGO_PROFILE, "exclude each other"),
    ):
        with pytest.raises(NetworkError, match=words):
            bad.set_network_algo_policy(policy)
    with pytest.raises(NetworkError, match="shared_batch_size"):
        bad.set_network_algo_policy(S.LITE_ALGO_PROFILE, shared_batch_size=4)
    with pytest.raises(NetworkError, match="binary_equal_between_batch"):
        bad.set_network_algo_policy(S.LITE_ALGO_PROFILE, binary_equal_between_batch=True)
    assert os.path.exists(str(tmp_path / "cache.json"))
