"""Fuzzing ONNX import (``backends.onnx.reader.read_onnx``) and the reference run of what it imports.

Seeds: models written by xmge's ONNX exporter (``backends.onnx.export.to_onnx``) from golden and
xmge-dumped ``.mge`` files, and small graphs made with ``onnx.helper`` for what the exporter never
writes: shape arithmetic folded at import (Shape/Gather/Concat/Reshape), ``Loop`` and ``If`` on
constants, ``ConstantOfShape``/``Range``/``Expand``, ``Resize``, ``Split``/``Slice``, quantized
``QuantizeLinear``/``DequantizeLinear``, reductions, ``Pad``, ``Where``, ``LayerNormalization``.

Each case applies one to three structure-aware mutations to a seed's ``ModelProto`` (an op type, an
attribute's value, a node's inputs, an initializer's dims / data type / bytes, a graph input's element
type and dims, the opset, nodes dropped / duplicated / swapped) or, one case in eight, flips bytes of
the serialized model; it then imports the result and runs it on the reference interpreter with
random inputs. Outcomes as in :mod:`bench.fuzz_common`; the documented errors are
``OnnxImportError``, ``InterpreterError`` and ``LimitExceeded``.

    python bench/fuzz_onnx.py --count 10000 --jobs 1 --clock cpu --log /tmp/fuzz_onnx.jsonl --progress 500
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.fuzz_common import Campaign, add_arguments, alarm, classify, run_isolated  # noqa: E402

EXPORTED_SEEDS = (
    "golden:convnet/plain",
    "golden:mini_resnet/plain",
    "fuzz_seeds/mobilenet_v2_plain",
    "fuzz_seeds/mini_resnet_plain",
)
FUZZ_TENSOR_BYTES = 16 << 20
"""Mutated dims under the default 4 GiB cap are legitimately big models the numpy reference takes
seconds to run; 16 MiB keeps each case fast and still exercises every size check."""
BOUNDARY_INTS = [0, 1, -1, 2, 3, 7, 255, 2**31 - 1, -(2**31), 2**32 + 1, 10**12, -(10**12), 2**63 - 1]


# ----------------------------------------------------------------------------------------------
# seeds


def _helper_seeds() -> dict[str, bytes]:
    from onnx import TensorProto, helper, numpy_helper

    F, I64 = TensorProto.FLOAT, TensorProto.INT64

    def vi(name: str, shape: Sequence[int] | None, elem: int = F) -> Any:
        return helper.make_tensor_value_info(name, elem, shape)

    def const(name: str, value: Any) -> Any:
        return numpy_helper.from_array(np.asarray(value), name)

    def model(
        nodes: list[Any], inputs: list[Any], outputs: list[str], inits: list[Any], opset: int = 17
    ) -> bytes:
        graph = helper.make_graph(
            nodes, "seed", inputs, [vi(o, None, TensorProto.UNDEFINED) for o in outputs], inits
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m.SerializeToString()

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    seeds: dict[str, bytes] = {}
    seeds["conv_relu_pool_gemm"] = model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], group=1),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Flatten", ["p"], ["f"], axis=1),
            helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
        ],
        [vi("x", [1, 3, 8, 8])],
        ["y"],
        [const("w", w), const("b", np.zeros(4, np.float32)),
         const("fw", rng.standard_normal((5, 64)).astype(np.float32)), const("fb", np.ones(5, np.float32))],
    )  # fmt: skip
    seeds["shape_arith"] = model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
            helper.make_node("Concat", ["n", "minus1"], ["shape"], axis=0),
            helper.make_node("Reshape", ["x", "shape"], ["flat"]),
            helper.make_node("Softmax", ["flat"], ["y"], axis=-1),
        ],
        [vi("x", [2, 3, 4])],
        ["y"],
        [const("i0", np.array([0], np.int64)), const("minus1", np.array([-1], np.int64))],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "one"], ["v_out"]),
        ],
        "body",
        [vi("i", [], I64), vi("cond_in", [], TensorProto.BOOL), vi("v_in", [1])],
        [vi("cond_out", [], TensorProto.BOOL), vi("v_out", [1])],
        [const("one", np.ones(1, np.float32))],
    )
    seeds["loop_if"] = model(
        [
            helper.make_node("Loop", ["trips", "cond", "v0"], ["v"], body=body),
            helper.make_node(
                "If", ["flag"], ["t"],
                then_branch=helper.make_graph([helper.make_node("Identity", ["v"], ["a"])], "then", [],
                                              [vi("a", [1])]),
                else_branch=helper.make_graph([helper.make_node("Neg", ["v"], ["e"])], "else", [],
                                              [vi("e", [1])]),
            ),
            helper.make_node("Add", ["x", "t"], ["y"]),
        ],
        [vi("x", [3])],
        ["y"],
        [const("trips", np.int64(5)), const("cond", np.bool_(True)), const("v0", np.zeros(1, np.float32)),
         const("flag", np.bool_(True))],
    )  # fmt: skip
    seeds["constant_of_shape_range_expand"] = model(
        [
            helper.make_node("ConstantOfShape", ["cshape"], ["z"], value=const("v", np.array([0.5], np.float32))),  # noqa: E501
            helper.make_node("Range", ["r0", "r1", "r2"], ["r"]),
            helper.make_node("Cast", ["r"], ["rf"], to=F),
            helper.make_node("Expand", ["rf", "eshape"], ["e"]),
            helper.make_node("Add", ["x", "z"], ["a"]),
            helper.make_node("Mul", ["a", "e"], ["y"]),
        ],
        [vi("x", [2, 4])],
        ["y"],
        [const("cshape", np.array([2, 4], np.int64)), const("r0", np.int64(0)), const("r1", np.int64(4)),
         const("r2", np.int64(1)), const("eshape", np.array([2, 4], np.int64))],
    )  # fmt: skip
    seeds["resize_split_slice"] = model(
        [
            helper.make_node("Resize", ["x", "", "scales"], ["u"], mode="nearest"),
            helper.make_node("Split", ["u", "split"], ["s0", "s1"], axis=1),
            helper.make_node("Slice", ["s0", "starts", "ends", "axes", "steps"], ["sl"]),
            helper.make_node("Concat", ["sl", "s1"], ["y"], axis=1),
        ],
        [vi("x", [1, 4, 4, 4])],
        ["y"],
        [const("scales", np.array([1, 1, 2, 2], np.float32)), const("split", np.array([2, 2], np.int64)),
         const("starts", np.array([0], np.int64)), const("ends", np.array([8], np.int64)),
         const("axes", np.array([2], np.int64)), const("steps", np.array([1], np.int64))],
        opset=18,
    )  # fmt: skip
    seeds["quantized"] = model(
        [
            helper.make_node("QuantizeLinear", ["x", "qs", "qz"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["dq"]),
            helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
            helper.make_node("MatMul", ["dq", "wd"], ["y"]),
        ],
        [vi("x", [2, 4])],
        ["y"],
        [const("qs", np.float32(0.05)), const("qz", np.int8(0)),
         const("wq", rng.integers(-100, 100, (4, 3)).astype(np.int8)), const("ws", np.float32(0.02)),
         const("wz", np.int8(0))],
    )  # fmt: skip
    seeds["reduce_pad_where_norm"] = model(
        [
            helper.make_node("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1),
            helper.make_node("Sub", ["x", "m"], ["d"]),
            helper.make_node("Pad", ["d", "pads"], ["p"], mode="constant"),
            helper.make_node("Greater", ["p", "zero"], ["g"]),
            helper.make_node("Where", ["g", "p", "zero"], ["wh"]),
            helper.make_node("LayerNormalization", ["wh", "gamma", "beta"], ["ln"], axis=-1),
            helper.make_node("Transpose", ["ln"], ["y"], perm=[1, 0]),
        ],
        [vi("x", [3, 4])],
        ["y"],
        [const("pads", np.array([0, 1, 0, 1], np.int64)), const("zero", np.float32(0)),
         const("gamma", np.ones(6, np.float32)), const("beta", np.zeros(6, np.float32))],
    )  # fmt: skip
    seeds["batchnorm_avgpool_sigmoid"] = model(
        [
            helper.make_node("BatchNormalization", ["x", "s", "bb", "mean", "var"], ["bn"]),
            helper.make_node("AveragePool", ["bn"], ["ap"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
            helper.make_node("GlobalAveragePool", ["ap"], ["gp"]),
            helper.make_node("Sigmoid", ["gp"], ["y"]),
        ],
        [vi("x", [1, 2, 5, 5])],
        ["y"],
        [const("s", np.ones(2, np.float32)), const("bb", np.zeros(2, np.float32)),
         const("mean", np.zeros(2, np.float32)), const("var", np.ones(2, np.float32))],
    )  # fmt: skip
    return seeds


def _exported_seeds() -> dict[str, bytes]:
    from backends.mge.reader import read_mge
    from backends.onnx.export import to_onnx
    from bench.fuzz_mge import seed_bytes

    seeds: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in EXPORTED_SEEDS:
            path = os.path.join(tmp, "m.onnx")
            to_onnx(read_mge(seed_bytes(name)), path)
            with open(path, "rb") as f:
                seeds[f"export:{name}"] = f.read()
    return seeds


def all_seeds() -> dict[str, bytes]:
    return {**_exported_seeds(), **_helper_seeds()}


# ----------------------------------------------------------------------------------------------
# mutations


def _mutate_attribute(attr: Any, rng: np.random.Generator) -> None:
    from onnx import AttributeProto

    if attr.type == AttributeProto.INT:
        attr.i = int(rng.choice(BOUNDARY_INTS)) if rng.random() < 0.6 else attr.i + int(rng.integers(-3, 4))
    elif attr.type == AttributeProto.INTS and len(attr.ints):
        k = int(rng.integers(0, len(attr.ints)))
        attr.ints[k] = int(rng.choice(BOUNDARY_INTS))
        if rng.random() < 0.3:
            del attr.ints[-1]
    elif attr.type == AttributeProto.FLOAT:
        attr.f = float(rng.choice([0.0, -1.0, 1e30, float("nan"), float("inf"), 1e-30]))
    elif attr.type == AttributeProto.STRING:
        attr.s = bytes(rng.choice([b"", b"linear", b"reflect", b"edge", b"cubic", b"\xff"]))
    elif attr.type == AttributeProto.TENSOR:
        attr.t.data_type = int(rng.choice([0, 1, 6, 7, 10, 11, 999]))


def _mutate_tensor(t: Any, rng: np.random.Generator) -> None:
    kind = int(rng.integers(0, 4))
    if kind == 0 and len(t.dims):
        t.dims[int(rng.integers(0, len(t.dims)))] = int(rng.choice([0, -1, 1, 2**31 - 1, 10**6, 3]))
    elif kind == 1:
        t.data_type = int(rng.choice([0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 16, 17, 999]))
    elif kind == 2 and t.raw_data:
        raw = bytearray(t.raw_data)
        cut = int(rng.integers(0, len(raw) + 1))
        t.raw_data = (
            bytes(raw[:cut]) if rng.random() < 0.5 else bytes(raw) + rng.bytes(int(rng.integers(1, 9)))
        )
    else:
        del t.dims[:]
        t.dims.extend(int(d) for d in rng.integers(0, 5, int(rng.integers(0, 5))))


def _mutate_model(m: Any, rng: np.random.Generator, op_types: Sequence[str]) -> None:
    from onnx import TensorProto

    g = m.graph
    nodes = list(g.node)
    kind = int(rng.integers(0, 10))
    if kind == 0 and nodes:  # another op type
        nodes[int(rng.integers(0, len(nodes)))].op_type = str(rng.choice(op_types))
    elif kind in (1, 2) and nodes:  # an attribute's value, or one removed
        node = nodes[int(rng.integers(0, len(nodes)))]
        if len(node.attribute):
            attr = node.attribute[int(rng.integers(0, len(node.attribute)))]
            if kind == 2 and rng.random() < 0.3:
                node.attribute.remove(attr)
            else:
                _mutate_attribute(attr, rng)
        else:
            node.attribute.add(
                name=str(rng.choice(["axis", "group", "keepdims", "to"])),
                type=2,
                i=int(rng.choice(BOUNDARY_INTS)),
            )
    elif kind == 3 and nodes:  # a node's inputs
        node = nodes[int(rng.integers(0, len(nodes)))]
        names = (
            [n for nd in nodes for n in nd.output]
            + [i.name for i in g.input]
            + [t.name for t in g.initializer]
        )
        if len(node.input) and rng.random() < 0.7:
            node.input[int(rng.integers(0, len(node.input)))] = str(rng.choice([*names, "", "nowhere"]))
        elif len(node.input):
            del node.input[-1]
    elif kind == 4 and len(g.initializer):
        _mutate_tensor(g.initializer[int(rng.integers(0, len(g.initializer)))], rng)
    elif kind == 5 and len(g.input):  # a graph input's type
        t = g.input[int(rng.integers(0, len(g.input)))].type.tensor_type
        if rng.random() < 0.5:
            t.elem_type = int(
                rng.choice(
                    [0, TensorProto.INT64, TensorProto.INT8, TensorProto.FLOAT16, TensorProto.BOOL, 999]
                )
            )
        elif len(t.shape.dim):
            d = t.shape.dim[int(rng.integers(0, len(t.shape.dim)))]
            if rng.random() < 0.3:
                d.dim_param = "N"
            else:
                d.dim_value = int(rng.choice([0, 1, 100000, 2**31 - 1, 7]))
    elif kind == 6:  # the opset
        m.opset_import[0].version = int(rng.choice([1, 6, 7, 9, 11, 13, 18, 21, 28, 29]))
    elif kind == 7 and nodes:  # drop or duplicate a node
        node = nodes[int(rng.integers(0, len(nodes)))]
        if rng.random() < 0.5:
            g.node.remove(node)
        else:
            g.node.insert(int(rng.integers(0, len(nodes) + 1)), node)
    elif kind == 8 and len(nodes) > 1:  # swap two nodes (order is part of the format)
        i, j = (int(v) for v in rng.choice(len(nodes), 2, replace=False))
        a, b = type(nodes[i])(), type(nodes[j])()
        a.CopyFrom(nodes[i])
        b.CopyFrom(nodes[j])
        g.node[i].CopyFrom(b)
        g.node[j].CopyFrom(a)
    else:  # a subgraph's node, when there is one, else an output removed
        for node in nodes:
            for attr in node.attribute:
                if attr.HasField("g") and len(attr.g.node):
                    sub = attr.g.node[int(rng.integers(0, len(attr.g.node)))]
                    sub.op_type = str(rng.choice(op_types))
                    return
        if len(g.output) > 1:
            del g.output[-1]


def mutate(data: bytes, rng: np.random.Generator, op_types: Sequence[str]) -> bytes:
    import onnx

    if rng.random() < 0.125:  # raw bytes: the protobuf parser's share
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 6))):
            b[int(rng.integers(0, len(b)))] ^= 1 << int(rng.integers(0, 8))
        return bytes(b)
    m = onnx.load_from_string(data)
    for _ in range(int(rng.integers(1, 4))):
        _mutate_model(m, rng, op_types)
    return m.SerializeToString()


# ----------------------------------------------------------------------------------------------
# one case


def run_one(data: bytes, timeout_s: float, clock: str = "wall") -> tuple[str, str]:
    from backends.onnx.reader import OnnxImportError, read_onnx
    from dialects.dtypes import numpy_dtype
    from semantics.interpreter import InterpreterError, run_function

    np.seterr(all="ignore")
    stage = "import"
    try:
        with alarm(timeout_s, clock):
            module = read_onnx(data)
            stage = "run"
            rng = np.random.default_rng(0)
            for fn in module.ops:
                args = []
                for a in fn.body.block.args:  # type: ignore[attr-defined]
                    dt = numpy_dtype(a.type.element_type)
                    args.append((rng.standard_normal(tuple(a.type.get_shape())) * 3).astype(dt))
                run_function(fn, args)  # type: ignore[arg-type]
        return "ok", ""
    except BaseException as exc:  # noqa: BLE001 - classified: documented, timeout, memory or a bug
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return classify(exc, (OnnxImportError, InterpreterError), stage)


def campaign(seeds: dict[str, bytes], rng_seed: int, timeout_s: float, clock: str) -> Campaign:
    names = sorted(seeds)
    op_types: list[str] = []

    def prepare() -> None:
        import onnx.reference  # noqa: F401 - imported before the memory cap applies

        from backends.onnx.reader import claimed_op_types
        from semantics import interpreter  # noqa: F401

        op_types.extend(sorted(claimed_op_types()))

    def label(index: int) -> str:
        return names[index % len(names)]

    def run(index: int) -> tuple[str, str]:
        rng = np.random.default_rng([rng_seed, index])
        try:
            data = mutate(seeds[label(index)], rng, op_types)
        except Exception as exc:  # noqa: BLE001 - a mutation protobuf refuses to serialize: not a case
            return "ok", f"mutation not serializable: {type(exc).__name__}"
        return run_one(data, timeout_s, clock)

    return Campaign(
        run=run, label=label, prepare=prepare, env={"XMGE_MAX_TENSOR_BYTES": str(FUZZ_TENSOR_BYTES)}
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap, count=2000, jobs=1, mem_mb=3072)
    args = ap.parse_args(argv)
    seeds = all_seeds()
    report = run_isolated(
        campaign(seeds, args.rng_seed, args.timeout, args.clock),
        args.start,
        args.count,
        args.jobs,
        args.mem_mb,
        hang_after_s=args.timeout + 10,
        log=args.log,
        progress_every=args.progress,
        header={"seeds": sorted(seeds), "rng_seed": args.rng_seed},
    )
    print(f"{len(seeds)} seeds: {' '.join(sorted(seeds))}")
    print(f"cases {args.start}..{args.start + args.count - 1}, rng seed {args.rng_seed}")
    print(report.summary())
    return 1 if report.bad() else 0


if __name__ == "__main__":
    sys.exit(main())
