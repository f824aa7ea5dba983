"""trace_module records what MegEngine's records: in-place ``tensor[index] = value`` (as a
``__setitem__`` call whose result stands for the tensor afterwards), functions of every public
``functional`` module (``F.vision``, and ``F.nn`` functions defined in helper modules), and a
call's arguments in canonical form (``traced_module.utils._convert_kwargs_to_args``)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import compiler.functional as F
import compiler.module as M
from compiler import Tensor
from compiler.traced_module import trace_module
from compiler.traced_module.utils import _convert_kwargs_to_args


class _Affine(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base = F.zeros((1,))

    def forward(self, data: Tensor, roi: Tensor) -> Tensor:
        n = data.shape[0]
        mat = F.broadcast_to(self.base, (n, 3, 3))
        scale = (roi[:, 1, 0] - roi[:, 0, 0]) / data.shape[2]
        mat[:, 0, 0] = scale
        mat[:, 1, 1] = scale
        mat[:, 2, 2] = F.ones((n,))
        made_here = F.zeros((n,))
        made_here[0] = 7.0
        out = F.vision.warp_perspective(data, mat, (4, 4))
        return out + made_here.reshape(n, 1, 1, 1)


def test_setitem_and_vision_functions_replay() -> None:
    data = Tensor(np.arange(2 * 1 * 6 * 6, dtype=np.float32).reshape(2, 1, 6, 6))
    roi = Tensor(np.array([[[0, 0], [3, 3]], [[1, 1], [6, 6]]], dtype=np.float32))
    net = _Affine()
    expect = net(data, roi).numpy()
    tm = trace_module(net, data, roi)
    methods = [getattr(e, "method", None) for e in tm.graph._exprs]
    assert methods.count("__setitem__") == 4
    np.testing.assert_array_equal(tm(data, roi).numpy(), expect)
    other = Tensor(np.array([[[0, 0], [6, 6]], [[2, 2], [4, 4]]], dtype=np.float32))
    np.testing.assert_array_equal(tm(data, other).numpy(), net(data, other).numpy())
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(tm))(data, roi).numpy(), expect)
    # the replay updated copies: the module's own tensor is untouched
    np.testing.assert_array_equal(net.base.numpy(), [0.0])


def test_functions_defined_in_helper_modules_replay() -> None:
    class Norm(M.Module):
        def forward(self, x: Tensor) -> Tensor:
            return F.nn.instance_norm(x, affine=False)

    x = Tensor(np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32))
    tm = trace_module(Norm(), x)
    np.testing.assert_allclose(tm(x).numpy(), Norm()(x).numpy(), rtol=1e-6)


def test_convert_kwargs_to_args() -> None:
    def func(a, b, c=4, *, d, e=3, f=4):  # noqa: ANN001, ANN202
        pass

    assert _convert_kwargs_to_args(func, (1,), {"b": 1, "d": 6}) == ((1, 1, 4), {"d": 6, "e": 3, "f": 4})
    bound = _convert_kwargs_to_args(func, (1,), {"d": 6}, is_bounded=True)
    assert bound == ((1, 4), {"d": 6, "e": 3, "f": 4})
    with pytest.raises(TypeError, match="multiple values"):
        _convert_kwargs_to_args(func, (1,), {"a": 2, "d": 1})
    with pytest.raises(TypeError, match="keyword-only argument: d"):
        _convert_kwargs_to_args(func, (1, 2), {})
    with pytest.raises(TypeError, match="unexpected keyword argument z"):
        _convert_kwargs_to_args(func, (1, 2), {"d": 1, "z": 0})


def test_every_exported_module_class_is_builtin() -> None:
    import io

    import compiler
    from compiler.module import qat

    class MyConcat(qat.Concat):
        pass

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = M.ConvBn2d(3, 3, 3)
            self.cat = qat.Concat()
            self.mine = MyConcat()

        def forward(self, x: Tensor) -> Tensor:
            y = self.conv(x)
            return self.mine([self.cat([y, y]), y])

    x = Tensor(np.ones((1, 3, 5, 5), np.float32))
    tm = trace_module(Net(), x)
    # exported classes stay calls; a user's subclass is the user's code, traced into
    assert not hasattr(tm.conv, "graph") and not hasattr(tm.cat, "graph")
    assert tm.mine.graph is not None
    buf = io.BytesIO()
    compiler.save(tm, buf)
    buf.seek(0)
    np.testing.assert_array_equal(compiler.load(buf)(x).numpy(), tm(x).numpy())


def test_graph_api_as_in_megengine() -> None:
    from compiler.traced_module.expr import CallFunction
    from compiler.traced_module.node import Node, TensorNode

    class Block(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = M.Conv2d(2, 2, 1)

        def forward(self, x: Tensor) -> Tensor:
            return F.relu(self.conv(x)) + 1

    class Top(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b0 = Block()
            self.b1 = Block()

        def forward(self, x: Tensor) -> Tensor:
            return self.b1(self.b0(x))

    x = Tensor(np.ones((1, 2, 3, 3), np.float32))
    tm = trace_module(Top(), x)
    relu = tm.b0.graph.get_function_by_type(F.relu).as_unique()
    assert isinstance(relu, CallFunction) and relu.func is F.relu
    assert relu.func_key == ("compiler.functional.elemwise", "relu")
    assert all(n.value is None for n in tm.graph.nodes() if isinstance(n, TensorNode))
    out = tm.graph.outputs[0]
    with pytest.raises(AssertionError, match="already used"):
        out.name = "b0_out"
    out.name = "result"
    tm.graph.name = "Top2"
    assert tm.graph.get_node_by_name("Top2_result").as_unique() is out
    with pytest.raises(AssertionError, match="already used"):
        tm.b1.graph.name = "b0"
    Node._set_next_id(159)
    assert Node._get_next_id() == 159
    tm.graph._reset_ids()
    nodes = tm.graph.nodes().as_list()
    exprs = tm.graph.exprs().as_list()
    assert sorted(n._id for n in nodes) == list(range(len(nodes)))
    assert sorted(e._id for e in exprs) == list(range(len(exprs)))
    assert tm.graph._total_ids == [len(nodes), len(exprs)]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(tm))(x).numpy(), tm(x).numpy())


def test_qat_modules_keep_their_quantizers_when_traced() -> None:
    from functools import partial

    import compiler.quantization as Q
    from compiler.module import qat as QM

    class MyConvBnRelu(M.ConvBnRelu2d):
        pass

    class MyQATConvBnRelu(QM.ConvBnRelu2d):
        pass

    class MyObserver(Q.MinMaxObserver):
        pass

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv0 = MyConvBnRelu(3, 3, 3, 1, 1)
            self.conv1 = M.ConvBn2d(3, 3, 1)

        def forward(self, x: Tensor) -> Tensor:
            return self.conv1(self.conv0(x))

    qconfig = Q.QConfig(
        weight_observer=partial(MyObserver, dtype="qint8_narrow"),
        act_observer=partial(MyObserver, dtype="qint8"),
        weight_fake_quant=None,
        act_fake_quant=None,
    )
    net = Q.quantize_qat(Net(), qconfig=qconfig, mapping={MyConvBnRelu: MyQATConvBnRelu})
    x = Tensor(np.random.default_rng(1).random((2, 3, 6, 6)).astype(np.float32))
    Q.enable_observer(net)
    net.eval()
    net(x)
    Q.disable_observer(net)
    tm = trace_module(net, x)
    # the user's QAT class is traced into, and keeps its observers (calls, the user's subclass too)
    assert tm.conv0.is_qat and tm.conv0.graph is not None
    assert tm.conv0.act_fake_quant is None and isinstance(tm.conv0.act_observer, MyObserver)
    np.testing.assert_array_equal(
        tm.conv0.act_observer.get_qparams().scale.numpy(), net.conv0.act_observer.get_qparams().scale.numpy()
    )
    assert not hasattr(tm.conv0.act_observer, "graph")
    # flatten inlines everything but QAT modules
    flat = tm.flatten()
    node = flat.graph.get_node_by_name("Net_conv0").as_unique()
    assert node.owner.is_qat
    assert flat.graph.get_node_by_name("Net_conv0_out").as_unique().expr.inputs[0] is node
    np.testing.assert_allclose(flat(x).numpy(), net(x).numpy(), rtol=1e-6)
