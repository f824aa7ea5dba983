"""``make demo``: it installs the package and the bench extra only (no torch, no ARM toolchain), and
its output fits one 80x24 terminal screen, says what each figure means and holds no IR dump."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUP_LINES = 2  # make's two "setting up" / "installing" lines on the first run


def test_make_demo_installs_only_what_the_demo_needs() -> None:
    makefile = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo:(.*)$", makefile, re.M)
    assert demo is not None and demo.group(1).split() == ["$(BENCH_STAMP)"]
    bench_rule = makefile.split("$(BENCH_STAMP): ", 1)[1].split("\n\n", 1)[0]
    assert '".[bench]"' in bench_rule and "[test]" not in bench_rule and "toolchains" not in bench_rule
    # (a regex, not tomllib: the package supports Python 3.10)
    bench = re.search(r"^bench = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert bench is not None and "onnxruntime" in bench.group(1)
    assert not re.search(r"torch|ray|pytest", bench.group(1))


@pytest.mark.slow
def test_demo_output_fits_one_screen_and_explains_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    from compiler.driver.demo import main

    main(["--size", "64"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    rows = SETUP_LINES + sum(max(1, math.ceil(len(line) / 80)) for line in lines)
    assert rows <= 24, f"{rows} terminal rows at 80 columns"
    assert "func.func" not in out and "mgb." not in out  # the IR only with --show-ir
    for model in ("convnet", "resnet18"):
        block = out.split(f"\n{model} (", 1)[1]
        assert re.match(r"[^\n]*compiled in [\d.]+ s \((gcc build from the cache|built with gcc)\)", block)
        for figure in ("accuracy  max |xmge - reference|", "latency   xmge", "memory    "):
            assert figure in block
    assert "more than the .mge holds" in out  # why the weights the kernels read exceed the file
