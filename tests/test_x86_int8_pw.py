"""The pointwise mode of the AVX512-VNNI int8 GEMM (``x86_int8_gemm.Conv2dQ8Gemm._render_pointwise``:
1x1 stride-1 convolutions of few input channels, MobileNetV2's expansions and projections)
byte-exact against the reference interpreter: channel counts that are no multiple of four, of the
tile's rows or of 16, input channels past one unrolled quadruple loop (K > 32, up to the mode's
largest), pixel counts that fill no 64-pixel block, batch 2; the exact, the affine and the
post-processed epilogues, the ReLU6 island (float forms on VNNI, the byte table on VBMI); one and two
threads alike, and once under ASan / UBSan. On an AMX target, the split of
``x86_amx.vnni_pointwise_wins`` (byte-exact on the tiles and on the VNNI path a process without tile
data takes)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

import compiler.functional as F
from backends.c.templates.x86.x86_amx import VNNI_POINTWISE_K, VNNI_POINTWISE_OVER_AMX
from backends.c.templates.x86.x86_amx_os import AMX_ENV, amx_permitted
from backends.c.templates.x86.x86_int8_gemm import POINTWISE_MAX_C4
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import assert_instructions, assert_threads_agree, check_sanitized, compile_fn, require

TARGET = "x86-avx512-nchw88-vnni"
VBMI_TARGET = f"{TARGET}-vbmi"
AMX_TARGET = f"{TARGET}-amx-vbmi"
SX = 1 / 40

# (input N, C, H, W), output channels, nonlinear mode, ReLU6 island scale (None: no island)
CASES = [
    ((2, 5, 7, 9), 7, "relu", None),  # 63 pixels: one partial block per image; one channel quadruple
    ((1, 16, 13, 11), 19, "identity", 0.03),  # 143 pixels: two full blocks and 15 pixels
    ((2, 22, 9, 10), 13, "relu", 0.05),  # 22 channels: the last quadruple half zero
    ((1, 32, 8, 8), 16, "identity", None),  # the largest K of the mode, exactly one block
    ((1, 24, 5, 23), 37, "h_swish", None),  # a post-processed (float) epilogue, no affine form
    ((2, 13, 11, 7), 6, "identity", 0.1),  # island and 2 images
    # K past the unrolled quadruple loop (the rolled one, 4 tile rows)
    ((2, 45, 7, 9), 11, "relu", 0.05),  # K 45: the last quadruple one quarter real; island, 2 images
    ((1, 130, 9, 11), 23, "identity", None),  # K 130, 99 pixels
    ((2, 97, 3, 5), 30, "h_swish", None),  # 15 pixels, a post-processed epilogue
    ((1, 4 * POINTWISE_MAX_C4 - 1, 5, 13), 10, "relu", 0.08),  # the mode's largest K, less one
]


@pytest.fixture(autouse=True)
def _pointwise_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These small planes would take x86_int8_chgemm's channel-lane mode (its own tests); here they
    exercise the pointwise mode."""
    from backends.c.templates.x86 import x86_int8_gemm

    monkeypatch.setattr(x86_int8_gemm, "channel_over_pointwise", lambda p, geo: False)


def _weights(rng: np.random.Generator, oc: int, ic: int) -> Tensor:
    """int8 1x1 weights in [-40, 40] of scale 1/64."""
    sw = 1 / 64
    w = rng.integers(-40, 41, (oc, ic, 1, 1)) * np.float32(sw)
    return Tensor(quantize(w, D.qint8(sw)), dtype=D.qint8(sw))


def _model(rng: np.random.Generator, bias: bool = True) -> Callable[..., tuple[Tensor, ...]]:
    params = []
    bs = float(np.float32(SX) * np.float32(1 / 64))
    for (_, ic, _, _), oc, *_ in CASES:
        b = rng.standard_normal((1, oc, 1, 1)).astype(np.float32) * 2
        params.append((_weights(rng, oc, ic), Tensor(quantize(b, D.qint32(bs)), dtype=D.qint32(bs))))

    def fn(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, _, mode, island), x, (wq, bq)) in enumerate(zip(CASES, xs, params, strict=True)):
            y = F.quantized.conv_bias_activation(
                x.astype(D.qint8(SX)), wq, bq if bias else None, dtype=D.qint8(0.04 + 0.01 * i),
                nonlinear_mode=mode,
            )  # fmt: skip
            if island is not None:
                y = F.relu6(y.astype("float32")).astype(D.qint8(island))
            outs.append(y.astype("float32"))
        return tuple(outs)

    return fn


def _inputs(rng: np.random.Generator) -> list[np.ndarray]:
    # beyond the int8 range: -128 and 127 are exercised
    return [(rng.standard_normal(shape) * 2).astype(np.float32) for shape, *_ in CASES]


def _pointwise_kernels(source: str) -> int:
    """How many kernels of the source are the pointwise mode's (a plane block on the stack)."""
    return len(re.findall(r"xm_q8_quad64\(planes \+ 0,", source))


@pytest.mark.parametrize("target", [TARGET, VBMI_TARGET])
@pytest.mark.parametrize("bias", [True, False])
def test_pointwise_mode_byte_exact(target: str, bias: bool) -> None:
    require(target)
    rng = np.random.default_rng(3)
    fn, inputs = _model(rng, bias), _inputs(rng)
    one = compile_fn(fn, inputs, target)
    assert _pointwise_kernels(one.source) == len(CASES), "a case left the pointwise mode"
    assert "_tile(" not in one.source  # no general GEMM tile: every convolution is the mode's
    source = one.source
    assert "if (fa != 0.f)" in source or "xm_qaffine16(" in source  # the affine epilogue is exercised
    assert "xm_qhswish16(" in source  # and the post-processed exact one
    # results narrowed four vectors at once, and 16-lane values joined in pixel order
    assert "z = xm_q8_narrow64(" in source and "z = xm_q8_join64(" in source
    if "vbmi" in target:
        assert "xm_qisland_lut_rows4(" in source
    want = run_module(one._stages["tensor"], inputs)  # type: ignore[arg-type]
    for i, (g, w) in enumerate(zip(one.run(inputs), want, strict=True)):
        np.testing.assert_array_equal(g, w, err_msg=f"case {i} ({target})")
        assert np.abs(w).max() > 0, i
    assert_threads_agree(fn, inputs, target, one)


def test_pointwise_mode_sanitized() -> None:
    require(VBMI_TARGET)
    rng = np.random.default_rng(4)
    fn, inputs = _model(rng), _inputs(rng)
    compiled = compile_fn(fn, inputs, VBMI_TARGET)
    assert _pointwise_kernels(compiled.source) == len(CASES)
    check_sanitized(compiled, inputs, rtol=0, atol=0, scaled=False)
    assert_instructions(compiled, ["vpdpbusd", "vpermi2b", "vpackssdw", "vpacksswb"])


def test_pointwise_mode_declines_what_it_does_not_serve() -> None:
    """Strides, padding, groups and more than ``4 * POINTWISE_MAX_C4`` input channels keep the
    general GEMM (still exact)."""
    require(TARGET)
    rng = np.random.default_rng(6)
    ic = 4 * POINTWISE_MAX_C4 + 1
    w, w2 = _weights(rng, 9, ic), _weights(rng, 8, 4)

    def fn(a: Tensor, b: Tensor) -> tuple[Tensor, ...]:
        qcba = F.quantized.conv_bias_activation
        wide = qcba(a.astype(D.qint8(SX)), w, None, dtype=D.qint8(0.05))
        strided = qcba(b.astype(D.qint8(SX)), w2, None, dtype=D.qint8(0.05), stride=2)
        grouped = qcba(b.astype(D.qint8(SX)), w2[:, :2], None, dtype=D.qint8(0.05), groups=2)
        return tuple(t.astype("float32") for t in (wide, strided, grouped))

    inputs = [(rng.standard_normal((1, ic, 6, 7)) * 2).astype(np.float32),
              (rng.standard_normal((1, 4, 9, 9)) * 2).astype(np.float32)]  # fmt: skip
    compiled = compile_fn(fn, inputs, TARGET)
    assert _pointwise_kernels(compiled.source) == 0
    # the general GEMM's tiles in either mode (pixel lanes, or x86_int8_chgemm's channel lanes)
    assert compiled.source.count("_tile(const uint8_t") + compiled.source.count("_ctile(const uint8_t") == 3
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for g, w_ in zip(compiled.run(inputs), want, strict=True):
        np.testing.assert_array_equal(g, w_)


def test_amx_target_splits_by_the_measured_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an AMX target the pointwise mode keeps the 1x1 convolutions of ``VNNI_POINTWISE_OVER_AMX``
    (outside the mode, any of at most ``VNNI_POINTWISE_K`` input channels), AMX takes those past them;
    all exact, on the tiles, on the VNNI path (``XMGE_AMX=0``), with one and two threads."""
    require(AMX_TARGET)
    (k_few_oc, few_oc), (k_few, oc_few_k), *_ = sorted(VNNI_POINTWISE_OVER_AMX, key=lambda pair: pair[1])
    # (input N, C, H, W), output channels, stride, taken by the pointwise mode
    layers = [
        ((1, k_few_oc - 1, 9, 13), few_oc, 1, True),  # few output channels, K no multiple of 4
        ((2, k_few, 7, 11), oc_few_k, 1, True),  # few input channels, 2 images
        ((1, k_few_oc, 6, 9), few_oc + 1, 1, False),  # one output channel too many: AMX
        ((1, VNNI_POINTWISE_K + 4, 5, 7), few_oc, 2, False),  # strided, past VNNI_POINTWISE_K: AMX
    ]
    rng = np.random.default_rng(8)
    weights = [_weights(rng, oc, shape[1]) for shape, oc, *_ in layers]

    def fn(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, _, stride, _), x, w) in enumerate(zip(layers, xs, weights, strict=True)):
            y = F.quantized.conv_bias_activation(
                x.astype(D.qint8(SX)), w, None, dtype=D.qint8(0.05 + 0.01 * i), stride=stride,
                nonlinear_mode="relu" if i % 2 else "identity",
            )  # fmt: skip
            if i == 0:  # the ReLU6 island: the pointwise mode's byte table
                y = F.relu6(y.astype("float32")).astype(D.qint8(0.07))
            outs.append(y.astype("float32"))
        return tuple(outs)

    inputs = [(rng.standard_normal(shape) * 2).astype(np.float32) for shape, *_ in layers]
    compiled = compile_fn(fn, inputs, AMX_TARGET)
    assert _pointwise_kernels(compiled.source) == sum(vnni for *_, vnni in layers)
    assert len(re.findall(r"static void amx_conv2d_q8_\w+\(", compiled.source)) == len(layers) - 2
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for i, (g, w) in enumerate(zip(compiled.run(inputs), want, strict=True)):
        np.testing.assert_array_equal(g, w, err_msg=f"layer {i} (tiles: {amx_permitted()})")
        assert np.abs(w).max() > 0, i
    assert_threads_agree(fn, inputs, AMX_TARGET, compiled)
    monkeypatch.setenv(AMX_ENV, "0")  # the runner is a new process: it reads the variable afresh
    for i, (g, w) in enumerate(zip(compiled.run_runner(inputs), want, strict=True)):
        np.testing.assert_array_equal(g, w, err_msg=f"layer {i} (VNNI path)")
