"""The optimize_for_inference passes (passes.inference): their FileCheck files, the pipeline builder,
and numerics — the reference interpreter's outputs before and after every pass agree on the seed
ConvNet, ResNet-style nets, a depthwise/group-conv net and a net whose channels are not multiples
of 4 or 8.

Tolerances: float32 rewrites within rtol = atol = 1e-5. The float16 passes compute in float16, so
their outputs are compared with the float32 ones within rtol = atol = 1e-2 (the bound golden
case.json gives for comparing fp16 implementations; the observed worst case is about 1.4e-3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import Builtin, ModuleOp, TensorType, i32
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.passes import ModulePass

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler import jit
from compiler.hub.convnet import ConvNet
from compiler.hub.mini_resnet import MiniResNet
from compiler.hub.resnet import BasicBlock, ResNet
from dialects import tensor as T
from dialects.dtypes import numpy_dtype
from passes import builtin_passes
from passes.canonicalize import MgbCanonicalizePass
from passes.dce import MgbDeadCodeEliminationPass
from passes.inference import (
    INFERENCE_PASSES,
    ArithFusePass,
    F16IOCompPass,
    F16IOF32CompPass,
    FoldBatchNormPass,
    FuseConvBiasNonlinearityPass,
    FuseConvBiasWithZPass,
    InferenceOptionError,
    ParamFusePass,
    ReorderArithChainPass,
    SplitReduceSqueezePass,
    base_passes,
    pipeline_for,
)
from semantics import run_module
from tests.conftest import data_path
from tests.filecheck.runner import execute, filecheck_files, run_lines

F32_TOL = 1e-5
F16_TOL = 1e-2
F16_PASSES = (F16IOCompPass, F16IOF32CompPass)

RUNS = [r for f in filecheck_files("inference") for r in run_lines(f)]


@pytest.mark.parametrize("run", RUNS, ids=[r.id for r in RUNS])
def test_filecheck(run: Any) -> None:
    ok, transcript = execute(run)
    assert ok, transcript


# -- nets ----------------------------------------------------------------------------------------


class GroupNet(M.Module):
    """Depthwise and group convolutions with BN, a residual add and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = M.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(8)
        self.dw = M.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.dw_bn = M.BatchNorm2d(8)
        self.gconv = M.Conv2d(8, 12, 1, groups=4)
        self.g_bn = M.BatchNorm2d(12)
        self.fc = M.Linear(12, 5)

    def forward(self, x: Any) -> Any:
        x = F.relu(self.bn(self.conv(x)))
        x = F.relu6(self.dw_bn(self.dw(x))) + x
        x = F.sigmoid(self.g_bn(self.gconv(x)))
        return self.fc(F.flatten(F.mean(x, (2, 3), keepdims=True), 1))


class OddChannelNet(M.Module):
    """Channel counts 5 and 7 (not multiples of 4 or 8), conv bias + relu, BN without a conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = M.Conv2d(3, 5, 3)
        self.conv2 = M.Conv2d(5, 7, 3, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(7)
        self.dw = M.Conv2d(7, 7, 3, groups=7)
        self.bn3 = M.BatchNorm2d(7)
        self.fc = M.Linear(7, 3)

    def forward(self, x: Any) -> Any:
        x = F.relu(self.conv1(x))
        x = F.hswish(self.bn2(self.conv2(x)))
        x = self.bn3(F.relu(self.dw(x)))  # BN after a nonlinearity: FUSE_MUL_ADD3
        return self.fc(F.mean(x, (2, 3)))


def _randomize_buffers(net: M.Module, seed: int) -> None:
    """Non-trivial BN statistics and biases (fresh modules have mean 0, var 1, bias 0)."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in net.state_dict().items():
        a = np.asarray(value, np.float32)
        if name.endswith(("running_var", "bn.weight")) or ".weight" in name and a.ndim <= 1:
            a = rng.uniform(0.5, 1.5, a.shape).astype(np.float32)
        elif name.endswith(("running_mean", "bias")):
            a = (0.1 * rng.standard_normal(a.shape)).astype(np.float32)
        state[name] = a
    net.load_state_dict(state)


def _golden(net: M.Module, case: str) -> M.Module:
    w = np.load(data_path(case, "weights.npz"))
    net.load_state_dict({k: w[k] for k in w})
    return net


NETS: dict[str, tuple[Callable[[], M.Module], tuple[int, ...]]] = {
    "convnet": (lambda: _golden(ConvNet(), "convnet"), (1, 1, 28, 28)),
    "mini_resnet": (lambda: _golden(MiniResNet(), "mini_resnet"), (1, 3, 32, 32)),
    "resnet10": (lambda: ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10), (1, 3, 32, 32)),
    "group_net": (GroupNet, (2, 3, 9, 9)),
    "odd_channels": (OddChannelNet, (1, 3, 10, 10)),
}


def _trace(name: str) -> ModuleOp:
    make, shape = NETS[name]
    net = make()
    if name not in ("convnet", "mini_resnet"):
        _randomize_buffers(net, seed=len(name))
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: Any) -> Any:
        return net(x)

    f(xm.tensor(np.zeros(shape, np.float32)))
    module, _ = f._last
    return module


@pytest.fixture(scope="module")
def traced() -> Callable[[str], ModuleOp]:
    cache: dict[str, ModuleOp] = {}

    def get(name: str) -> ModuleOp:
        if name not in cache:
            cache[name] = _trace(name)
        return cache[name]

    return get


# -- numerics ------------------------------------------------------------------------------------


def _inputs(module: ModuleOp, entry: str | None = None, seed: int = 0) -> list[np.ndarray]:
    fns = [op for op in module.ops if isinstance(op, func.FuncOp)]
    fn = next(f for f in fns if entry in (None, f.sym_name.data))
    rng = np.random.default_rng(seed)
    out = []
    for t in fn.function_type.inputs.data:
        assert isinstance(t, TensorType)
        a = rng.standard_normal(tuple(t.get_shape())) * (5 if t.element_type == i32 else 1)
        out.append(a.astype(numpy_dtype(t.element_type)))
    return out


def _apply(module: ModuleOp, passes: Sequence[ModulePass]) -> ModuleOp:
    out = module.clone()
    for p in passes:
        p.apply(Context(), out)
    out.verify()
    return out


def assert_same_outputs(before: ModuleOp, after: ModuleOp, tol: float, entry: str | None = None) -> None:
    inputs = _inputs(before, entry)
    want, got = run_module(before, inputs, entry), run_module(after, inputs, entry)
    assert len(want) == len(got)
    for w, g in zip(want, got, strict=True):
        assert w.shape == g.shape and w.dtype == g.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def _ops(module: ModuleOp) -> list[str]:
    return [
        op.name + (f" {op.params()['mode'].value}" if isinstance(op, T.ElemwiseOp) else "")
        for op in module.walk()
    ]


# For each pass: the options whose pipeline contains it, so it sees the IR it sees in a dump.
PASS_OPTIONS: dict[str, dict[str, bool]] = {
    "f16-io-comp": {"enable_ioc16": True},
    "f16-io-f32-comp": {"enable_io16xc32": True},
    "fuse-conv-bias-nonlinearity": {"enable_fuse_conv_bias_nonlinearity": True},
    "fuse-conv-bias-with-z": {"enable_fuse_conv_bias_with_z": True},
}
# (pass, net) pairs where the pass must change the graph (so a no-op pass fails the test)
MUST_CHANGE = {
    "fold-batch-norm": {"mini_resnet", "resnet10", "group_net", "odd_channels"},
    "reorder-arith-chain": {"mini_resnet", "resnet10"},
    "arith-fuse": {"convnet", "mini_resnet", "resnet10", "group_net"},
    "f16-io-comp": set(NETS),
    "f16-io-f32-comp": set(NETS),
    "fuse-conv-bias-nonlinearity": set(NETS),
}
PIPELINE_PASSES = [cls for cls in INFERENCE_PASSES if cls is not SplitReduceSqueezePass]


@pytest.mark.parametrize("net", list(NETS))
@pytest.mark.parametrize("pass_cls", PIPELINE_PASSES, ids=lambda c: c.name)
def test_pass_keeps_outputs_on_nets(traced: Callable[[str], ModuleOp], pass_cls: type, net: str) -> None:
    pipeline = [SplitReduceSqueezePass(), *pipeline_for(**PASS_OPTIONS.get(pass_cls.name, {}))]
    index = next((i for i, p in enumerate(pipeline) if isinstance(p, pass_cls)), len(pipeline))
    before = _apply(traced(net), pipeline[:index])
    after = _apply(before, [pass_cls()])
    tol = F16_TOL if pass_cls in F16_PASSES else F32_TOL
    assert_same_outputs(before, after, tol)
    if net in MUST_CHANGE.get(pass_cls.name, ()):
        assert _ops(after) != _ops(before) or str(after) != str(before)


OPTION_SETS: list[dict[str, bool]] = [
    {},
    {"enable_fuse_conv_bias_nonlinearity": True},
    {"enable_fuse_conv_bias_with_z": True},
    {"enable_io16xc32": True},
    {"enable_ioc16": True, "enable_fuse_conv_bias_nonlinearity": True},
]


@pytest.mark.parametrize("net", list(NETS))
@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(o) or "default")
def test_whole_pipeline_keeps_outputs(
    traced: Callable[[str], ModuleOp], options: dict[str, bool], net: str
) -> None:
    before = traced(net)
    after = _apply(before, pipeline_for(**options))
    fp16 = options.get("enable_io16xc32") or options.get("enable_ioc16")
    assert_same_outputs(before, after, F16_TOL if fp16 else F32_TOL)
    names = _ops(after)
    assert "mgb.batch_norm" not in names
    if options.get("enable_fuse_conv_bias_nonlinearity"):
        # a ResNet projection shortcut's conv is the residual bias of the block's last ConvBias
        # and stays a plain convolution (as in MegEngine's mini_resnet "fuse" dump)
        projections = {"mini_resnet": 1, "resnet10": 3}.get(net, 0)
        assert names.count("mgb.convolution") == projections and "mgb.conv_bias" in names


def _ctx() -> Context:
    ctx = Context()
    for d in (Builtin, Func, T.Mgb):
        ctx.load_dialect(d)
    return ctx


@pytest.mark.parametrize("pass_cls", INFERENCE_PASSES, ids=lambda c: c.name)
@pytest.mark.parametrize("path", filecheck_files("inference"), ids=lambda p: p.rsplit("/", 1)[-1])
def test_pass_keeps_outputs_on_filecheck_inputs(pass_cls: type, path: str) -> None:
    with open(path) as f:
        before = Parser(_ctx(), f.read(), path).parse_module()
    after = _apply(before, [pass_cls()])
    tol = F16_TOL if pass_cls in F16_PASSES else F32_TOL
    for fn in (op for op in before.ops if isinstance(op, func.FuncOp)):
        assert_same_outputs(before, after, tol, entry=fn.sym_name.data)


# -- the pipeline builder ------------------------------------------------------------------------


def _names(passes: Sequence[ModulePass]) -> list[str]:
    return [p.name for p in passes]


def test_pipeline_order_follows_megengine() -> None:
    base = _names(base_passes())
    assert base[0] == "fold-batch-norm" and base[-1] == "mgb-dce"
    assert base.index("reorder-arith-chain") < base.index("arith-fuse")
    tail = ["param-fuse", "mgb-canonicalize", "mgb-dce"]
    assert _names(pipeline_for()) == [*base, "fuse-grain", *tail]
    assert _names(pipeline_for(enable_fuse_grain=False)) == [*base, "mgb-canonicalize", "mgb-dce"]
    assert pipeline_for(optimize_for_inference=False) == []
    # B.4: f16 conversion before conv fusion; with_z adds nonlinearity fusion then z fusion
    got = _names(pipeline_for(enable_io16xc32=True, enable_fuse_conv_bias_with_z=True))
    assert got == [
        *base,
        "fuse-grain",
        "f16-io-f32-comp",
        "fuse-conv-bias-nonlinearity",
        "fuse-conv-bias-with-z",
        *tail,
    ]
    assert _names(pipeline_for(enable_ioc16=True))[len(base) + 1] == "f16-io-comp"


def test_layout_options_use_registry_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    got = _names(pipeline_for(enable_nchw44=True))
    assert got[got.index("fuse-grain") + 1 :] == ["fuse-conv-bias-nonlinearity", "enable-nchw44", *got[-3:]]
    nchw4 = _names(pipeline_for(enable_nchw4=True))
    assert nchw4[nchw4.index("fuse-conv-bias-with-z") + 1] == "enable-nchw4"
    import passes.registry

    table = {k: v for k, v in builtin_passes().items() if k != "enable-nchw88"}
    monkeypatch.setattr(passes.registry, "builtin_passes", lambda: table)
    with pytest.raises(InferenceOptionError, match="enable_nchw88 is not implemented.*'enable-nchw88'"):
        pipeline_for(enable_nchw88=True)


def test_option_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown options: \['enable_magic', 'fast'\]"):
        pipeline_for(enable_magic=True, fast=1)
    with pytest.raises(
        ValueError, match="conflicting layout options enable_nchw88 and enable_nchw44.*keep only"
    ):
        pipeline_for(enable_nchw44=True, enable_nchw88=True)
    with pytest.raises(ValueError, match="conflicting options enable_io16xc32 and enable_ioc16"):
        pipeline_for(enable_io16xc32=True, enable_ioc16=True)
    with pytest.raises(ValueError, match="enable_fuse_preprocess is not implemented"):
        pipeline_for(enable_fuse_preprocess=True)
    # false flags are no conflict
    assert pipeline_for(enable_nchw44=False, enable_nchw88=False) == pipeline_for()


def test_passes_are_registered_with_descriptions() -> None:
    table = builtin_passes()
    for cls in INFERENCE_PASSES:
        assert table[cls.name] is cls
        assert cls.__doc__ and not cls.__doc__.startswith(cls.__name__)
    for cls in (FoldBatchNormPass, ReorderArithChainPass, ArithFusePass, FuseConvBiasWithZPass):
        assert cls() == cls()  # frozen dataclasses compare by options
    assert ParamFusePass(max_growth=-1) != ParamFusePass()
    assert isinstance(FuseConvBiasNonlinearityPass(), ModulePass)
    assert MgbCanonicalizePass() in pipeline_for() and MgbDeadCodeEliminationPass() in pipeline_for()
