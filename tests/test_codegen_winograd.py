"""Winograd ``F(m x m, 3 x 3)`` NCHW88 kernels (:mod:`backends.c.templates.x86.winograd`) against the
reference interpreter: partial tiles at the bottom / right border (odd sizes), padding 0 / 1 / 2,
batch 2, channel counts that are not whole AVX-512 panels, and every epilogue (bias, residual,
activations), for both tile sizes on both NCHW88 targets.

Tolerance: the model tests' ``rtol 1e-4`` with ``atol 1e-4`` x the output's magnitude. Measured
errors against the float64-summed reference: ``F(4, 3)`` ~5e-6 to 1e-5 of the output scale,
``F(2, 3)`` ~5e-7 (direct convolution: ~1e-7).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import backends.c.templates.x86.winograd as winograd
import compiler as xm
from backends.c.templates.x86.winograd_transforms import STRIDE2_TRANSFORMS
from compiler.driver import tuner
from compiler.driver.compile import compile as xcompile
from compiler.driver.targets import parse_target
from compiler.tuning import TuningFile, key_for
from passes.lowering.select import op_signature
from semantics import run_module
from tests.codegen_util import assert_threads_agree, check, check_sanitized
from tests.test_codegen_conv import _conv_model

TARGETS = ["x86-avx2-nchw88", "x86-avx512-nchw88"]

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue): all 3x3 stride 1, dense
CASES = [
    (1, 32, 9, 13, 40, 3, 1, 1, 1, 1, "relu"),  # partial tiles both ways, OC = 40 (half a zmm panel)
    (2, 40, 8, 8, 32, 3, 1, 0, 1, 1, "residual"),  # batch 2, no padding (6 x 6 output)
    (1, 32, 17, 11, 48, 3, 1, 2, 1, 1, "hswish"),  # padding 2
    (1, 64, 16, 16, 64, 3, 1, 1, 1, 1, "sigmoid"),  # whole tiles
    (1, 16, 3, 4, 16, 3, 1, 0, 1, 1, "relu"),  # a 1 x 2 output: every tile reads its patch through pt
]


def _force_tile(monkeypatch: pytest.MonkeyPatch, m: int) -> None:
    """Select ``F(m, 3)`` for every convolution the Winograd rule accepts."""

    def forced(p: dict[str, Any]) -> int | None:
        return m if _eligible(p) else None

    monkeypatch.setattr(winograd, "winograd_tile", forced)


def _eligible(p: dict[str, Any]) -> bool:
    geometry = (p["fh"], p["fw"], p["sh"], p["sw"], p["dh"], p["dw"])
    return p.get("mode") == "dense" and p["dtype"] == "f32" and geometry == (3, 3, 1, 1, 1, 1)


@pytest.mark.parametrize("m", [4, 2])
@pytest.mark.parametrize("target", TARGETS)
def test_winograd_variants(target: str, m: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _force_tile(monkeypatch, m)
    fn, inputs = _conv_model(CASES, np.random.default_rng(0))
    compiled = check(fn, inputs, target)
    source = compiled.ir("c")
    assert source.count(f"static void conv2d_winograd_nchw88_f{m}_") == len(CASES)
    assert ("xm_wino_avx512_gemm_" in source) == ("avx512" in target)
    # interior tiles read their patches straight from the input, border tiles through a zeroed copy
    assert source.count("dp = xn + ") == len(CASES) and "float pt[" in source


def test_winograd_selected_by_default() -> None:
    """Without forcing, ResNet-like 3x3 stride-1 convs go to Winograd; small channel counts, stride 2
    and 1x1 convs stay direct."""
    cases = [
        (1, 64, 28, 28, 64, 3, 1, 1, 1, 1, "relu"),  # Winograd F(4, 3)
        (1, 32, 7, 7, 32, 3, 1, 1, 1, 1, "relu"),  # 7 x 7: F(2, 3)
        (1, 32, 14, 14, 32, 3, 1, 1, 1, 1, "residual"),  # 14 x 14: F(2, 3) (F(4, 3) would pad to 16 x 16)
        (1, 384, 10, 10, 384, 3, 1, 1, 1, 1, "relu"),  # 10 x 10, F(2, 3)'s U too large: F(4, 3)
        (1, 512, 10, 10, 512, 3, 1, 1, 1, 1, "relu"),  # F(4, 3)'s U too (38 MiB): direct
        (1, 8, 12, 12, 16, 3, 1, 1, 1, 1, "relu"),  # too few channels: direct
        (1, 32, 16, 16, 32, 3, 2, 1, 1, 1, "none"),  # stride 2: direct
    ]
    fn, inputs = _conv_model(cases, np.random.default_rng(1))
    compiled = check(fn, inputs, TARGETS[0], threads=2)
    source = compiled.ir("c")
    assert source.count("static void conv2d_winograd_nchw88_f4_") == 2
    assert source.count("static void conv2d_winograd_nchw88_f2_") == 2
    assert source.count("static void conv2d_nchw88_dense_") == 3


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_winograd_random_shapes(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    cases = []
    for _ in range(10):
        ic, oc = 8 * int(rng.integers(1, 9)), 8 * int(rng.integers(1, 9))
        h, w = int(rng.integers(3, 30)), int(rng.integers(3, 30))
        pad = int(rng.integers(0, 3))
        if min(h, w) + 2 * pad < 3:
            pad = 1
        epi = str(rng.choice(["none", "relu", "residual", "hswish"]))
        cases.append((int(rng.integers(1, 3)), ic, h, w, oc, 3, 1, pad, 1, 1, epi))
    fn, inputs = _conv_model(cases, rng)
    for m in (2, 4):
        _force_tile(monkeypatch, m)
        check(fn, inputs, target, threads=int(rng.integers(1, 3)))


@pytest.mark.parametrize("m", [4, 2])
def test_winograd_sanitized_border_patches(m: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case (interior tiles read from the input, border tiles through the zeroed patch, the
    1 x 2 output's tiles all border) under ASan / UBSan on AVX-512, 2 threads; the same bits as 1
    thread."""
    _force_tile(monkeypatch, m)
    fn, inputs = _conv_model(CASES, np.random.default_rng(3))
    one = check(fn, inputs, TARGETS[1])
    check_sanitized(assert_threads_agree(fn, inputs, TARGETS[1], one), inputs)


@pytest.mark.parametrize("target", TARGETS)
def test_winograd_u_prefetch(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every GEMM prefetches the next panel's U: into L1 while two panels fit there, into L2 from
    256 input channels on AVX-512 (64 KiB for two 32-channel panels). Both variants on odd sizes,
    batch 2, 1 and 2 threads: the reference's values, the same bits on both thread counts, and
    clean under ASan / UBSan."""
    _force_tile(monkeypatch, 2)
    cases = [
        (2, 256, 7, 9, 40, 3, 1, 1, 1, 1, "residual"),  # AVX-512: L2 (T1); AVX2 (16-channel panels): L1
        (1, 64, 11, 5, 48, 3, 1, 1, 1, 1, "relu"),  # L1 (T0) on both
        (1, 16, 29, 31, 24, 3, 1, 1, 1, 1, "relu"),  # 240 tiles (20 register tiles) over 16 input channels
    ]
    fn, inputs = _conv_model(cases, np.random.default_rng(5))
    one = check(fn, inputs, target)
    compiled = assert_threads_agree(fn, inputs, target, one)  # 2 threads: one's bits, so the reference's
    outs = [[np.asarray(o) for o in m.run(inputs)] for m in (one, compiled)]
    source = compiled.ir("c")
    isa = "avx512" if "avx512" in target else "avx2"
    assert f"static void xm_wino_{isa}_gemm_t0_" in source
    assert (f"static void xm_wino_{isa}_gemm_t1_" in source) == (isa == "avx512")
    assert source.count("const float* pr = pf + ((k * pstep) >> 16) * ldu;") > 0
    for a, b in zip(*outs, strict=True):
        assert np.array_equal(a, b)
    if isa == "avx512":  # prefetches past U's end (the last panel's next) are no accesses to ASan
        for got, want in zip(compiled.run_runner(inputs, sanitize=True), outs[1], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("unit", winograd.KERNEL_UNITS, ids=lambda u: u.isa)
def test_point_stride_spread(unit: winograd.ConvWinogradNchw88) -> None:
    """Each point's V and M matrix starts a whole number of cache lines after the previous one, at
    least a matrix apart, and the (m + 2)^2 points' first lines fall into distinct L1 sets (ResNet's
    56x56x64 packed stride is 4 lines mod 64: 16 sets for 36 points)."""
    for ic, hw, oc in [(64, 56, 64), (128, 28, 128), (256, 14, 256), (40, 9, 24), (512, 9, 512)]:
        for m in (2, 4):
            geo = unit.geometry({"m": m, "ic": ic, "oc": oc, "oh": hw, "ow": hw})
            pairs = ((geo["VPS"], geo["TB"] * geo["ICP"]), (geo["MPS"], geo["TB"] * geo["OCP"]))
            for stride, packed in pairs:
                assert stride % winograd.LINE_FLOATS == 0 and stride >= packed
                assert stride - packed < winograd.L1_SETS * winograd.LINE_FLOATS
                sets = {(k * stride // winograd.LINE_FLOATS) % winograd.L1_SETS for k in range(geo["A"] ** 2)}
                assert len(sets) == geo["A"] ** 2, (ic, hw, m)


@pytest.mark.parametrize("m", [4, 2])
def test_winograd_matches_torch(m: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Odd sizes, 40 -> 72 channels (a partial AVX-512 panel), bias and ReLU, 1 and 2 threads: within
    the module's Winograd tolerance of PyTorch's CPU convolution, the same bits on both thread counts."""
    torch = pytest.importorskip("torch")
    _force_tile(monkeypatch, m)
    cases = [(1, 40, 23, 19, 72, 3, 1, 1, 1, 1, "relu")]
    fn, inputs = _conv_model(cases, np.random.default_rng(31))
    one = check(fn, inputs, TARGETS[1])
    rng = np.random.default_rng(31)  # _conv_model's draws again: its weight and bias
    weight = (rng.standard_normal((72, 40, 3, 3)).astype(np.float32) / np.sqrt(40 * 9)).astype(np.float32)
    bias = rng.standard_normal((1, 72, 1, 1)).astype(np.float32)
    want = torch.relu(
        torch.nn.functional.conv2d(torch.from_numpy(inputs[0]), torch.from_numpy(weight), padding=1)
        + torch.from_numpy(bias)
    ).numpy()
    got = one.run(inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert_threads_agree(fn, inputs, TARGETS[1], one)


@pytest.mark.parametrize("target", TARGETS)
def test_other_tile_through_a_tuning_choice(target: str) -> None:
    """``conv2d_winograd_nchw88_other`` (the tile the rule does not pick, for the tuner) is never the
    untuned choice; chosen through a tuning file it runs F(4, 3) where the rule picks F(2, 3), F(2, 3)
    where the rule's F(4, 3) is its fallback below 16x16 or where it stays direct, and the stride-2
    F(2, 3) / F(4, 3) for stride-2 convs, within the Winograd tolerance of the reference, the same bits on 1
    and 2 threads."""
    cases = [
        (1, 32, 14, 13, 40, 3, 1, 1, 1, 1, "residual"),  # rule F(2, 3) -> F(4, 3), partial tiles
        (1, 264, 10, 11, 264, 3, 1, 1, 1, 1, "relu"),  # rule F(4, 3) (F(2, 3)'s U too large) -> F(2, 3)
        (1, 264, 5, 6, 256, 3, 1, 1, 1, 1, "relu"),  # rule direct (channels) -> F(2, 3)
        (1, 8, 12, 12, 16, 3, 1, 1, 1, 1, "relu"),  # too few channels: no other tile, stays direct
        (1, 24, 17, 19, 40, 3, 2, 1, 1, 1, "residual"),  # stride 2 (direct) -> its F(2, 3): 9 x 10 outputs
        (2, 16, 20, 18, 24, 3, 2, 0, 1, 1, "hswish"),  # stride 2, no padding, batch 2: 9 x 8 outputs
        (1, 40, 33, 37, 24, 3, 2, 1, 1, 1, "relu"),  # stride 2, 17 x 19 outputs: its F(4, 3)
    ]
    fn, inputs = _conv_model(cases, np.random.default_rng(41))
    untuned = check(fn, inputs, target)
    assert "conv2d_winograd_nchw88_other" not in untuned.ir("c")
    t = parse_target(target)
    family = "conv2d_winograd_nchw88_other"
    ops = [op for op in untuned._stages["inference"].walk() if family in tuner.candidates(op, t)]
    assert len(ops) == 6
    tf = TuningFile(key_for(t, 1), {op_signature(op): family for op in ops})
    traced = xm.jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(x) for x in inputs])
    tuned = xcompile(traced, target, tuning_file=tf)
    source = tuned.ir("c")
    tiles = ("f4_n1", "f2_n1", "f2_s2", "f4_s2")
    kernels = {tile: source.count(f"static void {family}_{tile}_") for tile in tiles}
    assert kernels == {"f4_n1": 1, "f2_n1": 2, "f2_s2": 2, "f4_s2": 1}
    assert source.count("static void conv2d_nchw88_dense_") == 1
    want = run_module(untuned._stages["tensor"], list(inputs))  # type: ignore[arg-type]
    got = tuned.run(inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    two = xcompile(traced, target, tuning_file=TuningFile(key_for(t, 2), tf.choices), threads=2)
    for a, b in zip(got, two.run(inputs), strict=True):
        np.testing.assert_array_equal(a, b)
    if "avx512" in target:  # border patches (stride 2: 2m + 1 inputs a tile) under ASan / UBSan
        check_sanitized(two, inputs)


@pytest.mark.parametrize("m", sorted(STRIDE2_TRANSFORMS))
def test_stride2_transforms_compute_the_strided_correlation(m: int) -> None:
    """``A^T [(G g G^T) . (B^T d B)] A`` over a ``(2m + 1)^2`` patch is the stride-2 3x3 correlation
    of its ``m x m`` outputs, exactly (rational arithmetic), with ``(2m + 1)^2`` products."""
    bt, g, at = STRIDE2_TRANSFORMS[m]
    n = 2 * m + 1
    assert (len(bt), len(bt[0]), len(g), len(at), len(at[0])) == (n, n, n, m, n)
    rng = np.random.default_rng(m)
    d = [[Fraction(int(v)) for v in row] for row in rng.integers(-9, 10, (n, n))]
    w = [[Fraction(int(v)) for v in row] for row in rng.integers(-9, 10, (3, 3))]

    def mul(a: list[list[Fraction]], b: list[list[Fraction]]) -> list[list[Fraction]]:
        return [
            [sum((a[i][k] * b[k][j] for k in range(len(b))), Fraction(0)) for j in range(len(b[0]))]
            for i in range(len(a))
        ]

    def tr(a: list[list[Fraction]]) -> list[list[Fraction]]:
        return [list(r) for r in zip(*a, strict=True)]

    u, v = mul(mul(g, w), tr(g)), mul(mul(bt, d), tr(bt))
    y = mul(mul(at, [[u[i][j] * v[i][j] for j in range(n)] for i in range(n)]), tr(at))
    want = [
        [sum(w[a][b] * d[2 * i + a][2 * j + b] for a in range(3) for b in range(3)) for j in range(m)]
        for i in range(m)
    ]
    assert y == want
