"""Depthwise convolutions whose channel count is not a multiple of 4 stay NCHW on the ARM targets and
take the portable ``conv2d_depthwise`` kernel (``backends/c/templates/portable/generic.py``), which no other
test runs: strides 1 and 2, padding, dilation, 5x5 windows, under qemu against the reference."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from backends.c.cross import toolchain_problem
from compiler.driver.compile import EmulationWarning
from semantics import run_module
from tests.codegen_util import compile_fn
from tests.test_codegen_conv import _conv_model

_problem = toolchain_problem()
pytestmark = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")

# (n, ic, h, w, oc, k, stride, pad, dilation, groups, epilogue), groups == channels, channels % 4 != 0
CASES = [
    (1, 5, 11, 13, 5, 3, 2, 1, 1, 5, "relu"),
    (2, 3, 9, 10, 3, 3, 1, 1, 1, 3, "none"),
    (1, 6, 12, 9, 6, 5, 2, 2, 1, 6, "sigmoid"),
    (1, 7, 10, 11, 7, 3, 2, 2, 2, 7, "none"),
]


@pytest.mark.parametrize("target", ["arm-nchw44", "arm-nchw44+plain-c"])
def test_odd_channel_depthwise_on_arm(target: str) -> None:
    fn, inputs = _conv_model(CASES, np.random.default_rng(3))
    compiled = compile_fn(fn, inputs, target)
    kernels = set(re.findall(r'= "(conv\w+)" \["(\w+)"\]', compiled.ir("kernel-plan-memory")))
    assert kernels == {("conv2d_depthwise", "generic")}
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        got = compiled.run(inputs)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        np.testing.assert_allclose(
            g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())), err_msg=f"output {i}"
        )
