"""The int8 flow through every int8 layout: a quantized model dumped with each MegEngine layout
option loads back, runs in that layout and gives exactly the eager int8 result (layouts move
values, they never round them), so it keeps the int8 model's agreement with the float model."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

import compiler as xm
from backends.mge.reader import read_mge
from compiler import jit
from semantics import run_module
from tests.test_quant import SHAPES, _model

# option -> the conv formats mini_resnet's convs take (its channels divide by 4, 32 for some)
LAYOUTS = {
    "enable_nchw44": {"nchw44"},
    "enable_nchw44_dot": {"nchw44_dot"},
    "enable_nchw4": {"nchw4"},
    "enable_nchw32": {"nchw4", "nchw32"},
    "enable_chwn4": {"chwn4"},
    "enable_nchw64": {"nchw", "nchw4", "nchw32"},
}


Traced = tuple[str, Any, np.ndarray, np.ndarray, np.ndarray]


@pytest.fixture(scope="module", params=["convnet", "mini_resnet"])
def traced_int8(request: Any) -> Traced:
    from compiler.quantization import quantize

    name = request.param
    net = _model(name)
    rs = np.random.RandomState(7)
    calib = [rs.randn(16, *SHAPES[name]).astype(np.float32) for _ in range(2)]
    sample = rs.randn(8, *SHAPES[name]).astype(np.float32)
    qnet = quantize(net, calib)
    traced = jit.trace(lambda x: qnet(x), symbolic=True, capture_as_const=True)
    y_int8 = traced(xm.tensor(sample)).numpy()
    y_float = net(xm.tensor(sample)).numpy()
    return name, traced, sample, y_int8, y_float


@pytest.mark.parametrize("option", sorted(LAYOUTS))
def test_int8_model_through_layout(
    traced_int8: tuple[str, Any, np.ndarray, np.ndarray, np.ndarray], option: str
) -> None:
    name, traced, sample, y_int8, y_float = traced_int8
    buf = io.BytesIO()
    traced.dump(buf, arg_names=["data"], **{option: True})
    module = read_mge(buf.getvalue())
    formats = {op.params()["format"].value for op in module.walk() if op.name == "mgb.conv_bias"}
    if name == "mini_resnet":
        assert formats == LAYOUTS[option], f"{option}: conv formats {formats}"
    out = run_module(module, [sample])[0]
    np.testing.assert_array_equal(out, y_int8)
    assert (out.argmax(1) == y_float.argmax(1)).mean() >= 0.99
