"""``compiler.module``: discovery, state dicts (MegEngine's order and shapes), strict loading,
train/eval, Sequential, and each layer against its PyTorch counterpart."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as tnn

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler.module import StateDictError

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return np.asarray(RNG.standard_normal(shape), np.float32)


class Block(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(4)
        self.relu = M.ReLU()

    def forward(self, x: xm.Tensor) -> xm.Tensor:
        return self.relu(self.bn(self.conv(x)))


class Net(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.pool = M.AdaptiveAvgPool2d(1)
        self.fc = M.Linear(4, 5)
        self.scale = xm.Parameter(np.ones((1,), np.float32))  # a direct parameter of the root
        self.heads = [M.Linear(5, 2), M.Linear(5, 3)]

    def forward(self, x: xm.Tensor) -> list[xm.Tensor]:
        y = self.fc(F.flatten(self.pool(self.block(x)), 1)) * self.scale
        return [h(y) for h in self.heads]


EXPECTED_KEYS = [
    # a module's own tensors come before its sub-modules', each level sorted by attribute name
    "scale",
    "block.bn.bias",
    "block.bn.running_mean",
    "block.bn.running_var",
    "block.bn.weight",
    "block.conv.weight",
    "fc.bias",
    "fc.weight",
    "heads.0.bias",
    "heads.0.weight",
    "heads.1.bias",
    "heads.1.weight",
]


def test_state_dict_keys_order_and_values() -> None:
    net = Net()
    sd = net.state_dict()
    assert list(sd) == EXPECTED_KEYS
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    # MegEngine shapes: conv weight (OC, IC, KH, KW), linear (out, in) and (out,), BN flattened to (C,)
    assert sd["block.conv.weight"].shape == (4, 3, 3, 3)
    assert sd["fc.weight"].shape == (5, 4) and sd["fc.bias"].shape == (5,)
    assert sd["block.bn.weight"].shape == (4,) and sd["block.bn.running_var"].shape == (4,)
    assert net.block.bn.weight.shape == (1, 4, 1, 1)  # the layer itself keeps (1, C, 1, 1)
    # values are copies: changing them does not touch the module
    sd["fc.bias"][:] = 42
    assert not np.any(net.fc.bias.numpy() == 42)
    kept = net.state_dict(keep_var=True)
    assert kept["fc.weight"] is net.fc.weight


def test_named_parameters_buffers_modules() -> None:
    net = Net()
    params = dict(net.named_parameters())
    buffers = dict(net.named_buffers())
    assert set(buffers) == {"block.bn.running_mean", "block.bn.running_var"}
    assert set(params) | set(buffers) == set(EXPECTED_KEYS)
    assert all(isinstance(p, xm.Parameter) for p in params.values())
    assert [k for k, _ in net.named_parameters(recursive=False)] == ["scale"]
    names = [n for n, _ in net.named_modules()]
    assert names == ["", "block", "block.bn", "block.conv", "block.relu", "fc", "heads.0", "heads.1", "pool"]
    assert [n for n, _ in net.named_children()] == ["block", "fc", "heads.0", "heads.1", "pool"]
    assert [n for n, _ in net.block.named_modules("pre")] == ["pre", "pre.bn", "pre.conv", "pre.relu"]
    assert len(list(net.parameters())) == 10


def test_shared_module_is_listed_once() -> None:
    class Shared(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = M.Linear(2, 2)
            self.b = self.a

        def forward(self, x: xm.Tensor) -> xm.Tensor:
            return self.b(self.a(x))

    m = Shared()
    assert list(m.state_dict()) == ["a.bias", "a.weight"]
    assert [n for n, _ in m.named_modules()] == ["", "a"]


def test_state_dict_round_trip() -> None:
    src, dst = Net(), Net()
    x = xm.tensor(rand(2, 3, 6, 5))
    src.block.bn.running_mean._reset(rand(1, 4, 1, 1))
    src.eval()
    dst.eval()
    assert not np.allclose(src(x)[0].numpy(), dst(x)[0].numpy())
    dst.load_state_dict(src.state_dict())
    for a, b in zip(src(x), dst(x), strict=True):
        assert np.array_equal(a.numpy(), b.numpy())
    for k, v in src.state_dict().items():
        assert np.array_equal(v, dst.state_dict()[k]), k


def test_load_state_dict_accepts_bn_in_either_shape_and_tensors() -> None:
    bn = M.BatchNorm2d(3)
    bn.load_state_dict(
        {
            "weight": np.full((1, 3, 1, 1), 2.0, np.float32),
            "bias": xm.tensor(np.ones(3, np.float32)),
            "running_mean": np.zeros(3),  # float64: converted to the buffer's float32
            "running_var": np.full(3, 4.0),
        }
    )
    assert bn.running_var.dtype == np.float32 and bn.running_var.shape == (1, 3, 1, 1)
    np.testing.assert_array_equal(bn.state_dict()["weight"], [2, 2, 2])


def test_load_state_dict_strict_errors_name_every_key() -> None:
    net = Net()
    sd = net.state_dict()
    before = {k: v.copy() for k, v in sd.items()}
    del sd["fc.bias"]
    del sd["heads.1.weight"]
    sd["fc.extra"] = np.zeros(3, np.float32)
    sd["block.conv.weight"] = np.zeros((4, 3, 5, 5), np.float32)
    with pytest.raises(StateDictError) as info:
        net.load_state_dict(sd)
    msg = str(info.value)
    for piece in (
        "missing keys: fc.bias, heads.1.weight",
        "unexpected keys: fc.extra",
        "block.conv.weight: expected (4, 3, 3, 3), got (4, 3, 5, 5)",
        "test_module.py:",
    ):
        assert piece in msg, msg
    # catchable the MegEngine way (KeyError) and as a ValueError
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    # a failed load changes nothing
    for k, v in net.state_dict().items():
        assert np.array_equal(v, before[k]), k


def test_load_state_dict_non_strict_and_callable() -> None:
    net = Net()
    partial = {"fc.bias": np.arange(5, dtype=np.float32), "nonsense": np.zeros(1)}
    net.load_state_dict(partial, strict=False)
    np.testing.assert_array_equal(net.fc.bias.numpy(), np.arange(5))
    with pytest.raises(StateDictError, match="fc.weight: expected"):
        net.load_state_dict({"fc.weight": np.zeros((4, 5), np.float32)}, strict=False)
    net.load_state_dict(lambda k, t: np.zeros(t.shape) if k.startswith("heads") else None, strict=False)
    assert np.all(net.heads[1].weight.numpy() == 0) and not np.all(net.fc.weight.numpy() == 0)
    with pytest.raises(TypeError, match="expected a dict or a callable"):
        net.load_state_dict([1, 2])  # type: ignore[arg-type]


def test_train_eval_switches_every_module() -> None:
    net = Net()
    assert all(m.training for m in net.modules())
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    net.train(False, recursive=False)
    assert not net.training and net.block.training


def test_batchnorm_train_vs_eval_behaviour() -> None:
    bn = M.BatchNorm2d(3, momentum=0.8)
    ref = tnn.BatchNorm2d(3, momentum=0.2)  # torch's momentum weighs the new batch statistic
    x = rand(4, 3, 5, 5) * 3 + 2
    for _ in range(2):
        got = bn(xm.tensor(x))
        want = ref(torch.from_numpy(x))
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        bn.running_mean.numpy().reshape(3), ref.running_mean.numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        bn.running_var.numpy().reshape(3), ref.running_var.numpy(), rtol=1e-5, atol=1e-6
    )
    bn.eval()
    ref.eval()
    stats = bn.running_mean.numpy().copy()
    np.testing.assert_allclose(
        bn(xm.tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5
    )
    assert np.array_equal(bn.running_mean.numpy(), stats)  # eval leaves running stats alone


def test_dropout_module_follows_training_flag() -> None:
    d = M.Dropout(0.5)
    x = xm.tensor(np.ones((50, 40), np.float32))
    assert (d(x).numpy() == 0).any()
    d.eval()
    assert np.array_equal(d(x).numpy(), x.numpy())


def test_sequential_order_indexing_and_ordered_dict() -> None:
    seq = M.Sequential(M.Linear(3, 4), M.ReLU(), M.Linear(4, 2))
    assert len(seq) == 3 and isinstance(seq[1], M.ReLU)
    assert list(seq.state_dict()) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    x = rand(5, 3)
    want = np.maximum(x @ seq[0].weight.numpy().T + seq[0].bias.numpy(), 0) @ seq[2].weight.numpy().T
    np.testing.assert_allclose(seq(xm.tensor(x)).numpy(), want + seq[2].bias.numpy(), rtol=1e-5, atol=1e-6)
    sub = seq[1:]
    assert isinstance(sub, M.Sequential) and len(sub) == 2
    named = M.Sequential(OrderedDict([("fc", M.Linear(3, 3)), ("act", M.Sigmoid())]))
    assert list(named.state_dict()) == ["fc.bias", "fc.weight"]
    out = named(xm.tensor(x)).numpy()  # forward runs in insertion order: fc, then sigmoid
    assert out.min() > 0 and out.max() < 1
    with pytest.raises(TypeError, match="not a Module"):
        M.Sequential(M.ReLU(), 3)  # type: ignore[arg-type]


def test_sequential_with_many_layers_uses_megengine_string_order() -> None:
    seq = M.Sequential(*[M.Linear(2, 2) for _ in range(11)])
    keys = [k for k in seq.state_dict() if k.endswith("weight")]
    # MegEngine sorts attribute names as strings, so "10" comes right after "1"
    assert keys[:3] == ["0.weight", "1.weight", "10.weight"]
    x = rand(1, 2)
    want = x
    for layer in [getattr(seq, str(i)) for i in range(11)]:
        want = want @ layer.weight.numpy().T + layer.bias.numpy()
    np.testing.assert_allclose(seq(xm.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_forward_hook_and_scope_names() -> None:
    net = Net()
    seen: list[str] = []
    net.fc.register_forward_hook(lambda m, inp, out: seen.append(type(m).__name__))
    net.eval()
    net(xm.tensor(rand(1, 3, 4, 4)))
    assert seen == ["Linear"]
    assert net.block.conv._full_name == "block.conv"


# ------------------------------------------------------------------------------------------------
# Layers against torch


def _copy(dst: Any, **tensors: np.ndarray) -> None:
    with torch.no_grad():
        for name, value in tensors.items():
            getattr(dst, name).copy_(torch.from_numpy(value))


@pytest.mark.parametrize("groups,bias", [(1, True), (2, True), (4, False)])
def test_conv2d_layer_matches_torch(groups: int, bias: bool) -> None:
    conv = M.Conv2d(4, 8, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2), groups=groups, bias=bias)
    w = conv.weight.numpy()
    if groups > 1:
        assert w.shape == (groups, 8 // groups, 4 // groups, 3, 2)  # MegEngine's grouped layout
    else:
        assert w.shape == (8, 4, 3, 2)
    ref = tnn.Conv2d(4, 8, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2), groups=groups, bias=bias)
    if bias:
        assert conv.bias is not None and conv.bias.shape == (1, 8, 1, 1)
        conv.bias._reset(rand(1, 8, 1, 1))
        _copy(ref, weight=w.reshape(8, 4 // groups, 3, 2), bias=conv.bias.numpy().reshape(8))
    else:
        assert conv.bias is None
        _copy(ref, weight=w.reshape(8, 4 // groups, 3, 2))
    x = rand(2, 4, 9, 8)
    np.testing.assert_allclose(
        conv(xm.tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-4
    )


def test_linear_layer_matches_torch() -> None:
    lin = M.Linear(6, 3)
    assert lin.weight.shape == (3, 6) and lin.bias is not None and lin.bias.shape == (3,)
    lin.bias._reset(rand(3))
    ref = tnn.Linear(6, 3)
    _copy(ref, weight=lin.weight.numpy(), bias=lin.bias.numpy())
    x = rand(2, 5, 6)
    np.testing.assert_allclose(
        lin(xm.tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5
    )
    assert M.Linear(6, 3, bias=False).bias is None


LAYERS = [
    (M.ReLU(), tnn.ReLU()),
    (M.ReLU6(), tnn.ReLU6()),
    (M.Sigmoid(), tnn.Sigmoid()),
    (M.Tanh(), tnn.Tanh()),
    (M.GELU(), tnn.GELU()),
    (M.SiLU(), tnn.SiLU()),
    (M.Hswish(), tnn.Hardswish()),
    (M.Hsigmoid(), tnn.Hardsigmoid()),
    (M.LeakyReLU(0.2), tnn.LeakyReLU(0.2)),
    (M.Softmax(1), tnn.Softmax(1)),
    (M.Softmax(), tnn.Softmax(1)),  # MegEngine's default axis for 4-D input is 1
    (M.MaxPool2d(3, 2, 1), tnn.MaxPool2d(3, 2, 1)),
    (M.AvgPool2d(2), tnn.AvgPool2d(2)),
    (M.AvgPool2d(3, 2, 1, mode="average"), tnn.AvgPool2d(3, 2, 1, count_include_pad=True)),
    (M.AvgPool2d(3, 2, 1), tnn.AvgPool2d(3, 2, 1, count_include_pad=False)),
    (M.AdaptiveAvgPool2d((3, 2)), tnn.AdaptiveAvgPool2d((3, 2))),
    (M.AdaptiveMaxPool2d(3), tnn.AdaptiveMaxPool2d(3)),
    (M.Identity(), tnn.Identity()),
    (M.Flatten(), tnn.Flatten()),
]


@pytest.mark.parametrize("ours,ref", LAYERS, ids=[type(o).__name__ for o, _ in LAYERS])
def test_stateless_layers_match_torch(ours: M.Module, ref: tnn.Module) -> None:
    x = rand(2, 3, 9, 6)
    np.testing.assert_allclose(
        ours(xm.tensor(x)).numpy(), ref(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-5
    )
    assert list(ours.state_dict()) == []


def test_batchnorm1d_matches_torch() -> None:
    bn = M.BatchNorm1d(4)
    ref = tnn.BatchNorm1d(4, momentum=0.1)
    for shape in [(8, 4), (3, 4, 5)]:
        x = rand(*shape)
        np.testing.assert_allclose(
            bn(xm.tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5
        )
    with pytest.raises(ValueError, match="BatchNorm1d"):
        bn(xm.tensor(rand(2, 4, 3, 3)))


def test_conv_transpose2d_and_layer_norm_modules_match_torch() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 3)).astype(np.float32)
    ct = M.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, output_padding=1, groups=2)
    assert ct.weight.shape == (2, 2, 3, 3, 2) and ct.bias is not None
    tct = torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, output_padding=1, groups=2)
    with torch.no_grad():
        tct.weight.copy_(torch.from_numpy(ct.weight.numpy().reshape(4, 3, 3, 2)))
        tct.bias.copy_(torch.from_numpy(rng.standard_normal(6).astype(np.float32)))
    ct.bias._reset(tct.bias.detach().numpy().reshape(1, 6, 1, 1))
    got = ct(xm.tensor(x)).numpy()
    np.testing.assert_allclose(got, tct(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    ln = M.LayerNorm((5, 3), eps=1e-4)
    assert ln.weight is not None and ln.weight.shape == (5, 3)
    want = torch.nn.functional.layer_norm(torch.from_numpy(x), (5, 3), eps=1e-4).numpy()
    np.testing.assert_allclose(ln(xm.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_module_bookkeeping_matches_megengine() -> None:
    # MegEngine 1.13's Module instance attributes (its test_module_compatible), and the names of
    # the attributes holding modules or containers in _modules
    class Empty(M.Module):
        def forward(self) -> None:
            pass

    assert set(vars(Empty())) == {
        "_modules", "name", "training", "quantize_disabled", "_forward_pre_hooks", "_forward_hooks",
        "_name", "_short_name",
    }  # fmt: skip
    net = Net()
    assert {"block", "fc"} <= set(net._modules)
    net.fc = 3
    assert "fc" not in net._modules
