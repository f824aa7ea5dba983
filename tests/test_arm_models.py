"""Whole models for every ARM target under qemu, against the reference interpreter:

* float32 (``arm-nchw44``): rtol 1e-4 (atol 1e-4 of the output range);
* int8 (``arm-nchw44-dot``): the post-training-quantized model (``compiler.quantization``) against
  the reference run of the same quantized graph: the quantized model's tolerance is one quantization
  step; the kernels replicate the reference's requantization exactly, so the test demands equality;
* float16 (``arm-fp16``, ``+ioc16`` compute): against the float32 reference, within 3% of the output
  range (observed below 1%).

Plus a real MegEngine int8 dump through ``xmge compile ... --target arm-nchw44-dot -o DIR``: the
folder builds with its own Makefile (here with the cross compiler) and its runner reproduces
MegEngine's outputs. Small inputs; builds are cached by content (about 30 s cold, 10 s warm).
Skips when the cross compiler or qemu is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from backends.c.cross import cross_cc, qemu, toolchain_problem
from compiler.driver.cli import main as xmge
from compiler.driver.compile import EmulationWarning, compile
from compiler.hub.convnet import ConvNet
from compiler.hub.mini_resnet import MiniResNet
from compiler.hub.mobilenet_v2 import mobilenet_v2
from compiler.hub.shufflenet_v2 import shufflenet_v2_x0_5
from compiler.quantization import quantize
from semantics import run_module
from tests.codegen_util import source_only
from tests.conftest import data_path

_problem = toolchain_problem()
pytestmark = pytest.mark.skipif(_problem is not None, reason=f"ARM toolchain: {_problem}")

MODELS: dict[str, tuple[Callable[[], Any], tuple[int, ...]]] = {
    "convnet": (ConvNet, (1, 1, 28, 28)),
    "mini_resnet": (MiniResNet, (1, 3, 32, 32)),
    "mobilenet_v2": (lambda: mobilenet_v2(width_mult=0.25, num_classes=10), (1, 3, 32, 32)),
    "shufflenet_v2_x0_5": (lambda: shufflenet_v2_x0_5(num_classes=10), (1, 3, 32, 32)),
}
SLOW: set[tuple[str, str]] = set()  # every case takes seconds with warm caches; none is marked slow


def _cases() -> list[Any]:
    out = []
    for name in MODELS:
        for target in ("arm-nchw44", "arm-nchw44-dot", "arm-nchw44-dot-i8mm", "arm-fp16"):
            marks = [pytest.mark.slow] if (name, target) in SLOW else []
            out.append(pytest.param(name, target, marks=marks, id=f"{name}-{target}"))
    return out


def _model(name: str) -> tuple[Any, np.ndarray]:
    from compiler.random import seed

    seed(7)
    make, shape = MODELS[name]
    net = make()
    net.eval()
    x = np.random.default_rng(7).random(shape, dtype=np.float32)
    return net, x


@pytest.mark.parametrize(("name", "target"), _cases())
def test_model_matches_reference(name: str, target: str) -> None:
    net, x = _model(name)
    model = quantize(net, [x]) if "dot" in target else net
    compiled = compile(model, target, [x])
    assert compiled.emulated
    with pytest.warns(EmulationWarning, match="timings under emulation mean nothing"):
        got = compiled(x)
    want = np.asarray(run_module(compiled._stages["tensor"], [x])[0], np.float32)
    scale = max(1.0, float(np.abs(want).max()))
    if "dot" in target:
        ir = compiled.ir("kernel-plan-memory")
        # the register-blocked int8 GEMMs: smmla with i8mm; sdot on NCHW44 rows (1x1) or packed input
        if "i8mm" in target:
            families = ['"conv2d_nchw44_mmla" ["i8mm"]']
        else:
            families = ['"conv2d_nchw44_dot_gemm" ["dot"]', '"conv2d_nchw44_dot_im2col" ["dot"]']
        assert any(f in ir for f in families), ir
        np.testing.assert_array_equal(got, want)
    elif "fp16" in target:
        assert '"conv2d_nchw44_gemm" ["fp16"]' in compiled.ir("kernel-plan-memory")
        np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2 * scale)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


def test_xmge_compile_megengine_int8_dump_builds_and_runs_on_the_device_side(tmp_path: Any) -> None:
    out = tmp_path / "model"
    assert (
        xmge(["compile", data_path("int8", "plain.mge"), "--target", "arm-nchw44-dot", "-o", str(out)]) == 0
    )
    for name in ("Makefile", "CMakeLists.txt", "README.md", "model.c", "weights.bin", "model.json"):
        assert (out / name).is_file(), name
    assert "make" in (out / "README.md").read_text()
    # the one-line build of the README, here with the cross compiler, then the runner under qemu
    subprocess.run(["make", f"CC={cross_cc()}"], cwd=out, check=True, capture_output=True)
    x = np.load(data_path("int8", "inputs.npz"))["data"].astype(np.float32)
    x.tofile(out / "in0.bin")
    sysroot = "/usr/aarch64-linux-gnu"
    if not os.path.isdir(sysroot):
        pytest.skip(f"no aarch64 sysroot at {sysroot} to run the dynamically linked runner")
    cmd = [
        qemu(),
        "-cpu",
        "max",
        "-L",
        sysroot,
        "./runner",
        "weights.bin",
        "-n",
        "1",
        "-i",
        "in0.bin",
        "-o",
        "o.bin",
    ]
    subprocess.run(cmd, cwd=out, check=True, capture_output=True)
    meta = json.loads((out / "model.json").read_text())
    got = np.fromfile(out / "o.bin", np.float32).reshape(meta["outputs"][0]["shape"])
    want = np.load(data_path("int8", "expected_plain.npz"))["dequant.TypeCvt"]  # MegEngine 1.13's output
    np.testing.assert_array_equal(got, want)
    # and the cross-built runner in prebuilt/ (static) gives the same
    shutil.copy(out / "prebuilt" / "runner", out / "runner_static")
    cmd = [qemu(), "-cpu", "max", "./runner_static", "weights.bin", "-n", "1", "-i", "in0.bin", "-o", "p.bin"]
    subprocess.run(cmd, cwd=out, check=True, capture_output=True)
    np.testing.assert_array_equal(np.fromfile(out / "p.bin", np.float32).reshape(got.shape), want)


def test_arm_targets_refuse_sanitizers_and_name_their_emitters() -> None:
    net, x = _model("convnet")
    compiled = compile(net, "arm-nchw44", [x])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        with pytest.raises(ValueError, match="sanitizer builds run on the host only"):
            compiled.run_runner([x], sanitize=True)
    assert "vfmaq_laneq_f32" in compiled.source and "#include <arm_neon.h>" in compiled.source
    with source_only("arm-nchw44+plain-c"):
        assert compile(net, "arm-nchw44+plain-c", [x]).source.count("vfmaq") == 0


def test_instruction_counts_show_the_dot_product_path() -> None:
    """The counter bench/bench_arm.py uses: the int8 build executes sdot in its kernels, its
    portable-C rendering none."""
    from backends.c.cross import count_instructions, defined_functions

    net, x = _model("convnet")
    q = quantize(net, [x])
    counts = {}
    for target in ("arm-nchw44-dot", "arm-nchw44-dot+plain-c"):
        c = compile(q, target, [x])
        wpath, xpath = f"/tmp/xmge-insn-{os.getpid()}-w.bin", f"/tmp/xmge-insn-{os.getpid()}-x.bin"
        with open(wpath, "wb") as f:
            f.write(c.weights)
        x.tofile(xpath)
        try:
            cmd = [c.build.runner, wpath, "-n", "1", "-w", "0", "-i", xpath]
            counts[target] = count_instructions(cmd, defined_functions(c.source)).per_class
        finally:
            os.remove(wpath)
            os.remove(xpath)
    assert counts["arm-nchw44-dot"]["dot"] > 1000
    assert counts["arm-nchw44-dot+plain-c"]["dot"] == 0
    assert sum(counts["arm-nchw44-dot"].values()) < sum(counts["arm-nchw44-dot+plain-c"].values())
