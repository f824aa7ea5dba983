"""Generated code under AddressSanitizer and UndefinedBehaviorSanitizer: the standalone runner, built
with ``-fsanitize=address,undefined``, runs a model that exercises every packing mode, partial GEMM
tiles, depthwise borders, pooling windows, broadcasting elementwise, matmul and data movement; any
out-of-bounds access, leak or undefined behaviour fails the run. Its outputs must still match."""

from __future__ import annotations

import numpy as np

import compiler as xm
import compiler.functional as F
from semantics import run_module
from tests.codegen_util import compile_sanitized, require


def test_sanitized_runner_matches_reference() -> None:
    require("x86-avx2")
    rng = np.random.default_rng(5)

    def r(*s: int) -> np.ndarray:
        return rng.standard_normal(s).astype(np.float32)

    w1, w2, w3, wd = (
        xm.tensor(r(13, 3, 3, 3)),
        xm.tensor(r(9, 13, 1, 1)),
        xm.tensor(r(9, 9, 3, 3)),
        xm.tensor(r(9, 1, 1, 3, 3)),
    )
    w_fc = xm.tensor(r(7, 9))

    def fn(x):  # type: ignore[no-untyped-def]
        y = F.relu(F.conv2d(x, w1, stride=2, padding=1))  # gather
        y = F.conv2d(y, w2)  # 1x1 copy
        z = F.relu(F.conv2d(y, w3, padding=1) + y)  # rows or gather + residual
        z = F.conv2d(z, wd, padding=1, groups=9)  # depthwise
        p = F.max_pool2d(z, 3, 2, 1)
        v = F.mean(p, axis=(2, 3))
        return F.softmax(F.linear(v, w_fc), axis=1), F.transpose(p, (0, 2, 3, 1))

    x = r(2, 3, 33, 35)
    compiled = compile_sanitized(fn, [x], "x86-avx2")
    got = compiled.run_runner([x], sanitize=True)
    want = run_module(compiled._stages["tensor"], [x])  # type: ignore[arg-type]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_sanitized_nchw88_kernels() -> None:
    """The NCHW88 kernels (hybrid, dense with partial tiles, group, channel-wise, pooling, float16
    storage) under the sanitizers: edge tiles and padded copies stay in bounds."""
    from tests.test_codegen_conv import _conv_model
    from tests.test_codegen_nchw88 import CASES, F16_TOL

    require("x86-avx2-nchw88")
    fn, inputs = _conv_model(CASES[:10], np.random.default_rng(6))
    from compiler.driver.targets import parse_target, runs_here

    targets = [("x86-avx2-nchw88", 1e-4), ("x86-avx2-nchw88+io16xc32", F16_TOL), ("x86-avx512-nchw88", 1e-4)]
    for target, tol in targets:
        if not runs_here(parse_target(target)):
            continue  # no AVX-512 here: the AVX2 kernels above still ran
        compiled = compile_sanitized(fn, inputs, target)
        got = compiled.run_runner(inputs, sanitize=True)
        want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())))


def test_sanitized_winograd_kernels(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Winograd F(4, 3) and F(2, 3) (partial border tiles, padding 0 and 2, OC not a whole AVX-512
    panel, batch 2) under the sanitizers: tile blocks, padded copies and panels stay in bounds."""
    from compiler.driver.targets import parse_target, runs_here
    from tests.test_codegen_conv import _conv_model
    from tests.test_codegen_winograd import CASES, _force_tile

    require("x86-avx2-nchw88")
    fn, inputs = _conv_model(CASES[:3], np.random.default_rng(8))
    for target, m in [("x86-avx2-nchw88", 4), ("x86-avx2-nchw88", 2), ("x86-avx512-nchw88", 4)]:
        if not runs_here(parse_target(target)):
            continue
        _force_tile(monkeypatch, m)
        compiled = compile_sanitized(fn, inputs, target)
        assert f"conv2d_winograd_nchw88_f{m}" in compiled.ir("c")
        got = compiled.run_runner(inputs, sanitize=True)
        want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
