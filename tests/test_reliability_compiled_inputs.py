"""A compiled model converts its inputs only when exact, like the reference (issue 28): the
driver used to cast first (``np.asarray(x, dtype=int32)``), so an int64 index 2^32 + 1 wrapped to 1,
a float index 1.7 became 1, and an extra input was dropped without a word."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as xm
from backends.c.build import InputError
from compiler.driver.targets import host_target

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from backends.onnx.reader import read_onnx  # noqa: E402


@pytest.fixture(scope="module")
def model() -> xm.Tensor:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)],
        "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT32, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), "table")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    if str(host_target()) == "ref":
        pytest.skip("no x86 host target")
    return xm.compile(read_onnx(m.SerializeToString()), target="x86-avx2")


def test_exact_inputs_run(model) -> None:  # type: ignore[no-untyped-def]
    want = np.arange(8, dtype=np.float32).reshape(4, 2)[[1, 3, 0]]
    np.testing.assert_array_equal(model.run([np.array([1, 3, 0], np.int64)])[0], want)
    np.testing.assert_array_equal(model.run([[1, 3, 0]])[0], want)  # a Python list of ints


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.array([1, 2**32 + 1, 0], np.int64), r"input idx: values in \[0, 4294967297\] do not fit"),
        (np.array([1.7, 2.0, 0.0]), r"input idx: float values \(float64\) given for a int32 input"),
    ],
)
def test_lossy_inputs_are_refused_naming_the_input(model, value, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=match):
        model.run([value])


def test_an_extra_input_is_refused(model) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=r"takes 1 input\(s\) \(idx\), got 2"):
        model.run([np.array([1, 3, 0], np.int32), np.zeros(3, np.float32)])
