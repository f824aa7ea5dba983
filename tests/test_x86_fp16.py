"""The AVX512-FP16 kernels (``backends/c/templates/x86/x86_fp16*.py``: GEMM, Winograd, first-layer,
depthwise, pooling, matmul, elementwise; ``x86-avx512-fp16+ioc16``) against the reference interpreter
and whole models against the float32 reference.

Float16 tolerance: the reference runs the same float16 graph but accumulates convolutions and matrix
products in float32 and rounds once; the kernels accumulate in float16, so a result may differ by
about ``sqrt(K)`` half-ulps of the partial sums (``K`` = taps x input channels, up to 2700 here).
Each accumulating kernel's output must agree within ``1e-2 * max|want| + 1e-2 * |want|`` (Winograd
F(4, 3), not chosen by default, within 5e-2); pooling and elementwise kernels are bit-exact. Whole
models (float32 in and out, float16 inside) must be within a relative L2 error of 2% of the float32
reference's output (measured at 64x64: ResNet-18 0.5%, MobileNetV2 1.0%; at 224x224 ResNet-18 0.23%,
ResNet-50 0.38%). Every case pins its kernel choice.
Skipped, with the reason, on CPUs without AVX512-FP16."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import assert_threads_agree, compile_fn, kernel_families, require

TARGET = "x86-avx512-fp16+ioc16"
ISA = "avx512fp16"
KERNEL_RTOL = 1e-2
MODEL_REL_L2 = 2e-2

# name, input (N, C, H, W), OC, kernel, stride, padding, dilation, groups
CONVS = [
    ("dense3x3_odd", (1, 13, 9, 11), 19, 3, 1, 1, 1, 1),
    ("first_layer7x7_s2", (1, 3, 23, 21), 10, 7, 2, 3, 1, 1),
    ("pointwise_n2", (2, 22, 5, 7), 7, 1, 1, 0, 1, 1),
    ("pointwise_s2", (1, 9, 9, 9), 6, 1, 2, 0, 1, 1),
    ("dense3x3_s2_wide", (1, 5, 40, 37), 9, 3, 2, 1, 1, 1),
    ("rows_aligned", (1, 4, 12, 60), 5, 3, 1, 1, 1, 1),
    ("group3", (1, 12, 6, 7), 9, 3, 1, 1, 1, 3),
    ("dilated", (1, 4, 9, 9), 5, 3, 1, 2, 2, 1),
    ("deep_k_blocks", (1, 300, 6, 6), 50, 3, 1, 1, 1, 1),
    ("k_blocks_columns_first", (1, 40, 16, 16), 30, 3, 1, 1, 1, 1),
    ("depthwise_s1", (1, 7, 19, 37), 7, 3, 1, 1, 1, 7),
    ("depthwise_s2", (2, 5, 35, 70), 5, 3, 2, 1, 1, 5),
    ("depthwise5x5", (1, 3, 7, 20), 3, 5, 1, 2, 1, 3),
    ("depthwise_s3", (1, 4, 11, 13), 4, 3, 3, 1, 1, 4),
    ("winograd_n2_odd", (2, 40, 17, 19), 33, 3, 1, 1, 1, 1),
    ("winograd_pad0_two_chunks", (1, 24, 10, 75), 40, 3, 1, 0, 1, 1),
    ("stem5x5_s2_n2", (2, 3, 30, 70), 20, 5, 2, 2, 1, 1),
    ("pointwise_16_row_tile", (2, 20, 6, 9), 32, 1, 1, 0, 1, 1),
]


def _conv_weights(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for _, (_, ic, _, _), oc, k, *_rest, g in CONVS:
        shape = (oc, ic, k, k) if g == 1 else (g, oc // g, ic // g, k, k)
        fan_in = ic // g * k * k
        w = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        out.append((w, (rng.standard_normal(oc) * 0.2).astype(np.float32)))
    return out


def kernel_model(rng: np.random.Generator) -> tuple[Callable[..., Any], list[np.ndarray]]:
    weights = _conv_weights(rng)
    fc_w = Tensor((rng.standard_normal((70, 50)) * 0.2).astype(np.float32))
    fc_b = Tensor(rng.standard_normal(70).astype(np.float32))
    head_w = Tensor((rng.standard_normal((75, 203)) / np.sqrt(203)).astype(np.float32))
    head_b = Tensor(rng.standard_normal(75).astype(np.float32))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        convs = list(xs[: len(CONVS)])
        pool_x, vec, lhs, rhs, row = xs[len(CONVS) :]
        outs = []
        for i, ((_, _, _, _, s, p, d, g), x, (w, b)) in enumerate(zip(CONVS, convs, weights, strict=True)):
            y = F.conv2d(
                x, Tensor(w), Tensor(b.reshape(1, -1, 1, 1)), stride=s, padding=p, dilation=d, groups=g
            )
            outs.append(F.relu(y) if i % 2 == 0 else (F.relu6(y) if i % 3 == 0 else y))
        residual = outs[0] + outs[0] * 0.5  # conv + residual (epilogue) and elementwise mul
        pools = (
            F.max_pool2d(pool_x, 3, 2, 1),
            F.avg_pool2d(pool_x, 2, 2),
            F.avg_pool2d(pool_x, 3, 1, 1, mode="average_count_exclude_padding"),
            F.adaptive_avg_pool2d(pool_x, 1),
            F.avg_pool2d(pool_x, 3, 2, 0, mode="average_count_exclude_padding"),  # nothing to exclude
        )
        elem = (
            F.hswish(pool_x), F.maximum(pool_x, pool_x * 0.3), F.minimum(pool_x, 0.25), pool_x - 1.5,
            pool_x / 3.0, F.abs(pool_x), F.clip(pool_x, -0.5, 0.7),
        )  # fmt: skip
        linear = F.relu(F.linear(vec, fc_w, fc_b))
        product = F.matmul(lhs, rhs)  # both operands at run time, batched
        head = F.relu6(F.linear(row, head_w, head_b))  # one row: the dot-product path of matmul_f16
        return (*outs, residual, *pools, *elem, linear, product, head)

    inputs = [rng.standard_normal(c[1]).astype(np.float32) for c in CONVS]
    inputs += [
        rng.standard_normal((2, 6, 17, 45)).astype(np.float32) * 2,
        rng.standard_normal((3, 50)).astype(np.float32),
        rng.standard_normal((2, 5, 40)).astype(np.float32),
        rng.standard_normal((2, 40, 33)).astype(np.float32),
        rng.standard_normal((1, 203)).astype(np.float32),
    ]
    return f, inputs


NAMES = [c[0] for c in CONVS] + [
    "residual", "max_pool", "avg_pool", "avg_pool_exclude", "global_avg", "avg_pool_exclude_unpadded",
    "hswish", "maximum", "minimum", "sub", "div", "abs", "clip", "linear_relu", "batched_matmul", "head_row",
]  # fmt: skip
# no accumulation (pooling sums in float32 as the reference; elementwise ops round each step as the
# reference's float16 numpy): bit-exact
EXACT = {"max_pool", "avg_pool", "avg_pool_exclude", "global_avg", "avg_pool_exclude_unpadded"} | {
    "hswish", "maximum", "minimum", "sub", "div", "abs", "clip"
}  # fmt: skip
FAMILIES = {
    "conv2d_gemm_f16",
    "conv2d_winograd_f16",
    "conv2d_dw_f16",
    "pool2d_f16",
    "matmul_f16",
    "elemwise_f16",
}


def _assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(NAMES) == len(want)
    for name, g, w in zip(NAMES, got, want, strict=True):
        w = np.asarray(w, np.float32)
        assert g.shape == w.shape, name
        assert np.abs(w).max() > 0, name
        if name in EXACT:
            np.testing.assert_array_equal(g, w, err_msg=name)
            continue
        tol = KERNEL_RTOL * float(np.abs(w).max()) + KERNEL_RTOL * np.abs(w)
        bad = np.abs(np.asarray(g, np.float32) - w) > tol
        assert not bad.any(), f"{name}: {bad.sum()} of {w.size} beyond float16 tolerance"


def _assert_cases_close(
    compiled: Any, inputs: list[np.ndarray], sanitize: bool, label: str, rtol: float
) -> None:
    """Every output of ``compiled`` (under ASan/UBSan when ``sanitize``) within ``rtol`` of the reference
    interpreter's on the same inference graph."""
    want = run_module(compiled._stages["inference"], inputs)
    got = compiled.run_runner(inputs, sanitize=True) if sanitize else compiled.run(inputs)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w, np.float32)
        assert g.shape == w.shape
        bad = np.abs(g - w) > rtol * float(np.abs(w).max()) + rtol * np.abs(w)
        assert not bad.any(), f"{label} case {i}: {bad.sum()} of {w.size} beyond float16 tolerance"


def _assert_fused_family_matches(
    f: Callable[..., Any], inputs: list[np.ndarray], threads: int, sanitize: bool, family: str, count: int
) -> None:
    """``count`` calls of ``family``, one of them with a fused residual and ReLU6, and every output within
    the float16 tolerance of the reference."""
    compiled = compile_fn(f, inputs, TARGET, threads=threads)
    plan = compiled.ir("kernel-plan-memory")
    assert plan.count(f"kernel.call @{family}") == count and "_res_RELU6" in plan, plan
    _assert_cases_close(compiled, inputs, sanitize, family, KERNEL_RTOL)
    if threads == 2:
        assert_threads_agree(f, inputs, TARGET, compile_fn(f, inputs, TARGET, threads=1))


@pytest.fixture(scope="module")
def model() -> tuple[Callable[..., Any], list[np.ndarray]]:
    return kernel_model(np.random.default_rng(5))


@pytest.mark.parametrize("threads", [1, 2])
def test_fp16_kernels_match_reference(
    model: tuple[Callable[..., Any], list[np.ndarray]], threads: int
) -> None:
    require(TARGET)
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    kinds = kernel_families(compiled)
    for family in FAMILIES:
        assert (family, ISA) in kinds, f"{family} not selected: {sorted(kinds)}"
    # float16 compute throughout: the only conversions are the graph's float32 inputs and outputs
    calls = re.findall(r"kernel.call @(\w+)", compiled.ir("kernel-plan-memory"))
    assert sum(c.startswith("typecvt") for c in calls) == len(inputs) + len(NAMES)
    want = run_module(compiled._stages["inference"], inputs)  # type: ignore[arg-type]
    _assert_close(compiled.run(inputs), want)


def test_fp16_kernels_sanitized(model: tuple[Callable[..., Any], list[np.ndarray]]) -> None:
    require(TARGET)
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET)
    want = run_module(compiled._stages["inference"], inputs)  # type: ignore[arg-type]
    _assert_close(compiled.run_runner(inputs, sanitize=True), want)


# Winograd F(m, 3) cases: batch 2, odd sizes, padding 0 / 1 / 2 (outputs wider than the input),
# more than 32 tiles per tile row, a fused residual and ReLU6; input, output channels, H, W, padding
WINOGRAD = [
    ((2, 21, 11, 13), 18, 1),
    ((1, 24, 10, 75), 40, 0),
    ((1, 16, 5, 6), 35, 2),
    ((2, 20, 9, 7), 32, 1),  # 16-row U panels (OC a multiple of 16, not of 24)
    ((1, 48, 8, 8), 24, 1),
]
# F(4, 3)'s output transform multiplies M's float16 accumulation error by up to 8 (module doc of
# x86_fp16_winograd.py): measured up to 4% of the output's scale at 512 channels
WINOGRAD_F4_RTOL = 5e-2


def winograd_model(rng: np.random.Generator) -> tuple[Callable[..., Any], list[np.ndarray]]:
    convs = []
    for (_, ic, _, _), oc, _ in WINOGRAD:
        w = (rng.standard_normal((oc, ic, 3, 3)) / np.sqrt(9 * ic)).astype(np.float32)
        convs.append((Tensor(w), Tensor((rng.standard_normal((1, oc, 1, 1)) * 0.2).astype(np.float32))))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, (((_, _, pad), (w, b)), x) in enumerate(
            zip(zip(WINOGRAD, convs, strict=True), xs[: len(WINOGRAD)], strict=True)
        ):
            y = F.conv2d(x, w, b, padding=pad)
            outs.append(F.relu6(y + xs[-1]) if i == len(WINOGRAD) - 1 else (F.relu(y) if i % 2 else y))
        return tuple(outs)

    inputs = [np.abs(rng.standard_normal(s)).astype(np.float32) for s, _, _ in WINOGRAD]
    (n, _, h, w), oc, pad = WINOGRAD[-1]
    inputs.append(rng.standard_normal((n, oc, h + 2 * pad - 2, w + 2 * pad - 2)).astype(np.float32))
    return f, inputs


@pytest.mark.parametrize(
    ("tile", "threads", "sanitize", "row_bands"),
    [
        (2, 1, False, False), (2, 2, False, False), (4, 2, False, False), (2, 1, True, False),
        (2, 2, False, True), (2, 1, True, True),
    ],
)  # fmt: skip
def test_fp16_winograd_matches_reference(
    monkeypatch: pytest.MonkeyPatch, tile: int, threads: int, sanitize: bool, row_bands: bool
) -> None:
    """Every case on F(tile, 3), forced whatever the cost model says, against the reference; with
    ``row_bands`` every tile row is its own band (a partial last panel in each)."""
    from backends.c.templates.x86 import x86_fp16_winograd

    require(TARGET)
    monkeypatch.setattr(x86_fp16_winograd.KERNEL_UNITS[0], "tiles", (tile,))
    monkeypatch.setattr(x86_fp16_winograd, "WINOGRAD_MARGIN", float("inf"))
    if row_bands:
        monkeypatch.setattr(x86_fp16_winograd, "BAND_BYTES", 1)
    fn, inputs = winograd_model(np.random.default_rng(11))
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    plan = compiled.ir("kernel-plan-memory")
    assert plan.count(f"conv2d_winograd_f16_f{tile}_") >= len(WINOGRAD), plan
    assert "conv2d_gemm_f16" not in plan and "_res_RELU6" in plan  # the residual and ReLU6 are fused
    _assert_cases_close(
        compiled, inputs, sanitize, f"F({tile}, 3)", KERNEL_RTOL if tile == 2 else WINOGRAD_F4_RTOL
    )
    if threads == 2:
        assert_threads_agree(fn, inputs, TARGET, compile_fn(fn, inputs, TARGET, threads=1))


def test_fp16_winograd_against_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """F(2, 3) on the odd Winograd cases (with several points' U prefetched while the GEMM runs, bands of
    one tile row) against torch in float32 on the float16-rounded operands."""
    import torch

    from backends.c.templates.x86 import x86_fp16_winograd

    require(TARGET)
    monkeypatch.setattr(x86_fp16_winograd, "WINOGRAD_MARGIN", float("inf"))
    monkeypatch.setattr(x86_fp16_winograd, "BAND_BYTES", 1)
    rng = np.random.default_rng(13)
    for shape, oc, pad in WINOGRAD:
        half = (rng.standard_normal((oc, shape[1], 3, 3)) / np.sqrt(9 * shape[1])).astype(np.float16)
        w, b = half.astype(np.float32), (rng.standard_normal((1, oc, 1, 1)) * 0.2).astype(np.float16)
        x = rng.standard_normal(shape).astype(np.float16).astype(np.float32)
        compiled = compile_fn(
            lambda t, w=w, b=b, pad=pad: F.relu(
                F.conv2d(t, Tensor(w), Tensor(b.astype(np.float32)), padding=pad)
            ),
            [x],
            TARGET,
        )
        assert "conv2d_winograd_f16_f2_" in compiled.ir("kernel-plan-memory")
        y = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=pad)
        want = torch.relu(y + torch.from_numpy(b.astype(np.float32))).numpy()
        got = compiled.run([x])[0]
        assert np.abs(got - want).max() <= 2 * KERNEL_RTOL * np.abs(want).max(), (shape, oc, pad)


def test_fp16_winograd_point_stride_spreads_sets() -> None:
    """The (m + 2)^2 points' V panels of a ResNet-18 layer start in distinct L1 sets (their point
    stride, a multiple of 4 KB unpadded, put every store of the input transform into one set)."""
    from backends.c.templates.x86.x86_fp16_winograd import KERNEL_UNITS, L1_SETS, LINE_BYTES

    unit = KERNEL_UNITS[0]
    for c, hw in ((64, 56), (128, 28), (256, 14)):
        p = {"m": 2, "oh": hw, "ow": hw, "ic": c, "oc": c, "mr": 16 if c < 256 else 24, "nr": 32}
        geo = unit.geometry(p)
        assert geo["VPS"] >= geo["NP"] * c * 32
        lines = geo["VPS"] * 2 // LINE_BYTES
        assert len({k * lines % L1_SETS for k in range(16)}) == 16, (c, hw, geo)


def test_fp16_winograd_choice() -> None:
    """F(2, 3) for ResNet's 56x56 .. 14x14 3x3 layers; the direct GEMM at 7x7x512 (one tile panel, U
    streamed from memory), for few channels and for strided or 5x5 convolutions."""
    from backends.c.templates.x86.x86_fp16_winograd import winograd_tile

    def conv(c: int, hw: int, k: int = 3, s: int = 1, ic: int | None = None) -> dict[str, Any]:
        return {"ic": ic or c, "oc": c, "oh": hw, "ow": hw, "fh": k, "fw": k, "sh": s, "sw": s, "dh": 1,
                "dw": 1, "groups": 1}  # fmt: skip

    assert [winograd_tile(conv(c, hw), (2,)) for c, hw in ((64, 56), (128, 28), (256, 14))] == [2, 2, 2]
    assert winograd_tile(conv(512, 7), (2,)) is None
    assert winograd_tile(conv(64, 56, ic=3), (2,)) is None
    assert winograd_tile(conv(64, 56, s=2), (2,)) is None
    assert winograd_tile(conv(64, 56, k=5), (2,)) is None


# first-layer direct kernel cases: input (N, C, H, W), OC, kernel, stride (rows, columns), padding
STEMS = [
    ((1, 3, 37, 45), 64, 7, (2, 2), 3),
    ((2, 1, 9, 40), 17, 3, (1, 1), 1),
    ((1, 4, 12, 71), 5, (3, 5), (3, 2), (0, 2)),
    ((2, 3, 22, 90), 20, 7, (2, 2), 3),  # 11 x 45 out: rows paired in their last vector, one left over
]


@pytest.mark.parametrize(("threads", "sanitize"), [(1, False), (2, False), (1, True)])
def test_fp16_stem_matches_reference(threads: int, sanitize: bool) -> None:
    """conv2d_stem_f16 with a fused residual and ReLU6: batch 2, odd widths, row / column strides,
    partial channel groups, asymmetric kernels and padding."""
    require(TARGET)
    rng = np.random.default_rng(3)
    weights = []
    for (_, ic, _, _), oc, k, _, _ in STEMS:
        kh, kw = (k, k) if isinstance(k, int) else k
        w = (rng.standard_normal((oc, ic, kh, kw)) / np.sqrt(ic * kh * kw)).astype(np.float32)
        weights.append((Tensor(w), Tensor((rng.standard_normal((1, oc, 1, 1)) * 0.2).astype(np.float32))))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        convs = xs[: len(STEMS)]
        for i, ((_, _, _, stride, pad), (w, b), x) in enumerate(zip(STEMS, weights, convs, strict=True)):
            y = F.conv2d(x, w, b, stride=stride, padding=pad)
            outs.append(F.relu6(y + xs[-2]) if i == 0 else F.relu(y + xs[-1]) if i == 3 else F.relu(y))
        return tuple(outs)

    inputs = [rng.standard_normal(s).astype(np.float32) for s, *_ in STEMS]
    inputs.append(rng.standard_normal((1, 64, 19, 23)).astype(np.float32))
    inputs.append(rng.standard_normal((2, 20, 11, 45)).astype(np.float32))
    _assert_fused_family_matches(f, inputs, threads, sanitize, "conv2d_stem_f16", len(STEMS))


# small-output (pixels x channels tile) kernel cases: input (N, C, H, W), OC, kernel, stride, padding,
# dilation: both tiles (7 x 4 for 128-channel panels, 14 x 2 for 64), a partial last pixel tile, batch 2,
# strides, a 5x5 kernel, dilation, two channel panels (split by pixel tiles between 2 threads)
PIXROWS = [
    ((2, 19, 7, 7), 128, 3, 1, 1, 1),
    ((1, 37, 9, 11), 64, 3, 2, 1, 1),
    ((1, 24, 13, 12), 192, 5, 1, 2, 1),
    ((1, 16, 10, 10), 128, 3, 1, 2, 2),
    ((1, 40, 8, 9), 256, 3, 2, 1, 1),
    ((2, 21, 28, 27), 128, 3, 2, 1, 1),  # 14x14 out: tile-major im2col, two 7-pixel tiles a row
]


@pytest.mark.parametrize(("threads", "sanitize"), [(1, False), (2, False), (1, True)])
def test_fp16_pixrows_matches_reference(threads: int, sanitize: bool) -> None:
    """conv2d_pixrows_f16 with and without a fused residual (ReLU6, ReLU, none) against the reference."""
    require(TARGET)
    rng = np.random.default_rng(7)
    weights = []
    for (_, ic, _, _), oc, k, *_ in PIXROWS:
        w = (rng.standard_normal((oc, ic, k, k)) / np.sqrt(ic * k * k)).astype(np.float32)
        weights.append((Tensor(w), Tensor((rng.standard_normal((1, oc, 1, 1)) * 0.2).astype(np.float32))))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, _, _, s, pad, d), (w, b), x) in enumerate(zip(PIXROWS, weights, xs, strict=False)):
            y = F.conv2d(x, w, b, stride=s, padding=pad, dilation=d)
            outs.append(F.relu6(y + xs[-1]) if i == 2 else (F.relu(y) if i % 2 else y))
        return tuple(outs)

    inputs = [rng.standard_normal(s).astype(np.float32) for s, *_ in PIXROWS]
    inputs.append(rng.standard_normal((1, 192, 13, 12)).astype(np.float32))
    _assert_fused_family_matches(f, inputs, threads, sanitize, "conv2d_pixrows_f16", len(PIXROWS))


# filters-first GEMM convs (more filter than im2col: each call prefetches its share of the next filter
# block at an even rate): partial last K blocks, 16- and 24-row panels, batch 2; input (N, C, H, W), OC,
# kernel, stride, padding
FILTERS_FIRST = [
    ((1, 600, 5, 7), 100, 1, 1, 0),  # K blocks 256, 256, 88; 5 row panels, 2 column panels
    ((2, 520, 3, 3), 64, 1, 1, 0),  # 16-row panels, one column panel
    ((1, 40, 4, 5), 72, 3, 2, 1),  # K = 360: 256 + 104
]


@pytest.mark.parametrize(("threads", "sanitize"), [(1, False), (2, False), (1, True)])
def test_fp16_gemm_filters_first_matches_reference(threads: int, sanitize: bool) -> None:
    """conv2d_gemm_f16 in filters-first order (``mfirst``) against the reference and torch (float32, on
    the float16-rounded operands), 1 and 2 threads bit for bit, under ASan / UBSan."""
    import torch

    require(TARGET)
    rng = np.random.default_rng(3)
    weights = []
    for (_, ic, _, _), oc, k, *_ in FILTERS_FIRST:
        w = (rng.standard_normal((oc, ic, k, k)) / np.sqrt(ic * k * k)).astype(np.float16).astype(np.float32)
        b = (rng.standard_normal((1, oc, 1, 1)) * 0.2).astype(np.float16).astype(np.float32)
        weights.append((w, b))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, _, _k, s, pad), (w, b), x) in enumerate(zip(FILTERS_FIRST, weights, xs, strict=False)):
            y = F.conv2d(x, Tensor(w), Tensor(b), stride=s, padding=pad)
            outs.append(F.relu6(y + xs[-1]) if i == 0 else F.relu(y))
        return tuple(outs)

    inputs = [rng.standard_normal(s).astype(np.float16).astype(np.float32) for s, *_ in FILTERS_FIRST]
    inputs.append(rng.standard_normal((1, 100, 5, 7)).astype(np.float16).astype(np.float32))
    compiled = compile_fn(f, inputs, TARGET, threads=threads)
    plan = compiled.ir("kernel-plan-memory")
    calls = re.findall(r"kernel.call @(conv2d_\w+)", plan)
    assert len(calls) == len(FILTERS_FIRST) and all("gemm_f16" in c and "_mfirst_" in c for c in calls), calls
    assert "_res_RELU6" in plan, plan
    _assert_cases_close(compiled, inputs, sanitize, "conv2d_gemm_f16 mfirst", KERNEL_RTOL)
    got = compiled.run(inputs)
    for i, ((_, _, _k, s, pad), (w, b)) in enumerate(zip(FILTERS_FIRST, weights, strict=True)):
        y = torch.nn.functional.conv2d(
            torch.from_numpy(inputs[i]), torch.from_numpy(w), stride=s, padding=pad
        )
        y = y + torch.from_numpy(b)
        y = torch.clamp(y + torch.from_numpy(inputs[-1]), 0, 6) if i == 0 else torch.relu(y)
        want = y.numpy()
        assert np.abs(got[i] - want).max() <= 2 * KERNEL_RTOL * np.abs(want).max(), f"case {i} against torch"
    if threads == 2:
        assert_threads_agree(f, inputs, TARGET, compile_fn(f, inputs, TARGET, threads=1))


def test_fp16_pixrows_choice() -> None:
    """The small-output kernel for ResNet's 3x3 7x7 layers and strided 3x3 layers down to 14x14; not for
    1x1 convolutions, the layers Winograd takes, large outputs or channel counts off its tiles."""
    from backends.c.templates.x86.x86_fp16_pixrows import ConvPixelRowsF16

    def picks(ic: int, hw: int, oc: int, k: int = 3, s: int = 1) -> bool:
        x = np.zeros((1, ic, hw, hw), np.float32)
        w = Tensor(np.zeros((oc, ic, k, k), np.float32))
        compiled = compile_fn(lambda t: F.conv2d(t, w, stride=s, padding=k // 2), [x], TARGET)
        return "conv2d_pixrows_f16" in compiled.ir("kernel-plan-memory")

    require(TARGET)
    assert ConvPixelRowsF16.priority > 108  # tried first: it declines what the other units keep
    assert picks(512, 7, 512) and picks(256, 14, 512, s=2) and picks(128, 28, 256, s=2)
    assert not picks(256, 14, 256)  # Winograd F(2, 3)
    assert not picks(256, 14, 512, k=1, s=2) and not picks(64, 56, 128, s=2) and not picks(64, 7, 48)


def test_fp16_relu_and_max_pool_keep_nan() -> None:
    require(TARGET)
    x = np.ones((1, 2, 5, 40), np.float32)
    x[0, 0, 1, 3] = np.nan
    x[0, 1, 2, 33] = np.nan
    compiled = compile_fn(lambda t: (F.relu(t - 2.0), F.max_pool2d(t, 3, 2, 1)), [x], TARGET)
    want = run_module(compiled._stages["tensor"], [x])  # type: ignore[arg-type]
    for g, w in zip(compiled.run([x]), want, strict=True):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(np.asarray(w)))


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_fp16_models_against_float32(name: str) -> None:
    """Float32 in and out, float16 inside: within MODEL_REL_L2 of the float32 reference."""
    import importlib

    require(TARGET)
    from compiler.driver.compile import compile

    module = "resnet" if name.startswith("resnet") else name
    net = getattr(importlib.import_module(f"compiler.hub.{module}"), name)()
    rng = np.random.default_rng(0)
    for pname, t in net.named_tensors():  # non-trivial batch-norm statistics, as bench/bench_x86.py
        if "running_var" in pname:
            t._reset(rng.uniform(0.5, 2.0, t.shape).astype(np.float32))
        elif "running_mean" in pname or pname.endswith("bias"):
            t._reset(rng.uniform(-0.1, 0.1, t.shape).astype(np.float32))
    net.eval()
    x = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    compiled = compile(net, TARGET, [x])
    kinds = {f for f, isa in kernel_families(compiled) if isa == ISA}
    assert "conv2d_gemm_f16" in kinds, sorted(kinds)
    got = compiled.run([x])[0]
    want = np.asarray(run_module(compiled._stages["tensor"], [x])[0], np.float32)  # type: ignore[arg-type]
    assert got.dtype == np.float32
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert rel < MODEL_REL_L2, f"{name}: relative L2 error {rel:.4f} against float32"


def test_ioc16_target_words() -> None:
    from backends.targets import TargetError, parse_target

    t = parse_target(TARGET)
    assert t.isas[0] == ISA and t.dump_options == ("enable_ioc16",)
    # the fp16 feature alone keeps float32 (the host target names it whenever the CPU has it)
    assert parse_target("x86-avx512-nchw88-fp16").dump_options == ("enable_nchw88",)
    with pytest.raises(TargetError, match="needs the fp16 feature"):
        parse_target("x86-avx512+ioc16")
    with pytest.raises(TargetError, match="plain NCHW"):
        parse_target("x86-avx512-nchw88-fp16+ioc16")
    with pytest.raises(TargetError, match="need the avx512 feature"):
        parse_target("x86-avx2-fp16+ioc16")
