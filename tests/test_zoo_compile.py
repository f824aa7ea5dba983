"""Every zoo architecture in ``compiler.hub`` (issue 11), in its small test config, goes the whole way:
trace, dump in the three variants (plain, ``enable_fuse_conv_bias_nonlinearity``, ``enable_nchw88``),
read back and compile with ``compiler.compile`` for the host target, then match eager:

* float32 models within 1e-4 of the output's largest magnitude;
* int8 models exactly: the compiled output equals the reference interpreter's run of the same
  read-back graph, which itself equals the eager int8 model.

The plain dump of a representative subset also compiles for the other x86 targets, and a few models
for ``arm-nchw44`` under qemu (skipped without the cross toolchain). The traced model and its dumps
are built once per model (module-scoped ``zoo`` fixture); the C build cache makes reruns cheap.
Configs come from ``tests/test_zoo_*.py`` so each small model is defined in one place.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.module as M
from backends.c.cross import EmulationWarning, toolchain_problem
from backends.mge.reader import read_mge
from compiler import hub, jit
from compiler.driver.targets import host_target, parse_target, runs_here
from compiler.random import seed
from semantics import run_module
from tests.test_zoo_detection import SMALL as DENSE_SMALL
from tests.test_zoo_gen import SMALL as GENERATOR_SMALL
from tests.test_zoo_gen import _noise, _randomize_batch_norm_statistics
from tests.test_zoo_models import QUANTIZED
from tests.test_zoo_nlp import (
    BERT_SMALL,
    CLIP_SMALL,
    _bert_inputs,
    _clip_inputs,
    _ImageTower,
    _LastLayerAndPooled,
)

DUMP_VARIANTS: dict[str, dict[str, bool]] = {
    "plain": {},
    "fuse": {"enable_fuse_conv_bias_nonlinearity": True},
    "nchw88": {"enable_nchw88": True},
}
FLOAT_RTOL = 1e-4

Builder = Callable[[], tuple[M.Module, list[np.ndarray]]]


@dataclass(frozen=True)
class ZooModel:
    build: Builder
    int8: bool = False
    # why the host compile fails (an xfail naming the bug and where it lives), if it does
    host_bug: str | None = None
    host_bug_raises: type[BaseException] = AssertionError


def _image(shape: tuple[int, ...] = (1, 3, 32, 32)) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _classifier(entry: str, **kwargs: Any) -> Builder:
    def build() -> tuple[M.Module, list[np.ndarray]]:
        import importlib

        module, fn = entry.split(":")
        return getattr(importlib.import_module(f"compiler.hub.{module}"), fn)(**kwargs), [_image()]

    return build


def _resnet50_small() -> tuple[M.Module, list[np.ndarray]]:
    # ResNet-50's bottleneck blocks at full width, one block per stage (the full depth is slow)
    from compiler.hub.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10), [_image()]


def _quantized(entry: str) -> Builder:
    def build() -> tuple[M.Module, list[np.ndarray]]:
        import compiler.hub.quantized as Q

        x = _image((2, 3, 32, 32))
        model = getattr(Q, entry)(quantized=True, calibration_shape=x.shape, **QUANTIZED[entry])
        return model, [x]

    return build


def _dense(entry: str) -> Builder:
    def build() -> tuple[M.Module, list[np.ndarray]]:
        kwargs, image, _ = DENSE_SMALL[entry]
        return hub.load("megengine/models", entry, **kwargs), [image]

    return build


def _generator(entry: str) -> Builder:
    def build() -> tuple[M.Module, list[np.ndarray]]:
        model = hub.load("megengine/models", entry, **GENERATOR_SMALL[entry])
        _randomize_batch_norm_statistics(model)
        return model, [_noise()]

    return build


def _bert() -> tuple[M.Module, list[np.ndarray]]:
    bert = hub.load("megengine/models", "uncased_L_12_H_768_A_12", **BERT_SMALL)
    return _LastLayerAndPooled(bert), _bert_inputs()


def _clip(entry: str, image_tower_only: bool) -> Builder:
    def build() -> tuple[M.Module, list[np.ndarray]]:
        clip = hub.load("megengine/models", entry, **CLIP_SMALL[entry])
        image, text = _clip_inputs()
        return (_ImageTower(clip), [image]) if image_tower_only else (clip, [image, text])

    return build


ZOO: dict[str, ZooModel] = {
    "resnet18": ZooModel(_classifier("resnet:resnet18", num_classes=10)),
    "resnet50": ZooModel(_resnet50_small),
    "resnext50_32x4d": ZooModel(_classifier("resnext:resnext50_32x4d", layers=[1, 1, 1, 1], num_classes=10)),
    "shufflenet_v2_x2_0": ZooModel(_classifier("shufflenet_v2:shufflenet_v2_x2_0", num_classes=10)),
    "mobilenet_v2": ZooModel(_classifier("mobilenet_v2:mobilenet_v2", width_mult=0.25, num_classes=10)),
    **{name: ZooModel(_quantized(name), int8=True) for name in sorted(QUANTIZED)},
    "retinanet": ZooModel(_dense("retinanet_res18_coco_3x_800size")),
    "fcos": ZooModel(_dense("fcos_res18_coco_3x_800size")),  # GroupNorm heads
    "deeplabv3plus": ZooModel(_dense("deeplabv3plus_res101_voc_512size")),
    "simplebaseline": ZooModel(_dense("simplebaseline_res50")),
    "dcgan_generator": ZooModel(_generator("dcgan_generator")),
    "wgan_generator": ZooModel(_generator("wgan_generator")),
    "bert": ZooModel(_bert),
    "clip_vit_b_32": ZooModel(_clip("vit_b_32", False)),
    "clip_rn50": ZooModel(_clip("rn50", False)),
    "clip_vit_b_32_image": ZooModel(_clip("vit_b_32", True)),
    "clip_rn50_image": ZooModel(_clip("rn50", True)),
}  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Shared artefacts: one eager run, one trace and three dumps per model


@dataclass
class Artefacts:
    inputs: list[np.ndarray]
    eager: list[np.ndarray]
    dumps: dict[str, bytes] = field(default_factory=dict)


class ZooArtefacts:
    """Builds each model's artefacts on first use and keeps them for the rest of the module."""

    def __init__(self) -> None:
        self._built: dict[str, Artefacts] = {}

    def __getitem__(self, name: str) -> Artefacts:
        if name not in self._built:
            self._built[name] = _build_artefacts(ZOO[name].build)
        return self._built[name]


def _as_list(out: Any) -> list[Any]:
    return [out] if isinstance(out, xm.Tensor) else list(out)


def _build_artefacts(build: Builder) -> Artefacts:
    seed(0)
    model, inputs = build()
    model.eval()
    eager = [e.numpy() for e in _as_list(model(*[xm.tensor(x) for x in inputs]))]
    traced = jit.trace(lambda *xs: model(*xs), symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(x) for x in inputs])
    art = Artefacts(inputs, eager)
    for variant, options in DUMP_VARIANTS.items():
        buf = io.BytesIO()
        traced.dump(buf, **options)
        art.dumps[variant] = buf.getvalue()
    return art


@pytest.fixture(scope="module")
def zoo() -> ZooArtefacts:
    return ZooArtefacts()


# ----------------------------------------------------------------------------------------------
# The check every compiled model passes


def _compile_and_check(name: str, art: Artefacts, variant: str, target: str) -> None:
    module = read_mge(art.dumps[variant])
    compiled = xm.compile(module, target=target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)  # the ARM runs: correctness, not timing
        got = compiled.run(art.inputs)
    assert len(got) == len(art.eager), f"{name}: {len(got)} outputs, eager has {len(art.eager)}"
    if ZOO[name].int8:
        reference = run_module(module, art.inputs)
        for k, (g, ref, want) in enumerate(zip(got, reference, art.eager, strict=True)):
            np.testing.assert_array_equal(ref, want, err_msg=f"{name} output {k}: read-back dump vs eager")
            np.testing.assert_array_equal(g, ref, err_msg=f"{name} output {k}: {target} vs reference")
        return
    for k, (g, want) in enumerate(zip(got, art.eager, strict=True)):
        assert g.shape == want.shape, f"{name} output {k}: shape {g.shape}, eager {want.shape}"
        scale = max(float(np.abs(want).max()), 1e-6)
        err = float(np.abs(g.astype(np.float32) - want).max()) / scale
        assert err <= FLOAT_RTOL, f"{name} output {k} ({variant} dump, {target}): relative error {err:.2e}"


def _xfail(reason: str | None, raises: type[BaseException]) -> list[Any]:
    return [pytest.mark.xfail(strict=True, raises=raises, reason=reason)] if reason else []


# ----------------------------------------------------------------------------------------------
# Host target: every model, every dump variant


def _host_cases() -> list[Any]:
    return [
        pytest.param(name, variant, id=f"{name}-{variant}", marks=_xfail(m.host_bug, m.host_bug_raises))
        for name, m in ZOO.items()
        for variant in DUMP_VARIANTS
    ]


@pytest.mark.parametrize(("name", "variant"), _host_cases())
def test_dump_compiles_for_the_host_and_matches_eager(zoo: ZooArtefacts, name: str, variant: str) -> None:
    _compile_and_check(name, zoo[name], variant, str(host_target()))


# ----------------------------------------------------------------------------------------------
# The other x86 targets: the plain dump of a representative subset by default, the rest when slow

X86_TARGETS = ("x86-avx2", "x86-avx2-nchw88", "x86-avx512")
# dense and grouped convs, depthwise, int8, GroupNorm with several outputs, transformer matmuls
X86_DEFAULT = ("resnet18", "mobilenet_v2", "quantized_mobilenet_v2", "fcos", "bert")


def _x86_cases() -> list[Any]:
    out = []
    for name, m in ZOO.items():
        for target in X86_TARGETS:
            marks = _xfail(m.host_bug, m.host_bug_raises)
            if name not in X86_DEFAULT:
                marks.append(pytest.mark.slow)
            out.append(pytest.param(name, target, id=f"{name}-{target}", marks=marks))
    return out


@pytest.mark.parametrize(("name", "target"), _x86_cases())
def test_dump_compiles_for_each_x86_target(zoo: ZooArtefacts, name: str, target: str) -> None:
    if not runs_here(parse_target(target)):
        pytest.skip(f"this CPU cannot run {target}")
    _compile_and_check(name, zoo[name], "plain", target)


# ----------------------------------------------------------------------------------------------
# ARM (NEON, NCHW44) under qemu

_arm_problem = toolchain_problem()

RUNNER_INPUTS_AS_FLOAT32 = (
    "wrong outputs (relative error ~0.9): backends/c/backend.py X86Backend.run_runner writes every "
    "input as float32 (np.ascontiguousarray(x, dtype=np.float32).tofile) and reads every output as "
    "float32, so BERT's int32 token ids reach the qemu-run runner as float bit patterns"
)
ARM_DEFAULT: dict[str, str | None] = {
    "mobilenet_v2": None,
    "fcos": None,
    "quantized_resnet18": None,
    "dcgan_generator": None,
    "bert": None,
}


def _arm_cases() -> list[Any]:
    out = []
    for name, m in ZOO.items():
        marks = _xfail(m.host_bug, m.host_bug_raises)
        if name in ARM_DEFAULT:
            marks += _xfail(ARM_DEFAULT[name], AssertionError)
        else:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(name, id=name, marks=marks))
    return out


@pytest.mark.skipif(_arm_problem is not None, reason=f"ARM toolchain: {_arm_problem}")
@pytest.mark.parametrize("name", _arm_cases())
def test_dump_compiles_for_arm_nchw44_under_qemu(zoo: ZooArtefacts, name: str) -> None:
    _compile_and_check(name, zoo[name], "plain", "arm-nchw44")
