"""``xmge-opt --list-kernels``: one row per registered kernel unit, its priority, ISA and defining file
read off the registries (the priority order is never kept by hand)."""

from __future__ import annotations

import os

import pytest

from backends.kernel_list import kernel_rows, registries
from compiler.driver.opt import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_unit_is_listed_once_with_its_priority_and_file() -> None:
    rows = kernel_rows()
    units = {(b, u.family, u.isa): u for b, reg in registries().items() for u in reg.units()}
    assert len(units) > 100
    assert sorted((r.backend, r.family, r.isa) for r in rows) == sorted(units)
    for r in rows:
        u = units[(r.backend, r.family, r.isa)]
        assert r.priority == u.priority and r.ops == tuple(op.name for op in u.ops)
        assert r.file.endswith(".py") and os.path.isfile(os.path.join(ROOT, r.file)), r.file
    for backend in registries():
        prios = [r.priority for r in rows if r.backend == backend]
        assert prios == sorted(prios, reverse=True)


def test_the_cli_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--list-kernels"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["backend", "family", "isa", "priority", "file", "ops"]
    assert len(lines) == len(kernel_rows()) + 1
    stem = next(ln.split() for ln in lines if " conv2d_nchw88_stem3x3 " in ln)
    assert stem[:4] == ["c", "conv2d_nchw88_stem3x3", "avx512", "285"]
    assert stem[4] == "backends/c/templates/x86/x86_f32_dw_stem.py"
