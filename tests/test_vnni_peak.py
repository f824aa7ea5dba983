"""bench/vnni_peak.py's arithmetic: the GMAC it reads from an int8 kernel's symbol agrees with the tensor
IR's, and its peak loop runs (on a CPU with AVX512-VNNI)."""

from __future__ import annotations

import os
import sys
import zlib

import numpy as np
import pytest

import backends.c.examples as E
from compiler.driver.compile import compile
from dialects import kernel as K
from tests.codegen_util import require

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import vnni_peak  # noqa: E402

TARGET = "x86-avx512-vnni"


@pytest.mark.parametrize(
    ("x", "oc", "k", "stride", "pad"),
    [((1, 16, 9, 11), 32, 3, 2, 1), ((2, 12, 7, 7), 20, 1, 1, 0), ((1, 3, 23, 21), 10, 7, 2, 3)],
)
def test_symbol_gmac_matches_the_tensor_ir(
    x: tuple[int, ...], oc: int, k: int, stride: int, pad: int
) -> None:
    require(TARGET)
    ex = E.conv2d_q8(x, oc, k, stride=stride, pad=pad, act="relu")
    module, _ = ex.build(np.random.default_rng(zlib.crc32(ex.name.encode())))
    model = compile(module, TARGET)
    syms = [
        d.sym_name.data
        for d in model.final_module().walk()
        if isinstance(d, K.KernelDefOp) and "conv2d_q8" in d.sym_name.data
    ]
    assert len(syms) == 1, syms
    got = vnni_peak.conv_of_symbol(syms[0])
    assert got is not None, syms[0]
    shape, gmac = got
    assert gmac == pytest.approx(vnni_peak.model_gmac(model._stages["tensor"]), rel=1e-12)
    assert shape.startswith(f"{x[1]}x{x[2]}x{x[3]}->{oc}x")
    assert (f" s{stride}" in shape) == (stride != 1)


def test_conv_of_symbol_declines_other_kernels() -> None:
    assert vnni_peak.conv_of_symbol("vnni_pool2d_q8_max_n1_c64_112x112_k3x3_s2x2_p1x1") is None


def test_peak_loops_run() -> None:
    require(TARGET)
    int8 = vnni_peak.vnni_peak("vpdpbusd", iters=200_000, repeats=1)
    int16 = vnni_peak.vnni_peak("vpdpwssd", iters=200_000, repeats=1)
    assert int8 > 0 and int16 > 0
