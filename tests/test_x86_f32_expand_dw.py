"""``conv2d_nchw88_expand_dw3x3`` (a float32 1x1 expand convolution and the depthwise 3x3 after it as
one AVX-512 NCHW88 kernel, through a ring of expanded rows) and ``conv2d_nchw88_expand_dw3x3_project``
(and the 1x1 project convolution after them) against the reference interpreter and PyTorch, bit for
bit against the kernels they replace (the same graph compiled with the units switched off) and on 1
and 2 threads, once under ASan/UBSan; a tensor read twice or one too small to be worth it stays on
the plain kernels.

Small shapes fuse here through lowered :class:`ConvNchw88ExpandDw3x3` thresholds; the defaults keep
the fusion to MobileNetV2's pairs from 14x14 (with their project convolutions; 112x112 and 56x56
alone too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

import compiler as xm
import compiler.functional as F
from backends.c.templates.x86.x86_f32_expand_dw import ConvNchw88ExpandDw3x3, ConvNchw88ExpandDw3x3Project
from compiler.driver.compile import CompiledModel
from tests.codegen_util import (
    assert_threads_agree,
    check,
    check_sanitized,
    compile_fn,
    compile_sanitized,
    require,
)

TARGET = "x86-avx512-nchw88"
FAMILY = ConvNchw88ExpandDw3x3.family
PROJECT_FAMILY = ConvNchw88ExpandDw3x3Project.family

# (n, ic, c, oc, h, w, stride, pad, expand activation, depthwise activation, epilogue): expand 1x1 ic
# -> c, depthwise 3x3, then (oc > 0) a project 1x1 c -> oc; the epilogue is the last convolution's.
# Channel counts that are multiples of 8 but not of 16 (half-filled register tiles), odd sizes, rows
# narrower than a register block, odd output heights (stride 1's lone last row of a block)
CASES = [
    (1, 16, 24, 0, 15, 17, 2, 1, "relu6", "relu6", "none"),
    (2, 8, 40, 0, 13, 11, 1, 1, "relu6", "relu6", "none"),  # batch 2, 11 columns: one 1x1 column tile
    (1, 24, 56, 0, 9, 29, 1, 1, "relu", "none", "none"),  # 29 columns: 1x1 tiles of 9, 10, 10
    (2, 16, 24, 0, 10, 9, 2, 1, "none", "none", "residual_relu"),  # the expand's result as it is
    (1, 8, 32, 0, 7, 13, 1, 0, "relu6", "relu", "none"),  # no padding: 5 output rows
    (1, 40, 16, 0, 11, 12, 2, 0, "relu6", "relu6", "none"),
    (1, 8, 8, 0, 3, 3, 1, 1, "relu", "none", "residual_relu"),  # every column a border column
]
PROJECT_CASES = [
    (1, 24, 40, 24, 13, 11, 1, 1, "relu6", "relu6", "residual"),  # MobileNetV2's stride-1 block
    (2, 16, 24, 40, 15, 17, 2, 1, "relu6", "relu6", "none"),  # batch 2, stride 2
    (1, 8, 56, 8, 9, 29, 1, 1, "relu", "none", "relu"),  # 9 rows: a lone last row (a shorter run)
    (1, 16, 48, 24, 8, 6, 1, 0, "none", "relu6", "residual_relu"),  # no padding, 6 output rows
    (2, 24, 16, 56, 6, 7, 2, 0, "relu6", "relu6", "relu6"),
]


@pytest.fixture
def small_shapes_fuse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ConvNchw88ExpandDw3x3, "min_expanded", 0)
    monkeypatch.setattr(ConvNchw88ExpandDw3x3, "min_expanded_projected", 0)


@contextmanager
def declined(*units: type) -> Iterator[None]:
    """Compile with these fused units declining every op: what they fuse runs on the kernels
    before them (expand_dw3x3 and conv2d_nchw88; conv2d_nchw88 and conv2d_nchw88_dw3x3)."""
    saved = [u.match for u in units]
    for u in units:
        u.match = lambda self, op: None
    try:
        yield
    finally:
        for u, match in zip(units, saved, strict=True):
            u.match = match


ACTIVATIONS = {"relu6": F.relu6, "relu": F.relu, "none": lambda v: v}


def _blocks_model(cases: list[tuple], seed: int) -> tuple[Callable[..., object], list[np.ndarray]]:
    """Every case as expand 1x1 (+ bias, activation) -> depthwise 3x3 (+ bias, activation) -> for
    oc > 0 project 1x1 (+ bias), the last one's epilogue after it (a residual is an input)."""
    rng = np.random.default_rng(seed)
    params, inputs = [], []
    for n, ic, c, oc, h, w, s, p, _, _, epi in cases:
        shapes = [(c, ic, 1, 1), (1, c, 1, 1), (c, 1, 1, 3, 3), (1, c, 1, 1), (oc, c, 1, 1), (1, oc, 1, 1)]
        params.append(
            tuple(
                xm.tensor((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32))
                for shape in shapes[: 6 if oc else 4]
            )
        )
        inputs.append(rng.standard_normal((n, ic, h, w)).astype(np.float32))
        if epi.startswith("residual"):
            out = (n, oc or c, (h + 2 * p - 3) // s + 1, (w + 2 * p - 3) // s + 1)
            inputs.append(rng.standard_normal(out).astype(np.float32))

    def fn(*xs):  # type: ignore[no-untyped-def]
        outs, it = [], iter(xs)
        for weights, (_, _, c, oc, _, _, s, p, e_act, d_act, epi) in zip(params, cases, strict=True):
            we, be, wd, bd, *project = weights
            e = ACTIVATIONS[e_act](F.conv2d(next(it), we, be))
            y = F.conv2d(e, wd, bd, stride=s, padding=p, groups=c)
            if oc:
                y = F.conv2d(ACTIVATIONS[d_act](y), *project)
            elif epi == "none":
                y = ACTIVATIONS[d_act](y)
            if epi.startswith("residual"):
                y = y + next(it)
            outs.append(F.relu(y) if epi.endswith("relu") else ACTIVATIONS.get(epi, lambda v: v)(y))
        return tuple(outs)

    return fn, inputs


def _calls(compiled: CompiledModel, family: str = FAMILY) -> int:
    return compiled.ir("c").count(f"static void {family}_ic")


def _assert_identical(a: CompiledModel, b: CompiledModel, inputs: list[np.ndarray]) -> None:
    for got, want in zip(a.run(inputs), b.run(inputs), strict=True):
        np.testing.assert_array_equal(got, want)  # the same FMAs in the same order


def test_expand_dw_matches_reference_and_plain_kernels(small_shapes_fuse: None) -> None:
    fn, inputs = _blocks_model(CASES, 0)
    fused = check(fn, inputs, TARGET)
    source = fused.ir("c")
    assert _calls(fused) == len(CASES)
    assert "conv2d_nchw88_dense" not in source and "conv2d_nchw88_dw3x3" not in source
    with declined(ConvNchw88ExpandDw3x3):
        plain = compile_fn(fn, inputs, TARGET)
    assert _calls(plain) == 0
    _assert_identical(fused, plain, inputs)


def test_expand_dw_project_matches_reference_and_unfused(small_shapes_fuse: None) -> None:
    fn, inputs = _blocks_model(PROJECT_CASES, 1)
    fused = check(fn, inputs, TARGET)
    assert _calls(fused, PROJECT_FAMILY) == len(PROJECT_CASES)
    assert "conv2d_nchw88_dense" not in fused.ir("c") and _calls(fused) == 0
    with declined(ConvNchw88ExpandDw3x3Project):
        pair = compile_fn(fn, inputs, TARGET)  # expand + depthwise fused, the project on its own
    assert _calls(pair) == len(PROJECT_CASES) and _calls(pair, PROJECT_FAMILY) == 0
    _assert_identical(fused, pair, inputs)
    with declined(ConvNchw88ExpandDw3x3Project, ConvNchw88ExpandDw3x3):
        plain = compile_fn(fn, inputs, TARGET)
    assert "expand_dw3x3" not in plain.ir("c")
    _assert_identical(fused, plain, inputs)


def test_inverted_residual_block_matches_torch(small_shapes_fuse: None) -> None:
    """MobileNetV2's blocks as torch computes them: conv 1x1 + bias, ReLU6, depthwise 3x3 + bias,
    ReLU6, then (stride 1) conv 1x1 + bias + the block's input, or (stride 2) no project."""
    require(TARGET)
    rng = np.random.default_rng(2)
    t = torch.nn.functional
    for n, ic, c, h, w, s in ((2, 24, 40, 19, 25, 1), (1, 16, 48, 21, 18, 2)):
        shapes = [(c, ic, 1, 1), (c,), (c, 1, 3, 3), (c,), (ic, c, 1, 1), (ic,)]
        a = [
            (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32) for shape in shapes
        ]
        we, be, wd, bd, wp, bp = (xm.tensor(v.reshape(-1, 1, 1) if v.ndim == 1 else v) for v in a)
        wd = xm.tensor(a[2].reshape(c, 1, 1, 3, 3))
        x = rng.standard_normal((n, ic, h, w)).astype(np.float32)

        def fn(v, we=we, be=be, wd=wd, bd=bd, wp=wp, bp=bp, s=s, c=c):  # type: ignore[no-untyped-def]
            d = F.relu6(F.conv2d(F.relu6(F.conv2d(v, we, be)), wd, bd, stride=s, padding=1, groups=c))
            return F.conv2d(d, wp, bp) + v if s == 1 else d

        compiled = compile_fn(fn, [x], TARGET)
        assert _calls(compiled, PROJECT_FAMILY if s == 1 else FAMILY) == 1
        we_t, be_t, wd_t, bd_t, wp_t, bp_t = (torch.from_numpy(v) for v in a)
        xt = torch.from_numpy(x)
        want = t.conv2d(t.conv2d(xt, we_t, be_t).clamp(0, 6), wd_t, bd_t, stride=s, padding=1, groups=c)
        want = want.clamp(0, 6)
        if s == 1:
            want = t.conv2d(want, wp_t, bp_t) + xt
        np.testing.assert_allclose(compiled.run([x])[0], want.numpy(), rtol=1e-5, atol=1e-5)


def test_expand_dw_identical_on_1_and_2_threads(small_shapes_fuse: None) -> None:
    # large enough for a parallel region: each thread its ring and its range of output rows, the
    # rows at the ranges' edge expanded by both; at stride 1 a range of an odd number of rows ends
    # in a lone row (14 rows: 7 and 7)
    cases = [
        (1, 24, 48, 0, 33, 35, 1, 1, "relu6", "relu6", "none"),
        (2, 16, 40, 0, 31, 29, 2, 1, "relu6", "none", "residual_relu"),
        (1, 24, 64, 24, 31, 33, 1, 1, "relu6", "relu6", "residual"),
        (2, 16, 48, 32, 29, 27, 2, 1, "relu6", "relu6", "none"),
        (1, 64, 128, 64, 14, 14, 1, 1, "relu6", "relu6", "residual"),
        (1, 48, 96, 40, 13, 15, 1, 1, "relu6", "relu6", "none"),
    ]
    fn, inputs = _blocks_model(cases, 3)
    two = assert_threads_agree(fn, inputs, TARGET, check(fn, inputs, TARGET, threads=1))
    assert _calls(two) == 2 and _calls(two, PROJECT_FAMILY) == 4
    assert two.ir("c").count("const int nth = nt < ") == 6  # each opens a parallel region


def test_expand_dw_sanitized(small_shapes_fuse: None) -> None:
    """The ring's slots, the block of depthwise rows, the zero rows above and below the image,
    peeled columns and half-filled register tiles stay in bounds: the runner built with ASan/UBSan."""
    require(TARGET)
    fn, inputs = _blocks_model(CASES + PROJECT_CASES, 4)
    check_sanitized(compile_sanitized(fn, inputs, TARGET), inputs, scaled=False)


def test_a_tensor_read_twice_is_not_fused(small_shapes_fuse: None) -> None:
    """An expanded tensor (a depthwise output) that is also a model output must reach memory: the
    expand (the project) runs on its own kernel."""
    rng = np.random.default_rng(5)
    we = xm.tensor((rng.standard_normal((24, 16, 1, 1)) / 4).astype(np.float32))
    wd = xm.tensor((rng.standard_normal((24, 1, 1, 3, 3)) / 3).astype(np.float32))
    wp = xm.tensor((rng.standard_normal((16, 24, 1, 1)) / 5).astype(np.float32))
    x = rng.standard_normal((1, 16, 15, 13)).astype(np.float32)

    def expanded_twice(v):  # type: ignore[no-untyped-def]
        e = F.relu6(F.conv2d(v, we))
        return F.conv2d(F.conv2d(e, wd, stride=2, padding=1, groups=24), wp), e

    compiled = check(expanded_twice, [x], TARGET)
    assert _calls(compiled) == _calls(compiled, PROJECT_FAMILY) == 0
    assert "conv2d_nchw88_dw3x3" in compiled.ir("c")

    def depthwise_twice(v):  # type: ignore[no-untyped-def]
        d = F.relu6(F.conv2d(F.relu6(F.conv2d(v, we)), wd, stride=2, padding=1, groups=24))
        return F.conv2d(d, wp), d

    compiled = check(depthwise_twice, [x], TARGET)
    assert _calls(compiled) == 1 and _calls(compiled, PROJECT_FAMILY) == 0


def test_only_large_expanded_tensors_fuse() -> None:
    """By default a pair fuses where its expanded tensor has at least ``min_expanded`` floats
    (MobileNetV2's 56x56x144: 451584), with a project after it ``min_expanded_projected`` (its
    28x28x192 and 14x14 blocks, not 7x7x960: 47040)."""
    project = ConvNchw88ExpandDw3x3.min_expanded_projected
    assert 7 * 7 * 960 < project <= 14 * 14 * 384 and 28 * 28 * 192 < ConvNchw88ExpandDw3x3.min_expanded
    fn, inputs = _blocks_model([(1, 24, 144, 0, 56, 56, 1, 1, "relu6", "relu6", "none")], 6)
    assert _calls(check(fn, inputs, TARGET)) == 1
    fn, inputs = _blocks_model([(1, 32, 192, 0, 28, 28, 2, 1, "relu6", "relu6", "none")], 7)
    assert _calls(check(fn, inputs, TARGET)) == 0
    fn, inputs = _blocks_model([(1, 32, 192, 64, 28, 28, 2, 1, "relu6", "relu6", "none")], 8)
    assert _calls(check(fn, inputs, TARGET), PROJECT_FAMILY) == 1
    fn, inputs = _blocks_model([(1, 160, 960, 160, 7, 7, 1, 1, "relu6", "relu6", "residual")], 9)
    compiled = check(fn, inputs, TARGET)
    assert _calls(compiled) == _calls(compiled, PROJECT_FAMILY) == 0


def test_mobilenet_v2_matches_reference_and_unfused(small_shapes_fuse: None) -> None:
    """A whole MobileNetV2 (narrow, batch 2: every expand + depthwise (+ project) block fused, with
    and without residual) against the reference interpreter, bit for bit against the plain kernels."""
    from compiler.hub.mobilenet_v2 import mobilenet_v2

    require(TARGET)
    net = mobilenet_v2(width_mult=0.5, num_classes=10)
    net.eval()
    x = np.random.default_rng(10).standard_normal((2, 3, 48, 40)).astype(np.float32)
    fused = check(net, [x], TARGET, rtol=1e-3, atol=1e-4)
    assert _calls(fused, PROJECT_FAMILY) >= 10  # 16 blocks with an expand; repeated shapes share a kernel
    with declined(ConvNchw88ExpandDw3x3Project, ConvNchw88ExpandDw3x3):
        plain = compile_fn(net, [x], TARGET)
    assert "expand_dw3x3" not in plain.ir("c")
    _assert_identical(fused, plain, [x])
