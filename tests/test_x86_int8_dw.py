"""The AVX512-VBMI int8 depthwise forms (``backends/c/templates/x86/x86_int8_vbmi.py``) byte-exact against
the reference interpreter: small planes in registers with the output pixels 16 to a vector across rows
(``_flat_plan``), wide stride-1 planes through the padded, flipped stack copy (``_padded_plane``),
and the row form the others keep (masked loads); full vectors stored straight from the register. Odd
shapes (channels not divisible by 16, odd sizes, stride 2, batch 2, no padding, input rows over 64
bytes), after each ReLU6 island form (the table, and the clamp that keeps the exact epilogue) and
without an island; one and two threads agree, and the library runs clean under ASan/UBSan."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import compiler.functional as F
from backends.c.templates.x86.x86_int8_vbmi import _flat_plan, _padded_plane
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import assert_threads_agree, check_sanitized, compile_fn, require

TARGET = "x86-avx512-nchw88-vnni-vbmi"
SX = 1 / 20

# name, input (N, C, H, W), kernel, stride, padding, island scale (None: no island; 0.04: the clamp)
CASES = [
    ("flat7_s1", (1, 19, 7, 7), 3, 1, 1, 6 / 127),
    ("flat_s2_n2", (2, 13, 13, 11), 3, 2, 1, 0.05),  # 7 x 6 outputs from a 143-byte plane
    ("flat_nopad", (1, 17, 9, 8), 3, 1, 0, 6 / 127),  # 7 x 6 outputs, no padding
    ("flat2x2", (1, 5, 5, 6), 2, 1, 1, 6 / 127),  # 6 x 7 outputs, a 2-tap filter
    ("pad_s1", (1, 19, 13, 57), 3, 1, 1, 6 / 127),  # a partial last row block and column vector
    ("pad_s1_n2", (2, 21, 17, 50), 3, 1, 1, 0.05),
    ("pad_wide", (1, 7, 12, 70), 3, 1, 1, 6 / 127),  # rows of two 64-byte chunks, 5 column vectors
    ("pad_nopad", (1, 18, 20, 66), 3, 1, 0, 6 / 127),  # 64 outputs a row: full vectors only
    ("pad_clamp", (1, 11, 19, 60), 3, 1, 1, 0.04),  # the clamp island: the exact epilogue per row
    ("pad2x2", (1, 6, 9, 55), 2, 1, 1, 0.05),
    ("row_s2_n2", (2, 21, 35, 36), 3, 2, 1, 0.05),  # stride 2: the masked-load windows
    ("row_wide_s2", (1, 9, 17, 131), 3, 2, 1, 6 / 127),  # 66 outputs a row
    ("row_narrow", (1, 19, 23, 37), 3, 1, 1, 6 / 127),
    ("plain_n2", (2, 15, 9, 40), 3, 1, 1, None),  # no island: the VNNI unit
]
NAMES = [c[0] for c in CASES]


def dw_model(rng: np.random.Generator) -> Callable[..., tuple[Tensor, ...]]:
    params = []
    for _, (_, c, _, _), k, *_ in CASES:
        w = (rng.standard_normal((c, 1, 1, k, k)) * 0.3).astype(np.float32)
        sw = float(np.abs(w).max()) / 127
        b = rng.standard_normal((1, c, 1, 1)).astype(np.float32)
        params.append((Tensor(quantize(w, D.qint8(sw)), dtype=D.qint8(sw)),
                       Tensor(quantize(b, D.qint32(SX * sw)), dtype=D.qint32(float(SX * sw)))))  # fmt: skip

    def fn(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for (_, (_, c, _, _), _, s, p, island), x, (wq, bq) in zip(CASES, xs, params, strict=True):
            y = F.quantized.conv_bias_activation(
                x.astype(D.qint8(SX)), wq, bq, dtype=D.qint8(0.04), stride=s, padding=p, groups=c
            )
            if island is not None:
                y = F.relu6(y.astype("float32")).astype(D.qint8(island))
            outs.append(y.astype("float32"))
        return tuple(outs)

    return fn


def _params(shape: tuple[int, int, int, int], k: int, s: int, p: int) -> dict[str, int]:
    n, c, h, w = shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return {"n": n, "ic": c, "ih": h, "iw": w, "oh": oh, "ow": ow, "fh": k, "fw": k, "sh": s, "sw": s,
            "ph": p, "pw": p, "dh": 1, "dw": 1}  # fmt: skip


def test_each_case_takes_its_form() -> None:
    """The flat cases have flat windows, the pad cases a padded plane, the row cases neither."""
    for name, shape, k, s, p, _ in CASES:
        params = _params(shape, k, s, p)
        assert (_flat_plan(params) is not None) == name.startswith("flat"), name
        assert (_padded_plane(params) is not None) == name.startswith("pad"), name


def test_vbmi_depthwise_exact_threads_sanitized() -> None:
    require(TARGET)
    rng = np.random.default_rng(21)
    fn = dw_model(rng)
    # values beyond the int8 range saturate on input: -128 and 127 are exercised
    inputs = [(rng.standard_normal(c[1]) * 3).astype(np.float32) for c in CASES]
    one = compile_fn(fn, inputs, TARGET)
    source = one.source
    assert source.count("flat_idx[") >= 4 and "uint8_t pad[" in source
    assert "_mm_storeu_si128((__m128i*)(yp + " in source  # full vectors of the padded form
    assert "xm_q8_window16_vbmi(xp" in source  # the row cases
    assert "xm_q8_window8x2_vbmi(xp" in source  # rows of 16 k + 1..8 columns: the last ones two rows a vector
    got = one.run(inputs)
    want = run_module(one._stages["tensor"], inputs)  # type: ignore[arg-type]
    for name, g, w in zip(NAMES, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
        assert np.abs(w).max() > 0, name
    assert_threads_agree(fn, inputs, TARGET, one)
    check_sanitized(one, inputs, rtol=0, atol=0, scaled=False)


@pytest.mark.parametrize("name", ["flat7_s1", "pad_s1_n2"])
def test_vbmi_depthwise_every_input_value(name: str) -> None:
    """Inputs that take every int8 value (the flipped bytes 0..255) and a plane edge at the extremes."""
    require(TARGET)
    case = CASES[NAMES.index(name)]
    shape = case[1]
    values = np.arange(np.prod(shape)) % 256 - 128
    x = (values.reshape(shape) * SX).astype(np.float32)
    x[..., 0, :] = 127 * SX  # a border row of the largest value next to the padding
    rng = np.random.default_rng(4)
    fn = dw_model(rng)
    inputs = [x if c[0] == name else (rng.standard_normal(c[1])).astype(np.float32) for c in CASES]
    compiled = compile_fn(fn, inputs, TARGET)
    got = compiled.run(inputs)[NAMES.index(name)]
    want = run_module(compiled._stages["tensor"], inputs)[NAMES.index(name)]  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["x86-avx512-nchw88-vnni", TARGET])
def test_window_mode_vertical_dilation(target: str) -> None:
    """A depthwise filter dilated down its rows only (window mode: 3 taps a row): each output row
    reads input rows two apart, in the 16-column blocks and in the narrow last columns (20 = 16 + 4)."""
    require(target)
    rng = np.random.default_rng(9)
    c = 5
    w = (rng.standard_normal((c, 1, 1, 3, 3)) * 0.3).astype(np.float32)
    sw = float(np.abs(w).max()) / 127
    wq = Tensor(quantize(w, D.qint8(sw)), dtype=D.qint8(sw))

    def fn(x: Tensor) -> Tensor:
        y = F.quantized.conv_bias_activation(x.astype(D.qint8(SX)), wq, None, dtype=D.qint8(0.04),
                                             padding=(2, 1), dilation=(2, 1), groups=c)  # fmt: skip
        return F.relu6(y.astype("float32")).astype(D.qint8(6 / 127)).astype("float32")

    x = (rng.standard_normal((1, c, 12, 20)) * 3).astype(np.float32)
    compiled = compile_fn(fn, [x], target)
    assert "vnni_dww_" in compiled.source
    assert ("xm_q8_window8x2_vbmi(xp" in compiled.source) == (target == TARGET)
    want = run_module(compiled._stages["tensor"], [x])  # type: ignore[arg-type]
    for g, w_ in zip(compiled.run([x]), want, strict=True):
        np.testing.assert_array_equal(g, w_)
