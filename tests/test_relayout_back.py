"""Graphs dumped in a layout the target has no kernels for compile by computing in NCHW
(``passes/layout/relayout_back.py``): NHWCD4 (OpenCL), the CUDA int8 layouts NCHW4/NCHW32/CHWN4/
NCHW64 on x86, NCHW88 on ARM. Each compiled model matches the reference on the dump itself (float:
to rounding; int8: exactly), and compiling says once, in one line, what it converted."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
import compiler.module as M
from backends.targets import parse_target
from compiler import jit
from compiler.driver.compile import compile, native_layouts
from compiler.lite import Network
from passes.layout.relayout_back import RelayoutNote, lacking_layouts


class SmallNet(M.Module):
    """Conv+BN+ReLU, a strided conv, a residual depthwise conv, pooling and a linear head: the op
    kinds a blocked layout changes."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = M.Conv2d(3, 8, 3, padding=1), M.BatchNorm2d(8)
        self.c2 = M.Conv2d(8, 16, 3, stride=2, padding=1)
        self.dw = M.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = M.Linear(16, 5)

    def forward(self, x: Any) -> Any:
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.c2(y))
        y = y + F.relu(self.dw(y))
        y = F.max_pool2d(y, 2)
        return self.fc(F.mean(y, axis=(2, 3)))


def _dump(traced: Any, tmp_path: Any, option: str) -> str:
    buf = io.BytesIO()
    traced.dump(buf, arg_names=["data"], optimize_for_inference=True, **{option: True})
    path = tmp_path / f"{option}.mge"
    path.write_bytes(buf.getvalue())
    return str(path)


def _compile_with_notes(path: str, target: str | None = None) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = compile(path, target)
    return model, [str(w.message) for w in caught if issubclass(w.category, RelayoutNote)]


@pytest.fixture(scope="module")
def float_net() -> tuple[Any, np.ndarray]:
    net = SmallNet()
    net.eval()
    rng = np.random.default_rng(0)
    for p in net.parameters():
        p._data = (rng.standard_normal(p.shape) * 0.3).astype(np.float32)

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: Any) -> Any:
        return net(x)

    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    f(xm.tensor(x))
    return f, x


def test_an_nhwcd4_dump_compiles_for_the_host(float_net: tuple[Any, np.ndarray], tmp_path: Any) -> None:
    traced, x = float_net
    path = _dump(traced, tmp_path, "enable_hwcd4")
    want = next(iter(Network(path)(data=x).values()))
    model, notes = _compile_with_notes(path)
    np.testing.assert_allclose(model(x), want, rtol=1e-4, atol=1e-5)
    assert len(notes) == 1 and "\n" not in notes[0]
    assert notes[0].startswith("nhwcd4 layout has no kernels here:") and "run in NCHW instead" in notes[0]


def test_a_layout_the_target_has_is_kept(float_net: tuple[Any, np.ndarray], tmp_path: Any) -> None:
    traced, x = float_net
    path = _dump(traced, tmp_path, "enable_nchw88")
    model, notes = _compile_with_notes(path, "x86-avx2")
    assert notes == []
    np.testing.assert_allclose(model(x), next(iter(Network(path)(data=x).values())), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def int8_net() -> tuple[Any, np.ndarray]:
    from compiler.quantization import quantize
    from tests.test_quant import SHAPES, _model

    net = _model("mini_resnet")
    rs = np.random.RandomState(7)
    calib = [rs.randn(16, *SHAPES["mini_resnet"]).astype(np.float32) for _ in range(2)]
    qnet = quantize(net, calib)
    traced = jit.trace(lambda x: qnet(x), symbolic=True, capture_as_const=True)
    sample = rs.randn(1, *SHAPES["mini_resnet"]).astype(np.float32)
    traced(xm.tensor(sample))
    return traced, sample


@pytest.mark.parametrize(
    ("option", "layouts"),
    [
        ("enable_nchw4", "nchw4"),
        ("enable_nchw32", "nchw32/nchw4"),
        ("enable_chwn4", "chwn4/nchw4"),
        ("enable_nchw64", "nchw32/nchw4"),
    ],
)
def test_int8_cuda_layout_dumps_compile_for_the_host_exactly(
    int8_net: tuple[Any, np.ndarray], tmp_path: Any, option: str, layouts: str
) -> None:
    traced, sample = int8_net
    path = _dump(traced, tmp_path, option)
    want = next(iter(Network(path)(data=sample).values()))
    model, notes = _compile_with_notes(path)
    np.testing.assert_array_equal(np.asarray(model(sample), np.float64), np.asarray(want, np.float64))
    assert len(notes) == 1 and notes[0].startswith(f"{layouts} layout has no kernels here:")


def test_native_layouts_and_unknown_names() -> None:
    assert native_layouts(parse_target("x86-avx2")) == "nchw88"
    assert native_layouts(parse_target("arm-nchw44-dot")) == "nchw44"
    assert native_layouts(parse_target("cuda")) == "chwn4,nchw32,nchw4,nchw64"
    assert {str(x) for x in lacking_layouts("nchw88")} == {
        "nhwcd4",
        "nchw4",
        "nchw32",
        "nchw44",
        "chwn4",
        "nchw64",
    }
    with pytest.raises(ValueError, match=r"unknown layout\(s\) \['nchw99'\]"):
        lacking_layouts("nchw88,nchw99")


def test_an_nchw88_dump_compiles_for_arm(float_net: tuple[Any, np.ndarray], tmp_path: Any) -> None:
    from backends.c.cross import toolchain_problem

    problem = toolchain_problem()
    if problem is not None:
        pytest.skip(f"ARM toolchain: {problem}")
    traced, x = float_net
    path = _dump(traced, tmp_path, "enable_nchw88")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the emulation note
        model, notes = _compile_with_notes(path, "arm")
    assert len(notes) == 1 and notes[0].startswith("nchw88 layout has no kernels here:")
    np.testing.assert_allclose(model(x), next(iter(Network(path)(data=x).values())), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("option", ["enable_hwcd4", "enable_nchw32", "enable_chwn4", "enable_nchw64"])
def test_a_resnet18_dump_in_a_foreign_layout_compiles_for_the_host(tmp_path: Any, option: str) -> None:
    from compiler.hub.resnet import resnet18

    net = resnet18()
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: Any) -> Any:
        return net(x)

    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    f(xm.tensor(x))
    path = _dump(f, tmp_path, option)
    model, _ = _compile_with_notes(path)
    np.testing.assert_allclose(model(x), next(iter(Network(path)(data=x).values())), rtol=1e-3, atol=1e-4)
