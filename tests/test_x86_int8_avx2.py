"""The AVX2 int8 convolutions (``backends/c/templates/x86/x86_int8_avx2.py``) exactly against the reference
interpreter, on a target without AVX512-VNNI: tests/test_x86_int8.py's odd shapes (channels that fill
no register tile, strides, dilation, groups, batch 2) on one and two threads and under ASan/UBSan,
both GEMM forms (7-bit activations after a RELU, split bytes where an input is negative) at the int8
extremes, the fused ReLU6 island, a tie-heavy model and MegEngine's own int8 nets."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from compiler import dtype as D
from compiler.tensor import Tensor
from semantics import run_module
from semantics.quant_kernels import quantize
from tests.codegen_util import compile_fn, require
from tests.test_int8_rounding import CASES as MGE_CASES
from tests.test_x86_int8 import (
    CASES,
    ISLAND_SX,
    NAMES,
    _inputs,
    _weights,
    int8_model,
    island,
    island_operands,
)

TARGET = "x86-avx2-nchw88"
DENSE = "conv2d_q8_x86"


def _families(compiled: Any) -> set[tuple[str, str]]:
    return set(re.findall(r'= "(\w+)" \["(\w+)"\]', compiled.ir("kernel-plan-memory")))


def _assert_exact(
    compiled: Any, inputs: list[np.ndarray], names: list[str], *, sanitize: bool = False
) -> None:
    got = compiled.run_runner(inputs, sanitize=True) if sanitize else compiled.run(inputs)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for name, g, w in zip(names, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
        assert np.abs(np.asarray(w, np.float64)).max() > 0, name


def test_avx2_targets_search_the_avx2_unit_after_vnni() -> None:
    """The dense int8 family has an avx2 unit, which x86-avx2* targets reach and VNNI targets pass."""
    from backends.c.kernels import KERNELS
    from backends.targets import parse_target

    for target, isa in (("x86-avx2", "avx2"), (TARGET, "avx2"), ("x86-avx512-nchw88", "avx2"),
                        ("x86-avx512-nchw88-vnni", "avx512vnni")):  # fmt: skip
        unit = KERNELS.first(DENSE, parse_target(target).isas)
        assert unit is not None and unit.isa == isa, (target, unit)


@pytest.mark.parametrize("threads", [1, 2])
def test_avx2_int8_convolutions_exact(threads: int) -> None:
    """tests/test_x86_int8.py's model: every dense, 1x1, strided, dilated and grouped convolution on the
    avx2 GEMM unit (the depthwise ones on the avx2 depthwise unit, tested in test_x86_int8_avx2_ops.py),
    bit-exact; inputs beyond the int8 range saturate."""
    require(TARGET)
    rng = np.random.default_rng(11)
    fn, inputs = int8_model(_weights(rng)), _inputs(rng)
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    assert (DENSE, "avx2") in _families(compiled)
    dense = sum(1 for c in CASES if c[-1] == 1 or c[-1] != c[1][1])
    assert compiled.ir("kernel-plan-memory").count("kernel.call @avx2_conv2d_q8") == dense
    names = NAMES + ["pool", "pool_s1", "add_relu", "add", "relu6_island", "matmul"]
    _assert_exact(compiled, inputs, names)
    if threads == 2:
        _assert_exact(compiled, inputs, names, sanitize=True)


def _extreme_model(rng: np.random.Generator) -> tuple[Any, list[np.ndarray]]:
    """Convolutions whose activations and weights sit on -128 and 127, results as raw int32
    accumulators (nothing saturates the error away) and as int8: a first convolution reading signed
    input (the split form) feeding, through its RELU, convolutions reading 0 and 127 only (the
    7-bit form). The largest products pair up: 2 * 127 * -128 per vpmaddubsw lane."""
    sx, sw = 1.0, 1.0
    shapes = [(13, 6, 3, 3), (7, 13, 1, 1), (9, 13, 3, 3)]
    weights = [
        Tensor(quantize(rng.choice([-128.0, 127.0, -128.0, 1.0], s).astype(np.float32), D.qint8(sw)),
               dtype=D.qint8(sw))
        for s in shapes
    ]  # fmt: skip
    qcba = F.quantized.conv_bias_activation

    def fn(x: Tensor) -> tuple[Tensor, ...]:
        xq = x.astype(D.qint8(sx))
        raw = qcba(xq, weights[0], None, dtype=D.qint32(sx * sw), padding=1)
        first = qcba(xq, weights[0], None, dtype=D.qint8(512.0), padding=1, nonlinear_mode="relu")
        # first's int8 values: 0 or 127 mostly (accumulators far beyond 127 * 512 saturate)
        raw_u7 = qcba(first, weights[1], None, dtype=D.qint32(512.0 * sw))
        strided = qcba(first, weights[2], None, dtype=D.qint32(512.0 * sw), stride=2, padding=1)
        out8 = qcba(first, weights[2], None, dtype=D.qint8(300000.0), padding=1)
        return tuple(t.astype("float32") for t in (raw, first, raw_u7, strided, out8))

    x = rng.choice([-128.0, 127.0, -128.0, 0.0], (2, 6, 11, 19)).astype(np.float32)
    return fn, [x]


@pytest.mark.parametrize("threads", [1, 2])
def test_avx2_int8_extremes_exact(threads: int) -> None:
    require(TARGET)
    fn, inputs = _extreme_model(np.random.default_rng(3))
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    assert compiled.ir("kernel-plan-memory").count("kernel.call @avx2_conv2d_q8") == 5
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    first = np.asarray(want[1])
    assert first.min() == 0 and first.max() == 127 * 512.0  # the 7-bit form's extreme
    raw = np.asarray(want[0])
    assert raw.min() < -2 * 127 * 128 * 9 // 2 and raw.max() > 2 * 128 * 128 * 9 // 2  # far beyond int16
    _assert_exact(compiled, inputs, ["raw", "first", "raw_u7", "strided", "out8"])
    if threads == 2:
        _assert_exact(compiled, inputs, ["raw", "first", "raw_u7", "strided", "out8"], sanitize=True)


def test_avx2_relu6_island_fused_and_exact() -> None:
    """MobileNetV2's int8 conv -> (typecvt, relu6, typecvt) islands after dense and 1x1 convolutions
    become one avx2 kernel, in each vector form (x86_int8.island_form: clamp, one product, float)."""
    from backends.c.templates.x86.x86_int8 import island_form

    require(TARGET)
    rng = np.random.default_rng(5)
    qw, bias = island_operands(rng)
    dense, point = qw(12, 5, 3, 3), qw(12, 12, 1, 1)
    qcba = F.quantized.conv_bias_activation
    forms = [(0.05, 0.05), (0.05, 0.1), (0.04, 0.02), (0.05, 0.24666667)]

    def fn(x: Tensor) -> tuple[Tensor, ...]:
        xq = x.astype(D.qint8(ISLAND_SX))
        outs = []
        for s_conv, s_island in forms:
            a = island(qcba(xq, dense, bias, dtype=D.qint8(s_conv), padding=1), s_island)
            outs.append(island(qcba(a, point, None, dtype=D.qint8(s_conv)), s_island))
        return tuple(t.astype("float32") for t in outs)

    kinds = {island_form(float(np.float32(a)), float(np.float32(b)))[0] for a, b in forms}
    assert kinds == {"clamp", "scale", "float"}, kinds
    x = (rng.standard_normal((1, 5, 13, 37)) * 3).astype(np.float32)
    for threads in (1, 2):
        compiled = compile_fn(fn, [x], TARGET, threads=threads)
        assert ("conv2d_q8_relu6_x86", "avx2") in _families(compiled)
        assert "elemwise" not in {f for f, _ in _families(compiled)}
        _assert_exact(compiled, [x], [f"island {i}" for i in range(len(forms))])


def test_avx2_tie_heavy_model_bit_exact() -> None:
    """tests/test_int8_kernels_exact.py's model, whose data sit on rounding ties: a contracted FMA or
    a ties-to-even conversion in the 8-lane epilogue would change values."""
    from tests.test_int8_kernels_exact import _inputs as tie_inputs
    from tests.test_int8_kernels_exact import _params
    from tests.test_int8_kernels_exact import int8_model as tie_model

    require(TARGET)
    rng = np.random.default_rng(8)
    params, inputs = _params(rng), tie_inputs(rng)
    compiled = compile_fn(tie_model(params), inputs, TARGET)
    assert (DENSE, "avx2") in _families(compiled)
    want = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    for i, (g, w) in enumerate(zip(compiled.run(inputs), want, strict=True)):
        np.testing.assert_array_equal(g, np.asarray(w), err_msg=f"output {i}")


@pytest.mark.parametrize("case", MGE_CASES)
def test_avx2_matches_megengine_int8_nets(case: str) -> None:
    """The int8 nets MegEngine 1.13 quantized and ran (tests/data/int8_mge): every int8 intermediate and
    the final output from the avx2 kernels equal MegEngine's."""
    import compiler as xm
    from compiler.lite import Network
    from tests.test_int8_rounding import _assert_bit_exact, _case

    require(TARGET)
    path, x, expected = _case(case)
    compiled = xm.compile(path, target=TARGET)
    assert (DENSE, "avx2") in _families(compiled)
    names = list(Network(path).get_all_output_name())
    for name, got in zip(names, compiled.run([x]), strict=True):
        assert np.asarray(got).dtype == expected[name].dtype, name
        _assert_bit_exact(got, expected[name], f"{case} on {TARGET}: {name}")
