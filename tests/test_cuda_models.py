"""The CUDA targets end to end: every model compiles for every CUDA target, the generated source builds
with nvcc for sm_80 and sm_90 (warnings as errors, ptxas resource usage parsed) and runs, here through
the CPU execution harness (``backends/cuda/runtime/cuda_cpu.h``: the same source compiled with g++),
natively where a GPU is present, against the reference interpreter:

* float32 (``cuda``): rtol 1e-4 (atol 1e-4 of the output range);
* int8 (``cuda-nchw4`` dp4a, ``cuda-nchw32`` tensor cores, ``cuda-chwn4``, ``cuda-nchw64``): the
  post-training-quantized ResNet against the reference run of the same quantized graph, bit for bit;
* float16 (``+io16xc32``, ``+ioc16``): against the float32 reference, within 1% of the output range.

Builds are cached by content (nvcc about 10 s per model cold). Skips when nvcc is missing.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler.functional as F
from backends.c.build import LoadedModel
from backends.cuda.backend import gpu_problem
from backends.cuda.build import nvcc
from compiler.driver.cli import main as xmge
from compiler.driver.compile import CompiledModel, compile
from compiler.driver.targets import parse_target
from compiler.hub.convnet import ConvNet
from compiler.hub.mini_resnet import MiniResNet
from compiler.hub.mobilenet_v2 import mobilenet_v2
from compiler.hub.quantized import quantized_resnet18
from compiler.hub.resnet import resnet18
from compiler.tensor import Tensor
from semantics import run_module
from tests.codegen_util import compile_fn
from tests.conftest import data_path

pytestmark = pytest.mark.skipif(nvcc() is None, reason="nvcc is not installed")

FLOAT_MODELS: dict[str, tuple[Callable[[], Any], tuple[int, ...]]] = {
    "convnet": (ConvNet, (1, 1, 28, 28)),
    "mini_resnet": (MiniResNet, (1, 3, 32, 32)),
    "mobilenet_v2": (lambda: mobilenet_v2(width_mult=0.25, num_classes=10), (1, 3, 32, 32)),
    "resnet18": (lambda: resnet18(num_classes=10), (1, 3, 32, 32)),
}
INT8_TARGETS = ("cuda-nchw4", "cuda-nchw32", "cuda-chwn4", "cuda-nchw64")
# the int8 family each target must select for the ResNet's 3x3 convolutions
INT8_CONV = {
    "cuda-nchw4": ("conv2d_blocked_q8", "dp4a"),
    "cuda-nchw32": ("conv2d_nchw32_mma", "mma"),
    "cuda-chwn4": ("conv2d_blocked_q8", "dp4a"),
    "cuda-nchw64": ("conv2d_nchw32_mma", "mma"),
}


def _float_model(name: str) -> tuple[Any, np.ndarray]:
    from compiler.random import seed

    seed(7)
    make, shape = FLOAT_MODELS[name]
    net = make()
    net.eval()
    return net, np.random.default_rng(7).random(shape, dtype=np.float32)


def _reference(compiled: CompiledModel, x: np.ndarray) -> np.ndarray:
    return np.asarray(run_module(compiled._stages["tensor"], [x])[0], np.float32)


def _families(compiled: CompiledModel) -> set[tuple[str, str]]:
    return set(re.findall(r'"(\w+)" \["(\w+)"\]', compiled.ir("kernel-plan-memory")))


def _check_nvcc_resources(compiled: CompiledModel) -> None:
    """Every kernel built for sm_80 and sm_90; the convolution kernels spill nothing."""
    resources = compiled.build.resources
    kernels = set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", compiled.source))
    assert kernels
    for arch in ("sm_80", "sm_90"):
        built = resources[arch]
        assert kernels <= set(built), f"{arch}: not built: {kernels - set(built)}"
        for name in kernels:
            if "conv2d" in name:
                assert built[name]["spill_stores"] == 0 and built[name]["spill_loads"] == 0, (arch, name)


@pytest.mark.parametrize(
    "name", [*(n for n in FLOAT_MODELS if n != "resnet18"), pytest.param("resnet18", marks=pytest.mark.slow)]
)
def test_float_model_matches_reference(name: str) -> None:
    net, x = _float_model(name)
    compiled = compile(net, "cuda", [x])
    assert compiled.emulated == (gpu_problem() is not None)
    _check_nvcc_resources(compiled)
    got, want = compiled(x), _reference(compiled, x)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


def test_int32_and_bool_elemwise_match_reference() -> None:
    # was a bug (issue 16): the CUDA elementwise kernel declared every operand and result float, so
    # int32 products read int32 bits as float (denormals multiplied to 0) and comparisons wrote floats
    # into bool buffers; int32 arithmetic also wraps around as the reference's does
    x = np.array([[-3e9, -1e9, 5.0, 3e9, -7.0, 123456.0, 0.0, 65537.0]], np.float32)

    def fn(t: Tensor) -> tuple[Tensor, ...]:
        i = t.astype("int32")
        three = Tensor(np.int32(-3))
        return (
            (i * i).astype("float32"), (i * three).astype("float32"), (i - three).astype("float32"),
            (i < three).astype("float32"), (-i).astype("float32"),
        )  # fmt: skip

    compiled = compile_fn(fn, [x], "cuda")
    assert ("elemwise", "generic") in _families(compiled)
    want = run_module(compiled._stages["tensor"], [x])  # type: ignore[arg-type]
    for k, (got, ref) in enumerate(zip(compiled.run([x]), want, strict=True)):
        np.testing.assert_array_equal(got, np.asarray(ref), err_msg=f"output {k}")


@pytest.fixture(scope="module")
def int8_resnet() -> tuple[Any, np.ndarray]:
    from compiler.random import seed

    seed(7)
    net = quantized_resnet18(
        quantized=True, layers=(1, 1, 1, 1), width=32, num_classes=10, calibration_shape=(1, 3, 32, 32)
    )
    return net, np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)


@pytest.mark.parametrize("target", INT8_TARGETS)
def test_int8_resnet_is_exact(target: str, int8_resnet: tuple[Any, np.ndarray]) -> None:
    net, x = int8_resnet
    compiled = compile(net, target, [x])
    assert INT8_CONV[target] in _families(compiled)
    _check_nvcc_resources(compiled)
    np.testing.assert_array_equal(compiled(x), _reference(compiled, x))


@pytest.mark.slow
@pytest.mark.parametrize("target", INT8_TARGETS)
def test_int8_channels_not_divisible_by_the_block(target: str) -> None:
    """Width 12: NCHW32 convs fall back to NCHW4 dp4a, the stem pads 3 channels to 4."""
    from compiler.random import seed

    seed(3)
    net = quantized_resnet18(
        quantized=True, layers=(1, 1, 1, 1), width=12, num_classes=5, calibration_shape=(1, 3, 20, 20)
    )
    x = np.random.default_rng(3).standard_normal((1, 3, 20, 20)).astype(np.float32)
    compiled = compile(net, target, [x])
    assert ("conv2d_blocked_q8", "dp4a") in _families(compiled)
    np.testing.assert_array_equal(compiled(x), _reference(compiled, x))


@pytest.mark.parametrize("target", ["cuda+io16xc32", "cuda+ioc16"])
def test_float16_within_tolerance(target: str) -> None:
    net, x = _float_model("convnet")
    compiled = compile(net, target, [x])
    got, want = compiled(x), _reference(compiled, x)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * scale)


def test_random_float_shapes_with_odd_channels() -> None:
    """Dense, grouped and depthwise convolutions with channel counts no block divides, pooling,
    softmax, reductions and a matrix multiplication, in one build."""
    rng = np.random.default_rng(11)
    w_dense = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    w_group = rng.standard_normal((3, 3, 3, 2, 2)).astype(np.float32)  # 3 groups, 9 -> 9 channels
    w_dw = rng.standard_normal((7, 1, 1, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((13, 9 * 2 * 2)).astype(np.float32)

    def f(x: Tensor) -> tuple[Tensor, ...]:
        y = F.relu(F.conv2d(x, Tensor(w_dense), stride=2, padding=1))
        dw = F.conv2d(y, Tensor(w_dw), padding=1, groups=7)
        p = F.max_pool2d(dw, 3, 2, 1)
        cat = F.concat([p, p[:, :2]], axis=1)
        g = F.conv2d(cat, Tensor(w_group), groups=3)
        flat = F.flatten(g, 1)
        logits = F.matmul(flat, Tensor(fc), transpose_b=True)
        return F.softmax(logits, axis=1), F.sum(g, axis=2), F.avg_pool2d(dw, 2)

    x = rng.standard_normal((2, 5, 11, 9)).astype(np.float32)
    compiled = compile_fn(f, [x], "cuda")
    want = run_module(compiled._stages["tensor"], [x])
    for i, (g, w) in enumerate(zip(compiled.run([x]), want, strict=True)):
        w = np.asarray(w, np.float32)
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * scale, err_msg=f"output {i}")


def test_targets() -> None:
    assert parse_target("cuda").isas == ("generic",)
    assert parse_target("cuda-nchw4").isas == ("dp4a", "generic")
    assert parse_target("cuda-nchw32").isas == ("mma", "dp4a", "generic")
    assert parse_target("cuda+ioc16").inference_options() == {"enable_ioc16": True}
    assert parse_target("cuda-chwn4").inference_options() == {"enable_chwn4": True}
    assert parse_target("cuda-nchw64").backend.name == "cuda"  # type: ignore[union-attr]


def test_xmge_compile_int8_dump_for_nchw32_builds_with_make(tmp_path: Any) -> None:
    out = tmp_path / "model"
    assert xmge(["compile", data_path("int8", "plain.mge"), "--target", "cuda-nchw32", "-o", str(out)]) == 0
    for name in ("Makefile", "model.cu", "xm_kernels.h", "cuda_cpu.h", "weights.bin", "model.json"):
        assert (out / name).is_file(), name
    subprocess.run(["make", "-C", str(out)], check=True, capture_output=True)
    assert (out / "libplain.so").is_file() and (out / "runner").is_file()  # named after the file
    # the folder's CPU-harness build reproduces MegEngine 1.13's output of the dump
    subprocess.run(["make", "-C", str(out), "cpu"], check=True, capture_output=True)
    meta = json.loads((out / "model.json").read_text())
    assert meta["target"] == "cuda-nchw32"
    model = LoadedModel(str(out / "libplain_cpu.so"), (out / "weights.bin").read_bytes(), 1)
    x = np.load(data_path("int8", "inputs.npz"))["data"].astype(np.float32)
    want = np.load(data_path("int8", "expected_plain.npz"))["dequant.TypeCvt"]
    np.testing.assert_array_equal(model.run([x])[0], want)


@pytest.mark.skipif(gpu_problem() is not None, reason=f"no CUDA GPU: {gpu_problem()}")
def test_native_gpu_run_matches_reference() -> None:
    net, x = _float_model("mini_resnet")
    compiled = compile(net, "cuda", [x])
    assert not compiled.emulated
    want = _reference(compiled, x)
    np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
