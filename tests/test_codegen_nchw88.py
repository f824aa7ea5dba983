"""The ``x86-avx2-nchw88`` and ``x86-avx512-nchw88`` targets really run NCHW88: ``enable-nchw88``
converts convolutions and pooling to 8-channel blocks, and the blocked kernels (dense, group, hybrid
first layer, channel-wise, pooling; ymm micro-kernels on AVX2, zmm ones of 16 output channels on
AVX-512) match the reference on odd shapes; ``+io16xc32`` stores activations and filters as float16
(F16C) and accumulates in float32, within a float16 tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from compiler.driver.compile import compile
from tests.codegen_util import check, require
from tests.test_codegen_conv import _conv_model

TARGET = "x86-avx2-nchw88"
TARGETS = [TARGET, "x86-avx512-nchw88"]
# float16 storage: every stored value is rounded to 11 significant bits (relative error 2^-11 per
# rounding, a few roundings per layer), so outputs agree with the float32 reference to ~1e-3 of their
# scale; 1e-2 leaves room for accumulation over a layer's inputs
F16_TOL = 1e-2

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue): every mode enable-nchw88 produces
CASES = [
    (1, 3, 13, 11, 16, 3, 1, 1, 1, 1, "relu"),  # hybrid first layer (IC < 8), KRSCk8
    (2, 1, 12, 12, 8, 5, 2, 2, 1, 1, "none"),  # hybrid, 1 channel, stride 2, batch 2
    (1, 16, 9, 13, 24, 3, 1, 1, 1, 1, "residual"),  # dense KCRSc8k8, 3 channel blocks (odd J)
    (1, 8, 11, 10, 16, 3, 2, 0, 1, 1, "hswish"),  # dense, stride 2, no padding
    (1, 16, 10, 10, 16, 3, 1, 2, 2, 1, "sigmoid"),  # dense, dilation 2
    (1, 32, 7, 7, 40, 1, 1, 0, 1, 1, "relu"),  # 1x1, 7 columns: 6 + 1 tiles
    (2, 16, 9, 9, 32, 1, 2, 0, 1, 1, "none"),  # 1x1 stride 2, batch 2 (subsampled copy, one row)
    (2, 20, 13, 11, 24, 1, 2, 0, 1, 1, "residual"),  # 1x1 stride 2, IC not whole blocks, odd sizes
    (1, 32, 8, 9, 32, 3, 1, 1, 1, 2, "relu"),  # group GKCRSc8k8, 2 groups of 16
    (1, 24, 15, 17, 24, 3, 1, 1, 1, 24, "relu"),  # channel-wise C11RSc8
    (2, 16, 14, 13, 16, 3, 2, 1, 1, 16, "residual"),  # channel-wise, stride 2, batch 2
    (1, 8, 12, 12, 8, 5, 1, 4, 2, 8, "none"),  # channel-wise 5x5, dilation 2
    (1, 12, 9, 9, 20, 3, 1, 1, 1, 1, "relu"),  # IC, OC not multiples of 8: padded / left NCHW
    # 7-column outputs take the 3 x 4 AVX2 tile (5 blocks: 3 + 2); 3x3 filters run in input-channel
    # chunks (partial sums through y, epilogue on the last chunk)
    (2, 24, 13, 13, 40, 3, 2, 1, 1, 1, "residual"),  # stride 2, batch 2, 3 chunks
    (1, 20, 7, 9, 28, 3, 1, 1, 1, 1, "hswish"),  # IC, OC not multiples of 8, odd width
    (1, 264, 5, 7, 24, 1, 1, 0, 1, 1, "relu"),  # 1x1, 33 channel blocks: 3 chunks of 11
    (1, 48, 7, 7, 48, 3, 1, 1, 1, 2, "residual"),  # group, 3 chunks per group
]
WORDS = ("conv2d_nchw88_hybrid", "conv2d_nchw88_dense", "conv2d_nchw88_group", "conv2d_nchw88_chan")


@pytest.mark.parametrize("target", TARGETS)
def test_nchw88_conv_variants(target: str) -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(0))
    compiled = check(fn, inputs, target)
    source = compiled.ir("c")
    for word in WORDS:
        assert word in source, word
    assert "#layout.fmt<nchw88>" in compiled.ir("inference")
    assert "_mm256_cvtph_ps" not in source  # float32 storage
    # the AVX-512 target runs the zmm micro-kernels (16 output channels per register)
    assert ("xm_n88_avx512_conv_" in source) == ("avx512" in target)
    # AVX2: 7-column rows take the 3 x 4 register tile; partial sums of input-channel chunks
    assert ("_3x4(" in source) == ("avx512" not in target)
    assert "acc & 1" in source


@pytest.mark.parametrize("target", TARGETS)
def test_nchw88_float16_storage(target: str) -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(1))
    f32 = check(fn, inputs, target)
    compiled = check(fn, inputs, target + "+io16xc32", rtol=F16_TOL, atol=F16_TOL)
    source = compiled.ir("c")
    for word in (*WORDS, "_f16", "_cvtph_ps", "_mm256_cvtps_ph"):
        assert word in source, word
    # filters are stored as float16: the blob is about half the float32 one
    assert compiled.weights_size < 0.6 * f32.weights_size
    # and the result is really rounded through float16 (not computed in float32 end to end)
    got, want = compiled.run(inputs), f32.run(inputs)
    assert max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True)) > 1e-5


def test_nchw88_pooling_and_threads() -> None:
    import compiler as xm
    import compiler.functional as F

    rng = np.random.default_rng(2)
    w = xm.tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) / 8)

    def fn(x):  # type: ignore[no-untyped-def]
        y = F.relu(F.conv2d(x, w, padding=1))
        return (
            F.max_pool2d(y, 3, 2, 1),
            F.avg_pool2d(y, 2),
            F.avg_pool2d(y, 3, 2, 1, mode="average"),
            F.adaptive_avg_pool2d(y, (1, 1)),
        )

    x = rng.standard_normal((2, 8, 13, 11)).astype(np.float32)
    compiled = check(fn, [x], TARGET, threads=2)
    assert compiled.ir("c").count("pool2d_nchw88_") >= 4


def test_avx512_target_keeps_plain_nchw() -> None:
    require("x86-avx512")
    fn, inputs = _conv_model(CASES[2:4], np.random.default_rng(3))
    compiled = check(fn, inputs, "x86-avx512")
    assert "nchw88" not in compiled.ir("c")


def test_float16_option_errors() -> None:
    require(TARGET)
    from compiler.driver.targets import TargetError
    from compiler.hub.convnet import ConvNet

    x = np.zeros((1, 1, 28, 28), np.float32)
    with pytest.raises(TargetError, match="ioc16"):
        compile(ConvNet(), "x86-avx2-nchw88+ioc16", [x])


def test_nchw88_relayout_vectorised() -> None:
    """The vectorised NCHW <-> NCHW88 relayouts (8 x 8 transposes) on pixel counts that are not
    multiples of 8 (scalar tail) and a channel count padded to 24 (sliced back to 20 after the
    relayout), batch 2, also under the sanitizers."""
    import compiler as xm
    import compiler.functional as F
    from semantics import run_module

    rng = np.random.default_rng(4)
    w1 = xm.tensor(rng.standard_normal((20, 16, 3, 3)).astype(np.float32) / 12)
    w2 = xm.tensor(rng.standard_normal((8, 20, 1, 1)).astype(np.float32) / 4)

    def fn(x):  # type: ignore[no-untyped-def]
        y = F.relu(F.conv2d(x, w1, padding=1))
        return y, F.conv2d(y, w2)

    x = rng.standard_normal((2, 16, 7, 9)).astype(np.float32)
    compiled = check(fn, [x], TARGET)
    source = compiled.ir("c")
    assert "relayout_nchw88_to_plain_2x24x7x9" in source and "xm_tr8x8(r)" in source
    got = compiled.run_runner([x], sanitize=True)
    for g, want in zip(got, run_module(compiled._stages["tensor"], [x]), strict=True):  # type: ignore[arg-type]
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)
