"""Reductions and matrix products (MegEngine's ``functional.math``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.core import apply, axis_error, op_error
from compiler.functional.tensor import _axis, expand_dims, reshape, squeeze
from compiler.tensor import Tensor, as_tensor
from dialects import enums
from dialects import tensor as T


def _reduce(mode: Any, inp: Tensor, axis: int | Sequence[int] | None, keepdims: bool, label: str) -> Tensor:
    inp = as_tensor(inp)
    if axis is None:
        if inp.size == 0 and mode in (enums.ReduceMode.MAX, enums.ReduceMode.MIN):
            raise op_error(label, f"cannot take the {label} of an empty tensor (shape {inp.shape})")
        flat = reshape(inp, (inp.size,)) if inp.ndim != 1 else inp
        (out,) = apply(T.ReduceOp, [flat], label=label, mode=mode, axis=0)
        return reshape(out, (1,) * inp.ndim) if keepdims else reshape(out, ())
    axes = [axis] if isinstance(axis, int) else list(axis)
    norm = sorted({_axis(label, a, inp.ndim) for a in axes}, reverse=True)
    if len(norm) != len(axes):
        raise axis_error(label, f"axis {axis} contains duplicated indices")
    if mode in (enums.ReduceMode.MAX, enums.ReduceMode.MIN) and any(inp.shape[a] == 0 for a in norm):
        raise op_error(label, f"cannot take the {label} over an empty axis (shape {inp.shape}, axis {axis})")
    out = inp
    for a in norm:
        (out,) = apply(T.ReduceOp, [out], label=label, mode=mode, axis=a)
    return out if keepdims else squeeze(out, norm)


def sum(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    inp = as_tensor(inp)
    if inp.dtype.kind == "b":
        inp = inp.astype("int32")  # counting: a bool sum is an int32 count, not a bool
    return _reduce(enums.ReduceMode.SUM, inp, axis, keepdims, "sum")


def mean(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    inp = as_tensor(inp)
    if inp.dtype.kind != "f":
        inp = inp.astype("float32")
    return _reduce(enums.ReduceMode.MEAN, inp, axis, keepdims, "mean")


def max(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(enums.ReduceMode.MAX, inp, axis, keepdims, "max")


def min(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(enums.ReduceMode.MIN, inp, axis, keepdims, "min")


def prod(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    inp = as_tensor(inp)
    if inp.dtype.kind == "b":
        inp = inp.astype("int32")
    return _reduce(enums.ReduceMode.PRODUCT, inp, axis, keepdims, "prod")


def _arg_reduce(cls: type[T.MgbOp], label: str, inp: Tensor, axis: Any, keepdims: bool) -> Tensor:
    inp = as_tensor(inp)
    if axis is None:
        if keepdims:
            raise op_error(label, "cannot set axis=None and keepdims=True")
        inp = reshape(inp, (inp.size,)) if inp.ndim != 1 else inp
        axis = 0
    axes = [axis] if isinstance(axis, int) else list(axis)
    if inp.size == 0:
        raise op_error(label, f"cannot take the {label} of an empty tensor (shape {inp.shape})")
    norm = sorted({_axis(label, a, inp.ndim) for a in axes}, reverse=True)
    out = inp
    for a in norm:
        (out,) = apply(cls, [out], label=label, axis=a)
        if not keepdims:
            out = squeeze(out, a)
    return out


def argmax(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """int32 index of the first largest value along ``axis`` (of the flattened tensor if None)."""
    return _arg_reduce(T.ArgmaxOp, "argmax", inp, axis, keepdims)


def argmin(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """int32 index of the first smallest value along ``axis`` (of the flattened tensor if None)."""
    return _arg_reduce(T.ArgminOp, "argmin", inp, axis, keepdims)


def _sort_label(label: str, inp: Tensor) -> None:
    if inp.ndim == 0 or inp.ndim > 2 and label != "sort":
        raise op_error(label, f"input should be 1-D or 2-D, got shape {inp.shape}")


def argsort(inp: Tensor, descending: bool = False) -> Tensor:
    """int32 indices that sort a 1-D tensor, or each row of a 2-D one (stable: ties keep their order)."""
    inp = as_tensor(inp)
    _sort_label("argsort", inp)
    rows = reshape(inp, (1, inp.shape[0])) if inp.ndim == 1 else inp
    _, idx = apply(T.ArgsortOp, [rows], label="argsort", descending=bool(descending))
    return reshape(idx, inp.shape) if inp.ndim == 1 else idx


def sort(inp: Tensor, descending: bool = False, dim: int = -1) -> tuple[Tensor, Tensor]:
    """``(sorted values, int32 indices)`` along ``dim`` (stable: ties keep their order)."""
    from compiler.functional.tensor import swapaxes

    inp = as_tensor(inp)
    _sort_label("sort", inp)
    d = _axis("sort", dim, inp.ndim)
    moved = swapaxes(inp, d, -1) if d != inp.ndim - 1 else inp
    rows = reshape(moved, (math.prod(moved.shape[:-1]), moved.shape[-1]))
    vals, idx = apply(T.ArgsortOp, [rows], label="sort", descending=bool(descending))

    def restore(t: Tensor) -> Tensor:
        t = reshape(t, moved.shape)
        return swapaxes(t, d, -1) if d != inp.ndim - 1 else t

    return restore(vals), restore(idx)


def topk(
    inp: Tensor, k: int, descending: bool = True, kth_only: bool = False, no_sort: bool = False
) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (``descending``) or smallest elements of a 1-D tensor or of each row of a
    2-D one, with their int32 indices; only the k-th one with ``kth_only``; in an unspecified
    order with ``no_sort``."""
    inp = as_tensor(inp)
    _sort_label("topk", inp)
    k = int(k.item() if isinstance(k, Tensor) else k)
    rows = reshape(inp, (1, inp.shape[0])) if inp.ndim == 1 else inp
    if k > rows.shape[1] and not kth_only:
        k = rows.shape[1]  # MegEngine's TopK takes the whole row when k exceeds it
    if not 0 < k <= rows.shape[1]:
        raise op_error("topk", f"k={k} must be in [1, {rows.shape[1]}] for a row of {rows.shape[1]} elements")
    mode = 0 if kth_only else 1 if no_sort else 2
    vals, idx = apply(T.TopKOp, [rows], label="topk", k=-k if descending else k, mode=mode)
    if inp.ndim == 1:
        shape = () if kth_only else (k,)
        vals, idx = reshape(vals, shape), reshape(idx, shape)
    return vals, idx


def _matmul_operands(inp1: Any, inp2: Any) -> tuple[Tensor, Tensor]:
    from compiler.functional.elemwise import _promote

    a, b = as_tensor(inp1), as_tensor(inp2)
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        raise op_error("matmul", f"bool operands are not supported, got {a.dtype} and {b.dtype}")
    a, b = _promote([a, b])
    return a, b


def matmul(
    inp1: Tensor,
    inp2: Tensor,
    transpose_a: bool = False,
    transpose_b: bool = False,
    compute_mode: str = "default",
    format: str = "default",  # noqa: A002
) -> Tensor:
    """numpy-style matmul: 1-D operands are promoted, >2-D operands are batched with broadcasting."""
    a, b = _matmul_operands(inp1, inp2)
    if a.ndim == 0 or b.ndim == 0:
        raise op_error("matmul", f"operands must be at least 1-D, got shapes {a.shape} and {b.shape}")
    squeeze_a = a.ndim == 1
    squeeze_b = b.ndim == 1
    if squeeze_a:
        a = expand_dims(a, 0)
    if squeeze_b:
        b = expand_dims(b, 1)
    if a.ndim == 2 and b.ndim == 2:
        (out,) = apply(
            T.MatrixMulOp, [a, b], label="matmul", transpose_a=transpose_a, transpose_b=transpose_b
        )
    else:
        from compiler.functional.tensor import broadcast_to

        try:
            batch = T.broadcast_shapes("matmul", [a.shape[:-2], b.shape[:-2]])
        except T.ShapeInferenceError:
            raise op_error(
                "matmul", f"batch dimensions of {a.shape} and {b.shape} cannot be broadcast together"
            ) from None
        a = broadcast_to(a, (*batch, *a.shape[-2:]))
        b = broadcast_to(b, (*batch, *b.shape[-2:]))
        n = 1
        for d in batch:
            n *= d
        a3, b3 = reshape(a, (n, *a.shape[-2:])), reshape(b, (n, *b.shape[-2:]))
        (out,) = apply(
            T.BatchedMatrixMulOp, [a3, b3], label="matmul", transpose_a=transpose_a, transpose_b=transpose_b
        )
        out = reshape(out, (*batch, *out.shape[-2:]))
    if squeeze_a:
        out = squeeze(out, out.ndim - 2)
    if squeeze_b:
        out = squeeze(out, out.ndim - 1)
    return out


def batch_matmul(inp1: Tensor, inp2: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """(B, M, K) @ (B, K, N) with equal batch sizes and no broadcasting, as MegEngine's."""
    a, b = _matmul_operands(inp1, inp2)
    if a.ndim != 3 or b.ndim != 3:
        raise op_error("batch_matmul", f"operands must be 3-D, got shapes {a.shape} and {b.shape}")
    (out,) = apply(
        T.BatchedMatrixMulOp, [a, b], label="batch_matmul", transpose_a=transpose_a, transpose_b=transpose_b
    )
    return out


def norm(inp: Tensor, ord: float = 2.0, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A002
    from compiler.functional.elemwise import abs as _abs
    from compiler.functional.elemwise import pow as _pow

    inp = as_tensor(inp)
    if ord == 2.0:
        from compiler.functional.elemwise import sqrt

        return sqrt(sum(inp * inp, axis, keepdims))
    return _pow(sum(_pow(_abs(inp), ord), axis, keepdims), 1.0 / ord)


def var(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Population variance ``mean((x - mean(x))**2)`` over ``axis`` (all axes if None)."""
    inp = as_tensor(inp)
    if inp.dtype.kind != "f":
        inp = inp.astype("float32")
    centered = inp - mean(inp, axis, keepdims=True)
    return mean(centered * centered, axis, keepdims)


def std(inp: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    from compiler.functional.elemwise import sqrt

    return sqrt(var(inp, axis, keepdims))


def normalize(inp: Tensor, ord: float | None = None, axis: Any = None, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """``inp / max(norm(inp, ord, axis), eps)`` (MegEngine's ``F.normalize``; ord None is 2)."""
    from compiler.functional.elemwise import maximum

    inp = as_tensor(inp)
    return inp / maximum(norm(inp, 2.0 if ord is None else ord, axis, keepdims=True), eps)


def sign(inp: Tensor) -> Tensor:
    """-1, 0 or 1 by the sign of each element, in ``inp``'s dtype."""
    from compiler.functional.elemwise import _elemwise

    return _elemwise("SIGN", as_tensor(inp), label="sign")


def isnan(inp: Tensor) -> Tensor:
    """Whether each element is NaN (bool)."""
    from compiler.functional.elemwise import _elemwise

    inp = as_tensor(inp)
    if inp.dtype.kind != "f":
        return inp != inp  # integers are never NaN
    return _elemwise("ISNAN", inp, label="isnan")


def isinf(inp: Tensor) -> Tensor:
    """Whether each element is +inf or -inf (bool)."""
    from compiler.functional.elemwise import _elemwise

    inp = as_tensor(inp)
    if inp.dtype.kind != "f":
        return inp != inp
    return _elemwise("ISINF", inp, label="isinf")


def dot(inp1: Tensor, inp2: Tensor) -> Tensor:
    """The inner product of two vectors (or scalars) of one length, as a 0-d tensor."""
    a, b = as_tensor(inp1), as_tensor(inp2)
    if a.ndim > 1 or b.ndim > 1 or a.size != b.size:
        raise op_error("dot", f"needs two vectors of one length, got shapes {a.shape} and {b.shape}")
    return sum(a * b)


__all__ = [
    "cross",
    "matinv",
    "svd",
    "argmax",
    "argsort",
    "sort",
    "topk",
    "argmin",
    "batch_matmul",
    "dot",
    "isinf",
    "isnan",
    "matmul",
    "max",
    "mean",
    "min",
    "norm",
    "normalize",
    "prod",
    "sign",
    "std",
    "sum",
    "var",
]


def _vectors_last(label: str, x: Tensor, axis: int) -> Tensor:
    """``x`` with its vector axis moved last and 2-vectors given a zero third component."""
    from compiler.functional.nn import pad
    from compiler.functional.tensor import transpose

    ax = _axis(label, axis, x.ndim)
    if ax != x.ndim - 1:
        x = transpose(x, [d for d in range(x.ndim) if d != ax] + [ax])
    if x.shape[-1] == 2:
        x = pad(x, [(0, 0)] * (x.ndim - 1) + [(0, 1)])
    if x.shape[-1] != 3:
        raise op_error(label, f"the vector axis must have 2 or 3 elements, got shape {x.shape}")
    return x


def cross(
    a: Tensor, b: Tensor, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: int | None = None
) -> Tensor:
    """Cross products of the 3-vectors along ``axisa`` of ``a`` and ``axisb`` of ``b`` (2-vectors
    have a zero third component), broadcast over the other axes, placed along ``axisc``;
    ``axis`` sets all three."""
    from compiler.functional.tensor import stack

    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = as_tensor(a), as_tensor(b)
    u, v = _vectors_last("cross", a, axisa), _vectors_last("cross", b, axisb)
    comps = [u[..., i] for i in range(3)], [v[..., i] for i in range(3)]
    (a0, a1, a2), (b0, b1, b2) = comps
    out = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    nd = out[0].ndim + 1
    return stack(out, axis=_axis("cross", axisc, nd))


def matinv(inp: Tensor) -> Tensor:
    """The inverse of each square matrix in the trailing two axes: Gauss-Jordan elimination with
    partial pivoting, written in tensor ops so the gradient (``-A^-T g A^-T``) follows from theirs.
    A singular matrix gives non-finite values, as MegEngine's."""
    from compiler.functional.nn import one_hot
    from compiler.functional.tensor import broadcast_to, concat, eye

    inp = as_tensor(inp)
    if inp.ndim < 2 or inp.shape[-1] != inp.shape[-2]:
        raise op_error("matinv", f"input must be (..., n, n), got shape {inp.shape}")
    if inp.dtype.kind != "f":
        raise op_error("matinv", f"input must be floating point, got {inp.dtype}")
    *lead, n, _ = inp.shape
    batch = int(math.prod(lead))
    if n == 0 or batch == 0:
        return inp
    dt = inp.dtype
    ident = eye(n, dtype=dt)
    work = concat([reshape(inp, (batch, n, n)), broadcast_to(ident, (batch, n, n))], axis=2)
    for k in range(n):
        e_k = Tensor((np.arange(n) == k).astype(dt))
        pivot = argmax(abs(work[:, k:, k]), axis=1) + k  # the largest candidate limits round-off
        e_p = one_hot(pivot, n).astype(dt)  # (B, n)
        # the permutation swapping rows k and pivot (the identity when they are equal)
        swap = (
            ident
            - expand_dims(e_k, 1) * e_k
            - expand_dims(e_p, 2) * expand_dims(e_p, 1)
            + expand_dims(e_k, 1) * expand_dims(e_p, 1)
            + expand_dims(e_p, 2) * e_k
        )
        work = batch_matmul(swap, work)
        row = work[:, k, :] / work[:, k, k : k + 1]
        work = (
            work
            - expand_dims(work[:, :, k], 2) * expand_dims(row, 1)
            + expand_dims(e_k, 1) * expand_dims(row, 1)
        )
    return reshape(work[:, :, n:], inp.shape)


def svd(inp: Tensor, full_matrices: bool = False, compute_uv: bool = True) -> Any:
    """The singular value decomposition ``inp = U @ diag(S) @ Vh`` of each matrix in the trailing
    two axes of a float32 ``inp`` (..., M, N): ``(U, S, Vh)`` with U (..., M, K), S (..., K)
    descending, Vh (..., K, N), K = min(M, N); ``full_matrices`` makes U (..., M, M) and Vh
    (..., N, N). With ``compute_uv=False`` only ``S`` is returned, as MegEngine documents (its 1.13
    raises unpacking one result). Differentiable for ``full_matrices=False``. The sign of each
    singular vector pair is fixed: the largest-magnitude entry of each column of U is positive."""
    inp = as_tensor(inp)
    if inp.ndim < 2:
        raise op_error("svd", f"input must be (..., M, N), got shape {inp.shape}")
    if inp.dtype != np.float32:
        raise op_error("svd", f"Singular Value Decomposition needs a float32 input, got {inp.dtype}")
    u, s, vh = apply(T.SVDOp, [inp], label="svd", full_matrices=bool(full_matrices))
    return (u, s, vh) if compute_uv else s
