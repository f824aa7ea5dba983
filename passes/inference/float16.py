"""``f16-io-f32-comp`` and ``f16-io-comp``: MegEngine's ConvertF32ToF16Pass (spec B.4.3).

The graph computes in float16 while its inputs and outputs stay float32:

* every float32 function input gets a ``typecvt`` to float16 (MegEngine's TypeCvt after
  Host2DeviceCopy), every float32 constant is stored as float16, in its layout (MegEngine converts
  and then folds the TypeCvt);
* every op is rebuilt on its float16 operands and each float32 result takes the element type the op
  infers from them (MegEngine's ``auto_replace_outputs``): float results become float16, while the
  mean and rstd of ``layer_norm`` stay float32, ``argmax``/``argmin`` int32 and comparisons bool;
  ops on integers or quantized values only are left alone; a ``typecvt`` to float32 becomes one
  to float16 (a ``typecvt`` to any other dtype keeps it);
* with ``f16-io-f32-comp`` (``enable_io16xc32``) convolutions (also transposed), ConvBias and
  matrix multiplications get ``compute_mode = float32`` (accumulate in float32) and float
  reductions ``data_type = float_o16xc32``; softmax, layer_norm, pooling and the rest have no such
  parameter in MegEngine and compute in float16 either way;
* every function result whose type changed is converted back to float32 at the return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import Float16Type, Float32Type, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from dialects.tensor import ShapeInferenceError
from passes.inference.common import make_const, tensor_type
from passes.pattern_pass import apply_patterns

F32, F16 = Float32Type(), Float16Type()

COMPUTE_MODE_OPS: tuple[type[T.MgbOp], ...] = (
    T.ConvolutionOp,
    T.ConvBiasOp,
    T.MatrixMulOp,
    T.BatchedMatrixMulOp,
    T.ConvolutionBackwardDataOp,
)


def _is_f32(t: Attribute) -> bool:
    return isinstance(t, TensorType) and t.element_type == F32


def _is_f16(t: Attribute) -> bool:
    return isinstance(t, TensorType) and t.element_type == F16


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
    """``op(f16 operands) -> f32``  ==>  ``op(f16 operands) -> f16``, MegEngine's
    ``auto_replace_outputs``: the op is rebuilt on the converted operands and each float32 result
    takes the dtype the op infers from them, so auxiliary outputs MegEngine keeps float32 (the
    mean and rstd of ``layer_norm``) stay float32, integer and boolean results (``argmax``,
    comparisons) keep theirs, and an op on integers only is left alone. A ``typecvt`` to float32
    becomes one to float16. With ``f32_comp`` convolutions (also transposed), ConvBias and matrix
    multiplications get ``compute_mode = float32`` and float reductions
    ``data_type = float_o16xc32`` (MegEngine's replace_*_opr).

    Runs as one forward walk after the sources are converted, so every operand an op sees is
    final: a float32 operand next to float16 ones (a kept float32 output) is converted to float16
    (MegEngine would refuse the mixed dtypes), and an op whose inference refuses float16 operands
    stays float32 between ``typecvt`` ops."""

    f32_comp: bool

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, T.MgbOp) or isinstance(op, T.ConstOp):
            return
        if isinstance(op, T.TypeCvtOp):
            self._retarget_typecvt(op, rewriter)
            return
        if not any(_is_f16(t) for t in op.operand_types):
            return  # integers, quantized values or a kept float32 value: MegEngine keeps the types
        operands = [v if not _is_f32(v.type) else _insert_typecvt(rewriter, v, F16, op) for v in op.operands]
        result_types = _inferred_result_types(op, [v.type for v in operands])
        if result_types is None:
            _keep_in_f32(op, rewriter)
            return
        if operands == list(op.operands) and result_types == list(op.result_types):
            self._set_compute_mode(op, rewriter)
            return
        new = type(op).create(
            operands=operands,
            result_types=result_types,
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        rewriter.replace(op, new)
        self._set_compute_mode(new, rewriter)

    @staticmethod
    def _retarget_typecvt(op: T.TypeCvtOp, rewriter: PatternRewriter) -> None:
        if not _is_f32(op.output.type):
            return
        if _is_f16(op.src.type) and _feeds_only_return(op):
            return  # the conversion back to float32 at a graph output
        new = _typecvt(op.src, F16)
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)

    def _set_compute_mode(self, op: T.MgbOp, rewriter: PatternRewriter) -> None:
        if not self.f32_comp or not any(_is_f16(t) for t in op.operand_types):
            return
        if isinstance(op, COMPUTE_MODE_OPS) and op.params()["compute_mode"] != enums.ComputeMode.FLOAT32:
            op.properties["compute_mode"] = T.ComputeModeAttr(enums.ComputeMode.FLOAT32)
            rewriter.notify_op_modified(op)
        elif isinstance(op, T.ReduceOp) and op.params()["data_type"] == enums.ReduceDataType.DEFAULT:
            op.properties["data_type"] = T.ReduceDataTypeAttr(enums.ReduceDataType.FLOAT_O16xC32)
            rewriter.notify_op_modified(op)


def _inferred_result_types(op: T.MgbOp, operand_types: list[Attribute]) -> list[Attribute] | None:
    """``op``'s result types on ``operand_types``: a float32 result takes the element type the op
    infers (shape and layout kept); None when the op refuses these operands."""
    try:
        inferred: list[TensorType] | None = type(op).infer(operand_types, **op.params())
    except NotImplementedError:
        inferred = None  # reshape, broadcast, relayout: the result is the operand's dtype
    except ShapeInferenceError:
        return None
    out: list[Attribute] = []
    for i, t in enumerate(op.result_types):
        if not _is_f32(t):
            out.append(t)
            continue
        assert isinstance(t, TensorType)
        elem = F16 if inferred is None else inferred[i].element_type
        out.append(TensorType(elem, t.get_shape(), t.encoding))
    return out


def _keep_in_f32(op: T.MgbOp, rewriter: PatternRewriter) -> None:
    """``op`` has no float16 form: it reads its float16 operands converted back to float32."""
    for i, v in enumerate(op.operands):
        if _is_f16(v.type):
            op.operands[i] = _insert_typecvt(rewriter, v, F32, op)
    rewriter.notify_op_modified(op)


def _insert_typecvt(rewriter: PatternRewriter, v: SSAValue, elem: Attribute, before: Operation) -> SSAValue:
    return rewriter.insert(_typecvt(v, elem), InsertPoint.before(before)).output


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
        apply_patterns(op, [ConvertInputsToF16(), ConvertConstToF16()], ctx)
        # one walk in program order: each op is rebuilt after every producer of its operands
        for pattern in (RebuildOpInF16(self.F32_COMP), RestoreF32Outputs()):
            PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)


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
