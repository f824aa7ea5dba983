"""Layout-typed graphs in .mge files (backends/mge/layouts.py): MegEngine's own NCHW44/NCHW88/
NCHW44_DOT files read into layout-typed IR and run, xmge's dumps with every layout option in
MegEngine's form (same operators, formats, Dimshuffle patterns and Subtensor items as MegEngine's
dumps in case.json), and dump -> load -> dump byte stability.

Tolerances: float32 files within rtol 1e-5 / atol 1e-6 of MegEngine's outputs (observed: at most
7.2e-7 absolute); int8 files exactly (observed).
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.parser import Parser

import compiler as xm
import compiler.functional as F
from backends.mge.container import RawOpr, parse_file
from backends.mge.reader import read_mge
from backends.mge.writer import write_mge
from compiler import dtype as D
from compiler import jit
from compiler.lite import Network
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from semantics import run_module
from tests.conftest import data_path
from tests.mge_helpers import dump_bytes, inputs, traced
from tests.test_layout import ctx

GOLDEN = [
    ("convnet", "nchw44"),
    ("convnet", "nchw88"),
    ("convnet", "nchw44_dot"),
    ("mini_resnet", "nchw44"),
    ("mini_resnet", "nchw88"),
    ("int8", "nchw44"),
    ("int8", "nchw44_dot"),
]
FLOAT_GOLDEN = [cv for cv in GOLDEN if cv[0] != "int8"]
OPTIONS = [
    "enable_nchw44",
    "enable_nchw88",
    "enable_nchw44_dot",
    "enable_nchw4",
    "enable_nchw32",
    "enable_chwn4",
    "enable_nchw64",
    "enable_hwcd4",
]
FORMAT_KINDS = ("Convolution", "ConvBias", "Pooling", "AdaptivePooling")

Sig = tuple[Any, ...]


def case_variant(case: str, variant: str) -> dict[str, Any]:
    with open(data_path(case, "case.json")) as f:
        return json.load(f)["variants"][variant]


def golden_bytes(case: str, variant: str) -> bytes:
    with open(data_path(case, f"{variant}.mge"), "rb") as f:
        return f.read()


def raw_sig(o: RawOpr) -> Sig:
    """An operator as the comparison sees it: type, format / pattern / mode / index items."""
    extra: Any = None
    for p in o.params:
        v = p.values
        if p.kind in FORMAT_KINDS:
            extra = enums.from_number(enums.Format, v["format"]).name
        elif p.kind == "Dimshuffle":
            extra = tuple(v["pattern"])
        elif p.kind == "Elemwise":
            extra = enums.from_number(enums.ElemwiseMode, v["mode"]).name
        elif p.kind == "IndexDescMaskDump":
            extra = tuple(tuple(bool(f) if i else f for i, f in enumerate(it)) for it in v["items"])
        elif p.kind == "RelayoutFormat":
            extra = enums.from_number(enums.RelayoutFormatMode, v["mode"]).name
    return (o.kind, extra)


def golden_sig(o: dict[str, Any]) -> Sig:
    p = o.get("params") or {}
    extra: Any = None
    if o["type"] in FORMAT_KINDS:
        extra = p["format"]
    elif o["type"] == "Dimshuffle":
        extra = tuple(p["pattern"])
    elif o["type"] == "Elemwise":
        extra = p["mode"]
    elif o["type"] == "Subtensor":
        extra = tuple(tuple(it) for it in p["items"])
    return (o["type"], extra)


def sigs(data: bytes) -> list[Sig]:
    return [raw_sig(o) for o in parse_file(data)[0].oprs]


def run_file(data: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    net = Network(data)
    return list(net(**{n: feeds[n] for n in net.get_all_input_name()}).values())


def check_outputs(case: str, got: list[np.ndarray], expected: Any) -> None:
    assert len(got) == len(expected.files)
    for arr, name in zip(got, expected.files, strict=True):
        if case == "int8":
            np.testing.assert_array_equal(arr, expected[name])
        else:
            np.testing.assert_allclose(arr, expected[name], rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def traces() -> dict[str, Any]:
    return {case: traced(case) for case in ("convnet", "mini_resnet")}


# ----------------------------------------------------------------------------------------------
# MegEngine's files


@pytest.mark.parametrize("case,variant", GOLDEN)
def test_megengine_layout_files_load_and_match(case: str, variant: str) -> None:
    data = golden_bytes(case, variant)
    module = read_mge(data)
    ops = list(next(iter(module.ops)).walk())  # type: ignore[union-attr]
    formats = {op.params()["format"] for op in ops if isinstance(op, T.ConvBiasOp | T.PoolingOp)}
    want = {"nchw88": enums.Format.NCHW88, "nchw44": enums.Format.NCHW44}.get(variant)
    if want is None:  # DOT: int8 convs in NCHW44_DOT, float ones in NCHW44 (spec B.6.2)
        want = enums.Format.NCHW44_DOT if case == "int8" else enums.Format.NCHW44
    assert formats == {want}
    filters = {L.layout_of(op.operands[1].type) for op in ops if isinstance(op, T.ConvBiasOp)}
    assert None not in filters and len(filters) >= 2  # hybrid first layer + packed dense filters
    relayouts = [op for op in ops if isinstance(op, L.RelayoutOp)]
    assert len(relayouts) == 1 and L.layout_of(relayouts[0].output.type) is None  # back to NCHW
    assert not [op for op in ops if isinstance(op, T.DimshuffleOp)]  # the pair became the relayout
    check_outputs(case, run_file(data, inputs(case)), np.load(data_path(case, f"expected_{variant}.npz")))


@pytest.mark.parametrize("case,variant", GOLDEN)
def test_megengine_layout_files_rewrite_in_their_own_form(case: str, variant: str) -> None:
    data = golden_bytes(case, variant)
    once = write_mge(read_mge(data))
    assert write_mge(read_mge(once)) == once
    gold = [golden_sig(o) for o in case_variant(case, variant)["oprs"]]
    assert [s[0] for s in sigs(once)] == [s[0] for s in gold]
    assert [s for s in sigs(once) if s[0] != "Subtensor"] == [s for s in gold if s[0] != "Subtensor"]


# ----------------------------------------------------------------------------------------------
# xmge's dumps


@pytest.mark.parametrize("case,variant", FLOAT_GOLDEN)
def test_layout_dump_has_megengines_operators(traces: dict[str, Any], case: str, variant: str) -> None:
    v = case_variant(case, variant)
    data = dump_bytes(traces[case], **v["dump_kwargs"])
    assert sigs(data) == [golden_sig(o) for o in v["oprs"]]
    # packed weights and biases with MegEngine's physical shapes
    ours = [t.shape for o in parse_file(data)[0].oprs for t in o.tensors if o.kind == "ImmutableTensor"]
    theirs = [tuple(o["outputs"][0][2]) for o in v["oprs"] if o["type"] == "ImmutableTensor"]
    assert ours == theirs
    check_outputs(case, run_file(data, inputs(case)), np.load(data_path(case, f"expected_{variant}.npz")))
    assert write_mge(read_mge(data)) == data


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("case", ["convnet", "mini_resnet"])
def test_every_layout_option_dumps_runs_and_is_byte_stable(
    traces: dict[str, Any], case: str, option: str
) -> None:
    feeds = inputs(case)
    expected = np.load(data_path(case, "expected_plain.npz"))
    for fmt in ("FBS_V2", "FBS"):
        data = dump_bytes(
            traces[case], arg_names=["data"], dump_format=fmt, keep_var_name=2, **{option: True}
        )
        again = write_mge(read_mge(data), dump_format=fmt, keep_var_name=2)
        assert again == data
        check_outputs(case, run_file(data, feeds), expected)
    kinds = [s for s in sigs(data)]
    formats = {s[1] for s in kinds if s[0] in FORMAT_KINDS}
    if option in ("enable_nchw4", "enable_nchw32", "enable_chwn4", "enable_nchw64"):
        # int8-only layouts: a float graph only gets conv-bias fusion (MegEngine, spec B.6.6)
        assert formats == {"NCHW"}
        assert sigs(data) == sigs(dump_bytes(traces[case], arg_names=["data"], **{option: True}))
    elif option == "enable_hwcd4":
        assert "NHWCD4" in formats
        modes = [s[1] for s in kinds if s[0] == "RelayoutFormat"]
        assert modes == ["NCHW_NHWCD4I", "NHWCD4I_NCHW"]
        # MegEngine pads no channels for NHWCD4: the 1->10 first conv of convnet stays NCHW
        first_conv = next(s for s in kinds if s[0] == "ConvBias")
        assert first_conv[1] == ("NCHW" if case == "convnet" else "NHWCD4")
    else:
        assert formats == {"NCHW88" if option == "enable_nchw88" else "NCHW44"}
        assert [s[1] for s in kinds if s[0] == "Dimshuffle"] == [(0, 1, 4, 2, 3)]


# ----------------------------------------------------------------------------------------------
# int8


def _int8_model() -> Any:
    """The golden int8 model (QuantStub, three quantized ConvBias, DequantStub) with xmge's API."""
    fn = next(iter(read_mge(golden_bytes("int8", "plain")).ops))
    assert isinstance(fn, func.FuncOp)
    ops = [op for op in fn.body.block.ops if isinstance(op, T.MgbOp)]
    in_elem = next(op for op in ops if isinstance(op, T.TypeCvtOp)).results[0].type.element_type  # type: ignore[attr-defined]
    layers = []
    for c in (op for op in ops if isinstance(op, T.ConvBiasOp)):
        w, b = (xm.tensor(v.owner.numpy()) for v in c.operands[1:3])  # type: ignore[union-attr]
        layers.append((w, b, c.params(), c.results[0].type.element_type))  # type: ignore[attr-defined]

    def model(x: xm.Tensor) -> xm.Tensor:
        y = x.astype(D.qint8(in_elem.scale_value))
        for w, b, p, out in layers:
            y = F.quantized.conv_bias_activation(
                y,
                w,
                b,
                dtype=D.qint8(out.scale_value),
                stride=p["stride"],
                padding=p["padding"],
                nonlinear_mode=p["nonline_mode"].name.lower(),
            )
        return y.astype("float32")

    tr = jit.trace(model, symbolic=True, capture_as_const=True)
    tr(xm.tensor(inputs("int8")["data"]))
    return tr


@pytest.mark.parametrize("variant", ["nchw44", "nchw44_dot"])
def test_int8_layout_dump_has_megengines_operators(variant: str) -> None:
    tr = _int8_model()
    v = case_variant("int8", variant)
    buf = io.BytesIO()
    tr.dump(buf, **v["dump_kwargs"])
    data = buf.getvalue()
    gold = [golden_sig(o) for o in v["oprs"]]
    # the int8 result is relaid out to NCHW, then dequantized (MegEngine's ShuffleShuffleRemovePass)
    assert gold[-1][0] == "TypeCvt"
    assert sigs(data) == gold
    check_outputs(
        "int8", run_file(data, inputs("int8")), np.load(data_path("int8", f"expected_{variant}.npz"))
    )
    assert write_mge(read_mge(data)) == data


# ----------------------------------------------------------------------------------------------
# RelayoutFormat forms


RELAYOUTS = """
func.func @main(%x: tensor<1x3x4x4xf32>, %y: tensor<1x8x2x2xf32>) -> (
    tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x8x2x2xf32>)
    attributes {output_names = ["b", "d", "f"]} {
  %a = layout.relayout %x {channels = 3 : i64}
      : tensor<1x3x4x4xf32> -> tensor<1x1x4x4x4xf32, #layout.fmt<nchw4>>
  %b = layout.relayout %a {channels = 3 : i64}
      : tensor<1x1x4x4x4xf32, #layout.fmt<nchw4>> -> tensor<1x3x4x4xf32>
  %c = layout.relayout %x {channels = 3 : i64}
      : tensor<1x3x4x4xf32> -> tensor<1x4x1x4x4xf32, #layout.fmt<nhwcd4>>
  %d = layout.relayout %c {channels = 3 : i64}
      : tensor<1x4x1x4x4xf32, #layout.fmt<nhwcd4>> -> tensor<1x3x4x4xf32>
  %e = layout.relayout %y : tensor<1x8x2x2xf32> -> tensor<2x2x2x1x4xf32, #layout.fmt<chwn4>>
  %f = layout.relayout %e : tensor<2x2x2x1x4xf32, #layout.fmt<chwn4>> -> tensor<1x8x2x2xf32>
  func.return %b, %d, %f : tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x8x2x2xf32>
}
"""


def test_relayout_format_operators_round_trip() -> None:
    from xdsl.dialects.builtin import ModuleOp

    module = ModuleOp([Parser(ctx(), RELAYOUTS).parse_op()])
    module.verify()
    data = write_mge(module)
    modes = [s[1] for s in sigs(data) if s[0] == "RelayoutFormat"]
    assert modes == ["NCHW_NCHW4_IC_SMALL", "NCHW_NHWCD4I", "NHWCD4I_NCHW", "NCHW4_CHWN4", "CHWN4_NCHW4"]
    back = read_mge(data)
    assert write_mge(back) == data
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    y = rng.standard_normal((1, 8, 2, 2)).astype(np.float32)
    outs = run_module(back, [x, y])
    for got, want in zip(outs, [x, x, y], strict=True):
        np.testing.assert_array_equal(got, want)
    relaid = [op for op in next(iter(back.ops)).walk() if isinstance(op, L.RelayoutOp)]  # type: ignore[union-attr]
    assert {L.layout_of(op.output.type) for op in relaid} >= {L.Layout.NCHW4, L.Layout.CHWN4, L.Layout.NHWCD4}
