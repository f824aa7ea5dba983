"""The AVX2 int8 units beside the convolutions (``backends/c/templates/x86/x86_int8_avx2.py``) exactly against
the reference interpreter on x86-avx2-nchw88: depthwise convolutions (every filter size the shapes
need, strides 1 and 2, dilation, batch 2, channels and widths not multiples of 8, the padded-plane
and the border-tested forms, int8 / int32 results and the fused ReLU6 island in each vector form),
same-shape elementwise Q-modes, max pooling and the float32 <-> int8 typecvt, every int8 input value
including -128 and 127, on one and two threads and under ASan/UBSan."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.templates.x86.x86_int8 import island_form
from backends.c.templates.x86.x86_int8_avx2 import DW_PAD_BYTES, _padded_plane
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import assert_instructions, assert_threads_agree, compile_fn, require
from tests.test_x86_int8 import island

TARGET = "x86-avx2-nchw88"
SX = 1 / 16  # input scale: x * 16 spans every int8 value, the extremes saturated

# name, input shape (N, C, H, W), filter size, stride, padding, dilation
DW_CASES = [
    ("k3_s1_odd", (1, 11, 13, 19), 3, 1, 1, 1),
    ("k3_s2_n2", (2, 9, 17, 23), 3, 2, 1, 1),
    ("k5_s2", (1, 5, 12, 21), 5, 2, 2, 1),
    ("k7_s1", (1, 3, 9, 10), 7, 1, 3, 1),
    ("k3_dilated", (1, 6, 15, 14), 3, 1, 2, 2),
    ("k3_s2_unpadded", (1, 4, 10, 9), 3, 2, 0, 1),
    ("k2_s1_even", (1, 10, 8, 33), 2, 1, 0, 1),
    ("k3_s1_large_plane", (1, 2, 250, 270), 3, 1, 1, 1),  # beyond the stack copy: border-tested form
]
ISLAND_FORMS = [(0.05, 0.05), (0.05, 0.1), (0.04, 0.02), (0.05, 0.24666667)]  # clamp, scale, float


def _families(compiled: Any) -> set[tuple[str, str]]:
    return set(re.findall(r'= "(\w+)" \["(\w+)"\]', compiled.ir("kernel-plan-memory")))


def _every_int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Float input whose int8 quantization (scale SX) holds every value in [-128, 127], the extremes
    also from values beyond the range."""
    q = rng.integers(-140, 141, shape).astype(np.float32)
    flat = q.reshape(-1)
    flat[:256] = np.arange(-128, 128)[rng.permutation(256)][: flat[:256].size]
    return (q * SX).astype(np.float32)


def _qweight(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> Tensor:
    w = rng.integers(-128, 128, shape)
    w.reshape(-1)[:2] = (-128, 127)
    return Tensor(quantize(w * np.float32(scale), D.qint8(scale)), dtype=D.qint8(scale))


def _qbias(rng: np.random.Generator, channels: int, scale: float) -> Tensor:
    b = rng.integers(-3000, 3000, (1, channels, 1, 1)) * np.float32(scale)
    return Tensor(quantize(b.astype(np.float32), D.qint32(scale)), dtype=D.qint32(scale))


def _dw_model(rng: np.random.Generator) -> tuple[Any, list[np.ndarray], list[str]]:
    sw = 1 / 128
    channels = [(shape[1], k) for _, shape, k, *_ in DW_CASES]
    params = [(_qweight(rng, (c, 1, 1, k, k), sw), _qbias(rng, c, SX * sw)) for c, k in channels]
    qcba = F.quantized.conv_bias_activation

    def fn(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for (_, shape, _, s, p, d), x, (w, b) in zip(DW_CASES, xs, params, strict=True):
            xq = x.astype(D.qint8(SX))
            conv = {"stride": s, "padding": p, "dilation": d, "groups": shape[1]}
            outs.append(qcba(xq, w, b, dtype=D.qint8(0.4), nonlinear_mode="relu", **conv))
            outs.append(qcba(xq, w, None, dtype=D.qint8(0.3), **conv))
            outs.append(qcba(xq, w, b, dtype=D.qint32(SX * sw), **conv))  # the raw accumulators
        return tuple(t.astype("float32") for t in outs)

    inputs = [_every_int8(rng, c[1]) for c in DW_CASES]
    names = [f"{c[0]} {kind}" for c in DW_CASES for kind in ("relu", "int8", "int32")]
    return fn, inputs, names


def _assert_exact(compiled: Any, inputs: list[np.ndarray], names: list[str], sanitize: bool = False) -> None:
    got = compiled.run_runner(inputs, sanitize=True) if sanitize else compiled.run(inputs)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for name, g, w in zip(names, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
        assert np.abs(np.asarray(w, np.float64)).max() > 0, name


def test_depthwise_cases_cover_both_forms() -> None:
    sizes = []
    for _, (_, _, ih, iw), k, s, p, d in DW_CASES:
        oh, ow = (ih + 2 * p - d * (k - 1) - 1) // s + 1, (iw + 2 * p - d * (k - 1) - 1) // s + 1
        geometry = {"ih": ih, "iw": iw, "oh": oh, "ow": ow, "fh": k, "fw": k, "sh": s, "sw": s, "ph": p,
                    "pw": p, "dh": d, "dw": d}  # fmt: skip
        pitch, height = _padded_plane(geometry)
        sizes.append(pitch * height)
    assert min(sizes) <= DW_PAD_BYTES < max(sizes)


def test_depthwise_exact_threads_sanitized() -> None:
    require(TARGET)
    rng = np.random.default_rng(21)
    fn, inputs, names = _dw_model(rng)
    one = compile_fn(fn, inputs, TARGET)
    assert ("conv2d_dw_q8_x86", "avx2") in _families(one)
    assert one.ir("kernel-plan-memory").count("kernel.call @avx2_dw_conv2d_q8") == 3 * len(DW_CASES)
    assert not {f for f, _ in _families(one)} & {"conv2d_q8", "conv2d_depthwise"}
    assert_instructions(one, ["vpmaddwd"])
    _assert_exact(one, inputs, names)
    two = assert_threads_agree(fn, inputs, TARGET, one)
    _assert_exact(two, inputs, names, sanitize=True)


def test_depthwise_relu6_island_each_form_fused_and_exact() -> None:
    """MobileNetV2's depthwise int8 conv -> (typecvt, relu6, typecvt): one avx2 kernel in each of
    x86_int8.island_form's vector forms, bit-exact, on 1 and 2 threads."""
    require(TARGET)
    rng = np.random.default_rng(4)
    c = 13
    w = _qweight(rng, (c, 1, 1, 3, 3), 1 / 64)
    b = _qbias(rng, c, SX / 64)
    qcba = F.quantized.conv_bias_activation
    assert {island_form(float(np.float32(a)), float(np.float32(s)))[0] for a, s in ISLAND_FORMS} == {
        "clamp", "scale", "float",
    }  # fmt: skip

    def fn(x: Tensor) -> tuple[Tensor, ...]:
        xq = x.astype(D.qint8(SX))
        outs = []
        for stride, (s_conv, s_island) in zip((1, 2, 1, 2), ISLAND_FORMS, strict=True):
            conv = qcba(xq, w, b, dtype=D.qint8(s_conv), stride=stride, padding=1, groups=c)
            outs.append(island(conv, s_island))
        return tuple(t.astype("float32") for t in outs)

    x = _every_int8(rng, (2, c, 11, 21))
    one = compile_fn(fn, [x], TARGET)
    assert ("conv2d_dw_q8_relu6_x86", "avx2") in _families(one)
    assert "elemwise" not in {f for f, _ in _families(one)}
    names = [f"island {form}" for form in ISLAND_FORMS]
    _assert_exact(one, [x], names)
    assert_threads_agree(fn, [x], TARGET, one)


@pytest.mark.parametrize("size", [(2, 3, 5, 7), (1, 8, 4, 8), (1, 1, 1, 5)])
def test_elemwise_pool_typecvt_exact(size: tuple[int, int, int, int]) -> None:
    """The Q-modes with an 8-lane form, max pooling (strides 1 and 2, padded and not) and the
    quantize / dequantize on sizes with and without a partial last vector, every int8 value."""
    require(TARGET)
    rng = np.random.default_rng(sum(size))
    a, b = _every_int8(rng, size), _every_int8(rng, size)
    big = _every_int8(rng, (2, 3, 19, 23))
    a.reshape(-1)[-1] = np.nan  # the quantize maps NaN to 0
    emt = F.quantized.elemwise_multi_type
    modes = ["qadd", "qfuse_add_relu", "qsub", "qmul", "qfuse_add_h_swish"]

    def fn(x: Tensor, y: Tensor, z: Tensor) -> tuple[Tensor, ...]:
        xq, yq, zq = x.astype(D.qint8(SX)), y.astype(D.qint8(SX * 2)), z.astype(D.qint8(SX))
        outs = [emt(xq, yq, mode=m, dtype=D.qint8(0.05 + 0.01 * i)) for i, m in enumerate(modes)]
        outs += [emt(xq, mode=m, dtype=D.qint8(0.03)) for m in ("qrelu", "qh_swish")]
        outs += [F.max_pool2d(zq, 3, 2, 1), F.max_pool2d(zq, 2, 2, 0), F.max_pool2d(zq, 3, 1, 1)]
        return (*(t.astype("float32") for t in outs), xq.astype("float32"))

    inputs = [a, b, big]
    one = compile_fn(fn, inputs, TARGET)
    families = _families(one)
    assert {("elemwise_q8_x86", "avx2"), ("pool2d_q8_x86", "avx2"), ("typecvt", "avx2")} <= families
    assert not {f for f, _ in families} & {"elemwise_q", "pool2d_q8"}
    names = [*modes, "qrelu", "qh_swish", "pool k3 s2", "pool k2 s2", "pool k3 s1", "quantize"]
    got = one.run(inputs)
    want = run_module(one._stages["tensor"], inputs)  # type: ignore[arg-type]
    for name, g, w in zip(names, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
    two = assert_threads_agree(fn, inputs, TARGET, one)
    if size == (2, 3, 5, 7):
        for name, g, w in zip(names, two.run_runner(inputs, sanitize=True), want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_vnni_targets_keep_their_units() -> None:
    """The avx2 units sit behind the VNNI ones: an avx512vnni target still takes x86_int8's."""
    from backends.c.kernels import KERNELS
    from backends.targets import parse_target

    families = ("conv2d_dw_q8_x86", "conv2d_dw_q8_relu6_x86", "elemwise_q8_x86", "pool2d_q8_x86", "typecvt")
    for family in families:
        for target, isa in (("x86-avx2", "avx2"), ("x86-avx512-nchw88", "avx2"),
                            ("x86-avx512-nchw88-vnni", "avx512vnni")):  # fmt: skip
            unit = KERNELS.first(family, parse_target(target).isas)
            assert unit is not None and unit.isa == isa, (family, target, unit)


def test_affine_epilogue_on_eight_lanes_exact() -> None:
    """x86_int8_requant's affine epilogue (``xm_qaffine8``) serves the avx2 GEMM's channels where it
    is proven exact: tests/test_x86_int8.py's convolutions take it, bit-exact against the reference."""
    from tests.test_x86_int8 import NAMES, _inputs, _weights, int8_model

    require(TARGET)
    rng = np.random.default_rng(11)
    fn, inputs = int8_model(_weights(rng)), _inputs(rng)
    compiled = compile_fn(fn, inputs, TARGET)
    assert re.search(r"kernel\.call @avx2_conv2d_q8_\w+_aff\b", compiled.ir("kernel-plan-memory"))
    names = NAMES + ["pool", "pool_s1", "add_relu", "add", "relu6_island", "matmul"]
    _assert_exact(compiled, inputs, names)
