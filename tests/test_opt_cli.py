"""xmge-opt as the README shows it: a MegEngine file through passes back to a .mge
(``-t mge -o OUT.mge``); --help leads with xmge's passes and outputs; a closed pipe is quiet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backends.mge.container import parse_file
from compiler.driver.opt import main as xmge_opt
from compiler.lite import Network
from tests.conftest import data_path

PLAIN = data_path("convnet", "noopt.mge")


def test_mge_through_passes_back_to_mge(tmp_path: Path) -> None:
    out = tmp_path / "opt.mge"
    pipeline = "fold-batch-norm,fuse-conv-bias-nonlinearity,mgb-dce"
    xmge_opt([PLAIN, "-p", pipeline, "-t", "mge", "-o", str(out)])
    inputs = dict(np.load(data_path("convnet", "inputs.npz")))
    want, got = Network(PLAIN)(**inputs), Network(str(out))(**inputs)
    assert list(want) == list(got)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    kinds = {o.kind for g in parse_file(out.read_bytes()) for o in g.oprs}
    assert "ConvBias" in kinds and "BatchNorm" not in kinds  # the passes ran before writing


def test_mge_output_needs_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        xmge_opt([PLAIN, "-t", "mge"])
    assert "-o FILE.mge" in capsys.readouterr().err


def test_help_lists_xmge_passes_and_outputs_first() -> None:
    text = subprocess.run(
        [sys.executable, "-m", "compiler.driver.opt", "--help"], capture_output=True, text=True, check=True
    ).stdout
    flat = " ".join(text.split())
    passes_help = flat[flat.index("-p PASSES, --passes PASSES") :]
    assert passes_help.index("fold-batch-norm") < passes_help.index("--list-passes")
    assert "riscv" not in passes_help.split("xDSL's passes")[0]
    target_help = flat[flat.index("-t TARGET, --target TARGET") :]
    assert target_help.index("mge") < target_help.index("riscv")


BROKEN_STDOUT = """
import io, sys
class ClosedPipe(io.StringIO):  # what a reader that went away (`| head -1`) looks like to the writer
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")
    def fileno(self):
        return 1
sys.stdout = ClosedPipe()
from compiler.driver.{module} import main
main({argv!r})
"""


@pytest.mark.parametrize(
    ("module", "argv"), [("opt", ["--list-passes"]), ("cli", ["inspect", PLAIN])], ids=["xmge-opt", "xmge"]
)
def test_closed_pipe_is_quiet(module: str, argv: list[str]) -> None:
    # this sandbox's pipes never report EPIPE to the writer, so the closed pipe is simulated
    script = BROKEN_STDOUT.format(module=module, argv=argv)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.stderr == ""
    assert proc.returncode == 1
