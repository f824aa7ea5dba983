"""``+bf16``: float32 convolutions and matrix products on AMX-BF16 tiles
(``backends/c/templates/x86/x86_amx_bf16.py``). The contract: inputs rounded to bfloat16 (to nearest
even), exact products, float32 sums, float32 epilogue. Each output is checked twice: against that
contract computed in float64 by PyTorch on the rounded inputs (bound 1e-5 of the output's scale:
only the order of float32 sums differs), and against float32 (the reference interpreter; bound
1e-2 relative L2 error, the stated cost of bfloat16 inputs). Odd shapes (channels filling no tile, K
filling no tile row, rows spanning 16-pixel blocks), both B-tile modes, groups, dilation, batch 2,
fused bias / residual / ReLU / ReLU6, one and two threads, the AVX512-BF16 path
(``XMGE_AMX=0``) and ASan/UBSan. Skipped with the reason where the CPU lacks AMX-BF16."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import compiler.functional as F
from backends.c.templates.x86.x86_amx_bf16 import round_bfloat16, to_bfloat16
from backends.c.templates.x86.x86_amx_os import AMX_ENV, amx_permitted
from backends.targets import cpu_flags
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import assert_instructions, compile_fn, kernel_families, require

TARGET = "x86-avx512-vnni-amx+bf16"
CONTRACT_BOUND = 1e-5  # vs the bfloat16-input contract in float64, relative to max |output|
FLOAT32_BOUND = 1e-2  # vs float32: relative L2 error

# name, input (N, C, H, W), OC, kernel, stride, padding, dilation, groups, epilogue, B-tile mode
CONV_CASES = [
    ("direct3x3_odd", (1, 37, 9, 21), 19, 3, 1, 1, 1, 1, "relu", "direct"),
    ("direct3x3_7x7_n2_residual", (2, 64, 7, 7), 40, 3, 1, 1, 1, 1, "residual_relu", "direct"),
    ("direct5x5_dilated", (1, 70, 11, 12), 33, 5, 1, 4, 2, 1, "relu6", "direct"),
    ("direct_group2_nopad", (1, 66, 8, 18), 34, 3, 1, 0, 1, 2, "bias", "direct"),
    ("im2col7x7_s2_few_channels", (1, 3, 23, 21), 17, 7, 2, 3, 1, 1, "relu", "im2col"),
    ("pointwise_n2_residual", (2, 70, 5, 7), 35, 1, 1, 0, 1, 1, "residual", "im2col"),
    ("im2col3x3_s2_group3", (1, 48, 13, 10), 33, 3, 2, 1, 1, 3, "bias", "im2col"),
    # rows wide enough for the im2col's 16-column vector copies (stride 1 and 2), edges both sides
    ("im2col7x7_s2_wide_rows", (1, 3, 9, 75), 20, 7, 2, 3, 1, 1, "relu", "im2col"),
    ("im2col3x3_s1_wide_rows", (1, 5, 6, 43), 18, 3, 1, 1, 1, 1, "bias", "im2col"),
]


def require_amx_bf16() -> None:
    require(TARGET)
    if not amx_permitted():
        pytest.skip(
            "Linux refuses this process AMX tile data or XMGE_AMX=0: only the AVX512-BF16 path runs "
            "here (test_bf16_fallback_path covers it)"
        )


def require_avx512_bf16(target: str) -> None:
    """Skip unless this CPU runs ``vdpbf16ps`` and ``target``."""
    if "avx512_bf16" not in cpu_flags():
        pytest.skip(f"this CPU has no avx512_bf16 (vdpbf16ps): {target} cannot run here")
    require(target)


def _conv_model(
    rng: np.random.Generator, cases: list[tuple[Any, ...]] = CONV_CASES
) -> tuple[Callable[..., Any], list[np.ndarray], list[Any]]:
    """One model computing every convolution of ``cases`` (rows as :data:`CONV_CASES`'), its inputs
    (an input and a residual addend per case) and the filters and biases."""
    params = []
    for _, (_, ic, _, _), oc, k, *_r, g, _epi, _mode in cases:
        w = (rng.standard_normal((oc, ic // g, k, k)) * 0.2).astype(np.float32)
        params.append((w, rng.standard_normal((1, oc, 1, 1)).astype(np.float32)))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for case, x, res, (w, b) in zip(cases, xs[::2], xs[1::2], params, strict=True):
            _, _, oc, _, s, p, d, g, epi, _ = case
            wt = Tensor(w.reshape(g, oc // g, *w.shape[1:]) if g > 1 else w)
            y = F.conv2d(x, wt, Tensor(b), stride=s, padding=p, dilation=d, groups=g)
            if "residual" in epi:
                y = y + res
            y = F.relu(y) if "relu" in epi and "relu6" not in epi else F.relu6(y) if "relu6" in epi else y
            outs.append(y)
        return tuple(outs)

    inputs = []
    for _, shape, oc, k, s, p, d, _g, _epi, _mode in cases:
        oh = (shape[2] + 2 * p - d * (k - 1) - 1) // s + 1
        ow = (shape[3] + 2 * p - d * (k - 1) - 1) // s + 1
        inputs += [rng.standard_normal(shape).astype(np.float32),
                   rng.standard_normal((shape[0], oc, oh, ow)).astype(np.float32)]  # fmt: skip
    return f, inputs, params


def _conv_contract(
    inputs: list[np.ndarray], params: list[Any], cases: list[tuple[Any, ...]] = CONV_CASES
) -> list[np.ndarray]:
    """The +bf16 contract in float64: rounded activations and filters, exact sums, the epilogue."""
    wants = []
    for case, x, res, (w, b) in zip(cases, inputs[::2], inputs[1::2], params, strict=True):
        _, _, _, _, s, p, d, g, epi, _ = case
        t = torch.nn.functional.conv2d(
            torch.tensor(round_bfloat16(x), dtype=torch.float64),
            torch.tensor(round_bfloat16(w), dtype=torch.float64),
            torch.tensor(b.reshape(-1), dtype=torch.float64), stride=s, padding=p, dilation=d, groups=g,
        ).numpy()  # fmt: skip
        if "residual" in epi:
            t = t + res
        if "relu6" in epi:
            t = np.clip(t, 0, 6)
        elif "relu" in epi:
            t = np.maximum(t, 0)
        wants.append(t)
    return wants


@pytest.fixture(scope="module")
def conv() -> tuple[Callable[..., Any], list[np.ndarray], list[Any]]:
    return _conv_model(np.random.default_rng(14))


def _check(names: list[str], got: list[np.ndarray], contract: list[np.ndarray], f32: list[Any]) -> None:
    for name, g, c, w in zip(names, got, contract, f32, strict=True):
        scale = float(np.abs(c).max())
        assert scale > 0, name
        assert np.abs(g - c).max() <= CONTRACT_BOUND * scale, (name, np.abs(g - c).max() / scale)
        w = np.asarray(w)
        assert np.linalg.norm(g - w) <= FLOAT32_BOUND * np.linalg.norm(w), name
        assert not np.array_equal(g, np.asarray(w)), f"{name}: no bfloat16 rounding happened"


def test_bf16_conv_families_and_modes(conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]]) -> None:
    """Every convolution is an AMX-BF16 one in the B-tile mode the table names, its epilogue fused
    (no float32 elementwise kernel is left), and the library holds the tile instructions."""

    require(TARGET)
    fn, inputs, _ = conv
    compiled = compile_fn(fn, inputs, TARGET)
    plan = compiled.ir("kernel-plan-memory")
    assert {f for f, _ in kernel_families(compiled)} <= {"conv2d_bf16_amx", "copy"}, kernel_families(compiled)
    modes = re.findall(r'"conv2d_bf16_amx" \["amxbf16"\] \{[^}]*mode = "(\w+)"', plan)
    assert sorted(modes) == sorted(c[-1] for c in CONV_CASES), modes
    assert_instructions(compiled, ("tdpbf16ps", "vcvtne2ps2bf16", "vdpbf16ps", "tilerelease"))


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_convolutions(
    conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]], threads: int
) -> None:
    require_amx_bf16()
    fn, inputs, params = conv
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    f32 = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    names = [c[0] for c in CONV_CASES]
    _check(names, compiled.run(inputs), _conv_contract(inputs, params), f32)


def test_bf16_fallback_path(
    conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process refused tile data (``XMGE_AMX=0``) multiplies the same bfloat16 operands with
    vdpbf16ps: the same contract."""
    require(TARGET)
    fn, inputs, params = conv
    compiled = compile_fn(fn, inputs, TARGET, threads=2)
    f32 = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    monkeypatch.setenv(AMX_ENV, "0")
    names = [c[0] for c in CONV_CASES]
    _check(names, compiled.run_runner(inputs), _conv_contract(inputs, params), f32)


def test_bf16_convolutions_sanitized(conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]]) -> None:
    require_amx_bf16()
    fn, inputs, params = conv
    compiled = compile_fn(fn, inputs, TARGET)
    f32 = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    names = [c[0] for c in CONV_CASES]
    _check(names, compiled.run_runner(inputs, sanitize=True), _conv_contract(inputs, params), f32)


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_matrix_products(threads: int) -> None:
    """Linear layers (constant B packed at compile time, bias + ReLU fused, transposed B), a run-time
    batched product, transposed A and B."""
    require_amx_bf16()
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((70, 45)) * 0.2).astype(np.float32)
    b1 = rng.standard_normal((45,)).astype(np.float32)
    w2 = (rng.standard_normal((33, 70)) * 0.2).astype(np.float32)

    def f(x: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, ...]:
        return (
            F.relu(F.matmul(x, Tensor(w1)) + Tensor(b1)),
            F.matmul(x, Tensor(w2), transpose_b=True),
            F.matmul(a, b),
            F.matmul(a.transpose(0, 2, 1), b.transpose(0, 2, 1), transpose_a=True, transpose_b=True),
        )

    x = rng.standard_normal((3, 70)).astype(np.float32)
    a = rng.standard_normal((2, 37, 67)).astype(np.float32)
    b = rng.standard_normal((2, 67, 19)).astype(np.float32)
    compiled = compile_fn(f, [x, a, b], TARGET, threads=threads)
    families = kernel_families(compiled)
    assert {f for f, _ in families} <= {"matmul_bf16_amx", "copy", "dimshuffle"}, families
    f32 = run_module(compiled._stages["tensor"], [x, a, b])  # type: ignore[arg-type]
    xr, ar, br = (round_bfloat16(v).astype(np.float64) for v in (x, a, b))
    contract = [np.maximum(xr @ round_bfloat16(w1) + b1, 0), xr @ round_bfloat16(w2).T, ar @ br, ar @ br]
    _check(["linear_relu", "linear_tb", "batched", "batched_ta_tb"], compiled.run([x, a, b]), contract, f32)


def test_to_bfloat16_rounds_to_nearest_even() -> None:
    """The compile-time rounding of the filters is PyTorch's float32 -> bfloat16 (nearest even) on
    normal numbers, ties included; denormals flush to a signed zero as vcvtne2ps2bf16 does."""
    rng = np.random.default_rng(5)
    values = (rng.standard_normal(4096) * 10.0 ** rng.integers(-30, 30, 4096)).astype(np.float32)
    ties = ((0x3F800000 + (np.arange(64, dtype=np.uint32) << 16)) | 0x8000).astype(np.uint32).view(np.float32)
    values = np.concatenate([values, ties, -ties])
    want = torch.tensor(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(to_bfloat16(values), want)
    denormal = np.array([1e-40, -1e-40], np.float32)
    np.testing.assert_array_equal(to_bfloat16(denormal), np.array([0, 0x8000], np.uint16))


def test_bf16_target_words() -> None:
    from backends.targets import TargetError, parse_target

    assert parse_target("x86-avx512-vnni-amx+bf16").isas[:2] == ("amxbf16", "amx")
    assert "amxbf16" not in parse_target("x86-avx512-vnni-amx").isas
    # without amx, +bf16 is the AVX512-BF16 path (tests/test_x86_bf16_avx512.py)
    assert parse_target("x86-avx512-vnni+bf16").isas[0] == "avx512bf16"
    with pytest.raises(TargetError, match="plain NCHW"):
        parse_target("x86-avx512-nchw88-amx+bf16")
