"""compiler.traced_module: trace_module graphs, exact replay, .tm files (xmge's and MegEngine's)."""

from __future__ import annotations

import io
import json
import os
import pickle
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler import jit
from compiler import traced_module as tm
from compiler.functional.elemwise import relu as relu_taken_before_tracing
from compiler.hub.convnet import ConvNet
from compiler.hub.mini_resnet import MiniResNet
from compiler.lite import Network
from compiler.module.module import Module
from compiler.serialization import UnsafePickleError
from compiler.tensor import Tensor
from tests.conftest import data_path

CONVNET_GRAPH = """ConvNet.Graph (self, x) {
\t%2:\tconv1 = getattr(self, "conv1") -> (Conv2d)
\t%3:\tconv1_out = conv1(x, )
\t%4:\tpool1 = getattr(self, "pool1") -> (MaxPool2d)
\t%5:\tpool1_out = pool1(conv1_out, )
\t%6:\tconv2 = getattr(self, "conv2") -> (Conv2d)
\t%7:\tconv2_out = conv2(pool1_out, )
\t%8:\tpool2 = getattr(self, "pool2") -> (MaxPool2d)
\t%9:\tpool2_out = pool2(conv2_out, )
\t%10:\tflatten_out = tensor.flatten(pool2_out, 1, -1, )
\t%11:\tfc1 = getattr(self, "fc1") -> (Linear)
\t%12:\tfc1_out = fc1(flatten_out, )
\t%13:\trelu1 = getattr(self, "relu1") -> (ReLU)
\t%14:\trelu1_out = relu1(fc1_out, )
\t%15:\tfc2 = getattr(self, "fc2") -> (Linear)
\t%16:\tfc2_out = fc2(relu1_out, )
\treturn fc2_out
}"""


def _golden(case: str, model: type) -> tuple[Module, Tensor]:
    net = model()
    w = np.load(data_path(case, "weights.npz"))
    net.load_state_dict({k: w[k] for k in w})
    net.eval()
    return net, xm.tensor(np.load(data_path(case, "inputs.npz"))["data"])


@pytest.fixture(scope="module")
def convnet() -> tuple[Module, Tensor, tm.TracedModule]:
    net, x = _golden("convnet", ConvNet)
    return net, x, tm.trace_module(net, x)


@pytest.fixture(scope="module")
def resnet() -> tuple[Module, Tensor, tm.TracedModule]:
    net, x = _golden("mini_resnet", MiniResNet)
    return net, x, tm.trace_module(net, x)


def _same_state(a: Module, b: Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


# ----------------------------------------------------------------------------------------------
# trace_module


def test_convnet_graph_prints_like_megengine(convnet: Any) -> None:
    _, _, traced = convnet
    assert repr(traced.graph) == CONVNET_GRAPH
    assert str(traced) == CONVNET_GRAPH  # no nested graphs: print(tm) is the graph
    exprs = traced.graph.exprs()
    assert [type(e).__name__ for e in exprs].count("CallMethod") == 7
    flatten = exprs.call_function(F.flatten).as_unique()
    assert flatten.func_key == ("compiler.functional.tensor", "flatten") and flatten.func is F.flatten
    (out,) = flatten.outputs
    assert isinstance(out, tm.TensorNode) and out.shape == (1, 320) and out.dtype == np.float32
    assert [n.name for n in traced.graph.inputs] == ["self", "x"]
    assert {n.name for n in traced.graph.nodes().type(tm.ModuleNode)} >= {"self", "conv1", "fc2"}


def test_convnet_replay_equals_eager_exactly(convnet: Any) -> None:
    net, x, traced = convnet
    assert isinstance(traced, M.Module)
    np.testing.assert_array_equal(traced(x).numpy(), net(x).numpy())
    y = xm.tensor(np.random.default_rng(3).standard_normal((4, 1, 28, 28)).astype(np.float32))
    np.testing.assert_array_equal(traced(y).numpy(), net(y).numpy())  # another batch size
    _same_state(traced, net)
    assert [n for n, _ in traced.named_parameters()] == [n for n, _ in net.named_parameters()]


def test_hooks_are_removed_after_tracing_even_on_error() -> None:
    call, relu, add = Module.__call__, F.relu, Tensor.__add__

    class Broken(M.Module):
        def forward(self, x: Tensor) -> Tensor:
            return F.relu(x) + F.reshape(x, (7, 7))  # fails: wrong element count

    with pytest.raises(ValueError):
        tm.trace_module(Broken(), xm.tensor(np.ones((2, 3), np.float32)))
    assert (Module.__call__, F.relu, Tensor.__add__) == (call, relu, add)
    with pytest.raises(TypeError, match="compiler.Tensor"):
        tm.trace_module(ConvNet(), np.zeros((1, 1, 28, 28), np.float32))


def test_resnet_nested_traced_modules_replay_exactly(resnet: Any) -> None:
    net, x, traced = resnet
    np.testing.assert_array_equal(traced(x).numpy(), net(x).numpy())
    _same_state(traced, net)
    # user modules and Sequential are nested TracedModules; built-in layers are shared, not copied
    assert type(traced.layer1) is tm.TracedModule and type(getattr(traced.layer2, "0")) is tm.TracedModule
    assert getattr(traced.layer2, "0").downsample is not net.layer2[0].downsample
    assert traced.conv1 is net.conv1 and getattr(traced.layer1, "0").bn1 is net.layer1[0].bn1
    text = str(traced)
    assert "%8:\tlayer1_out = layer1(relu_out, )" in text
    assert "MiniResNet.layer2.0.Graph (self, x) {" in text
    assert "add_out = downsample_out.__add__(bn2_out, )" in text
    # recursive=True walks into nested graphs, recursive=False stays in the top one; as in MegEngine
    # the Input expressions (self, x) come first
    assert len(traced.graph.exprs(recursive=False)) == 16
    assert len(traced.graph.exprs().call_method("__add__")) == 4


def test_a_traced_module_traces_again(resnet: Any) -> None:
    net, x, traced = resnet
    again = tm.trace_module(traced, x)
    assert str(again) == str(traced)  # same graphs, input names included
    np.testing.assert_array_equal(again(x).numpy(), net(x).numpy())


class Head(M.Module):
    """Functional calls with keyword arguments, tensor methods, a parameter read directly, a tensor
    made in forward, a keyword tensor input and a tuple output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = M.Linear(6, 4)
        self.scale = xm.Parameter(np.linspace(0.5, 2.0, 4, dtype=np.float32))

    def forward(self, x: Tensor, *, bias: Tensor, mode: str = "softmax") -> tuple[Tensor, Tensor]:
        h = F.concat([x, x * 2.0], axis=1)
        h = self.fc(h.reshape(x.shape[0], -1)) * self.scale
        h = h + xm.tensor(np.float32(0.25)) - bias
        probs = F.softmax(h, axis=1) if mode == "softmax" else F.sigmoid(h)
        return probs, F.leaky_relu(h[:, :2], negative_slope=0.1)


def test_functional_calls_kwargs_methods_and_constants() -> None:
    net = Head().eval()
    rng = np.random.default_rng(0)
    x = xm.tensor(rng.standard_normal((2, 3)).astype(np.float32))
    bias = xm.tensor(rng.standard_normal((4,)).astype(np.float32))
    traced = tm.trace_module(net, x, bias=bias)
    for got, want in zip(traced(x, bias=bias), net(x, bias=bias), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    text = repr(traced.graph)
    assert text.startswith("Head.Graph (self, x, bias) {")
    assert "concat_out = tensor.concat([x, mul_out], 1, None, )" in text
    assert "mul_out = x.__mul__(2.0, )" in text
    assert 'scale = getattr(self, "scale") -> (Tensor)' in text
    assert "const_tensor = Constant() -> (Tensor)" in text
    assert "softmax_out = nn.softmax(sub_out, 1, )" in text
    assert "getitem_out = sub_out.__getitem__((slice(None, None, None), slice(None, 2, None)), )" in text
    assert "return softmax_out, leaky_relu_out" in text
    assert len(traced.graph.exprs().call_function(F.softmax)) == 1
    _same_state(traced, net)
    # the graph keeps the argument structure it was traced with
    with pytest.raises(tm.TracedModuleError, match="was traced with arguments"):
        traced(x, bias=bias, mode="sigmoid")


class TakenEarly(M.Module):
    def forward(self, x: Tensor) -> Tensor:
        return relu_taken_before_tracing(x) * 3.0


def test_ops_no_wrapper_saw_are_kept_as_apply(tmp_path: Any) -> None:
    net = TakenEarly()
    x = xm.tensor(np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4))
    traced = tm.trace_module(net, x)
    (apply,) = [e for e in traced.graph.exprs() if isinstance(e, tm.Apply)]
    assert apply.op == "ElemwiseOp" and "ElemwiseOp(mode=RELU)(x, )" in repr(apply)
    np.testing.assert_array_equal(traced(x).numpy(), net(x).numpy())
    xm.save(traced, tmp_path / "apply.tm")
    np.testing.assert_array_equal(xm.load(tmp_path / "apply.tm")(x).numpy(), net(x).numpy())


# ----------------------------------------------------------------------------------------------
# .tm files


@pytest.mark.parametrize("which", ["convnet", "resnet"])
def test_save_load_round_trip_under_the_default_loader(which: str, tmp_path: Any, request: Any) -> None:
    net, x, traced = request.getfixturevalue(which)
    path = tmp_path / "net.tm"
    xm.save(traced, path)
    back = xm.load(path)  # restricted unpickler, no opt-in
    assert type(back) is tm.TracedModule and str(back) == str(traced)
    np.testing.assert_array_equal(back(x).numpy(), net(x).numpy())
    _same_state(back, net)


def test_tampered_xmge_tm_cannot_call_outside_the_allow_list(convnet: Any, tmp_path: Any) -> None:
    _, x, traced = convnet
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    xm.save(traced, buf)
    back = xm.serialization.loads(buf.getvalue())
    back.graph.exprs().call_function(F.flatten).as_unique().func = ("os", "system")
    tampered = io.BytesIO()
    xm.save(back, tampered)
    loaded = xm.serialization.loads(tampered.getvalue())
    with pytest.raises(tm.TracedModuleError, match="os.system"):
        loaded(x)
    assert not marker.exists()


def test_megengine_convnet_tm_matches_megengine() -> None:
    traced = tm.load_megengine_tm(data_path("convnet", "convnet.tm"))
    with open(data_path("convnet", "case.json")) as f:
        case = json.load(f)
    assert str(traced) == case["pickles"]["convnet.tm"]["graph"]  # MegEngine's own print
    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    expected = np.load(data_path("convnet", "expected_plain.npz"))
    got = traced(xm.tensor(x)).numpy()
    np.testing.assert_allclose(got, expected[expected.files[0]], rtol=1e-5, atol=1e-5)
    assert type(traced.conv1) is M.Conv2d and traced.conv1.bias.shape == (1, 10, 1, 1)
    assert list(traced.state_dict()) == case["pickles"]["state_dict.pkl"]["keys"]
    # and it saves as an xmge .tm that the default loader takes back
    buf = io.BytesIO()
    xm.save(traced, buf)
    np.testing.assert_array_equal(xm.serialization.loads(buf.getvalue())(xm.tensor(x)).numpy(), got)


def test_megengine_tm_unknown_names_are_named() -> None:
    with open(data_path("convnet", "convnet.tm"), "rb") as f:
        data = f.read()
    assert isinstance(xm.serialization.loads(data), tm.TracedModule)  # loads() reads a MegEngine .tm too
    # same-length renames keep the pickle valid: an unknown layer class, an unknown function
    layer = data.replace(b"\x8c\x06Linear", b"\x8c\x06Lineaz")
    with pytest.raises(tm.MegEngineTMError, match=r"megengine\.module\.linear\.Lineaz"):
        tm.load_megengine_tm(layer)
    func = data.replace(b"\x8c\x07flatten", b"\x8c\x07flattez")
    with pytest.raises(tm.MegEngineTMError, match=r"megengine\.functional\.tensor\.flattez"):
        tm.load_megengine_tm(func)


class _Reduce:
    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> Any:
        return self.fn, self.args


def test_malicious_tm_is_refused_and_nothing_runs(tmp_path: Any) -> None:
    marker = tmp_path / "pwned"
    payload = _Reduce(os.system, f"touch {marker}")
    # a plain payload, and one hidden in the state of a MegEngine TracedModule (hand-assembled:
    # GLOBAL, NEWOBJ, then the state dict's protocol-2 body and BUILD)
    state = pickle.dumps({"training": False, "dump_info": payload}, protocol=2)[2:-1]
    hidden = b"\x80\x02cmegengine.traced_module.traced_module\nTracedModule\n)\x81" + state + b"b."
    for data in (pickle.dumps(payload, protocol=4), hidden):
        with pytest.raises(UnsafePickleError, match="system"):
            tm.load_megengine_tm(data)
        with pytest.raises(UnsafePickleError, match="refusing (to load )?'(posix|os).system'"):
            xm.serialization.loads(data)
    assert not marker.exists()
    # the same file without the payload gets as far as the (missing) graph: the payload was reached
    benign = pickle.dumps({"training": False}, protocol=2)[2:-1]
    with pytest.raises(tm.MegEngineTMError, match="0 argument signatures"):
        tm.load_megengine_tm(
            b"\x80\x02cmegengine.traced_module.traced_module\nTracedModule\n)\x81" + benign + b"b."
        )


# ----------------------------------------------------------------------------------------------
# TracedModule under jit.trace -> .mge -> lite.Network


@pytest.mark.parametrize("source", ["traced", "megengine"])
def test_trace_dump_and_run_with_lite(convnet: Any, source: str) -> None:
    net, x, traced = convnet
    if source == "megengine":
        traced = tm.load_megengine_tm(data_path("convnet", "convnet.tm"))
        expected = np.load(data_path("convnet", "expected_plain.npz"))
        want = expected[expected.files[0]]
    else:
        want = net(x).numpy()

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data: Tensor, *, model: Module) -> Tensor:
        return model(data)

    np.testing.assert_array_equal(infer(x, model=traced).numpy(), traced(x).numpy())
    assert 'name = "conv1.weight"' in infer.ir()  # parameters keep their names in the IR
    buf = io.BytesIO()
    infer.dump(buf, arg_names=["data"])
    (out,) = Network(buf.getvalue())(data=x.numpy()).values()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_plain_load_of_a_megengine_tm_uses_the_reader() -> None:
    """``megengine.load("net.tm")`` is how MegEngine users read a .tm: the safe loader hands a
    MegEngine TracedModule to the record reader, which runs nothing from the file."""
    path = data_path("convnet", "convnet.tm")
    loaded, reference = xm.load(path), tm.load_megengine_tm(path)
    assert type(loaded) is type(reference) and str(loaded) == str(reference)
    x = xm.tensor(np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32))
    np.testing.assert_array_equal(loaded(x).numpy(), reference(x).numpy())

    class Unseekable(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self._inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            chunk = self._inner.read(len(b))
            b[: len(chunk)] = chunk
            return len(chunk)

    with open(path, "rb") as f, pytest.raises(UnsafePickleError, match="load_megengine_tm"):
        xm.load(io.BufferedReader(Unseekable(f.read())))
