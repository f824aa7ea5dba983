"""traced_module.optimize (FuseConvBn), traced_module.serialization loaders, traced_module.utils."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
import compiler.module as M
import compiler.traced_module as tm
import compiler.traced_module.serialization as S
from compiler.traced_module.policy import TracedModuleError
from compiler.traced_module.utils import assign_attr, get_subattr

RNG = np.random.default_rng(0)


class Block(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = M.Conv2d(3, 3, 1), M.BatchNorm2d(3)
        self.conv2, self.bn2 = M.Conv2d(3, 3, 3, padding=1, groups=3), M.BatchNorm2d(3)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x))) * 3 + F.relu(self.bn2(self.conv2(x)))


class Net(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block_0, self.block_1 = Block(), Block()

    def forward(self, x):
        return self.block_0(x) + self.block_1(x)


def _net() -> Net:
    net = Net()
    for b in (net.block_0, net.block_1):
        for bn in (b.bn, b.bn2):
            bn.running_mean._reset(RNG.random((1, 3, 1, 1)).astype(np.float32))
            bn.running_var._reset(RNG.random((1, 3, 1, 1)).astype(np.float32) + 0.5)
            bn.weight._reset(RNG.random((1, 3, 1, 1)).astype(np.float32))
            bn.bias._reset(RNG.random((1, 3, 1, 1)).astype(np.float32))
    net.eval()
    return net


@pytest.mark.parametrize("flatten", [True, False])
def test_fuse_conv_bn(flatten: bool) -> None:
    net = _net()
    x = mge.tensor(RNG.random((1, 3, 8, 8)).astype(np.float32))
    want = net(x).numpy()
    traced = tm.trace_module(net, x)
    if flatten:
        traced = traced.flatten()
    fused = tm.optimize(traced, "FuseConvBn")
    np.testing.assert_allclose(fused(x).numpy(), want, rtol=1e-5, atol=1e-5)
    assert fused.graph.get_module_by_type(M.BatchNorm2d).as_count() == 0
    assert fused.graph.get_function_by_type(F.batch_norm).as_count() == 0
    # the original is untouched
    assert traced.graph.get_module_by_type(M.BatchNorm2d).as_count() == 4
    np.testing.assert_allclose(traced(x).numpy(), want, rtol=1e-6)


def test_optimize_refuses_unknown_passes() -> None:
    traced = tm.trace_module(_net(), mge.tensor(np.zeros((1, 3, 4, 4), np.float32)))
    with pytest.raises(TracedModuleError, match="unknown pass"):
        tm.optimize(traced, "Nope")


def test_training_bn_is_not_fused() -> None:
    net = _net()
    net.train()
    traced = tm.trace_module(net, mge.tensor(np.zeros((2, 3, 4, 4), np.float32)))
    assert tm.optimize(traced).graph.get_module_by_type(M.BatchNorm2d).as_count() == 4


def test_functional_loader_runs_when_a_graph_is_unpickled() -> None:
    class Conv(M.Module):
        def forward(self, x, w):
            return F.conv2d(x, w)

    x = mge.tensor(RNG.random((1, 3, 6, 6)).astype(np.float32))
    w = mge.tensor(RNG.random((2, 3, 3, 3)).astype(np.float32))
    traced = tm.trace_module(Conv(), x, w)
    seen: list[object] = []
    saved = dict(S.FUNCTIONAL_LOADER)
    try:
        S.register_functional_loader(("megengine.functional.nn", "conv2d"))(seen.append)
        with pytest.raises(ValueError, match="already registered"):
            S.register_functional_loader(("compiler.functional.nn", "conv2d"))(seen.append)
        loaded = pickle.loads(pickle.dumps(traced))
    finally:
        S.FUNCTIONAL_LOADER.clear()
        S.FUNCTIONAL_LOADER.update(saved)
    assert len(seen) == 1 and seen[0].func_key == ("compiler.functional.nn", "conv2d")
    np.testing.assert_array_equal(loaded(x, w).numpy(), F.conv2d(x, w).numpy())


def test_get_subattr_and_assign_attr() -> None:
    net = _net()
    assert get_subattr(net, "") is net
    assert get_subattr(net, "block_0.conv.weight") is net.block_0.conv.weight
    new = mge.Parameter(np.zeros((3, 3, 1, 1), np.float32))
    assign_attr(new, net, "block_1.conv.weight")
    assert net.block_1.conv.weight is new
    with pytest.raises(AttributeError, match="is not an Module"):
        get_subattr(net, "block_0.conv.weight.x")


def test_register_as_builtin_keeps_calls_and_default_checker() -> None:
    class Scale(M.Module):
        def forward(self, x):
            return x * 2 + 1

    class Outer(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = Scale()

        def forward(self, x):
            return self.s(x) - 1

    x = mge.tensor(np.arange(4, dtype=np.float32))
    tm.register_as_builtin(Scale)
    traced = tm.trace_module(Outer(), x)
    assert traced.graph.get_module_by_type(Scale).as_count() == 1
    assert traced.graph.get_method_by_type("__mul__").as_count() == 0  # not traced into
    np.testing.assert_array_equal(traced(x).numpy(), x.numpy() * 2)
    with pytest.raises(TypeError, match="Module subclass"):
        tm.register_as_builtin(int)


def test_default_checker_catches_forward_that_cannot_replay() -> None:
    class HostEdit(M.Module):
        def forward(self, x):
            y = x * 2
            y._reset(y.numpy() + 1)  # a host-side edit the graph does not record
            return y

    x = mge.tensor(np.zeros(4, np.float32))
    with pytest.raises(TracedModuleError, match="differs from the eager run"):
        tm.trace_module(HostEdit(), x)


def test_default_checker_leaves_batch_norm_state_alone() -> None:
    bn = M.BatchNorm2d(3)
    x = mge.tensor(RNG.random((2, 3, 4, 4)).astype(np.float32))
    tm.trace_module(bn, x)
    reference = M.BatchNorm2d(3)
    reference(x)
    np.testing.assert_array_equal(bn.running_mean.numpy(), reference.running_mean.numpy())


@pytest.mark.parametrize("conv_sub", [False, True])
@pytest.mark.parametrize("bn_sub", [False, True])
def test_fuse_conv_bn_with_subclassed_layers(conv_sub: bool, bn_sub: bool) -> None:
    # subclasses of the built-in layers are traced into: F.conv2d / F.batch_norm calls
    class MyConv(M.Conv2d):
        pass

    class MyBN(M.BatchNorm2d):
        pass

    class Net2(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = (MyConv if conv_sub else M.Conv2d)(3, 4, 3, padding=1, groups=1)
            self.bn = (MyBN if bn_sub else M.BatchNorm2d)(4)

        def forward(self, x):
            return F.relu(self.bn(self.conv(x)))

    net = Net2()
    net.bn.running_mean._reset(RNG.random((1, 4, 1, 1)).astype(np.float32))
    net.bn.running_var._reset(RNG.random((1, 4, 1, 1)).astype(np.float32) + 0.5)
    net.eval()
    x = mge.tensor(RNG.random((1, 3, 6, 6)).astype(np.float32))
    want = net(x).numpy()
    fused = tm.optimize(tm.trace_module(net, x).flatten())
    np.testing.assert_allclose(fused(x).numpy(), want, rtol=1e-5, atol=1e-5)
    assert fused.graph.get_function_by_type(F.batch_norm).as_count() == 0
    assert fused.graph.get_module_by_type(M.BatchNorm2d).as_count() == 0
    loaded = pickle.loads(pickle.dumps(fused))
    np.testing.assert_allclose(loaded(x).numpy(), want, rtol=1e-5, atol=1e-5)


def test_expr_checker_names_the_first_node_that_does_not_replay() -> None:
    import compiler.traced_module.policy as policy

    class HostEdit(M.Module):
        def forward(self, x):
            y = x * 2
            y._reset(y.numpy() + 1)  # not recorded: the replay of y differs from here on
            return F.relu(y) + 1

    x = mge.tensor(np.ones(4, np.float32))
    tm.enable_expr_checker()
    try:
        with pytest.raises(TracedModuleError, match="expression check: .*replays to other values"):
            tm.trace_module(HostEdit(), x)
        net = _net()
        traced = tm.trace_module(net, mge.tensor(RNG.random((1, 3, 4, 4)).astype(np.float32)))
        assert traced.graph.get_module_by_type(M.BatchNorm2d).as_count() == 4
    finally:
        policy._expr_checker = False
