"""Quantized dtypes, int8 reference kernels, the golden MegEngine int8 dumps and the int8 flow.

Tolerances: the golden int8 variants must match MegEngine's outputs within one quantization step of
the output scale (MegEngine's x86 kernels may round ties differently); they currently match exactly.
Reference kernels are checked exactly against closed forms (integer accumulation, round half away
from zero, saturation) except where float32 requantization may move a tie: there, one step.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from xdsl.dialects.builtin import TensorType

import compiler as xm
import compiler.functional as F
from backends.mge.container import parse_file
from backends.mge.reader import read_mge
from compiler import dtype as D
from compiler import jit
from compiler.lite import Network
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import QuantizedType, element_type
from semantics import run_module
from semantics.kernels import KERNELS, ResultSpec
from tests.conftest import data_path

QM = enums.ElemwiseMultiTypeMode


def _spec(shape: tuple[int, ...], dtype: np.dtype) -> ResultSpec:
    return ResultSpec(tuple(shape), np.dtype(dtype))


def _half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


# ----------------------------------------------------------------------------------------------
# dtypes


def test_dtype_constructors_use_megengine_metadata() -> None:
    q = D.qint8(0.05)
    assert q == np.int8 and q.metadata == {
        "mgb_dtype": {"name": "QuantizedS8", "scale": float(np.float32(0.05)), "zero_point": None}
    }
    u = D.quint8(0.1, 128)
    assert u == np.uint8 and D.get_zero_point(u) == 128 and D.dtype_name(u) == "Quantized8Asymm"
    assert D.dtype_name(D.qint32(1e-4)) == "QuantizedS32" and D.dtype_name(D.qint4(0.5)) == "QuantizedS4"
    assert D.is_quantize(q) and not D.is_quantize(np.int8) and not D.is_quantize("float32")
    assert element_type(q) == QuantizedType("qint8", float(np.float32(0.05)))
    with pytest.raises(TypeError, match="positive"):
        D.qint8(0.0)
    with pytest.raises(TypeError, match="zero point"):
        D.quint8(0.1, 300)


def test_convert_helpers_round_trip() -> None:
    x = np.array([-1.0, -0.26, 0.0, 0.26, 1.0, 100.0], np.float32)
    q = D.convert_to_qint8(x, D.qint8(0.1))
    np.testing.assert_array_equal(q.astype(np.int32), [-10, -3, 0, 3, 10, 127])
    np.testing.assert_allclose(D.convert_from_qint8(q), [-1.0, -0.3, 0.0, 0.3, 1.0, 12.7], rtol=1e-6)
    u = D.convert_to_quint8(x, D.quint8(0.1, 128))
    np.testing.assert_array_equal(u.astype(np.int32), [118, 125, 128, 131, 138, 255])
    assert D.get_scale(u.dtype) == pytest.approx(0.1)


def test_tensor_of_quantized_dtype() -> None:
    t = xm.tensor([0.25, -0.25, 0.75, 1000.0], dtype=D.qint8(0.5))  # float data are quantized
    np.testing.assert_array_equal(t.numpy().astype(int), [1, -1, 2, 127])  # ties away from zero
    assert D.get_scale(t.dtype) == 0.5
    raw = xm.tensor(np.array([3, -4], np.int8), dtype=D.qint8(0.5))  # integers are stored values
    np.testing.assert_array_equal(raw.astype("float32").numpy(), [1.5, -2.0])
    s = raw + raw  # elemwise on quantized: dequantize, add, quantize to the same dtype
    assert D.get_scale(s.dtype) == 0.5 and s.numpy().tolist() == [6, -8]


# ----------------------------------------------------------------------------------------------
# reference kernels


def test_typecvt_quantize_dequantize_requantize() -> None:
    x = np.array([0.25, -0.25, 0.75, -0.75, 300.0, -300.0], np.float32)
    (q,) = KERNELS[T.TypeCvtOp]([x], [_spec(x.shape, D.qint8(0.5))])
    assert q.tolist() == [1, -1, 2, -2, 127, -128] and D.get_scale(q.dtype) == 0.5
    (u,) = KERNELS[T.TypeCvtOp]([x], [_spec(x.shape, D.quint8(0.5, 100))])
    assert u.tolist() == [101, 99, 102, 98, 255, 0]
    (f,) = KERNELS[T.TypeCvtOp]([u], [_spec(x.shape, np.float32)])
    np.testing.assert_array_equal(f, [0.5, -0.5, 1.0, -1.0, 77.5, -50.0])
    (r,) = KERNELS[T.TypeCvtOp]([q], [_spec(x.shape, D.qint8(0.25))])  # qint8 -> qint8
    assert r.tolist() == [2, -2, 4, -4, 127, -128]


@pytest.mark.parametrize("groups,relu", [(1, False), (1, True), (2, True)])
def test_conv_bias_int8_against_integer_conv(groups: int, relu: bool) -> None:
    rs = np.random.RandomState(groups + 2 * relu)
    x = rs.randint(-128, 128, (2, 4, 7, 7)).astype(np.int8).view(D.qint8(0.03))
    w = rs.randint(-127, 128, (6, 4 // groups, 3, 3)).astype(np.int8)
    s_acc = float(np.float32(0.03 * 0.02))
    b = rs.randint(-3000, 3000, (1, 6, 1, 1)).astype(np.int32).view(D.qint32(s_acc))
    wq = (w.reshape(groups, 6 // groups, *w.shape[1:]) if groups > 1 else w).view(D.qint8(0.02))
    out = D.qint8(0.5)
    p = T.ConvBiasOp.params_with_defaults({})
    p.update(
        padding=(1, 1),
        stride=(2, 2),
        sparse=enums.ConvSparse.GROUP if groups > 1 else enums.ConvSparse.DENSE,
        nonline_mode=enums.NonlineMode.RELU if relu else enums.NonlineMode.IDENTITY,
    )
    (y,) = KERNELS[T.ConvBiasOp]([x, wq, b], [_spec((2, 6, 4, 4), out)], **p)
    acc = torch.nn.functional.conv2d(
        torch.from_numpy(x.astype(np.float64)),
        torch.from_numpy(w.astype(np.float64)),
        torch.from_numpy(b.reshape(-1).astype(np.float64)),
        stride=2,
        padding=1,
        groups=groups,
    ).numpy()
    if relu:
        acc = np.maximum(acc, 0)
    want = np.clip(_half_away(acc * s_acc / 0.5), -128, 127)
    assert D.get_scale(y.dtype) == 0.5
    diff = np.abs(y.astype(np.int64) - want)
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99


def test_matrix_mul_int8_accumulates_exactly_in_int32() -> None:
    rs = np.random.RandomState(0)
    a = rs.randint(-128, 128, (5, 64)).astype(np.int8)
    b = rs.randint(-128, 128, (7, 64)).astype(np.int8)
    (default,) = T.MatrixMulOp.infer(
        [TensorType(element_type(D.qint8(0.1)), [5, 64]), TensorType(element_type(D.qint8(0.2)), [7, 64])],
        transpose_b=True,
    )
    product = float(np.float32(D.get_scale(D.qint8(0.1)) * D.get_scale(D.qint8(0.2))))
    assert default.element_type == QuantizedType("qint32", product)
    spec = _spec((5, 7), D.qint32(0.1 * 0.2))
    (y,) = KERNELS[T.MatrixMulOp](
        [a.view(D.qint8(0.1)), b.view(D.qint8(0.2))], [spec], transpose_a=False, transpose_b=True
    )
    np.testing.assert_array_equal(y, a.astype(np.int64) @ b.astype(np.int64).T)


def test_elemwise_multi_type_q_modes() -> None:
    a = np.array([10, -20, 100, -128], np.int8).view(D.qint8(0.1))
    b = np.array([5, 5, 100, -128], np.int8).view(D.qint8(0.2))
    out = _spec((4,), D.qint8(0.25))
    (y,) = KERNELS[T.ElemwiseMultiTypeOp]([a, b], [out], mode=QM.QADD)
    fa, fb = a.astype(np.float64) * 0.1, b.astype(np.float64) * 0.2
    np.testing.assert_array_equal(y, np.clip(_half_away((fa + fb) / 0.25), -128, 127))
    (r,) = KERNELS[T.ElemwiseMultiTypeOp]([a, b], [out], mode=QM.QFUSE_ADD_RELU)
    np.testing.assert_array_equal(r, np.clip(_half_away(np.maximum(fa + fb, 0) / 0.25), -128, 127))
    (m,) = KERNELS[T.ElemwiseMultiTypeOp]([a, b], [out], mode=QM.QMUL)
    np.testing.assert_array_equal(m, np.clip(_half_away(fa * fb / 0.25), -128, 127))
    (lt,) = KERNELS[T.ElemwiseMultiTypeOp]([a, b], [_spec((4,), np.bool_)], mode=QM.LT)
    assert lt.tolist() == [False, True, False, False]  # stored values compared, as MegEngine does
    assert (
        enums.number(QM.QADD) == 6 and enums.number(QM.QFUSE_ADD_RELU) == 7 and enums.number(QM.ISINF) == 63
    )


def test_int8_pooling_rounds_averages_half_away() -> None:
    x = np.array([[[[1, 2], [-1, -2]], [[3, 4], [0, 0]]]], np.int8).reshape(1, 2, 2, 2)
    xq = x.view(D.qint8(0.5))
    p = {"mode": enums.PoolingMode.AVERAGE, "window": (1, 2), "stride": (1, 2), "padding": (0, 0)}
    (y,) = KERNELS[T.PoolingOp]([xq], [_spec((1, 2, 2, 1), D.qint8(0.5))], **p)
    assert y.reshape(-1).tolist() == [2, -2, 4, 0]  # 1.5 -> 2, -1.5 -> -2, 3.5 -> 4
    p["mode"] = enums.PoolingMode.MAX
    (m,) = KERNELS[T.PoolingOp]([xq], [_spec((1, 2, 2, 1), D.qint8(0.5))], **p)
    assert m.reshape(-1).tolist() == [2, -1, 4, 0] and D.get_scale(m.dtype) == 0.5


# ----------------------------------------------------------------------------------------------
# golden MegEngine int8 dumps


GOLDEN = ["plain", "noopt", "fuse", "fbs_v1"]


@pytest.mark.parametrize("variant", GOLDEN)
def test_golden_int8_matches_megengine(variant: str) -> None:
    net = Network(data_path("int8", f"{variant}.mge"))
    x = np.load(data_path("int8", "inputs.npz"))["data"]
    outs = net(data=x)
    expected = np.load(data_path("int8", f"expected_{variant}.npz"))
    assert sorted(outs) == sorted(expected.files)
    out_scale = 0.03942460939288139  # conv3's QuantizedS8 output (case.json)
    for name, arr in outs.items():
        steps = np.abs(arr - expected[name]) / out_scale
        assert steps.max() <= 1 + 1e-4, f"{variant}: {steps.max()} quantization steps off"
        np.testing.assert_array_equal(arr, expected[name])  # observed: exact


def _golden_module() -> tuple[Any, dict[str, Any]]:
    fn = next(iter(read_mge(open(data_path("int8", "plain.mge"), "rb").read()).ops))
    ops = [op for op in fn.body.block.ops if isinstance(op, T.MgbOp)]
    quant = next(op for op in ops if isinstance(op, T.TypeCvtOp))
    convs = [op for op in ops if isinstance(op, T.ConvBiasOp)]
    layers = []
    for c in convs:
        w, b = (xm.tensor(v.owner.numpy()) for v in c.operands[1:3])  # type: ignore[union-attr]
        layers.append((w, b, c.params(), c.results[0].type.element_type))  # type: ignore[attr-defined]
    return quant.results[0].type.element_type, {"layers": layers}  # type: ignore[attr-defined]


def test_golden_int8_rebuilt_with_the_frontend() -> None:
    """MegEngine's quantized modules, written with xmge's API and the golden int8 weights, give
    MegEngine's outputs and a dump with the same operators."""
    in_elem, parts = _golden_module()

    def qtype(e: QuantizedType) -> np.dtype:
        return D.qint8(e.scale_value)

    def model(x: xm.Tensor) -> xm.Tensor:
        y = x.astype(qtype(in_elem))  # QuantStub
        for w, b, p, out in parts["layers"]:
            y = F.quantized.conv_bias_activation(
                y,
                w,
                b,
                dtype=qtype(out),
                stride=p["stride"],
                padding=p["padding"],
                nonlinear_mode=p["nonline_mode"].name.lower(),
            )
        return y.astype("float32")  # DequantStub

    traced = jit.trace(model, symbolic=True, capture_as_const=True)
    x = np.load(data_path("int8", "inputs.npz"))["data"]
    y = traced(xm.tensor(x)).numpy()
    np.testing.assert_array_equal(y, np.load(data_path("int8", "expected_plain.npz"))["dequant.TypeCvt"])
    buf = io.BytesIO()
    traced.dump(buf, arg_names=["data"])
    counts = Counter(o.kind or o.type_name for o in parse_file(buf.getvalue())[0].oprs)
    case = json.load(open(data_path("int8", "case.json")))
    assert counts == Counter(case["variants"]["plain"]["opr_type_counts"])
    again = run_module(read_mge(buf.getvalue()), [x])[0]
    np.testing.assert_array_equal(again, y)


def test_quantized_dtypes_survive_write_and_read() -> None:
    def f(x: xm.Tensor) -> tuple[xm.Tensor, ...]:
        a = x.astype(D.qint8(0.05))
        u = x.astype(D.quint8(0.02, 131))
        s = F.quantized.elemwise_multi_type(a, a, mode="qfuse_add_relu", dtype=D.qint8(0.1))
        return s.astype("float32"), u.astype("float32"), a.astype(D.qint32(0.001)).astype("float32")

    traced = jit.trace(f, symbolic=True, capture_as_const=True)
    x = np.random.RandomState(3).randn(2, 3).astype(np.float32)
    eager = [t.numpy() for t in traced(xm.tensor(x))]
    for fmt in ("FBS_V2", "FBS"):
        buf = io.BytesIO()
        traced.dump(buf, dump_format=fmt, output_names=["sum", "asymm", "wide"])
        module = read_mge(buf.getvalue())
        text = str(module)
        for t in ("!mgb.quant<qint8, 0.05", "!mgb.quant<quint8, 0.019999", ", 131>", "qint32, 0.001"):
            assert t in text, (fmt, t)
        assert "mgb.elemwise_multi_type qfuse_add_relu" in text
        for got, want in zip(run_module(module, [x]), eager, strict=True):
            np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------------------------
# the int8 flow on the hub models


def _model(name: str) -> Any:
    from compiler.hub.convnet import ConvNet
    from compiler.hub.mini_resnet import MiniResNet

    net = {"convnet": ConvNet, "mini_resnet": MiniResNet}[name]()
    w = np.load(data_path(name, "weights.npz"))
    net.load_state_dict({k: w[k] for k in w})
    net.eval()
    return net


SHAPES = {"convnet": (1, 28, 28), "mini_resnet": (3, 32, 32)}
# the stated bound: max |int8 - float| over the fixed sample, relative to max |float logit|
MAX_REL_ERROR = {"convnet": 0.06, "mini_resnet": 0.06}


@pytest.fixture(scope="module", params=["convnet", "mini_resnet"])
def quantized(request: Any) -> tuple[str, Any, Any, np.ndarray]:
    from compiler.quantization import quantize

    name = request.param
    net = _model(name)
    rs = np.random.RandomState(7)
    calib = [rs.randn(16, *SHAPES[name]).astype(np.float32) for _ in range(2 if name == "mini_resnet" else 4)]
    sample = rs.randn(32, *SHAPES[name]).astype(np.float32)
    return name, net, quantize(net, calib), sample


def test_int8_model_tracks_the_float_model(quantized: tuple[str, Any, Any, np.ndarray]) -> None:
    name, net, qnet, sample = quantized
    yf = net(xm.tensor(sample)).numpy()
    yq = qnet(xm.tensor(sample)).numpy()
    agreement = (yq.argmax(1) == yf.argmax(1)).mean()
    rel = np.abs(yq - yf).max() / np.abs(yf).max()
    assert agreement >= 0.99, f"{name}: top-1 agreement {agreement}"
    assert rel <= MAX_REL_ERROR[name], f"{name}: max error {rel:.3f} of the logit range"
    assert rel > 0  # it did run in int8


def test_int8_model_traces_and_dumps_like_megengine(quantized: tuple[str, Any, Any, np.ndarray]) -> None:
    name, _, qnet, sample = quantized
    traced = jit.trace(lambda x: qnet(x), symbolic=True, capture_as_const=True)
    x = sample[:2]
    y = traced(xm.tensor(x)).numpy()
    buf = io.BytesIO()
    traced.dump(buf, arg_names=["data"])
    oprs = parse_file(buf.getvalue())[0].oprs
    kinds = Counter(o.kind or o.type_name for o in oprs)
    convs = [o for o in oprs if (o.kind or o.type_name) == "ConvBias"]
    assert convs and all(o.output_dtype is not None and o.output_dtype.name == "QuantizedS8" for o in convs)
    typecvts = [o for o in oprs if (o.kind or o.type_name) == "TypeCvt"]
    assert typecvts[0] is next(
        o for o in oprs if (o.kind or o.type_name) not in ("Host2DeviceCopy", "ImmutableTensor")
    )
    assert "Convolution" not in kinds and "BatchNorm" not in kinds
    if name == "mini_resnet":
        assert kinds["ElemwiseMultiType"] == 4  # the residual adds
    path = io.BytesIO(buf.getvalue())
    module = read_mge(path.getvalue())
    np.testing.assert_array_equal(run_module(module, [x])[0], y)
