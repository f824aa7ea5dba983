"""Every int8 kernel on every ARM target that selects it, under qemu, exactly against the reference.

``tests/test_arm_kernels.py`` runs int8 only on ``arm-nchw44-dot``, where dense and group
convolutions take the ``sdot`` kernel; the NEON kernels without dot product (``xm_qc4k4_neon``:
dense and group NCHW44 convolutions on ``arm-nchw44`` and ``arm-fp16``) and the NCHW int8
pooling, matrix multiplication, concatenation and elementwise kernels were never run on a device.
Here one int8 model reaches all of them; each target's kernel choice is pinned, so a selection
change that silently stops exercising a kernel fails too. Int8 results are integers: the compiled
outputs must equal the reference interpreter's bit for bit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.cross import toolchain_problem
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import compile_fn, run_emulated
from tests.test_arm_kernels import CASES, _inputs, _weights, int8_model

_problem = toolchain_problem()
pytestmark = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")

ODD_CHANNELS = next(i for i, case in enumerate(CASES) if case[0] == "odd_channels")  # stays NCHW
DENSE = next(i for i, case in enumerate(CASES) if case[0] == "dense3x3_odd")  # NCHW44
FC_OUT = 6


def full_int8_model(weights: list[tuple[np.ndarray, np.ndarray]], fc: np.ndarray) -> Callable[..., Any]:
    """test_arm_kernels' int8 model (conv variants, NCHW44 pooling, QFUSE_ADD_RELU) plus the int8
    kernels it misses: NCHW pooling, matrix multiplication, concatenation, int8 elementwise."""
    convs = int8_model(weights)
    s_fc = float(np.abs(fc).max()) / 127
    fc_q = Tensor(quantize(fc, D.qint8(s_fc)), dtype=D.qint8(s_fc))

    def f(*xs: Tensor) -> tuple[Tensor, ...]:
        floats = convs(*xs)
        # requantize a conv output (float after int8_model's astype) to feed the NCHW int8 kernels
        odd = floats[ODD_CHANNELS].astype(D.qint8(0.05))
        max_nchw = F.max_pool2d(odd, 3, 2, 1)
        avg_nchw = F.avg_pool2d(odd, 2, 2, 0, mode="average")
        flat = F.flatten(max_nchw, 1)
        product = F.matmul(flat, fc_q, transpose_b=True).astype(D.qint8(0.5))
        joined = F.concat([odd, F.relu(odd)], axis=1)
        extra = (max_nchw, avg_nchw, product, joined)
        return (*floats, *(t.astype("float32") for t in extra))

    return f


# int8 kernel (family, isa, mode) per target; "" when the family has no mode
NEON_NCHW44 = {("conv2d_nchw44_q8", "neon", m) for m in ("dense", "group", "chan", "hybrid")}
GENERIC_NCHW44 = {("conv2d_nchw44_q8", "generic", m) for m in ("dense", "group", "chan", "hybrid")}
DOT = {("conv2d_nchw44_dot", "dot", "group")}
# 1x1 stride-1 layers: the register-blocked sdot GEMM (backends/c/templates/arm/neon_int8.py); other dense
# and first layers: the packed-input GEMM on sdot, or with i8mm on smmla (neon_i8mm.py)
DOT_GEMM = {("conv2d_nchw44_dot_gemm", "dot", "dense")}
DOT_IM2COL = {("conv2d_nchw44_dot_im2col", "dot", m) for m in ("dense", "hybrid")}
MMLA = {("conv2d_nchw44_mmla", "i8mm", m) for m in ("dense", "hybrid")}
NEON_POOL = {("pool2d_nchw44", "neon", m) for m in ("max", "average")}
SHARED = {
    ("conv2d_q8", "generic", ""),  # odd channel counts stay NCHW
    ("pool2d_q8", "generic", "max"),
    ("pool2d_q8", "generic", "average"),
    ("matmul_q8", "generic", ""),
    ("concat", "generic", ""),  # int8 elements moved as bytes
    ("elemwise_q", "generic", "fuse_add_relu"),
    ("elemwise_q", "generic", "relu"),
}
# int8 max pooling and same-shape elementwise ops: NEON kernels (backends/c/templates/arm/neon_int8.py)
NEON_Q8 = {
    ("pool2d_nchw44_q8", "neon", "max"),
    *(("elemwise_q8_neon", "neon", m) for m in ("fuse_add_relu", "relu")),
}
NEON_SHARED = (
    (NEON_POOL - {("pool2d_nchw44", "neon", "max")}) | NEON_Q8 | {k for k in SHARED if k[0] != "elemwise_q"}
)
# with the dot product, int8 matrix products are sdot kernels (backends/c/templates/arm/neon_int8_ends.py)
DOT_SHARED = (NEON_SHARED - {("matmul_q8", "generic", "")}) | {("matmul_q8", "dot", "")}
EXPECTED_KERNELS: dict[str, set[tuple[str, str, str]]] = {
    "arm-nchw44": NEON_NCHW44 | NEON_SHARED,
    # plain C: the concat and the generic copies around it are one gather (kernel-fuse-moves)
    "arm-nchw44+plain-c": GENERIC_NCHW44
    | {(f, "generic", m) for f, _, m in NEON_POOL}
    | (SHARED - {("concat", "generic", "")})
    | {("gather", "generic", "")},
    "arm-fp16": NEON_NCHW44 | NEON_SHARED,
    "arm-nchw44-dot": DOT | DOT_GEMM | DOT_IM2COL | {k for k in NEON_NCHW44 if k[2] == "chan"} | DOT_SHARED,
    "arm-nchw44-dot-i8mm": DOT | MMLA | {k for k in NEON_NCHW44 if k[2] == "chan"} | DOT_SHARED,
}
INT8_FAMILIES = {f for kernels in EXPECTED_KERNELS.values() for f, _, _ in kernels}


def int8_kernels(ir: str) -> set[tuple[str, str, str]]:
    found = re.findall(r'= "(\w+)" \["(\w+)"\](?: \{mode = "(\w+)")?', ir)
    return {k for k in found if k[0] in INT8_FAMILIES}


@pytest.fixture(scope="module")
def data() -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    rng = np.random.default_rng(44)
    inputs, weights = _inputs(rng), _weights(rng)
    _, (_, _, h, w), oc, *_ = CASES[ODD_CHANNELS]
    pooled = oc * ((h + 2 - 3) // 2 + 1) * ((w + 2 - 3) // 2 + 1)
    return inputs, weights, (rng.standard_normal((FC_OUT, pooled)) * 0.1).astype(np.float32)


@pytest.mark.parametrize("target", sorted(EXPECTED_KERNELS))
def test_every_int8_kernel_exact(data: Any, target: str) -> None:
    inputs, weights, fc = data
    c = compile_fn(full_int8_model(weights, fc), inputs, target)
    assert int8_kernels(c.ir("kernel-plan-memory")) == EXPECTED_KERNELS[target]
    # arm-fp16 turns float tensors into float16 (f16_io_comp) in the inference passes, so the
    # dequantized outputs are rounded to float16 there: its reference is the optimized graph
    want = run_module(c._stages["inference" if "fp16" in target else "tensor"], inputs)
    got = run_emulated(c, inputs)
    assert len(got) == len(want)
    differing = [
        i for i, (g, w) in enumerate(zip(got, want, strict=True)) if not np.array_equal(g, np.asarray(w))
    ]
    assert not differing, f"{target}: outputs {differing} of {len(got)} differ from the reference"


def test_int8_concat_of_nchw44_tensors_compiles(data: Any) -> None:
    inputs, weights, _ = data
    convs = int8_model(weights)

    def f(*xs: Tensor) -> Tensor:
        dense = convs(*xs)[DENSE].astype(D.qint8(0.05))
        return F.concat([dense, F.relu(dense)], axis=1).astype("float32")

    c = compile_fn(f, inputs, "arm-nchw44")
    # the concat stays blocked: one row copy per image of the two tensors' C/4 blocks
    concat = [
        line for line in c.ir("kernel-plan-memory").splitlines() if "kernel.call" in line and "concat" in line
    ]
    assert len(concat) == 1 and "nchw44" in concat[0]
    want = np.asarray(run_module(c._stages["tensor"], inputs)[0])
    np.testing.assert_array_equal(run_emulated(c, inputs)[0], want)
