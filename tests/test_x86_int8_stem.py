"""The AMX int8 first layer (``backends/c/templates/x86/x86_int8_stem.py``) and the AVX-512 quantize of a
model's float32 input (``x86_int8.TypeCvtQ8Vnni``) byte-exact against the reference interpreter:
MobileNetV2's 3x3 stride-2 stem shape and odd ones (other channel counts, output rows that no
16-pixel block fits, 64-pixel items that end mid-row and a ragged last item, batch 2, stride 1,
2-tap rows), with and without the ReLU6 island (its byte table on VBMI, its clamp form without),
on one and two threads, on the VNNI path a process refused tile data takes, and under ASan/UBSan.
Every case's stem reads the float32 input and quantizes it itself (the typecvt's call dropped), the
quantize's corner cases (NaN, infinities, -0.0, ties, saturation) in every input; where the int8
input has a second reader, or the row slots would not fit, the typecvt stays and the stem reads its
bytes. Each case's kernel choice is pinned; a deeper few-channel layer (5 channels) stays with
x86_amx. Skipped with the reason on CPUs without AMX-INT8 (or VBMI)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.templates.x86.x86_amx_os import AMX_ENV
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import (
    assert_instructions,
    assert_threads_agree,
    check_sanitized,
    compile_fn,
    kernel_families,
    quantized_conv_params,
    require,
)
from tests.test_x86_amx import conv_with_epilogue, every_third_channel_exact, require_amx

TARGET = "x86-avx512-vnni-amx-vbmi"  # the island's byte table
TARGET_NO_VBMI = "x86-avx512-vnni-amx"  # clamp islands only

SX = 1 / 40
# name, input (N, C, H, W), OC, kernel, stride, padding, epilogue: "island" (ReLU6 float island,
# table form), "clamp" (an island of equal scales: a clamp), "relu", "identity"
CASES = [
    ("mobilenet_stem_island", (1, 3, 38, 46), 32, 3, 2, 1, "island"),
    ("oc20_n2_relu", (2, 3, 33, 35), 20, 3, 2, 1, "relu"),  # 17 x 18: items end mid-row
    ("ic4_k4_oc7_identity", (1, 4, 21, 40), 7, 4, 2, 1, "identity"),  # 16 quads, one channel block
    ("ic4_s1_clamp", (1, 4, 17, 19), 33, 3, 1, 1, "clamp"),  # stride 1, three channel blocks
    ("ic2_k2_s2_nopad_island", (2, 2, 40, 37), 16, 2, 2, 0, "island"),  # 2-tap rows, 20 x 18
    ("ic4_s1_island", (1, 4, 18, 16), 40, 3, 1, 1, "island"),  # 16 wide: every block ends a row
]
NAMES = [c[0] for c in CASES]


def stem_model(rng: np.random.Generator) -> Callable[..., Any]:
    params = []
    for _, (_, ic, _, _), oc, k, *_ in CASES:
        params.append(quantized_conv_params(rng, (oc, ic, k, k), oc, SX))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        return tuple(
            conv_with_epilogue(x, wq, bq, SX, 0.04 + 0.01 * i, kind, stride=s, padding=p)
            for i, ((_, _, _, _, s, p, kind), x, (wq, bq)) in enumerate(zip(CASES, xs, params, strict=True))
        )

    return f


def stem_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    xs = [(rng.standard_normal(c[1]) * 2).astype(np.float32) for c in CASES]
    # the input quantize's corner cases: NaN (0), infinities, -0.0, ties of x / s (+-2.5 / 40 -> +-3),
    # values past the int8 range (saturated)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 2.5 * SX, -2.5 * SX, 0.5 * SX, 1e30, -1e30, 3.2])
    for x in xs:  # scattered over rows, channels and images (each row is quantized on its own)
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 8 * special.size, replace=False)] = np.tile(special, 8)
    return xs


@pytest.fixture(scope="module")
def model() -> tuple[Callable[..., Any], list[np.ndarray]]:
    rng = np.random.default_rng(5)
    return stem_model(rng), stem_inputs(rng)


def _check(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    for name, g, w in zip(NAMES, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=f"{name} ({what})")
        assert np.abs(w).max() > 0, name


def _stem_calls(compiled: Any) -> list[str]:
    return re.findall(r"kernel\.call @(amxstem_\w+)", compiled.ir("kernel-plan-memory"))


def _input_quantizes(compiled: Any) -> list[str]:
    return re.findall(r"kernel\.call @(typecvt_f32_to_q8\w*)", compiled.ir("kernel-plan-memory"))


@pytest.mark.parametrize("target", [TARGET, TARGET_NO_VBMI])
def test_stem_exact_on_one_and_two_threads(
    model: tuple[Callable[..., Any], list[np.ndarray]], target: str
) -> None:
    """Every case runs on the stem unit, the islands in its epilogue (on VBMI by the table unit; without
    it the clamp island narrowed with the others, the scale and float forms a vector at a time),
    byte-exact, and two threads give the same bytes as one."""
    require(target)
    require_amx()
    fn, inputs = model
    compiled = compile_fn(fn, inputs, target)
    calls = _stem_calls(compiled)
    assert len(calls) == len(CASES), calls
    assert sum(c.endswith("_lut") for c in calls) == (4 if target == TARGET else 0), calls
    assert sum("_relu6_" in c for c in calls) == 4, calls
    assert all("_f32in" in c for c in calls) and not _input_quantizes(compiled), calls
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    _check(compiled.run(inputs), want, target)
    assert_threads_agree(fn, inputs, target, compiled)
    assert_instructions(compiled, ("tdpbsud", "vpackssdw", "vpacksswb", "vpermd"))


@pytest.mark.parametrize("target", [TARGET, TARGET_NO_VBMI])
def test_stem_exact_channels_beside_affine_ones(
    model: tuple[Callable[..., Any], list[np.ndarray]], target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Channels on the exact epilogue (where ``x86_int8_requant`` finds no affine form; forced here for
    every third channel, which is always valid) beside affine ones: the table island's four vectors
    narrowed together, the other forms a vector at a time."""
    require(target)
    require_amx()

    every_third_channel_exact(monkeypatch)
    fn, inputs = model
    compiled = compile_fn(fn, inputs, target)
    stems = [line for line in compiled.ir("kernel-plan-memory").splitlines() if "kernel.def @amxstem" in line]
    assert len(stems) == len(CASES) and all(re.search(r"affine = \[-?\d+ : i64, 0 : i64\]", s) for s in stems)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    _check(compiled.run(inputs), want, f"{target}, exact channels")


def _single_stem(q: Tensor, relu6_island: bool = False) -> Tensor:
    """MobileNetV2's stem (24 channels here) on the int8 image ``q``, dequantized."""
    w = (np.random.default_rng(4).standard_normal((24, 3, 3, 3)) * 0.3).astype(np.float32)
    sw = float(np.abs(w).max()) / 127
    wq = Tensor(quantize(w, D.qint8(sw)), dtype=D.qint8(sw))
    y = F.quantized.conv_bias_activation(q, wq, None, dtype=D.qint8(0.05), stride=2, padding=1)
    if relu6_island:
        y = F.relu6(y.astype("float32")).astype(D.qint8(0.03))
    return y.astype("float32")


def test_a_second_reader_keeps_the_input_quantize() -> None:
    """Where the int8 input has another reader (here it is also an output), the typecvt runs and the
    stem reads its bytes; a stem beside it on another input still fuses its quantize."""
    require(TARGET)
    require_amx()
    rng = np.random.default_rng(8)

    def f(a: Tensor, b: Tensor) -> tuple[Tensor, ...]:
        qa = a.astype(D.qint8(SX))
        return _single_stem(qa), qa.astype("float32"), _single_stem(b.astype(D.qint8(SX)), relu6_island=True)

    inputs = [(rng.standard_normal((1, 3, 37, 41)) * 2).astype(np.float32) for _ in range(2)]
    for x in inputs:
        x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, -0.0, 2.5 * SX, 1e30]
    compiled = compile_fn(f, inputs, TARGET)
    calls = _stem_calls(compiled)
    assert len(calls) == 2 and ["_f32in" in c for c in calls] == [False, True], calls
    assert len(_input_quantizes(compiled)) == 1
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for got, expected in zip(compiled.run(inputs), want, strict=True):
        np.testing.assert_array_equal(got, np.asarray(expected, np.float32))


def test_rows_past_the_slots_keep_the_input_quantize() -> None:
    """An image too wide for the row slots on a thread's stack: the typecvt runs, the stem reads it."""
    require(TARGET)
    require_amx()
    x = (np.random.default_rng(9).standard_normal((1, 3, 5, 1100)) * 2).astype(np.float32)
    compiled = compile_fn(lambda t: _single_stem(t.astype(D.qint8(SX))), [x], TARGET)
    calls = _stem_calls(compiled)
    assert len(calls) == 1 and "_f32in" not in calls[0] and len(_input_quantizes(compiled)) == 1, calls
    want = run_module(compiled._stages["tensor"], [x])  # type: ignore[arg-type]
    np.testing.assert_array_equal(compiled.run([x])[0], np.asarray(want[0], np.float32))


def test_deeper_few_channel_layers_stay_with_the_amx_convolution() -> None:
    """Five input channels are no image's: ``x86_amx``'s convolution (and its island) keeps them."""
    require(TARGET)
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((8, 5, 3, 3)) * 0.3).astype(np.float32)
    sw = float(np.abs(w).max()) / 127
    wq = Tensor(quantize(w, D.qint8(sw)), dtype=D.qint8(sw))

    def f(x: Tensor) -> Tensor:
        y = F.quantized.conv_bias_activation(x.astype(D.qint8(SX)), wq, None, dtype=D.qint8(0.05), padding=1)
        return y.astype("float32")

    compiled = compile_fn(f, [rng.standard_normal((1, 5, 9, 20)).astype(np.float32)], TARGET)
    assert ("conv2d_q8_amx", "amx") in kernel_families(compiled) and not _stem_calls(compiled)


def test_stem_vnni_path_gives_the_same_bytes(
    model: tuple[Callable[..., Any], list[np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process Linux refuses tile data (``XMGE_AMX=0``) computes the same integers by ``vpdpbusd``
    on the same tiles in memory."""
    require(TARGET)
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET, threads=2)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    monkeypatch.setenv(AMX_ENV, "0")  # the runner is a new process: it reads the variable afresh
    _check(compiled.run_runner(inputs), want, "VNNI path")


def test_stem_sanitized(model: tuple[Callable[..., Any], list[np.ndarray]]) -> None:
    require(TARGET)
    require_amx()
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET)
    check_sanitized(compiled, inputs, rtol=0, atol=0, scaled=False)


@pytest.mark.parametrize("size", [1, 17, 64, 1000, 4099])
def test_input_quantize_exact(size: int) -> None:
    """The float32 -> int8 quantize (64 values a step, a masked tail) on sizes around its steps, with
    NaN, infinities, -0.0, exact ties and saturating values."""
    require("x86-avx512-nchw88-vnni")
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 3).astype(np.float32)
    special = np.array([np.nan, -0.0, 2.5 * SX, -2.5 * SX, 1e30, -np.inf, 0.5 * SX, -0.5 * SX], np.float32)
    x[: min(size, special.size)] = special[: min(size, special.size)]

    def f(t: Tensor) -> Tensor:
        return t.astype(D.qint8(SX)).astype("float32")

    compiled = compile_fn(f, [x], "x86-avx512-nchw88-vnni")
    assert ("typecvt", "avx512vnni") in kernel_families(compiled)
    want = run_module(compiled._stages["tensor"], [x])  # type: ignore[arg-type]
    np.testing.assert_array_equal(compiled.run([x])[0], np.asarray(want[0], np.float32))
