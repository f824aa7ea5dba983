"""Pictures of models: ``xmge inspect --graph`` draws every operator of a ResNet-18 (parsed back
from the SVG), ``xmge bench --profile --chrome-trace`` writes a trace Perfetto opens (parsed back:
one complete event per profiled kernel)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import numpy as np
import pytest

from backends.mge.reader import read_mge
from compiler.driver.cli import main
from compiler.driver.targets import host_target, runs_here
from tests.conftest import data_path

SVG = "{http://www.w3.org/2000/svg}"
CONVNET = data_path("convnet", "plain.mge")


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    import compiler as xm
    from compiler import jit
    from compiler.hub.resnet import resnet18

    net = resnet18()
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: Any) -> Any:
        return net(x)

    f(xm.tensor(np.zeros((1, 3, 64, 64), np.float32)))
    path = tmp_path_factory.mktemp("pictures") / "resnet18.mge"
    f.dump(str(path), arg_names=["data"])
    return str(path)


def test_graph_svg_draws_every_operator_of_a_resnet18(resnet18_file: str, tmp_path: Any) -> None:
    out = tmp_path / "g.svg"
    assert main(["inspect", resnet18_file, "--graph", str(out)]) == 0
    root = ET.parse(out).getroot()
    titles = [g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g") if g.get("class") == "op"]
    module = read_mge(open(resnet18_file, "rb").read())
    want = [op.name for op in module.walk() if op.name.startswith("mgb.") and op.name != "mgb.const"]
    assert [t.split()[0] for t in titles] == want
    kinds = [g.get("class") for g in root.iter(f"{SVG}g")]
    assert kinds.count("input") == 1 and kinds.count("output") == 1
    assert len(list(root.iter(f"{SVG}line"))) >= len(want) - 1  # every op but the first reads another
    assert any("mgb.convolution" in t for t in titles)


def test_graph_needs_a_readable_file(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.mge"
    bad.write_bytes(b"not a model")
    assert main(["inspect", str(bad), "--graph", str(tmp_path / "g.svg")]) == 1
    assert not (tmp_path / "g.svg").exists()


@pytest.mark.skipif(not runs_here(host_target()), reason="this CPU runs no generated x86 code")
def test_chrome_trace_has_every_profiled_kernel(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.json"
    assert main(["bench", CONVNET, "--iters", "3", "--profile", "--chrome-trace", str(out)]) == 0
    printed = capsys.readouterr().out
    events = json.loads(out.read_text())["traceEvents"]
    assert events and all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    assert all(events[k]["ts"] <= events[k + 1]["ts"] for k in range(len(events) - 1))
    assert events[0]["name"] in printed  # the slowest kernel is printed and traced


def test_chrome_trace_needs_profile(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", CONVNET, "--iters", "1", "--chrome-trace", str(tmp_path / "t.json")]) == 1
    assert "--chrome-trace needs --profile" in capsys.readouterr().err


def _netron_kind(data: bytes) -> str:
    """How Netron (source/megengine.js, ModelFactory.match) classifies a file: an optional 12-byte
    ``mgbtest0`` header, a uint32 size prefix equal to the rest of the file and the flatbuffer
    identifier ``mgv2`` make it a MegEngine FBS v2 model it opens; the v1 tags it names but refuses."""
    pos = 12 if data[:8] == b"mgbtest0" else 0
    if len(data) > pos + 12:
        size = int.from_bytes(data[pos : pos + 4], "little")
        if (pos > 0 or size == len(data) - pos - 4) and data[pos + 8 : pos + 12] == b"mgv2":
            return "megengine.mge"
    return next(
        (f"megengine.{t}" for t in ("mgb0001", "mgb0000a", "MGBS", "MGBC") if data.startswith(t.encode())), ""
    )


@pytest.mark.parametrize(
    "options", [{}, {"enable_nchw88": True}, {"enable_fuse_conv_bias_nonlinearity": True}]
)
def test_netron_opens_xmge_dumps_as_it_opens_megengines(tmp_path: Any, options: dict[str, bool]) -> None:
    import compiler as xm
    from compiler import jit
    from compiler.hub.convnet import ConvNet

    assert _netron_kind(open(CONVNET, "rb").read()) == "megengine.mge"  # written by MegEngine 1.13
    net = ConvNet()
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: Any) -> Any:
        return net(x)

    f(xm.tensor(np.zeros((1, 1, 28, 28), np.float32)))
    path = tmp_path / "convnet.mge"
    f.dump(str(path), arg_names=["data"], **options)
    assert _netron_kind(path.read_bytes()) == "megengine.mge"


def test_opt_graph_draws_every_kernel_call_of_a_resnet18(
    resnet18_file: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from compiler.driver.opt import main as opt_main

    out = tmp_path / "kernels.svg"
    pipeline = "kernel-select{target=x86-avx2},kernel-fuse-epilogue{target=x86-avx2}"
    opt_main([resnet18_file, "-p", pipeline, "--graph", str(out)])
    ir = capsys.readouterr().out
    calls = [
        line.split("kernel.call @", 1)[1].split("(", 1)[0]
        for line in ir.splitlines()
        if "kernel.call @" in line
    ]
    root = ET.parse(out).getroot()
    ops = [
        g
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "op" and "kernel.call" in g.find(f"{SVG}title").text
    ]
    assert [g.find(f"{SVG}title").text for g in ops] == [f"kernel.call @{c}" for c in calls]
    shown = [[t.text for t in g.iter(f"{SVG}text")] for g in ops]
    # the box: the chosen kernel with its fused epilogue, then the model's operator name and type
    assert shown[0][0] == "conv2d_gemm/avx2 +relu" and shown[0][1].startswith(
        "conv1.Convolution : 1x64x32x32"
    )
    assert sum("+res+relu" in s[0] for s in shown) == 8  # every BasicBlock's second conv takes its shortcut
    assert any(s[1].startswith("fc.MatrixMul : ") for s in shown)


@pytest.mark.skipif(not runs_here(host_target()), reason="this CPU runs no generated x86 code")
def test_opt_graph_draws_a_saved_packages_kernel_choices(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from compiler.driver.opt import main as opt_main

    assert main(["compile", CONVNET, "-o", str(tmp_path / "pkg"), "-q"]) == 0
    out = tmp_path / "pkg.svg"
    opt_main([str(tmp_path / "pkg" / "kernel.mlir"), "--graph", str(out)])  # the kernel dialect reads back
    assert "kernel.call @" in capsys.readouterr().out
    root = ET.parse(out).getroot()
    boxes = [[t.text for t in g.iter(f"{SVG}text")] for g in root.iter(f"{SVG}g") if g.get("class") == "op"]
    calls = [b for b in boxes if "/" in b[0]]
    assert len(calls) >= 6 and all(
        b[0].split("/")[1].split()[0] in ("avx2", "avx512", "generic") for b in calls
    )
    assert any(b[0].startswith("conv2d") and b[1].startswith("conv1.") for b in calls)
