"""The channel-lane mode of the AVX512-VNNI int8 GEMM (``x86_int8_chgemm``: 16 output channels a
vector, MR pixels of a row broadcast) byte-exact against the reference interpreter: channel counts
that fill no vector (a ragged last block, per group too), rows that fill no tile, strides, dilation,
groups, batch 2, 1x1 convolutions on small planes (taken from the pointwise mode); the exact, affine,
mixed (some channels exact) and post-processed epilogues, and the ReLU6 island (float forms on VNNI,
the byte table on VBMI); one and two threads alike, and once under ASan / UBSan. The choice rule
itself (which mode each ResNet / MobileNetV2 shape takes) is checked without compiling."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import compiler.functional as F
from backends.c.templates.x86.x86_int8_chgemm import channel_mode, channel_over_pointwise
from backends.c.templates.x86.x86_int8_gemm import VNNI, _geometry, _pointwise, choose_tile
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import assert_instructions, assert_threads_agree, check_sanitized, compile_fn, require
from tests.test_x86_amx import every_third_channel_exact

TARGET = "x86-avx512-nchw88-vnni"
VBMI_TARGET = f"{TARGET}-vbmi"
SX = 1 / 40

# (input N, C, H, W), output channels, kernel, stride, padding, dilation, groups, nonlinear mode,
# ReLU6 island scale (None: no island)
CASES = [
    ((1, 20, 7, 7), 40, 3, 1, 1, 1, 1, "relu", None),  # 40 channels: a ragged last vector
    ((2, 45, 6, 7), 33, 3, 1, 1, 1, 1, "identity", 0.05),  # 2 images, 33 channels, an island
    ((1, 24, 9, 11), 48, 3, 2, 1, 1, 1, "relu", None),  # stride 2: 5x6 outputs, 2x2 phases
    ((1, 16, 9, 9), 32, 3, 1, 2, 2, 1, "h_swish", None),  # dilated; post-processed, no affine form
    ((1, 96, 5, 6), 68, 3, 1, 1, 1, 2, "relu", 0.03),  # 2 groups of 34 channels
    ((2, 96, 7, 7), 50, 1, 1, 0, 1, 1, "identity", None),  # 1x1 on 49 pixels (not the pointwise mode)
    ((1, 40, 4, 10), 64, 1, 1, 0, 1, 1, "relu", 0.1),  # 1x1, 40 pixels, an island
    # the window form (few input channels: input rows, four columns a step)
    ((1, 3, 45, 43), 40, 7, 2, 3, 1, 1, "relu", None),  # a first layer, 23x22 outputs, ragged
    ((2, 2, 11, 13), 20, 5, 1, 2, 1, 1, "identity", 0.05),  # 2 channels, 5 columns: 2 quads a row
]
WINDOW_CASES = 2


def _model(rng: np.random.Generator) -> Callable[..., tuple[Tensor, ...]]:
    params = []
    sw = 1 / 64
    bs = float(np.float32(SX) * np.float32(sw))
    for (_, ic, _, _), oc, k, *_rest, g, _mode, _island in CASES:
        shape = (oc, ic, k, k) if g == 1 else (g, oc // g, ic // g, k, k)
        w = rng.integers(-40, 41, shape) * np.float32(sw)
        b = rng.standard_normal((1, oc, 1, 1)).astype(np.float32) * 2
        params.append((Tensor(quantize(w, D.qint8(sw)), dtype=D.qint8(sw)),
                       Tensor(quantize(b, D.qint32(bs)), dtype=D.qint32(bs))))  # fmt: skip

    def fn(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, (case, x, (wq, bq)) in enumerate(zip(CASES, xs, params, strict=True)):
            _, _, _, s, p, d, g, mode, island = case
            y = F.quantized.conv_bias_activation(
                x.astype(D.qint8(SX)), wq, bq, dtype=D.qint8(0.04 + 0.01 * i), stride=s, padding=p,
                dilation=d, groups=g, nonlinear_mode=mode,
            )  # fmt: skip
            if island is not None:
                y = F.relu6(y.astype("float32")).astype(D.qint8(island))
            outs.append(y.astype("float32"))
        return tuple(outs)

    return fn


def _inputs(rng: np.random.Generator) -> list[np.ndarray]:
    # beyond the int8 range: -128 and 127 are exercised
    return [(rng.standard_normal(case[0]) * 2).astype(np.float32) for case in CASES]


def _channel_kernels(source: str) -> int:
    return source.count("_ctile(const uint8_t")


def _window_kernels(source: str) -> int:
    return source.count("{ memset(dst, 0x80, ")


def _exact(compiled: object, inputs: list[np.ndarray]) -> None:
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[attr-defined]
    for i, (g, w) in enumerate(zip(compiled.run(inputs), want, strict=True)):  # type: ignore[attr-defined]
        np.testing.assert_array_equal(g, w, err_msg=f"case {CASES[i]}")
        assert np.abs(w).max() > 0, i


@pytest.mark.parametrize(
    ("target", "exact_channels"),
    [(TARGET, False), pytest.param(TARGET, True, marks=pytest.mark.slow), (VBMI_TARGET, True),
     pytest.param(VBMI_TARGET, False, marks=pytest.mark.slow)],
)  # fmt: skip
def test_channel_mode_byte_exact(target: str, exact_channels: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    require(target)
    if exact_channels:
        every_third_channel_exact(monkeypatch)
    rng = np.random.default_rng(5)
    fn, inputs = _model(rng), _inputs(rng)
    one = compile_fn(fn, inputs, target)
    assert _channel_kernels(one.source) == len(CASES), "a case left the channel-lane mode"
    assert _window_kernels(one.source) == WINDOW_CASES
    source = one.source
    assert "xm_qaffine16(" in source and "xm_qhswish16(" in source  # affine and post-processed
    if exact_channels:
        assert "_mm_mask_blend_epi8(affm" in source  # channels of both forms in one vector
    if "vbmi" in target:
        assert "xm_qisland_lut16(" in source
    _exact(one, inputs)
    assert_threads_agree(fn, inputs, target, one)


@pytest.mark.slow
def test_channel_mode_sanitized() -> None:
    require(VBMI_TARGET)
    rng = np.random.default_rng(6)
    fn, inputs = _model(rng), _inputs(rng)
    compiled = compile_fn(fn, inputs, VBMI_TARGET)
    assert _channel_kernels(compiled.source) == len(CASES)
    check_sanitized(compiled, inputs, rtol=0, atol=0, scaled=False)
    assert_instructions(compiled, ["vpdpbusd", "vpbroadcastd", "vpunpcklbw"])


def _mode(ic: int, hw: int, oc: int, k: int, s: int = 1) -> str:
    """The mode ``Conv2dQ8Vnni.match`` picks for a square convolution (padding k // 2)."""
    pad = k // 2
    out = (hw + 2 * pad - k) // s + 1
    p = {"n": 1, "ic": ic, "ih": hw, "iw": hw, "oc": oc, "oh": out, "ow": out, "fh": k, "fw": k,
         "sh": s, "sw": s, "ph": pad, "pw": pad, "dh": 1, "dw": 1, "groups": 1, "out": "q8"}  # fmt: skip
    geo = _geometry(p)
    pointwise = _pointwise(p, geo)
    over = pointwise and channel_over_pointwise(p, geo)
    if pointwise and not over:
        return "pointwise"
    nv, mr = choose_tile(p["oh"] * geo["wq"], oc, geo["c4"] * k * k, VNNI)
    return "channels" if channel_mode(p, geo, nv, mr, 16, force=over) else "pixels"


def test_channel_mode_choice() -> None:
    """The deep layers take the channel-lane mode (measured faster there: x86_int8_chgemm's
    figures); the wide 1x1 layers of few input channels keep the pointwise mode."""
    resnet_3x3 = [(64, 56, 64, 3), (128, 28, 128, 3), (256, 14, 256, 3), (512, 7, 512, 3)]
    resnet_3x3.append((64, 56, 128, 3, 2))
    deep_1x1 = [(2048, 7, 512, 1), (1024, 14, 256, 1), (960, 7, 160, 1), (160, 7, 960, 1), (576, 14, 96, 1)]
    for shape in resnet_3x3 + deep_1x1:
        assert _mode(*shape) == "channels", shape
    for shape in [(256, 56, 64, 1), (24, 56, 144, 1), (16, 112, 96, 1), (96, 14, 576, 1)]:
        assert _mode(*shape) == "pointwise", shape
