"""Numbers from a file cannot make xmge allocate or compute without bound, and malformed operators
give MgeFormatError naming the operator and offset (issue 16, items 2 and 3)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import DenseArrayBase, TensorType, i64

from backends.mge.container import RawOpr, RawParam, parse_file
from backends.mge.fbs import MgeFormatError
from backends.mge.read_context import MAX_TENSOR_BYTES_ENV
from backends.mge.reader import read_mge
from backends.mge.writer import write_mge
from dialects import tensor as T
from tests.conftest import data_path


def _convnet() -> bytes:
    with open(data_path("convnet", "fbs_v1.mge"), "rb") as f:
        return f.read()


def _with_conv_padding(pad: int) -> bytes:
    """The convnet with its first convolution's padding set to ``pad`` (result type left stale:
    the writer takes params as they are, like a mutated file)."""
    module = read_mge(_convnet())
    conv = next(op for op in module.walk() if isinstance(op, T.ConvolutionOp))
    conv.properties["padding"] = DenseArrayBase.from_list(i64, [pad, pad])
    return write_mge(module, dump_format="FBS")


@pytest.mark.parametrize("pad", [65_536, 2**31 - 1, 4_300_000_000 % 2**32])
def test_huge_convolution_padding_is_a_format_error(pad: int) -> None:
    try:
        data = _with_conv_padding(pad)
    except Exception as exc:  # the writer may refuse it already: then there is no file to read
        pytest.skip(f"writer refuses padding {pad}: {exc}")
    with pytest.raises(MgeFormatError, match=r"operator #\d+ \(ConvolutionV2.*(limit|larger|invalid)"):
        read_mge(data)


def test_tensor_cap_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _convnet()
    read_mge(data)
    monkeypatch.setenv(MAX_TENSOR_BYTES_ENV, str(10_000))  # the first conv output is 23 KB
    with pytest.raises(MgeFormatError, match=MAX_TENSOR_BYTES_ENV):
        read_mge(data)
    monkeypatch.setenv(MAX_TENSOR_BYTES_ENV, "lots")
    with pytest.raises(MgeFormatError, match="not a number of bytes"):
        read_mge(data)


def test_missing_param_table_names_operator_and_offset() -> None:
    op = RawOpr(
        index=3,
        offset=1234,
        type_name="PoolingV1",
        type_id=0,
        opr_version=1,
        kind="Pooling",
        name=None,
        params=[RawParam("Pooling", {}, missing=True)],
        inputs=[],
        outputs=[],
        output_names=None,
        output_dtype=None,
        tensors=[],
    )
    with pytest.raises(
        MgeFormatError, match=r"operator #3 \(PoolingV1\): its param.Pooling is tagged but .*1234"
    ):
        op.param("Pooling")


def test_input_shape_beyond_the_cap_is_a_format_error() -> None:
    module = read_mge(_convnet())
    fn = next(iter(module.ops))
    arg = fn.body.block.args[0]  # type: ignore[attr-defined]
    huge = TensorType(arg.type.element_type, [3_000_000_000, 1, 28, 28])
    arg._type = huge  # what a mutated Host2DeviceCopy shape says
    try:
        data = write_mge(module, dump_format="FBS_V2")
    except Exception as exc:
        pytest.skip(f"writer refuses the shape: {exc}")
    with pytest.raises(MgeFormatError, match="Host2DeviceCopy|input"):
        read_mge(data)


def test_float_shape_expression_and_prod_reduce_fold() -> None:
    """ResizeV2 sizes from a float32 shape expression and a Reshape target from Reduce(prod)
    fold while reading (what MegEngine's static value inference accepts)."""
    from backends.mge.read_context import ReadVar, int_values

    op = parse_file(_convnet())[0].oprs[1]
    v = ReadVar(type=None, value=np.array([56.0, 55.9], np.float32))
    assert int_values(op, v, "size") == [56, 55]
    with pytest.raises(MgeFormatError, match="not sizes"):
        int_values(op, ReadVar(value=np.array([np.inf], np.float32)), "size")
