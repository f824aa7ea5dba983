"""Post-training-quantized hub models on the fullest x86 int8 target (VNNI, AMX, VBMI together: the host
target of a Sapphire Rapids class CPU) byte-exact against the reference interpreter. Each kernel unit
has its own tests; this one checks that the units a real network picks build into one library and
agree, e.g. that two units' C helpers do not clash (a stem and a pointwise unit once both defined
``xm_q8_narrow64``). Small inputs keep it fast; skipped with the reason on CPUs without the ISA."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import compiler.random
from compiler import compile
from compiler.hub.mobilenet_v2 import mobilenet_v2
from compiler.hub.resnet import resnet18
from compiler.module import Module
from compiler.quantization import quantize
from semantics import run_module
from tests.codegen_util import require
from tests.test_x86_amx import require_amx

TARGET = "x86-avx512-nchw88-vnni-fp16-amx-vbmi"


@pytest.mark.parametrize(
    ("make", "size"),
    [(mobilenet_v2, 48), (resnet18, 40)],
    ids=["mobilenet_v2", "resnet18"],
)
def test_quantized_hub_model_exact_on_the_fullest_target(make: Callable[..., Module], size: int) -> None:
    require(TARGET)
    require_amx()
    compiler.random.seed(3)
    x = np.random.default_rng(3).standard_normal((1, 3, size, size)).astype(np.float32)
    net = make(pretrained=False)
    net.eval()
    compiled = compile(quantize(net, [x]), TARGET, [x])
    calls = compiled.ir("kernel-plan-memory")
    assert "amx" in calls and "vnni" in calls, "the model should use both the AMX and the VNNI units"
    want = run_module(compiled._stages["tensor"], [x])[0]  # type: ignore[arg-type]
    got = compiled(x)
    assert np.abs(want).max() > 0
    np.testing.assert_array_equal(got, want)
