"""The kernel dialect: round-trippable syntax, verifiers, and the memory-plan checker."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import Builtin, ModuleOp, TensorType, f32
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import compiler.functional as F
from dialects import kernel as K
from dialects.tensor import Mgb
from tests.codegen_util import compile_fn


def _ctx() -> Context:
    ctx = Context()
    for d in (Builtin, func.Func, Mgb, K.Kernel):
        ctx.load_dialect(d)
    return ctx


@pytest.fixture(scope="module")
def planned() -> ModuleOp:
    x = np.random.default_rng(0).standard_normal((1, 3, 10, 10)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    import compiler as xm

    wt = xm.tensor(w)
    compiled = compile_fn(
        lambda x: F.flatten(F.relu(F.conv2d(x, wt, padding=1)) + 1.0, 1) * 2.0, [x], "x86-avx2"
    )
    return compiled._stages["kernel-plan-memory"]  # type: ignore[return-value]


def test_round_trip(planned: ModuleOp) -> None:
    text = str(planned)
    assert "kernel.def @conv2d_gemm_avx2" in text and "#kernel.plan<arena = " in text
    parsed = Parser(_ctx(), text).parse_module()
    parsed.verify()
    assert str(parsed) == text


def test_attributes_verify() -> None:
    with pytest.raises(VerifyException, match="not 64-aligned"):
        K.PlaceAttr(K.Space.ARENA, 12)
    K.PlaceAttr(K.Space.OUTPUT, 1)  # indices need no alignment
    with pytest.raises(VerifyException, match="workspace must lie inside the arena"):
        K.PlanAttr(64, 128, 0, 1)
    with pytest.raises(VerifyException, match="invalid sizes"):
        K.PlanAttr(64, 0, 0, 0)


def test_op_verifiers() -> None:
    with pytest.raises(VerifyException, match="not a valid C identifier"):
        K.KernelDefOp("conv-3x3", "conv2d_gemm", "avx2", {}).verify()
    with pytest.raises(VerifyException, match="negative workspace"):
        K.KernelDefOp("k", "f", "generic", {}, -1).verify()
    w = K.WeightOp.from_numpy(np.zeros((2, 3), np.float32), f32)
    w.verify()
    bad = K.WeightOp(w.value, TensorType(f32, [4, 3]))
    with pytest.raises(VerifyException, match="needs 48 bytes"):
        bad.verify()
    with pytest.raises(VerifyException, match="same elements"):
        K.ViewOp(w.output, TensorType(f32, [5])).verify()
    call = K.CallOp("missing", [w.output], [TensorType(f32, [2, 3])])
    fn = func.FuncOp("main", ([], []))
    fn.body.block.add_ops([w, call, func.ReturnOp()])
    with pytest.raises(VerifyException, match="missing"):
        ModuleOp([fn]).verify()


def test_params_round_trip() -> None:
    params = {"n": 1, "mode": "max", "shape": (2, 3), "flag": True, "scale": 0.5}
    back = K.params_value(K.params_attr(params))
    assert back == {"n": 1, "mode": "max", "shape": (2, 3), "flag": 1, "scale": 0.5}


def test_check_plan_catches_overlap(planned: ModuleOp) -> None:
    module = planned.clone()
    fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
    K.check_plan(fn)
    calls = [op for op in fn.body.block.ops if isinstance(op, K.CallOp)]
    first, second = calls[0], calls[1]
    assert first.places is not None and second.places is not None
    # the elementwise "+ 1" ran in place over the convolution's result: same bytes, and legal
    assert second.definition().param_values().get("inplace") == 1
    assert first.places == second.places
    plan = K.plan_of(fn)
    assert plan is not None and plan.arena.data - plan.workspace.data == 4 * 10 * 10 * 4
    from xdsl.dialects.builtin import ArrayAttr

    # a value may not overlap a live one at another offset
    fn.attributes["kernel.plan"] = K.PlanAttr(1 << 20, 0, plan.weights.data, 1)
    off = first.places.data[0].at
    second.places = ArrayAttr([K.PlaceAttr(K.Space.ARENA, off + 64)])
    with pytest.raises(VerifyException, match="live together and overlap"):
        K.check_plan(fn)
    second.places = ArrayAttr([K.PlaceAttr(K.Space.ARENA, 1 << 20)])
    with pytest.raises(VerifyException, match="overrun the arena"):
        K.check_plan(fn)
