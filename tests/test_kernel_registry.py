"""The kernel registry: explicit priorities, one unit per (family, ISA), ISA order, the error for an op
no unit runs, and the pass option's textual target form."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from backends.c.kernels import KERNELS
from backends.targets import parse_target
from compiler.driver.compile import inference_clean, to_module
from dialects import tensor as T
from passes.lowering import KernelRegistry, KernelUnit, Lowered, LoweringError, LowerToKernelPass
from passes.lowering.kernels import KernelRegistryError
from passes.lowering.moves import GATHER_FAMILY


class _Unit(KernelUnit):
    family = "toy"
    ops = (T.ElemwiseOp,)
    priority = 10

    def __init__(self, isa: str = "generic", accept: bool = True) -> None:
        self.isa = isa
        self.accept = accept

    def match(self, op: Operation) -> Lowered | None:
        return Lowered({}, list(op.operands)) if self.accept else None

    def symbol(self, params: dict[str, Any]) -> str:
        return f"toy_{self.isa}"


class _Other(_Unit):
    family = "other"
    priority = 20


def _elemwise_op() -> Operation:
    import compiler.functional as F

    module = to_module(lambda x: F.relu(x), [np.ones((2, 3), np.float32)])
    return next(o for o in module.walk() if isinstance(o, T.ElemwiseOp))


def test_duplicate_units_and_equal_priorities_are_refused() -> None:
    with pytest.raises(KernelRegistryError, match="two kernel units for family 'toy' on ISA 'generic'"):
        KernelRegistry([_Unit(), _Unit()])

    class Same(_Unit):
        family = "same"

    with pytest.raises(KernelRegistryError, match="'same' and 'toy'|'toy' and 'same'"):
        KernelRegistry([_Unit(), Same()])


def test_priority_then_isa_order_decide() -> None:
    op = _elemwise_op()
    registry = KernelRegistry([_Unit("generic"), _Unit("avx2"), _Other("generic", accept=False)])
    assert registry.families(T.ElemwiseOp) == ["other", "toy"]
    unit, _ = registry.choose(op, ("avx2", "generic"))
    assert (unit.family, unit.isa) == ("toy", "avx2")
    unit, _ = registry.choose(op, ("neon", "generic"))
    assert (unit.family, unit.isa) == ("toy", "generic")
    with pytest.raises(LoweringError) as err:
        KernelRegistry([_Unit("avx2", accept=False), _Other("neon")]).choose(op, ("avx2", "generic"))
    message = str(err.value)
    assert "mgb.elemwise" in message and "no kernel on ISAs avx2, generic" in message
    assert "other (no template for ISAs avx2, generic)" in message
    assert "toy (does not accept these shapes, dtypes or parameters)" in message


def test_c_registry_orders_families_by_priority() -> None:
    assert KERNELS.families(T.ConvBiasOp) == [
        "conv2d_nchw88_expand_dw3x3_project", "conv2d_nchw88_expand_dw3x3", "conv2d_nchw88_dw3x3",
        "conv2d_nchw88_chan", "conv2d_nchw88_bf16", "conv2d_winograd_nchw88", "conv2d_nchw88_stem3x3",
        "conv2d_nchw88", "conv2d_winograd_nchw88_other",
        "conv2d_nchw44_mmla", "conv2d_nchw44_dot_im2col", "conv2d_nchw44_dot_gemm", "conv2d_nchw44_dot",
        "conv2d_nchw44_winograd", "conv2d_nchw44_gemm", "conv2d_nchw44_dw3x3",
        "conv2d_nchw44", "conv2d_nchw44_q8",
        "conv2d_depthwise", "conv2d_pixrows_f16", "conv2d_dw_f16", "conv2d_bf16_amx", "conv2d_winograd_f16",
        "conv2d_stem_f16", "conv2d_gemm_f16", "conv2d_gemm", "conv2d_q8_stem", "conv2d_q8_amx",
        "conv2d_dw_q8_x86", "conv2d_q8_x86", "conv2d_q8",
    ]  # fmt: skip
    assert KERNELS.families(T.MatrixMulOp) == [
        "matmul_matvec_bf16", "matmul_bf16_amx", "matmul_matvec", "matmul_gemm", "matmul_f16",
        "matmul_q8_amx", "matmul_q8",
    ]  # fmt: skip
    assert {u.isa for u in KERNELS.units() if u.family == "matmul_matvec"} == {"neon", "avx2", "avx512"}
    # the generic GEMM is listed with the others of its family, not by the ARM module
    gemm_isas = {u.isa for u in KERNELS.units() if u.family == "conv2d_gemm"}
    assert gemm_isas == {"avx512", "avx2", "neon", "generic"}
    for unit in KERNELS.units():
        # kernel-fuse-moves makes gather calls itself: the one family no op selects
        assert unit.ops or unit.family == GATHER_FAMILY, f"{unit.family} on {unit.isa} matches no op"


def test_pass_option_accepts_the_textual_target() -> None:
    import compiler.functional as F

    module = to_module(lambda x: F.relu(x) + 1, [np.ones((2, 8), np.float32)])
    cleaned = inference_clean(module, parse_target("x86-avx2"))
    by_text, by_object = cleaned.clone(), cleaned.clone()
    LowerToKernelPass("x86-avx2").apply(Context(), by_text)
    LowerToKernelPass(parse_target("x86-avx2")).apply(Context(), by_object)
    assert str(by_text) == str(by_object)
    assert isinstance(by_text, ModuleOp) and "kernel.call" in str(by_text)
    with pytest.raises(LoweringError, match="'ref' does not generate kernels"):
        LowerToKernelPass("ref").apply(Context(), cleaned.clone())
