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
