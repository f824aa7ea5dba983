"""FileCheck tests of the kernel pipeline's passes (tests/filecheck/kernel): kernel-select,
kernel-fuse-epilogue, kernel-pack-weights, kernel-plan-memory and kernel-widen-f16, each run alone
through ``xmge-opt -p`` on small tensor-dialect inputs."""

from __future__ import annotations

import pytest

from passes.lowering import LOWERING_PASSES
from tests.filecheck.runner import RunLine, execute, filecheck_files, run_lines

FILES = filecheck_files("kernel")
RUNS = [r for f in FILES for r in run_lines(f)]


@pytest.mark.parametrize("run", RUNS, ids=[r.id for r in RUNS])
def test_filecheck(run: RunLine) -> None:
    ok, transcript = execute(run)
    assert ok, transcript


def test_every_kernel_pass_has_a_filecheck_test() -> None:
    text = "\n".join(r.command for r in RUNS)
    missing = [p.name for p in LOWERING_PASSES if f"{p.name}{{" not in text]
    assert missing == []
