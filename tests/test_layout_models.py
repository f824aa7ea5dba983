"""Layout options on whole models.

* MegEngine's own float32 MobileNet-style dumps with each layout option (tests/data/layout_mge,
  made by real MegEngine 1.13) are read, optimized again by ``compile()`` and by the pipeline with
  further options (the inference passes then run on an already blocked graph), and must give
  MegEngine's outputs.
* Every hub model is traced, dumped with every float layout option with and without
  ``enable_fuse_conv_bias_nonlinearity``, read back with ``compiler.lite.Network`` and optimized again,
  and must match eager execution (rel 1e-4). A representative slice runs by default, the whole
  cross-product under ``-m slow``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.parser import Parser

import compiler as xm
import compiler.module as M
from backends.mge.reader import read_mge
from compiler import jit
from compiler.hub.convnet import ConvNet
from compiler.hub.mini_resnet import MiniResNet
from compiler.hub.mobilenet_v2 import mobilenet_v2
from compiler.hub.multi_io import MultiIO
from compiler.hub.resnet import resnet18, resnet50
from compiler.hub.shufflenet_v2 import shufflenet_v2_x0_5
from compiler.lite import Network
from passes.inference import pipeline_for
from semantics import run_module
from tests.filecheck.runner import HERE as FILECHECK_DIR
from tests.test_layout import ctx as layout_ctx

DATA = os.path.join(os.path.dirname(__file__), "data", "layout_mge")
MGE_VARIANTS = ("plain", "fuse", "nchw44", "nchw44_fuse", "nchw88", "nchw44_dot")
# options the pipeline runs on the (possibly already blocked) graph read from the file
REOPTIMIZE: dict[str, dict[str, bool]] = {
    "none": {},
    "fuse": {"enable_fuse_conv_bias_nonlinearity": True},
    "nchw44": {"enable_nchw44": True},
    "nchw88": {"enable_nchw88": True},
    "io16xc32": {"enable_io16xc32": True},
}
FLOAT_LAYOUTS = ("enable_nchw44", "enable_nchw88", "enable_nchw44_dot", "enable_nchw4", "enable_nchw32",
                 "enable_chwn4", "enable_nchw64", "enable_hwcd4")  # fmt: skip
RTOL = 1e-4


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float32) - want).max() / max(float(np.abs(want).max()), 1e-12))


# -- MegEngine's dumps ---------------------------------------------------------------------------


def _mge_case(variant: str) -> tuple[str, np.ndarray, np.ndarray]:
    path = os.path.join(DATA, f"{variant}.mge")
    x = np.load(os.path.join(DATA, "inputs.npz"))["data"]
    (want,) = np.load(os.path.join(DATA, f"expected_{variant}.npz")).values()
    return path, x, want


@pytest.mark.parametrize("variant", MGE_VARIANTS)
def test_megengine_dump_read_and_compiled(variant: str) -> None:
    path, x, want = _mge_case(variant)
    assert _rel_err(Network(path)(x)["fc.ADD"], want) < RTOL
    # compile() runs optimize_for_inference again, on the blocked graph
    assert _rel_err(xm.compile(path, target="ref")(x), want) < RTOL


@pytest.mark.parametrize("options", REOPTIMIZE, ids=str)
@pytest.mark.parametrize("variant", ("nchw44", "nchw88", "nchw44_dot"))
def test_megengine_blocked_dump_reoptimized(variant: str, options: str) -> None:
    path, x, want = _mge_case(variant)
    with open(path, "rb") as f:
        module = read_mge(f.read())
    for p in pipeline_for(**REOPTIMIZE[options]):
        p.apply(Context(), module)
    module.verify()
    (got,) = run_module(module, [x])
    assert _rel_err(got, want) < (2e-2 if options == "io16xc32" else RTOL)


def test_inference_passes_on_blocked_filecheck_input() -> None:
    """The FileCheck input of the inference passes on blocked graphs computes the same after them."""
    with open(f"{FILECHECK_DIR}/layout/inference_on_blocked.mlir") as f:
        before = Parser(layout_ctx(), f.read()).parse_module()
    fn = next(op for op in before.ops if isinstance(op, func.FuncOp))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(tuple(t.get_shape())).astype(np.float32) for t in fn.function_type.inputs.data]
    want = run_module(before, xs)
    for options in REOPTIMIZE.values():
        after = before.clone()
        for p in pipeline_for(**options):
            p.apply(Context(), after)
        after.verify()
        for g, w in zip(run_module(after, xs), want, strict=True):
            np.testing.assert_allclose(g.astype(np.float32), w, rtol=2e-3, atol=2e-3)


# -- hub models through jit.trace(...).dump(..., enable_X=True) ------------------------------------

MODELS: dict[str, tuple[Callable[[], M.Module], list[tuple[int, ...]]]] = {
    "convnet": (ConvNet, [(1, 1, 28, 28)]),
    "mini_resnet": (MiniResNet, [(2, 3, 32, 32)]),
    "multi_io": (MultiIO, [(1, 3, 16, 16), (1, 1, 1, 1)]),
    "mobilenet_v2": (lambda: mobilenet_v2(num_classes=10, width_mult=0.5), [(1, 3, 32, 32)]),
    "resnet18": (lambda: resnet18(num_classes=10), [(1, 3, 32, 32)]),
    "resnet50": (lambda: resnet50(num_classes=10), [(1, 3, 32, 32)]),
    "shufflenet_v2": (lambda: shufflenet_v2_x0_5(num_classes=10), [(1, 3, 64, 64)]),
}
FAST = {
    ("mobilenet_v2", "enable_nchw88", False),
    ("mobilenet_v2", "enable_nchw44", True),
    ("mobilenet_v2", "enable_hwcd4", False),
    ("shufflenet_v2", "enable_nchw44_dot", True),
    ("mini_resnet", "enable_nchw88", True),
    ("multi_io", "enable_nchw44", False),
    ("convnet", "enable_nchw4", True),
}


def _cases() -> list[Any]:
    out = []
    for model, layout, fuse in itertools.product(MODELS, FLOAT_LAYOUTS, (False, True)):
        marks = () if (model, layout, fuse) in FAST else (pytest.mark.slow,)
        case_id = f"{model}-{layout.removeprefix('enable_')}-{'fuse' if fuse else 'nofuse'}"
        out.append(pytest.param(model, layout, fuse, marks=marks, id=case_id))
    return out


_traced: dict[str, tuple[Any, list[np.ndarray], list[np.ndarray]]] = {}


def _traced_model(name: str) -> tuple[Any, list[np.ndarray], list[np.ndarray]]:
    """A traced hub model with non-trivial BatchNorm statistics, its inputs and eager outputs."""
    if name not in _traced:
        ctor, shapes = MODELS[name]
        rng = np.random.default_rng(0)
        net = ctor()
        for m in net.modules():
            if isinstance(m, M.BatchNorm2d):  # fresh statistics fold to identities: no real bias
                m.running_mean[...] = rng.standard_normal(m.running_mean.shape).astype(np.float32) * 0.1
                m.running_var[...] = (rng.random(m.running_var.shape) + 0.5).astype(np.float32)
                m.bias[...] = rng.standard_normal(m.bias.shape).astype(np.float32) * 0.1
        net.eval()
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        eager = net(*[xm.tensor(x) for x in xs])
        want = [t.numpy() for t in (eager if isinstance(eager, tuple | list) else [eager])]

        @jit.trace(symbolic=True, capture_as_const=True)
        def infer(*args: Any) -> Any:
            return net(*args)

        infer(*[xm.tensor(x) for x in xs])
        _traced[name] = (infer, xs, want)
    return _traced[name]


@pytest.mark.parametrize(("model", "layout", "fuse"), _cases())
def test_hub_model_layout_dump(model: str, layout: str, fuse: bool, tmp_path: Any) -> None:
    infer, xs, want = _traced_model(model)
    options = {layout: True, **({"enable_fuse_conv_bias_nonlinearity": True} if fuse else {})}
    path = str(tmp_path / "model.mge")
    infer.dump(path, arg_names=[f"in{i}" for i in range(len(xs))], **options)
    got = list(Network(path)(*xs).values())
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert _rel_err(g, w) < RTOL
    again = xm.compile(path, target="ref")(*xs)
    for g, w in zip(again if isinstance(again, list | tuple) else [again], want, strict=True):
        assert _rel_err(g, w) < RTOL
