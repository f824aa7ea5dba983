"""``compiler.driver.compile`` end to end: targets, whole models against the reference (seed ConvNet, the
mini ResNet, ResNet-18, MobileNetV2 and ShuffleNetV2 on small inputs for both x86 targets; ResNet-50
and 224x224 inputs with ``-m slow``; a real MegEngine .mge file), saving, IR stages, the memory plan,
``xmge compile`` / ``xmge bench`` and ``compiler.lite.Network`` on compiled kernels."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from compiler.driver.compile import CompileError, compile
from compiler.driver.demo import randomise_statistics
from compiler.driver.targets import TargetError, parse_target
from compiler.hub.convnet import ConvNet
from compiler.hub.resnet import resnet18
from semantics import run_module
from tests.codegen_util import X86_TARGETS, require
from tests.conftest import data_path

# the two x86 targets of the issue (blocked NCHW88 on AVX2, plain NCHW with AVX-512 GEMMs) and the
# host default on AVX-512 machines (NCHW88 with AVX-512 micro-kernels)
MODEL_TARGETS = ["x86-avx2-nchw88", "x86-avx512", "x86-avx512-nchw88"]


# -- targets ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "arch", "features", "options"),
    [
        ("ref", "ref", (), ()),
        ("x86-avx2-nchw88", "x86", ("avx2", "nchw88"), ()),
        ("x86-avx512", "x86", ("avx512",), ()),
        ("arm-nchw44-dot", "arm", ("nchw44", "dot"), ()),
        ("arm-fp16", "arm", ("fp16",), ()),
        ("cuda-nchw4+ioc16", "cuda", ("nchw4",), ("ioc16",)),
        ("x86-avx2+io16xc32+fuse-z", "x86", ("avx2",), ("io16xc32", "fuse-z")),
    ],
)
def test_parse_target(text: str, arch: str, features: tuple[str, ...], options: tuple[str, ...]) -> None:
    t = parse_target(text)
    assert (t.arch, t.features, t.options) == (arch, features, options)
    assert str(t) == text


def test_target_properties() -> None:
    assert parse_target("x86-avx512").isas == ("avx512", "avx2", "generic")
    assert parse_target("x86-avx2-nchw88").layout == "nchw88"
    assert parse_target("ref").backend.name == "reference"  # type: ignore[union-attr]
    assert parse_target("arm-nchw44-dot").isas == ("dot", "neon", "generic")
    fp16 = parse_target("arm-fp16+io16xc32")
    assert fp16.inference_options() == {"enable_nchw44": True, "enable_io16xc32": True}
    assert parse_target("cuda-nchw4").backend.name == "cuda"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x68-avx2", "unknown architecture 'x68'.*valid: ref, x86, arm, cuda"),
        ("x86-avx3", "unknown feature 'avx3' for x86.*valid: avx2, avx512, nchw88"),
        ("arm-nchw44+io32", "unknown option 'io32'.*valid: ioc16, io16xc32, fuse-z"),
        ("x86--avx2", "cannot parse target"),
        ("arm-nchw44-nchw88", "unknown feature 'nchw88' for arm"),
    ],
)
def test_bad_targets(text: str, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        parse_target(text)


# -- whole models ---------------------------------------------------------------------------------
def _check_model(net, x: np.ndarray, target: str, threads: int = 1):  # type: ignore[no-untyped-def]
    require(target)
    compiled = compile(net, target, [x], threads=threads)
    want = run_module(compiled._stages["tensor"], [x])[0]  # type: ignore[arg-type]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    return compiled


@pytest.mark.parametrize("target", X86_TARGETS)
def test_convnet_plan(target: str) -> None:
    rng = np.random.default_rng(0)
    net = ConvNet()
    randomise_statistics(net, rng, spread=0.3)
    x = rng.standard_normal((1, 1, 28, 28)).astype(np.float32)
    compiled = _check_model(net, x, target)
    # conv1 (23040 B) and conv2's input, pooled, never live together with everything else: the
    # activations need two conv1-sized slots at most, far less than the sum of all intermediates
    activations = compiled.arena_size - compiled.workspace_size
    assert activations == 23040 + 5760
    assert compiled.workspace_size > 0 and compiled.weights_size >= 4 * (250 + 5000 + 16000 + 500)


@pytest.mark.parametrize("target", X86_TARGETS)
def test_resnet18_small_input(target: str) -> None:
    rng = np.random.default_rng(1)
    net = resnet18(num_classes=37)
    randomise_statistics(net, rng, spread=0.3)
    x = rng.standard_normal((1, 3, 48, 48)).astype(np.float32)
    compiled = _check_model(net, x, target)
    # liveness reuse: the largest intermediate is the stem's 64x24x24 output; at most a few of the
    # block activations are ever live together
    largest = 64 * 24 * 24 * 4
    assert compiled.arena_size - compiled.workspace_size <= 3 * largest


def _hub(name: str, **kwargs):  # type: ignore[no-untyped-def]
    import importlib

    module, fn = name.split(":")
    return getattr(importlib.import_module(f"compiler.hub.{module}"), fn)(**kwargs)


SMALL_MODELS = [
    ("convnet:ConvNet", {}, (1, 1, 28, 28)),
    ("mini_resnet:MiniResNet", {}, (2, 3, 32, 32)),
    ("resnet:resnet18", {"num_classes": 37}, (1, 3, 40, 40)),
    ("mobilenet_v2:mobilenet_v2", {"num_classes": 21}, (1, 3, 40, 40)),
    ("shufflenet_v2:shufflenet_v2_x0_5", {"num_classes": 21}, (1, 3, 48, 48)),
]


@pytest.mark.parametrize("target", MODEL_TARGETS)
@pytest.mark.parametrize(
    ("name", "kwargs", "shape"), SMALL_MODELS, ids=[m[0].split(":")[1] for m in SMALL_MODELS]
)
def test_model_zoo(name: str, kwargs: dict, shape: tuple[int, ...], target: str) -> None:
    rng = np.random.default_rng(11)
    net = _hub(name, **kwargs)
    randomise_statistics(net, rng, spread=0.3)
    net.eval()
    compiled = _check_model(net, rng.standard_normal(shape).astype(np.float32), target)
    blocked = "nchw88" in compiled.ir("c")
    assert blocked == ("nchw88" in target)


@pytest.mark.slow
@pytest.mark.parametrize("target", MODEL_TARGETS)
@pytest.mark.parametrize(
    "name",
    ["resnet:resnet18", "resnet:resnet50", "mobilenet_v2:mobilenet_v2", "shufflenet_v2:shufflenet_v2_x1_0"],
)
def test_model_zoo_224(name: str, target: str) -> None:
    rng = np.random.default_rng(12)
    net = _hub(name)
    randomise_statistics(net, rng, spread=0.3)
    net.eval()
    _check_model(net, rng.standard_normal((1, 3, 224, 224)).astype(np.float32), target)


def test_resnet18_two_threads() -> None:
    rng = np.random.default_rng(2)
    net = resnet18(num_classes=10)
    randomise_statistics(net, rng, spread=0.3)
    _check_model(net, rng.standard_normal((2, 3, 32, 32)).astype(np.float32), "x86-avx2", threads=2)


def test_mge_file_matches_megengine() -> None:
    """A real MegEngine 1.13 dump, compiled from its path, against MegEngine's own outputs."""
    require("x86-avx2")
    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    want = np.load(data_path("convnet", "expected_plain.npz"))["fc2.ADD"]
    compiled = compile(data_path("convnet", "plain.mge"), "x86-avx2")
    np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-5)


# -- products: stages, save, runner ---------------------------------------------------------------
def test_stages_save_and_runner(tmp_path) -> None:  # type: ignore[no-untyped-def]
    require("x86-avx2")
    rng = np.random.default_rng(3)
    net = ConvNet()
    randomise_statistics(net, rng, spread=0.3)
    x = rng.standard_normal((1, 1, 28, 28)).astype(np.float32)
    compiled = compile(net, "x86-avx2", [x])
    assert compiled.stages == [
        "tensor", "inference", "kernel-select", "kernel-fuse-epilogue", "kernel-fuse-moves",
        "kernel-pack-weights", "kernel-plan-memory", "c",
    ]  # fmt: skip
    assert "mgb.conv_bias" in compiled.ir("inference")
    assert "packing" not in compiled.ir("kernel-fuse-epilogue")
    assert 'packing = "gemm_a6"' in compiled.ir("kernel-pack-weights")
    assert "xm_model_run_impl" in compiled.ir("c")
    with pytest.raises(KeyError, match="stages: tensor"):
        compiled.ir("llvm")
    out = tmp_path / "model"
    compiled.save(out)
    names = set(os.listdir(out))
    assert {
        "model.c",
        "libconvnet.so",  # the prefix is the Module's name
        "runner",
        "weights.bin",
        "model.json",
        "kernel.mlir",
        "xm_runtime.h",
    } <= names
    meta = json.loads((out / "model.json").read_text())
    assert meta["arena_bytes"] == compiled.arena_size and meta["inputs"][0]["shape"] == [1, 1, 28, 28]
    x.tofile(out / "x.bin")
    run = subprocess.run(
        [
            str(out / "runner"),
            str(out / "weights.bin"),
            "-i",
            str(out / "x.bin"),
            "-o",
            str(out / "y.bin"),
            "-n",
            "3",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "median" in run.stdout
    np.testing.assert_allclose(np.fromfile(out / "y.bin", np.float32).reshape(1, 10), compiled(x), rtol=1e-6)


def test_reference_target_and_errors() -> None:
    rng = np.random.default_rng(4)
    net = ConvNet()
    x = rng.standard_normal((1, 1, 28, 28)).astype(np.float32)
    compiled = compile(net, "ref", [x])
    assert compiled.stages == ["tensor", "inference"]
    np.testing.assert_allclose(compiled(x), run_module(compiled._stages["tensor"], [x])[0], rtol=1e-5)  # type: ignore[arg-type]
    with pytest.raises(CompileError, match="example_inputs"):
        compile(net, "x86-avx2")
    with pytest.raises(TargetError, match="ioc16.*needs the fp16 feature"):
        compile(net, "x86-avx2+ioc16", [x])
    with pytest.raises(CompileError, match="plain-c are not implemented by the cuda backend"):
        compile(net, parse_target("cuda-nchw4+plain-c"), [x])


@pytest.mark.slow
@pytest.mark.parametrize("target", X86_TARGETS)
def test_resnet50(target: str) -> None:
    from compiler.hub.resnet import resnet50

    rng = np.random.default_rng(5)
    net = resnet50(num_classes=100)
    randomise_statistics(net, rng, spread=0.3)
    _check_model(net, rng.standard_normal((1, 3, 64, 64)).astype(np.float32), target)


# -- command line and lite -------------------------------------------------------------------------
def test_cli_compile_and_bench(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from compiler.driver.cli import main

    require("x86-avx2-nchw88")
    model = data_path("convnet", "plain.mge")
    assert main(["compile", model, "--target", "x86-avx2-nchw88", "-o", str(tmp_path / "out")]) == 0
    assert {"model.c", "runner", "weights.bin"} <= set(os.listdir(tmp_path / "out"))
    assert "nchw88" in (tmp_path / "out" / "model.c").read_text()
    assert (
        main(["bench", model, "--target", "x86-avx2-nchw88", "--threads", "2", "--iters", "3", "--profile"])
        == 0
    )
    out = capsys.readouterr().out
    assert "2 thread(s)" in out and "median" in out and "conv2d_nchw88_" in out
    assert main(["bench", model, "--target", "x86-avx9"]) == 1


def test_lite_network_on_compiled_kernels() -> None:
    from compiler.lite import Network

    require("x86-avx2-nchw88")
    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    want = np.load(data_path("convnet", "expected_plain.npz"))["fc2.ADD"]
    net = Network(data_path("convnet", "plain.mge"), target="x86-avx2-nchw88")
    assert net.compiled is not None and str(net.compiled.target) == "x86-avx2-nchw88"
    np.testing.assert_allclose(net(data=x)["fc2.ADD"], want, rtol=1e-4, atol=1e-5)
    reference = Network(data_path("convnet", "plain.mge"))
    assert reference.compiled is None
    np.testing.assert_allclose(
        reference.compile("x86-avx2", threads=2)(x)["fc2.ADD"], want, rtol=1e-4, atol=1e-5
    )
