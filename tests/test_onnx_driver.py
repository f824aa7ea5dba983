"""ONNX models through the driver: ``compile("model.onnx")``, ``xmge compile model.onnx`` and
``xmge convert model.onnx -o model.mge`` (mgeconvert's job) with optimize_for_inference options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from compiler.driver.cli import main as xmge  # noqa: E402
from compiler.driver.compile import compile  # noqa: E402
from compiler.driver.targets import host_target  # noqa: E402
from compiler.lite import Network  # noqa: E402
from tests.test_onnx_import import export  # noqa: E402


@pytest.fixture(scope="module")
def resnet_onnx(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray]:
    data, x = export("resnet", 17)
    path = tmp_path_factory.mktemp("onnx") / "resnet.onnx"
    path.write_bytes(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {session.get_inputs()[0].name: x})
    return path, x, want


@pytest.mark.parametrize("options", [[], ["fuse-conv-bias-nonlinearity"], ["nchw88"]])
def test_convert_writes_a_mge_that_runs_like_onnxruntime(
    resnet_onnx: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, options: list[str]
) -> None:
    path, x, want = resnet_onnx
    out = tmp_path / "resnet.mge"
    args = ["convert", str(path), "-o", str(out)]
    for option in options:
        args += ["--enable", option]
    assert xmge(args) == 0
    net = Network(str(out))
    (got,) = net(**{net.get_all_input_name()[0]: x}).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if options:
        assert net.metadata["optimize_options"] != 0  # the options are recorded as trace.dump does


def test_compile_reads_onnx_paths(resnet_onnx: tuple[Path, np.ndarray, np.ndarray]) -> None:
    path, x, want = resnet_onnx
    target = host_target()
    compiled = compile(str(path), target)
    np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-5)


def test_convert_refuses_an_unknown_option_in_one_line(
    resnet_onnx: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = resnet_onnx
    assert xmge(["convert", str(path), "-o", str(tmp_path / "m.mge"), "--enable", "nchw99"]) == 1
    err = capsys.readouterr().err
    assert "nchw99" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.mge").exists()


def _reshape_model(tmp_path: Path) -> Path:
    """Reshape whose target shape is a graph input: importable only with that input's value."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "reshape_by_input",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    path = tmp_path / "reshape.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_input_value_flag_binds_a_shape_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from compiler.driver.package import load_compiled

    path = _reshape_model(tmp_path)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert xmge(["convert", str(path), "-o", str(tmp_path / "m.mge"), "--input-value", "shape=2,6"]) == 0
    net = Network(str(tmp_path / "m.mge"))
    assert net.get_all_input_name() == ["x"]
    (got,) = net(x=x).values()
    np.testing.assert_array_equal(got, x.reshape(2, 6))

    np.save(tmp_path / "shape.npy", np.array([6, -1], np.int64))
    value = f"shape={tmp_path / 'shape.npy'}"
    assert xmge(["compile", str(path), "-o", str(tmp_path / "pkg"), "--input-value", value]) == 0
    got = load_compiled(tmp_path / "pkg")(x)
    np.testing.assert_array_equal(got, x.reshape(6, 2))
    capsys.readouterr()

    # without the value, or with a malformed one: a one-line error naming the input / the flag
    assert xmge(["convert", str(path), "-o", str(tmp_path / "n.mge")]) == 1
    err = capsys.readouterr().err
    assert "'shape'" in err and len(err.strip().splitlines()) == 1
    assert xmge(["convert", str(path), "-o", str(tmp_path / "n.mge"), "--input-value", "shape=2,x"]) == 1
    err = capsys.readouterr().err
    assert "--input-value" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "n.mge").exists()
