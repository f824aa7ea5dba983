"""Zoo-style model source written against MegEngine's names runs with only the import changed.

``megengine`` and every ``megengine.<sub>`` resolve to ``compiler`` / ``compiler.<sub>`` (a
meta-path alias, the programmatic form of replacing ``import megengine`` by ``import compiler``),
then each source below (written the way MegEngine's model zoo writes its models, not copied
from it) is executed as a module and checked against PyTorch or its own traced replay.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import io
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF


class _MegEngineAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == "megengine" or fullname.startswith("megengine."):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return importlib.import_module("compiler" + spec.name[len("megengine") :])

    def exec_module(self, module: types.ModuleType) -> None:
        return None  # the compiler module is already initialised


@pytest.fixture()
def megengine() -> Iterator[None]:
    finder = _MegEngineAlias()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == "megengine" or n.startswith("megengine.")]:
            del sys.modules[name]


def load_source(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<zoo:{name}>", "exec"), module.__dict__)
    return module


CLASSIFIER = """
import megengine as mge
import megengine.functional as F
import megengine.hub as hub
import megengine.module as M
from megengine.module.normalization import GroupNorm


class Block(M.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv = M.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn = M.BatchNorm2d(cout)
        self.gn = GroupNorm(2, cout)
        self.down = M.Sequential(M.Conv2d(cin, cout, 1, stride, bias=False), M.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.gn(self.bn(self.conv(x))) + self.down(x))


class Net(M.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.layer1 = Block(3, 8, 2)
        self.layer2 = Block(8, 16, 2)
        self.fc = M.Linear(16, num_classes)
        for m in self.modules():
            if isinstance(m, M.Conv2d):
                M.init.msra_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (M.BatchNorm2d, GroupNorm)):
                M.init.fill_(m.weight, 1.5)
                M.init.uniform_(m.bias, -0.1, 0.1)
            elif isinstance(m, M.Linear):
                fan_in, _ = M.init.calculate_fan_in_and_fan_out(m.weight)
                M.init.normal_(m.weight, std=fan_in ** -0.5)
                M.init.zeros_(m.bias)

    def forward(self, x):
        x = self.layer2(self.layer1(x))
        x = F.avg_pool2d(x, x.shape[2:])
        return self.fc(F.flatten(x, 1))
"""


def _torch_block(x: torch.Tensor, b: Any) -> torch.Tensor:
    def bn(t: torch.Tensor, m: Any) -> torch.Tensor:
        p = lambda v: torch.from_numpy(v.numpy().reshape(-1))  # noqa: E731
        return TF.batch_norm(
            t, p(m.running_mean), p(m.running_var), p(m.weight), p(m.bias), False, 0.0, m.eps
        )

    w = lambda m: torch.from_numpy(m.weight.numpy())  # noqa: E731
    y = bn(TF.conv2d(x, w(b.conv), None, b.conv.stride, b.conv.padding), b.bn)
    y = TF.group_norm(
        y, 2, torch.from_numpy(b.gn.weight.numpy()), torch.from_numpy(b.gn.bias.numpy()), b.gn.eps
    )
    return TF.relu(y + bn(TF.conv2d(x, w(b.down[0]), None, b.down[0].stride), b.down[1]))


def test_classifier_source_matches_torch(megengine: None) -> None:
    src = load_source("classifier", CLASSIFIER)
    import megengine as mge

    net = src.Net()
    net.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    y = net(mge.tensor(x)).numpy()
    t = _torch_block(_torch_block(torch.from_numpy(x), net.layer1), net.layer2).mean((2, 3))
    ref = TF.linear(t, torch.from_numpy(net.fc.weight.numpy()), torch.from_numpy(net.fc.bias.numpy()))
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-5)


QUANTIZED = """
import megengine.functional as F
import megengine.module as M
from megengine.module import ConvBn2d, ConvBnRelu2d, DequantStub, Elemwise, Linear, Module, QuantStub
from megengine.quantization.quantize import quantize, quantize_qat
import megengine.quantization as Q


class BasicBlock(Module):
    def __init__(self, c):
        super().__init__()
        self.conv_bn_relu = ConvBnRelu2d(c, c, 3, padding=1, bias=False)
        self.conv_bn = ConvBn2d(c, c, 3, padding=1, bias=False)
        self.add = Elemwise("FUSE_ADD_RELU")

    def forward(self, x):
        return self.add(self.conv_bn(self.conv_bn_relu(x)), x)


class QNet(Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.stem = ConvBnRelu2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.block = BasicBlock(8)
        self.cat = M.Concat()
        self.fc = Linear(16, 10)
        self.dequant = DequantStub()
        self.fc.disable_quantize()

    def forward(self, x):
        x = self.block(self.stem(self.quant(x)))
        x = self.cat([x, x], 1)
        x = F.flatten(F.avg_pool2d(x, x.shape[2:]), 1)
        return self.fc(self.dequant(x))


def quantized_qnet(calibration):
    model = QNet()
    quantize_qat(model, qconfig=Q.ema_fakequant_qconfig)
    model.eval()
    Q.enable_observer(model)
    model(calibration)
    quantize(model)
    model.eval()
    return model
"""


def test_quantized_source_builds_converts_and_dumps(megengine: None) -> None:
    src = load_source("quantized", QUANTIZED)
    import megengine as mge
    import megengine.jit as jit
    import megengine.module as M

    x = mge.tensor(np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32))
    model = src.quantized_qnet(x)
    assert isinstance(model.stem, M.quantized.ConvBnRelu2d)
    assert isinstance(model.fc, M.Linear) and not isinstance(model.fc, M.qat.QATModule)  # disabled
    y = model(x).numpy()

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data: Any) -> Any:
        return model(data)

    np.testing.assert_array_equal(infer(x).numpy(), y)
    buf = io.BytesIO()
    infer.dump(buf, arg_names=["data"], enable_fuse_conv_bias_nonlinearity=True)
    from compiler.lite import Network

    net = Network(buf.getvalue())
    (read_back,) = net(x.numpy()).values()
    np.testing.assert_allclose(read_back, y, rtol=1e-5, atol=1e-6)


TRANSFORMER = """
import math

import megengine.functional as F
from megengine.core import _config
from megengine.functional import concat, linear, matmul, repeat
from megengine.module import Dropout, Embedding, LayerNorm, Linear, Module
from megengine.module.activation import Softmax


class Encoder(Module):
    def __init__(self, vocab, hidden, heads, max_len):
        super().__init__()
        self.word = Embedding(vocab, hidden)
        self.position = Embedding(max_len, hidden)
        self.norm = LayerNorm(hidden, eps=1e-12)
        self.qkv = Linear(hidden, 3 * hidden)
        self.out = Linear(hidden, hidden)
        self.dropout = Dropout(0.1)
        self.heads = heads

    def forward(self, ids, positions):
        x = self.norm(self.word(ids) + self.position(positions))
        b, s, h = x.shape
        _config.__compute_mode = "float32"
        q, k, v = F.split(linear(x, self.qkv.weight, self.qkv.bias, "float32"), 3, axis=-1)
        _config.__compute_mode = "default"
        d = h // self.heads
        heads = lambda t: t.reshape(b, s, self.heads, d).transpose(0, 2, 1, 3)
        scores = matmul(heads(q), heads(k).transpose(0, 1, 3, 2)) / math.sqrt(d)
        probs = self.dropout(Softmax(len(scores.shape) - 1)(scores))
        ctx = matmul(probs, heads(v)).transpose(0, 2, 1, 3).reshape(b, s, h)
        cls = repeat(ctx[:, :1], 2, axis=1)
        return concat([self.out(ctx), cls], axis=1)
"""


def test_transformer_source_matches_torch(megengine: None) -> None:
    src = load_source("transformer", TRANSFORMER)
    import megengine as mge

    enc = src.Encoder(vocab=20, hidden=8, heads=2, max_len=6)
    enc.eval()
    ids = np.array([[1, 5, 7, 19], [0, 2, 2, 3]], np.int32)
    pos = np.tile(np.arange(4, dtype=np.int32), (2, 1))
    y = enc(mge.tensor(ids), mge.tensor(pos)).numpy()

    t = lambda p: torch.from_numpy(p.numpy())  # noqa: E731
    x = TF.embedding(torch.from_numpy(ids.astype(np.int64)), t(enc.word.weight))
    x = x + TF.embedding(torch.from_numpy(pos.astype(np.int64)), t(enc.position.weight))
    x = TF.layer_norm(x, (8,), t(enc.norm.weight), t(enc.norm.bias), 1e-12)
    q, k, v = TF.linear(x, t(enc.qkv.weight), t(enc.qkv.bias)).split(8, dim=-1)
    heads = lambda a: a.reshape(2, 4, 2, 4).transpose(1, 2)  # noqa: E731
    attn = TF.scaled_dot_product_attention(heads(q), heads(k), heads(v))
    ctx = attn.transpose(1, 2).reshape(2, 4, 8)
    ref = torch.cat(
        [TF.linear(ctx, t(enc.out.weight), t(enc.out.bias)), ctx[:, :1].repeat_interleave(2, 1)], 1
    )
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-5)
