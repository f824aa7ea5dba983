"""The ``Tensor`` API: construction and default dtypes, properties, operators with scalar promotion,
indexing, and the shape/reduction methods, against numpy."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pytest

import compiler as xm
from compiler import jit

RNG = np.random.default_rng(99)


@pytest.mark.parametrize(
    "value,dtype",
    [
        (1.5, np.float32),
        ([1.0, 2.0], np.float32),
        (np.ones(3, np.float64), np.float32),  # MegEngine narrows float64 to float32
        (3, np.int32),
        ([1, 2, 3], np.int32),
        (np.arange(4, dtype=np.int64), np.int32),
        (True, np.bool_),
        (np.ones(2, np.float16), np.float16),
        (np.ones(2, np.uint8), np.uint8),
        (np.ones(2, np.int8), np.int8),
    ],
)
def test_default_dtypes(value: Any, dtype: Any) -> None:
    t = xm.tensor(value)
    assert t.dtype == np.dtype(dtype)
    assert isinstance(t.dtype, np.dtype)
    np.testing.assert_array_equal(t.numpy(), np.asarray(value).astype(dtype))


def test_explicit_dtype_and_tensor_copy() -> None:
    t = xm.tensor([1.7, -2.2], dtype="int32")
    assert t.dtype == np.int32 and t.tolist() == [1, -2]
    assert xm.tensor([1, 2], dtype=np.float16).dtype == np.float16
    assert xm.Tensor(t).dtype == np.int32 and xm.Tensor(t).tolist() == [1, -2]


def test_properties_and_conversions() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = xm.tensor(a)
    assert t.shape == (2, 3, 4) and isinstance(t.shape, tuple)
    assert t.ndim == 3 and t.size == 24 and len(t) == 2
    out = t.numpy()
    out[0, 0, 0] = 100  # numpy() hands out a copy
    assert t.numpy()[0, 0, 0] == 0
    assert xm.tensor(3.5).item() == 3.5 and isinstance(xm.tensor(3).item(), int)
    assert xm.tensor([[7]]).item() == 7
    assert float(xm.tensor(2.5)) == 2.5 and int(xm.tensor(4)) == 4
    assert [x.shape for x in t] == [(3, 4), (3, 4)]
    assert np.asarray(t).shape == (2, 3, 4)
    # MegEngine's repr: numpy's str of the values, the dtype unless float32, the device's logical name
    assert repr(xm.tensor([1.5, 2.0])) == "Tensor([1.5 2. ], device=xpux:0)"
    assert repr(xm.tensor([1, 2])) == "Tensor([1 2], dtype=int32, device=xpux:0)"
    assert repr(xm.Parameter([1.0])) == "Parameter([1.], device=xpux:0)"
    assert repr(xm.tensor([1.0], device="cpu0")) == "Tensor([1.], device=cpu0:0)"
    with pytest.raises(ValueError, match="item"):
        t.item()
    with pytest.raises(TypeError, match="0-d"):
        len(xm.tensor(1.0))


OPS = [
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.floordiv,
    operator.mod,
    operator.pow,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
    operator.eq,
    operator.ne,
]


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.__name__)
def test_float_operators_with_tensors_and_scalars(op: Any) -> None:
    a = np.asarray(RNG.uniform(0.5, 3, (3, 4)), np.float32)
    b = np.asarray(RNG.uniform(0.5, 3, (4,)), np.float32)
    b[1] = a[0, 1]  # one exact tie for the comparisons
    ta, tb = xm.tensor(a), xm.tensor(b)
    if op is operator.mod:
        ref = np.fmod  # MegEngine's float MOD is fmod
    elif op is operator.floordiv:
        ref = lambda x, y: np.floor(x / y)  # noqa: E731 - megdnn: floorf(x / y)
    else:
        ref = op
    for got, want in [
        (op(ta, tb), ref(a, b)),
        (op(ta, 2), ref(a, np.float32(2))),
        (op(ta, 1.5), ref(a, np.float32(1.5))),
        (op(2.5, tb), ref(np.float32(2.5), b)),
    ]:
        assert isinstance(got, xm.Tensor)
        assert got.dtype == np.asarray(want).dtype, op
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_int_operators_and_scalar_promotion() -> None:
    a = np.array([[-7, -3, 0], [2, 5, 9]], np.int32)
    t = xm.tensor(a)
    assert (t + 1).dtype == np.int32 and (t + 1).tolist() == (a + 1).tolist()
    assert (t * 1.5).dtype == np.float32  # a float scalar makes an int tensor float32
    np.testing.assert_array_equal((t * 1.5).numpy(), a * np.float32(1.5))
    assert (t / 2).dtype == np.float32
    np.testing.assert_allclose((t / 2).numpy(), a / 2)
    assert (t // 2).tolist() == (a // 2).tolist()  # integer floor division
    assert (t % 4).tolist() == (a % 4).tolist()  # integer MOD follows Python's sign rule
    assert (t**2).dtype == np.float32 and (t**2).numpy().tolist() == (a.astype(np.float32) ** 2).tolist()
    assert (-t).tolist() == (-a).tolist() and abs(t).tolist() == np.abs(a).tolist()
    assert (t > 0).dtype == np.bool_
    assert (xm.tensor(np.ones(2, np.float16)) * 2.0).dtype == np.float16
    # MegBrain's dtype_promotion, checked on MegEngine 1.13: operands of different categories (bool,
    # integer, float) meet in float32; integers of different signedness have no common dtype
    assert (xm.tensor([True, False]) + 1).dtype == np.float32
    assert (xm.tensor([True, False]) * xm.tensor([2, 3])).tolist() == [2.0, 0.0]
    assert (xm.tensor(np.array([1, 2], np.int8)) + 1).dtype == np.int8
    assert (xm.tensor(np.array([1], np.int16)) + xm.tensor(np.array([1], np.int8))).dtype == np.int16
    assert (xm.tensor(np.ones(2, np.float16)) + xm.tensor([1, 2])).dtype == np.float32
    with pytest.raises(RuntimeError, match="signedness"):
        xm.tensor(np.array([1], np.uint8)) + xm.tensor(np.array([1], np.int8))


def test_bool_operators() -> None:
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    ta, tb = xm.tensor(a), xm.tensor(b)
    assert (ta & tb).tolist() == (a & b).tolist()
    assert (ta | tb).tolist() == (a | b).tolist()
    assert (ta ^ tb).tolist() == (a ^ b).tolist()
    assert (~ta).tolist() == (~a).tolist()
    x = xm.tensor(np.array([-1.0, 0.5, 2.0, 3.0], np.float32))
    assert ((x > 0) & (x < 2.5)).tolist() == [False, True, True, False]


def test_numpy_operands_defer_to_tensor() -> None:
    t = xm.tensor(np.ones((2, 3), np.float32))
    for got in (np.ones(3) + t, np.full((3, 2), 2.0) @ t, np.float32(3) * t):
        assert isinstance(got, xm.Tensor)
        assert got.dtype == np.float32
    np.testing.assert_array_equal((np.full((3, 2), 2.0) @ t).numpy(), np.full((3, 3), 4.0))


def test_matmul_operator() -> None:
    a = np.asarray(RNG.standard_normal((2, 3, 4)), np.float32)
    b = np.asarray(RNG.standard_normal((4, 5)), np.float32)
    np.testing.assert_allclose((xm.tensor(a) @ xm.tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-6)
    v = np.asarray(RNG.standard_normal(4), np.float32)
    np.testing.assert_allclose((xm.tensor(a) @ xm.tensor(v)).numpy(), a @ v, rtol=1e-5, atol=1e-6)


_A = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)

INDICES: list[Any] = [
    1,
    -1,
    (0, 2),
    (2, -1, 4),
    slice(None),
    slice(1, None),
    slice(None, None, -1),
    slice(None, None, 2),
    (slice(None), slice(3, 0, -1)),
    (slice(None), slice(-1, None, -2), slice(4, 0, -3)),
    (Ellipsis, 1),
    (Ellipsis, slice(None, None, -1)),
    (1, Ellipsis),
    (None,),
    (slice(None), None, 2),
    (None, 1, None, slice(1, 3), None),
    (0, Ellipsis, None),
    (slice(5, 9),),
    (slice(2, 1),),
    (slice(-100, 100),),
    (slice(None), slice(None), slice(None, None, -4)),
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_indexing_matches_numpy(index: Any) -> None:
    got = xm.tensor(_A)[index]
    want = _A[index]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


def test_indexing_traces() -> None:
    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: xm.Tensor) -> tuple[xm.Tensor, ...]:
        return x[::-1, 1], x[None, ..., ::-2], x[2, 3, 4]

    x = xm.tensor(_A)
    eager = [x[::-1, 1], x[None, ..., ::-2], x[2, 3, 4]]
    f(x)
    for g, e in zip(f(x), eager, strict=True):
        assert np.array_equal(g.numpy(), e.numpy())


def test_setitem_eager() -> None:
    t = xm.tensor(np.zeros((3, 4), np.float32))
    t[1] = 5.0
    t[:, ::-2] = xm.tensor(np.ones((3, 2), np.float32))
    want = np.zeros((3, 4), np.float32)
    want[1] = 5
    want[:, ::-2] = 1
    np.testing.assert_array_equal(t.numpy(), want)


def test_shape_methods() -> None:
    t = xm.tensor(_A)
    assert t.reshape(5, -1).shape == (5, 12) and t.reshape((60,)).shape == (60,)
    np.testing.assert_array_equal(t.reshape(4, 15).numpy(), _A.reshape(4, 15))
    np.testing.assert_array_equal(t.transpose(2, 0, 1).numpy(), _A.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.transpose((1, 0, 2)).numpy(), _A.transpose(1, 0, 2))
    np.testing.assert_array_equal(t.transpose().numpy(), _A.transpose())
    np.testing.assert_array_equal(t.T.numpy(), _A.T)
    np.testing.assert_array_equal(t.flatten().numpy(), _A.reshape(-1))
    np.testing.assert_array_equal(t.flatten(1).numpy(), _A.reshape(3, 20))
    assert t.astype("int32").dtype == np.int32 and t.astype(np.float16).dtype == np.float16
    assert t.astype("float32") is t  # no-op casts do not copy


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
def test_reduction_methods(name: str) -> None:
    a = np.asarray(RNG.uniform(0.5, 1.5, (3, 4, 5)), np.float32)
    t = xm.tensor(a)
    ref = getattr(np, name)
    np.testing.assert_allclose(getattr(t, name)().numpy(), ref(a), rtol=1e-5)
    assert getattr(t, name)().shape == ()
    np.testing.assert_allclose(getattr(t, name)(1).numpy(), ref(a, axis=1), rtol=1e-5)
    np.testing.assert_allclose(
        getattr(t, name)((0, 2), True).numpy(), ref(a, axis=(0, 2), keepdims=True), rtol=1e-5
    )
    np.testing.assert_allclose(
        getattr(t, name)(axis=-1, keepdims=True).numpy(), ref(a, axis=-1, keepdims=True), rtol=1e-5
    )


def test_parameter_is_a_tensor() -> None:
    p = xm.Parameter(np.ones((2, 2)))
    assert isinstance(p, xm.Tensor) and p.dtype == np.float32
    assert repr(p).startswith("Parameter(")
    assert isinstance(p + 1, xm.Tensor)
