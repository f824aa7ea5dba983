"""Every ``compiler.functional`` op against PyTorch on the CPU (or a closed form where torch has no
equivalent), on odd sizes and broadcasting shapes; then each op traced and replayed bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import compiler as xm
import compiler.functional as F
from compiler import jit

RNG = np.random.default_rng(20240611)


def rand(*shape: int, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    return np.asarray(RNG.uniform(low, high, size=shape), dtype=np.float32)


def tt(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a))  # np.array keeps 0-d arrays 0-d (ascontiguousarray does not)


def check(got: Any, want: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Shape, dtype and values of an xmge result against a torch result."""
    assert isinstance(got, xm.Tensor), type(got)
    want_np = want.detach().numpy()
    assert got.shape == want_np.shape, (got.shape, want_np.shape)
    assert got.dtype == want_np.dtype, (got.dtype, want_np.dtype)
    if want_np.dtype == np.bool_ or want_np.dtype.kind in "iu":
        np.testing.assert_array_equal(got.numpy(), want_np)
    else:
        np.testing.assert_allclose(got.numpy(), want_np, rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------------------------
# Elementwise

UNARY: list[tuple[str, Callable[..., Any], Callable[[torch.Tensor], torch.Tensor], tuple[float, float]]] = [
    ("relu", F.relu, torch.relu, (-3, 3)),
    ("relu6", F.relu6, TF.relu6, (-3, 9)),
    ("sigmoid", F.sigmoid, torch.sigmoid, (-9, 9)),
    ("tanh", F.tanh, torch.tanh, (-4, 4)),
    ("gelu", F.gelu, TF.gelu, (-4, 4)),
    ("hswish", F.hswish, TF.hardswish, (-5, 5)),
    ("hsigmoid", F.hsigmoid, TF.hardsigmoid, (-5, 5)),
    ("silu", F.silu, TF.silu, (-5, 5)),
    ("exp", F.exp, torch.exp, (-5, 5)),
    ("log", F.log, torch.log, (0.01, 9)),
    ("log1p", F.log1p, torch.log1p, (-0.9, 9)),
    ("expm1", F.expm1, torch.expm1, (-3, 3)),
    ("sqrt", F.sqrt, torch.sqrt, (0, 9)),
    ("abs", F.abs, torch.abs, (-3, 3)),
    ("neg", F.neg, torch.neg, (-3, 3)),
    ("square", F.square, torch.square, (-3, 3)),
    ("sin", F.sin, torch.sin, (-6, 6)),
    ("cos", F.cos, torch.cos, (-6, 6)),
    ("floor", F.floor, torch.floor, (-6, 6)),
    ("ceil", F.ceil, torch.ceil, (-6, 6)),
    ("softplus", F.softplus, TF.softplus, (-6, 6)),
    ("nn.relu", F.nn.relu, torch.relu, (-3, 3)),
    ("nn.sigmoid", F.nn.sigmoid, torch.sigmoid, (-3, 3)),
]


@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 5, 7)])
@pytest.mark.parametrize("name,fn,ref,rng", UNARY, ids=[u[0] for u in UNARY])
def test_unary_matches_torch(
    name: str, fn: Any, ref: Any, rng: tuple[float, float], shape: tuple[int, ...]
) -> None:
    a = rand(*shape, low=rng[0], high=rng[1])
    check(fn(xm.tensor(a)), ref(tt(a)), rtol=2e-5, atol=2e-6)


def test_round_is_half_away_from_zero() -> None:
    # torch.round rounds half to even; MegEngine's ROUND rounds half away from zero
    a = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51], np.float32)
    out = F.round(xm.tensor(a))
    np.testing.assert_array_equal(out.numpy(), np.array([-3, -2, -1, 1, 2, 3, 0, -1], np.float32))
    b = rand(4, 5) * 3
    np.testing.assert_array_equal(F.round(xm.tensor(b)).numpy(), np.sign(b) * np.floor(np.abs(b) + 0.5))


BROADCAST_SHAPES = [
    ((), ()),
    ((7,), (7,)),
    ((3, 1, 5), (4, 5)),
    ((2, 3, 4), (1,)),
    ((2, 1), (1, 3)),
    ((1,), (2, 3, 1)),
]

BINARY: list[tuple[str, Callable[..., Any], Callable[..., torch.Tensor], bool]] = [
    ("add", F.add, torch.add, False),
    ("sub", F.sub, torch.sub, False),
    ("mul", F.mul, torch.mul, False),
    ("div", F.div, torch.div, False),
    ("pow", F.pow, torch.pow, True),
    ("maximum", F.maximum, torch.maximum, False),
    ("minimum", F.minimum, torch.minimum, False),
    ("floor_div", F.floor_div, torch.floor_divide, False),
    ("mod", F.mod, torch.fmod, False),  # MegEngine's float MOD is C's fmodf
    ("equal", F.equal, torch.eq, False),
    ("not_equal", F.not_equal, torch.ne, False),
    ("less", F.less, torch.lt, False),
    ("less_equal", F.less_equal, torch.le, False),
    ("greater", F.greater, torch.gt, False),
    ("greater_equal", F.greater_equal, torch.ge, False),
]


@pytest.mark.parametrize("sa,sb", BROADCAST_SHAPES)
@pytest.mark.parametrize("name,fn,ref,positive", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcast_matches_torch(
    name: str, fn: Any, ref: Any, positive: bool, sa: tuple[int, ...], sb: tuple[int, ...]
) -> None:
    a = rand(*sa, low=0.1 if positive else -3, high=3)
    b = rand(*sb, low=0.5, high=2.5) * (
        1
        if positive or name not in ("div", "floor_div", "mod")
        else RNG.choice([-1, 1], size=sb).astype(np.float32)
    )
    if "equal" in name:
        # make about half of b equal to a value of a so equality is exercised both ways
        b = np.asarray(np.where(RNG.random(sb) < 0.5, b, a.reshape(-1)[0]), np.float32)
    check(fn(xm.tensor(a), xm.tensor(b)), ref(tt(a), tt(np.asarray(b))), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "name,fn,ref",
    [
        ("add", F.add, torch.add),
        ("sub", F.sub, torch.sub),
        ("mul", F.mul, torch.mul),
        # integer MOD follows Python (sign of the divisor), unlike the float fmod
        ("floor_div", F.floor_div, torch.floor_divide),
        ("mod", F.mod, torch.remainder),
        ("maximum", F.maximum, torch.maximum),
        ("less", F.less, torch.lt),
    ],
)
def test_binary_int32_matches_torch(name: str, fn: Any, ref: Any) -> None:
    a = RNG.integers(-20, 20, size=(3, 4)).astype(np.int32)
    b = RNG.choice([-7, -3, -1, 1, 2, 5], size=(4,)).astype(np.int32)
    check(fn(xm.tensor(a), xm.tensor(b)), ref(tt(a), tt(b)))


def test_int_true_div_and_pow_compute_in_float32() -> None:
    a = np.array([1, 2, 3, 7], np.int32)
    b = np.array([2, 4, 2, 3], np.int32)
    q = F.div(xm.tensor(a), xm.tensor(b))
    assert q.dtype == np.float32
    np.testing.assert_allclose(q.numpy(), a / b, rtol=1e-6)
    p = F.pow(xm.tensor(a), 2)
    assert p.dtype == np.float32
    np.testing.assert_array_equal(p.numpy(), (a**2).astype(np.float32))


def test_mixed_dtypes_promote() -> None:
    i32 = xm.tensor(np.array([1, 2, 3], np.int32))
    i8 = xm.tensor(np.array([4, 5, 6], np.int8))
    f16 = xm.tensor(np.array([0.5, 1.5, 2.5], np.float16))
    assert (i32 + i8).dtype == np.int32 and (i32 + i8).tolist() == [5, 7, 9]
    assert (i32 * f16).dtype == np.float32
    np.testing.assert_array_equal((i32 * f16).numpy(), np.array([0.5, 3.0, 7.5], np.float32))
    assert (f16 + 1).dtype == np.float16


@pytest.mark.parametrize("lower,upper", [(-1.0, 1.5), (None, 0.5), (-0.25, None), (0.0, 0.0)])
def test_clip_matches_torch(lower: float | None, upper: float | None) -> None:
    a = rand(3, 5, 2)
    check(F.clip(xm.tensor(a), lower, upper), torch.clamp(tt(a), lower, upper))


def test_logical_ops_match_torch() -> None:
    a, b = RNG.random((3, 4)) < 0.5, RNG.random((4,)) < 0.5
    check(F.logical_and(xm.tensor(a), xm.tensor(b)), torch.logical_and(tt(a), tt(b)))
    check(F.logical_or(xm.tensor(a), xm.tensor(b)), torch.logical_or(tt(a), tt(b)))
    check(F.logical_xor(xm.tensor(a), xm.tensor(b)), torch.logical_xor(tt(a), tt(b)))
    check(F.logical_not(xm.tensor(a)), torch.logical_not(tt(a)))


@pytest.mark.parametrize("slope", [0.01, 0.2, 1.5])
def test_leaky_relu_matches_torch(slope: float) -> None:
    a = rand(2, 3, 5)
    check(F.leaky_relu(xm.tensor(a), slope), TF.leaky_relu(tt(a), slope))
    check(F.nn.leaky_relu(xm.tensor(a), negative_slope=slope), TF.leaky_relu(tt(a), slope))


@pytest.mark.parametrize("ms,xs,ys", [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ()), ((5,), (2, 5), (5,))])
def test_where_matches_torch(ms: tuple[int, ...], xs: tuple[int, ...], ys: tuple[int, ...]) -> None:
    m, x, y = RNG.random(ms) < 0.5, rand(*xs), rand(*ys)
    check(F.where(xm.tensor(m), xm.tensor(x), xm.tensor(y)), torch.where(tt(m), tt(x), tt(y)))


def test_where_scalar_and_int_and_bool_branches() -> None:
    m = RNG.random((4, 3)) < 0.5
    x = rand(4, 3)
    check(F.where(xm.tensor(m), xm.tensor(x), 0.0), torch.where(tt(m), tt(x), 0.0))
    xi, yi = RNG.integers(-9, 9, (4, 3)).astype(np.int32), RNG.integers(-9, 9, (3,)).astype(np.int32)
    check(F.where(xm.tensor(m), xm.tensor(xi), xm.tensor(yi)), torch.where(tt(m), tt(xi), tt(yi)))
    xb, yb = RNG.random((4, 3)) < 0.5, RNG.random((4, 3)) < 0.5
    check(F.where(xm.tensor(m), xm.tensor(xb), xm.tensor(yb)), torch.where(tt(m), tt(xb), tt(yb)))


# ------------------------------------------------------------------------------------------------
# Reductions


REDUCE_AXES = [None, 0, -1, (0, 2), (1,), (2, 0, 1)]


def _torch_reduce(name: str, x: torch.Tensor, axis: Any, keepdims: bool) -> torch.Tensor:
    dims = list(range(x.ndim)) if axis is None else ([axis] if isinstance(axis, int) else list(axis))
    if name == "sum":
        return torch.sum(x, dim=dims, keepdim=keepdims)
    if name == "mean":
        return torch.mean(x, dim=dims, keepdim=keepdims)
    if name == "max":
        return torch.amax(x, dim=dims, keepdim=keepdims)
    if name == "min":
        return torch.amin(x, dim=dims, keepdim=keepdims)
    out = x  # torch.prod takes one dim at a time
    for d in sorted((d % x.ndim for d in dims), reverse=True):
        out = torch.prod(out, dim=d, keepdim=True)
    return (
        out
        if keepdims
        else out.reshape([s for i, s in enumerate(x.shape) if i not in {d % x.ndim for d in dims}])
    )


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", REDUCE_AXES, ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
def test_reduce_matches_torch(name: str, axis: Any, keepdims: bool) -> None:
    a = rand(3, 4, 5, low=0.5, high=1.5) if name == "prod" else rand(3, 4, 5)
    got = getattr(F, name)(xm.tensor(a), axis=axis, keepdims=keepdims)
    check(got, _torch_reduce(name, tt(a), axis, keepdims), rtol=1e-5, atol=1e-5)
    method = getattr(xm.tensor(a), name)(axis, keepdims)
    np.testing.assert_array_equal(method.numpy(), got.numpy())


def test_reduce_int_and_bool() -> None:
    a = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    check(F.sum(xm.tensor(a), axis=1), torch.sum(tt(a), dim=1, dtype=torch.int32))
    check(F.max(xm.tensor(a)), torch.amax(tt(a)))
    mean = F.mean(xm.tensor(a), 0)
    assert mean.dtype == np.float32
    np.testing.assert_allclose(mean.numpy(), a.mean(0), rtol=1e-6)
    mask = a > 0
    total = F.sum(xm.tensor(mask))
    assert total.dtype == np.int32 and total.item() == int(mask.sum())


def test_norm_matches_torch() -> None:
    a = rand(3, 4)
    check(F.norm(xm.tensor(a), axis=1), torch.linalg.vector_norm(tt(a), dim=1), rtol=1e-5)
    check(F.norm(xm.tensor(a), ord=1.0, axis=0), torch.linalg.vector_norm(tt(a), ord=1, dim=0), rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# Matrix products

MATMUL_SHAPES = [
    ((3,), (3,)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),
    ((4, 5), (2, 5, 3)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((1, 3, 4), (2, 4, 5)),
    ((7,), (2, 7, 3)),
    ((2, 3, 7), (7,)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul_matches_torch(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = rand(*sa), rand(*sb)
    check(F.matmul(xm.tensor(a), xm.tensor(b)), torch.matmul(tt(a), tt(b)), rtol=1e-5, atol=1e-5)
    check(xm.tensor(a) @ xm.tensor(b), torch.matmul(tt(a), tt(b)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_matmul_transposes(ta: bool, tb: bool) -> None:
    a = rand(5, 3) if ta else rand(3, 5)
    b = rand(4, 5) if tb else rand(5, 4)
    want = torch.matmul(tt(a).T if ta else tt(a), tt(b).T if tb else tt(b))
    check(F.matmul(xm.tensor(a), xm.tensor(b), transpose_a=ta, transpose_b=tb), want)
    a3, b3 = np.stack([a, a * 2]), np.stack([b, -b])
    want3 = torch.matmul(tt(a3).mT if ta else tt(a3), tt(b3).mT if tb else tt(b3))
    check(F.batch_matmul(xm.tensor(a3), xm.tensor(b3), transpose_a=ta, transpose_b=tb), want3)


def test_batch_matmul_and_int_matmul() -> None:
    a, b = rand(6, 3, 4), rand(6, 4, 2)
    check(F.batch_matmul(xm.tensor(a), xm.tensor(b)), torch.bmm(tt(a), tt(b)))
    ai, bi = RNG.integers(-4, 4, (3, 4)).astype(np.int32), RNG.integers(-4, 4, (4, 2)).astype(np.int32)
    check(F.matmul(xm.tensor(ai), xm.tensor(bi)), torch.matmul(tt(ai), tt(bi)))


@pytest.mark.parametrize("xs", [(2, 5), (3, 4, 5), (5,)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(xs: tuple[int, ...], bias: bool) -> None:
    x, w, b = rand(*xs), rand(7, 5), rand(7)
    check(
        F.linear(xm.tensor(x), xm.tensor(w), xm.tensor(b) if bias else None),
        TF.linear(tt(x), tt(w), tt(b) if bias else None),
    )
    check(F.nn.linear(xm.tensor(x), xm.tensor(w)), TF.linear(tt(x), tt(w)))


# ------------------------------------------------------------------------------------------------
# Convolution and pooling

CONV_CASES = [
    # N, IC, H, W, OC, kernel, stride, padding, dilation, groups
    (2, 3, 9, 7, 4, 3, 1, 0, 1, 1),
    (1, 4, 10, 11, 6, (3, 2), 2, 1, 1, 2),
    (2, 6, 8, 9, 6, 3, 1, (1, 2), 2, 3),
    (1, 4, 7, 7, 4, 3, (2, 1), 1, 1, 4),
    (3, 3, 5, 5, 2, 1, 1, 0, 1, 1),
    (1, 2, 13, 6, 3, 5, 3, 2, (2, 1), 1),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_matches_torch(case: tuple[Any, ...], bias: bool) -> None:
    n, ic, h, w, oc, k, stride, padding, dilation, groups = case
    kh, kw = (k, k) if isinstance(k, int) else k
    x = rand(n, ic, h, w)
    wt = rand(oc, ic // groups, kh, kw)
    b = rand(1, oc, 1, 1)
    want = TF.conv2d(tt(x), tt(wt), tt(b.reshape(oc)) if bias else None, stride, padding, dilation, groups)
    # MegEngine's grouped weight is (G, OC/G, IC/G, KH, KW)
    w_mge = wt.reshape(groups, oc // groups, ic // groups, kh, kw) if groups > 1 else wt
    got = F.conv2d(
        xm.tensor(x), xm.tensor(w_mge), xm.tensor(b) if bias else None, stride, padding, dilation, groups
    )
    check(got, want, rtol=1e-4, atol=1e-4)
    check(
        F.nn.conv2d(xm.tensor(x), xm.tensor(w_mge), None, stride, padding, dilation, groups),
        TF.conv2d(tt(x), tt(wt), None, stride, padding, dilation, groups),
        rtol=1e-4,
        atol=1e-4,
    )


def test_conv2d_convolution_mode_flips_kernel() -> None:
    x, w = rand(1, 2, 6, 5), rand(3, 2, 3, 2)
    got = F.conv2d(xm.tensor(x), xm.tensor(w), conv_mode="convolution")
    check(got, TF.conv2d(tt(x), tt(np.ascontiguousarray(w[..., ::-1, ::-1]))), rtol=1e-4, atol=1e-4)


POOL_CASES = [
    # H, W, kernel, stride, padding
    (9, 7, 3, None, 0),
    (8, 8, 2, 1, 1),
    (11, 6, (3, 2), (2, 1), (1, 0)),
    (5, 5, 5, 1, 2),
    (7, 10, 2, 3, 0),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d_matches_torch(case: tuple[Any, ...]) -> None:
    h, w, k, s, p = case
    x = rand(2, 3, h, w)
    check(F.max_pool2d(xm.tensor(x), k, s, p), TF.max_pool2d(tt(x), k, s, p))
    check(F.nn.max_pool2d(xm.tensor(x), k, s, p), TF.max_pool2d(tt(x), k, s, p))


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
@pytest.mark.parametrize("mode", ["average", "average_count_exclude_padding"])
def test_avg_pool2d_matches_torch(case: tuple[Any, ...], mode: str) -> None:
    h, w, k, s, p = case
    x = rand(2, 3, h, w)
    want = TF.avg_pool2d(tt(x), k, s, p, count_include_pad=(mode == "average"))
    check(F.avg_pool2d(xm.tensor(x), k, s, p, mode=mode), want, rtol=1e-5, atol=1e-6)


def test_avg_pool2d_default_mode_excludes_padding() -> None:
    x = rand(1, 2, 6, 6)
    want = TF.avg_pool2d(tt(x), 3, 1, 1, count_include_pad=False)
    check(F.avg_pool2d(xm.tensor(x), 3, 1, 1), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("hw,oshp", [((8, 6), (4, 3)), ((7, 7), 1), ((9, 12), (3, 4)), ((5, 5), (5, 5))])
def test_adaptive_pool2d_matches_torch_when_divisible(hw: tuple[int, int], oshp: Any) -> None:
    x = rand(2, 3, *hw)
    check(
        F.adaptive_avg_pool2d(xm.tensor(x), oshp), TF.adaptive_avg_pool2d(tt(x), oshp), rtol=1e-5, atol=1e-6
    )
    check(F.adaptive_max_pool2d(xm.tensor(x), oshp), TF.adaptive_max_pool2d(tt(x), oshp))


@pytest.mark.parametrize("hw,oshp", [((7, 5), (3, 2)), ((10, 9), (4, 4))])
def test_adaptive_avg_pool2d_uneven_uses_megengine_windows(
    hw: tuple[int, int], oshp: tuple[int, int]
) -> None:
    # MegEngine: stride = in // out, window = in - (out - 1) * stride (torch uses ragged windows)
    x = rand(1, 2, *hw)
    got = F.adaptive_avg_pool2d(xm.tensor(x), oshp).numpy()
    (h, w), (oh, ow) = hw, oshp
    sh, sw = h // oh, w // ow
    kh, kw = h - (oh - 1) * sh, w - (ow - 1) * sw
    want = np.empty((1, 2, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            want[:, :, i, j] = x[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw].mean(axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------
# Softmax family


@pytest.mark.parametrize(
    "shape,axis",
    [
        ((5,), None),
        ((3, 7), None),
        ((3, 7), 0),
        ((2, 3, 4), None),
        ((2, 3, 4), -1),
        ((2, 5, 3, 3), None),
        ((2, 5, 3, 3), 2),
    ],
)
def test_softmax_and_log_softmax_match_torch(shape: tuple[int, ...], axis: int | None) -> None:
    x = rand(*shape) * 4
    # MegEngine's default axis: 0 for 0-, 1- and 3-D inputs, else 1
    dim = axis if axis is not None else (0 if len(shape) in (0, 1, 3) else 1)
    check(F.softmax(xm.tensor(x), axis), torch.softmax(tt(x), dim), rtol=1e-5, atol=1e-6)
    check(F.log_softmax(xm.tensor(x), axis), torch.log_softmax(tt(x), dim), rtol=1e-5, atol=1e-5)
    check(F.nn.softmax(xm.tensor(x), axis), torch.softmax(tt(x), dim), rtol=1e-5, atol=1e-6)


def test_logsumexp_matches_torch() -> None:
    x = rand(3, 4, 5) * 30  # large values: the max shift must prevent overflow
    check(F.logsumexp(xm.tensor(x), 1), torch.logsumexp(tt(x), 1), rtol=1e-5, atol=1e-4)
    check(
        F.logsumexp(xm.tensor(x), (0, 2), keepdims=True),
        torch.logsumexp(tt(x), (0, 2), keepdim=True),
        rtol=1e-5,
        atol=1e-4,
    )


# ------------------------------------------------------------------------------------------------
# Normalisation, dropout, padding


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 5), (2, 4, 7)])
def test_batch_norm_inference_matches_torch(shape: tuple[int, ...]) -> None:
    c = shape[1]
    x = rand(*shape)
    rm, rv = rand(c), rand(c, low=0.5, high=2)
    w, b = rand(c), rand(c)
    pshape = (1, c) + (1,) * (len(shape) - 2)
    got = F.batch_norm(
        xm.tensor(x),
        xm.tensor(rm.reshape(pshape)),
        xm.tensor(rv.reshape(pshape)),
        xm.tensor(w.reshape(pshape)),
        xm.tensor(b.reshape(pshape)),
        training=False,
        eps=1e-3,
    )
    want = TF.batch_norm(tt(x), tt(rm), tt(rv), tt(w), tt(b), training=False, eps=1e-3)
    check(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("momentum", [0.9, 0.5])
def test_batch_norm_training_updates_running_stats_like_torch(momentum: float) -> None:
    c = 3
    x = rand(5, c, 4, 3) * 2 + 1
    w, b = rand(c), rand(c)
    rm, rv = np.zeros((1, c, 1, 1), np.float32), np.ones((1, c, 1, 1), np.float32)
    rm_x, rv_x = xm.tensor(rm), xm.tensor(rv)
    got = F.batch_norm(
        xm.tensor(x),
        rm_x,
        rv_x,
        xm.tensor(w.reshape(1, c, 1, 1)),
        xm.tensor(b.reshape(1, c, 1, 1)),
        training=True,
        momentum=momentum,
    )
    rm_t, rv_t = tt(rm.reshape(c).copy()), tt(rv.reshape(c).copy())
    # torch's momentum weighs the batch statistic; MegEngine's weighs the running one
    want = TF.batch_norm(tt(x), rm_t, rv_t, tt(w), tt(b), training=True, momentum=1 - momentum)
    check(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rm_x.numpy().reshape(c), rm_t.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv_x.numpy().reshape(c), rv_t.numpy(), rtol=1e-5, atol=1e-6)


def test_dropout_closed_form() -> None:
    x = rand(200, 50, low=1, high=2)
    out = F.dropout(xm.tensor(x), 0.3, training=True).numpy()
    kept = out != 0
    assert 0.65 < kept.mean() < 0.75  # 10 000 draws: the fraction kept is 0.7 within ~0.5 %
    np.testing.assert_allclose(out[kept], x[kept] / 0.7, rtol=1e-6)
    assert np.array_equal(F.nn.dropout(xm.tensor(x), 0.3, training=False).numpy(), x)
    assert np.array_equal(F.dropout(xm.tensor(x), 0.0).numpy(), x)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "replicate"])
@pytest.mark.parametrize("widths", [((0, 0), (0, 0), (1, 2), (3, 0)), ((0, 0), (0, 0), (2, 2), (1, 1))])
def test_pad_matches_torch(mode: str, widths: tuple[tuple[int, int], ...]) -> None:
    x = rand(2, 3, 5, 4)
    got = F.nn.pad(xm.tensor(x), widths, mode=mode, constant_value=1.5)
    torch_mode = {"edge": "replicate"}.get(mode, mode)
    flat = [v for w in reversed(widths[2:]) for v in w]  # torch lists the last axis first
    want = (
        TF.pad(tt(x), flat, mode=torch_mode, value=1.5)
        if mode == "constant"
        else TF.pad(tt(x), flat, torch_mode)
    )
    check(got, want)


def test_pad_constant_all_axes_matches_torch() -> None:
    x = rand(3, 2, 4)
    widths = ((1, 0), (2, 1), (0, 3))
    flat = [v for w in reversed(widths) for v in w]
    check(F.pad(xm.tensor(x), widths, constant_value=-2.0), TF.pad(tt(x), flat, value=-2.0))


# ------------------------------------------------------------------------------------------------
# Shape and data movement


def test_reshape_flatten_transpose_match_torch() -> None:
    x = rand(2, 3, 4, 5)
    check(F.reshape(xm.tensor(x), (6, -1)), tt(x).reshape(6, -1))
    check(F.reshape(xm.tensor(x), (5, 4, 3, 2)), tt(x).reshape(5, 4, 3, 2))
    check(F.flatten(xm.tensor(x)), torch.flatten(tt(x)))
    check(F.flatten(xm.tensor(x), 1), torch.flatten(tt(x), 1))
    check(F.flatten(xm.tensor(x), 1, 2), torch.flatten(tt(x), 1, 2))
    check(F.transpose(xm.tensor(x), (2, 0, 3, 1)), tt(x).permute(2, 0, 3, 1))
    # "x" in a pattern inserts a size-1 axis, MegEngine's dimshuffle
    check(F.transpose(xm.tensor(x), (1, "x", 0, 3, 2)), tt(x).permute(1, 0, 3, 2).unsqueeze(1))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_stack_match_torch(axis: int) -> None:
    parts = [rand(2, 3, 4), rand(2, 3, 4), rand(2, 3, 4)]
    check(F.stack([xm.tensor(p) for p in parts], axis), torch.stack([tt(p) for p in parts], axis))
    odd = [rand(*[(5 if i == axis % 3 else s) for i, s in enumerate((2, 3, 4))]), parts[0]]
    check(F.concat([xm.tensor(p) for p in odd], axis), torch.cat([tt(p) for p in odd], axis))


@pytest.mark.parametrize("sections,axis", [(3, 0), (4, 1), ([1, 4], 1), ([2], -1), (1, 2)])
def test_split_matches_torch(sections: Any, axis: int) -> None:
    x = rand(7, 6, 5)
    got = F.split(xm.tensor(x), sections, axis)
    want = torch.tensor_split(tt(x), sections, axis)  # numpy/MegEngine section semantics
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        check(g, w)


def test_squeeze_expand_dims_broadcast_to_match_torch() -> None:
    x = rand(1, 3, 1, 4)
    check(F.squeeze(xm.tensor(x)), torch.squeeze(tt(x)))
    check(F.squeeze(xm.tensor(x), 2), torch.squeeze(tt(x), 2))
    check(F.squeeze(xm.tensor(x), (0, -2)), tt(x).reshape(3, 4))
    y = rand(3, 4)
    check(F.expand_dims(xm.tensor(y), 0), tt(y).unsqueeze(0))
    check(F.expand_dims(xm.tensor(y), -1), tt(y).unsqueeze(-1))
    check(F.expand_dims(xm.tensor(y), (0, 3)), tt(y).unsqueeze(0).unsqueeze(3))


def test_broadcast_to_matches_torch() -> None:
    for src, dst in [((3, 1), (2, 3, 5)), ((1,), (4,)), ((), (2, 2)), ((4, 1, 2), (4, 3, 2))]:
        a = rand(*src)
        check(F.broadcast_to(xm.tensor(a), dst), torch.broadcast_to(tt(a), dst))


def test_astype_and_creation() -> None:
    a = rand(3, 4) * 10
    check(F.astype(xm.tensor(a), "int32"), tt(a).to(torch.int32))
    check(xm.tensor(a).astype(np.float16), tt(a).to(torch.float16))
    assert F.zeros((2, 3)).dtype == np.float32 and F.zeros((2, 3)).numpy().sum() == 0
    assert F.ones(4, dtype="int32").tolist() == [1, 1, 1, 1]
    np.testing.assert_array_equal(F.arange(5).numpy(), np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(F.full((2,), 7).numpy(), [7.0, 7.0])
    np.testing.assert_allclose(F.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5, dtype=np.float32))
    assert F.zeros_like(xm.tensor(np.ones(3, np.int32))).dtype == np.int32


def test_nn_namespace_exposes_nn_ops() -> None:
    # MegEngine exposes every nn function both as F.<name> and F.nn.<name>
    for name in [
        "conv2d",
        "linear",
        "relu",
        "relu6",
        "leaky_relu",
        "sigmoid",
        "tanh",
        "gelu",
        "hswish",
        "softmax",
        "log_softmax",
        "max_pool2d",
        "avg_pool2d",
        "adaptive_avg_pool2d",
        "adaptive_max_pool2d",
        "batch_norm",
        "dropout",
        "pad",
        "logsumexp",
        "softplus",
        "silu",
        "hsigmoid",
    ]:
        assert getattr(F.nn, name) is getattr(F, name), name


# ------------------------------------------------------------------------------------------------
# Transposed convolution, interpolation, layer norm, arg-reductions


@pytest.mark.parametrize(
    "case",
    [
        # n, ic, h, w, oc, k, stride, padding, output_padding, dilation, groups
        (2, 3, 5, 7, 4, 3, 1, 0, 0, 1, 1),
        (1, 4, 6, 5, 6, (3, 2), (2, 3), (1, 0), (1, 2), (1, 2), 2),
        (2, 6, 3, 3, 3, 1, 2, 0, 1, 1, 3),
    ],
    ids=str,
)
def test_conv_transpose2d_matches_torch(case: tuple[Any, ...]) -> None:
    n, ic, h, w, oc, k, stride, padding, out_pad, dilation, groups = case
    kh, kw = (k, k) if isinstance(k, int) else k
    x, wt, b = rand(n, ic, h, w), rand(ic, oc // groups, kh, kw), rand(1, oc, 1, 1)
    want = TF.conv_transpose2d(tt(x), tt(wt), tt(b.reshape(oc)), stride, padding, out_pad, groups, dilation)
    # MegEngine's grouped weight is (G, IC/G, OC/G, KH, KW); a 4-D one is split by ``groups``
    w_mge = wt.reshape(groups, ic // groups, oc // groups, kh, kw) if groups > 1 else wt
    for weight in (w_mge, wt):
        got = F.conv_transpose2d(
            xm.tensor(x), xm.tensor(weight), xm.tensor(b), stride, padding, out_pad, dilation, groups
        )
        check(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "conv,x,w,bias_shape",
    [
        (F.conv2d, (1, 2, 5, 5), (4, 2, 3, 3), (1, 4, 1, 1)),
        (F.conv_transpose2d, (1, 2, 5, 5), (2, 4, 3, 3), (1, 4, 1, 1)),
        (F.nn.conv1d, (1, 2, 5), (4, 2, 3), (1, 4, 1)),
    ],
    ids=["conv2d", "conv_transpose2d", "conv1d"],
)
def test_conv_bias_reshapes_only_a_flat_bias(
    conv: Callable[..., Any], x: Any, w: Any, bias_shape: Any
) -> None:
    """A bias already shaped (1, OC, 1...) is added as it is (as MegEngine's ``output += bias``); a
    flat (OC,) one is reshaped to it first, so it broadcasts over the channels."""
    from dialects import tensor as T

    xs, ws, b = rand(*x), rand(*w), rand(*bias_shape)
    for bias, reshapes in ((b, 0), (b.reshape(-1), 1)):
        traced = jit.trace(lambda i, k, c: conv(i, k, c), symbolic=True, capture_as_const=True)
        got = traced(xm.tensor(xs), xm.tensor(ws), xm.tensor(bias))
        want = conv(xm.tensor(xs), xm.tensor(ws)).numpy() + b
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
        ops = [op for op in traced.module.walk() if isinstance(op, T.ReshapeOp)]
        assert len(ops) == reshapes


def test_conv_transpose2d_rejects_bad_output_padding() -> None:
    with pytest.raises(Exception, match="output_padding"):
        F.conv_transpose2d(xm.tensor(rand(1, 2, 3, 3)), xm.tensor(rand(2, 2, 3, 3)), output_padding=1)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("size", [(9, 4), (3, 11), (5, 7), (1, 1)], ids=str)
def test_interpolate_size_matches_torch(mode: str, size: tuple[int, int]) -> None:
    x = rand(2, 3, 5, 7)
    kw = {"align_corners": False} if mode == "bilinear" else {}
    want = TF.interpolate(tt(x), size, mode=mode, **kw)
    check(F.nn.interpolate(xm.tensor(x), size, mode=mode), want, rtol=1e-5, atol=1e-5)
    check(F.vision.interpolate(xm.tensor(x), size, mode=mode), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale", [2.0, 0.5, (1.5, 3.0)], ids=str)
def test_interpolate_scale_factor_is_floor_of_scaled_size(scale: Any) -> None:
    x = rand(1, 2, 5, 7)
    sh, sw = (scale, scale) if isinstance(scale, float) else scale
    size = (int(np.floor(5 * sh)), int(np.floor(7 * sw)))
    for mode in ("bilinear", "nearest"):
        got = F.nn.interpolate(xm.tensor(x), scale_factor=scale, mode=mode)
        kw = {"align_corners": False} if mode == "bilinear" else {}
        check(got, TF.interpolate(tt(x), size, mode=mode, **kw), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [(9, 3), (2, 13), (1, 1)], ids=str)
def test_interpolate_align_corners_matches_torch(size: tuple[int, int]) -> None:
    x = rand(2, 3, 4, 5)
    got = F.nn.interpolate(xm.tensor(x), size, align_corners=True)
    check(got, TF.interpolate(tt(x), size, mode="bilinear", align_corners=True), rtol=1e-5, atol=1e-5)


def test_interpolate_linear_mode_and_errors() -> None:
    x = rand(2, 3, 5)
    check(
        F.nn.interpolate(xm.tensor(x), 9, mode="linear"),
        TF.interpolate(tt(x), 9, mode="linear", align_corners=False),
        rtol=1e-5,
        atol=1e-5,
    )
    with pytest.raises(Exception, match="align_corners"):
        F.nn.interpolate(xm.tensor(rand(1, 1, 3, 3)), (4, 4), mode="nearest", align_corners=True)
    with pytest.raises(Exception, match="scale_factor must be None"):
        F.nn.interpolate(xm.tensor(rand(1, 1, 3, 3)), (4, 4), scale_factor=2.0)
    with pytest.raises(Exception, match="unsupported mode"):
        F.nn.interpolate(xm.tensor(rand(1, 1, 3, 3)), (4, 4), mode="area")


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,norm", [((3, 7), 7), ((2, 3, 5, 7), (5, 7)), ((4, 9), (9,))], ids=str)
def test_layer_norm_matches_torch(shape: tuple[int, ...], norm: Any, affine: bool) -> None:
    x = rand(*shape) * 2 + 1
    ns = (norm,) if isinstance(norm, int) else tuple(norm)
    w, b = rand(*ns), rand(*ns)
    got = F.nn.layer_norm(
        xm.tensor(x), norm, affine, xm.tensor(w) if affine else None, xm.tensor(b) if affine else None, 1e-4
    )
    want = TF.layer_norm(tt(x), ns, tt(w) if affine else None, tt(b) if affine else None, 1e-4)
    check(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (2, True), (-1, False), ((0, 2), True)])
def test_argmax_argmin_match_torch(axis: Any, keepdims: bool) -> None:
    x = rand(3, 5, 7)
    x[1, 2] = x[1, 2, 0]  # ties: the first index wins, in torch too
    for fn, tfn in ((F.argmax, torch.argmax), (F.argmin, torch.argmin)):
        got = fn(xm.tensor(x), axis, keepdims)
        if isinstance(axis, tuple):  # one axis after the other, the highest first, as MegEngine does
            want = tt(x)
            for a in sorted(axis, reverse=True):
                want = tfn(want, a, keepdim=keepdims).to(torch.float32)
        else:
            want = tfn(tt(x)) if axis is None else tfn(tt(x), axis, keepdim=keepdims)
        check(got, want.to(torch.int32))


# ------------------------------------------------------------------------------------------------
# Every op traces: replay equals eager exactly

_X4 = rand(2, 4, 7, 6)
_W = rand(6, 4, 3, 3)
_WG = rand(2, 3, 2, 3, 3)
_ONES = np.ones((168, 3), np.float32)
_M = rand(6, 5)
_LW, _LB = rand(3, 42), rand(3)
_CB = rand(1, 6, 1, 1)
_BN = [rand(1, 4, 1, 1) for _ in range(3)] + [rand(1, 4, 1, 1, low=0.5, high=2)]

TRACED: dict[str, Callable[[xm.Tensor], Any]] = {
    "conv2d": lambda x: F.conv2d(x, xm.tensor(_W), xm.tensor(_CB), 2, 1),
    "conv2d_group": lambda x: F.conv2d(x, xm.tensor(_WG), None, 1, (1, 0), (1, 2), groups=2),
    "max_pool2d": lambda x: F.max_pool2d(x, 3, 2, 1),
    "avg_pool2d": lambda x: F.avg_pool2d(x, 2, 1, 1) + F.avg_pool2d(x, 2, 1, 1, mode="average"),
    "adaptive": lambda x: F.adaptive_avg_pool2d(x, (3, 2)) + F.adaptive_max_pool2d(x, (3, 2)),
    "batch_norm": lambda x: F.batch_norm(
        x, xm.tensor(_BN[0]), xm.tensor(_BN[3]), xm.tensor(_BN[1]), xm.tensor(_BN[2])
    ),
    "activations": lambda x: (
        F.relu(x)
        + F.relu6(x) * F.sigmoid(x)
        - F.tanh(x)
        + F.gelu(x)
        + F.hswish(x)
        + F.leaky_relu(x, 0.1)
        + F.silu(x)
        + F.hsigmoid(x)
        + F.softplus(x)
    ),
    "math": lambda x: (
        F.exp(x)
        + F.log(F.abs(x) + 1)
        + F.sqrt(F.abs(x))
        + F.pow(F.abs(x), 1.5)
        + F.maximum(x, 0.5)
        - F.minimum(x, -0.5)
        + F.clip(x, -1, 1)
        + x // 2
        + x % 1.5
        + (-x) ** 2
    ),
    "compare_where": lambda x: F.where(x > 0, x, x * 0.5) + (x <= 0.5).astype("float32"),
    "softmax": lambda x: (F.softmax(x, 1), F.log_softmax(x, -1), F.logsumexp(x, 2)),
    "reduce": lambda x: (
        F.sum(x, (0, 2)),
        F.mean(x),
        F.max(x, 1, True),
        F.min(x, -1),
        F.prod(x * 0 + 1.01, 3),
    ),
    "shape": lambda x: (
        F.flatten(x, 1),
        F.reshape(x, (4, -1)),
        F.transpose(x, (3, 1, 2, 0)),
        F.expand_dims(F.squeeze(x[:1]), 1),
        F.broadcast_to(x[:, :1], (2, 4, 7, 6)),
    ),
    "join_split": lambda x: (F.concat([x, x * 2], 1), F.stack([x, -x], 0), *F.split(x, [2, 5], 2)),
    "getitem": lambda x: (x[1], x[:, ::-1, 1:6:2], x[..., None, -1], x[0, 3, ::-2, None]),
    "matmul": lambda x: (
        F.matmul(F.flatten(x, 1), xm.tensor(_ONES)),
        F.matmul(x, xm.tensor(_M)),
        F.batch_matmul(x[0], F.transpose(x[1], (0, 2, 1))),
    ),
    "linear": lambda x: F.linear(F.flatten(x, 2), xm.tensor(_LW), xm.tensor(_LB)),
    "pad": lambda x: (
        F.pad(x, ((0, 0), (0, 0), (1, 2), (2, 1)), constant_value=0.5),
        F.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)), mode="reflect"),
    ),
    "dropout_eval": lambda x: F.dropout(x, 0.5, training=False) * 2,
    "conv_transpose2d": lambda x: F.conv_transpose2d(x, xm.tensor(_W[:4, :3]), None, 2, 1, 1, groups=1),
    "interpolate": lambda x: (
        F.nn.interpolate(x, (9, 4)),
        F.nn.interpolate(x, scale_factor=1.5, mode="nearest"),
        F.vision.interpolate(x, (3, 11), align_corners=True),
    ),
    "layer_norm": lambda x: (
        F.nn.layer_norm(x, (7, 6), True, xm.tensor(_X4[0, 0]), xm.tensor(_X4[1, 0])),
        F.nn.layer_norm(x, 6, False),
    ),
    "argmax_argmin": lambda x: (F.argmax(x, 1), F.argmin(x, -1, True), F.argmax(x)),
    "misc_elemwise": lambda x: (
        F.round(x * 3)
        + F.floor(x)
        + F.ceil(x)
        + F.sin(x) * F.cos(x)
        + F.square(x)
        + F.neg(x)
        + F.log1p(F.abs(x))
        + F.expm1(x * 0.1),
        F.logical_xor((x > 0) & (x < 0.5), ~(x > 0.2)) | (x == x),
        F.norm(x, axis=1),
        F.sum((x > 0).astype("int32"), 1) // 2 % 3,
    ),
}


@pytest.mark.parametrize("name", sorted(TRACED))
def test_traced_replay_equals_eager(name: str) -> None:
    fn = TRACED[name]
    x = xm.tensor(_X4)

    def run(inp: xm.Tensor) -> Any:
        out = fn(inp)
        return tuple(out) if isinstance(out, tuple) else out

    traced = jit.trace(run, symbolic=True, capture_as_const=True)
    eager = run(x)
    first = traced(x)  # records
    replay = traced(x)  # runs the recorded IR on the reference interpreter
    eager_list = list(eager) if isinstance(eager, tuple) else [eager]
    for got_list in (first, replay):
        got_list = list(got_list) if isinstance(got_list, tuple) else [got_list]
        assert len(got_list) == len(eager_list)
        for g, e in zip(got_list, eager_list, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype
            assert np.array_equal(g.numpy(), e.numpy(), equal_nan=True)
    assert "mgb." in traced.ir()
