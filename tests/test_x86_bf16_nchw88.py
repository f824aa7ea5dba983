"""``+bf16`` on the NCHW88 graph without AMX (``conv2d_nchw88_bf16`` in
``backends/c/templates/x86/x86_avx512_bf16.py``, target ``x86-avx512-nchw88+bf16``): dense, grouped,
strided, dilated and first-layer (plain NCHW, fewer than 8 channels) convolutions on ``vdpbf16ps``
with the ``+bf16`` contract of ``tests/test_x86_bf16.py`` (bfloat16-rounded inputs, exact products,
float32 sums and epilogue: 1e-5 of the output's scale vs that contract in float64 by PyTorch, 1e-2
relative L2 vs float32 from the reference interpreter). The cases cover partial column tiles,
output channels filling half a zmm, input-channel chunks (partial sums through the output), filters
big enough to be prefetched, batch 2,
fused bias / residual / ReLU / ReLU6, one and two threads, ASan/UBSan. Depthwise and F(4x4, 3x3)
Winograd layers stay float32. Generated C is compiled everywhere gcc knows AVX512-BF16; running it
is skipped with the reason where the CPU lacks avx512_bf16."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import assert_instructions, compile_fn, kernel_families
from tests.test_x86_bf16 import _check, _conv_contract, _conv_model, require_avx512_bf16

TARGET = "x86-avx512-nchw88+bf16"
FAMILY = ("conv2d_nchw88_bf16", "avx512bf16")

# name, input (N, C, H, W), OC, kernel, stride, padding, dilation, groups, epilogue, (unused)
CASES = [
    ("dense3x3_relu", (1, 16, 9, 11), 40, 3, 1, 1, 1, 1, "relu", ""),
    ("pointwise_n2_residual", (2, 24, 13, 11), 32, 1, 1, 0, 1, 1, "residual", ""),
    ("pointwise_s2_relu6", (1, 32, 15, 15), 24, 1, 2, 0, 1, 1, "relu6", ""),
    # 3 x 16 output channels x 8 columns tiles, the last one 1.5 vectors (120 channels)
    ("pointwise_wide_residual_relu", (1, 16, 7, 9), 120, 1, 1, 0, 1, 1, "residual_relu", ""),
    ("dense3x3_s2_residual_relu", (1, 16, 11, 9), 48, 3, 2, 1, 1, 1, "residual_relu", ""),
    ("group2_3x3", (1, 32, 9, 9), 32, 3, 1, 1, 1, 2, "bias", ""),
    ("dilated3x3", (1, 24, 9, 9), 16, 3, 1, 2, 2, 1, "bias", ""),
    # input-channel chunks: 3x3 holds 5 blocks of 8 channels per chunk, 1x1 48
    ("chunks3x3_residual_relu", (1, 48, 7, 7), 24, 3, 1, 1, 1, 1, "residual_relu", ""),
    ("chunks1x1_relu", (1, 520, 5, 5), 24, 1, 1, 0, 1, 1, "relu", ""),
    # filters of 512 KiB and more: the next chunk's (and the next tile's) requested into L2
    ("prefetch1x1_residual", (1, 512, 3, 3), 512, 1, 1, 0, 1, 1, "residual", ""),
    ("prefetch3x3_s2_relu", (1, 256, 5, 4), 136, 3, 2, 1, 1, 1, "relu", ""),
    # first layers: 3 plain channels as 2 bfloat16 pairs, 5 as 3
    ("first7x7_s2_relu", (1, 3, 23, 21), 64, 7, 2, 3, 1, 1, "relu", ""),
    ("first3x3_s2_n2_relu6", (2, 3, 17, 15), 16, 3, 2, 1, 1, 1, "relu6", ""),
    ("first1x1_s2_five", (1, 5, 9, 9), 24, 1, 2, 0, 1, 1, "bias", ""),
    # first layers in column pairs (a pair of window columns per 32-bit word): ResNet's stem shape,
    # one channel over two images, a 5x5 window at stride 4 (odd widths: a zero-weight last column)
    ("first7x7_s2_colpairs_relu", (1, 3, 30, 28), 64, 7, 2, 3, 1, 1, "relu", ""),
    ("first7x7_s2_gray_n2", (2, 1, 19, 17), 24, 7, 2, 3, 1, 1, "bias", ""),
    ("first5x5_s4_relu6", (1, 3, 21, 22), 16, 5, 4, 2, 1, 1, "relu6", ""),
]


@pytest.fixture(scope="module")
def conv() -> tuple[Callable[..., Any], list[np.ndarray], list[Any]]:
    return _conv_model(np.random.default_rng(33), CASES)


def test_nchw88_bf16_families(conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]]) -> None:
    """Every convolution of the table is a bfloat16 NCHW88 one with its epilogue fused (no float32
    elementwise kernel left), and the library converts and multiplies bfloat16. Compiling needs no
    avx512_bf16 CPU (gcc only)."""
    fn, inputs, _ = conv
    compiled = compile_fn(fn, inputs, TARGET)
    families = kernel_families(compiled)
    assert FAMILY in families
    assert {f for f, _ in families} <= {FAMILY[0], "relayout", "copy"}, families
    assert compiled.ir("kernel-plan-memory").count('"conv2d_nchw88_bf16"') == len(CASES)
    assert_instructions(compiled, ("vcvtneps2bf16", "vdpbf16ps"))


def test_nchw88_bf16_leaves_depthwise_and_winograd_f4_to_float32() -> None:
    """A depthwise convolution (no reduction over channels) and a 3x3 conv that F(4x4, 3x3)
    Winograd serves (a quarter of the products, in float32) keep their float32 families; the 3x3 conv
    too small for it is bfloat16."""
    rng = np.random.default_rng(5)
    dw = rng.standard_normal((16, 1, 1, 3, 3)).astype(np.float32)
    w4 = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32)

    def f(x: Tensor) -> Tensor:
        y = F.relu(F.conv2d(x, Tensor(dw), padding=1, groups=16))
        y = F.relu(F.conv2d(y, Tensor(w4), padding=1))
        return F.conv2d(F.max_pool2d(y, 4, 4), Tensor(w2), padding=1)

    compiled = compile_fn(f, [rng.standard_normal((1, 16, 32, 32)).astype(np.float32)], TARGET)
    plan = compiled.ir("kernel-plan-memory")
    assert plan.count('"conv2d_nchw88_bf16"') == 1, kernel_families(compiled)
    assert "conv2d_winograd_nchw88" in {f for f, _ in kernel_families(compiled)}


@pytest.mark.parametrize("threads", [1, 2])
def test_nchw88_bf16_convolutions(
    conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]], threads: int
) -> None:
    require_avx512_bf16(TARGET)
    fn, inputs, params = conv
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    f32 = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    _check([c[0] for c in CASES], compiled.run(inputs), _conv_contract(inputs, params, CASES), f32)


def test_nchw88_bf16_convolutions_sanitized(
    conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]],
) -> None:
    require_avx512_bf16(TARGET)
    fn, inputs, params = conv
    compiled = compile_fn(fn, inputs, TARGET)
    f32 = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    got = compiled.run_runner(inputs, sanitize=True)
    _check([c[0] for c in CASES], got, _conv_contract(inputs, params, CASES), f32)
