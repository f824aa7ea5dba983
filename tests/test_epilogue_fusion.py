"""``kernel-fuse-epilogue`` fuses exactly what each kernel unit declares (``KernelUnit.epilogues``).

Per target and convolution / matrix-multiplication family, one model holds one ``act(conv(x) + b)``
per activation on odd shapes (channels that are not a multiple of the vector width, odd rows and
columns); every activation the selected unit declares for the result's element type must be fused
(no standalone elementwise call applies it) and the outputs must match the reference interpreter.
Float32 biases hold NaN and +-Inf in some channels: ReLU6 of NaN is NaN, as in the reference. Then
MobileNetV2 (whose ReLU6 no graph pass folds) on the x86 NCHW88 and ARM targets keeps no standalone
ReLU6 call and matches the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.c.kernels import KERNELS
from compiler.driver.compile import CompiledModel
from dialects import kernel as K
from passes.lowering.fuse import element_name
from passes.lowering.kernels import ACTIVATIONS, EpilogueSupport, KernelRegistryError
from semantics import run_module
from tests.codegen_util import compile_fn, require

# activation -> (functional, elementwise mode of the unfused graph)
ACTS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "relu": (F.relu, "relu"),
    "relu6": (F.relu6, "relu6"),
    "sigmoid": (F.sigmoid, "sigmoid"),
    "hswish": (F.hswish, "h_swish"),
}
ARM = ("arm-nchw44", "arm-fp16", "arm-nchw44+plain-c")
pytestmark = pytest.mark.filterwarnings("ignore::backends.c.cross.EmulationWarning")  # ARM under qemu

# (target, convolution kind, the family that must serve it)
CASES = [
    ("x86-avx2", "dense", "conv2d_gemm"),
    ("x86-avx2", "chan", "conv2d_depthwise"),
    ("x86-avx2", "matmul", "matmul_gemm"),
    ("x86-avx512", "dense", "conv2d_gemm"),
    ("x86-avx512", "matmul", "matmul_gemm"),
    ("x86-avx2-nchw88", "dense", "conv2d_nchw88"),
    ("x86-avx2-nchw88", "chan", "conv2d_nchw88_dw3x3"),
    ("x86-avx2-nchw88", "winograd", "conv2d_winograd_nchw88"),
    ("x86-avx512-nchw88", "dense", "conv2d_nchw88"),
    ("x86-avx512-nchw88", "chan", "conv2d_nchw88_dw3x3"),
    ("x86-avx512-nchw88", "winograd", "conv2d_winograd_nchw88"),
    ("arm-nchw44", "dense", "conv2d_nchw44_gemm"),
    ("arm-nchw44", "pointwise", "conv2d_nchw44_gemm"),
    ("arm-nchw44", "chan", "conv2d_nchw44"),
    ("arm-nchw44", "group", "conv2d_nchw44"),
    ("arm-fp16", "dense", "conv2d_nchw44_gemm"),
    ("arm-fp16", "chan", "conv2d_nchw44"),
    ("arm-nchw44+plain-c", "dense", "conv2d_nchw44"),
    ("arm-nchw44+plain-c", "chan", "conv2d_nchw44"),
    # float16 storage, float32 arithmetic
    ("x86-avx2-nchw88+io16xc32", "dense", "conv2d_nchw88"),
    ("x86-avx2-nchw88+io16xc32", "chan", "conv2d_nchw88_chan"),
    ("arm-nchw44+io16xc32", "chan", "conv2d_nchw44"),
]

# kind -> (input channels, output channels, kernel, stride, groups, input height x width)
GEOMETRY: dict[str, tuple[int, int, int, int, int, tuple[int, int]]] = {
    "dense": (16, 20, 3, 2, 1, (9, 7)),
    "pointwise": (12, 20, 1, 1, 1, (5, 7)),
    "chan": (24, 24, 3, 1, 24, (9, 7)),
    "group": (16, 24, 3, 1, 2, (7, 5)),
    "winograd": (16, 24, 3, 1, 1, (9, 11)),
}


def _float16(target: str) -> bool:
    return "fp16" in target or "io16" in target


def _skip_without_toolchain(target: str) -> None:
    if target.startswith("arm"):
        from backends.c.cross import toolchain_problem

        if toolchain_problem() is not None:
            pytest.skip(f"ARM toolchain: {toolchain_problem()}")
    else:
        require(target)


def _bias(rng: np.random.Generator, channels: int, specials: bool) -> np.ndarray:
    b = rng.standard_normal(channels).astype(np.float32)
    if specials:  # one channel NaN, one +Inf, one -Inf: the epilogue sees them after the sum
        b[1], b[2], b[3] = np.nan, np.inf, -np.inf
    return b


def _model(kind: str, specials: bool) -> tuple[Callable[..., Any], np.ndarray]:
    """One ``act(op_i(x) + b_i)`` per activation, each with its own weights (its own kernel call)."""
    rng = np.random.default_rng(11)
    if kind == "matmul":
        x = rng.standard_normal((5, 13)).astype(np.float32)
        ws = [xm.tensor(rng.standard_normal((11, 13)).astype(np.float32) * 0.3) for _ in ACTS]
        bs = [xm.tensor(_bias(rng, 11, specials)) for _ in ACTS]

        def linear(a: Any) -> tuple[Any, ...]:
            return tuple(act(F.linear(a, w, b)) for (act, _), w, b in zip(ACTS.values(), ws, bs, strict=True))

        return linear, x
    ic, oc, k, stride, groups, (h, w) = GEOMETRY[kind]
    x = rng.standard_normal((1, ic, h, w)).astype(np.float32)
    fshape = (oc, ic // groups, k, k) if groups == 1 else (groups, oc // groups, ic // groups, k, k)
    ws = [xm.tensor((rng.standard_normal(fshape) * 0.3).astype(np.float32)) for _ in ACTS]
    bs = [xm.tensor(_bias(rng, oc, specials).reshape(1, oc, 1, 1)) for _ in ACTS]

    def conv(a: Any) -> tuple[Any, ...]:
        return tuple(
            act(F.conv2d(a, w, stride=stride, padding=k // 2, groups=groups) + b)
            for (act, _), w, b in zip(ACTS.values(), ws, bs, strict=True)
        )

    return conv, x


Declared = dict[str, list[tuple[str, EpilogueSupport | None]]]


def _fused_state(compiled: CompiledModel) -> tuple[Declared, set[str]]:
    """After kernel-fuse-epilogue: per family, each call's activation and its unit's declaration for
    the call's result type; and the elementwise modes still called."""
    module = compiled._stages["kernel-fuse-epilogue"]
    calls: Declared = {}
    modes: set[str] = set()
    for c in module.walk():
        if not isinstance(c, K.CallOp):
            continue
        d = c.definition()
        params = d.param_values()
        if d.family.data == "elemwise":
            modes.add(params["mode"])
        elif "act" in params:
            support = KERNELS.of(d).epilogue(element_name(c.outputs[0]) or "")
            calls.setdefault(d.family.data, []).append((params["act"], support))
    return calls, modes


def _compare(got: list[np.ndarray], want: list[Any], target: str) -> None:
    f16 = _float16(target)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w, np.float32)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"output {i}: NaN positions differ")
        finite = w[np.isfinite(w)]
        scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
        tol = 3e-2 if f16 else 1e-4
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, err_msg=f"output {i} ({target})")


@pytest.mark.parametrize(("target", "kind", "family"), CASES, ids=[f"{t}-{k}" for t, k, _ in CASES])
def test_declared_epilogues_fuse_and_match_the_reference(target: str, kind: str, family: str) -> None:
    _skip_without_toolchain(target)
    specials = not _float16(target)  # float16 keeps the bias out of the kernel: finite values there
    fn, x = _model(kind, specials)
    compiled = compile_fn(fn, [x], target)
    calls, modes = _fused_state(compiled)
    assert family in calls, f"{target} {kind}: no {family} call (families: {', '.join(calls)})"
    declared = {a for _, s in calls[family] if s is not None for a in s.activations}
    assert "relu6" in declared, f"{family} on {target} declares no ReLU6 epilogue"
    # an activation may land in another family that serves the same convolution (the NCHW44 3x3
    # depthwise unit takes identity/relu/relu6 ahead of the direct kernel): fused into some unit
    fused = {a for acts in calls.values() for a, _ in acts}
    for act, (_, mode) in ACTS.items():
        if act in declared:
            assert act in fused, f"{act} not fused into {family} (or a unit ahead of it) on {target}"
            assert mode not in modes, f"a standalone {mode} call is left on {target} ({family} declares it)"
    want = run_module(compiled._stages["tensor"], [x])
    got = compiled.run([x])
    _compare(got, want, target)
    if specials:  # ReLU6 of the NaN channel stays NaN, of +-Inf 6 and 0
        relu6 = np.asarray(got[list(ACTS).index("relu6")])
        column = relu6[:, 1] if kind == "matmul" else relu6[0, 1]
        assert np.isnan(column).all()


@pytest.mark.parametrize(
    "target",
    ["x86-avx2-nchw88", "x86-avx512-nchw88", *ARM[:2], "x86-avx2-nchw88+io16xc32", "arm-nchw44+io16xc32"],
)
def test_mobilenet_v2_has_no_standalone_relu6(target: str) -> None:
    _skip_without_toolchain(target)
    from compiler import random as xm_random
    from compiler.hub.mobilenet_v2 import mobilenet_v2

    state = xm_random.get_state()  # later tests' random weights stay what they were without this one
    try:
        xm_random.seed(3)
        net = mobilenet_v2(width_mult=0.25, num_classes=10)
    finally:
        xm_random.set_state(state)
    net.eval()
    x = np.random.default_rng(3).random((1, 3, 32, 32), dtype=np.float32)
    compiled = compile_fn(net, [x], target)
    calls, modes = _fused_state(compiled)
    assert "relu6" not in modes
    # the stem, two per inverted residual block (one in the first), the head
    assert sum(a == "relu6" for acts in calls.values() for a, _ in acts) == 35
    _compare(compiled.run([x]), run_module(compiled._stages["tensor"], [x]), target)


def test_an_epilogue_declaration_names_known_activations() -> None:
    with pytest.raises(KernelRegistryError, match="activations must include 'identity'"):
        EpilogueSupport(activations=frozenset({"identity", "gelu"}))
    with pytest.raises(KernelRegistryError, match="'channels' or 'columns'"):
        EpilogueSupport(bias="rows")
    assert set(ACTIVATIONS) == {"identity", *ACTS}
