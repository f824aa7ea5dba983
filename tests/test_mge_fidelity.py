"""Where xmge's .mge files follow MegEngine's own more closely than operator types: TypeCvts after
a layout pass, the names MegEngine's tracer gives duplicated ops, NHWCD4 weights in a
MultipleDeviceTensorWithFormatHolder, and 4-bit tensors packed two to a byte.

Reference data: the golden dumps in tests/data/<case>/ and, in tests/data/fidelity/, listings of
files MegEngine 1.13.0 made (each JSON names the script that made it).
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
from xdsl.builder import ImplicitBuilder
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import Block, Region

import compiler as xm
import compiler.functional as F
import compiler.module as M
from backends.mge.container import RawDType, parse_file
from backends.mge.dtypes import pack_4bit, storage_bytes, unpack_4bit
from backends.mge.reader import read_mge
from backends.mge.verify import verify_file
from backends.mge.writer import write_mge
from compiler import jit
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import QuantizedType
from passes.layout.canonicalize import const_of_type
from semantics import run_module
from tests.conftest import data_path
from tests.mge_helpers import dump_bytes, inputs, traced
from tests.test_mge_layouts import _int8_model, case_variant, golden_bytes, golden_sig, sigs


def fidelity(name: str) -> Any:
    with open(data_path("fidelity", name)) as f:
        return json.load(f)


# ----------------------------------------------------------------------------------------------
# 1. TypeCvt after NCHW44: the relayout moves above the TypeCvt (ShuffleShuffleRemovePass)


def test_int8_nchw44_dequantizes_after_the_relayout() -> None:
    tr = _int8_model()
    for variant in ("nchw44", "nchw44_dot"):
        v = case_variant("int8", variant)
        buf = io.BytesIO()
        tr.dump(buf, **v["dump_kwargs"])
        data = buf.getvalue()
        assert sigs(data) == [golden_sig(o) for o in v["oprs"]]
        g = parse_file(data)[0]
        # the graph output is the TypeCvt's var; MegEngine names it asFloat32(reshape[462])[464]
        # (a generated name with node ids of its optimizer run, see docs/mge-names.md)
        assert g.oprs[-1].kind == "TypeCvt" and g.oprs[-1].outputs == g.outputs
        # (this model's two TypeCvts have no module scope: the tracer numbers them, as MegEngine's)
        assert [g.var_names[o] for o in g.outputs] == ["TypeCvt[1]"]


def test_float_typecvt_after_nchw44_like_megengine() -> None:
    gold = fidelity("float_typecvt_nchw44.json")

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = M.Conv2d(8, 8, 3, padding=1)

        def forward(self, x: Any) -> Any:
            return F.relu(self.conv(x)).astype("float16")

    net = Net()
    net.conv.bias = xm.Parameter(np.full((1, 8, 1, 1), 0.1, np.float32))  # a zero bias is folded away
    net.eval()
    tr = jit.trace(lambda x: net(x), symbolic=True, capture_as_const=True)
    tr(xm.tensor(np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)))
    buf = io.BytesIO()
    tr.dump(buf, arg_names=["data"], enable_nchw44=True)
    g = parse_file(buf.getvalue())[0]
    kinds = [o.kind for o in g.oprs]
    want = [t for t, _ in gold["oprs"]]
    conv = want.index("ConvBias")
    assert kinds[kinds.index("ConvBias") :] == want[conv:]
    assert want[-1] == "TypeCvt" and [g.var_names[o] for o in g.outputs] == gold["outputs"] == ["TypeCvt"]


# ----------------------------------------------------------------------------------------------
# 4. QuantizedS4 / Quantized4Asymm tensors: two values a byte, every innermost row on a byte


def _q4_file() -> bytes:
    with open(data_path("fidelity", "q4.mge"), "rb") as f:
        return f.read()


def test_megengine_4bit_constants_read_and_run() -> None:
    # q4.mge: MegEngine 1.13.0 (make_q4.py), optimize_for_inference=False so the 4-bit
    # constants stay ImmutableTensors; (2, 3, 5) tensors -> 3 bytes a row, 18 bytes each
    data = _q4_file()
    raw = [t for o in parse_file(data)[0].oprs for t in o.tensors if t.data]
    assert [(t.dtype.name, len(t.data)) for t in raw] == [("QuantizedS4", 18), ("Quantized4Asymm", 18)]
    module = read_mge(data)
    x = np.load(data_path("fidelity", "q4_inputs.npz"))["x"]
    expected = np.load(data_path("fidelity", "q4_expected.npz"))
    for got, name in zip(run_module(module, [x]), ("s4", "u4"), strict=True):
        np.testing.assert_array_equal(got, expected[name])
    again = write_mge(module)
    assert write_mge(read_mge(again)) == again
    # the constants' bytes are MegEngine's, packed the same way
    assert [bytes(t.data) for o in parse_file(again)[0].oprs for t in o.tensors if t.data] == [
        bytes(t.data) for t in raw
    ]


def test_4bit_packing_order() -> None:
    s4 = RawDType("QuantizedS4", 0.5)
    u4 = RawDType("Quantized4Asymm", 0.25, 3)
    # element 2i in the low nibble, 2i+1 in the high one; odd rows end with a half-used byte
    assert pack_4bit(np.array([[1, -2, 3], [-8, 7, 0]], np.int8), s4) == bytes([0xE1, 0x03, 0x78, 0x00])
    assert pack_4bit(np.array([15, 0, 1, 2], np.uint8), u4) == bytes([0x0F, 0x21])
    rng = np.random.default_rng(1)
    for dt, lo, hi, npdt in ((s4, -8, 8, np.int8), (u4, 0, 16, np.uint8)):
        for shape in [(7,), (2, 3, 5), (4, 4), (1, 1, 1)]:
            v = rng.integers(lo, hi, shape).astype(npdt)
            packed = pack_4bit(v, dt)
            assert len(packed) == storage_bytes(shape, dt)
            np.testing.assert_array_equal(unpack_4bit(packed, shape, dt), v)
    with pytest.raises(ValueError, match="outside"):
        pack_4bit(np.array([8], np.int8), s4)


def _q4_module(c: np.ndarray) -> ModuleOp:
    """``y = x + float(c)`` with ``c`` a QuantizedS4 constant (scale 0.5)."""
    q = QuantizedType("qint4", 0.5)
    x_t = TensorType(f32, list(c.shape))
    block = Block(arg_types=[x_t])
    with ImplicitBuilder(block) as (x,):
        w = const_of_type(c, TensorType(q, list(c.shape)))
        f = T.TypeCvtOp.make([w.output], [x_t])
        y = T.ElemwiseOp.make([x, f.output], mode=enums.ElemwiseMode.ADD)
        func.ReturnOp(y.output)
    module = ModuleOp([func.FuncOp("main", ([x_t], [x_t]), Region(block))])
    module.verify()
    return module


def test_4bit_constant_written_by_xmge_round_trips() -> None:
    c = np.array([[1, -2, 3], [-8, 7, 0]], np.int8)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for fmt in ("FBS_V2", "FBS"):
        data = write_mge(_q4_module(c), dump_format=fmt)
        (t,) = [t for o in parse_file(data)[0].oprs for t in o.tensors if t.data]
        assert (t.dtype.name, bytes(t.data)) == ("QuantizedS4", bytes([0xE1, 0x03, 0x78, 0x00]))
        (y,) = run_module(read_mge(data), [x])
        np.testing.assert_array_equal(y, x + c * 0.5)
        assert write_mge(read_mge(data), dump_format=fmt) == data


# ----------------------------------------------------------------------------------------------
# 3. NHWCD4 constants: one MultipleDeviceTensorWithFormatHolder with Image2D tensor formats

HOLDER = "MultipleDeviceTensorWithFormatHolder"


def _holder(data: bytes) -> list[tuple[tuple[int, ...], int | None]]:
    g = parse_file(data)[0]
    (h,) = [o for o in g.oprs if o.type_name == HOLDER]
    assert g.nr_shared_tensor == len(h.tensors)
    return [(t.shape, t.image2d_axis) for t in h.tensors]


def test_megengine_nhwcd4_dump_reads_and_matches() -> None:
    # convnet_hwcd4.mge: MegEngine 1.13.0 optimize_for_inference(enable_hwcd4) of golden convnet's
    # noopt.mge (NHWCD4 does not run on x86 MegEngine: numbers come from xmge's reference)
    with open(data_path("fidelity", "convnet_hwcd4.mge"), "rb") as f:
        data = f.read()
    assert _holder(data) == [((5, 5, 5, 12, 4), 3), ((1, 1, 5, 1, 4), 2)]
    module = read_mge(data)
    (y,) = run_module(module, [inputs("convnet")["data"]])
    expected = np.load(data_path("convnet", "expected_plain.npz"))
    np.testing.assert_allclose(y, expected[expected.files[0]], rtol=1e-5, atol=1e-5)
    again = write_mge(module)
    assert _holder(again) == _holder(data)
    assert write_mge(read_mge(again)) == again


def test_xmge_nhwcd4_dump_stores_weights_like_megengine() -> None:
    with open(data_path("fidelity", "convnet_hwcd4.mge"), "rb") as f:
        gold = parse_file(f.read())[0]
    tr = traced("convnet")
    data = dump_bytes(tr, arg_names=["data"], enable_hwcd4=True)
    verify_file(data)
    assert _holder(data) == [((5, 5, 5, 12, 4), 3), ((1, 1, 5, 1, 4), 2)]
    assert sorted(o.type_name for o in parse_file(data)[0].oprs) == sorted(o.type_name for o in gold.oprs)
    (y,) = run_module(read_mge(data), [inputs("convnet")["data"]])
    expected = np.load(data_path("convnet", "expected_plain.npz"))
    np.testing.assert_allclose(y, expected[expected.files[0]], rtol=1e-5, atol=1e-5)
    # FBS v1: the holder's per-tensor format blob is not pinned down, so one ImmutableTensor each
    v1 = parse_file(dump_bytes(tr, arg_names=["data"], enable_hwcd4=True, dump_format="FBS"))[0]
    assert HOLDER not in [o.type_name for o in v1.oprs]


# ----------------------------------------------------------------------------------------------
# 2. Names: the tracer's de-duplication (deterministic) matches; generated names with node ids
# (``FUSE_ADD_RELU(conv.bias,conv.Convolution)[37]``) cannot be derived from xmge's IR


def test_duplicate_op_names_numbered_like_megengine() -> None:
    gold = parse_file(golden_bytes("multi_io", "default_names"))[0]
    g = parse_file(dump_bytes(traced("multi_io")))[0]
    reduce_names = [n for n in g.var_names.values() if n.startswith("Reduce")]
    assert reduce_names == [n for n in gold.var_names.values() if n.startswith("Reduce")]
    assert reduce_names == ["Reduce[0]", "Reduce[1]", "Reduce[2]", "Reduce[3]"]
    assert g.var_names[g.outputs[1]] == gold.var_names[gold.outputs[1]] == "Reduce[3]"
    # the fused output: MegEngine's name carries its optimizer node id, xmge's is the op's kind
    assert gold.var_names[gold.outputs[0]] == "FUSE_ADD_RELU(conv.bias,conv.Convolution)[37]"
    assert g.var_names[g.outputs[0]] == "FUSE_ADD_RELU"
    # mini_resnet: two RELUs per block scope, kept on the fused ops as MegEngine keeps them
    mr = parse_file(dump_bytes(traced("mini_resnet"), arg_names=["data"]))[0]
    gold_mr = parse_file(golden_bytes("mini_resnet", "plain"))[0]
    ours = {n for n in mr.var_names.values() if ".RELU[" in n and "(" not in n}
    assert ours == {n for n in gold_mr.var_names.values() if ".RELU[" in n and "(" not in n}
    assert len(ours) == 8
