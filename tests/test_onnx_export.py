"""backends.onnx: the exported ONNX model (run by ONNX Runtime) and the PyTorch runner compute what
the reference interpreter computes on the same optimised graph; unsupported ops are named."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from backends.onnx.export import ONNX_EXPORTERS, to_onnx
from compiler.driver.compile import inference_clean
from dialects import tensor as T
from semantics.interpreter import run_module
from tests.mge_helpers import inputs, traced


@pytest.fixture(scope="module", params=["convnet", "mini_resnet"])
def graph(request: pytest.FixtureRequest) -> tuple[ModuleOp, np.ndarray, np.ndarray]:
    module, _ = traced(request.param)._last
    plain = inference_clean(module)
    x = inputs(request.param)["data"]
    (want,) = run_module(plain, [x])
    return plain, x, want


def test_onnx_runtime_matches_reference(graph: tuple[ModuleOp, np.ndarray, np.ndarray]) -> None:
    ort = pytest.importorskip("onnxruntime")
    plain, x, want = graph
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        to_onnx(plain, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))


def test_torch_runner_matches_reference(graph: tuple[ModuleOp, np.ndarray, np.ndarray]) -> None:
    torch = pytest.importorskip("torch")
    from backends.onnx.torch_runner import TORCH_KERNELS, torch_runner

    plain, x, want = graph
    got = torch_runner(plain)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))
    assert set(TORCH_KERNELS) == set(ONNX_EXPORTERS)  # the two runtimes cover the same ops


def test_unsupported_op_is_named(graph: tuple[ModuleOp, np.ndarray, np.ndarray]) -> None:
    pytest.importorskip("onnx")
    plain, _, _ = graph
    broken = plain.clone()
    fn = next(iter(broken.ops))
    first = next(op for op in fn.walk() if isinstance(op, T.ConvBiasOp | T.ConvolutionOp))
    soft = T.SoftmaxOp.make([first.results[0]], None, axis=1)
    fn.body.block.insert_op_after(soft, first)  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as d, pytest.raises(NotImplementedError, match="mgb.softmax"):
        to_onnx(broken, os.path.join(d, "m.onnx"))
