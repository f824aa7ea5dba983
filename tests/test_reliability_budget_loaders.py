"""Every loader runs under the same budget (issue 28): the whole-load total for .mge and ONNX, the
nesting depth for pickles, .tm replay and ONNX subgraphs, the folding time for .mge; each refusal
names the limit's variable and the place."""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.module as M
from backends.mge.fbs import MgeFormatError
from backends.mge.reader import read_mge
from compiler import traced_module as tm
from dialects import limits
from tests.conftest import data_path

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from backends.onnx.reader import OnnxImportError, read_onnx  # noqa: E402


def _golden(case: str, variant: str) -> bytes:
    with open(data_path(case, f"{variant}.mge"), "rb") as f:
        return f.read()


def test_mge_total_of_all_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _golden("convnet", "plain")
    read_mge(data)
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, "20000")
    with pytest.raises(MgeFormatError, match=r"operator #\d+ .*XMGE_MAX_TOTAL_BYTES") as info:
        read_mge(data)
    assert "\n" not in str(info.value)


def test_mge_folding_time(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _golden("mini_resnet", "plain")
    monkeypatch.setenv(limits.MAX_FOLD_SECONDS_ENV, "1e-9")
    with pytest.raises(MgeFormatError, match="XMGE_MAX_FOLD_SECONDS"):
        read_mge(data)
    monkeypatch.setenv(limits.MAX_FOLD_SECONDS_ENV, "nope")
    with pytest.raises(MgeFormatError, match="XMGE_MAX_FOLD_SECONDS"):
        read_mge(data)


def _onnx(nodes: list[Any], inputs: list[Any], outputs: list[str], inits: list[Any]) -> bytes:
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        initializer=inits,
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString()


def test_onnx_total_of_all_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    inits = [numpy_helper.from_array(np.ones((16, 16), np.float32), f"w{i}") for i in range(4)]
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"y{i - 1}", f"w{i}"], [f"y{i}"]) for i in range(4)]
    data = _onnx(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])], ["y3"], inits)
    read_onnx(data)
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, str(5 * 1024))
    with pytest.raises(OnnxImportError, match="XMGE_MAX_TOTAL_BYTES") as info:
        read_onnx(data)
    assert "<onnx bytes>" in str(info.value)


def _nested_if(levels: int) -> bytes:
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [out])
    for k in range(levels):
        node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
        branch = helper.make_graph([node], f"level{k}", [], [out])
    inits = [numpy_helper.from_array(np.bool_(True), "c")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    return _onnx(list(branch.node), [x], ["y"], inits)


def test_onnx_subgraph_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _nested_if(4)
    monkeypatch.setenv(limits.MAX_DEPTH_ENV, "3")
    with pytest.raises(OnnxImportError, match="nested more than 3 deep .*XMGE_MAX_DEPTH"):
        read_onnx(data)


def test_pickle_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    nested: Any = [1]
    for _ in range(6):
        nested = [nested, 2]
    data = pickle.dumps(nested)
    assert xm.load(io.BytesIO(data)) == nested
    monkeypatch.setenv(limits.MAX_DEPTH_ENV, "4")
    with pytest.raises(limits.LimitExceeded, match=r"<pickle data>: MARK before byte \d+: .*XMGE_MAX_DEPTH"):
        xm.load(io.BytesIO(data))


class _Inner(M.Module):
    def forward(self, x: Any) -> Any:
        return x * 2


class _Outer(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Inner()

    def forward(self, x: Any) -> Any:
        return self.inner(x) + 1


def test_tm_replay_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    x = xm.tensor(np.ones((2,), np.float32))
    traced = tm.trace_module(_Outer(), x)
    np.testing.assert_array_equal(traced(x).numpy(), [3.0, 3.0])
    monkeypatch.setenv(limits.MAX_DEPTH_ENV, "1")
    with pytest.raises(limits.LimitExceeded, match="replay of .*XMGE_MAX_DEPTH"):
        traced(x)
