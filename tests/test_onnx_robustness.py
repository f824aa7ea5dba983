"""ONNX import of hostile and broken files (issue 28) and the one-op bugs of issue 29: the import
budget (``backends.onnx.limits``) refuses constant folding that would exhaust memory or time,
malformed nodes are one-line errors, and ``xmge convert`` prints no traceback."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from backends.onnx.reader import OnnxImportError, read_onnx  # noqa: E402
from compiler.driver.cli import main as xmge  # noqa: E402
from semantics import run_module  # noqa: E402


def model(
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[str],
    inits: list[Any] | None = None,
    opset: int = 21,
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        initializer=inits or [],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m.SerializeToString()


def const(name: str, value: Any) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def fin(name: str, shape: list[int], elem: int = TensorProto.FLOAT) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def loop_model(trips: int) -> bytes:
    """A Loop on constants only (its body adds one to a counter): folded while importing."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "one"], ["v_out"]),
        ],
        "body",
        [fin("i", [], TensorProto.INT64), fin("cond_in", [], TensorProto.BOOL), fin("v_in", [1])],
        [fin("cond_out", [], TensorProto.BOOL), fin("v_out", [1])],
        initializer=[const("one", np.ones(1, np.float32))],
    )
    loop = helper.make_node("Loop", ["M", "cond", "v0"], ["v"], body=body, name="the_loop")
    add = helper.make_node("Add", ["x", "v"], ["y"])
    inits = [const("M", np.int64(trips)), const("cond", np.bool_(True)), const("v0", np.zeros(1, np.float32))]
    return model([loop, add], [fin("x", [1])], ["y"], inits)


# ----------------------------------------------------------------------------------------------
# The import budget


def test_loop_of_10_to_the_12_iterations_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "loop.onnx"
    path.write_bytes(loop_model(10**12))
    start = time.perf_counter()
    with pytest.raises(
        OnnxImportError,
        match=r"loop\.onnx: Loop node 'the_loop' .*1000000000000 iterations.*"
        r"XMGE_MAX_LOOP_ITERATIONS",
    ):
        read_onnx(str(path))
    assert time.perf_counter() - start < 5


def test_small_loop_is_folded() -> None:
    module = read_onnx(loop_model(5))
    (y,) = run_module(module, [np.full(1, 2.0, np.float32)])
    np.testing.assert_array_equal(y, [7.0])


def test_loop_iteration_limit_is_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMGE_MAX_LOOP_ITERATIONS", "3")
    with pytest.raises(OnnxImportError, match="5 iterations, more than the limit of 3"):
        read_onnx(loop_model(5))


def test_fold_time_limit_interrupts_a_slow_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMGE_MAX_FOLD_SECONDS", "0.3")
    start = time.perf_counter()
    with pytest.raises(OnnxImportError, match=r"Loop node 'the_loop'.*0\.3 s allowed.*XMGE_MAX_FOLD_SECONDS"):
        read_onnx(loop_model(90_000))
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize(
    "node, inits, pattern",
    [
        (
            helper.make_node("ConstantOfShape", ["s"], ["c"], name="cos"),
            [const("s", np.array([100_000, 100_000, 2], np.int64))],
            r"ConstantOfShape node 'cos' .*shape \(100000, 100000, 2\) would need 80000000000 bytes.*"
            r"XMGE_MAX_TENSOR_BYTES",
        ),
        (
            helper.make_node("Range", ["a", "b", "d"], ["c"], name="rng"),
            [const("a", np.int64(0)), const("b", np.int64(10**10)), const("d", np.int64(1))],
            r"Range node 'rng' .*XMGE_MAX_TENSOR_BYTES",
        ),
        (
            helper.make_node("Expand", ["v", "s"], ["c"], name="exp"),
            [const("v", np.ones((1, 1), np.float32)), const("s", np.array([60_000, 60_000], np.int64))],
            r"Expand node 'exp' .*XMGE_MAX_TENSOR_BYTES",
        ),
        (  # under the per-tensor cap, over the budget of all folded values
            helper.make_node("MatMul", ["u", "w"], ["c"], name="outer"),
            [const("u", np.ones((12_000, 1), np.float32)), const("w", np.ones((1, 12_000), np.float32))],
            r"MatMul node 'outer' .*exceed 268435456 bytes \(XMGE_MAX_FOLDED_BYTES\)",
        ),
    ],
)
def test_folding_huge_constants_is_refused_before_allocating(
    node: Any, inits: list[Any], pattern: str
) -> None:
    graph = model([node, helper.make_node("Identity", ["c"], ["y"])], [], ["y"], inits)
    with pytest.raises(OnnxImportError, match=pattern):
        read_onnx(graph)


def test_bad_limit_variable_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMGE_MAX_LOOP_ITERATIONS", "lots")
    with pytest.raises(OnnxImportError, match="XMGE_MAX_LOOP_ITERATIONS='lots' is not a number"):
        read_onnx(loop_model(1))


# ----------------------------------------------------------------------------------------------
# Malformed nodes: one-line errors


def conv_group0() -> bytes:
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=0, name="c0")
    return model([node], [fin("x", [1, 2, 5, 5])], ["y"], [const("w", np.ones((2, 2, 3, 3), np.float32))])


def test_conv_group_0() -> None:
    with pytest.raises(
        OnnxImportError, match=r"Conv node 'c0' \(opset 21\): attribute group=0 must be at least 1"
    ):
        read_onnx(conv_group0())


def test_input_type_code_999() -> None:
    graph = model([helper.make_node("Relu", ["x"], ["y"])], [fin("x", [2], 999)], ["y"])
    with pytest.raises(
        OnnxImportError,
        match=r"graph input 'x' \(read by Relu node 'y', opset 21\) has element type code 999",
    ):
        read_onnx(graph)


def test_cast_to_999() -> None:
    graph = model([helper.make_node("Cast", ["x"], ["y"], to=999)], [fin("x", [2])], ["y"])
    with pytest.raises(OnnxImportError, match=r"Cast node 'y' \(opset 21\): attribute to=999"):
        read_onnx(graph)


@pytest.mark.parametrize("data", [conv_group0(), b"\x08\x07garbage", loop_model(10**12)])
def test_xmge_convert_prints_one_line_and_no_traceback(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    code = xmge(["convert", str(path), "-o", str(tmp_path / "out.mge")])
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.mge").exists()


# ----------------------------------------------------------------------------------------------
# Issue 29's one-op bugs


def if_model(cond_is_input: bool) -> bytes:
    then = helper.make_graph([helper.make_node("Identity", ["size"], ["t"])], "then", [], [fin("t", [2])])
    other = helper.make_graph([helper.make_node("Neg", ["size"], ["e"])], "else", [], [fin("e", [2])])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other, name="branch")
    inputs = [fin("size", [2])] + ([fin("cond", [], TensorProto.BOOL)] if cond_is_input else [])
    inits = [] if cond_is_input else [const("cond", np.bool_(False))]
    return model([node], inputs, ["y"], inits)


def test_if_reading_a_run_time_value_is_not_folded() -> None:
    """Bug 6: the branches read the run-time input 'size', so the If is not folded (onnx's
    evaluator used to fail with "Unable to find input 'size'"): with a known condition the taken
    branch is imported in its place."""
    (y,) = run_module(read_onnx(if_model(False)), [np.array([1.0, -2.0], np.float32)])
    np.testing.assert_array_equal(y, [-1.0, 2.0])


def test_if_on_a_run_time_condition_is_a_one_line_refusal() -> None:
    with pytest.raises(OnnxImportError, match=r"If node 'branch' .*run time \('cond', 'size';"):
        read_onnx(if_model(True))


def test_if_capturing_constants_is_folded() -> None:
    then = helper.make_graph([helper.make_node("Identity", ["k"], ["t"])], "then", [], [fin("t", [2])])
    other = helper.make_graph([helper.make_node("Neg", ["k"], ["e"])], "else", [], [fin("e", [2])])
    nodes = [
        helper.make_node("If", ["cond"], ["v"], then_branch=then, else_branch=other),
        helper.make_node("Add", ["x", "v"], ["y"]),
    ]
    graph = model(
        nodes, [fin("x", [2])], ["y"], [const("cond", np.bool_(False)), const("k", np.ones(2, np.float32))]
    )
    (y,) = run_module(read_onnx(graph), [np.zeros(2, np.float32)])
    np.testing.assert_array_equal(y, [-1.0, -1.0])


def test_layer_norm_mean_and_inv_std_dev_outputs() -> None:
    """Bug 4: the optional outputs are computed (they were "computed by no node")."""
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=1, epsilon=1e-3)
    rng = np.random.default_rng(0)
    inits = [
        const("s", rng.standard_normal((3, 4)).astype(np.float32)),
        const("b", np.ones((3, 4), np.float32)),
    ]
    graph = model([node], [fin("x", [2, 3, 4])], ["y", "mean", "inv"], inits, opset=17)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    ours = run_module(read_onnx(graph), [x])
    want = ReferenceEvaluator(graph).run(None, {"x": x})
    for a, b in zip(ours, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_batch_norm_training_mode() -> None:
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1, momentum=0.8
    )
    rng = np.random.default_rng(5)
    inits = [const(n, rng.uniform(0.5, 1.5, 3).astype(np.float32)) for n in "sbmv"]
    graph = model([node], [fin("x", [2, 3, 4, 5])], ["y", "rm", "rv"], inits, opset=15)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    ours = run_module(read_onnx(graph), [x])
    want = ReferenceEvaluator(graph).run(None, {"x": x})
    for a, b in zip(ours, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_dropout_mask_output() -> None:
    node = helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.5)
    graph = model([node], [fin("x", [2, 3])], ["y", "mask"], opset=13)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, mask = run_module(read_onnx(graph), [x])
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.shape == (2, 3) and mask.all()


@pytest.mark.parametrize("op, identity", [("ReduceMax", -np.inf), ("ReduceMin", np.inf)])
def test_reduce_over_an_empty_axis_is_the_identity(op: str, identity: float) -> None:
    """Bug 3: opset 18+ defines the reduction of nothing; the reference used to raise."""
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    graph = model([node], [fin("x", [2, 0, 3])], ["y"], [const("axes", np.array([1], np.int64))], opset=18)
    (y,) = run_module(read_onnx(graph), [np.zeros((2, 0, 3), np.float32)])
    assert y.shape == (2, 1, 3)
    assert (y == identity).all()


def test_shape_input_bound_with_input_values() -> None:
    """Shape / axes given as graph inputs: bound when known at compile time, else a one-line
    error naming the input that must be constant."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    graph = model([node], [fin("x", [2, 3]), fin("shape", [2], TensorProto.INT64)], ["y"])
    with pytest.raises(OnnxImportError, match=r"graph input 'shape', which must be known when importing"):
        read_onnx(graph)
    module = read_onnx(graph, input_values={"shape": np.array([3, 2], np.int64)})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = run_module(module, [x])
    np.testing.assert_array_equal(y, x.reshape(3, 2))
    with pytest.raises(OnnxImportError, match=r"input_values\['shape'\] has shape \(3,\)"):
        read_onnx(graph, input_values={"shape": np.array([3, 2, 1], np.int64)})
    with pytest.raises(OnnxImportError, match=r"input_values names \['nope'\]"):
        read_onnx(graph, input_values={"nope": np.zeros(1)})


def test_compiler_onnx_is_an_attribute_of_compiler() -> None:
    import compiler

    assert callable(compiler.onnx.load)


def test_huge_initializer_and_run_time_value_are_refused(tmp_path: Path) -> None:
    """The per-tensor budget holds for initializers (from their declared dims, before reading
    them) and for every value the imported graph computes at run time."""
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[100_000, 100_000])
    graph = model([helper.make_node("Add", ["x", "w"], ["y"])], [fin("x", [1])], ["y"], [t])
    with pytest.raises(
        OnnxImportError, match=r"initializer 'w' of shape \(100000, 100000\) would need 40000000000"
    ):
        read_onnx(graph)
    expand = helper.make_node("Expand", ["x", "s"], ["y"], name="big")
    graph = model([expand], [fin("x", [1])], ["y"], [const("s", np.array([70_000, 70_000], np.int64))])
    path = tmp_path / "expand.onnx"
    path.write_bytes(graph)
    with pytest.raises(
        OnnxImportError, match=r"expand\.onnx: Expand node 'big' .*mgb.broadcast result .*XMGE_MAX_TENSOR"
    ):
        read_onnx(str(path))


def test_import_from_several_threads_at_once() -> None:
    """read_onnx keeps its state per call: threads importing (and folding) at once agree."""
    from concurrent.futures import ThreadPoolExecutor

    data = loop_model(50)
    want = str(read_onnx(data))
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: str(read_onnx(data)), range(8)))
    assert all(g == want for g in got)
