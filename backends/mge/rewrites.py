"""The dump-time graph rewrites that make ``trace.dump`` files look like MegEngine's.

MegEngine's ``optimize_for_inference`` (spec part B) runs a long pass pipeline; on inference CNNs
its visible effect is small and is what these named rewrites reproduce, on a copy of the traced
function:

* :func:`fold_batch_norm` — ConvertBatchNormToElemwise + ParamRedistribute + ParamFuse: an
  inference BatchNorm after a convolution scales the convolution's weights and leaves a bias ADD;
  elsewhere it becomes ``FUSE_MUL_ADD3(x, k, b)``.
* :func:`group_add_constants` — ReorderArithChain + ParamFuse: in a chain of ADDs the constant terms
  move to the end and are summed into one constant (so a residual ``x + (conv + b)`` becomes
  ``(x + conv) + b``).
* :func:`fuse_arith` — ArithFuse: ``RELU(ADD(a, b))`` → ``FUSE_ADD_RELU(a, b)`` (likewise SIGMOID,
  TANH, H_SWISH), ``ADD(MUL(a, b), c)`` → ``FUSE_MUL_ADD3(a, b, c)``.
* :func:`fuse_conv_bias_nonlinearity` — FuseConvBiasNonlinPass (``enable_fuse_conv_bias_nonlinearity``).
* :func:`split_reduce_squeeze` — not an optimisation: MegEngine's ``F.mean(x, (2, 3))`` removes
  each reduced axis right after its Reduce; xmge's frontend removes them together at the end. The
  dump interleaves them the way MegEngine's frontend emits them.

Every rewrite keeps the function's results numerically equal up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from dialects import enums
from dialects import tensor as T
from dialects.dtypes import is_float, numpy_dtype

E = enums.ElemwiseMode


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _const_value(v: SSAValue) -> np.ndarray | None:
    op = v.owner
    if isinstance(op, T.ConstOp) and not op.value.is_elided:
        return op.numpy()
    return None


def _single_use(v: SSAValue) -> bool:
    return v.has_one_use()


def _new_const(array: np.ndarray, like: SSAValue, before: Operation) -> SSAValue:
    t = like.type
    assert isinstance(t, TensorType)
    const = T.ConstOp.from_numpy(np.asarray(array, dtype=numpy_dtype(t.element_type)), t.element_type)
    Rewriter.insert_op(const, InsertPoint.before(before))
    return const.output


def _copy_naming(src: Operation, dst: Operation) -> None:
    for key in ("scope", "name"):
        if key in src.attributes:
            dst.attributes[key] = src.attributes[key]


def _replace(old: Operation, new: Operation, keep_name: bool = True) -> None:
    """Insert ``new`` before ``old``, redirect ``old``'s uses to it and erase ``old``."""
    Rewriter.insert_op(new, InsertPoint.before(old))
    if keep_name:
        _copy_naming(old, new)
    for a, b in zip(old.results, new.results, strict=True):
        a.replace_all_uses_with(b)
    Rewriter.erase_op(old)


def _erase_dead(fn: func.FuncOp) -> None:
    changed = True
    while changed:
        changed = False
        for op in reversed(list(fn.body.block.ops)):
            if isinstance(op, T.MgbOp) and op.results and all(r.first_use is None for r in op.results):
                Rewriter.erase_op(op)
                changed = True


def _elemwise(mode: Any, operands: list[SSAValue]) -> T.MgbOp:
    return T.ElemwiseOp.make(operands, mode=mode)


def _mode(op: Operation | None) -> Any:
    return op.params()["mode"] if isinstance(op, T.ElemwiseOp) else None


# ----------------------------------------------------------------------------------------------


def fold_batch_norm(fn: func.FuncOp) -> None:
    for bn in [op for op in fn.body.block.ops if isinstance(op, T.BatchNormOp)]:
        x, scale, bias, mean, var = bn.operands
        vals = [_const_value(v) for v in (scale, bias, mean, var)]
        if any(v is None for v in vals) or not is_float(x.type.element_type):  # type: ignore[attr-defined]
            continue
        s, b, m, v = (np.asarray(a, np.float32).reshape(-1) for a in vals)  # type: ignore[arg-type]
        eps = np.float32(bn.params()["epsilon"])
        k = s / np.sqrt(v + eps)
        c = b - m * k
        nd = len(_shape(x))
        chan = (1, k.size) + (1,) * (nd - 2)
        conv = x.owner
        w = _const_value(conv.operands[1]) if isinstance(conv, T.ConvolutionOp) else None
        if isinstance(conv, T.ConvolutionOp) and w is not None and _single_use(x):
            # scale the output channels of the weights: dense (OC, ...) or group (G, OC/G, ...)
            if conv.params()["sparse"] == enums.ConvSparse.GROUP:
                kw = k.reshape(w.shape[0], w.shape[1], *([1] * (w.ndim - 2)))
            else:
                kw = k.reshape(w.shape[0], *([1] * (w.ndim - 1)))
            new_w = _new_const(w.astype(np.float32) * kw, conv.operands[1], conv)
            conv.operands[1] = new_w
            bias_v = _new_const(c.reshape(chan), x, bn)
            _replace(bn, _elemwise(E.ADD, [x, bias_v]))
        else:
            kv = _new_const(k.reshape(chan), x, bn)
            cv = _new_const(c.reshape(chan), x, bn)
            _replace(bn, _elemwise(E.FUSE_MUL_ADD3, [x, kv, cv]))
    _erase_dead(fn)


def _add_terms(root: SSAValue, inner: Callable[[SSAValue], bool]) -> tuple[list[SSAValue], bool]:
    """The summands of the ADD tree at ``root`` (in operand order) and whether it had inner ADDs."""
    terms: list[SSAValue] = []
    flattened = False
    stack: list[tuple[SSAValue, bool]] = [(root, True)]
    while stack:
        v, top = stack.pop()
        if top or inner(v):
            flattened |= not top
            stack.extend((o, False) for o in reversed(v.owner.operands))  # type: ignore[union-attr]
        else:
            terms.append(v)
    return terms, flattened


def group_add_constants(fn: func.FuncOp) -> None:
    def is_add(op: Operation | None) -> bool:
        return isinstance(op, T.ElemwiseOp) and _mode(op) == E.ADD

    def inner(v: SSAValue) -> bool:
        # a single-use ADD feeding another ADD: its terms can join the outer sum
        return is_add(v.owner) and _single_use(v) and is_add(next(iter(v.uses)).operation)

    roots = []
    for op in fn.body.block.ops:
        if not is_add(op):
            continue
        out = op.results[0]
        if inner(out):
            continue  # part of a larger chain; handled at its root
        roots.append(op)
    for root in roots:
        terms, flattened = _add_terms(root.results[0], inner)
        consts = [t for t in terms if _const_value(t) is not None]
        others = [t for t in terms if _const_value(t) is None]
        if not consts or not others or not is_float(root.results[0].type.element_type):  # type: ignore[attr-defined]
            continue
        if not flattened and len(consts) == 1 and terms[-1] is consts[0]:
            continue
        total = np.zeros((), np.float32)
        for c in consts:
            total = total + np.asarray(_const_value(c), np.float32)
        cur = others[0]
        for t in others[1:]:
            add = _elemwise(E.ADD, [cur, t])
            Rewriter.insert_op(add, InsertPoint.before(root))
            cur = add.results[0]
        cval = _new_const(total, root.results[0], root)
        _replace(root, _elemwise(E.ADD, [cur, cval]))
    _erase_dead(fn)


_ADD_FUSED = {
    E.RELU: E.FUSE_ADD_RELU,
    E.SIGMOID: E.FUSE_ADD_SIGMOID,
    E.TANH: E.FUSE_ADD_TANH,
    E.H_SWISH: E.FUSE_ADD_H_SWISH,
}


def fuse_arith(fn: func.FuncOp) -> None:
    for op in list(fn.body.block.ops):
        if op.parent is None or not isinstance(op, T.ElemwiseOp):
            continue
        mode = _mode(op)
        if mode in _ADD_FUSED:
            src = op.operands[0]
            if _mode(src.owner) == E.ADD and _single_use(src) and src.type == op.results[0].type:
                add = src.owner
                _replace(op, _elemwise(_ADD_FUSED[mode], list(add.operands)))  # type: ignore[union-attr]
        elif mode == E.ADD and is_float(op.results[0].type.element_type):  # type: ignore[attr-defined]
            for i in (0, 1):
                m = op.operands[i]
                if _mode(m.owner) == E.MUL and _single_use(m):
                    a, b = m.owner.operands  # type: ignore[union-attr]
                    _replace(op, _elemwise(E.FUSE_MUL_ADD3, [a, b, op.operands[1 - i]]))
                    break
    _erase_dead(fn)


_NONLINE = {
    E.ADD: enums.NonlineMode.IDENTITY,
    E.FUSE_ADD_RELU: enums.NonlineMode.RELU,
    E.FUSE_ADD_SIGMOID: enums.NonlineMode.SIGMOID,
    E.FUSE_ADD_H_SWISH: enums.NonlineMode.H_SWISH,
}
_UNARY_NONLINE = {
    E.RELU: enums.NonlineMode.RELU,
    E.SIGMOID: enums.NonlineMode.SIGMOID,
    E.H_SWISH: enums.NonlineMode.H_SWISH,
}


def _conv_bias_from(conv: T.ConvolutionOp, operands: list[SSAValue], nonline: Any) -> T.MgbOp:
    p = conv.params()
    return T.ConvBiasOp.make(operands, None, nonline_mode=nonline, **p)


def fuse_conv_bias_nonlinearity(fn: func.FuncOp) -> None:
    def fusable_conv(v: SSAValue) -> T.ConvolutionOp | None:
        op = v.owner
        if isinstance(op, T.ConvolutionOp) and _single_use(v) and op.params()["format"] == enums.Format.NCHW:
            return op
        return None

    for op in list(fn.body.block.ops):
        if op.parent is None or not isinstance(op, T.ElemwiseOp):
            continue
        mode = _mode(op)
        out_shape = _shape(op.results[0])
        if mode in _NONLINE and len(op.operands) == 2:
            for i in (0, 1):
                conv = fusable_conv(op.operands[i])
                if conv is None:
                    continue
                bias = op.operands[1 - i]
                oc = _shape(conv.results[0])[1]
                valid = _shape(bias) == (1, oc, 1, 1) or (
                    _shape(bias) == out_shape and _const_value(bias) is None
                )
                if not valid or bias.type.element_type != op.results[0].type.element_type:  # type: ignore[attr-defined]
                    continue
                new = _conv_bias_from(conv, [conv.operands[0], conv.operands[1], bias], _NONLINE[mode])
                _replace(op, new)
                Rewriter.erase_op(conv)
                break
        elif mode in _UNARY_NONLINE:
            src = op.operands[0]
            conv = fusable_conv(src)
            if conv is not None:
                new = _conv_bias_from(conv, [conv.operands[0], conv.operands[1]], _UNARY_NONLINE[mode])
                _replace(op, new)
                Rewriter.erase_op(conv)
            elif (
                isinstance(src.owner, T.ConvBiasOp)
                and _single_use(src)
                and len(src.owner.operands) == 3
                and src.owner.params()["nonline_mode"] == enums.NonlineMode.IDENTITY
            ):
                cb = src.owner
                p = cb.params()
                p["nonline_mode"] = _UNARY_NONLINE[mode]
                _replace(op, T.ConvBiasOp.make(list(cb.operands), None, **p))
                Rewriter.erase_op(cb)
    _erase_dead(fn)


def split_reduce_squeeze(fn: func.FuncOp) -> None:
    """Reduce(a1) → Reduce(a2) → AxisAddRemove(REMOVE a1, REMOVE a2), a1 > a2 → interleaved."""
    for op in list(fn.body.block.ops):
        if op.parent is None or not isinstance(op, T.AxisAddRemoveOp):
            continue
        p = op.params()
        methods, axes = list(p["methods"]), list(p["axes"])
        if len(axes) < 2 or any(m != enums.AxisMethod.REMOVE for m in methods):
            continue
        chain = []
        v = op.operands[0]
        while isinstance(v.owner, T.ReduceOp) and _single_use(v) and len(chain) < len(axes):
            chain.append(v.owner)
            v = v.owner.operands[0]
        chain.reverse()
        reduce_axes = [r.params()["axis"] for r in chain]
        if len(chain) != len(axes) or reduce_axes != axes or axes != sorted(axes, reverse=True):
            continue
        cur = chain[0].operands[0]
        for r in chain:
            rp = r.params()
            red = T.ReduceOp.make([cur], **rp)
            Rewriter.insert_op(red, InsertPoint.before(op))
            _copy_naming(r, red)
            rm = T.AxisAddRemoveOp.make(
                [red.results[0]], methods=(enums.AxisMethod.REMOVE,), axes=(rp["axis"],)
            )
            Rewriter.insert_op(rm, InsertPoint.before(op))
            if "scope" in op.attributes:
                rm.attributes["scope"] = op.attributes["scope"]
            cur = rm.results[0]
        op.results[0].replace_all_uses_with(cur)
        if "name" in op.attributes:
            cur.owner.attributes["name"] = op.attributes["name"]  # type: ignore[union-attr]
        Rewriter.erase_op(op)
    _erase_dead(fn)


OptimizeStep = Callable[[func.FuncOp], None]

BASE_STEPS: tuple[OptimizeStep, ...] = (fold_batch_norm, group_add_constants, fuse_arith)


def optimize_for_inference(module: ModuleOp, *, fuse_conv_bias: bool = False) -> ModuleOp:
    """A rewritten copy of ``module`` (the input is left untouched)."""
    out = module.clone()
    for fn in out.ops:
        if not isinstance(fn, func.FuncOp):
            continue
        for step in BASE_STEPS:
            step(fn)
        if fuse_conv_bias:
            fuse_conv_bias_nonlinearity(fn)
    out.verify()
    return out


def frontend_canonicalize(module: ModuleOp) -> ModuleOp:
    """A copy with the frontend-order differences to MegEngine removed (applied to every dump)."""
    out = module.clone()
    for fn in out.ops:
        if isinstance(fn, func.FuncOp):
            split_reduce_squeeze(fn)
    return out


__all__ = [
    "fold_batch_norm",
    "group_add_constants",
    "fuse_arith",
    "fuse_conv_bias_nonlinearity",
    "split_reduce_squeeze",
    "optimize_for_inference",
    "frontend_canonicalize",
]
