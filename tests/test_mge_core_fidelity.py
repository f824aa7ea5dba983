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


def test_operator_with_none_is_megengine_type_error() -> None:
    for op in (lambda t: t + None, lambda t: None * t, lambda t: t - None):
        with pytest.raises(TypeError, match=r"the operand is None and is not supported\."):
            op(mge.Tensor(1.0))


class _Inner(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = M.BatchNorm2d(2)

    def forward(self, x: mge.Tensor) -> mge.Tensor:
        return x


class _Net(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = [M.Linear(2, 2), {"b": _Inner(), "a": M.ReLU()}]
        self.head = _Inner()
        self.scale = mge.Parameter([1.0])

    def forward(self, x: mge.Tensor) -> mge.Tensor:
        return x


def test_module_flatten_keys_parents_as_megengine() -> None:
    from compiler.module.module import _access_structure

    n = _Net()
    # the values MegEngine 1.13 gives for this module
    assert [(k, type(m).__name__, type(p).__name__) for k, m, p in n.named_modules(with_parent=True)] == [
        ("", "_Net", "NoneType"), ("blocks.0", "Linear", "_Net"), ("blocks.1.a", "ReLU", "_Net"),
        ("blocks.1.b", "_Inner", "_Net"), ("blocks.1.b.bn", "BatchNorm2d", "_Inner"),
        ("head", "_Inner", "_Net"), ("head.bn", "BatchNorm2d", "_Inner"),
    ]  # fmt: skip
    assert [type(m).__name__ for m, _ in n.modules(with_parent=True)][:3] == ["_Net", "Linear", "ReLU"]
    assert [type(x).__name__ for x in n._flatten()][:4] == ["Linear", "Parameter", "Parameter", "ReLU"]
    assert [k for k, _ in n._flatten(with_key=True, recursive=False)] == [
        "blocks.0", "blocks.1.a", "blocks.1.b", "head", "scale"
    ]  # fmt: skip
    params = n._flatten(with_key=True, with_parent=True, predicate=lambda o: isinstance(o, mge.Parameter))
    assert [(k, type(p).__name__) for k, _, p in params][-2:] == [
        ("head.bn.weight", "BatchNorm2d"), ("scale", "_Net")
    ]  # fmt: skip
    inner = n.blocks[1]["b"]
    assert _access_structure(n, "blocks.1.b.bn", lambda p, k, o: (p, k, o)) == (inner, "bn", inner.bn)
    assert _access_structure(n, "blocks.0") is n.blocks[0]


def test_module_tensor_under_non_str_key_is_an_assertion() -> None:
    class Bad(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = {1: mge.tensor([1.0]), 2: 3}

        def forward(self, x: mge.Tensor) -> mge.Tensor:
            return x

    with pytest.raises(AssertionError, match="keys for Tensor and Module must be str, error key: 1"):
        list(Bad().parameters())


def test_getitem_follows_numpy_advanced_indexing() -> None:
    x = np.arange(60).reshape(3, 4, 5).astype("int32")
    xx = mge.tensor(x)
    y = np.array([0, 2], dtype=np.int32)
    pair = np.array([[0, 1], [1, 2]])
    cases = [
        (1, slice(None), [0, 1]),  # advanced indices apart: their axes go first
        ([0, 2], 1),
        (slice(None, 2), y, None, [0, 1]),
        (None, slice(None), None, [0, 2], None, [1, 2]),
        ((0, 2, 1), slice(None)),  # a tuple inside the index is an index vector
        (slice(1, 3), [0, 2], slice(None, None, 2)),
        (Ellipsis, [1, 3]),
        (slice(None), [True, False, True, True]),  # a bool list is a mask
        (y, Ellipsis, 1),
        (pair, None, pair),
        (x[:, :, 0] > 20,),
        (1, np.array([True, False, True, False])),
    ]
    for idx in cases:
        got = xx[tuple(mge.tensor(i) if isinstance(i, np.ndarray) else i for i in idx)]
        np.testing.assert_array_equal(got.numpy(), x[idx], err_msg=str(idx))
    with pytest.raises(IndexError):
        xx[..., ...]
    with pytest.raises(IndexError):
        xx[y, y, y, y]


def test_setitem_is_differentiated_and_traced_with_numpy_rules() -> None:
    import compiler.jit as jit
    from compiler.autodiff import GradManager

    x = mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))
    gm = GradManager().attach(x)
    with gm:
        y = x * 2
        y[0, 1] = 0.0
        y[mge.tensor([True, False]), 2] = 5.0
        gm.backward(y.sum())
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 0, 0], [2, 2, 2]])  # MegEngine's values

    def f(t: mge.Tensor) -> mge.Tensor:
        t2 = t * 1
        t2[1:3, [0, 2], 4] = -1.0
        t2[1, :, [0, 1]] = 9.0
        return t2

    a = np.arange(60).reshape(3, 4, 5).astype("float32")
    want = a.copy()
    want[1:3, [0, 2], 4] = -1.0
    want[1, :, [0, 1]] = 9.0
    np.testing.assert_array_equal(f(mge.tensor(a)).numpy(), want)
    traced = jit.trace(symbolic=True)(f)
    for _ in range(2):
        np.testing.assert_array_equal(traced(mge.tensor(a)).numpy(), want)


def test_permutation_of_a_0d_tensor_has_one_element() -> None:
    from compiler.random import RNG

    out = RNG(seed=1).permutation(mge.Tensor(7))
    assert out.shape == (1,) and out.dtype == np.int32 and int(out.numpy()[0]) == 7


def test_split_errors_and_short_device_names_as_megengine() -> None:
    import compiler.functional as F

    t = mge.tensor(np.zeros((2, 3, 4, 5), "float32"))
    assert len(F.split(t, 4, axis=3)) == 4  # uneven sections are allowed
    with pytest.raises(ValueError, match=r"^Invalid nsplits_or_secions: \[3, 2, 5\]$"):
        F.split(t, [3, 2, 5], axis=3)
    with pytest.raises(ValueError, match=r"^The size 2 at dim 0 cannot be split into 4 sections$"):
        F.split(t, 4)
    assert str(F.linspace(1, 9, 8, device="cpu:0").device) == "cpu0:0"
    assert str(mge.Tensor(1.0, device="xpu:1").device) == "xpu0:1"
    assert str(mge.Tensor(1.0, device="xpu").device) == "xpux:0"
    with pytest.raises(ValueError):
        mge.Tensor(1.0, device="cpu")


def test_network_constants_keep_their_device() -> None:
    import compiler.functional as F
    from compiler.utils.network import Network

    n = Network()
    a = n.make_const(np.ones((2, 2), "float32"), device="cpu0")
    b = n.make_const(np.ones((2, 2), "float32"), device="cpu1")
    assert str(F.concat([a, b], device="cpu1").device) == "cpu1:0"
    assert str(F.concat([a, a]).device) == "cpu0:0"
    with pytest.raises(RuntimeError):
        F.concat([a, b])


def test_astensor1d_with_a_graph_var_reference_gives_a_graph_var() -> None:
    from compiler.core.tensor.utils import astensor1d
    from compiler.utils.network import Network
    from compiler.utils.network_node import VarNode

    net = Network()
    ref = net.make_const(0)
    for x in ([1, 2, 3], np.asarray([1, 2, 3], "int32"), [1, net.make_const(2), 3]):
        out = astensor1d(x, ref, dtype="float32")
        assert isinstance(out, VarNode)
        np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0])
    assert not isinstance(astensor1d([1, 2], mge.tensor(0)), VarNode)


def test_saved_tensor_keeps_its_device() -> None:
    import io

    buf = io.BytesIO()
    mge.save(mge.Tensor(np.arange(3), device="cpu0", dtype=np.int32), buf)
    buf.seek(0)
    loaded = mge.load(buf)
    assert loaded.device.logical_name == "cpu0:0" and loaded.dtype == np.int32
    buf.seek(0)
    assert str(mge.load(buf, map_location="cpux").device) == "cpux:0"
    buf = io.BytesIO()
    mge.save(mge.Tensor([1.0]), buf)
    buf.seek(0)
    assert str(mge.load(buf).device) == "xpux:0"


def test_function_refuses_non_tensor_inputs_in_megengine_words() -> None:
    from compiler.autodiff import Function

    class AddConst(Function):
        def forward(self, inp: mge.Tensor, c: mge.Tensor) -> mge.Tensor:
            return inp + c

        def backward(self, grad: mge.Tensor) -> tuple[mge.Tensor, None]:
            return grad, None

    with pytest.raises(TypeError, match=r"op .* expect type Tensor as inputs"):
        AddConst()(mge.tensor([2.33]), 1)


def test_unnamed_tensor_name_is_empty_string() -> None:
    x = mge.Tensor(0)
    assert x.name == ""
    x.name = "x"
    assert mge.Tensor(0, name="n").name == "n"
    assert mge.Tensor(x).name == ""  # a copy does not take the name
    assert (x + 1).name == ""


def test_interpreter_options_and_core_graph() -> None:
    import compiler.core as core
    from compiler.core.tensor.megbrain_graph import Graph

    assert core.Graph is Graph
    assert core.get_option("async_level") == 2 and core.get_option("enable_host_compute") == 1
    core.set_option("enable_drop", True)
    try:
        assert core.get_option("enable_drop") == 1
        assert float((mge.tensor([1.0]) + 1).numpy()[0]) == 2.0
    finally:
        core.set_option("enable_drop", False)
    with pytest.raises(IndexError):
        core.get_option("no_such_option")


def test_conv2d_int_input_with_float_weight_computes_in_float() -> None:
    import compiler.functional as F

    x = mge.tensor(np.arange(0, 48).reshape(1, 3, 4, 4))
    y = F.conv2d(x, mge.tensor(np.ones((2, 3, 2, 2), "float32")))
    assert x.dtype == np.int32 and y.dtype == np.float32
    np.testing.assert_array_equal(y.numpy().ravel()[:4], [222, 234, 246, 270])  # MegEngine's values


def test_nhwc_format_tag_propagates_as_in_megengine() -> None:
    import compiler.functional as F

    a = mge.tensor(np.zeros((1, 2, 3, 4)), format="nhwc")
    # each value below is what MegEngine 1.13 reports
    assert mge.tensor(a).format == "nhwc"
    keep = [a + 1, F.reshape(a, (1, 2, 12, 1)), a.astype("int32"), a[:, :1], F.relu(a), F.max_pool2d(a, 2)]
    assert [t.format for t in keep] == ["nhwc"] * len(keep)
    drop = [
        F.transpose(a, (0, 1, 3, 2)), F.broadcast_to(a[:, :, :, :1], (3, 1, 2, 3, 4)),
        F.nn.pad(a, ((1, 1),), mode="constant"), F.reshape(a, (24,)), F.expand_dims(a, 0), a[0],
        F.sum(a, axis=1, keepdims=True), F.flatten(a),
    ]  # fmt: skip
    assert [t.format for t in drop] == ["default"] * len(drop)


def test_setitem_ellipsis_resets_the_tensor() -> None:
    x = mge.tensor(np.ones((2, 2), "float32"))
    x[...] = 0
    assert x.shape == () and x.dtype == np.float32
    x[...] = mge.tensor([1, 2], dtype="int32", format="nchw")
    assert x.shape == (2,) and x.dtype == np.int32 and x.format == "nchw"


def test_batch_norm_returned_running_stats_keep_the_format_tag() -> None:
    import compiler.functional as F

    def ones() -> mge.Tensor:
        return mge.tensor(np.ones((1, 2, 1, 1)), format="nhwc")

    x = mge.tensor(np.arange(24, dtype="float32").reshape(1, 2, 3, 4), format="nhwc")
    outs = F.batch_norm(x, ones(), ones(), ones(), ones(), training=True, inplace=False)
    assert [t.format for t in outs] == ["nhwc"] * 3
