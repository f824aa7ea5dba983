"""Every generated int8 kernel reproduces the reference's requantization (MegEngine's x86 arithmetic,
``backends/reference/quant_kernels.py``) bit for bit, on every target that compiles int8.

The model's data sit on rounding ties on purpose:

* activation scales are ``7 * 2**-k`` and weight scales powers of two, so a result scale of twice the
  accumulator's makes ``s_src / s_dst`` exactly 0.5 and every odd accumulator (every odd int8 value
  of a TypeCvt) an exact .5 tie; the old two-step ``acc * s_acc * (1 / s_dst)`` (``1 / (7 * 2**-k)``
  rounds down in float32) moved those ties towards zero;
* a bias whose scale is half the accumulator's joins in float32 (an integer bias rounds it first);
* QADD of ``2 * 2**-2`` and ``-1 * 2**-25`` is ``0.49999997f``: ``trunc(y + 0.5f)`` gives 1, ``roundf`` 0;
* h-swish multiplies by ``float32(1 / 6)`` (convolution epilogue and elementwise).

Outputs are the int8 tensors themselves (their own dtype through the runner and the loaders), so a
wrong byte anywhere fails.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.cross import toolchain_problem
from backends.cuda.build import nvcc
from compiler import dtype as D
from compiler.driver.compile import CompiledModel, EmulationWarning
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import compile_fn, require

C, H, W = 16, 9, 9
S_X = 61 * 2.0**-9  # the input scale: 0.119140625 (see the module doc)
S_W = 2.0**-4
S_ACC = S_X * S_W  # 7 * 2**-10, exact in float32
S_HALF = 2 * S_ACC  # a result scale making s_acc / s_out exactly 0.5
FC_OUT = 8

X86 = ("x86-avx2", "x86-avx512", "x86-avx2-nchw88", "x86-avx512-nchw88")
ARM = ("arm-nchw44", "arm-nchw44-dot", "arm-nchw44+plain-c")
CUDA = ("cuda-nchw4", "cuda-nchw32", "cuda-chwn4")
TARGETS = (*X86, *ARM, *CUDA)


def _qconst(values: np.ndarray, scale: float, kind: Any = D.qint8) -> Tensor:
    dtype = kind(scale)
    return Tensor(quantize(np.asarray(values, np.float32) * np.float32(scale), dtype), dtype=dtype)


def _params(rng: np.random.Generator) -> dict[str, Tensor]:
    def w(*shape: int) -> Tensor:
        return _qconst(rng.integers(-12, 13, shape), S_W)

    def bias(n: int, scale: float) -> Tensor:
        return _qconst(rng.integers(-300, 301, (1, n, 1, 1)), scale, D.qint32)

    return {
        "dense_w": w(C, C, 3, 3),
        "dense_b": bias(C, S_ACC / 2),  # half the accumulator's scale: a float bias, not an integer one
        "group_w": w(4, C // 4, C // 4, 3, 3),
        "group_b": bias(C, S_ACC),
        "dw_w": w(C, 1, 1, 3, 3),
        "dw_b": bias(C, S_ACC),
        "pw_w": w(C, C, 1, 1),
        "pw_b": bias(C, S_ACC),
        "fc": w(FC_OUT, C * 4 * 4),
    }


def int8_model(p: dict[str, Tensor]) -> Callable[..., tuple[Tensor, ...]]:
    qcba = F.quantized.conv_bias_activation

    def f(x: Tensor, quarters: Tensor, tiny: Tensor) -> tuple[Tensor, ...]:
        xq = x.astype(D.qint8(S_X))
        ties = qcba(xq, p["dense_w"], None, dtype=D.qint8(S_HALF), padding=1)  # s_acc / s_out = 0.5
        dense = qcba(xq, p["dense_w"], p["dense_b"], dtype=D.qint8(0.05), padding=1, nonlinear_mode="relu")
        group = qcba(xq, p["group_w"], p["group_b"], dtype=D.qint8(S_HALF), stride=2, padding=1, groups=4)
        dw = qcba(ties, p["dw_w"], p["dw_b"], dtype=D.qint8(S_HALF), padding=1, groups=C,
                  nonlinear_mode="relu")  # fmt: skip
        pw = qcba(dw, p["pw_w"], p["pw_b"], dtype=D.qint8(0.04), nonlinear_mode="h_swish")
        acc32 = qcba(xq, p["pw_w"])  # QuantizedS32 result, then TypeCvt to int8
        cvt32 = acc32.astype(D.qint8(S_HALF))
        halved = xq.astype(D.qint8(2 * S_X))  # TypeCvt S8 -> S8 by 0.5: every odd value a tie
        emt = F.quantized.elemwise_multi_type
        added = emt(ties, dense, mode="qadd", dtype=D.qint8(0.06))
        fused = emt(ties, dense, mode="qfuse_add_relu", dtype=D.qint8(S_HALF))
        product = emt(ties, dense, mode="qmul", dtype=D.qint8(0.02))
        swish = emt(ties, mode="qh_swish", dtype=D.qint8(S_HALF))
        add_swish = emt(ties, dense, mode="qfuse_add_h_swish", dtype=D.qint8(0.03))
        # 2 * 2**-2 + (-1) * 2**-25 = 0.49999997f: trunc(y + 0.5f) = 1, roundf(y) = 0
        near_half = (quarters.astype(D.qint8(2.0**-2)), tiny.astype(D.qint8(2.0**-25)))
        quirk = emt(*near_half, mode="qadd", dtype=D.qint8(1.0))
        joined = F.concat([ties.astype(D.qint8(0.05)), dense], axis=1)  # two scales brought to one
        max_pool = F.max_pool2d(ties, 3, 2, 1)
        avg_pool = F.avg_pool2d(dense, 2, 2, 0, mode="average")
        flat = F.flatten(F.avg_pool2d(ties, 2, 2, 0, mode="average"), 1)
        mm = F.matmul(flat, p["fc"], transpose_b=True).astype(D.qint8(2 * S_X * S_W * 2))
        return (ties, dense, group, dw, pw, cvt32, halved, added, fused, product, swish, add_swish, quirk,
                joined, max_pool, avg_pool, mm)  # fmt: skip

    return f


def _inputs(rng: np.random.Generator) -> list[np.ndarray]:
    x = (rng.integers(-128, 128, (1, C, H, W)) * np.float32(S_X)).astype(np.float32)
    quarters = np.full((1, 1, 4, 8), 0.5, np.float32)  # 2 * 2**-2
    quarters[0, 0, :2] = rng.integers(-8, 9, (2, 8)) * np.float32(0.25)
    tiny = np.full((1, 1, 4, 8), -(2.0**-25), np.float32)
    tiny[0, 0, 3] = 2.0**-25
    return [x, quarters, tiny]


@pytest.fixture(scope="module")
def model() -> tuple[dict[str, Tensor], list[np.ndarray]]:
    rng = np.random.default_rng(8)
    return _params(rng), _inputs(rng)


def _skip_unless_runs(target: str) -> None:
    if target.startswith("arm"):
        problem = toolchain_problem()
        if problem is not None:
            pytest.skip(f"ARM toolchain: {problem}")
    elif target.startswith("cuda"):
        if nvcc() is None:
            pytest.skip("nvcc is not installed")
    else:
        require(target)


def _run(compiled: CompiledModel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        return compiled.run(inputs)


INT8_FAMILY = re.compile(r'= "(\w*(?:q8|nchw44_dot|nchw44_q8|mma|elemwise_q|typecvt)\w*)" \["(\w+)"\]')


@pytest.mark.parametrize("target", TARGETS)
def test_int8_kernels_bit_exact(model: Any, target: str) -> None:
    _skip_unless_runs(target)
    params, inputs = model
    compiled = compile_fn(int8_model(params), inputs, target)
    want = run_module(compiled._stages["tensor"], inputs)
    got = _run(compiled, inputs)
    assert len(got) == len(want)
    wrong = {}
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        assert g.dtype == w.dtype, f"{target}: output {i} is {g.dtype}, the reference's {w.dtype}"
        bad = np.count_nonzero(g.astype(np.int64) != w.astype(np.int64))
        if bad:
            wrong[i] = f"{bad} of {w.size}"
    assert not wrong, f"{target}: int8 values differing from the reference, by output: {wrong}"
    families = set(INT8_FAMILY.findall(compiled.ir("kernel-plan-memory")))
    assert families, f"{target}: no int8 kernel selected"


def test_the_data_sits_on_ties(model: Any) -> None:
    """The inputs do reach the cases the old requantization got wrong (else the test above is void)."""
    params, inputs = model
    compiled = compile_fn(int8_model(params), inputs, "ref")
    outs = [np.asarray(o) for o in compiled.run(inputs)]
    xq = np.round(inputs[0] / np.float32(S_X)).astype(np.int64)
    assert np.count_nonzero(xq % 2) > xq.size // 3  # TypeCvt by 0.5: odd values are ties
    halved = outs[6].astype(np.int64)
    # ties went away from zero: |halved| = (|xq| + 1) / 2 for odd xq
    np.testing.assert_array_equal(np.abs(halved[xq % 2 == 1]), (np.abs(xq[xq % 2 == 1]) + 1) // 2)
    quirk = outs[12].astype(np.int64).reshape(4, 8)
    assert (quirk[2] == 1).all() and (quirk[3] == 1).all()  # 0.49999997f and 0.50000003f both give 1
