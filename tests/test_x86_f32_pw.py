"""The float32 pointwise (1x1 stride-1) convolutions of the x86 NCHW88 targets on the shapes issue 14
profiles (few input channels over many pixels, many channels over 7x7, input-channel chunks with
partial sums, residual epilogues), batch 2, odd sizes and channel counts: against the reference,
bit-identical on 1 and 2 threads (the same shapes run under ASan / UBSan as ``conv2d_nchw88``'s
examples, tests/test_kernel_conformance.py). The AVX-512 micro-kernels' prefetch
of the next chunk's filters is checked on the shapes that take it (1x1 at 14x14- and 7x7-like
planes, strided 3x3, grouped) and one that does not, against the reference and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as xm
import compiler.functional as F
from backends.c.templates.x86.nchw88 import PREFETCH_MIN_BYTES
from tests.codegen_util import assert_threads_agree, check, check_sanitized
from tests.test_codegen_conv import _conv_model

TARGETS = ["x86-avx2-nchw88", "x86-avx512-nchw88"]

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue)
CASES = [
    (2, 16, 23, 21, 40, 1, 1, 0, 1, 1, "relu"),  # few input channels, a partial 32-channel tile
    (1, 24, 29, 31, 72, 1, 1, 0, 1, 1, "none"),  # 899 pixels: a partial column tile
    (1, 200, 7, 7, 328, 1, 1, 0, 1, 1, "residual"),  # 7x7, two input-channel chunks
    (2, 1032, 5, 5, 48, 1, 1, 0, 1, 1, "hswish"),  # many chunks, 25 pixels
    (1, 20, 9, 11, 44, 1, 1, 0, 1, 1, "residual"),  # channels not multiples of 8
]
DENSE_1X1 = "static void conv2d_nchw88_dense_"


@pytest.mark.parametrize("target", TARGETS)
def test_pointwise_match_reference_and_threads(target: str) -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(41))
    one = check(fn, inputs, target)
    assert one.ir("c").count(DENSE_1X1) >= 4  # every case with whole 8-channel blocks is NCHW88
    assert_threads_agree(fn, inputs, target, one)


# (n, ic, h, w, oc, k, stride, pad, groups, activation): the AVX-512 micro-kernels prefetch the
# next chunk's filters of 512 KB+ (PREFETCH_MIN_BYTES); ReLU6 is applied on whole zmm vectors
# (outputs spread past 6 to clip both sides)
PREFETCH_CASES = [
    (1, 520, 11, 13, 512, 1, 1, 0, 1, "relu6"),  # 1.06 MB of filters, 12 units, 3 chunks, 16 tiles
    (1, 1032, 7, 7, 264, 1, 1, 0, 1, "relu"),  # 7x7: 5 units, 6 chunks, a one-vector last tile
    (2, 192, 31, 23, 160, 3, 2, 1, 1, "relu"),  # 3x3 stride 2: 1.1 MB, 16 rows of units, batch 2
    (1, 256, 20, 19, 128, 3, 1, 1, 2, "relu6"),  # grouped 3x3: 590 KB
    (1, 40, 37, 29, 96, 1, 1, 0, 1, "relu"),  # 15 KB of filters: nothing to prefetch
]


def _conv_act(case: tuple, rng: np.random.Generator):  # type: ignore[no-untyped-def, type-arg]
    """One convolution + bias + activation, its input, and PyTorch's output for it."""
    n, ic, h, w, oc, k, s, p, g, act = case
    wt = (3 * rng.standard_normal((oc, ic // g, k, k)) / np.sqrt(ic // g * k * k)).astype(np.float32)
    b = rng.standard_normal((1, oc, 1, 1)).astype(np.float32)
    x = rng.standard_normal((n, ic, h, w)).astype(np.float32)
    wv, bv = xm.tensor(wt), xm.tensor(b)
    activation = F.relu6 if act == "relu6" else F.relu

    def fn(a):  # type: ignore[no-untyped-def]
        return activation(F.conv2d(a, wv, bv, stride=s, padding=p, groups=g))

    t = torch.nn.functional.conv2d(
        *(torch.from_numpy(a) for a in (x, wt, b.reshape(-1))), stride=s, padding=p, groups=g
    )
    return fn, x, torch.clamp(t, 0.0, 6.0 if act == "relu6" else None).numpy()


@pytest.mark.parametrize("case", PREFETCH_CASES, ids=lambda c: "x".join(map(str, c)))
def test_prefetching_convs_match_reference_torch_and_threads(case: tuple) -> None:  # type: ignore[type-arg]
    fn, x, want = _conv_act(case, np.random.default_rng(43))
    one = check(fn, [x], TARGETS[1])
    source = one.ir("c")
    n, ic, h, w, oc, k, s, p, g, act = case
    prefetching = oc * ic // g * k * k * 4 >= PREFETCH_MIN_BYTES  # else the plain micro-kernels
    assert ("xm_n88_avx512_conv_pf_f32_" in source) == ("pw + (long)pl0 * 64" in source) == prefetching
    assert ("xm_n88_avx512_conv_f32_" in source) != prefetching
    assert ("_RELU6(" in source) == (case[-1] == "relu6")  # the activation is fused
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(one.run([x])[0], want, rtol=1e-4, atol=1e-4 * scale)
    assert_threads_agree(fn, [x], TARGETS[1], one)


def test_prefetching_convs_sanitized() -> None:
    fn, x, _ = _conv_act(PREFETCH_CASES[0], np.random.default_rng(44))
    check_sanitized(check(fn, [x], TARGETS[1], threads=2), [x])
