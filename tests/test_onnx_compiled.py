"""ONNX models compiled for the host: the integer kernels x86 lacked (int8 / int16 / uint8 /
uint16 arithmetic and comparisons, integer Max / Min / Mod / Pow, uint8 MaxPool, bool ReduceMax /
ReduceMin), Pow with a float base and an integer exponent, a Conv whose weight is a graph input,
Resize beyond MegEngine's modes and the one-op bugs of issue 29, each compiled and checked against
the reference interpreter and onnxruntime. One model per dtype keeps the gcc runs few."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from backends.onnx.reader import read_onnx  # noqa: E402
from compiler.driver.compile import compile as xcompile  # noqa: E402
from semantics import run_module  # noqa: E402


def build(
    nodes: list[Any], inputs: dict[str, np.ndarray], outputs: list[str], opset: int = 21, inits: Any = ()
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    # onnxruntime wants typed outputs: take them from onnx's shape inference
    g = onnx.shape_inference.infer_shapes(m).graph
    inferred = {v.name: v for v in [*g.value_info, *g.output] if v.type.HasField("tensor_type")}
    for out in m.graph.output:
        out.CopyFrom(inferred[out.name])
    return m.SerializeToString()


def ort_run(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's answer; onnx's reference evaluator where onnxruntime has no kernel (int16 Max)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's NOT_IMPLEMENTED has no public class
        if "NOT_IMPLEMENTED" not in str(exc):
            raise
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(onnx.load_from_string(model)).run(None, feeds))
    return session.run(None, feeds)


def check_all(model: bytes, feeds: dict[str, np.ndarray], atol: float = 1e-5) -> None:
    """Reference, compiled and onnxruntime agree (integers exactly)."""
    module = read_onnx(model)
    ref = run_module(module, list(feeds.values()))
    got = xcompile(module, "x86").run(list(feeds.values()))
    want = ort_run(model, feeds)
    for k, (r, g, w) in enumerate(zip(ref, got, want, strict=True)):
        assert r.shape == g.shape == w.shape, k
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"compiled output {k}")
            np.testing.assert_array_equal(r, w, err_msg=f"reference output {k}")
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol, err_msg=f"compiled output {k}")
            np.testing.assert_allclose(r, w, rtol=1e-4, atol=atol, err_msg=f"reference output {k}")


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8, np.uint16, np.int32])
def test_integer_elementwise(dtype: type) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    lo, hi = max(info.min, -100), min(info.max, 100)
    a = rng.integers(lo, hi, (3, 4, 5)).astype(dtype)
    a[0, 0, :2] = [info.max, info.min]  # wrap around like numpy / onnxruntime
    b = rng.integers(max(lo, -9), min(hi, 9), (4, 5)).astype(dtype)
    b[b == 0] = 3  # onnxruntime's integer Mod by zero is undefined
    e = rng.integers(0, 4, (4, 5)).astype(dtype)
    ops = ["Add", "Sub", "Mul", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()]) for op in ops]
    nodes += [helper.make_node("Mod", ["a", "b"], ["mod"]), helper.make_node("Div", ["a", "b"], ["div"])]
    nodes.append(helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1))
    outs = [op.lower() for op in ops] + ["mod", "div", "fmod"]
    if dtype == np.int32:  # ONNX's Pow takes 32- and 64-bit integer bases only
        nodes.append(helper.make_node("Pow", ["b", "e"], ["pow"]))
        outs.append("pow")
    check_all(build(nodes, {"a": a, "b": b, "e": e}, outs), {"a": a, "b": b, "e": e})


def test_uint8_max_pool_bool_reductions_float_pow_int_exponent() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    flags = rng.integers(0, 2, (4, 3)).astype(bool)
    base = rng.uniform(0.5, 2, (4, 3)).astype(np.float32)
    exp = rng.integers(-2, 4, (4, 3)).astype(np.int32)
    axes = [("axes", np.array([1], np.int64))]
    nodes = [
        helper.make_node("MaxPool", ["x"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMax", ["flags", "axes"], ["any"], keepdims=0),
        helper.make_node("ReduceMin", ["flags", "axes"], ["all"], keepdims=1),
        helper.make_node("Pow", ["base", "exp"], ["pow"]),
    ]
    feeds = {"x": x, "flags": flags, "base": base, "exp": exp}
    check_all(build(nodes, feeds, ["pool", "any", "all", "pow"], inits=axes), feeds)


@pytest.mark.parametrize("group, stride, dilation", [(1, 1, 1), (2, 2, 1), (4, 1, 2)])
def test_conv_with_a_run_time_weight(group: int, stride: int, dilation: int) -> None:
    """Bug 5: the weight is a graph input; it compiles (a direct kernel) and matches."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((8, 4 // group, 3, 3)).astype(np.float32)
    node = helper.make_node(
        "Conv",
        ["x", "w"],
        ["y"],
        group=group,
        strides=[stride] * 2,
        dilations=[dilation] * 2,
        pads=[1, 2, 1, 0],
    )
    check_all(build([node], {"x": x, "w": w}, ["y"]), {"x": x, "w": w}, atol=1e-4)


def test_resize_cubic_and_crop_compiled() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    roi = np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 1.1], np.float32)
    nodes = [
        helper.make_node(
            "Resize", ["x", "", "s1"], ["cubic"], mode="cubic", coordinate_transformation_mode="align_corners"
        ),
        helper.make_node(
            "Resize",
            ["x", "roi", "", "sz"],
            ["crop"],
            mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=-1.0,
        ),  # fmt: skip
    ]
    inits = [
        ("s1", np.array([1, 1, 1.6, 0.5], np.float32)),
        ("roi", roi),
        ("sz", np.array([1, 2, 7, 4], np.int64)),
    ]
    check_all(build(nodes, {"x": x}, ["cubic", "crop"], opset=19, inits=inits), {"x": x})


def test_split_with_a_zero_size_piece_compiles() -> None:
    """Bug 2: an empty output overlaps nothing in the arena."""
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    node = helper.make_node("Split", ["x", "s"], ["a", "b", "c"], axis=0)
    model = build([node], {"x": x}, ["a", "b", "c"], opset=18, inits=[("s", np.array([2, 0, 2], np.int64))])
    a, b, c = xcompile(read_onnx(model), "x86").run([x])
    np.testing.assert_array_equal(a, x[:2])
    assert b.shape == (0, 2)
    np.testing.assert_array_equal(c, x[2:])


def test_scalar_input_compiled() -> None:
    """Bug 1: a compiled model takes its own 0-d input (Clip with scalar bounds as graph inputs)."""
    x = np.linspace(-3, 3, 7, dtype=np.float32)
    lo, hi = np.array(-1.0, np.float32), np.array(2.0, np.float32)
    model = build([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": x, "lo": lo, "hi": hi}, ["y"])
    (y,) = xcompile(read_onnx(model), "x86").run([x, lo, hi])
    np.testing.assert_array_equal(y, np.clip(x, -1, 2))


@pytest.mark.parametrize("zp_dtype, per_axis", [(np.int16, False), (np.uint16, False), (np.int8, True)])
def test_quantize_linear_into_plain_integers(zp_dtype: type, per_axis: bool) -> None:
    """Scales per channel and 16-bit results (beyond xmge's quantized dtypes): plain integers,
    rounded half to even, saturated, then dequantized back."""
    x = np.array([[-3.0, -2.5, -0.5, 0.5, 1.5, 2.5, 1e6, -1e6]] * 3, np.float32).reshape(1, 3, 8)
    scale = np.array([1.0, 0.5, 2.0], np.float32) if per_axis else np.array(1.0, np.float32)
    zp = np.zeros(scale.shape, zp_dtype) + (3 if zp_dtype != np.int8 else 0)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], axis=1),
    ]
    model = build(nodes, {"x": x}, ["q", "dq"], opset=21, inits=[("s", scale), ("z", zp)])
    check_all(model, {"x": x})


def test_returned_constant_and_input_of_one_byte_types() -> None:
    """A bool constant (Dropout's mask) and an int8 input returned as they are: the output copies
    move one byte per element (they used to copy four, past the end of the output buffer)."""
    x = np.arange(-30, 30, dtype=np.int8).reshape(3, 4, 5)
    nodes = [helper.make_node("Dropout", ["f"], ["y", "mask"]), helper.make_node("Identity", ["x"], ["same"])]
    f = np.ones((3, 4, 5), np.float32)
    model = build(nodes, {"x": x, "f": f}, ["y", "mask", "same"], opset=13)
    compiled = xcompile(read_onnx(model), "x86")
    y, mask, same = compiled.run_runner([x, f], sanitize=True)
    assert mask.dtype == np.bool_ and mask.all() and mask.shape == (3, 4, 5)
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(y, f)
