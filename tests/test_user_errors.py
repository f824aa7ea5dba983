"""Small API and CLI mistakes get one clear line naming the problem, never a traceback from deep
inside (issue 16, item 7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from compiler import jit
from compiler.driver.cli import main as xmge
from compiler.driver.targets import TargetError
from tests.conftest import data_path


@pytest.mark.parametrize("target", [123, 0, 1.5, ["x86-avx2"]])
def test_compile_with_a_non_string_target_names_it(target: object) -> None:
    with pytest.raises(TargetError, match=r"a target is a string .* got " + type(target).__name__):
        xm.compile(lambda x: F.relu(x), target=target, example_inputs=[np.ones((1, 2), np.float32)])


def test_unknown_dump_format_is_a_value_error_quoted_once(tmp_path: Path) -> None:
    fn = jit.trace(lambda x: F.relu(x), capture_as_const=True)
    fn(xm.tensor(np.ones((1, 2), np.float32)))
    with pytest.raises(ValueError) as info:
        fn.dump(str(tmp_path / "m.mge"), dump_format="FBS_V9")
    assert str(info.value) == "unknown dump_format 'FBS_V9'; expected one of FBS_V2, FBS"
    assert not (tmp_path / "m.mge").exists()


def test_run_with_an_empty_input_file_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    assert xmge(["run", data_path("convnet", "plain.mge"), "--input", f"data={empty}"]) == 1
    err = capsys.readouterr().err
    assert str(empty) in err and len(err.strip().splitlines()) == 1


def test_opt_on_binary_input_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "model.mlir"
    bad.write_bytes(b"\xff\xfe not text")
    proc = subprocess.run(
        [sys.executable, "-m", "compiler.driver.opt", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"xmge-opt: error: {bad}: not UTF-8 text (byte 0xff at offset 0)")
    assert "Traceback" not in proc.stderr
