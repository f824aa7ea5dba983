"""The in-suite slice of bench/fuzz_mge.py: mutated golden files (FBS v2 and v1, int8, blocked
layouts, float16, append, multi-IO) load and run on the reference, or fail with the documented
error types; never another exception, a MemoryError or a case over 5 s."""

from __future__ import annotations

from bench.fuzz_mge import DEFAULT_SEEDS, run_cases


def test_fuzz_slice_has_no_findings() -> None:
    report = run_cases(DEFAULT_SEEDS, 360, rng_seed=3, timeout_s=5.0)
    assert report.bad() == 0, report.summary()
    assert report.counts["ok"] > 0 and report.counts["rejected"] > 0, report.summary()


def test_fuzz_slice_leaves_the_tensor_cap_as_it_was() -> None:
    import os

    before = os.environ.get("XMGE_MAX_TENSOR_BYTES")
    run_cases(DEFAULT_SEEDS, 4, rng_seed=5, timeout_s=5.0)
    assert os.environ.get("XMGE_MAX_TENSOR_BYTES") == before
