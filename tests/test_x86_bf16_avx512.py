"""``+bf16`` without AMX (``backends/c/templates/x86/x86_avx512_bf16.py``, target ``x86-avx512+bf16``):
the AMX-BF16 kernels' operands multiplied by ``vdpbf16ps`` alone, the same contract as
``tests/test_x86_bf16.py`` checks (bfloat16-rounded inputs, exact products, float32 sums and
epilogue; bound 1e-5 of the output's scale vs that contract in float64 by PyTorch, 1e-2 relative L2
vs float32). The same convolution table (both B-tile modes, groups, dilation, batch 2, fused
epilogues), one and two threads, the matrix products and ASan/UBSan; the library must hold no tile
instruction, so it runs on a CPU with avx512_bf16 and no AMX (an AMD EPYC). Skipped with the reason
where the CPU lacks avx512_bf16."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.templates.x86.x86_amx_bf16 import round_bfloat16
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import assert_instructions, compile_fn, kernel_families
from tests.test_x86_bf16 import CONV_CASES, _check, _conv_contract, _conv_model, require_avx512_bf16

TARGET = "x86-avx512+bf16"


@pytest.fixture(scope="module")
def conv() -> tuple[Callable[..., Any], list[np.ndarray], list[Any]]:
    return _conv_model(np.random.default_rng(14))


def test_bf16_avx512_families_and_no_tiles(
    conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]],
) -> None:
    """Every convolution is a bfloat16 one on the avx512bf16 ISA in the mode the table names, and
    the library converts and multiplies bfloat16 without any AMX instruction. Compiling needs no
    avx512_bf16 CPU (gcc only)."""
    fn, inputs, _ = conv
    compiled = compile_fn(fn, inputs, TARGET)
    assert kernel_families(compiled) <= {
        ("conv2d_bf16_amx", "avx512bf16"),
        ("copy", "avx512"),
        ("copy", "generic"),
    }, kernel_families(compiled)
    modes = re.findall(
        r'"conv2d_bf16_amx" \["avx512bf16"\] \{[^}]*mode = "(\w+)"', compiled.ir("kernel-plan-memory")
    )
    assert sorted(modes) == sorted(c[-1] for c in CONV_CASES), modes
    assert_instructions(compiled, ("vcvtne2ps2bf16", "vdpbf16ps"))
    disassembly = subprocess.run(
        ["objdump", "-d", compiled.build.library], capture_output=True, text=True
    ).stdout
    assert not re.search(r"\b(tdpbf16ps|tileloadd|ldtilecfg|tilerelease)\b", disassembly)


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_avx512_convolutions(
    conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]], threads: int
) -> None:
    require_avx512_bf16(TARGET)
    fn, inputs, params = conv
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    f32 = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    _check([c[0] for c in CONV_CASES], compiled.run(inputs), _conv_contract(inputs, params), f32)


def test_bf16_avx512_convolutions_sanitized(
    conv: tuple[Callable[..., Any], list[np.ndarray], list[Any]],
) -> None:
    require_avx512_bf16(TARGET)
    fn, inputs, params = conv
    compiled = compile_fn(fn, inputs, TARGET)
    f32 = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    got = compiled.run_runner(inputs, sanitize=True)
    _check([c[0] for c in CONV_CASES], got, _conv_contract(inputs, params), f32)


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_avx512_matrix_products(threads: int) -> None:
    """Linear layers (constant B packed at compile time, bias + ReLU fused, transposed B), a run-time
    batched product, transposed A and B."""
    require_avx512_bf16(TARGET)
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((70, 45)) * 0.2).astype(np.float32)
    b1 = rng.standard_normal((45,)).astype(np.float32)
    w2 = (rng.standard_normal((33, 70)) * 0.2).astype(np.float32)

    def f(x: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, ...]:
        return (
            F.relu(F.matmul(x, Tensor(w1)) + Tensor(b1)),
            F.matmul(x, Tensor(w2), transpose_b=True),
            F.matmul(a, b),
            F.matmul(a.transpose(0, 2, 1), b.transpose(0, 2, 1), transpose_a=True, transpose_b=True),
        )

    x = rng.standard_normal((3, 70)).astype(np.float32)
    a = rng.standard_normal((2, 37, 67)).astype(np.float32)
    b = rng.standard_normal((2, 67, 19)).astype(np.float32)
    compiled = compile_fn(f, [x, a, b], TARGET, threads=threads)
    families = {f for f, _ in kernel_families(compiled)}
    assert families <= {"matmul_bf16_amx", "copy", "dimshuffle"}, families
    assert ("matmul_bf16_amx", "avx512bf16") in kernel_families(compiled)
    f32 = run_module(compiled._stages["tensor"], [x, a, b])  # type: ignore[arg-type]
    xr, ar, br = (round_bfloat16(v).astype(np.float64) for v in (x, a, b))
    contract = [np.maximum(xr @ round_bfloat16(w1) + b1, 0), xr @ round_bfloat16(w2).T, ar @ br, ar @ br]
    _check(["linear_relu", "linear_tb", "batched", "batched_ta_tb"], compiled.run([x, a, b]), contract, f32)


@pytest.mark.parametrize("target", [TARGET, "x86-avx512-nchw88+bf16"])
def test_bf16_avx512_one_row_product(target: str) -> None:
    """A 1-row product with constant weights (a classifier on one image) is ``matmul_matvec_bf16``
    (half the weight bytes of the float32 matvec), odd K and a partial last panel included, on the
    ``+bf16`` contract: 1e-5 of the scale vs bfloat16-rounded operands summed in float64, 1e-2
    relative L2 vs float32; a 2-row one is the bfloat16 GEMM's, 1 and 2 threads."""
    require_avx512_bf16(target)
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((41, 30)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(30).astype(np.float32)
    for rows, family, threads in (
        (1, "matmul_matvec_bf16", 1),
        (1, "matmul_matvec_bf16", 2),
        (2, "matmul_bf16_amx", 1),
    ):
        x = rng.standard_normal((rows, 41)).astype(np.float32)
        compiled = compile_fn(lambda t: F.relu(F.matmul(t, Tensor(w)) + Tensor(bias)), [x], target, threads)
        assert family in {f for f, _ in kernel_families(compiled)}, kernel_families(compiled)
        got = np.asarray(compiled.run([x])[0], np.float64)
        want = np.maximum(
            round_bfloat16(x).astype(np.float64) @ round_bfloat16(w).astype(np.float64) + bias, 0
        )
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), (rows, threads)
        f32 = np.maximum(x @ w + bias, 0)
        assert np.linalg.norm(got - f32) <= 1e-2 * np.linalg.norm(f32)
        assert not np.array_equal(got, f32.astype(np.float64))


def test_bf16_target_rows() -> None:
    """``+bf16`` takes the AMX tiles where the target names amx, else AVX512-BF16; it needs one of
    them and the CPU flag of the row it took."""
    from backends.targets import TargetError, parse_target

    t = parse_target("x86-avx512-vnni+bf16")
    assert t.isas[:2] == ("avx512bf16", "avx512vnni")
    assert t.backend is not None and "avx512_bf16" in t.backend.cpu_flags_needed(t)
    assert "amx_bf16" not in t.backend.cpu_flags_needed(t)
    amx = parse_target("x86-avx512-vnni-amx+bf16")
    assert amx.isas[0] == "amxbf16" and "avx512bf16" not in amx.isas
    with pytest.raises(TargetError, match=r"\+bf16 needs the amx or avx512 feature"):
        parse_target("x86-avx2+bf16")
    with pytest.raises(TargetError, match="plain NCHW"):
        parse_target("x86-avx512-nchw88-amx+bf16")
    n88 = parse_target("x86-avx512-nchw88+bf16")  # the AVX512-BF16 row has NCHW88 kernels
    assert n88.isas[0] == "avx512bf16" and n88.backend is not None
    assert "amx_bf16" not in n88.backend.cpu_flags_needed(n88)
    with pytest.raises(TargetError, match=r"no \+ioc16 or \+io16xc32"):
        parse_target("x86-avx512-nchw88+bf16+io16xc32")
