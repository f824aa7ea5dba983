"""ONNX import (``compiler.onnx.load`` / ``backends.onnx.reader.read_onnx``): every result is
checked against ONNX Runtime (graph optimisations off, so it runs the operators as the spec
defines them) on xmge's reference interpreter, and the models also after a ``.mge`` round trip."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import compiler.onnx as xonnx  # noqa: E402
from backends.mge.writer import write_mge  # noqa: E402
from backends.onnx.reader import OnnxImportError, read_onnx  # noqa: E402
from compiler.lite import Network  # noqa: E402
from dialects import tensor as T  # noqa: E402
from semantics import run_module  # noqa: E402

RTOL = 1e-4  # max |ours - onnxruntime| relative to max |onnxruntime|


def ort_run(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, f"shape {ours.shape} != onnxruntime's {ref.shape}"
    if ref.dtype == np.bool_ or ref.dtype.kind in "iu":
        return float((ours.astype(np.int64) != ref.astype(np.int64)).sum())
    scale = max(float(np.abs(ref).max()), 1e-6) if ref.size else 1.0
    return float(np.abs(ours.astype(np.float64) - ref).max() / scale) if ref.size else 0.0


def check(model: bytes, feeds: dict[str, np.ndarray], rtol: float = RTOL) -> tuple[Any, list[np.ndarray]]:
    """Import ``model``, run it on the reference interpreter and compare with onnxruntime."""
    module = read_onnx(model)
    ours = run_module(module, list(feeds.values()))
    ref = ort_run(model, feeds)
    assert len(ours) == len(ref)
    for k, (a, b) in enumerate(zip(ours, ref, strict=True)):
        err = relative_error(a, b)
        assert err <= rtol, f"output {k}: relative error {err:.3g}"
    return module, ours


# ----------------------------------------------------------------------------------------------
# Models exported from PyTorch

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

# Small torchvision-style networks (torchvision is not a dependency): ResNet, MobileNetV2,
# ShuffleNetV2 and a detection backbone with an FPN.


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU):
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, act=None))
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.down(x))


class TinyResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 8, 3, 2), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2), BasicBlock(16, 24, 2))
        self.fc = nn.Linear(24, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            conv_bn(cin, hidden, 1, act=nn.ReLU6),
            conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            conv_bn(hidden, cout, 1, act=None),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class TinyMobileNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 8, 3, 2, act=nn.ReLU6),
            InvertedResidual(8, 8, 1, 1),
            InvertedResidual(8, 12, 2, 4),
            InvertedResidual(12, 12, 1, 4),
            conv_bn(12, 32, 1, act=nn.Hardswish),
        )
        self.classifier = nn.Sequential(
            nn.Dropout(0.2), nn.Linear(32, 16), nn.Hardsigmoid(), nn.Linear(16, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = x.mean([2, 3])
        return torch.softmax(self.classifier(x), dim=1)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    n, c, h, w = x.size()
    x = x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(n, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        branch = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                conv_bn(cin, cin, 3, stride, groups=cin, act=None), conv_bn(cin, branch, 1)
            )
        self.branch2 = nn.Sequential(
            conv_bn(cin if stride > 1 else branch, branch, 1),
            conv_bn(branch, branch, 3, stride, groups=branch, act=None),
            conv_bn(branch, branch, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class TinyShuffleNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 8, 3, 2), nn.MaxPool2d(3, 2, 1, ceil_mode=True))
        self.stages = nn.Sequential(ShuffleUnit(8, 16, 2), ShuffleUnit(16, 16, 1), ShuffleUnit(16, 32, 2))
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.stages(self.stem(x)).mean([2, 3]))


class TinyFPN(nn.Module):
    """A ResNet-style backbone with a feature pyramid: lateral 1x1 convs, top-down nearest and
    bilinear upsampling to the lateral's size, 3x3 output convs, an extra max-pooled level."""

    def __init__(self) -> None:
        super().__init__()
        self.c2 = nn.Sequential(conv_bn(3, 8, 3, 2), BasicBlock(8, 8, 1))
        self.c3 = BasicBlock(8, 16, 2)
        self.c4 = BasicBlock(16, 24, 2)
        self.lateral = nn.ModuleList([nn.Conv2d(c, 16, 1) for c in (8, 16, 24)])
        self.output = nn.ModuleList([nn.Conv2d(16, 16, 3, padding=1) for _ in range(3)])
        self.deconv = nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c2 = self.c2(x)
        c3 = self.c3(c2)
        c4 = self.c4(c3)
        p4 = self.lateral[2](c4)
        p3 = self.lateral[1](c3) + F.interpolate(p4, size=c3.shape[-2:], mode="nearest")
        p2 = self.lateral[0](c2) + F.interpolate(p3, scale_factor=2.0, mode="bilinear", align_corners=False)
        outs = [conv(p) for conv, p in zip(self.output, (p2, p3, p4), strict=True)]
        p5 = F.max_pool2d(outs[-1], 1, stride=2)
        return (*outs, p5, torch.sigmoid(self.deconv(outs[0])))


MODELS = {
    "resnet": TinyResNet,
    "mobilenetv2": TinyMobileNetV2,
    "shufflenetv2": TinyShuffleNetV2,
    "fpn": TinyFPN,
}


EXPORT_OPSETS = tuple(range(11, 22))  # every opset the TorchScript exporter writes up to 21
MAX_ERRORS: dict[tuple[str, int, bool], float] = {}


def export(name: str, opset: int, fold: bool = True) -> tuple[bytes, np.ndarray]:
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    for m in model.modules():  # non-trivial batch-norm statistics
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    x = torch.randn(1, 3, 64, 64)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), f, opset_version=opset, dynamo=False, do_constant_folding=fold)
    return f.getvalue(), x.numpy()


@pytest.mark.parametrize("opset", EXPORT_OPSETS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_model(name: str, opset: int) -> None:
    data, x = export(name, opset)
    input_name = onnx.load_from_string(data).graph.input[0].name
    module, ours = check(data, {input_name: x})
    fn = module.body.block.first_op
    assert fn.attributes["input_names"].data[0].data == input_name
    # .mge round trip: dump, read back with compiler.lite.Network, same numbers
    net = Network(write_mge(module))
    outs = net(**{input_name: x})
    assert list(outs) == [n.data for n in fn.attributes["output_names"].data]
    for got, want in zip(outs.values(), ours, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_model_unfolded(name: str) -> None:
    """Without the exporter's constant folding: BatchNormalization nodes and shape subgraphs
    (Shape, Gather, Unsqueeze, Concat, Cast) that the importer evaluates itself."""
    data, x = export(name, 13, fold=False)
    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert "BatchNormalization" in ops
    module, _ = check(data, {onnx.load_from_string(data).graph.input[0].name: x})
    kinds = {type(op) for op in module.walk()}
    assert T.BatchNormOp in kinds


def test_load_path_and_names(tmp_path: Any) -> None:
    data, x = export("resnet", 17)
    path = tmp_path / "resnet.onnx"
    path.write_bytes(data)
    module = xonnx.load(str(path))
    names = {
        op.attributes["name"].data
        for op in module.walk()
        if isinstance(op, T.ConstOp) and "name" in op.attributes
    }
    assert "fc.weight" in names and "fc.bias" in names  # parameters keep their names
    (y,) = run_module(module, [x])
    assert y.shape == (1, 10)


# ----------------------------------------------------------------------------------------------
# One node at a time

_NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.bool_): TensorProto.BOOL,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.uint16): TensorProto.UINT16,
}


def single(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    consts: Sequence[bool] | None = None,
    opset: int = 17,
    n_outputs: int = 1,
    out_types: Sequence[int] | None = None,
    **attrs: Any,
) -> tuple[bytes, dict[str, np.ndarray]]:
    """A one-node model: ``inputs[i]`` is a graph input unless ``consts[i]`` (an initializer);
    ``None`` leaves an optional input out."""
    consts = list(consts) if consts is not None else [False] * len(inputs)
    names, graph_inputs, inits, feeds = [], [], [], {}
    for i, (a, const) in enumerate(zip(inputs, consts, strict=True)):
        if a is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if const:
            inits.append(numpy_helper.from_array(np.asarray(a), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, _NP_TO_ONNX[a.dtype], a.shape))
            feeds[name] = a
    outs = [f"out{k}" for k in range(n_outputs)]
    types = out_types or [TensorProto.FLOAT] * n_outputs
    node = helper.make_node(op_type, names, outs, name=f"the_{op_type.lower()}", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        graph_inputs,
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, types, strict=True)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString(), feeds


R = np.random.default_rng(7)


def f32(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return R.uniform(lo, hi, shape).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.asarray(values, np.int64)


X = f32(2, 3, 6, 7)
POS = f32(2, 3, 4, 5, lo=0.1, hi=3.0)

UNARY = [
    "Relu",
    "Sigmoid",
    "Tanh",
    "Exp",
    "Neg",
    "Abs",
    "Erf",
    "Floor",
    "Ceil",
    "Sin",
    "Cos",
    "Softplus",
    "Sign",
    "HardSwish",
    "Reciprocal",
    "Elu",
    "Selu",
    "LeakyRelu",
    "HardSigmoid",
    "Identity",
]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op: str) -> None:
    check(*single(op, [X]))


@pytest.mark.parametrize("op", ["Log", "Sqrt"])
def test_unary_positive(op: str) -> None:
    check(*single(op, [POS]))


@pytest.mark.parametrize(
    "op, attrs, opset",
    [
        ("Elu", {"alpha": 0.7}, 17),
        ("LeakyRelu", {"alpha": 0.1}, 17),
        ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, 17),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 17),
        ("Gelu", {}, 20),
        ("Gelu", {"approximate": "tanh"}, 20),
        ("Mish", {}, 18),
        ("Softmax", {"axis": 1}, 11),  # opsets < 13 flatten from ``axis``
        ("Softmax", {"axis": 1}, 13),
        ("Softmax", {}, 13),
        ("LogSoftmax", {"axis": 2}, 13),
        ("LogSoftmax", {"axis": 2}, 11),
        ("Dropout", {}, 13),
    ],
)
def test_unary_with_attributes(op: str, attrs: dict[str, Any], opset: int) -> None:
    check(*single(op, [X], opset=opset, **attrs))


BROADCAST_CASES = [
    ("Add", [X, f32(3, 1, 1)], [False, True]),
    ("Add", [X, f32(7)], [False, False]),
    ("Sub", [f32(1, 3, 1, 7), X], [True, False]),
    ("Mul", [X, np.asarray(1.5, np.float32)], [False, True]),  # a 0-d constant
    ("Div", [X, f32(2, 1, 6, 1, lo=0.5, hi=2.0)], [False, False]),
    ("Pow", [POS, np.asarray(2.0, np.float32)], [False, True]),
    ("Pow", [POS, f32(5, lo=-1, hi=2)], [False, False]),
    ("Max", [X, f32(3, 1, 1), f32(7)], [False, True, False]),
    ("Min", [X, f32(6, 7)], [False, False]),
    ("Sum", [X, f32(3, 1, 1), X], [False, True, False]),
    ("Mean", [X, f32(1, 7)], [False, False]),
    ("PRelu", [X, f32(3, 1, 1)], [False, True]),
    ("Mod", [X, f32(7, lo=0.5, hi=1.5)], [False, True]),
]


@pytest.mark.parametrize(
    "op, inputs, consts", BROADCAST_CASES, ids=[c[0] + str(i) for i, c in enumerate(BROADCAST_CASES)]
)
def test_broadcasting_elemwise(op: str, inputs: list[np.ndarray], consts: list[bool]) -> None:
    attrs = {"fmod": 1} if op == "Mod" else {}
    check(*single(op, inputs, consts, **attrs))


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons(op: str) -> None:
    a = np.round(X)
    check(*single(op, [a, np.round(f32(7))], out_types=[TensorProto.BOOL]))


@pytest.mark.parametrize(
    "inputs, consts, opset",
    [
        ([X, np.float32(-0.5), np.float32(1.0)], [False, True, True], 13),
        ([X, None, np.float32(0.3)], [False, False, True], 13),
        ([X, np.float32(0.0)], [False, True], 11),
    ],
)
def test_clip(inputs: list[Any], consts: list[bool], opset: int) -> None:
    inputs = [None if a is None else np.asarray(a) for a in inputs]
    check(*single("Clip", inputs, consts, opset=opset))


CONV_CASES = [
    ({}, 1, (4, 3, 3, 3), True),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 2]}, 1, (4, 3, 3, 3), True),
    ({"pads": [0, 1, 2, 1]}, 1, (4, 3, 3, 3), False),  # asymmetric
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 1, (4, 3, 4, 4), True),
    ({"auto_pad": "SAME_LOWER", "strides": [2, 2]}, 1, (4, 3, 4, 4), False),
    ({"group": 3, "pads": [1, 1, 1, 1]}, 3, (6, 1, 3, 3), True),  # depthwise
]


@pytest.mark.parametrize("attrs, group, wshape, bias", CONV_CASES)
def test_conv(attrs: dict[str, Any], group: int, wshape: tuple[int, ...], bias: bool) -> None:
    ins = [X, f32(*wshape)] + ([f32(wshape[0])] if bias else [])
    check(*single("Conv", ins, [False, True, True][: len(ins)], **attrs))


CONV_T_CASES = [
    ({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, (3, 4, 3, 3)),
    ({"strides": [2, 2], "pads": [0, 1, 2, 1]}, (3, 4, 3, 3)),
    ({"strides": [2, 2], "output_shape": [12, 14]}, (3, 4, 3, 3)),
    ({"strides": [2, 2], "auto_pad": "SAME_UPPER", "output_shape": [11, 13]}, (3, 4, 3, 3)),
    ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, (3, 4, 4, 4)),
    ({"strides": [2, 2], "auto_pad": "SAME_LOWER"}, (3, 4, 3, 3)),
    ({"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 1]}, (3, 4, 3, 3)),
    ({"group": 3, "strides": [2, 1], "dilations": [1, 2]}, (3, 2, 3, 3)),
]


@pytest.mark.parametrize("attrs, wshape", CONV_T_CASES)
def test_conv_transpose(attrs: dict[str, Any], wshape: tuple[int, ...]) -> None:
    out_c = wshape[1] * attrs.get("group", 1)
    check(*single("ConvTranspose", [X, f32(*wshape), f32(out_c)], [False, True, True], **attrs))


@pytest.mark.parametrize("out_shape", [(14, 16), (13, 16)])
def test_conv_transpose_output_shape_beyond_the_full_result(out_shape: tuple[int, int]) -> None:
    """An output_shape beyond the full result: zero rows and columns (plus the bias) there, as the
    spec's reference computes it (onnxruntime refuses such a model)."""
    from onnx.reference import ReferenceEvaluator

    model, feeds = single(
        "ConvTranspose",
        [X, f32(3, 4, 3, 3), f32(4)],
        [False, True, True],
        strides=[2, 2],
        output_shape=out_shape,
    )
    (ours,) = run_module(read_onnx(model), list(feeds.values()))
    (want,) = ReferenceEvaluator(onnx.load_from_string(model)).run(None, feeds)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)


def test_gemm() -> None:
    a, b, c = f32(5, 4), f32(6, 5), f32(6)
    check(*single("Gemm", [a, b, c], [False, True, True], transA=1, transB=1, alpha=0.5, beta=2.0))
    check(*single("Gemm", [f32(3, 4), f32(4, 6), f32(3, 6)], [False, False, False], beta=0.5))


@pytest.mark.parametrize(
    "sa, sb, const_b",
    [
        ((3, 4), (4, 5), True),
        ((2, 3, 4), (4, 5), True),
        ((2, 1, 3, 4), (5, 4, 2), False),
        ((4,), (4, 5), True),
        ((2, 3, 4), (4,), True),
    ],
)
def test_matmul(sa: tuple[int, ...], sb: tuple[int, ...], const_b: bool) -> None:
    check(*single("MatMul", [f32(*sa), f32(*sb)], [False, const_b]))


def test_batch_norm_and_layer_norm() -> None:
    c = X.shape[1]
    stats = [f32(c, lo=0.5, hi=1.5), f32(c), f32(c), f32(c, lo=0.5, hi=2.0)]
    check(*single("BatchNormalization", [X, *stats], [False, True, True, True, True], epsilon=1e-3))
    check(*single("LayerNormalization", [X, f32(6, 7), f32(6, 7)], [False, True, True], axis=-2))
    check(*single("LayerNormalization", [X, f32(7), None], [False, True, False]))


POOL_CASES = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (
        "AveragePool",
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    (
        "AveragePool",
        {
            "kernel_shape": [3, 2],
            "strides": [2, 2],
            "pads": [1, 0, 1, 1],
            "ceil_mode": 1,
            "count_include_pad": 1,
        },
    ),
    ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
]


@pytest.mark.parametrize("op, attrs", POOL_CASES)
def test_pooling(op: str, attrs: dict[str, Any]) -> None:
    check(*single(op, [X], **attrs))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pooling(op: str) -> None:
    check(*single(op, [X]))
    check(*single(op, [f32(2, 3, 5)]))


@pytest.mark.parametrize(
    "op, opset, axes, keepdims",
    [
        ("ReduceMean", 13, [2, 3], 0),
        ("ReduceMean", 18, [-1], 1),
        ("ReduceSum", 13, [1], 1),
        ("ReduceSum", 13, None, 0),
        ("ReduceMax", 17, [0, 2], 1),
        ("ReduceMin", 18, [3], 0),
        ("ReduceProd", 13, [1], 1),
        ("ReduceSumSquare", 13, [2, 3], 1),
        ("ReduceL1", 13, [1], 0),
        ("ReduceL2", 18, [1, 3], 1),
        ("ReduceLogSumExp", 13, [2], 1),
        ("ReduceLogSum", 13, [2], 1),
    ],
)
def test_reductions(op: str, opset: int, axes: list[int] | None, keepdims: int) -> None:
    as_input = axes is not None and (opset >= 18 or (op == "ReduceSum" and opset >= 13))
    data = POS if op in ("ReduceLogSum", "ReduceProd") else X[:, :, :4, :5]
    if as_input:
        check(*single(op, [data, i64(*axes)], [False, True], opset=opset, keepdims=keepdims))
    elif axes is None:
        check(*single(op, [data], opset=opset, keepdims=keepdims))
    else:
        check(*single(op, [data], opset=opset, axes=axes, keepdims=keepdims))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reductions(op: str) -> None:
    check(*single(op, [X], axis=1, keepdims=0, out_types=[TensorProto.INT64]))
    check(*single(op, [X], axis=-1, out_types=[TensorProto.INT64]))


def test_shape_ops() -> None:
    check(*single("Concat", [X, f32(2, 1, 6, 7), X], [False, True, False], axis=1))
    check(*single("Reshape", [X, i64(0, -1, 7)], [False, True]))
    check(*single("Flatten", [X], axis=2))
    check(*single("Transpose", [X], perm=[0, 2, 3, 1]))
    check(*single("Transpose", [X]))
    check(*single("Squeeze", [f32(2, 1, 3, 1)], opset=11, axes=[1, -1]))
    check(*single("Squeeze", [f32(2, 1, 3, 1), i64(3)], [False, True], opset=13))
    check(*single("Unsqueeze", [X], opset=11, axes=[0, 5]))
    check(*single("Unsqueeze", [X, i64(-1, 1)], [False, True], opset=13))
    check(*single("Expand", [f32(3, 1, 7), i64(2, 1, 6, 1)], [False, True]))
    check(*single("Tile", [f32(2, 3, 4), i64(1, 2, 3)], [False, True]))


@pytest.mark.parametrize(
    "inputs, attrs, opset, n",
    [
        ([X], {"axis": 1, "split": [1, 2]}, 11, 2),
        ([X, i64(2, 4)], {"axis": 2}, 13, 2),
        ([X], {"axis": -1}, 13, 7),
        ([X], {"axis": 3, "num_outputs": 3}, 18, 3),  # 3, 3, 1
    ],
)
def test_split(inputs: list[np.ndarray], attrs: dict[str, Any], opset: int, n: int) -> None:
    check(*single("Split", inputs, [False] + [True] * (len(inputs) - 1), opset=opset, n_outputs=n, **attrs))


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ((1, 0), (3, -1), (2, 3), None),
        ((-1,), (-(2**63),), (3,), (-1,)),  # reversed
        ((5, 1), (0, 100), (2, 1), (-2, 1)),
        ((0,), (2**63 - 1,), (1,), (2,)),
    ],
)
def test_slice(starts: tuple[int, ...], ends: tuple[int, ...], axes: tuple[int, ...], steps: Any) -> None:
    ins = [X, i64(*starts), i64(*ends), i64(*axes)] + ([i64(*steps)] if steps else [])
    check(*single("Slice", ins, [False] + [True] * (len(ins) - 1)))


@pytest.mark.parametrize(
    "indices, axis",
    [
        (np.asarray(1, np.int64), 1),
        (i64(-1, 2), 3),
        (i64(0, 2, 4), 2),
        (np.asarray([[0, 2], [1, 1]], np.int64), 1),
    ],
)
def test_gather(indices: np.ndarray, axis: int) -> None:
    check(*single("Gather", [X, indices], [False, True], axis=axis))
    # the same indices given at run time (token ids): advanced indexing on the axis
    check(*single("Gather", [X, indices], [False, False], axis=axis))


@pytest.mark.parametrize(
    "mode, pads, opset, extra",
    [
        ("constant", (0, 0, 1, 2, 0, 0, 2, 1), 11, [np.float32(0.5)]),
        ("reflect", (0, 0, 2, 1, 0, 0, 1, 2), 13, []),
        ("edge", (0, 1, 1, 0, 0, 0, 2, 2), 13, []),
        ("constant", (0, 0, -1, 2, 0, 0, 1, -2), 13, []),  # negative pads crop
        ("constant", (1, 2, 3, 1), 18, [np.float32(-1.0), i64(2, 3)]),  # axes input
    ],
)
def test_pad(mode: str, pads: tuple[int, ...], opset: int, extra: list[Any]) -> None:
    ins = [X, i64(*pads), *[np.asarray(e) for e in extra]]
    check(*single("Pad", ins, [False] + [True] * (len(ins) - 1), opset=opset, mode=mode))


@pytest.mark.parametrize(
    "attrs, scales, sizes, opset",
    [
        (
            {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
            (1, 1, 2, 2),
            None,
            11,
        ),
        ({"mode": "nearest"}, (1, 1, 2, 3), None, 13),  # half_pixel, round_prefer_floor
        ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, (1, 1, 2, 2), None, 13),
        ({"mode": "linear"}, None, (2, 3, 9, 5), 13),  # half_pixel, up and down
        ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, None, (2, 3, 3, 14), 19),
        # beyond MegEngine's Resize: a resampling matrix per axis
        ({"mode": "cubic"}, (1, 1, 2, 1.5), None, 13),
        ({"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, None, (2, 3, 4, 9), 13),
        ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, (1, 1, 0.5, 2), None, 19),
        ({"mode": "linear", "antialias": 1}, None, (2, 3, 3, 4), 19),
        ({"mode": "cubic", "antialias": 1}, (1, 1, 0.6, 0.7), None, 19),
        ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, (1, 1, 1.5, 3), None, 13),
        (
            {"mode": "nearest", "coordinate_transformation_mode": "align_corners", "nearest_mode": "ceil"},
            (1, 1, 2, 2),
            None,
            13,
        ),
        (
            {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
            (1, 1, 0.7, 1.6),
            None,
            19,
        ),
        ({"mode": "linear"}, (1, 2, 1, 1), None, 13),  # the channel axis
        ({"mode": "linear"}, (1, 1, 2, 2), None, 10),  # Resize-10: asymmetric
        ({"mode": "nearest"}, (1, 1, 3, 2), None, 10),
    ],
)
def test_resize(attrs: dict[str, Any], scales: Any, sizes: Any, opset: int) -> None:
    roi = np.zeros(0, np.float32)
    sc = np.asarray(scales, np.float32) if scales else np.zeros(0, np.float32)
    if opset == 10:  # Resize-10 takes (X, scales)
        check(*single("Resize", [X, sc], [False, True], opset=opset, **attrs))
        return
    ins = [X, roi, sc] + ([i64(*sizes)] if sizes else [])
    if opset >= 13 and not scales:
        ins[2] = None
    if opset >= 13:
        ins[1] = None
    check(*single("Resize", ins, [False, True, True, True][: len(ins)], opset=opset, **attrs))


def test_shape_subgraph_is_folded() -> None:
    """Shape → Gather → Unsqueeze → Concat → Reshape, ConstantOfShape, Range, Cast: all evaluated
    while importing; only the data path remains in the IR."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("Shape", ["flat"], ["fs"], start=1),
        helper.make_node(
            "ConstantOfShape", ["fs"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))
        ),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["ones", "rf"], ["bias"]),
        helper.make_node("Mul", ["flat", "bias"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
        numpy_helper.from_array(i64(0), "zero1"),
        numpy_helper.from_array(i64(-1), "minus1"),
        numpy_helper.from_array(np.asarray(0, np.int64), "start"),
        numpy_helper.from_array(np.asarray(X[0].size, np.int64), "limit"),
        numpy_helper.from_array(np.asarray(1, np.int64), "delta"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    module, _ = check(model.SerializeToString(), {"x": X})
    kinds = sorted(op.name for op in module.walk() if isinstance(op, T.MgbOp))
    assert kinds == ["mgb.const", "mgb.elemwise", "mgb.reshape"]


@pytest.mark.parametrize(
    "op, inputs, attrs",
    [
        ("Conv", [f32(2, 3, 11), f32(4, 3, 3)], {"strides": [2], "pads": [1, 2], "dilations": [2]}),
        ("Conv", [f32(1, 4, 9), f32(4, 2, 3)], {"group": 2, "auto_pad": "SAME_UPPER"}),
        ("ConvTranspose", [f32(1, 3, 6), f32(3, 2, 3)], {"strides": [2], "output_padding": [1]}),
        ("MaxPool", [f32(2, 3, 10)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
        ("AveragePool", [f32(1, 2, 9)], {"kernel_shape": [4], "ceil_mode": 1, "strides": [2]}),
        # dilated 2-D pooling: a strided slice per window tap
        ("MaxPool", [f32(1, 2, 9, 8)], {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [1, 1, 2, 0]}),
        (
            "AveragePool",
            [f32(1, 2, 9, 8)],
            {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 0, 1, 2], "count_include_pad": 1},
        ),
        ("AveragePool", [f32(1, 1, 7, 7)], {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 2]}),
        # 3-D pooling: a 2-D pooling over (H, W), then one over D
        ("MaxPool", [f32(1, 2, 5, 6, 7)], {"kernel_shape": [3, 2, 3], "strides": [2, 1, 2], "pads": [1] * 6}),
        (
            "AveragePool",
            [f32(2, 2, 5, 6, 7)],
            {"kernel_shape": [2, 3, 2], "strides": [2, 2, 1], "pads": [0, 1, 1, 1, 1, 0], "ceil_mode": 1},
        ),
        (
            "AveragePool",
            [f32(1, 1, 6, 5, 4)],
            {"kernel_shape": [3, 3, 3], "pads": [1] * 6, "count_include_pad": 1},
        ),
    ],
)
def test_one_dimensional_conv_and_pool(op: str, inputs: list[np.ndarray], attrs: dict[str, Any]) -> None:
    """(N, C, L) convolutions and pooling: the 2-D kernels on (N, C, 1, L); dilated and 3-D
    pooling."""
    check(*single(op, inputs, [False] + [True] * (len(inputs) - 1), opset=22, **attrs))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint16])
def test_integer_div_truncates(dtype: type) -> None:
    """Integer Div is C's (toward zero), for mixed signs too; onnxruntime agrees."""
    info = np.iinfo(dtype)
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3), (5, 7), (info.max, 3), (info.min, 3), (-9, 4)]
    pairs = [(x, y) for x, y in pairs if info.min <= min(x, y)]
    a = np.array([x for x, _ in pairs], dtype)
    b = np.array([y for _, y in pairs], dtype)
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    check(*single("Div", [a, b], out_types=[onnx_type], opset=14))


def test_cast() -> None:
    check(*single("Cast", [X * 3], to=TensorProto.INT32, out_types=[TensorProto.INT32]))
    check(*single("Cast", [X], to=TensorProto.FLOAT))


def test_quantize_dequantize() -> None:
    """QuantizeLinear → qint8 / quint8 (``mgb.typecvt``), DequantizeLinear back to float32; a
    per-tensor int8 weight stays a qint8 constant."""
    scale = np.asarray(0.02, np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp8"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "zp8"], ["dq"]),
        helper.make_node("QuantizeLinear", ["x", "s", "zpu"], ["qu"]),
        helper.make_node("DequantizeLinear", ["qu", "s", "zpu"], ["dqu"]),
        helper.make_node("DequantizeLinear", ["w8", "ws", "zp8"], ["w"]),
        helper.make_node("DequantizeLinear", ["wc", "wcs", "zpc"], ["wch"], axis=0),  # per channel
        helper.make_node("Conv", ["dq", "w"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["dqu", "wch"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c1", "c2"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(scale, "s"),
        numpy_helper.from_array(np.asarray(0, np.int8), "zp8"),
        numpy_helper.from_array(np.asarray(128, np.uint8), "zpu"),
        numpy_helper.from_array(R.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), "w8"),
        numpy_helper.from_array(np.asarray(0.01, np.float32), "ws"),
        numpy_helper.from_array(R.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), "wc"),
        numpy_helper.from_array(np.asarray([0.01, 0.02, 0.03, 0.04], np.float32), "wcs"),
        numpy_helper.from_array(np.zeros(4, np.int8), "zpc"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    module, _ = check(model.SerializeToString(), {"x": X})
    text = str(module)
    assert "!mgb.quant<qint8, 0.019999999552965164>" in text
    assert "!mgb.quant<quint8, 0.019999999552965164, 128>" in text
    assert "tensor<4x3x3x3x!mgb.quant<qint8, 0.009999999776482582>>" in text


def test_dynamic_input_shape() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    with pytest.raises(
        OnnxImportError, match=r"graph input 'x' has a dynamic dimension 0 \('batch'\).*input_shapes"
    ):
        read_onnx(data)
    module = xonnx.load(data, input_shapes={"x": (4, 3)})
    (y,) = run_module(module, [X[0, :, 0, :4].T.copy()])
    assert y.shape == (4, 3)


# ----------------------------------------------------------------------------------------------
# Errors: the op type, the node and the opset, without a deep traceback


@pytest.mark.parametrize(
    "data, pattern",
    [
        (single("LRN", [X], size=3), r"^LRN node 'the_lrn' \(opset 17\): operator LRN is not supported"),
        (
            single("Round", [X]),
            r"Round node 'the_round' \(opset 17\): operator Round is not supported .* at run time",
        ),
        (
            single(
                "Resize",
                [X, None, np.asarray([1, 1, 2, 2], np.float32)],
                [False, False, True],
                mode="lanczos",
            ),
            r"Resize node 'the_resize' \(opset 17\): mode 'lanczos' is not an ONNX Resize mode",
        ),
        (
            single(
                "Resize",
                [X, None, np.asarray([1, 1, 2, 2], np.float32)],
                [False, False, True],
                coordinate_transformation_mode="tf_crop_and_resize",
            ),
            r"Resize node 'the_resize' \(opset 17\): roi \[\] needs a start and an end per resized axis",
        ),
        (
            single(
                "Resize",
                [X, None, np.asarray([1, 1, 2, 2], np.float32)],
                [False, False, True],
                mode="nearest",
                antialias=1,
            ),
            r"antialias=1 is not defined for mode 'nearest'",
        ),
        (
            single("MaxPool", [f32(1, 1, 2, 3, 4, 5)], kernel_shape=[2, 2, 2, 2]),
            r"MaxPool node .*got a rank-6 input",
        ),
        (
            single("Slice", [X, i64(0), i64(2)], [False, False, True]),
            r"Slice node 'the_slice' \(opset 17\): starts \(input 1\) is graph input 'in1', which must be "
            r"known when importing: make it a constant or pass input_values=\{'in1': ...\}",
        ),
        (
            single(
                "QuantizeLinear",
                [X, np.asarray(0.1, np.float32), np.zeros((), np.int8)],
                [True, True, True],
                out_types=[TensorProto.INT8],
            ),
            r"QuantizeLinear node 'the_quantizelinear' \(opset 17\): quantizing a constant is not supported",
        ),
        (
            single(
                "QuantizeLinear",
                [X, np.float32(0.1), np.int8(3)],
                [False, True, True],
                out_types=[TensorProto.INT8],
            ),
            r"int8 with zero point 3",
        ),
        (
            single("MaxPool", [X], n_outputs=2, kernel_shape=[2, 2], dilations=[2, 2]),
            r"MaxPool node 'the_maxpool' \(opset 17\): the Indices output with dilations is not supported",
        ),
        (
            single("Dropout", [X, np.float32(0.5), np.bool_(True)], [False, True, True], opset=15),
            r"Dropout node 'the_dropout' \(opset 15\): training_mode=True with ratio 0.5 is not supported",
        ),
        (single("Relu", [X], opset=5), r"opset 5 is not supported: its Relu differs from opset 7.s"),
        (single("Relu", [X], opset=29), r"opset 29 is not supported: xmge imports opsets 7 to 28"),
        (b"not an onnx file", r"not an ONNX model"),
    ],
)
def test_errors(data: Any, pattern: str) -> None:
    model = data[0] if isinstance(data, tuple) else data
    with pytest.raises(OnnxImportError, match=pattern):
        read_onnx(model)


def test_custom_domain_error() -> None:
    node = helper.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft", name="fc")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    with pytest.raises(
        OnnxImportError, match=r"FusedConv node 'fc' \(opset 17\): operators of domain 'com.microsoft'"
    ):
        read_onnx(model.SerializeToString())


def test_missing_file_error(tmp_path: Any) -> None:
    with pytest.raises(OnnxImportError, match="cannot read the ONNX model"):
        xonnx.load(str(tmp_path / "missing.onnx"))


def test_xmge_opt_reads_onnx(tmp_path: Any, capsys: Any) -> None:
    from compiler.driver.opt import main

    path = tmp_path / "conv.onnx"
    data, _ = single("Conv", [X, f32(4, 3, 3, 3)], [False, True], pads=[1, 1, 1, 1])
    path.write_bytes(data)
    main([str(path), "-p", "canonicalize"])
    assert "mgb.convolution" in capsys.readouterr().out
    bad = tmp_path / "lrn.onnx"
    bad.write_bytes(single("LRN", [X], size=3)[0])
    with pytest.raises(SystemExit):
        main([str(bad)])
    err = capsys.readouterr().err
    assert err.startswith("xmge-opt: error: LRN node 'the_lrn' (opset 17)") and err.count("\n") == 1


@pytest.mark.parametrize(
    "op, lo, hi",
    [
        ("Asin", -0.9, 0.9),
        ("Acos", -0.9, 0.9),
        ("Atanh", -0.9, 0.9),
        ("Acosh", 1.1, 3.0),
        ("Asinh", -3.0, 3.0),
        ("Sinh", -2.0, 2.0),
        ("Cosh", -2.0, 2.0),
        ("Tan", -1.2, 1.2),
    ],
)
def test_unary_in_domain(op: str, lo: float, hi: float) -> None:
    check(*single(op, [f32(2, 3, 4, lo=lo, hi=hi)]))


def test_logical_and_special_values() -> None:
    a, b = X > 0, f32(7) > 0.5
    for op in ("And", "Or", "Xor"):
        check(*single(op, [a, b], out_types=[TensorProto.BOOL]))
    check(*single("Not", [a], out_types=[TensorProto.BOOL]))
    special = X.copy()
    special[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    check(*single("IsNaN", [special], out_types=[TensorProto.BOOL]))
    check(*single("IsInf", [special], out_types=[TensorProto.BOOL]))
    check(*single("CastLike", [X * 4, np.zeros(1, np.int32)], [False, True], out_types=[TensorProto.INT32]))


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 3], "strides": [2, 1], "ceil_mode": 1},
        {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1},
    ],
)
def test_max_pool_indices(attrs: dict[str, Any]) -> None:
    # ties included (rounded inputs): the first maximum in the window wins, as onnxruntime picks
    x = np.round(f32(2, 3, 7, 6), 1)
    model, feeds = single(
        "MaxPool", [x], n_outputs=2, out_types=[TensorProto.FLOAT, TensorProto.INT64], opset=12, **attrs
    )
    check(model, feeds, rtol=0.0)


def test_uint32_arithmetic_beyond_int32() -> None:
    a = np.array([4_000_000_000, 7, 2**32 - 1], np.uint32)
    b = np.array([5, 9, 1], np.uint32)
    for op, want in (("Sub", a - b), ("Div", a // b), ("Max", np.maximum(a, b)), ("Less", a < b)):
        types = [TensorProto.BOOL if op == "Less" else TensorProto.UINT32]
        model, feeds = single(op, [a, b], opset=14, out_types=types)
        (got,) = run_module(read_onnx(model), list(feeds.values()))
        assert got.dtype == want.dtype and np.array_equal(got, want), op


def test_uint64_beyond_uint32_is_one_line_error() -> None:
    big = np.array([2**40], np.uint64)
    model, _ = single("Add", [big, big], consts=[True, True], opset=14, out_types=[TensorProto.UINT64])
    with pytest.raises(OnnxImportError, match="beyond uint32"):
        read_onnx(model)


@pytest.mark.parametrize("to", ["INT4", "UINT4", "INT2", "UINT2"])
def test_cast_to_sub_byte_integers_wraps(to: str) -> None:
    from onnx.reference import ReferenceEvaluator

    x = np.array([-9.7, -8.5, -2.2, -0.5, 0.0, 1.5, 2.5, 7.9, 8.0, 15.2, 17.0], np.float32)
    model, feeds = single(
        "Cast", [x], opset=21, to=getattr(TensorProto, to), out_types=[getattr(TensorProto, to)]
    )
    (got,) = run_module(read_onnx(model), list(feeds.values()))
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got, want.astype(np.int16))


@pytest.mark.parametrize("zp_type", ["INT4", "UINT4"])
def test_quantize_to_int4_saturates(zp_type: str) -> None:
    from onnx.reference import ReferenceEvaluator

    x = np.linspace(-20, 20, 17, dtype=np.float32)
    zp = numpy_helper.to_array(helper.make_tensor("zp", getattr(TensorProto, zp_type), [], [1]))
    model, feeds = single(
        "QuantizeLinear",
        [x, np.array(2.0, np.float32), zp],
        consts=[False, True, True],
        opset=21,
        out_types=[getattr(TensorProto, zp_type)],
    )
    (got,) = run_module(read_onnx(model), list(feeds.values()))
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got, want.astype(np.int16))


@pytest.mark.parametrize(
    "attrs, group, const_w",
    [
        ({}, 1, False),
        ({"strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1], "output_padding": [1, 0, 1]}, 1, True),
        ({"dilations": [2, 1, 1], "strides": [3, 2, 1], "pads": [0, 1, 0, 2, 0, 0]}, 2, True),
    ],
)
def test_conv_transpose_3d(attrs: dict[str, Any], group: int, const_w: bool) -> None:
    x = f32(2, 4, 3, 4, 5)
    w = f32(4, 6 // group, 3, 2, 3)
    b = f32(6)
    model, feeds = single("ConvTranspose", [x, w, b], consts=[False, const_w, True], group=group, **attrs)
    check(model, feeds)


def test_uint32_to_mge_is_one_line_error() -> None:
    from compiler.dump import dump_module
    from dialects.dtypes import DTypeError

    a = np.array([1, 2], np.uint32)
    model, _ = single("Add", [a, a], opset=14, out_types=[TensorProto.UINT32])
    with pytest.raises(DTypeError, match="no uint32 dtype"):
        dump_module(read_onnx(model))
