"""Threads in the float32 x86 kernels (issue 14): every kernel large enough to open a parallel region
gives bit-identical results on 1 and 2 threads (each output is computed by one thread in the same
order whatever the partition) and matches the reference; a small layer opens no region at all; a
kernel's copies and steps share one region; the 1x1 convolutions of 7x7 and 14x14 layers split into
blocks that two threads share evenly.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.c.templates.portable.generic import MIN_WORK_PER_THREAD, omp_for, omp_parallel, parallel_threads
from backends.c.templates.x86.nchw88 import RELAYOUT_MIN_PARALLEL, balanced_block, static_share
from tests.codegen_util import check, compile_fn, compile_fn_threads, source_only
from tests.test_codegen_conv import _conv_model

NCHW88_TARGETS = ["x86-avx2-nchw88", "x86-avx512-nchw88"]

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue): odd shapes, each above two threads'
# worth of multiply-adds (2 x MIN_WORK_PER_THREAD), so that every kernel really runs its parallel path
LARGE_CASES = [
    (1, 3, 61, 59, 16, 7, 2, 3, 1, 1, "relu"),  # hybrid first layer, padded copy of a plain input
    (1, 24, 29, 27, 40, 3, 2, 1, 1, 1, "residual"),  # dense 3x3 stride 2: padded copy + conv
    (1, 40, 15, 13, 56, 3, 1, 1, 1, 1, "relu"),  # 3x3 stride 1: Winograd on the nchw88 targets
    (1, 96, 7, 7, 48, 1, 1, 0, 1, 1, "residual"),  # 1x1 at 7x7, 3 tiles of 16: balanced blocks
    (1, 64, 14, 14, 40, 1, 1, 0, 1, 1, "relu"),  # 1x1 at 14x14, 5 blocks of 8 channels
    (2, 32, 17, 15, 48, 3, 1, 1, 1, 2, "none"),  # grouped, batch 2
    (1, 72, 29, 31, 72, 3, 1, 1, 1, 72, "relu"),  # depthwise
    (2, 48, 31, 29, 48, 3, 2, 1, 1, 48, "residual"),  # depthwise stride 2, batch 2
]


def _outputs_1_and_2_threads(fn, inputs, target):  # type: ignore[no-untyped-def]
    one = check(fn, inputs, target, threads=1)
    two = compile_fn_threads(fn, inputs, target, 2)  # the same kernels: one's build
    return one, one.run(inputs), two.run(inputs)


def _kernels(source: str, prefix: str) -> dict[str, str]:
    """The generated C functions whose name starts with ``prefix``: name -> body."""
    found = {}
    for m in re.finditer(rf"^static void ({prefix}\w*)\(.*?^}}$", source, re.S | re.M):
        found[m.group(1)] = m.group(0)
    return found


@pytest.mark.parametrize("target", [*NCHW88_TARGETS, "x86-avx512"])
def test_convolutions_identical_on_1_and_2_threads(target: str) -> None:
    fn, inputs = _conv_model(LARGE_CASES, np.random.default_rng(14))
    one, y1, y2 = _outputs_1_and_2_threads(fn, inputs, target)
    for a, b in zip(y1, y2, strict=True):
        np.testing.assert_array_equal(a, b)
    source = one.ir("c")
    regions = [k for k, body in _kernels(source, "conv2d_").items() if "#pragma omp parallel" in body]
    assert len(regions) >= 5, regions  # the parallel paths really ran


def test_pooling_and_matmul_identical_on_1_and_2_threads() -> None:
    rng = np.random.default_rng(15)
    w = xm.tensor(rng.standard_normal((1001, 517)).astype(np.float32) / 23)
    b = xm.tensor(rng.standard_normal((1001,)).astype(np.float32))

    def fn(x, f):  # type: ignore[no-untyped-def]
        return F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1), F.linear(f, w, b)

    x = rng.standard_normal((1, 96, 57, 55)).astype(np.float32)
    f = rng.standard_normal((3, 517)).astype(np.float32)
    for target in ("x86-avx512-nchw88", "x86-avx512"):
        _, y1, y2 = _outputs_1_and_2_threads(fn, [x, f], target)
        for a, c in zip(y1, y2, strict=True):
            np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("target", NCHW88_TARGETS)
def test_small_layers_open_no_parallel_region(target: str) -> None:
    # MobileNetV2's last depthwise layer (960 channels at 7x7, 423k multiply-adds) and a 1x1 of
    # 32 -> 32 channels at 7x7: one thread each; the 1x1 of 960 -> 160 (7.5M) runs on threads
    cases = [
        (1, 960, 7, 7, 960, 3, 1, 1, 1, 960, "relu"),
        (1, 32, 7, 7, 32, 1, 1, 0, 1, 1, "none"),
        (1, 960, 7, 7, 160, 1, 1, 0, 1, 1, "residual"),
    ]
    fn, inputs = _conv_model(cases, np.random.default_rng(16))
    one, y1, y2 = _outputs_1_and_2_threads(fn, inputs, target)
    for a, b in zip(y1, y2, strict=True):
        np.testing.assert_array_equal(a, b)
    kernels = _kernels(one.ir("c"), "conv2d_nchw88_")
    small = [k for k in kernels if "_c960_7x7" in k or "ic32_7x7_oc32" in k]
    large = [k for k in kernels if "ic960_7x7_oc160" in k]
    assert len(small) == 2 and len(large) == 1, list(kernels)
    for k in small:
        assert "omp" not in kernels[k], k
    body = kernels[large[0]]
    cap = parallel_threads(960 * 160 * 49)
    # one region, at most `cap` threads, and the work shared by one worksharing loop
    assert body.count("#pragma omp parallel") == 1
    assert f"num_threads(nt < {cap} ? nt : {cap}) if(nt > 1)" in body
    assert body.count("#pragma omp for") == 1


def test_padded_conv_copies_and_computes_in_one_region() -> None:
    fn, inputs = _conv_model([LARGE_CASES[1], LARGE_CASES[2]], np.random.default_rng(17))
    with source_only("x86-avx512-nchw88"):  # the code alone; these kernels run in the tests above
        compiled = compile_fn(fn, inputs, "x86-avx512-nchw88", threads=2)
    kernels = _kernels(compiled.ir("c"), "conv2d_")
    dense = next(b for k, b in kernels.items() if k.startswith("conv2d_nchw88_dense"))
    wino = next(b for k, b in kernels.items() if k.startswith("conv2d_winograd"))
    # dense: the padded copy and the convolution; Winograd (no padded copy: its input transform
    # reads the input): three steps per tile batch; the last loop of each ends at the region's
    # join, not at a barrier of its own
    assert (dense.count("#pragma omp parallel"), dense.count("#pragma omp for")) == (1, 2)
    assert (wino.count("#pragma omp parallel"), wino.count("#pragma omp for")) == (1, 3)
    assert dense.count(" nowait") == wino.count(" nowait") == 1


def test_parallel_threshold() -> None:
    assert parallel_threads(2 * MIN_WORK_PER_THREAD - 1) == 1
    assert omp_parallel(2 * MIN_WORK_PER_THREAD - 1) == ""
    assert omp_for("", 2) == ""
    region = omp_parallel(5 * MIN_WORK_PER_THREAD, "parallel")
    assert region == "#pragma omp parallel num_threads(nt < 5 ? nt : 5) if(nt > 1)"
    assert omp_for(region, 2) == "#pragma omp for schedule(static) collapse(2)"
    assert omp_for(region, nowait=True) == "#pragma omp for schedule(static) nowait"


def test_balanced_blocks() -> None:
    # 3 output-channel tiles of a 7x7 1x1 conv (49 columns, one block each): 2 + 1 tiles on two
    # threads (share 1.33); split blocks bring the busiest thread within a few percent of the mean
    assert static_share([49, 49, 49], 2) == pytest.approx(4 / 3)
    block = balanced_block(3, 49, 49)
    sizes = [min(block, 49 - u) for u in range(0, 49, block)] * 3
    assert static_share(sizes, 2) < 1.05
    # already even: the L1 blocking stays
    assert balanced_block(4, 49, 49) == 49
    assert balanced_block(30, 7, 7) == 7


# plain-layout GEMM convolutions whose tiles do not divide evenly between two threads: ShuffleNetV2's
# 14x14 1x1 (7 column panels of 32, the last ragged), a deep small-image layer taking the "m" loop
# order, a ragged 3x3, and a grouped batch-2 layer (one region over several packings: a barrier each)
GEMM_TILE_CASES = [
    (1, 58, 13, 15, 61, 1, 1, 0, 1, 1, "relu"),
    (1, 116, 14, 14, 120, 1, 1, 0, 1, 1, "relu"),
    (1, 232, 7, 9, 221, 1, 1, 0, 1, 1, "residual"),
    (1, 19, 11, 17, 37, 3, 1, 1, 1, 1, "none"),
    (2, 32, 15, 13, 46, 3, 1, 1, 1, 2, "relu"),
]


@pytest.mark.parametrize("target", ["x86-avx2", "x86-avx512"])
def test_gemm_conv_tile_split_identical_on_1_and_2_threads(target: str) -> None:
    fn, inputs = _conv_model(GEMM_TILE_CASES, np.random.default_rng(33))
    one, y1, y2 = _outputs_1_and_2_threads(fn, inputs, target)  # `check`: vs the reference
    for a, b in zip(y1, y2, strict=True):
        np.testing.assert_array_equal(a, b)
    kernels = _kernels(one.ir("c"), "conv2d_gemm")
    parallel = [b for b in kernels.values() if "#pragma omp parallel" in b]
    assert len(parallel) == len(GEMM_TILE_CASES), list(kernels)
    assert any("mfirst" in k for k in kernels), list(kernels)
    for body in parallel:  # the product is split by tiles, not by a worksharing loop over panels
        assert "omp_get_thread_num()" in body and "collapse" not in body


def test_relayouts_parallel_only_when_large() -> None:
    # odd pixel counts (scalar tails): the 2x16x61x59 input relayout (115k elements) stays on one
    # thread, the 2x24x61x59 output one (173k) opens a region; 1 and 2 threads give the same bits
    rng = np.random.default_rng(34)
    w1 = xm.tensor(rng.standard_normal((20, 16, 3, 3)).astype(np.float32) / 12)

    def fn(x):  # type: ignore[no-untyped-def]
        return F.relu(F.conv2d(x, w1, padding=1))

    x = rng.standard_normal((2, 16, 61, 59)).astype(np.float32)
    one, y1, y2 = _outputs_1_and_2_threads(fn, [x], "x86-avx512-nchw88")  # `check`: vs the reference
    for a, b in zip(y1, y2, strict=True):
        np.testing.assert_array_equal(a, b)
    kernels = _kernels(one.ir("c"), "relayout_")
    small = [b for k, b in kernels.items() if k.startswith("relayout_plain_to_nchw88_2x16x61x59")]
    large = [b for k, b in kernels.items() if k.startswith("relayout_nchw88_to_plain_2x24x61x59")]
    assert len(small) == len(large) == 1, list(kernels)
    assert "omp" not in small[0] and "#pragma omp parallel" in large[0]
    assert 2 * 16 * 61 * 59 < RELAYOUT_MIN_PARALLEL <= 2 * 20 * 61 * 59
