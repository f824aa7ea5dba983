"""Generated kernels other than convolution, against the reference interpreter: pooling, elementwise
with broadcasting, matrix multiplication (constant and run-time operands, transposes, batches, fused
bias/activation), softmax, reductions, and data movement (concat, split, transpose, slicing,
broadcast, zero-copy reshape). One model per ISA holds all variants, so each builds once."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from tests.codegen_util import X86_TARGETS, check


def _ops_model(rng: np.random.Generator):  # type: ignore[no-untyped-def]
    def r(*s: int) -> np.ndarray:
        return rng.standard_normal(s).astype(np.float32)

    w_fc, b_fc = xm.tensor(r(37, 29)), xm.tensor(r(37))
    w_kn = xm.tensor(r(29, 21))
    chan = xm.tensor(r(1, 6, 1, 1))
    row = xm.tensor(r(13))

    def fn(x, a, bm, c, v):  # type: ignore[no-untyped-def]
        outs = [
            F.max_pool2d(x, 3, 2, 1),
            F.avg_pool2d(x, 3, 2, 1, mode="average"),
            F.avg_pool2d(x, 2, 2, 1),  # count excluding padding
            F.adaptive_avg_pool2d(x, (3, 2)),
            x * chan + 1.5,  # channel broadcast, then a scalar
            F.relu6(x - chan),
            F.maximum(x, F.sigmoid(x)),
            F.clip(x, -0.5, 0.7),
            F.relu(F.linear(a, w_fc, b_fc)),  # matmul + bias + relu, constant B transposed
            F.matmul(a, w_kn),  # constant B, not transposed
            F.matmul(a, bm, transpose_b=True),  # run-time B
            F.matmul(F.transpose(a, (1, 0)), bm, transpose_a=True, transpose_b=True),
            F.batch_matmul(c, F.transpose(c, (0, 2, 1))),
            F.softmax(a, axis=1),
            F.softmax(x, axis=1),
            F.mean(x, axis=(2, 3)),
            F.max(x, axis=1),
            F.sum(v * row, axis=0),
            F.concat([x, F.relu(x)], axis=1),
            *F.split(x, [2, 4], axis=1),
            F.transpose(x, (0, 2, 3, 1)),
            x[:, 1:5, ::2, 3:],
            F.broadcast_to(v, (4, 9, 13)),
            F.flatten(x, 1),
        ]
        return tuple(outs)

    inputs = [r(2, 6, 11, 9), r(5, 29), r(21, 29), r(3, 7, 10), r(9, 13)]
    return fn, inputs


@pytest.mark.parametrize("target", X86_TARGETS)
def test_other_kernels(target: str) -> None:
    fn, inputs = _ops_model(np.random.default_rng(3))
    compiled = check(fn, inputs, target)
    ir = compiled.ir("kernel-plan-memory")
    assert "kernel.view" in ir  # flatten is zero-copy
    assert "_bias_RELU" in ir  # linear + relu fused into the GEMM


def test_unsupported_op_names_op_and_candidates() -> None:
    from compiler.functional.elemwise import _elemwise
    from passes.lowering import LoweringError
    from tests.codegen_util import compile_fn

    def shift(x):  # type: ignore[no-untyped-def]
        return _elemwise("SHL", x.astype("int32"), x.astype("int32")).astype("float32")

    # the message is one line naming the op and its mode, then every family tried
    with pytest.raises(LoweringError, match=r"^mgb.elemwise shl \(.*no kernel.*elemwise") as err:
        compile_fn(shift, [np.ones((2, 3), np.float32)], "x86-avx2")
    assert "\n" not in str(err.value)
