"""The layout dialect and the layout passes: index math, syntax and verification, reference
kernels, and every pass numerically (reference interpreter before and after) on the seed ConvNet,
ResNets, a depthwise/group-conv net and nets whose channels are not multiples of 4 or 8; conv
formats and packed weight shapes against MegEngine's own dumps (tests/data/*/case.json)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp, TensorType, f32
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler import jit
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.dtypes import QuantizedType
from passes import builtin_passes
from passes.layout import (
    EnableChwn4Pass,
    EnableHwcd4Pass,
    EnableNchw4Pass,
    EnableNchw32Pass,
    EnableNchw44DotPass,
    EnableNchw44Pass,
    EnableNchw64Pass,
    EnableNchw88Pass,
    PaddingChannelPass,
)
from semantics import run_module

Layout = L.Layout
DATA = os.path.join(os.path.dirname(__file__), "data")


def ctx() -> Context:
    c = Context()
    for d in (Builtin, Func, T.Mgb, L.LayoutDialect):
        c.load_dialect(d)
    return c


# -- index math --------------------------------------------------------------------------------


def _logical_example(spec: L.LayoutSpec, rng: np.random.Generator) -> np.ndarray:
    sizes = {"N": 2, "C": 8, "H": 3, "W": 5, "K": 16, "R": 3, "S": 2, "G": 8}
    shape = []
    present = {spec.logical[d.axis] for d in spec.dims}
    for a in spec.logical:
        n = sizes[a] if a in present else 1
        shape.append(n * (spec.align(spec.logical.index(a)) if spec.align(spec.logical.index(a)) > 8 else 1))
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("layout", list(Layout), ids=str)
def test_pack_unpack_is_identity_and_matches_the_index_map(layout: Layout, rng: np.random.Generator) -> None:
    spec = L.SPECS[layout]
    x = _logical_example(spec, rng)
    packed = spec.pack(x)
    assert packed.shape == spec.physical_shape(x.shape)
    assert np.array_equal(spec.unpack(packed), x)
    assert np.array_equal(spec.pack(spec.unpack(packed)), packed)
    flat = packed.reshape(-1)
    for idx in [tuple(int(rng.integers(n)) for n in x.shape) for _ in range(20)]:
        p = spec.physical_index(idx)
        assert packed[p] == x[idx]
        assert spec.logical_index(p) == idx
        assert flat[spec.offset(idx, packed.shape)] == x[idx]


def test_weight_layouts_are_megengines_bytes(rng: np.random.Generator) -> None:
    """Spec B.6.2: where each weight element lives in MegEngine's packed filters."""
    w = rng.standard_normal((8, 12, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 8, 4, 3, 3)).astype(np.float32)
    cw = rng.standard_normal((8, 1, 1, 3, 3)).astype(np.float32)
    first = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    p44, p88 = L.pack(w, Layout.KCRSc4k4), L.pack(rng.standard_normal((16, 8, 3, 3)), Layout.KCRSc8k8)
    pdot, pg, pcw = L.pack(w, Layout.KCRSk4c4), L.pack(g, Layout.GKCRSc4k4), L.pack(cw, Layout.C11RSc4)
    phyb, p4 = L.pack(first, Layout.KRSCk4), L.pack(w, Layout.KCRSc4)
    assert (
        p44.shape == (2, 3, 3, 3, 4, 4) and phyb.shape == (2, 3, 3, 3, 4) and pcw.shape == (2, 1, 1, 3, 3, 4)
    )
    assert (
        p88.shape == (2, 1, 3, 3, 8, 8) and pg.shape == (2, 2, 1, 3, 3, 4, 4) and p4.shape == (8, 3, 3, 3, 4)
    )
    for k, c, r, s in [(5, 7, 1, 2), (0, 11, 2, 0), (7, 0, 0, 1)]:
        assert p44[k // 4, c // 4, r, s, c % 4, k % 4] == w[k, c, r, s]
        assert pdot[k // 4, c // 4, r, s, k % 4, c % 4] == w[k, c, r, s]
        assert p4[k, c // 4, r, s, c % 4] == w[k, c, r, s]
        assert phyb[k // 4, r, s, c % 3, k % 4] == first[k, c % 3, r, s]
        assert pcw[k // 4, 0, 0, r, s, k % 4] == cw[k, 0, 0, r, s]
        assert pg[1, k // 4, c % 4 // 4, r, s, c % 4, k % 4] == g[1, k, c % 4, r, s]
    x = rng.standard_normal((2, 8, 3, 5)).astype(np.float32)
    a = L.pack(x, Layout.NCHW44)
    assert a.shape == (2, 2, 3, 5, 4) and a[1, 7 // 4, 2, 4, 7 % 4] == x[1, 7, 2, 4]
    assert L.pack(x, Layout.CHWN4)[1, 2, 4, 1, 3] == x[1, 7, 2, 4]
    assert L.pack(x, Layout.NHWCD4)[1, 2, 1, 4, 3] == x[1, 7, 2, 4]


def test_padding_layouts_zero_fill_and_slice_back(rng: np.random.Generator) -> None:
    x = rng.standard_normal((1, 3, 2, 2)).astype(np.float32)
    d4 = L.pack(x, Layout.NHWCD4)
    assert d4.shape == (1, 2, 1, 2, 4) and np.all(d4[..., 3] == 0)
    assert np.array_equal(L.unpack(d4, Layout.NHWCD4, x.shape), x)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    dense = L.pack(w, Layout.DENSEI)
    assert dense.shape == (2, 3, 3, 4, 4) and np.all(dense[:, :, :, 3] == 0)
    assert L.SPECS[Layout.NHWCD4].logical_shape(d4.shape, channels=3) == (1, 3, 2, 2)
    with pytest.raises(ValueError, match="do not pad"):
        L.SPECS[Layout.NHWCD4].logical_shape(d4.shape, channels=8)


# -- syntax, verification, shape inference -------------------------------------------------------


def test_layout_attribute_round_trips() -> None:
    for layout in (Layout.NCHW44, Layout.KCRSc4k4, Layout.DENSEI):
        t = TensorType(f32, [1, 2, 3, 3, 4, 4], L.LayoutAttr(layout))
        assert Parser(ctx(), str(t)).parse_attribute() == t
    assert str(L.LayoutAttr(Layout.NCHW44)) == "#layout.fmt<nchw44>"


def test_relayout_verifier() -> None:
    x = T.ConstOp.from_numpy(np.zeros((1, 8, 4, 4), np.float32))
    good = L.RelayoutOp.build(x.output, Layout.NCHW44)
    assert good.output.type == TensorType(f32, [1, 2, 4, 4, 4], L.LayoutAttr(Layout.NCHW44))
    good.verify()
    bad = L.RelayoutOp.create(
        operands=[x.output], result_types=[TensorType(f32, [1, 4, 4, 4, 4], L.LayoutAttr(Layout.NCHW44))]
    )
    with pytest.raises(VerifyException, match="logical"):
        bad.verify()
    same = L.RelayoutOp.create(operands=[x.output], result_types=[x.output.type])
    with pytest.raises(VerifyException, match="same layout"):
        same.verify()
    small = T.ConstOp.from_numpy(np.zeros((1, 3, 4, 4), np.float32))
    padded = L.RelayoutOp.build(small.output, Layout.NHWCD4, channels=3)
    padded.verify()
    assert padded.output.type.get_shape() == (1, 4, 1, 4, 4)
    with pytest.raises(VerifyException, match="logical"):
        L.RelayoutOp.build(small.output, Layout.NCHW44).verify()  # 3 channels pad only with channels = 3


def test_mgb_ops_in_blocked_formats_infer_and_reject() -> None:
    xt = TensorType(f32, [1, 2, 6, 6, 4], L.LayoutAttr(Layout.NCHW44))
    dense = {"format": enums.Format.NCHW44, "sparse": enums.ConvSparse.DENSE}
    wl = TensorType(f32, [3, 2, 3, 3, 4, 4], L.LayoutAttr(Layout.KCRSc4k4))
    (out,) = T.ConvolutionOp.infer([xt, wl], **dense)
    assert out == TensorType(f32, [1, 3, 4, 4, 4], L.LayoutAttr(Layout.NCHW44))
    with pytest.raises(T.ShapeInferenceError, match="filter must be"):
        T.ConvolutionOp.infer([xt, TensorType(f32, [3, 2, 3, 3, 4, 4])], **dense)
    with pytest.raises(T.ShapeInferenceError, match="input must be #layout.fmt<nchw88>"):
        T.ConvolutionOp.infer([xt, wl], format=enums.Format.NCHW88, sparse=enums.ConvSparse.DENSE)
    with pytest.raises(T.ShapeInferenceError, match="needs a 7-D GKCRSc4k4 or 6-D C11RSc4"):
        T.ConvolutionOp.infer(
            [xt, TensorType(f32, [3, 3, 3])], format=enums.Format.NCHW44, sparse=enums.ConvSparse.GROUP
        )
    hybrid = TensorType(f32, [3, 3, 3, 3, 4], L.LayoutAttr(Layout.KRSCk4))
    (out,) = T.ConvBiasOp.infer([TensorType(f32, [1, 3, 6, 6]), hybrid], **dense)
    assert out == TensorType(f32, [1, 3, 4, 4, 4], L.LayoutAttr(Layout.NCHW44))
    with pytest.raises(T.ShapeInferenceError, match="mix layouts"):
        T.ElemwiseOp.infer([xt, TensorType(f32, [1, 8, 6, 6])], mode=enums.ElemwiseMode.ADD)
    (added,) = T.ElemwiseOp.infer([xt, TensorType(f32, [1, 1, 1, 1])], mode=enums.ElemwiseMode.ADD)
    assert added == xt
    with pytest.raises(T.ShapeInferenceError, match="split in blocks"):
        T.ReduceOp.infer([xt], mode=enums.ReduceMode.SUM, axis=1)
    (pooled,) = T.PoolingOp.infer(
        [xt], mode=enums.PoolingMode.MAX, window=(2, 2), stride=(2, 2), format=enums.Format.NCHW44
    )
    assert pooled == TensorType(f32, [1, 2, 3, 3, 4], L.LayoutAttr(Layout.NCHW44))
    x = L.RelayoutOp.build(T.ConstOp.from_numpy(np.zeros((1, 8, 6, 6), np.float32)).output, Layout.NCHW44)
    reshape = T.ReshapeOp.make([x.output], [TensorType(f32, [1, 288])])
    with pytest.raises(VerifyException, match="plain tensors only"):
        reshape.verify()


# -- passes: registry and numerics ---------------------------------------------------------------

ALL = [
    PaddingChannelPass("nchw44"),
    PaddingChannelPass("nchw88"),
    EnableNchw44Pass(),
    EnableNchw88Pass(),
    EnableNchw44DotPass(),
    EnableHwcd4Pass(),
    EnableNchw4Pass(),
    EnableNchw32Pass(),
    EnableChwn4Pass(),
    EnableNchw64Pass(),
]


def test_every_layout_pass_is_registered() -> None:
    table = builtin_passes()
    for p in ALL:
        assert table[p.name] is type(p)


def trace(net: M.Module, shape: tuple[int, ...]) -> tuple[ModuleOp, np.ndarray]:
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data, *, net):  # type: ignore[no-untyped-def]
        return net(data)

    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    infer(xm.tensor(x), net=net)
    return infer.module, x


def optimized(net: M.Module, shape: tuple[int, ...]) -> tuple[ModuleOp, np.ndarray]:
    """Traced and run through the base optimize_for_inference passes (BN folding and friends)."""
    from passes.inference import base_passes

    module, x = trace(net, shape)
    for p in base_passes():
        p.apply(ctx(), module)
    return module, x


def check(module: ModuleOp, x: np.ndarray, pass_: ModulePass) -> ModuleOp:
    after = module.clone()
    pass_.apply(ctx(), after)
    after.verify()
    want, got = run_module(module, [x]), run_module(after, [x])
    for w, g in zip(want, got, strict=True):
        assert w.shape == g.shape and w.dtype == g.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return after


def convs(module: ModuleOp) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """(format, filter shape, output shape) of every conv."""
    return [
        (
            op.params()["format"].name,
            tuple(op.operands[1].type.get_shape()),
            tuple(op.results[0].type.get_shape()),
        )
        for op in module.walk()
        if isinstance(op, T.ConvolutionOp | T.ConvBiasOp)
    ]


def count(module: ModuleOp, kind: type) -> int:
    return sum(isinstance(op, kind) for op in module.walk())


class DepthwiseNet(M.Module):
    """Dense, group (4 groups of 8) and channel-wise convs, residual add, pooling, concat."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = M.Conv2d(3, 16, 3, padding=1)
        self.dw = M.Conv2d(16, 16, 3, padding=1, groups=16)
        self.group = M.Conv2d(16, 32, 3, padding=1, groups=2)
        self.pw = M.Conv2d(32, 16, 1)
        self.pool = M.AvgPool2d(2)
        self.fc = M.Linear(32 * 4 * 4, 5)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = F.relu(self.stem(x))
        z = F.relu(self.dw(y)) + y
        z = F.relu(self.pw(F.relu(self.group(z))))
        z = self.pool(F.concat([z, y], axis=1))
        return self.fc(F.flatten(z, 1))


class OddChannels(M.Module):
    """Channels 3 -> 6 -> 10 -> 12 (spec B.6.4's example), then a channel-wise conv on 12, a group
    conv that cannot be padded (5 -> 10, 5 groups) and a sigmoid output with 10 channels."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = M.Conv2d(3, 6, 3, padding=1)
        self.c2 = M.Conv2d(6, 10, 3, padding=1)
        self.c3 = M.Conv2d(10, 12, 1)
        self.dw = M.Conv2d(12, 12, 3, padding=1, groups=12)
        self.c4 = M.Conv2d(12, 5, 1)
        self.g = M.Conv2d(5, 10, 3, padding=1, groups=5)
        self.pool = M.MaxPool2d(2)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = F.relu(self.c2(F.relu(self.c1(x))))
        y = self.pool(y)
        y = F.relu(self.dw(self.c3(y)))
        return F.sigmoid(self.g(self.c4(y)))


def _convnet() -> tuple[ModuleOp, np.ndarray]:
    from compiler.hub.convnet import ConvNet

    return trace(ConvNet(), (1, 1, 28, 28))


def _mini_resnet() -> tuple[ModuleOp, np.ndarray]:
    from compiler.hub.mini_resnet import MiniResNet

    return optimized(MiniResNet(), (1, 3, 32, 32))


NETS: dict[str, Callable[[], tuple[ModuleOp, np.ndarray]]] = {
    "convnet": _convnet,
    "mini_resnet": _mini_resnet,
    "depthwise": lambda: optimized(DepthwiseNet(), (1, 3, 8, 8)),
    "odd_channels": lambda: optimized(OddChannels(), (2, 3, 8, 8)),
}
_CACHE: dict[str, tuple[ModuleOp, np.ndarray]] = {}


def net(name: str) -> tuple[ModuleOp, np.ndarray]:
    if name not in _CACHE:
        _CACHE[name] = NETS[name]()
    module, x = _CACHE[name]
    return module.clone(), x


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("pass_", ALL, ids=str)
def test_pass_keeps_numerics(pass_: ModulePass, name: str) -> None:
    module, x = net(name)
    after = check(module, x, pass_)
    if isinstance(pass_, EnableNchw4Pass | EnableNchw32Pass | EnableChwn4Pass | EnableNchw64Pass):
        assert count(after, L.RelayoutOp) == 0  # float graphs: only the conv-bias fusion
        assert all(f == "NCHW" for f, _, _ in convs(after))
    elif not isinstance(pass_, PaddingChannelPass):
        assert any(f != "NCHW" for f, _, _ in convs(after))


def test_resnet18_in_nchw44_and_nchw88() -> None:
    from compiler.hub.resnet import resnet18

    module, x = optimized(resnet18(num_classes=10), (1, 3, 32, 32))
    for p in (EnableNchw44Pass(), EnableNchw88Pass()):
        after = check(module, x, p)
        formats = [f for f, _, _ in convs(after)]
        assert formats.count("NCHW") == 0, formats
        assert count(after, L.RelayoutOp) == 1  # back to NCHW before the flatten only


def test_padding_follows_megengines_example() -> None:
    """Spec B.6.4: conv 3->6->10->12 gets filters (2,3,3,3,4) [hybrid, K 6->8],
    (3,2,3,3,4,4) [C 6->8, K 10->12] and (3,3,1,1,4,4)."""
    from passes.inference import FuseConvBiasNonlinearityPass

    module, x = net("odd_channels")
    # as in MegEngine's nchw44 pipeline (B.4), biases are fused into the convs before padding; an
    # unfused bias ADD would slice the padded channels back (B.6.4: its bias input is not padded)
    FuseConvBiasNonlinearityPass().apply(ctx(), module)
    padded = check(module, x, PaddingChannelPass("nchw44"))
    shapes = [s for _, s, _ in convs(padded)]
    assert shapes[:3] == [(8, 3, 3, 3), (12, 8, 3, 3), (12, 12, 1, 1)]
    after = check(module, x, EnableNchw44Pass())
    got = convs(after)
    assert [s for _, s, _ in got[:4]] == [
        (2, 3, 3, 3, 4),
        (3, 2, 3, 3, 4, 4),
        (3, 3, 1, 1, 4, 4),
        (3, 1, 1, 3, 3, 4),
    ]
    assert got[4][1] == (2, 3, 1, 1, 4, 4)  # c4: 12 -> 5 padded to 8
    assert got[5][0] == "NCHW"  # the 5-group conv stays NCHW, on the sliced input
    subtensors = [op for op in after.walk() if isinstance(op, T.SubtensorOp)]
    # the group conv reads c4's 5 channels back from the padded 8; its own K is never padded
    assert [tuple(op.output.type.get_shape())[1] for op in subtensors] == [5]


# -- MegEngine's own dumps ------------------------------------------------------------------------


def golden_convs(case: str, variant: str) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    with open(os.path.join(DATA, case, "case.json")) as f:
        oprs = json.load(f)["variants"][variant]["oprs"]
    shapes = {o["outputs"][0][0]: tuple(o["outputs"][0][2]) for o in oprs if o["type"] == "ImmutableTensor"}
    return [
        (o["params"]["format"], shapes[o["inputs"][1]], tuple(o["outputs"][0][2]))
        for o in oprs
        if o["type"] in ("Convolution", "ConvBias")
    ]


@pytest.mark.parametrize(
    ("case", "variant", "pass_"),
    [
        ("convnet", "nchw44", EnableNchw44Pass()),
        ("convnet", "nchw88", EnableNchw88Pass()),
        ("convnet", "nchw44_dot", EnableNchw44DotPass()),
        ("mini_resnet", "nchw44", EnableNchw44Pass()),
        ("mini_resnet", "nchw88", EnableNchw88Pass()),
    ],
)
def test_formats_and_weight_shapes_match_megengine(case: str, variant: str, pass_: ModulePass) -> None:
    module, x = net(case)
    after = check(module, x, pass_)
    assert sorted(convs(after)) == sorted(golden_convs(case, variant))
    pools = [op.params()["format"].name for op in after.walk() if isinstance(op, T.PoolingOp)]
    assert pools and all(f == variant.upper().replace("_DOT", "") for f in pools)


# -- int8 graphs ------------------------------------------------------------------------------------


def q(scale: float, kind: str = "qint8") -> QuantizedType:
    return QuantizedType(kind, scale)


def int8_module(channels: tuple[int, ...], kind: str = "qint8", group: bool = False, hw: int = 6) -> ModuleOp:
    """x -> conv_bias(relu) per channel pair -> max pooling -> conv_bias, all quantized."""
    from xdsl.builder import ImplicitBuilder
    from xdsl.dialects import func
    from xdsl.ir import Block, Region

    rng = np.random.default_rng(3)
    storage = np.int8 if kind != "quint4" else np.uint8
    lim = 7 if kind in ("qint4", "quint4") else 100
    xt = TensorType(q(0.5, kind), [2, channels[0], hw, hw])
    block = Block(arg_types=[xt])
    with ImplicitBuilder(block) as (x,):
        v = x
        for i, (cin, cout) in enumerate(zip(channels, channels[1:], strict=False)):
            g = 2 if group and i == 1 else 1
            shape = (g, cout // g, cin // g, 3, 3) if g > 1 else (cout, cin, 3, 3)
            w = T.ConstOp.from_numpy(rng.integers(-lim, lim, shape).astype(storage), q(0.25, kind))
            b = T.ConstOp.from_numpy(
                rng.integers(-50, 50, (1, cout, 1, 1)).astype(np.int32), q(0.125, "qint32")
            )
            out = TensorType(q(1.0, kind), [2, cout, v.type.get_shape()[2] - 2, v.type.get_shape()[3] - 2])
            sparse = enums.ConvSparse.GROUP if g > 1 else enums.ConvSparse.DENSE
            v = T.ConvBiasOp.make(
                [v, w.output, b.output], [out], sparse=sparse, nonline_mode=enums.NonlineMode.RELU
            ).output
            if i == 0:
                s = v.type.get_shape()
                v = T.PoolingOp.make(
                    [v],
                    [TensorType(v.type.element_type, [s[0], s[1], s[2], s[3]])],
                    mode=enums.PoolingMode.MAX,
                    window=(1, 1),
                    stride=(1, 1),
                ).output
        func.ReturnOp(v)
    fn = func.FuncOp("main", ([xt], [v.type]), Region(block))
    module = ModuleOp([fn])
    module.verify()
    return module


def int8_input(module: ModuleOp) -> np.ndarray:
    from xdsl.dialects import func

    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    t = fn.body.block.args[0].type
    assert isinstance(t, TensorType)
    return np.random.default_rng(4).integers(-60, 60, t.get_shape()).astype(np.int8)


@pytest.mark.parametrize(
    ("pass_", "channels", "kind", "want"),
    [
        (EnableNchw4Pass(), (3, 8, 8), "qint8", ["NCHW4", "NCHW4"]),
        (EnableNchw4Pass(), (8, 8, 6), "qint8", ["NCHW4", "NCHW"]),
        (EnableNchw32Pass(), (4, 32, 32), "qint8", ["NCHW4", "NCHW32"]),
        (EnableChwn4Pass(), (4, 8, 8), "qint8", ["CHWN4", "CHWN4"]),
        (EnableNchw64Pass(), (8, 32, 32), "qint8", ["NCHW4", "NCHW32"]),
        (EnableNchw64Pass(), (64, 64, 64), "qint4", ["NCHW64", "NCHW64"]),
        (EnableNchw44DotPass(), (4, 8, 8), "qint8", ["NCHW44_DOT", "NCHW44_DOT"]),
        (EnableNchw44Pass(), (4, 8, 8), "qint8", ["NCHW44", "NCHW44"]),
    ],
    ids=lambda v: str(v) if not isinstance(v, list) else "-".join(v),
)
def test_int8_layouts(pass_: ModulePass, channels: tuple[int, ...], kind: str, want: list[str]) -> None:
    module = int8_module(channels, kind, hw=8)
    x = int8_input(module)
    if kind == "qint4":
        x = np.clip(x, -8, 7).astype(np.int8)
    after = module.clone()
    pass_.apply(ctx(), after)
    after.verify()
    assert [f for f, _, _ in convs(after)] == want
    for w, g in zip(run_module(module, [x]), run_module(after, [x]), strict=True):
        assert np.array_equal(w, g)


def test_int8_group_conv_in_nchw4_and_dot() -> None:
    module = int8_module((8, 8, 16), group=True, hw=8)
    x = int8_input(module)
    for p, want in ((EnableNchw4Pass(), Layout.GKCRSc4), (EnableNchw44DotPass(), Layout.GKCRSk4c4)):
        after = module.clone()
        p.apply(ctx(), after)
        after.verify()
        filters = [L.layout_of(op.operands[1].type) for op in after.walk() if isinstance(op, T.ConvBiasOp)]
        assert filters[1] == want
        for w, g in zip(run_module(module, [x]), run_module(after, [x]), strict=True):
            assert np.array_equal(w, g)
