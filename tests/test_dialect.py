"""The mgb dialect: FileCheck round-trip / invalid-IR / parse-error files, plus Python-level checks."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from dialects import enums
from dialects import tensor as T
from dialects.dtypes import QuantizedType, tensor_type
from dialects.weights import ElidedWeightError, WeightAttr, full_weights
from semantics import run_module
from tests.filecheck.runner import HERE, execute, filecheck_files, run_lines

RUNS = [r for f in filecheck_files("dialects") for r in run_lines(f)]


@pytest.mark.parametrize("run", RUNS, ids=[r.id for r in RUNS])
def test_filecheck(run) -> None:
    ok, transcript = execute(run)
    assert ok, transcript


def _text(name: str) -> str:
    with open(os.path.join(HERE, "dialects", name)) as f:
        return f.read()


def test_every_op_has_roundtrip_and_invalid_cases() -> None:
    roundtrip, invalid = _text("mgb_roundtrip.mlir"), _text("mgb_invalid.mlir")
    for op in T.TENSOR_OPS:
        assert f"{op.name} " in roundtrip, f"{op.name} has no round-trip test"
        assert f"// CHECK: {op.name}" in invalid, f"{op.name} has no invalid-IR test"


def ctx() -> Context:
    c = Context()
    for d in (Builtin, Func, T.Mgb):
        c.load_dialect(d)
    return c


def parse(text: str) -> ModuleOp:
    module = Parser(ctx(), text).parse_module()
    module.verify()
    return module


def generic(op: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=True).print_op(op)
    return out.getvalue()


@pytest.mark.parametrize(
    "qtype",
    [QuantizedType("qint8", 0.1), QuantizedType("quint8", 0.0123456789, 128), QuantizedType("qint32", 1e-7)],
)
def test_quantized_type_roundtrip(qtype: QuantizedType) -> None:
    text = str(tensor_type((2, 3), qtype))
    assert Parser(ctx(), text).parse_attribute() == tensor_type((2, 3), qtype)
    assert Parser(ctx(), str(qtype)).parse_attribute() == qtype


def test_quantized_type_rejects_bad_parameters() -> None:
    with pytest.raises(VerifyException, match="unknown quantized dtype 'qint7'"):
        QuantizedType("qint7", 0.1)
    with pytest.raises(VerifyException, match="needs a positive scale"):
        QuantizedType("qint8", 0.0)


def test_weight_full_and_elided_roundtrip() -> None:
    data = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    attr = WeightAttr.from_numpy(data)
    elided_text = str(attr)
    assert elided_text == f'#mgb.weight<"{attr.digest.data}">'
    with full_weights():
        full_text = str(attr)
    assert full_text == f'#mgb.weight<"{attr.digest.data}", "0x{data.tobytes().hex()}">'

    full = Parser(ctx(), full_text).parse_attribute()
    assert full == attr and not full.is_elided
    np.testing.assert_array_equal(full.to_numpy(np.dtype(np.float32), (3, 4)), data)

    elided = Parser(ctx(), elided_text).parse_attribute()
    assert isinstance(elided, WeightAttr) and elided.is_elided and elided.digest == attr.digest
    with full_weights():  # an elided weight stays elided: there is no data to print
        assert str(elided) == elided_text
    with pytest.raises(ElidedWeightError, match="elided"):
        elided.to_numpy(np.dtype(np.float32), (3, 4))


def _small_module() -> ModuleOp:
    from xdsl.builder import ImplicitBuilder
    from xdsl.dialects import func
    from xdsl.ir import Block, Region

    x_t = tensor_type((1, 3, 8, 8), "float32")
    block = Block(arg_types=[x_t])
    with ImplicitBuilder(block) as (x,):
        w = T.ConstOp.from_numpy(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32))
        conv = T.ConvolutionOp.make([x, w.output], padding=(1, 1), stride=(2, 2))
        relu = T.ElemwiseOp.make([conv.output], mode=enums.ElemwiseMode.RELU)
        func.ReturnOp(relu.output)
    out_t = relu.output.type
    module = ModuleOp([func.FuncOp("main", ([x_t], [out_t]), Region(block))])
    module.verify()
    return module


def test_full_weight_module_roundtrip_runs_the_same(rng: np.random.Generator) -> None:
    module = _small_module()
    with full_weights():
        text = str(module)
    parsed = parse(text)
    with full_weights():
        assert str(parsed) == text
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(run_module(parsed, [x])[0], run_module(module, [x])[0])


def test_generic_and_custom_forms_agree() -> None:
    module = _small_module()
    custom = str(module)
    assert str(parse(generic(module))) == custom
    assert generic(parse(custom)) == generic(parse(generic(module)))


def test_params_fill_defaults_for_parsed_ops() -> None:
    conv = next(op for op in parse(str(_small_module())).walk() if isinstance(op, T.ConvolutionOp))
    assert "dilation" not in str(conv)  # defaults are not printed ...
    params = conv.params()  # ... but params() still reports them
    assert params["dilation"] == (1, 1) and params["stride"] == (2, 2)
    assert params["sparse"] == enums.ConvSparse.DENSE


def test_make_reports_shape_errors() -> None:
    from xdsl.utils.test_value import create_ssa_value

    x = create_ssa_value(tensor_type((2, 3), "float32"))
    y = create_ssa_value(tensor_type((4, 3), "float32"))
    with pytest.raises(T.ShapeInferenceError, match="mgb.concat: input shapes .* differ outside axis 1"):
        T.ConcatOp.make([x, y], axis=1)
    assert T.ConcatOp.make([x, y], axis=0).results[0].type == tensor_type((6, 3), "float32")


def test_verifier_allows_requantized_results_only_for_quantized_inputs() -> None:
    from xdsl.utils.test_value import create_ssa_value

    q = create_ssa_value(tensor_type((4,), QuantizedType("qint8", 0.1)))
    requantized = tensor_type((4,), QuantizedType("qint8", 0.2))
    ok = T.ElemwiseOp.make([q], [requantized], mode=enums.ElemwiseMode.RELU)
    ok.verify()
    f = create_ssa_value(tensor_type((4,), "float32"))
    bad = T.ElemwiseOp.make([f], [requantized], mode=enums.ElemwiseMode.RELU)
    with pytest.raises(VerifyException, match="do not match the inferred"):
        bad.verify()
