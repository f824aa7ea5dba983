"""MegEngine 1.13 behaviours that its own unit tests check, each with the values real MegEngine gives
(taken once with the MegEngine oracle; the tests do not need MegEngine)."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
import compiler.module as M
from compiler.module.init import calculate_fan_in_and_fan_out


def test_fan_in_fan_out_drops_first_axis_of_5d_weights() -> None:
    # MegEngine treats the first axis of any 5+-d weight as a groups axis (ungrouped conv3d too)
    assert calculate_fan_in_and_fan_out(M.Conv3d(2, 4, (5, 7, 9), groups=2).weight) == (315, 630)
    assert calculate_fan_in_and_fan_out(M.Conv3d(2, 3, (5, 7, 9)).weight) == (315, 126)
    assert calculate_fan_in_and_fan_out(M.Conv2d(2, 4, (5, 7), groups=2).weight) == (35, 70)
    with pytest.raises(ValueError):
        calculate_fan_in_and_fan_out(M.Linear(3, 8).bias)


def test_import_tensor_submodule_gives_the_class() -> None:
    import compiler.tensor as tensor_attr

    assert tensor_attr is mge.Tensor
    mod = __import__("sys").modules["compiler.tensor"]
    mge.tensor = mod  # what the import system does when an alias package loads the submodule
    assert mge.tensor is mge.Tensor
    assert isinstance(mge.tensor(np.ones(2)), mge.tensor)


def test_rng_samples_on_its_device_and_empty_multinomial() -> None:
    from compiler.random import RNG

    out = RNG(seed=111, device="xpu1").uniform(size=(4,))
    assert out.device == "xpu1"
    assert str(out.device) == "xpu1:0"
    np.testing.assert_allclose(out.numpy(), RNG(seed=111, device="xpu0").uniform(size=(4,)).numpy())
    rows = mge.random.uniform(0, 1, (0, 10))
    for replacement in (True, False):
        assert mge.random.multinomial(rows, num_samples=2, replacement=replacement).shape == (0, 2)


def test_core_grad_callbacks_intermediate_and_second_order() -> None:
    import compiler.functional as F
    from compiler.core.autodiff.grad import Grad

    x_np = np.linspace(0.1, 0.9, 5, dtype=np.float32)
    x = mge.Tensor(x_np)
    got: dict[str, mge.Tensor] = {}
    with Grad() as grad:
        grad.wrt(x, callback=lambda g: got.update(dx=g))
        y = x * x
        grad.wrt(y, callback=lambda g: got.update(dy=g))  # an intermediate tensor
        grad(y * y, mge.Tensor(np.ones_like(x_np)))
    np.testing.assert_allclose(got["dx"].numpy(), 4 * x_np**3, rtol=1e-6)
    np.testing.assert_allclose(got["dy"].numpy(), 2 * x_np**2, rtol=1e-6)
    assert x.grad is None  # Grad only calls back; it does not write .grad

    def save(g: mge.Tensor) -> None:
        x.grad = g

    ones = mge.Tensor(np.ones_like(x_np))
    with Grad("outer") as outer:
        with Grad("inner") as inner:
            outer.wrt(x, callback=save)
            inner.wrt(x, callback=save)
            inner(F.cos(x), ones)
            first = x.grad
        np.testing.assert_allclose(first.numpy(), -np.sin(x_np), rtol=1e-5)
        x.grad = None
        outer(first, ones)
    np.testing.assert_allclose(x.grad.numpy(), -np.cos(x_np), rtol=1e-5)


def test_grad_manager_attached_intermediate_gets_its_gradient() -> None:
    from compiler.autodiff import GradManager

    a = mge.Parameter([1.0])
    gm = GradManager()
    with gm:
        b = a * 3
        gm.attach(b)
        gm.backward(b + 1)
    assert float(b.grad.numpy()[0]) == 1.0


def test_megbrain_graph_runs_input_and_output_nodes() -> None:
    from concurrent.futures import Future

    import compiler.functional as F
    from compiler.core.ops.builtin import Elemwise
    from compiler.core.tensor import megbrain_graph as G
    from compiler.utils.network import Network

    net = Network()
    c = net.make_const(np.arange(6, dtype="float32").reshape(2, 3))
    out = G.OutputNode((F.exp(c) + 1).var)
    out.graph.compile(out.outputs).execute()
    np.testing.assert_allclose(out.get_value().numpy(), np.exp(np.arange(6.0)).reshape(2, 3) + 1, rtol=1e-6)

    g = G.Graph()
    px = G.InputNode(device="xpux", dtype="float32", graph=g)
    py = G.OutputNode(px.outputs[0])
    f = g.compile(py.outputs[0])
    for n in (3, 5):  # execute waits for the input's value; each value serves one execution
        f.execute()
        v = np.arange(n, dtype="float32")
        px.set_value(mge.Tensor(v))
        np.testing.assert_array_equal(py.get_value().numpy(), v)
        f.wait()
    with pytest.raises(RuntimeError, match="no value"):
        g()

    g = G.Graph()
    inp = G.InputNode(device="xpux", dtype="float32", shape=(3,), graph=g)
    (neg,) = G.apply_normal_varnode(Elemwise(Elemwise.Mode.NEGATE), inp.outputs[0])
    fut: Future = Future()
    g.compile(G.output_callback(fut.set_result, neg))
    inp.set_value(np.array([1, -2, 3], "float32"))
    g()
    np.testing.assert_array_equal(fut.result().numpy(), [-1, 2, -3])
    attr = G.AttrOutputNode(inp.outputs[0])
    g.compile(attr.outputs[0]).execute()
    inp.set_value(np.ones((5,), "float32"))
    value = attr.get_value()
    assert (value.shape, value.dtype) == ((5,), np.float32)


def test_exponential_distribution_shapes_and_moments() -> None:
    from compiler.distributions import Exponential

    mge.random.seed(5)
    rate = np.abs(np.random.RandomState(0).randn(5, 5)) + 0.1
    assert Exponential(rate).sample().shape == (5, 5)
    assert Exponential(rate).sample((7,)).shape == (7, 5, 5)
    assert Exponential(np.array([0.3])).sample().shape == (1,)
    assert Exponential(0.2).sample((1,)).shape == (1,)
    m = Exponential(2.0)
    samples = m.sample((100000,)).numpy()
    assert abs(samples.mean() - float(m.mean.numpy())) < 0.02
    assert abs(samples.var() - float(m.variance.numpy())) < 0.02
    x = mge.Tensor([0.5, 1.0])
    np.testing.assert_allclose(m.log_prob(x).numpy(), np.log(2.0) - 2.0 * np.array([0.5, 1.0]), rtol=1e-6)
    np.testing.assert_allclose(m.icdf(m.cdf(x)).numpy(), [0.5, 1.0], rtol=1e-5)


def test_interpolate_rank_error_is_an_assertion_error() -> None:
    import compiler.functional as F

    inp = mge.tensor(np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2))
    with pytest.raises(AssertionError):
        F.vision.interpolate(inp, scale_factor=2.0, mode="linear")
    with pytest.raises(AssertionError):
        F.vision.interpolate(inp, scale_factor=(2.0, 2.0, 2.0))


def test_numpy_ufunc_on_tensor_gives_tensor_on_its_device() -> None:
    xx = mge.Tensor(np.array([1, 2, 3], dtype=np.int32), device="cpu0")
    out = np.add(xx, np.array([1, 0, 3], dtype=np.int32))
    assert isinstance(out, mge.Tensor) and out.device == xx.device
    np.testing.assert_array_equal(out.numpy(), [2, 2, 6])
    assert np.equal(xx, xx).dtype == np.bool_


def test_operator_with_none_is_megengine_type_error() -> None:
    for op in (lambda t: t + None, lambda t: None * t, lambda t: t - None):
        with pytest.raises(TypeError, match=r"the operand is None and is not supported\."):
            op(mge.Tensor(1.0))
