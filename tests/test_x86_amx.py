"""The AMX-INT8 kernels (``backends/c/templates/x86/x86_amx.py``, ``x86_amx_matmul.py``) exactly against
the reference interpreter: the three ways of forming B tiles (the im2col matrix; the phase planes
read per filter tap, any stride, one long pixel run over the rows; the column-expanded rows of a
few-channel convolution) on odd shapes (channel counts that fill no tile, rows that fill no
16-column block, K that fills no 64-byte tile row, an odd number of pixel blocks), stride 2, groups,
dilation, batches, on one and two threads; the pointwise convolutions' 64-pixel items with and
without the ReLU6 island and with exact-epilogue channels beside affine ones; int8 matrix products
with a constant right operand; the
same bytes from the path a process takes when Linux refuses it tile data (forced with
``XMGE_AMX=0``), and under ASan/UBSan. Skipped with the reason where the CPU lacks AMX-INT8."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.templates.x86.x86_amx import k_step
from backends.c.templates.x86.x86_amx_os import AMX_ENV, amx_permitted
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import (
    assert_instructions,
    assert_threads_agree,
    compile_fn,
    kernel_families,
    quantized_conv_params,
    require,
)

TARGET = "x86-avx512-vnni-amx"

# name, input (N, C, H, W), OC, kernel, stride, padding, dilation, groups, B-tile mode
CASES = [
    ("direct3x3_odd", (1, 37, 9, 21), 19, 3, 1, 1, 1, 1, "direct"),
    ("direct3x3_wide_oc", (2, 64, 7, 33), 40, 3, 1, 1, 1, 1, "direct"),
    ("direct5x5_dilated", (1, 70, 11, 12), 33, 5, 1, 4, 2, 1, "direct"),
    ("direct_group2_nopad", (1, 66, 8, 18), 34, 3, 1, 0, 1, 2, "direct"),
    ("im2col3x3_few_channels", (1, 13, 9, 11), 19, 3, 1, 1, 1, 1, "im2col"),
    ("im2col7x7_s2", (1, 3, 23, 21), 17, 7, 2, 3, 1, 1, "im2col"),
    ("pointwise_n2", (2, 70, 5, 7), 35, 1, 1, 0, 1, 1, "im2col"),
    ("pointwise_s2", (1, 40, 9, 9), 6, 1, 2, 0, 1, 1, "direct"),
    ("im2col3x3_s2_group3", (1, 48, 13, 10), 33, 3, 2, 1, 1, 3, "im2col"),
    ("direct3x3_s2_odd", (2, 67, 15, 13), 45, 3, 2, 1, 1, 1, "direct"),
    ("direct3x3_7wide", (1, 64, 7, 7), 48, 3, 1, 1, 1, 1, "direct"),
    ("direct5x5_s2_group2_dilated", (1, 96, 17, 14), 34, 5, 2, 3, 2, 2, "direct"),
    ("rows7x7_s2_stem", (1, 3, 41, 63), 20, 7, 2, 3, 1, 1, "rows"),
    ("rows5x5_n2", (2, 13, 17, 47), 18, 5, 1, 2, 1, 1, "rows"),
    ("rows3x3_group3", (1, 24, 12, 31), 33, 3, 1, 1, 1, 3, "rows"),
]


def require_amx() -> None:
    require(TARGET)
    if not amx_permitted():
        pytest.skip(
            "Linux refuses this process AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM) or XMGE_AMX=0: "
            "only the VNNI path runs here (test_vnni_path_gives_the_same_bytes covers it)"
        )


def conv_with_epilogue(
    x: Tensor, wq: Tensor, bq: Tensor, sx: float, s_out: float, kind: str, **conv: Any
) -> Tensor:
    """A quantized convolution of ``x`` (quantized at ``sx``) to ``s_out`` with the epilogue ``kind``:
    "relu", "identity", "island" (the ReLU6 float island PTQ leaves in MobileNetV2, quantized at
    another scale: its table or float forms) or "clamp" (an island of equal scales: a clamp), as
    float32."""
    y = F.quantized.conv_bias_activation(
        x.astype(D.qint8(sx)), wq, bq, dtype=D.qint8(s_out),
        nonlinear_mode="relu" if kind == "relu" else "identity", **conv,
    )  # fmt: skip
    if kind in ("island", "clamp"):  # dequantize, RELU6, quantize
        y = F.relu6(y.astype("float32")).astype(D.qint8(s_out if kind == "clamp" else 0.027))
    return y.astype("float32")


def amx_model(rng: np.random.Generator) -> Callable[..., Any]:
    sx = 1 / 40
    params = []
    for _, (_, ic, _, _), oc, k, *_rest, g, _mode in CASES:
        shape = (oc, ic, k, k) if g == 1 else (g, oc // g, ic // g, k, k)
        params.append(quantized_conv_params(rng, shape, oc, sx))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, ((_, _, _, _, s, p, d, g, _), x, (wq, bq)) in enumerate(zip(CASES, xs, params, strict=True)):
            xq = x.astype(D.qint8(sx))
            if i % 3 == 2:  # no bias, identity: the accumulator times s_acc / s_out
                y = F.quantized.conv_bias_activation(
                    xq, wq, None, dtype=D.qint8(0.3), stride=s, padding=p, dilation=d, groups=g
                )
            else:  # bias, RELU or identity: the float post-process
                y = F.quantized.conv_bias_activation(
                    xq, wq, bq, dtype=D.qint8(0.05 + 0.01 * i), stride=s, padding=p, dilation=d, groups=g,
                    nonlinear_mode="relu" if i % 3 == 0 else "identity",
                )  # fmt: skip
            outs.append(y.astype("float32"))
        return tuple(outs)

    return f


@pytest.fixture(scope="module")
def model() -> tuple[Callable[..., Any], list[np.ndarray]]:
    rng = np.random.default_rng(14)
    fn = amx_model(rng)
    # values beyond the int8 range saturate on input: -128 and 127 are exercised
    return fn, [(rng.standard_normal(c[1]) * 2).astype(np.float32) for c in CASES]


def _check(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    for (name, *_), g, w in zip(CASES, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=f"{name} ({what})")
        assert np.abs(w).max() > 0, name


def test_amx_tiles_cover_every_mode(model: tuple[Callable[..., Any], list[np.ndarray]]) -> None:
    """Every case is an AMX convolution, in the B-tile mode the table names (no case silently falls to
    the VNNI or portable kernel), and the library holds the tile instructions."""
    require(TARGET)
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET)
    kinds = kernel_families(compiled)
    assert ("conv2d_q8_amx", "amx") in kinds, sorted(kinds)
    assert not {f for f, _ in kinds} & {"conv2d_q8_x86", "conv2d_q8"}, sorted(kinds)
    modes = re.findall(r'"conv2d_q8_amx" \["amx"\] \{[^}]*mode = "(\w+)"', compiled.ir("kernel-plan-memory"))
    assert sorted(modes) == sorted(c[-1] for c in CASES), modes
    assert_instructions(compiled, ("ldtilecfg", "tdpbsud", "tilestored", "tilerelease"))


@pytest.mark.parametrize("threads", [1, 2])
def test_amx_int8_convolutions_exact(
    model: tuple[Callable[..., Any], list[np.ndarray]], threads: int
) -> None:
    require_amx()
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    _check(compiled.run(inputs), want, f"AMX, {threads} thread(s)")


def test_vnni_path_gives_the_same_bytes(
    model: tuple[Callable[..., Any], list[np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path a process without tile data takes (the model asks Linux once; ``XMGE_AMX=0`` makes
    it take the refusal) computes the same integers on the same packed operands: the same outputs."""
    require(TARGET)
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET, threads=2)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    monkeypatch.setenv(AMX_ENV, "0")  # the runner is a new process: it reads the variable afresh
    _check(compiled.run_runner(inputs), want, "VNNI path")
    assert not amx_permitted()


def test_amx_int8_convolutions_sanitized(model: tuple[Callable[..., Any], list[np.ndarray]]) -> None:
    require_amx()
    fn, inputs = model
    compiled = compile_fn(fn, inputs, TARGET)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    _check(compiled.run_runner(inputs, sanitize=True), want, "ASan/UBSan")


def test_amx_tie_heavy_model_bit_exact() -> None:
    """tests/test_int8_kernels_exact.py's model, whose data sit on rounding ties, with its dense
    convolutions on AMX tiles: every int8 value equals the reference's."""
    from tests.test_int8_kernels_exact import _inputs, _params
    from tests.test_int8_kernels_exact import int8_model as tie_model

    require_amx()
    rng = np.random.default_rng(8)
    params, inputs = _params(rng), _inputs(rng)
    compiled = compile_fn(tie_model(params), inputs, TARGET, threads=2)
    assert ("conv2d_q8_amx", "amx") in kernel_families(compiled)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for i, (g, w) in enumerate(zip(compiled.run(inputs), want, strict=True)):
        np.testing.assert_array_equal(g, np.asarray(w), err_msg=f"output {i}")


def test_amx_target_words() -> None:
    from backends.targets import TargetError, parse_target

    assert parse_target("x86-avx512-vnni-amx").isas[:2] == ("amx", "avx512vnni")
    assert parse_target("x86-avx512-nchw88-amx").isas[0] == "amx"
    with pytest.raises(TargetError, match="avx512"):
        parse_target("x86-avx2-amx")


def test_host_target_names_amx_only_when_permitted(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.targets import cpu_flags, host_target

    if not {"amx_tile", "amx_int8", "avx512_vnni"} <= cpu_flags():
        pytest.skip("this CPU has no AMX-INT8")
    assert ("amx" in host_target().features) == amx_permitted()
    monkeypatch.setenv(AMX_ENV, "0")
    assert "amx" not in host_target().features


# name, M, K, N, transpose_a, transpose_b: a classifier head (one row), odd sizes that fill no tile
MATMULS = [
    ("head", 1, 512, 1000, False, True),
    ("odd", 37, 150, 70, False, False),
    ("odd_ta", 19, 65, 33, True, True),
]


def matmul_model(rng: np.random.Generator) -> tuple[Callable[..., Any], list[np.ndarray]]:
    sx, sw = 1 / 20, 1 / 50
    weights = []
    for _, _, k, n, _, tb in MATMULS:
        w = rng.integers(-128, 128, (n, k) if tb else (k, n)).astype(np.int8)
        weights.append(Tensor(w.astype(np.float32) * sw, dtype=D.qint8(sw)))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for (_, _, _, _, ta, tb), x, wq in zip(MATMULS, xs, weights, strict=True):
            y = F.matmul(x.astype(D.qint8(sx)), wq, transpose_a=ta, transpose_b=tb)
            outs.append(y.astype(D.qint8(0.75)).astype("float32"))  # requantized to int8
        return tuple(outs)

    inputs = [(rng.standard_normal((k, m) if ta else (m, k)) * 3).astype(np.float32)
              for _, m, k, _, ta, _ in MATMULS]  # fmt: skip
    return f, inputs


def test_amx_int8_matmul_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """int8 matrix products with a constant right operand on AMX tiles (tdpbssd, one and two
    threads) and on the path without tile data: the reference's integers."""
    require(TARGET)
    fn, inputs = matmul_model(np.random.default_rng(5))
    for threads in (1, 2):
        compiled = compile_fn(fn, inputs, TARGET, threads=threads)
        assert ("matmul_q8_amx", "amx") in kernel_families(compiled)
        want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
        if amx_permitted():
            for (name, *_), g, w in zip(MATMULS, compiled.run(inputs), want, strict=True):
                np.testing.assert_array_equal(g, w, err_msg=f"{name} (AMX, {threads} threads)")
    monkeypatch.setenv(AMX_ENV, "0")
    for (name, *_), g, w in zip(MATMULS, compiled.run_runner(inputs), want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=f"{name} (no tile data)")
        assert np.abs(w).max() > 0, name


# The pointwise convolutions' 64-pixel work items (``Conv2dQ8Amx``'s ``wide`` im2col mode, MobileNetV2's
# 1x1 layers): name, input (N, C, H, W), OC, epilogue ("island": the ReLU6 float island, its byte
# table on VBMI; "clamp": an island of equal scales; "relu"; "identity"). Channel counts that fill no
# tile, pixel counts that fill no item (132 = 2 * 64 + 4 skips the last item's second pass; 784 ends
# 16 pixels into an item; 15 pixels, one part-filled item), K that fills no quad (150) and K steps
# (``k_step``) of 36, 48, 52, 56, 20 bytes (70, 150 and 160 fill no step), batch 2.
POINTWISE = [
    ("pw_island_oc35", (1, 70, 12, 11), 35, "island"),
    ("pw_clamp_n2", (2, 96, 9, 9), 50, "clamp"),
    ("pw_relu_k150", (1, 150, 7, 7), 20, "relu"),
    ("pw_identity_28x28", (1, 64, 28, 28), 40, "identity"),
    ("pw_island_tiny_n2", (2, 72, 3, 5), 26, "island"),
    ("pw_island_k160_n2", (2, 160, 9, 11), 37, "island"),  # K step 56: K 168, 99 pixels
    ("pw_relu_k20_oc64", (1, 20, 10, 13), 64, "relu"),  # one K step of 20 (B tiles of 5 rows)
]
PW_TARGET = "x86-avx512-vnni-amx-vbmi"  # the island's byte table; TARGET: its clamp and float forms


def test_k_step_fits_the_layer() -> None:
    """The im2col mode's K step: the fewest tile products that 64-byte steps take, each step the least
    multiple of 4 covering K (MobileNetV2's K 96 and 160 no longer padded to 128 and 192)."""
    steps = {k: k_step(k) for k in (20, 64, 70, 96, 150, 160, 576, 960)}
    assert steps == {20: 20, 64: 64, 70: 36, 96: 48, 150: 52, 160: 56, 576: 64, 960: 64}, steps


def pointwise_model(rng: np.random.Generator) -> tuple[Callable[..., Any], list[np.ndarray]]:
    sx = 1 / 40
    params = []
    for _, (_, ic, _, _), oc, _ in POINTWISE:
        params.append(quantized_conv_params(rng, (oc, ic, 1, 1), oc, sx))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        return tuple(
            conv_with_epilogue(x, wq, bq, sx, 0.04 + 0.01 * i, kind)
            for i, ((_, _, _, kind), x, (wq, bq)) in enumerate(zip(POINTWISE, xs, params, strict=True))
        )

    return f, [(rng.standard_normal(c[1]) * 2).astype(np.float32) for c in POINTWISE]


@pytest.fixture(scope="module")
def pointwise() -> tuple[Callable[..., Any], list[np.ndarray]]:
    return pointwise_model(np.random.default_rng(96))


def _check_pointwise(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    for (name, *_), g, w in zip(POINTWISE, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=f"{name} ({what})")
        assert np.abs(w).max() > 0, name


def _wide_kernels(compiled: Any) -> list[str]:
    """The AMX convolutions' (and their islands') kernel definitions in the 64-pixel pointwise mode."""
    lines = compiled.ir("kernel-plan-memory").splitlines()
    defs = [line for line in lines if "kernel.def @amx_conv2d" in line]
    assert len(defs) == len(POINTWISE), defs
    return [d for d in defs if re.search(r"wide = (1|true)\b", d)]


def every_third_channel_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Channels on the exact epilogue beside affine ones: ``x86_int8_requant``'s affine form withheld
    from every third channel (always valid: the exact epilogue serves any channel)."""
    from backends.c.templates.x86 import x86_int8
    from backends.c.templates.x86.x86_int8_requant import AffineRequant, affine_requant

    def every_third_exact(*args: Any) -> AffineRequant | None:
        got = affine_requant(*args)
        if got is None:
            return None
        ok = got.ok.copy()
        ok[::3] = False
        return AffineRequant(np.where(ok, got.a, 0).astype(np.float32), got.b, ok, got.lo)

    monkeypatch.setattr(x86_int8, "affine_requant", every_third_exact)


@pytest.mark.parametrize("exact_channels", [False, True])
@pytest.mark.parametrize("target", [PW_TARGET, TARGET])
def test_amx_pointwise_64_pixel_items_exact(
    pointwise: tuple[Callable[..., Any], list[np.ndarray]],
    target: str,
    exact_channels: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every pointwise case on the AMX convolution's 64-pixel items (four vectors of a channel narrowed
    together, one 64-byte store), byte-exact with and without the island (its table on VBMI, else its
    clamp and float forms), with exact-epilogue channels beside affine ones, and two threads give the
    bytes one does."""
    require(target)
    require_amx()
    if exact_channels:
        every_third_channel_exact(monkeypatch)
    fn, inputs = pointwise
    compiled = compile_fn(fn, inputs, target)
    assert len(_wide_kernels(compiled)) == len(POINTWISE)
    if exact_channels:
        assert re.search(r"affine = \[-?\d+ : i64, 0 : i64\]", compiled.ir("kernel-plan-memory"))
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    _check_pointwise(compiled.run(inputs), want, f"{target}, exact channels {exact_channels}")
    assert_threads_agree(fn, inputs, target, compiled)
    assert_instructions(compiled, ("tdpbsud", "vpackssdw", "vpacksswb"))
    configured = sorted(map(int, re.findall(r"use_amx\) xm_amx_configure_k\((\d+)\);", compiled.source)))
    assert configured == sorted(k_step(c[1][1]) for c in POINTWISE), configured


def test_amx_pointwise_vnni_path_and_sanitized(
    pointwise: tuple[Callable[..., Any], list[np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 64-pixel items under ASan/UBSan, and on the path without tile data (``XMGE_AMX=0``): the
    same bytes."""
    require(PW_TARGET)
    fn, inputs = pointwise
    compiled = compile_fn(fn, inputs, PW_TARGET, threads=2)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    if amx_permitted():
        _check_pointwise(compiled.run_runner(inputs, sanitize=True), want, "ASan/UBSan")
    monkeypatch.setenv(AMX_ENV, "0")  # the runner is a new process: it reads the variable afresh
    _check_pointwise(compiled.run_runner(inputs), want, "VNNI path")
