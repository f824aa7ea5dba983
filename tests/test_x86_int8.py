"""The AVX512-VNNI int8 kernels (``backends/c/templates/x86/x86_int8.py``) exactly against the reference
interpreter: dense, 1x1, grouped, strided, dilated and depthwise convolutions on odd shapes (channel
counts that fill no register tile, pixel counts that fill no vector), residual Q-modes and max
pooling, on one and two threads and under ASan/UBSan. Each case's kernel choice is pinned, so a
selection change that silently stops exercising a kernel fails too."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import compile_fn, compile_fn_threads, require
from tests.test_int8_rounding import CASES as MGE_CASES

TARGET = "x86-avx512-nchw88-vnni"

# name, input (N, C, H, W), OC, kernel, stride, padding, dilation, groups
CASES = [
    ("dense3x3_odd", (1, 13, 9, 11), 19, 3, 1, 1, 1, 1),
    ("first_layer7x7_s2", (1, 3, 23, 21), 10, 7, 2, 3, 1, 1),
    ("pointwise_n2", (2, 22, 5, 7), 7, 1, 1, 0, 1, 1),
    ("pointwise_s2", (1, 9, 9, 9), 6, 1, 2, 0, 1, 1),
    ("dense3x3_s2_wide", (1, 5, 40, 37), 9, 3, 2, 1, 1, 1),
    ("group3", (1, 12, 6, 7), 9, 3, 1, 1, 1, 3),
    ("dilated", (1, 4, 9, 9), 5, 3, 1, 2, 2, 1),
    ("dilated_s2_n2", (2, 6, 17, 15), 11, 3, 2, 2, 2, 1),  # taps in both phases of each axis
    ("kernel5_s3", (1, 5, 16, 19), 17, 5, 3, 2, 1, 1),  # 3 x 3 phases, a ragged last row
    ("pointwise_wide", (1, 33, 3, 40), 21, 1, 1, 0, 1, 1),  # one plane row per channel, 120 pixels
    ("group2_s2", (2, 10, 11, 9), 6, 3, 2, 0, 1, 2),  # no padding: Wq < 16, a vector spans 3 rows
    ("depthwise_s1", (1, 7, 19, 37), 7, 3, 1, 1, 1, 7),
    ("depthwise_s2", (2, 5, 35, 36), 5, 3, 2, 1, 1, 5),
    ("depthwise5x5", (1, 3, 7, 20), 3, 5, 1, 2, 1, 3),  # wider than 4 taps: the widen mode
    ("depthwise_s2_nopad_n2", (2, 18, 9, 8), 18, 3, 2, 0, 1, 18),  # 4 x 3 outputs: one row block
    ("depthwise2x2", (1, 17, 6, 21), 17, 2, 1, 1, 1, 17),  # 7 rows (a partial block), 2 column blocks
]
NAMES = [c[0] for c in CASES]
CONV_FAMILIES = {"conv2d_q8_x86", "conv2d_dw_q8_x86"}
# both depthwise modes (x86_int8.ConvDepthwiseQ8Vnni): vpdpbusd on row windows, vpdpwssd on widened taps
DW_SYMBOLS = ("vnni_dww_", "vnni_dw_")


def _weights(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for _, (_, ic, _, _), oc, k, *_rest, g in CASES:
        shape = (oc, ic, k, k) if g == 1 else (g, oc // g, ic // g, k, k)
        w = (rng.standard_normal(shape) * 0.3).astype(np.float32)
        out.append((w, rng.standard_normal(oc).astype(np.float32)))
    return out


def int8_model(weights: list[tuple[np.ndarray, np.ndarray]]) -> Callable[..., Any]:
    sx = 1 / 40
    params = []
    for w, b in weights:
        sw = float(np.abs(w).max()) / 127
        wq = quantize(w, D.qint8(sw))
        bq = quantize(b.reshape(1, -1, 1, 1), D.qint32(np.float32(sx) * np.float32(sw)))
        params.append((Tensor(wq, dtype=D.qint8(sw)), Tensor(bq, dtype=D.qint32(float(sx * sw)))))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, _, _, _, s, p, d, g), x, (wq, bq)) in enumerate(zip(CASES, xs, params, strict=True)):
            outs.append(
                F.quantized.conv_bias_activation(
                    x.astype(D.qint8(sx)), wq, bq, dtype=D.qint8(0.05 + 0.01 * i), stride=s, padding=p,
                    dilation=d, groups=g, nonlinear_mode="relu" if i % 2 == 0 else "identity",
                )  # fmt: skip
            )
        pooled = F.max_pool2d(outs[0], 3, 2, 1)
        pooled_s1 = F.max_pool2d(outs[NAMES.index("depthwise_s2")], 2, 1, 0)
        added = F.quantized.elemwise_multi_type(outs[1], outs[1], mode="qfuse_add_relu", dtype=D.qint8(0.1))
        dw = outs[NAMES.index("depthwise_s1")]
        summed = F.quantized.elemwise_multi_type(dw, dw, mode="qadd", dtype=D.qint8(0.07))
        # a float island (dequantize, RELU6, quantize) as PTQ leaves MobileNetV2's RELU6
        island = F.relu6(outs[2].astype("float32")).astype(D.qint8(0.03))
        # the portable int8 matmul (its helpers) beside the typecvt kernels in one translation unit
        rows = F.flatten(outs[3], 1)
        product = F.matmul(rows, rows, transpose_b=True).astype(D.qint8(0.5))
        extra = (pooled, pooled_s1, added, summed, island, product)
        return tuple(t.astype("float32") for t in (*outs, *extra))

    return f


def _inputs(rng: np.random.Generator) -> list[np.ndarray]:
    # values beyond the int8 range saturate on input: the extremes -128 and 127 are exercised
    return [(rng.standard_normal(c[1]) * 2).astype(np.float32) for c in CASES]


def _families(compiled: Any) -> set[tuple[str, str]]:
    ir = compiled.ir("kernel-plan-memory")
    return set(re.findall(r'= "(\w+)" \["(\w+)"\]', ir))


@pytest.fixture(scope="module")
def model() -> tuple[Callable[..., Any], list[np.ndarray]]:
    rng = np.random.default_rng(11)
    return int8_model(_weights(rng)), _inputs(rng)


@pytest.mark.parametrize("threads", [1, 2])
def test_vnni_int8_kernels_exact(model: tuple[Callable[..., Any], list[np.ndarray]], threads: int) -> None:
    require(TARGET)
    fn, inputs = model
    compiled = compile_fn_threads(fn, inputs, TARGET, threads)
    kinds = _families(compiled)
    for family in (*CONV_FAMILIES, "elemwise_q8_x86", "pool2d_q8_x86", "typecvt"):
        assert (family, "avx512vnni") in kinds, f"{family} not selected: {sorted(kinds)}"
    assert not {f for f, _ in kinds} & {"conv2d_q8", "elemwise_q", "pool2d_q8"}, sorted(kinds)
    for symbol in DW_SYMBOLS:
        assert f"kernel.call @{symbol}conv2d" in compiled.ir("kernel-plan-memory"), symbol
    # the elemwise results round by the finite-value helper (no mode reaches infinity at these scales)
    assert compiled.source.count("xm_qscaled16_finite(xm_qmul16(f, vinv))") == 2
    got = compiled.run(inputs)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    names = NAMES + ["pool", "pool_s1", "add_relu", "add", "relu6_island", "matmul"]
    for name, g, w in zip(names, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
        assert np.abs(w).max() > 0, name


def test_vnni_int8_kernels_sanitized(model: tuple[Callable[..., Any], list[np.ndarray]]) -> None:
    require(TARGET)
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET)
    got = compiled.run_runner(inputs, sanitize=True)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_requantize_rounds_ties_like_the_reference() -> None:
    """Accumulators whose scaled value lies exactly on .5 (and next to it) requantize as roundf does."""
    require(TARGET)
    sx, sw = 0.5, 1.0  # s_acc = 0.5 and output scale 1: acc * 0.5 hits every tie
    x = np.arange(-128, 128, dtype=np.float32).reshape(1, 1, 16, 16) * sx
    w = Tensor(quantize(np.ones((1, 1, 1, 1), np.float32), D.qint8(sw)), dtype=D.qint8(sw))

    def fn(t: Tensor) -> Tensor:
        y = F.quantized.conv_bias_activation(t.astype(D.qint8(sx)), w, None, dtype=D.qint8(1.0))
        return y.astype("float32")

    compiled = compile_fn(fn, [x], TARGET)
    assert ("conv2d_q8_x86", "avx512vnni") in _families(compiled)
    got = compiled.run([x])[0]
    want = run_module(compiled._stages["tensor"], [x])[0]  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got.reshape(-1)[:4], [-64, -64, -63, -63])  # -64, -63.5, -63, -62.5


def test_vnni_target_needs_its_cpu_flag_and_avx512() -> None:
    from backends.targets import TargetError, parse_target

    assert parse_target("x86-avx512-vnni").isas[0] == "avx512vnni"
    with pytest.raises(TargetError, match="avx512"):
        parse_target("x86-avx2-vnni")


# -- the tie-heavy model of tests/test_int8_kernels_exact.py and the real MegEngine nets -----------


def test_vnni_tie_heavy_model_bit_exact() -> None:
    """tests/test_int8_kernels_exact.py's model, whose data sit on rounding ties, on the VNNI target:
    every int8 value equals the reference's (MegEngine's x86 requantization)."""
    from tests.test_int8_kernels_exact import _inputs, _params
    from tests.test_int8_kernels_exact import int8_model as tie_model

    require(TARGET)
    rng = np.random.default_rng(8)
    params, inputs = _params(rng), _inputs(rng)
    compiled = compile_fn(tie_model(params), inputs, TARGET)
    kinds = _families(compiled)
    for family in (*CONV_FAMILIES, "elemwise_q8_x86"):
        assert (family, "avx512vnni") in kinds, f"{family} not selected: {sorted(kinds)}"
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for threads in (1, 2):
        got = compile_fn_threads(tie_model(params), inputs, TARGET, threads).run(inputs)
        wrong = {}
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            w = np.asarray(w)
            assert g.dtype == w.dtype, f"output {i}: {g.dtype}, the reference's {w.dtype}"
            bad = np.count_nonzero(g.astype(np.int64) != w.astype(np.int64))
            if bad:
                wrong[i] = f"{bad} of {w.size}"
        assert not wrong, f"{threads} thread(s): int8 values differing from the reference, by output: {wrong}"


@pytest.mark.parametrize("case", MGE_CASES)
def test_vnni_matches_megengine_int8_nets(case: str) -> None:
    """The int8 MobileNetV2-style nets MegEngine 1.13 quantized and ran (tests/data/int8_mge): every int8
    intermediate and the final output from the VNNI kernels equal MegEngine's."""
    import compiler as xm
    from compiler.lite import Network
    from tests.test_int8_rounding import _assert_bit_exact, _case

    require(TARGET)
    path, x, expected = _case(case)
    compiled = xm.compile(path, target=TARGET)
    kinds = {f for f, isa in _families(compiled) if isa == "avx512vnni"}
    assert {"conv2d_q8_x86", "conv2d_dw_q8_x86"} <= kinds, sorted(kinds)
    names = list(Network(path).get_all_output_name())
    for name, got in zip(names, compiled.run([x]), strict=True):
        assert np.asarray(got).dtype == expected[name].dtype, name
        _assert_bit_exact(got, expected[name], f"{case} on {TARGET}: {name}")


AMX_TARGET = "x86-avx512-vnni-amx"
VBMI_TARGET = f"{TARGET}-vbmi"
AMX_VBMI_TARGET = f"{AMX_TARGET}-vbmi"
ISLAND_SX = 1 / 40  # the island tests' input scale (weights 1 / 64)


def island_operands(rng: np.random.Generator) -> tuple[Callable[..., Tensor], Tensor]:
    """The island tests' int8 weights of a shape (values in [-40, 40], scale 1/64) and their int32 bias
    of 12 channels (scale ISLAND_SX / 64), drawn from ``rng``."""
    sw = 1 / 64

    def qw(*shape: int) -> Tensor:
        return Tensor(quantize(rng.integers(-40, 41, shape) * np.float32(sw), D.qint8(sw)), dtype=D.qint8(sw))

    bias = Tensor(quantize(rng.standard_normal((1, 12, 1, 1)).astype(np.float32), D.qint32(ISLAND_SX * sw)),
                  dtype=D.qint32(ISLAND_SX * sw))  # fmt: skip
    return qw, bias


def island(t: Tensor, scale: float) -> Tensor:
    """MobileNetV2's ReLU6 float island after an int8 tensor: typecvt, relu6, typecvt."""
    return F.relu6(t.astype("float32")).astype(D.qint8(scale))


# the families serving an island after a dense and after a depthwise convolution, by target
ISLAND_FAMILIES = {
    TARGET: {("conv2d_q8_relu6_x86", "avx512vnni"), ("conv2d_dw_q8_relu6_x86", "avx512vnni")},
    AMX_TARGET: {("conv2d_q8_relu6_amx", "amx"), ("conv2d_dw_q8_relu6_x86", "avx512vnni")},
    # the byte-table islands (x86_int8_vbmi): the same families on ISA avx512vbmi
    VBMI_TARGET: {("conv2d_q8_relu6_x86", "avx512vbmi"), ("conv2d_dw_q8_relu6_x86", "avx512vbmi")},
    AMX_VBMI_TARGET: {("conv2d_q8_relu6_amx", "avx512vbmi"), ("conv2d_dw_q8_relu6_x86", "avx512vbmi")},
}
ISLAND_TARGETS = [TARGET, AMX_TARGET, VBMI_TARGET, AMX_VBMI_TARGET]


@pytest.mark.parametrize("target", ISLAND_TARGETS)
def test_relu6_island_fused_into_the_convolution(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MobileNetV2's int8 conv -> (typecvt, relu6, typecvt) islands become one kernel (dense, 1x1 and
    depthwise convolutions, with and without bias; VNNI and AMX dense convolutions), bit-exact with
    the three ops: island scales that halve (ties), keep, and saturate at 6 (6 / 0.02 > 127)."""
    require(target)
    rng = np.random.default_rng(5)
    qw, bias = island_operands(rng)
    dense, point, depth = qw(12, 5, 3, 3), qw(12, 12, 1, 1), qw(12, 1, 1, 3, 3)
    qcba = F.quantized.conv_bias_activation

    def fn(x: Tensor) -> tuple[Tensor, ...]:
        xq = x.astype(D.qint8(ISLAND_SX))
        a = island(qcba(xq, dense, bias, dtype=D.qint8(0.05), padding=1), 0.1)
        b = island(qcba(a, point, None, dtype=D.qint8(0.04)), 0.02)
        c = island(qcba(b, depth, bias, dtype=D.qint8(0.05), padding=1, groups=12), 0.05)
        d = island(qcba(c, depth, None, dtype=D.qint8(0.03), stride=2, padding=1, groups=12), 0.06)
        return tuple(t.astype("float32") for t in (a, b, c, d))

    x = (rng.standard_normal((1, 5, 13, 37)) * 3).astype(np.float32)
    for threads in (1, 2):
        compiled = compile_fn_threads(fn, [x], target, threads)
        kinds = _families(compiled)
        assert ISLAND_FAMILIES[target] <= kinds, sorted(kinds)
        # no float relu6 left, and only the four outputs' dequantizations
        assert "elemwise" not in {f for f, _ in kinds}, sorted(kinds)
        assert compiled.ir("kernel-plan-memory").count("kernel.call @typecvt_q8_to_f32") == 4
        if "vbmi" in target:  # the depthwise table island (7 rows: a group of four, three on their own)
            assert "xm_qisland_lut_rows4(" in compiled.source and "xm_q8_window16_vbmi(" in compiled.source
        got = compiled.run([x])
        want = run_module(compiled._stages["tensor"], [x])  # type: ignore[arg-type]
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_array_equal(g, w, err_msg=f"island {i}, {threads} thread(s)")
            assert np.abs(w).max() > 0
    assert np.asarray(want[1]).max() == np.float32(127 * 0.02)  # the 0.02 island saturates
    if "amx" in target:  # the AMX island kernel's path for a process without tile data: same bytes
        from backends.c.templates.x86.x86_amx_os import AMX_ENV

        monkeypatch.setenv(AMX_ENV, "0")  # the runner is a new process: it reads the variable afresh
        for g, w in zip(compiled.run_runner([x]), want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg="XMGE_AMX=0")


# (convolution's output scale, island's scale, the island's vector form: x86_int8.island_form)
ISLAND_FORMS = [
    (0.5, 0.5, "clamp"), (0.5, 6 / 127, "scale"), (0.5, 1.0, "scale"), (0.05, 0.24666667, "float"),
]  # fmt: skip


@pytest.mark.parametrize("target", ISLAND_TARGETS)
def test_island_forms_exact_on_every_int8_value(target: str) -> None:
    """Every vector form of a fused ReLU6 island (the clamp, one product, the island's own operations)
    after dense 1x1 (with bias) and depthwise convolutions whose results take every int8 value,
    saturate both ways and sit on rounding ties (acc / 2): the reference's bytes."""
    from backends.c.templates.x86.x86_int8 import island_form

    require(target)
    sx = 0.25
    values = np.arange(-128, 128, dtype=np.float32).reshape(16, 16)
    x = (np.stack([np.roll(values, 37 * c) for c in range(4)])[None] * sx).astype(np.float32)
    taps = np.arange(1, 5, dtype=np.float32)
    point = Tensor(quantize(np.diag(taps).reshape(4, 4, 1, 1), D.qint8(1.0)), dtype=D.qint8(1.0))
    center = np.zeros((4, 1, 1, 3, 3), np.float32)
    center[:, 0, 0, 1, 1] = taps
    depth = Tensor(quantize(center, D.qint8(1.0)), dtype=D.qint8(1.0))
    bias_values = np.float32([1, -1, 3, 0]).reshape(1, 4, 1, 1) * sx
    bias = Tensor(quantize(bias_values, D.qint32(sx)), dtype=D.qint32(sx))
    qcba = F.quantized.conv_bias_activation

    def fn(t: Tensor) -> tuple[Tensor, ...]:
        xq = t.astype(D.qint8(sx))
        outs = []
        for s_conv, s_island, _ in ISLAND_FORMS:
            for y in (qcba(xq, point, bias, dtype=D.qint8(s_conv)),
                      qcba(xq, depth, None, dtype=D.qint8(s_conv), padding=1, groups=4)):  # fmt: skip
                outs.append(F.relu6(y.astype("float32")).astype(D.qint8(s_island)).astype("float32"))
        return tuple(outs)

    assert [island_form(float(np.float32(a)), float(np.float32(b)))[0] for a, b, _ in ISLAND_FORMS] == [
        f for _, _, f in ISLAND_FORMS
    ]
    for threads in (1, 2):
        compiled = compile_fn_threads(fn, [x], target, threads)
        # the VNNI units on both targets: a 1x1 convolution on 4 channels stays off AMX tiles
        # (x86_amx.VNNI_POINTWISE_K)
        lut = "vbmi" in target
        assert ISLAND_FAMILIES[VBMI_TARGET if lut else TARGET] <= _families(compiled)
        # each form, after the exact epilogue or the affine one (x86_int8_requant); with VBMI every
        # form but the clamp is the byte table (16 lanes, or 64 in the 1x1 convolution's pointwise
        # mode: x86_int8_gemm)
        table = (
            "xm_qisland_lut16(_mm512_cvtepi32_epi8", "xm_qisland_lut16(_mm512_cvtsepi32_epi8",
            "_mm512_permutex2var_epi8(island_lo, _mm512_max_epi8(xm_q8_narrow64(",
        )  # fmt: skip
        for forms in (
            ("xm_qisland_clamp16(xm_", "xm_qaffine_clamp16("),
            ("xm_qisland_scale16(xm_qtrunc16", "xm_qisland_scale16(xm_qaffine_island16"),
            ("xm_qisland_float16(xm_qtrunc16", "xm_qisland_float16(xm_qaffine_island16"),
        ):
            if lut and "clamp" not in forms[0]:
                assert not any(form in compiled.source for form in forms), forms
                forms = table
            assert any(form in compiled.source for form in forms), forms
        # the affine epilogue takes some of these convolutions (a call, not the helper's definition)
        assert re.search(r"xm_qaffine16\((?!__m512i)", compiled.source)
        got = compiled.run([x])
        want = run_module(compiled._stages["tensor"], [x])  # type: ignore[arg-type]
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}, {threads} thread(s)")
        assert {float(np.asarray(w).max()) for w in want[:2]} == {6.0}  # the clamp form's 12 * 0.5
    # the last build (2 threads) once more under ASan/UBSan
    for g, w in zip(compiled.run_runner([x], sanitize=True), want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("act", ["identity", "relu"])
def test_affine_requant_equals_the_exact_epilogue(act: str) -> None:
    """x86_int8_requant's shorter epilogue, where it is accepted, gives the exact epilogue's int8
    value for every accumulator the convolution can produce (enumerated), and h-swish (not monotone)
    keeps the exact one."""
    from backends.c.templates.x86.x86_int8_requant import _exact, _fast, affine_requant

    rng = np.random.default_rng(7)
    accepted = 0
    for trial in range(12):
        oc = 5
        wv = rng.integers(-40, 41, size=(oc, 1, 1, 3)).astype(np.int64)
        shift = -128 * wv.reshape(oc, -1).sum(axis=1) + rng.integers(-500, 500, oc)
        fb = rng.uniform(-2, 2, oc).astype(np.float32) if trial % 2 else None
        p = {"out": "q8", "zp_out": 0, "act": act, "bias": int(fb is not None),
             "s_acc": float(rng.uniform(1e-4, 3e-3)), "s_out": float(rng.uniform(0.02, 0.2))}  # fmt: skip
        got = affine_requant(p, wv, shift, fb, (0, 255))
        if got is None:
            continue
        accepted += 1
        w = wv.reshape(oc, -1)
        for c in range(oc):
            lo, hi = np.minimum(w[c] * 0, w[c] * 255).sum(), np.maximum(w[c] * 0, w[c] * 255).sum()
            u = np.arange(lo, hi + 1, dtype=np.int64)[None, :]
            want = _exact(u, p, shift[c : c + 1], None if fb is None else fb[c : c + 1]).clip(got.lo, 127)
            if got.ok[c]:
                np.testing.assert_array_equal(_fast(u, got.a[c], got.b[c : c + 1], got.lo), want)
    assert accepted >= 3
    hswish = {"out": "q8", "zp_out": 0, "act": "hswish", "bias": 0, "s_acc": 1e-3, "s_out": 0.1}
    assert affine_requant(hswish, np.ones((2, 3), np.int64), np.zeros(2, np.int64), None, (0, 255)) is None


def _fma32_by_fractions(x: float, a: float, b: float) -> np.float32:
    """float32 ``x * a + b`` rounded once to nearest even, in exact rational arithmetic."""
    from fractions import Fraction

    exact = Fraction(x) * Fraction(a) + Fraction(b)
    near = np.float32(float(exact))
    candidates = [near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))]

    def key(r: np.float32) -> tuple[Fraction, int]:
        return abs(Fraction(float(r)) - exact), int(np.array(r).view(np.int32)) & 1  # ties to even

    return min(candidates, key=key)


def test_fma32_rounds_once() -> None:
    """x86_int8_requant's emulation of the fused multiply-add its affine epilogue runs equals the
    exact sum rounded once: random operands, and sums that fall halfway between two float32 values
    in float64 with a tiny product past or short of the halfway point (where rounding the float64
    sum again would be wrong)."""
    from backends.c.templates.x86.x86_int8_requant import fma32

    rng = np.random.default_rng(3)
    xs = rng.integers(-(2**24), 2**24, 400).astype(np.float32)
    a = np.float32(rng.uniform(1e-4, 1e-1))
    bs = rng.uniform(-200, 200, 400).astype(np.float32)
    cases = [(float(x), float(a), float(b)) for x, b in zip(xs, bs, strict=True)]
    # (1 + 2^-23) * 2^-24 * (1 -+ 2^-23) = 2^-24 -+ 2^-70: past b = +-(1 + 2^-23) the float64 sum is the
    # halfway point 1 + 3 * 2^-24 whose tie goes to 1 + 2^-22, but the exact sum lies short of it
    # (or, with the other factor, is exactly 2^-46 further: no tie)
    x1 = 1 + 2.0**-23
    for sign in (1.0, -1.0):
        for a_ in (2.0**-24 * (1 - 2.0**-23), 2.0**-24 * (1 + 2.0**-23), 2.0**-24):
            for b in (x1, -x1, 1.0, -1.0):
                cases.append((sign * x1, a_, b))
    for x, a_, b in cases:
        got = fma32(np.array([x], np.float32), np.float32(a_), np.array([b], np.float32))[0]
        assert got == _fma32_by_fractions(x, a_, b), (x, a_, b, got)
