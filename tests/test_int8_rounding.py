"""xmge's int8 reference is bit-exact with MegEngine.

tests/data/int8_mge holds int8 MobileNetV2-style nets quantized with MegEngine 1.13's own API
(quantize_qat -> calibration -> quantize -> trace -> dump) and the values MegEngine computes on them:
the final float output and int8 intermediates of every kind (ConvBias with and without ReLU, dense
and depthwise, QADD, QFUSE_ADD_RELU, QH_SWISH, QFUSE_ADD_H_SWISH, QMUL, Concat of different scales,
average and max pooling, QuantizedS32 -> S8 TypeCvt, float -> qint8 TypeCvt). Every value must be
equal, not close.
"""

from __future__ import annotations

import os
import warnings
from functools import cache

import numpy as np
import pytest

import compiler as xm
from backends.c.cross import toolchain_problem
from compiler.driver.compile import CompiledModel, EmulationWarning
from compiler.lite import Network
from semantics.quant_kernels import hswish_x86, round_x86
from tests.codegen_util import require

DATA = os.path.join(os.path.dirname(__file__), "data", "int8_mge")
CASES = sorted(d for d in os.listdir(DATA) if os.path.isdir(os.path.join(DATA, d)))


def _case(name: str) -> tuple[str, np.ndarray, dict[str, np.ndarray]]:
    folder = os.path.join(DATA, name)
    x = np.load(os.path.join(folder, "inputs.npz"))["data"]
    expected = dict(np.load(os.path.join(folder, "expected_plain.npz")))
    return os.path.join(folder, "plain.mge"), x, expected


@cache
def _compiled(case: str, target: str) -> CompiledModel:
    """``case``'s plain.mge compiled for ``target``, once for the tests that only run it."""
    return xm.compile(_case(case)[0], target=target)


def _assert_bit_exact(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape, what
    if want.dtype.kind == "f":
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint32), want.view(np.uint32)), what
    else:
        diff = got.astype(np.int64) - want.astype(np.int64)
        bad = np.count_nonzero(diff)
        assert bad == 0, f"{what}: {bad} of {diff.size} values differ (max {np.abs(diff).max()} steps)"


def test_cases_present() -> None:
    assert len(CASES) >= 3


@pytest.mark.parametrize("case", CASES)
def test_reference_matches_megengine_bit_exactly(case: str) -> None:
    path, x, expected = _case(case)
    got = Network(path)(x)
    assert set(got) == set(expected)
    for name, want in expected.items():
        _assert_bit_exact(got[name], want, f"{case}: {name}")


@pytest.mark.parametrize("case", CASES)
def test_reoptimized_graph_matches_megengine_bit_exactly(case: str) -> None:
    """compile() runs optimize_for_inference again; int8 values must not move."""
    path, x, expected = _case(case)
    outs = xm.compile(path, target="ref")(x)
    names = list(Network(path).get_all_output_name())
    for name, got in zip(names, outs, strict=True):
        _assert_bit_exact(got, expected[name], f"{case}: {name}")


def test_x86_rounding() -> None:
    """MegEngine's SIMD rounding: trunc(y + copysign(0.5, y)) with a float32 addition."""
    y = np.array([2.5, -2.5, 1.5, -0.5, 0.4999999701976776, -0.4999999701976776, 3.4999997615814, 0.0, -0.0],
                 np.float32)  # fmt: skip
    # ties go away from zero; 0.49999997 + 0.5 rounds to 1.0 in float32, so it becomes 1 (roundf: 0)
    assert round_x86(y).tolist() == [3.0, -3.0, 2.0, -1.0, 1.0, -1.0, 3.0, 0.0, 0.0]
    assert np.round(np.float32(0.4999999701976776)) == 0  # what a plain round-to-nearest would give


def test_hswish_multiplies_by_a_sixth() -> None:
    """MegEngine's SIMD h_swish multiplies by float32(1/6) where a division by 6 rounds otherwise."""
    x = np.linspace(-4, 4, 20001, dtype=np.float32)
    mine = hswish_x86(x)
    div = (x * np.clip(x + np.float32(3), 0, 6) / np.float32(6)).astype(np.float32)
    assert mine.dtype == np.float32 and np.count_nonzero(mine != div) > 0
    np.testing.assert_allclose(mine, div, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", CASES)
def test_compiled_x86_float_output_matches_megengine(case: str) -> None:
    """The generated C int8 kernels give MegEngine's final (dequantized) output."""
    require("x86-avx2")
    path, x, expected = _case(case)
    outs = _compiled(case, "x86-avx2")(x)
    _assert_bit_exact(outs[0], expected["dequant.TypeCvt"], f"{case}: dequant.TypeCvt")


@pytest.mark.parametrize("case", CASES)
def test_compiled_x86_int8_outputs_match_megengine(case: str) -> None:
    """Every int8 intermediate MegEngine computed, from the compiled model in this process and from
    the standalone runner, in its own dtype."""
    require("x86-avx2")
    path, x, expected = _case(case)
    compiled = _compiled(case, "x86-avx2")
    names = list(Network(path).get_all_output_name())
    for how, outs in (("in process", compiled.run([x])), ("runner", compiled.run_runner([x]))):
        for name, got in zip(names, outs, strict=True):
            assert np.asarray(got).dtype == expected[name].dtype, f"{how}: {name}"
            _assert_bit_exact(got, expected[name], f"{case} {how}: {name}")


OTHER_INT8_TARGETS = ("x86-avx512-nchw88", "arm-nchw44", "arm-nchw44-dot", "arm-nchw44+plain-c")


@pytest.mark.parametrize("target", OTHER_INT8_TARGETS)
@pytest.mark.parametrize("case", CASES)
def test_compiled_int8_outputs_match_megengine(case: str, target: str) -> None:
    """The same on the other int8 targets (ARM under qemu: NCHW44 int8 kernels, sdot, portable C)."""
    if target.startswith("arm"):
        problem = toolchain_problem()
        if problem is not None:
            pytest.skip(f"ARM toolchain: {problem}")
    else:
        require(target)
    path, x, expected = _case(case)
    compiled = xm.compile(path, target=target)
    names = list(Network(path).get_all_output_name())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        outs = compiled.run([x])
    for name, got in zip(names, outs, strict=True):
        assert np.asarray(got).dtype == expected[name].dtype, name
        _assert_bit_exact(got, expected[name], f"{case} on {target}: {name}")
