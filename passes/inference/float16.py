"""``f16-io-f32-comp`` and ``f16-io-comp``: MegEngine's ConvertF32ToF16Pass (spec B.4.3).

The graph computes in float16 while its inputs and outputs stay float32:

* every float32 function input gets a ``typecvt`` to float16 (MegEngine's TypeCvt after
  Host2DeviceCopy), every float32 constant is stored as float16 (MegEngine converts and then
  folds the TypeCvt);
* every op is rebuilt on its float16 operands with float16 results (a TypeCvt to float32 becomes
  a TypeCvt to float16); with ``f16-io-f32-comp`` (``enable_io16xc32``) convolutions, ConvBias
  and matrix multiplications get ``compute_mode = float32`` (accumulate in float32) and float
  reductions ``data_type = float_o16xc32``;
* every function result whose type changed is converted back to float32 at the return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import Float16Type, Float32Type, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.inference.common import make_const, tensor_type

F32, F16 = Float32Type(), Float16Type()

COMPUTE_MODE_OPS: tuple[type[T.MgbOp], ...] = (
    T.ConvolutionOp,
    T.ConvBiasOp,
    T.MatrixMulOp,
    T.BatchedMatrixMulOp,
)


def _is_f32(t: Attribute) -> bool:
    return isinstance(t, TensorType) and t.element_type == F32


def _to_f16(t: Attribute) -> Attribute:
    if _is_f32(t):
        assert isinstance(t, TensorType)
        return TensorType(F16, t.get_shape(), t.encoding)
    return t


def _typecvt(src: Any, elem: Attribute) -> T.TypeCvtOp:
    t = tensor_type(src)
    op = T.TypeCvtOp.make([src], [TensorType(elem, t.get_shape(), t.encoding)])
    assert isinstance(op, T.TypeCvtOp)
    return op


class ConvertInputsToF16(RewritePattern):
    """``func.func(%x: f32)``  ==>  every use of ``%x`` reads ``typecvt(%x) -> f16``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter) -> None:
        if not op.body.blocks:
            return
        block = op.body.block
        for arg in block.args:
            users = [u.operation for u in arg.uses]
            if not _is_f32(arg.type) or not users:
                continue
            if all(isinstance(u, T.TypeCvtOp) and not _is_f32(u.output.type) for u in users):
                continue  # already converted (or only ever converted to another dtype)
            cvt = rewriter.insert(_typecvt(arg, F16), InsertPoint.at_start(block))
            rewriter.replace_uses_with_if(arg, cvt.output, lambda use, cvt=cvt: use.operation is not cvt)


class ConvertConstToF16(RewritePattern):
    """``mgb.const : f32``  ==>  ``mgb.const : f16`` (the weights converted at compile time)"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ConstOp, rewriter: PatternRewriter) -> None:
        if not _is_f32(op.output.type) or op.value.is_elided:
            return
        new = make_const(op.numpy(), F16, L.layout_of(op.output.type))
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)


@dataclass
class RebuildOpInF16(RewritePattern):
    """``op(f16 operands) -> f32``  ==>  ``op(f16 operands) -> f16`` (with ``compute_mode = float32``
    for convolutions and matmuls, ``data_type = float_o16xc32`` for float reductions, when
    ``f32_comp``)"""

    f32_comp: bool

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, T.MgbOp) or isinstance(op, T.ConstOp):
            return
        if any(_is_f32(t) for t in op.operand_types):
            return  # wait until every float operand is float16
        if isinstance(op, T.TypeCvtOp) and _feeds_only_return(op):
            return  # the conversion back to float32 at a graph output
        if not any(_is_f32(t) for t in op.result_types):
            self._set_compute_mode(op, rewriter)
            return
        props = dict(op.properties)
        new = type(op).create(
            operands=list(op.operands),
            result_types=[_to_f16(t) for t in op.result_types],
            properties=props,
            attributes=dict(op.attributes),
        )
        rewriter.replace(op, new)
        self._set_compute_mode(new, rewriter)

    def _set_compute_mode(self, op: T.MgbOp, rewriter: PatternRewriter) -> None:
        if not self.f32_comp:
            return
        f16_in = any(isinstance(t, TensorType) and t.element_type == F16 for t in op.operand_types)
        if not f16_in:
            return
        if isinstance(op, COMPUTE_MODE_OPS) and op.params()["compute_mode"] != enums.ComputeMode.FLOAT32:
            op.properties["compute_mode"] = T.ComputeModeAttr(enums.ComputeMode.FLOAT32)
            rewriter.notify_op_modified(op)
        elif isinstance(op, T.ReduceOp) and op.params()["data_type"] == enums.ReduceDataType.DEFAULT:
            op.properties["data_type"] = T.ReduceDataTypeAttr(enums.ReduceDataType.FLOAT_O16xC32)
            rewriter.notify_op_modified(op)


def _feeds_only_return(op: Operation) -> bool:
    return all(isinstance(u.operation, func.ReturnOp) for r in op.results for u in r.uses)


class RestoreF32Outputs(RewritePattern):
    """``return %y : f16`` in a function declared to return f32  ==>  ``return typecvt(%y) -> f32``"""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.ReturnOp, rewriter: PatternRewriter) -> None:
        fn = op.parent_op()
        if not isinstance(fn, func.FuncOp):
            return
        declared = fn.function_type.outputs.data
        for i, (v, want) in enumerate(zip(op.arguments, declared, strict=True)):
            if v.type != want and _is_f32(want) and _to_f16(want) == v.type:
                cvt = rewriter.insert(_typecvt(v, F32), InsertPoint.before(op))
                op.operands[i] = cvt.output
                rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class _ConvertF32ToF16(ModulePass):
    F32_COMP: ClassVar[bool] = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns: list[RewritePattern] = [
            ConvertInputsToF16(),
            ConvertConstToF16(),
            RebuildOpInF16(self.F32_COMP),
            RestoreF32Outputs(),
        ]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns, ctx=ctx)).rewrite_module(op)


@dataclass(frozen=True)
class F16IOF32CompPass(_ConvertF32ToF16):
    """Computes in float16 with float32 accumulation, float32 at the graph's edges (enable_io16xc32)."""

    name = "f16-io-f32-comp"
    F32_COMP: ClassVar[bool] = True


@dataclass(frozen=True)
class F16IOCompPass(_ConvertF32ToF16):
    """Computes in float16 (float16 accumulation allowed), float32 at the graph's edges (enable_ioc16)."""

    name = "f16-io-comp"
    F32_COMP: ClassVar[bool] = False
