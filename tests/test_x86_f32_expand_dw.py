"""``conv2d_nchw88_expand_dw3x3`` (a float32 1x1 expand convolution and the depthwise 3x3 after it as
one AVX-512 NCHW88 kernel, through a ring of expanded rows) against the reference interpreter and
PyTorch, bit for bit against the two plain kernels it replaces (the same graph compiled with the
unit switched off) and on 1 and 2 threads, once under ASan/UBSan; an expanded tensor read twice or
one too small to be worth it stays on the plain kernels.

Small shapes fuse here through a lowered :attr:`ConvNchw88ExpandDw3x3.min_expanded`; the default
keeps the fusion to MobileNetV2's 112x112 and 56x56 pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

import compiler as xm
import compiler.functional as F
from backends.c.templates.x86_f32_expand_dw import ConvNchw88ExpandDw3x3
from compiler.driver.compile import CompiledModel
from tests.codegen_util import assert_threads_agree, check, check_sanitized, compile_fn, require

TARGET = "x86-avx512-nchw88"
FAMILY = ConvNchw88ExpandDw3x3.family

# (n, ic, c, h, w, stride, pad, expand activation, depthwise epilogue): channel counts that are
# multiples of 8 but not of 16 (a half-filled expand register tile), odd sizes, rows narrower than
# a register block, odd output heights (stride 1's lone last row)
CASES = [
    (1, 16, 24, 15, 17, 2, 1, "relu6", "relu6"),
    (2, 8, 40, 13, 11, 1, 1, "relu6", "relu6"),  # batch 2, 11 columns: one expand column tile
    (1, 24, 56, 9, 29, 1, 1, "relu", "none"),  # 29 columns: expand tiles of 9, 10, 10
    (2, 16, 24, 10, 9, 2, 1, "none", "residual"),  # the expand's result as it is; a residual
    (1, 8, 32, 7, 13, 1, 0, "relu6", "relu"),  # no padding: 5 output rows
    (1, 40, 16, 11, 12, 2, 0, "relu6", "relu6"),
    (1, 8, 8, 3, 3, 1, 1, "relu", "residual"),  # every column a border column
]


@pytest.fixture
def small_shapes_fuse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ConvNchw88ExpandDw3x3, "min_expanded", 0)


@contextmanager
def plain_kernels() -> Iterator[None]:
    """Compile with the fused unit declining every op: the expand and the depthwise run on their
    own kernels (conv2d_nchw88, conv2d_nchw88_dw3x3)."""
    match = ConvNchw88ExpandDw3x3.match
    ConvNchw88ExpandDw3x3.match = lambda self, op: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConvNchw88ExpandDw3x3.match = match  # type: ignore[method-assign]


def _pairs_model(cases: list[tuple], seed: int) -> tuple[Callable[..., object], list[np.ndarray]]:
    """Every case as expand 1x1 (+ bias, activation) -> depthwise 3x3 (+ bias, epilogue)."""
    rng = np.random.default_rng(seed)
    params, inputs = [], []
    for n, ic, c, h, w, s, p, _, epi in cases:
        params.append(
            tuple(
                xm.tensor(a.astype(np.float32))
                for a in (
                    rng.standard_normal((c, ic, 1, 1)) / np.sqrt(ic),
                    rng.standard_normal((1, c, 1, 1)),
                    rng.standard_normal((c, 1, 1, 3, 3)) / 3,
                    rng.standard_normal((1, c, 1, 1)),
                )
            )
        )
        inputs.append(rng.standard_normal((n, ic, h, w)).astype(np.float32))
        if epi == "residual":
            inputs.append(rng.standard_normal((n, c, (h + 2 * p - 3) // s + 1, (w + 2 * p - 3) // s + 1)))
            inputs[-1] = inputs[-1].astype(np.float32)

    activations = {"relu6": F.relu6, "relu": F.relu, "none": lambda v: v}

    def fn(*xs):  # type: ignore[no-untyped-def]
        outs, it = [], iter(xs)
        for (we, be, wd, bd), (_, _, c, _, _, s, p, act, epi) in zip(params, cases, strict=True):
            e = activations[act](F.conv2d(next(it), we, be))
            y = F.conv2d(e, wd, bd, stride=s, padding=p, groups=c)
            outs.append(F.relu(y + next(it)) if epi == "residual" else activations[epi](y))
        return tuple(outs)

    return fn, inputs


def _fused_calls(compiled: CompiledModel) -> int:
    return compiled.ir("c").count(f"static void {FAMILY}_")


def test_expand_dw_matches_reference_and_plain_kernels(small_shapes_fuse: None) -> None:
    fn, inputs = _pairs_model(CASES, 0)
    fused = check(fn, inputs, TARGET)
    source = fused.ir("c")
    assert _fused_calls(fused) == len(CASES)
    assert "conv2d_nchw88_dense" not in source and "conv2d_nchw88_dw3x3" not in source
    with plain_kernels():
        plain = compile_fn(fn, inputs, TARGET)
    assert _fused_calls(plain) == 0
    for got, want in zip(fused.run(inputs), plain.run(inputs), strict=True):
        np.testing.assert_array_equal(got, want)  # the same FMAs in the same order


def test_expand_dw_matches_torch(small_shapes_fuse: None) -> None:
    """MobileNetV2's pattern as torch computes it: conv 1x1 + bias, ReLU6, depthwise 3x3 + bias, ReLU6."""
    require(TARGET)
    rng = np.random.default_rng(1)
    for n, ic, c, h, w, s in ((2, 24, 40, 19, 25, 1), (1, 16, 48, 21, 18, 2)):
        a = [
            (rng.standard_normal((c, ic, 1, 1)) / np.sqrt(ic)).astype(np.float32),
            rng.standard_normal((1, c, 1, 1)).astype(np.float32),
            (rng.standard_normal((c, 1, 1, 3, 3)) / 3).astype(np.float32),
            rng.standard_normal((1, c, 1, 1)).astype(np.float32),
        ]
        we, be, wd, bd = (xm.tensor(v) for v in a)
        x = rng.standard_normal((n, ic, h, w)).astype(np.float32)

        def fn(v, we=we, be=be, wd=wd, bd=bd, s=s, c=c):  # type: ignore[no-untyped-def]
            return F.relu6(F.conv2d(F.relu6(F.conv2d(v, we, be)), wd, bd, stride=s, padding=1, groups=c))

        compiled = compile_fn(fn, [x], TARGET)
        assert _fused_calls(compiled) == 1
        t = torch.nn.functional
        e = t.conv2d(torch.from_numpy(x), torch.from_numpy(a[0]), torch.from_numpy(a[1].reshape(c))).clamp(
            0, 6
        )
        dw = torch.from_numpy(a[2].reshape(c, 1, 3, 3))
        want = t.conv2d(e, dw, torch.from_numpy(a[3].reshape(c)), stride=s, padding=1, groups=c).clamp(0, 6)
        np.testing.assert_allclose(compiled.run([x])[0], want.numpy(), rtol=1e-5, atol=1e-5)


def test_expand_dw_identical_on_1_and_2_threads(small_shapes_fuse: None) -> None:
    # large enough for a parallel region: each thread its ring and its range of output rows, the
    # rows at the ranges' edge expanded by both
    cases = [
        (1, 24, 48, 33, 35, 1, 1, "relu6", "relu6"),
        (2, 16, 40, 31, 29, 2, 1, "relu6", "residual"),
    ]
    fn, inputs = _pairs_model(cases, 2)
    two = assert_threads_agree(fn, inputs, TARGET, check(fn, inputs, TARGET, threads=1))
    assert _fused_calls(two) == len(cases)
    assert "const int nth = nt < " in two.ir("c")  # the fused kernels open a parallel region


def test_expand_dw_sanitized(small_shapes_fuse: None) -> None:
    """The ring's slots, the zero rows above and below the image, peeled columns and half-filled
    register tiles stay in bounds: the runner built with ASan/UBSan."""
    require(TARGET)
    fn, inputs = _pairs_model(CASES, 3)
    check_sanitized(compile_fn(fn, inputs, TARGET), inputs, scaled=False)


def test_expanded_tensor_read_twice_is_not_fused(small_shapes_fuse: None) -> None:
    """The expanded tensor is also an output: it must reach memory, so both plain kernels run."""
    rng = np.random.default_rng(4)
    we = xm.tensor((rng.standard_normal((24, 16, 1, 1)) / 4).astype(np.float32))
    wd = xm.tensor((rng.standard_normal((24, 1, 1, 3, 3)) / 3).astype(np.float32))
    x = rng.standard_normal((1, 16, 15, 13)).astype(np.float32)

    def fn(v):  # type: ignore[no-untyped-def]
        e = F.relu6(F.conv2d(v, we))
        return F.conv2d(e, wd, stride=2, padding=1, groups=24), e

    compiled = check(fn, [x], TARGET)
    assert _fused_calls(compiled) == 0
    assert "conv2d_nchw88_dw3x3" in compiled.ir("c")


def test_only_large_expanded_tensors_fuse() -> None:
    """By default a pair fuses where its expanded tensor is at least ``min_expanded`` floats
    (MobileNetV2's 56x56x144: 451584), not at 28x28x192 (150528)."""
    fn, inputs = _pairs_model([(1, 24, 144, 56, 56, 1, 1, "relu6", "relu6")], 5)
    assert _fused_calls(check(fn, inputs, TARGET)) == 1
    fn, inputs = _pairs_model([(1, 32, 192, 28, 28, 2, 1, "relu6", "relu6")], 6)
    assert _fused_calls(check(fn, inputs, TARGET)) == 0
