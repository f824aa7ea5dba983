"""jit.trace: decorator and direct forms, several inputs/outputs, keyword modules, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler import jit
from compiler.core import OpError
from compiler.jit import TraceError


def _x(shape: tuple[int, ...], seed: int = 0) -> xm.Tensor:
    return xm.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_decorator_with_options_records_ir_and_replays() -> None:
    calls = []

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(a, b):
        calls.append(1)
        return F.relu(a) * b + 1.0

    a, b = _x((2, 3)), _x((2, 3), 1)
    first = f(a, b).numpy()
    second = f(a, b).numpy()
    assert len(calls) == 2, "MegEngine runs the Python body on every call (checked against the trace)"
    assert np.array_equal(first, second)
    text = f.ir()
    assert "mgb.elemwise relu" in text and "mgb.elemwise mul" in text
    assert 'input_names = ["arg_0", "arg_1"]' in text


def test_direct_form_and_tuple_list_outputs() -> None:
    def g(a, b):
        return [a + b, a - b]

    traced = jit.trace(g, symbolic=True, capture_as_const=True)
    a, b = _x((3,)), _x((3,), 2)
    out1 = traced(a, b)
    out2 = traced(a, b)
    assert isinstance(out2, list) and len(out2) == 2
    for x1, x2 in zip(out1, out2, strict=True):
        assert np.array_equal(x1.numpy(), x2.numpy())

    traced_t = jit.trace(lambda a: (a * 2, F.exp(a)), symbolic=True, capture_as_const=True)
    traced_t(a)
    assert isinstance(traced_t(a), tuple)


def test_keyword_module_argument_is_captured_as_constants() -> None:
    net = M.Sequential(M.Linear(4, 3), M.ReLU(), M.Linear(3, 2)).eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data, *, net):
        return F.softmax(net(data))

    x = _x((5, 4))
    eager = F.softmax(net(x)).numpy()
    infer(x, net=net)
    replay = infer(x, net=net).numpy()
    assert np.array_equal(replay, eager)
    text = infer.ir()
    assert text.count("mgb.const") == 4
    assert 'name = "0.weight"' in text and 'scope = "2"' in text


def test_new_input_shape_retraces() -> None:
    calls = []

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(a):
        calls.append(a._tuple_shape)  # a.shape is a Tensor in a trace (symbolic_shape=True)
        return F.sum(a, axis=1)

    f(_x((2, 3)))
    f(_x((4, 5)))
    f(_x((4, 5)))
    assert calls == [(2, 3), (4, 5), (4, 5)]


def test_non_tensor_return_is_a_clear_error() -> None:
    # with static shapes a.shape is a tuple of ints (with symbolic ones, the default, a Tensor)
    @jit.trace(symbolic=True, capture_as_const=True, symbolic_shape=False)
    def bad(a):
        return a.shape

    with pytest.raises(TraceError, match="bad must return a Tensor.*got tuple containing int"):
        bad(_x((2,)))


def test_shape_error_names_op_and_user_line() -> None:
    @jit.trace(symbolic=True, capture_as_const=True)
    def bad(a, w):
        return F.conv2d(a, w)  # the line the error must point to

    with pytest.raises(OpError, match=r"conv2d: .*3 channels.*test_trace.py:\d+"):
        bad(_x((1, 3, 8, 8)), _x((4, 2, 3, 3)))


def test_ir_before_first_call_is_a_clear_error() -> None:
    f = jit.trace(lambda a: a + 1, symbolic=True, capture_as_const=True)
    with pytest.raises(TraceError, match="has not been traced yet"):
        f.ir()


# -- MegEngine's trace behaviours (checked on MegEngine 1.13 by its own unit tests) --------------


def test_symbolic_trace_returns_the_simplified_graphs_values() -> None:
    """A symbolic trace's results come from its graph, which opt_level >= 1 simplifies (y / y is
    1 where y is 0); opt_level 0 keeps the eager values."""

    def body(x):
        y = 2.0 * x
        return y / y

    plain = jit.trace(body, symbolic=True, opt_level=0, capture_as_const=True)
    simplified = jit.trace(body, symbolic=True, opt_level=1, capture_as_const=True)
    eager = jit.trace(body, symbolic=False, opt_level=1, capture_as_const=True)
    d = xm.tensor(0.0)
    for _ in range(2):  # the recording call and a checked one
        assert np.isnan(plain(d).numpy())
        assert simplified(d).numpy().item() == 1.0
        assert np.isnan(eager(d).numpy())


def test_get_profile() -> None:
    @jit.trace(symbolic=True, profiling=True)
    def f(x):
        return -x * 2

    with pytest.raises(TraceError, match="not been called"):
        f.get_profile()
    f(xm.tensor([1.0, 2.0]))
    prof = f.get_profile()["profiler"]
    assert [v["type"] for v in prof["opr_footprint"].values()] == ["mgb.elemwise", "mgb.elemwise"]
    assert all(v["kern"] >= 0 for v in prof["host"].values())
    with pytest.raises(TraceError, match="without profiling=True"):
        jit.trace(lambda x: x, symbolic=True).get_profile()


def test_repeat_with_a_tensor_count_runs_the_same_ops() -> None:
    @jit.trace(symbolic=False)
    def f(data, repeats):
        return F.repeat(data, repeats, axis=1)

    data = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    for r in range(1, 5):
        out = f(xm.tensor(data), xm.tensor(r))
        np.testing.assert_array_equal(out.numpy(), np.repeat(data, r, axis=1))


def test_topk_k_beyond_the_row_takes_the_row() -> None:
    x = xm.tensor(np.array([[3.0, 1.0], [0.0, 5.0]], np.float32))
    v, i = F.topk(x, 3)  # MegEngine 1.13's values
    assert v.numpy().tolist() == [[3.0, 1.0], [5.0, 0.0]] and i.numpy().tolist() == [[0, 1], [1, 0]]
    v, i = F.topk(x, 3, descending=False)
    assert v.numpy().tolist() == [[1.0, 3.0], [0.0, 5.0]] and i.numpy().tolist() == [[1, 0], [0, 1]]
