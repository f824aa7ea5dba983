"""Real models through ``torch.onnx.export`` at its default opset, with both exporters (the
default torch.export-based one, ``dynamo=True``, and the TorchScript one): small ResNet,
MobileNetV2, ShuffleNetV2 and FPN backbones, a transformer encoder (on features and on token ids)
and a detection head with NMS-free post-processing import, run on the reference and compiled for
the host, and match onnxruntime. Exports and gcc runs take seconds each: all but one model are ``slow``."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from backends.onnx.reader import read_onnx  # noqa: E402
from compiler.driver.compile import compile as xcompile  # noqa: E402
from semantics import run_module  # noqa: E402
from tests.test_onnx_import import MODELS as BACKBONES  # noqa: E402


class TransformerEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


class TokenEncoder(nn.Module):
    """Token ids in (int64, a graph input): an embedding lookup (Gather on run-time indices) with
    learned positions before the transformer encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(50, 32)
        self.positions = nn.Parameter(torch.randn(1, 7, 32) * 0.1)
        self.encoder = TransformerEncoder()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.tokens(ids) + self.positions)


class DetectionHead(nn.Module):
    """A one-stage (FCOS / YOLOX-style) head on a tiny backbone with NMS-free post-processing:
    per-cell class scores and boxes decoded on the grid, the best class per cell."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU())
        self.cls = nn.Conv2d(16, classes, 1)
        self.reg = nn.Conv2d(16, 4, 1)
        self.stride = 4

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = self.stem(x)
        n, _, h, w = f.shape
        scores = torch.sigmoid(self.cls(f)).flatten(2).transpose(1, 2)  # (n, h*w, classes)
        reg = self.reg(f).flatten(2).transpose(1, 2)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        centers = (torch.stack([xs, ys], -1).reshape(1, h * w, 2).float() + 0.5) * self.stride
        sizes = torch.exp(reg[..., 2:].clamp(max=4.0)) * self.stride
        boxes = torch.cat([centers + reg[..., :2] - sizes / 2, centers + reg[..., :2] + sizes / 2], -1)
        best, label = scores.max(-1)
        return boxes, best, label


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name == "transformer":
        return TransformerEncoder().eval(), torch.randn(2, 7, 32)
    if name == "tokens":
        return TokenEncoder().eval(), torch.randint(0, 50, (2, 7))
    if name == "detection":
        return DetectionHead().eval(), torch.randn(1, 3, 32, 40)
    model = BACKBONES[name]().eval()
    for m in model.modules():  # non-trivial batch-norm statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model, torch.randn(1, 3, 64, 64)


def export(model: nn.Module, x: torch.Tensor, dynamo: bool) -> bytes:
    """``torch.onnx.export`` at its default opset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            return torch.onnx.export(model, (x,), dynamo=True, verbose=False).model_proto.SerializeToString()
        f = io.BytesIO()
        torch.onnx.export(model, (x,), f, dynamo=False)
        return f.getvalue()


def check(name: str, dynamo: bool, compiled: bool) -> None:
    if dynamo:
        pytest.importorskip("onnxscript")
    model, x = build(name)
    data = export(model, x, dynamo)
    feeds = {onnx.load_from_string(data).graph.input[0].name: x.numpy()}
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    module = read_onnx(data)
    runs = {"reference": run_module(module, [x.numpy()])}
    if compiled:
        runs["compiled"] = xcompile(module, "x86").run([x.numpy()])
    for runner, outs in runs.items():
        assert len(outs) == len(want)
        for k, (a, b) in enumerate(zip(outs, want, strict=True)):
            assert a.shape == b.shape, (runner, k)
            if b.dtype.kind in "iu":
                np.testing.assert_array_equal(a, b, err_msg=f"{runner} output {k}")
            else:
                scale = max(float(np.abs(b).max()), 1e-6)
                err = float(np.abs(a - b).max()) / scale
                assert err < 1e-4, f"{runner} output {k}: relative error {err:.3g}"


def test_resnet_default_exporter_compiled() -> None:
    check("resnet", dynamo=True, compiled=True)


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize(
    "name", ["resnet", "mobilenetv2", "shufflenetv2", "fpn", "transformer", "tokens", "detection"]
)
def test_model(name: str, dynamo: bool) -> None:
    check(name, dynamo, compiled=True)
