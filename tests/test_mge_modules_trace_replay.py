"""Behaviour 6: a traced function's body runs on every call (MegEngine's default, non-``without_host``
trace) and a call whose operations differ from the recording raises TraceError with MegEngine's
reason; ``without_host=True`` runs Python only on the first call."""

from __future__ import annotations

import io

import numpy as np
import pytest

import compiler as mge
from compiler.jit import TraceError, trace

A = mge.tensor([1, 2, 3, 4])
B = mge.tensor([5, 6, 7, 8])
C = mge.tensor([9, 0, 1, 2])


@pytest.mark.parametrize(
    "normal, other, reason",
    [
        ("a + b + c", "a + b - c", "operator mismatch"),
        ("a + b + 1", "a + b + 2", "tensors not equals"),
        ("((a + b), (b + c))[0]", "a + b", "mismature end"),
        ("a + b + c", "c + (a + b)", "expect internal node, got external"),
        ("c + (a + b)", "a + b + c", "expect external node, got internal"),
        ("a + b + c", "a + b + c + c", "too many instructions"),
        ("((a + b), (b + c))[1]", "((a + b), (b + c))[0]", "data unreadable"),
        ("((a + b), (b + c))[1] + a", "((a + b), (b + c))[0] + a", "input id mismatch"),
    ],
)
@pytest.mark.parametrize("symbolic", [True, False])
def test_mismatch_reasons(normal: str, other: str, reason: str, symbolic: bool) -> None:
    use_other = False

    @trace(symbolic=symbolic)
    def fn(a, b, c):
        return eval(other if use_other else normal)

    for step in range(6):
        use_other = step in (2, 4)
        if use_other:
            with pytest.raises(TraceError) as info:
                fn(A, B, C)
            assert str(info.value) == f"trace error because {reason}"
            assert isinstance(info.value, RuntimeError)
        else:
            a, b, c = A, B, C  # noqa: F841 - read by eval
            np.testing.assert_equal(fn(A, B, C).numpy(), eval(normal).numpy())


def test_body_side_effects_every_call_and_exceptions_pass_through() -> None:
    seen: list[int] = []
    boom = ValueError("boom")

    @trace(symbolic=True)
    def fn(a, fail=False):
        seen.append(1)
        r = a * 2
        if fail:
            raise boom
        return r

    for _ in range(3):
        np.testing.assert_equal(fn(A).numpy(), [2, 4, 6, 8])
    assert len(seen) == 3
    with pytest.raises(ValueError) as info:
        fn(A, fail=True)
    assert info.value is boom


def test_without_host_runs_python_once() -> None:
    seen: list[int] = []

    @trace(symbolic=True, without_host=True)
    def fn(a):
        seen.append(1)
        return a + 1

    for _ in range(3):
        np.testing.assert_equal(fn(A).numpy(), [2, 3, 4, 5])
    assert len(seen) == 1


def test_parameters_updated_between_calls_are_not_a_mismatch() -> None:
    w = mge.Parameter([1.0, 1.0])

    @trace(symbolic=True)
    def fn(x):
        return x * w

    x = mge.tensor([2.0, 3.0])
    np.testing.assert_equal(fn(x).numpy(), [2.0, 3.0])
    w._reset(np.array([2.0, 2.0], np.float32))
    np.testing.assert_equal(fn(x).numpy(), [4.0, 6.0])


def test_exclude_from_trace_values_change_between_calls() -> None:
    from compiler.jit import GraphOptimizationConfig, exclude_from_trace

    count = [0]

    @trace(symbolic=True, imperative=False, graph_opt_config=GraphOptimizationConfig())
    def fn(a):
        with exclude_from_trace():
            count[0] += 1
            step = mge.tensor(float(count[0])) * 1  # an op inside the excluded block
        return a + step

    x = mge.tensor([1.0, 2.0])
    for i in range(1, 4):
        np.testing.assert_equal(fn(x).numpy(), [1.0 + i, 2.0 + i])
    with exclude_from_trace():  # outside a trace: nothing to exclude
        assert (x + 1).numpy().tolist() == [2.0, 3.0]
    assert "UNSET" in repr(GraphOptimizationConfig())


def test_traced_function_may_return_none_or_numbers_without_capture() -> None:
    seen: list[float] = []

    @trace(symbolic=True)
    def step(a):
        seen.append(float(F_sum(a).numpy()))

    @trace(symbolic=False)
    def pair(a):
        return a * 2, 3, {"k": a + 1, "n": None}

    x = mge.tensor([1.0, 2.0])
    assert step(x) is None and step(x) is None and seen == [3.0, 3.0]
    for _ in range(2):
        t, three, d = pair(x)
        assert three == 3 and d["n"] is None
        np.testing.assert_equal(t.numpy(), [2.0, 4.0])
        np.testing.assert_equal(d["k"].numpy(), [2.0, 3.0])

    @trace(symbolic=True, capture_as_const=True)
    def nothing(a):
        a * a

    assert nothing(x) is None  # allowed; only dumping it is refused, as in MegEngine
    with pytest.raises(ValueError, match="without return values cannot be dumped"):
        nothing.dump(io.BytesIO())

    @trace(symbolic=True, capture_as_const=True)
    def number(a):
        return 3

    with pytest.raises(TraceError, match="capture_as_const"):
        number(x)
    with pytest.raises(TraceError, match="Only support tensor type args when capture_as_const is enabled"):
        number(1)


def F_sum(a):  # noqa: N802 - a local alias keeps the test body short
    import compiler.functional as F

    return F.sum(a)


def test_exclude_from_trace_may_replace_internal_values_and_random_samples_vary() -> None:
    from compiler.jit import exclude_from_trace

    flip = [False]

    @trace(symbolic=True)
    def f(x):
        x = -x
        with exclude_from_trace():
            if flip[0]:
                x = -x
        return -x

    x = mge.tensor([1])
    for i in range(4):
        flip[0] = bool(i % 2)
        np.testing.assert_equal(f(x).numpy(), [-1] if flip[0] else [1])

    @trace(symbolic=True)
    def noise():
        return mge.random.normal(size=[4]) * 1

    a, b = noise().numpy(), noise().numpy()
    assert not np.array_equal(a, b)
