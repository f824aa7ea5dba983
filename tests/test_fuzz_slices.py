"""In-suite slices of bench/fuzz_onnx.py and bench/fuzz_pickle.py (issue 28): a few dozen mutated
models and pickles, in-process, end in ok or a documented error; the long campaigns and their
figures are in docs/ROBUSTNESS.md."""

from __future__ import annotations

import os
from collections import Counter

import pytest


@pytest.fixture
def small_tensor_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMGE_MAX_TENSOR_BYTES", str(16 << 20))


def test_onnx_fuzz_slice(small_tensor_cap: None) -> None:
    pytest.importorskip("onnx")
    from bench.fuzz_onnx import _helper_seeds, campaign

    c = campaign(_helper_seeds(), rng_seed=21, timeout_s=5.0, clock="cpu")
    c.prepare()
    outcomes = Counter(c.run(i) for i in range(40))
    bad = {o: n for o, n in outcomes.items() if o[0] not in ("ok", "rejected")}
    assert not bad, bad
    assert any(o[0] == "ok" for o in outcomes) and any(o[0] == "rejected" for o in outcomes)


def test_pickle_fuzz_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.fuzz_pickle import campaign

    monkeypatch.setenv("XMGE_MAX_TENSOR_BYTES", str(64 << 20))
    c = campaign(rng_seed=23, timeout_s=5.0, clock="cpu")
    c.prepare()
    outcomes = Counter(c.run(i)[0] for i in range(40))
    assert set(outcomes) <= {"ok", "rejected"}, outcomes
    assert os.environ["XMGE_MAX_TENSOR_BYTES"] == str(64 << 20)
