"""Findings of bench/fuzz_onnx.py (issue 28): each mutated model that raised something other than a
documented error is a one-line OnnxImportError naming the node now."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from backends.onnx.reader import OnnxImportError, read_onnx  # noqa: E402


def _model(nodes: list[Any], inputs: list[Any], outputs: list[str], inits: list[Any]) -> bytes:
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outs, inits),
                          opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    m.ir_version = 8
    return m.SerializeToString()


def _refused(data: bytes, match: str) -> None:
    with pytest.raises(OnnxImportError, match=match) as info:
        read_onnx(data)
    assert "\n" not in str(info.value)


def test_quantize_with_a_zero_scale() -> None:
    """Was xDSL's VerifyException ("qint8 needs a positive scale") out of the importer."""
    data = _model(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], ["y"],
        [numpy_helper.from_array(np.float32(0.0), "s"), numpy_helper.from_array(np.int8(0), "z")],
    )  # fmt: skip
    _refused(data, "QuantizeLinear node 'quant'.*positive scale")


def test_constant_of_shape_value_of_unknown_type() -> None:
    """Was KeyError: 999 from onnx's dtype table while sizing the folded constant."""
    value = numpy_helper.from_array(np.array([1.0], np.float32), "v")
    value.data_type = 999
    data = _model(
        [helper.make_node("ConstantOfShape", ["shape"], ["c"], value=value, name="cos"),
         helper.make_node("Add", ["x", "c"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], ["y"],
        [numpy_helper.from_array(np.array([2], np.int64), "shape")],
    )  # fmt: skip
    _refused(data, "ConstantOfShape node 'cos'")


def test_resize_interpolation_matrix_is_sized_before_it_is_built() -> None:
    """Was a 149 GiB numpy allocation (MemoryError): a 100,000-wide input resized 2x builds a
    200,000 x 100,000 float64 interpolation matrix; the output itself is only 25 MB."""
    data = _model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", name="up")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 100000])], ["y"],
        [numpy_helper.from_array(np.array([1, 1, 1, 2], np.float32), "scales")],
    )  # fmt: skip
    _refused(data, r"Resize node .up.*interpolation matrix for axis 3 \(200000 x 100000\).*XMGE_MAX_TENSOR")


@pytest.mark.parametrize("dims", [[1, 2, 2**31 - 1, 5], [1, 2, 5, 5]])
def test_every_built_op_and_graph_input_is_within_the_tensor_cap(dims: list[int],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Was numpy's MemoryError: a BatchNormalization on a 2^31-row input, and an AveragePool whose
    pads (10^12) the handler turned into a padding op and then a per-row divisor table."""
    monkeypatch.setenv("XMGE_MAX_TENSOR_BYTES", str(16 << 20))
    pads = [0, 0, 10**12, 1] if dims[2] == 5 else [0, 0, 1, 1]
    data = _model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], pads=pads, name="ap")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)], ["y"], [],
    )  # fmt: skip
    _refused(data, "(graph input 'x'|AveragePool node 'ap').*XMGE_MAX_TENSOR_BYTES")


def test_conv_stride_beyond_32_bits_is_refused_at_import() -> None:
    """Was OverflowError from numpy's strided windows when the reference ran a Conv with stride
    2^63 - 1 (the op accepted any positive stride)."""
    data = _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2**63 - 1], name="c")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])], ["y"],
        [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")],
    )  # fmt: skip
    _refused(data, r"Conv node 'c'.*invalid stride \(2, 9223372036854775807\)")


def test_graph_input_error_read_by_a_node_without_outputs() -> None:
    """Was IndexError: the message naming the node that reads a bad graph input used its first
    output when the node had no name, and a fuzzed node had no outputs."""
    reader = helper.make_node("Relu", ["x"], [])
    data = _model([reader], [helper.make_tensor_value_info("x", 999, [2])], [], [])
    _refused(data, r"graph input 'x' \(read by Relu node '', opset 17\) has element type code 999")


def test_gather_of_many_constant_indices_is_one_indexing_op() -> None:
    """Was the slowest fuzz case (3.4 s CPU): 16,000 irregular constant indices imported as 16,000
    slices and a concat. Beyond a few indices it is one IndexingMultiAxisVec on a constant."""
    from semantics import run_module

    idx = np.random.default_rng(0).integers(0, 7, 500)
    data = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=1, name="g")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7])], ["y"],
        [numpy_helper.from_array(idx.astype(np.int64), "i")],
    )  # fmt: skip
    module = read_onnx(data)
    names = [op.name for op in next(iter(module.ops)).body.block.ops]
    assert names.count("mgb.indexing_multi_axis_vec") == 1 and "mgb.concat" not in names
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    (y,) = run_module(module, [x])
    np.testing.assert_array_equal(y, np.take(x, idx, axis=1))
