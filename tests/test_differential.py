"""The in-suite slice of bench/diff_fuzz.py: seeded random graphs over the tensor dialect and fuzzed
``.mge`` files, compiled for the x86 targets and compared with the reference interpreter on plain and
special-valued (NaN, +-Inf, -0, denormal, large) inputs, some under ASan/UBSan. Each graph runs on two
targets (rotating through all of them) so that the slice stays fast with the C build cache; the long
run (``python bench/diff_fuzz.py --graphs N --seed S``) compiles every graph for every target.

The strict-xfail tests at the end are minimal reproducers of bugs the differential run found."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from bench.diff_fuzz import (
    ALL_TARGETS,
    check_graph,
    check_mge,
    compare,
    fuzzed_mge,
    random_graph,
    runnable_targets,
)
from compiler import dtype as D
from compiler.driver.compile import compile
from compiler.functional.vision import interpolate
from semantics import run_module
from tests.codegen_util import require

GRAPH_SEEDS = range(32)
SEED_OFFSET = 7_000  # the slice's seeds: graphs the long run's default seeds do not start with
MGE_RNG_SEED = 5


def _targets(i: int) -> list[str]:
    """Two targets per case, rotating so that every target runs in the slice."""
    return [ALL_TARGETS[i % len(ALL_TARGETS)], ALL_TARGETS[(i + 4) % len(ALL_TARGETS)]]


@pytest.mark.parametrize("i", GRAPH_SEEDS)
def test_random_graph_matches_reference(i: int) -> None:
    targets = [t for t in _targets(i) if t in runnable_targets(_targets(i))]
    if not targets:
        pytest.skip(f"this CPU runs none of {_targets(i)}")
    graph = random_graph(SEED_OFFSET + i)
    sanitize = targets[0] if i % 4 == 0 else None
    results = check_graph(graph, targets, sanitize)
    recipe = "\n  ".join(graph.steps)
    # a compile error is a documented one-line refusal (a kernel gap, counted by the long run's
    # report); a crash, a sanitizer report or a mismatch is a bug
    bad = [
        f"{r.target}: {r.outcome}: {r.detail}" for r in results if r.outcome not in ("ok", "compile-error")
    ]
    assert not bad, f"{graph.name}\n  {recipe}\n" + "\n".join(bad)


def test_slice_covers_the_op_families() -> None:
    """The slice's recipes exercise every family the generator knows, int8 chains included."""
    steps = " ".join(s for i in GRAPH_SEEDS for s in random_graph(SEED_OFFSET + i).steps)
    families = ("conv2d dense", "conv2d group", "conv2d depthwise", "matmul", "linear", "pool2d",
                "elemwise", "int32 elemwise", "reduce", "softmax", "resize", "pad", "typecvt", "layer_norm",
                "int8 conv", "activation", "transpose", "concat")  # fmt: skip
    for family in families:
        assert family in steps, family


def _mge_indices() -> list[int]:
    """The first fuzzed .mge cases that load and run on the reference (graph inputs float32)."""
    found = []
    for index in range(200):
        if len(found) == 6:
            break
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if fuzzed_mge(index, MGE_RNG_SEED) is not None:
                found.append(index)
    return found


@pytest.mark.parametrize("k", range(6))
def test_fuzzed_mge_matches_reference(k: int) -> None:
    indices = _mge_indices()
    if k >= len(indices):
        pytest.skip("fewer fuzzed files run on the reference")
    index = indices[k]
    targets = [t for t in _targets(k) if t in runnable_targets(_targets(k))]
    if not targets:
        pytest.skip(f"this CPU runs none of {_targets(k)}")
    results = check_mge(index, MGE_RNG_SEED, targets, targets[0] if k % 3 == 0 else None)
    # a documented one-line refusal is fine for a mutated file; a crash, report or mismatch is not
    bad = [
        f"{r.target}: {r.outcome}: {r.detail}" for r in results if r.outcome not in ("ok", "compile-error")
    ]
    assert not bad, f"fuzzed mge {index}\n" + "\n".join(bad)
    for r in results:
        assert r.outcome == "ok" or "\n" not in r.detail


def test_compare_catches_nan_inf_and_value_differences() -> None:
    """The comparison itself: NaN and Inf positions, signs of Inf, the scaled tolerance, int8 exactness."""
    want = np.array([1.0, np.nan, np.inf, -np.inf, 1000.0], np.float32)
    assert compare([want.copy()], [want], tol=1e-4) is None
    for i, value in [(1, 0.0), (2, -np.inf), (3, 5.0), (0, np.nan)]:
        got = want.copy()
        got[i] = value
        assert compare([got], [want], tol=1e-4) is not None, (i, value)
    near = want.copy()
    near[0] += 0.05  # within 1e-4 of the output's scale (1000)
    assert compare([near], [want], tol=1e-4) is None
    assert compare([near], [want], tol=1e-4, exact=True) is not None


# ----------------------------------------------------------------------------------------------
# Minimal reproducers of the bugs found (strict xfail: a fix turns them into failures to remove)


def _nan_input(shape: tuple[int, ...]) -> np.ndarray:
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 0.25 - 3.0
    x.reshape(-1)[[0, 7]] = np.nan
    return x


def _compiled_vs_reference(fn, x: np.ndarray, target: str) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    traced = xm.jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(xm.tensor(np.zeros_like(x)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(run_module(traced.module, [x])[0])
    return compile(traced.module, target).run([x])[0], want


# the NaN regressions are kernel behaviour: built at -O3, as shipped (the suite's -O1 for whole
# models could hide a select the optimiser rewrites; tests/conftest.py)
@pytest.mark.opt_level("-O3")
@pytest.mark.parametrize("target", ["x86-avx2", "x86-avx512-nchw88"])
def test_max_pool_keeps_nan(target: str) -> None:
    # was a bug: the x86 max pooling kernels dropped NaN inputs; the reference (np.max) propagates them
    require(target)
    got, want = _compiled_vs_reference(lambda t: F.max_pool2d(t, 2, 2), _nan_input((1, 2, 4, 4)), target)
    assert np.isnan(want).sum() == 2
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.opt_level("-O3")
def test_adaptive_max_pool_keeps_nan() -> None:
    # was a bug: the x86 adaptive max pooling kernel dropped NaN inputs
    require("x86-avx2")
    got, want = _compiled_vs_reference(
        lambda t: F.adaptive_max_pool2d(t, (2, 3)), _nan_input((1, 2, 4, 6)), "x86-avx2"
    )
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_reference_resize_keeps_nan_to_its_taps() -> None:
    # was a bug: an einsum with the interpolation matrices computed 0 * NaN, so one NaN/Inf spread
    # over whole output rows and columns
    x = _nan_input((1, 1, 4, 6))
    traced = xm.jit.trace(lambda t: interpolate(t, size=(8, 12), mode="nearest"), symbolic=True,
                          capture_as_const=True)  # fmt: skip
    traced(xm.tensor(np.zeros_like(x)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = np.asarray(run_module(traced.module, [x])[0])
    # nearest: output (i, j) is input (floor(i / 2), floor(j / 2)), so each NaN covers a 2x2 block
    want = x[:, :, np.arange(8) // 2][:, :, :, np.arange(12) // 2]
    np.testing.assert_array_equal(got, want)


@pytest.mark.opt_level("-O3")
def test_vnni_quantize_nan_is_zero() -> None:
    # was a bug: the 16-lane avx512vnni float32 -> qint8 kernel turned NaN into -128 (reference: 0)
    require("x86-avx512-nchw88-vnni")
    x = np.full((1, 16, 1, 2), 0.5, np.float32)
    x[0, 3, 0, 1] = np.nan
    got, want = _compiled_vs_reference(
        lambda t: t.astype(D.qint8(0.1)).astype("float32"), x, "x86-avx512-nchw88-vnni"
    )
    np.testing.assert_array_equal(got, want)


def test_int32_elemwise_wraps_around() -> None:
    # was a bug: signed overflow in the generated C (undefined behaviour; UBSan); the reference wraps
    require("x86-avx2")
    from tests.codegen_util import compile_fn

    x = np.array([[-3e9, -1e9, 5.0, 3e9]], np.float32)  # to int32: INT_MIN, -1e9, 5, INT_MIN

    def fn(t):  # type: ignore[no-untyped-def]
        return (t.astype("int32") - xm.tensor(np.int32(4))).astype("float32")

    compiled = compile_fn(fn, [x], "x86-avx2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(run_module(compiled._stages["tensor"], [x])[0])  # type: ignore[arg-type]
    got = compiled.run_runner([x], sanitize=True)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("scalar, mode", [(1, "mul"), (0, "add")])
def test_quantized_identity_constant_is_judged_by_its_real_value(scalar: int, mode: str) -> None:
    # was a bug: arith-simplify removed ``q * 1`` by the stored integer 1, which for a qint8 constant of
    # scale 0.05 is the real value 0.05 (eager and the unsimplified graph multiply by 0.05); a stored 0
    # is a real 0, so ``q + 0`` still goes
    def fn(t):  # type: ignore[no-untyped-def]
        q = t.astype(D.qint8(0.05))
        return (q * scalar if mode == "mul" else q + scalar).astype("float32")

    x = np.array([[0.5, -1.0, 2.0, 0.05, 6.3, -6.4, 0.0, 1.25]], np.float32)
    eager = fn(xm.tensor(x)).numpy()
    traced = xm.jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    compiled = compile(traced, "ref")
    got = compiled.run([x])
    np.testing.assert_array_equal(np.asarray(got[0] if isinstance(got, list | tuple) else got), eager)
    assert ("mgb.elemwise" in compiled.ir("inference")) == (mode == "mul")
