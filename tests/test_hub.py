"""Model hub: ResNets trace to mgb IR that prints, parses and prints back identically, and whose
parsed form (with full weights) computes what the eager model computes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.printer import Printer

import compiler as xm
from compiler import jit
from compiler.hub.resnet import BasicBlock, Bottleneck, ResNet, resnet18, resnet50
from dialects import tensor as T
from dialects.weights import full_weights
from semantics import run_module


def _ctx() -> Context:
    ctx = Context()
    for d in (Builtin, Func, T.Mgb):
        ctx.load_dialect(d)
    return ctx


def _trace(net: ResNet, x: np.ndarray) -> tuple[ModuleOp, np.ndarray]:
    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data, *, net):  # type: ignore[no-untyped-def]
        return net(data)

    out = infer(xm.tensor(x), net=net)
    return infer.module, out.numpy()


def _count(module: ModuleOp, kind: type) -> int:
    return sum(isinstance(op, kind) for op in module.walk())


def _check_roundtrip(module: ModuleOp, x: np.ndarray, eager: np.ndarray) -> None:
    text = str(module)
    parsed = Parser(_ctx(), text).parse_module()
    parsed.verify()
    assert str(parsed) == text

    generic = io.StringIO()
    Printer(stream=generic, print_generic_format=True).print_op(module)
    assert str(Parser(_ctx(), generic.getvalue()).parse_module()) == text

    with full_weights():
        full = Parser(_ctx(), str(module)).parse_module()
    np.testing.assert_allclose(run_module(full, [x])[0], eager, rtol=1e-5, atol=1e-5)


def test_resnet18_structure_matches_megengine_names() -> None:
    net = resnet18()
    keys = set(net.state_dict())
    assert {"conv1.weight", "bn1.running_var", "fc.weight", "fc.bias"} <= keys
    shortcut = {"layer2.0.downsample.0.weight", "layer2.0.downsample.1.running_mean"}
    assert {"layer1.1.conv2.weight", *shortcut} <= keys
    assert not any(k.startswith("layer1.0.downsample") for k in keys)  # identity shortcut
    assert isinstance(net.layer4[1], BasicBlock) and net.fc.weight.shape == (1000, 512)


def test_resnet18_trace_print_parse_print() -> None:
    net = resnet18(num_classes=10).eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    module, eager = _trace(net, x)
    assert eager.shape == (1, 10)
    assert _count(module, T.ConvolutionOp) == 20 and _count(module, T.BatchNormOp) == 20
    _check_roundtrip(module, x, eager)


@pytest.mark.slow
def test_resnet50_trace_print_parse_print() -> None:
    net = resnet50().eval()
    assert isinstance(net.layer3[5], Bottleneck) and net.fc.weight.shape == (1000, 2048)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    module, eager = _trace(net, x)
    assert _count(module, T.ConvolutionOp) == 53 and _count(module, T.BatchNormOp) == 53
    _check_roundtrip(module, x, eager)


def test_pretrained_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="no pretrained weights"):
        resnet18(pretrained=True)
