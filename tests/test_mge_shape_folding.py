"""Shape sub-graphs as MegEngine writes them for zoo models fold while reading: a Reshape target
``Concat(Reduce(PRODUCT, Subtensor(GetVarShape)), ...)``, a ResizeV2 size computed in float32
from the input shape, Linspace with a shape-derived bound, and the real Split operator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.mge.dtypes import RawDType
from backends.mge.reader import read_mge
from backends.mge.records import LoweredGraph, Metadata, WOpr, WTensor
from backends.mge.serialize import serialize_v1, serialize_v2
from dialects import enums
from dialects import tensor as T
from semantics.interpreter import run_module

F32, I32 = RawDType("Float32"), RawDType("Int32")


class _Graph:
    def __init__(self) -> None:
        self.oprs: list[WOpr] = []
        self.names: list[str] = []

    def add(self, opr: WOpr, name: str) -> list[int]:
        opr.outputs = list(range(len(self.names), len(self.names) + opr.n_outputs))
        self.names.extend(f"{name}:{i}" if opr.n_outputs > 1 else name for i in range(opr.n_outputs))
        self.oprs.append(opr)
        return opr.outputs

    def const(self, values: list[float] | list[int], dtype: RawDType = I32) -> int:
        arr = np.asarray(values, np.int32 if dtype is I32 else np.float32)
        t = WTensor(None, arr.shape, dtype, arr.tobytes())
        return self.add(WOpr("ImmutableTensor", [], tensors=[t]), f"c{len(self.names)}")[0]

    def op(self, kind: str, inputs: list[int], params: list, n_outputs: int = 1) -> list[int]:  # type: ignore[type-arg]
        return self.add(WOpr(kind, inputs, n_outputs, params=params), f"{kind}{len(self.names)}")


def _items(*items: tuple[int, bool, bool, bool, bool]) -> list:  # type: ignore[type-arg]
    return [("IndexDescMaskDump", {"items": tuple(items)})]


def _file(fmt: str) -> bytes:
    g = _Graph()
    h2d = WOpr(
        "Host2DeviceCopy",
        [],
        params=[
            (
                "Host2DeviceCopy",
                {"enable_value_infer": True, "dump_default_value": False, "allow_cpu_mem_fwd": True},
            )
        ],
        tensors=[WTensor("x", (1, 3, 4, 6), F32, None)],
    )
    (x,) = g.add(h2d, "x")
    (shape,) = g.op("GetVarShape", [x], [("OptionalAxisV1", {"axis": 7})])
    # Reshape target (N, prod(shape[1:])) = Concat(Subtensor(shape, 0), Reduce(PRODUCT, shape[1:]))
    (n,) = g.op("Subtensor", [shape, g.const([0])], _items((0, False, False, False, True)))
    (rest,) = g.op("Subtensor", [shape, g.const([1])], _items((0, True, False, False, False)))
    prod = {"mode": enums.number(enums.ReduceMode.PRODUCT), "axis": 0, "data_type": 0}
    (p,) = g.op("Reduce", [rest], [("Reduce", prod)])
    (target,) = g.op("Concat", [n, p], [("Axis", {"axis": 0})])
    (flat,) = g.op("Reshape", [x, target], [("OptionalAxisV1", {"axis": 7})])
    # ResizeV2 size = float32(shape[2:4]) * 1.5
    (hw,) = g.op("Subtensor", [shape, g.const([2])], _items((0, True, False, False, False)))
    (hwf,) = g.op("TypeCvt", [hw], [("DType", {"dtype": F32})])
    mul = {"mode": enums.number(enums.ElemwiseMode.MUL)}
    (size,) = g.op("Elemwise", [hwf, g.const([1.5], F32)], [("Elemwise", mul)])
    (resized,) = g.op("Resize", [x, size], [("Resize", {"imode": 1, "format": 0})])
    # Linspace(0, W - 1, W) with W from the shape
    (w,) = g.op("Subtensor", [shape, g.const([3])], _items((0, False, False, False, True)))
    (wf,) = g.op("TypeCvt", [w], [("DType", {"dtype": F32})])
    (last,) = g.op(
        "Elemwise", [wf, g.const([-1.0], F32)], [("Elemwise", {"mode": enums.number(enums.ElemwiseMode.ADD)})]
    )
    (ramp,) = g.op("Linspace", [g.const([0.0], F32), last, w], [("Linspace", {"endpoint": True})])
    # Split x along W into 2 + 4
    parts = g.op("Split", [x, g.const([2]), g.const([4])], [("Axis", {"axis": 3})], n_outputs=2)
    graph = LoweredGraph(g.oprs, g.names, [flat, resized, ramp, *parts])
    meta = Metadata()
    return serialize_v2(graph, meta) if fmt == "FBS_V2" else serialize_v1(graph, meta)


@pytest.mark.parametrize("fmt", ["FBS_V2", "FBS"])
def test_shape_subgraphs_fold(fmt: str) -> None:
    module = read_mge(_file(fmt))
    kinds = {type(op) for op in module.walk()}
    assert T.ReduceOp not in kinds and T.ConcatOp not in kinds  # folded into the Reshape target
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 6)).astype(np.float32)
    flat, resized, ramp, a, b = run_module(module, [x])
    np.testing.assert_array_equal(flat, x.reshape(1, 72))
    want = torch.nn.functional.interpolate(
        torch.from_numpy(x), size=(6, 9), mode="bilinear", align_corners=False
    )
    np.testing.assert_allclose(resized, want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ramp, np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(a, x[..., :2])
    np.testing.assert_array_equal(b, x[..., 2:])
