"""Every op the reference interpreter runs compiles for every C target and agrees with the reference:
one model holds every elementwise mode of the reference's table (float32, comparisons with bool
results, logical modes on bools), every reduce mode, softmax / concat / split on every axis,
broadcast, type conversions, and the ops segmentation, pose, GAN and transformer models add
(resize, transposed convolution, layer and batch normalisation, argmax/argmin, padding), on random
odd shapes. x86 targets run natively (and once under ASan/UBSan), ARM targets under qemu with small
shapes; float16 targets are compared with the reference run of their float16 graph."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.c.cross import toolchain_problem
from compiler.driver.compile import CompiledModel, EmulationWarning
from compiler.functional.elemwise import _elemwise
from compiler.functional.vision import interpolate
from dialects import enums
from semantics import run_module
from semantics.kernels import ELEMWISE
from tests.codegen_util import compile_fn, compile_sanitized, require

E = enums.ElemwiseMode
# modes of the reference table that take integer operands (shifts) or bools (logical ones)
INT_ONLY = {E.SHL, E.SHR}
LOGICAL = {E.NOT, E.AND, E.OR, E.XOR}
BOOL_RESULT = {E.LT, E.LEQ, E.EQ, E.NEQ, E.ISNAN, E.ISINF}
# the operands each mode reads from the input pool (domain-limited modes get fitting values)
DOMAIN = {E.ACOS: "unit", E.ASIN: "unit", E.ATANH: "unit", E.ACOSH: "above1", E.LOG: "pos", E.SQRT: "pos",
          E.POW: "pos", E.LOG1P: "pos"}  # fmt: skip
FLOAT_MODES = [m for m in ELEMWISE if m not in INT_ONLY | LOGICAL]

X86 = ["x86-avx2", "x86-avx2-nchw88", "x86-avx512", "x86-avx512-nchw88"]
X86_F16 = [t + "+io16xc32" for t in X86]
ARM = ["arm-nchw44", "arm-nchw44-dot", "arm-nchw44+plain-c", "arm-nchw44+io16xc32", "arm-fp16",
       "arm-fp16+io16xc32"]  # fmt: skip


def _arity(mode: Any) -> int:
    from dialects.tensor import ELEMWISE_ARITY

    return ELEMWISE_ARITY[mode]


def coverage_model(
    rng: np.random.Generator, small: bool = False, f16: bool = False
) -> tuple[Callable[..., Any], list[np.ndarray]]:
    def r(*s: int) -> np.ndarray:
        return rng.standard_normal(s).astype(np.float32)

    x = r(2, 5, 7, 9) if not small else r(1, 3, 5, 7)
    n, c, h, w = x.shape
    w_dense = xm.tensor(r(c, 4, 3, 3) * 0.3)  # (IC, OC, FH, FW)
    w_group = xm.tensor(r(c, 1, 2, 3, 2) * 0.3)  # groups = C
    gamma, beta = xm.tensor(r(h, w)), xm.tensor(r(h, w))
    chan = xm.tensor(r(1, c, 1, 1))
    mean, var = r(1, c, 1, 1), np.abs(r(1, c, 1, 1)) + 0.5

    def fn(a, m, v):  # type: ignore[no-untyped-def]
        pool = {
            "any": a, "unit": F.tanh(a) * 0.9, "above1": F.abs(a) + 1.0, "pos": F.abs(a) + 0.1,
        }  # fmt: skip
        outs = []
        for mode in FLOAT_MODES:
            k = _arity(mode)
            first = pool[DOMAIN.get(mode, "any")]
            operands = [first, a * 0.5 + 0.25, F.sigmoid(a), a - 1.0][:k]
            if k > 1:
                operands[1] = operands[1] * chan  # broadcast along the channels
            y = _elemwise(mode.name, *operands)
            outs.append(y.astype("float32") if mode in BOOL_RESULT else y)
        p, q = a > 0, a < 0.5
        for mode in LOGICAL:
            outs.append(_elemwise(mode.name, *[p, q][: _arity(mode)]).astype("float32"))
        for axis in range(4):
            outs += [F.sum(a, axis=axis), F.mean(a, axis=axis), F.max(a, axis=axis), F.min(a, axis=axis)]
            outs += [F.prod(a * 0.5 + 1.0, axis=axis), F.softmax(a, axis=axis)]
            outs += [F.argmax(a, axis=axis).astype("float32"), F.argmin(a, axis=axis).astype("float32")]
            outs += [F.concat([a, a * 2.0], axis=axis), *F.split(a, [1], axis=axis)]
        outs.append(F.norm(a, ord=2, axis=3))  # SUM_SQR
        outs.append(F.broadcast_to(F.sum(a, axis=1, keepdims=True), a.shape))
        outs.append((a * 3.0).astype("int32").astype("float32"))
        outs += [
            interpolate(a, size=(2 * h + 1, w - 2), mode="bilinear"),
            interpolate(a, size=(h - 2, 2 * w + 1), mode="nearest"),
            interpolate(a, scale_factor=2.0, mode="bilinear"),
            F.conv_transpose2d(a, w_dense, stride=2, padding=1),
            F.conv_transpose2d(a, w_group, stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=c),
            F.batch_norm(a, m, v, training=False),  # run-time statistics: not folded
            F.pad(a, ((0, 0), (1, 2), (0, 1), (2, 0)), constant_value=1.5),
            F.pad(a, ((0, 0), (0, 0), (2, 1), (1, 3)), mode="reflect"),
            F.pad(a, ((0, 0), (0, 0), (2, 1), (1, 3)), mode="edge"),
        ]
        if not f16:  # f16-io-comp makes layer_norm's float32 mean/rstd float16: IR that does not verify
            outs += [
                F.layer_norm(a, (h, w), affine=True, weight=gamma, bias=beta),
                F.layer_norm(a, (w,), affine=False),
            ]
        return tuple(outs)

    return fn, [x, mean, var]


def _compare(got: list[np.ndarray], want: list[Any], target: str, tol: float) -> None:
    assert len(got) == len(want)
    bad = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w, np.float32)
        if g.shape != w.shape:
            bad.append(f"output {i}: shape {g.shape} != {w.shape}")
            continue
        finite = np.abs(w[np.isfinite(w)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        if not np.allclose(g, w, rtol=tol, atol=tol * scale, equal_nan=True):
            bad.append(f"output {i}: max |diff| {np.nanmax(np.abs(g - w))}")
    assert not bad, f"{target}: " + "; ".join(bad)


def _check(target: str, small: bool = False) -> CompiledModel:
    f16 = "io16xc32" in target or "fp16" in target
    fn, inputs = coverage_model(np.random.default_rng(11), small, f16)
    return _run_compare(compile_fn(fn, inputs, target), inputs, target)


def _run_compare(compiled: CompiledModel, inputs: list[np.ndarray], target: str) -> CompiledModel:
    """Run ``compiled`` (under qemu for ARM) and compare every output with the reference."""
    f16 = "io16xc32" in target or "fp16" in target
    # float16 targets: the reference runs the float16 graph the inference passes made
    want = run_module(compiled._stages["inference" if f16 else "tensor"], inputs)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        got = compiled.run(inputs)
    _compare(got, want, target, 3e-2 if f16 else 1e-4)
    return compiled


def test_every_reference_elemwise_mode_has_a_kernel() -> None:
    """The table the model draws from is the reference's: a new reference mode is tested here."""
    from backends.c.templates.portable.generic import ELEMWISE_C

    missing = [m.name for m in ELEMWISE if m not in INT_ONLY and m.value not in ELEMWISE_C]
    assert not missing


@pytest.mark.parametrize("target", X86)
def test_x86_float32(target: str) -> None:
    require(target)
    c = _check(target)
    ir = c.ir("kernel-plan-memory")
    for family in ("resize", "deconv2d", "layer_norm", "batch_norm", "arg_reduce", "pad"):
        assert f'"{family}"' in ir


@pytest.mark.parametrize("target", X86_F16)
def test_x86_float16_storage(target: str) -> None:
    require(target)
    _check(target)


def test_x86_sanitized() -> None:
    require("x86-avx2")
    fn, inputs = coverage_model(np.random.default_rng(12), small=True)
    compiled = compile_sanitized(fn, inputs, "x86-avx2")
    got = compiled.run_runner(inputs, sanitize=True)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    _compare(got, want, "x86-avx2 (sanitized)", 1e-4)


_problem = toolchain_problem()


@pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")
@pytest.mark.parametrize("target", ARM)
def test_arm(target: str) -> None:
    _check(target, small=True)
