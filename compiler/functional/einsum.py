"""MegEngine's ``functional.einsum``: Einstein summation, composed of the ops xmge already has
(diagonals by indexing, sums by reductions, contractions by batched matrix multiplication), so a
traced einsum dumps and compiles like any other graph."""

from __future__ import annotations

import math
import string
from collections.abc import Sequence

import numpy as np

from compiler.core import XmgeError
from compiler.functional.math import matmul
from compiler.functional.math import sum as reduce_sum
from compiler.functional.tensor import broadcast_to, reshape, transpose
from compiler.tensor import Tensor

__all__ = ["einsum"]


class EinsumError(XmgeError, ValueError):
    """An einsum equation that does not fit its operands (bad syntax, a label with two sizes, ...)."""


_Labels = list[str]


def einsum(equation: str, *args: Tensor) -> Tensor:
    """``einsum("ik, kj->ij", a, b)``: numpy's Einstein summation convention. Labels are single
    letters; ``...`` stands for the broadcast axes; without ``->`` the output holds the labels that
    occur once, in alphabetical order, after the ``...`` axes. A label repeated within one operand
    takes its diagonal."""
    inputs, output, sizes = _parse(equation, args)
    operands = [_take_diagonals(t, labels) for t, labels in zip(args, inputs, strict=True)]
    terms = [(t, labels) for t, labels in operands]
    # sum out each operand's labels that no other operand and not the output use
    for i, (t, labels) in enumerate(terms):
        others = set(output).union(*(set(lb) for j, (_, lb) in enumerate(terms) if j != i))
        terms[i] = _sum_out(t, labels, [lb for lb in labels if lb not in others])
    while len(terms) > 1:
        (a, la), (b, lb) = terms[0], terms[1]
        rest = set(output).union(*(set(lbl) for _, lbl in terms[2:]))
        terms = [_contract(a, la, b, lb, rest, sizes), *terms[2:]]
    t, labels = terms[0]
    t, labels = _sum_out(t, labels, [lb for lb in labels if lb not in output])
    return _arrange(t, labels, output, sizes)


def _parse(equation: str, args: Sequence[Tensor]) -> tuple[list[_Labels], _Labels, dict[str, int]]:
    """Each operand's labels and the output's, ``...`` expanded into fresh labels (upper-case
    letters, from the right), and each label's size."""
    if not args:
        raise EinsumError("einsum: needs at least one operand")
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    parts = lhs.split(",")
    if len(parts) != len(args):
        raise EinsumError(f"einsum: {equation!r} names {len(parts)} operands, {len(args)} given")
    for part in [*parts, rhs]:
        body = part.replace("...", "")
        if "." in body or any(c not in string.ascii_letters for c in body):
            raise EinsumError(f"einsum: {equation!r}: labels must be letters (and '...'), got {part!r}")
    ndim_ellipsis = 0
    for part, t in zip(parts, args, strict=True):
        if "..." in part:
            ndim_ellipsis = max(ndim_ellipsis, t.ndim - (len(part) - 3))
    fresh = [c for c in string.ascii_uppercase if c not in text][:ndim_ellipsis]
    if len(fresh) < ndim_ellipsis:
        raise EinsumError(f"einsum: {equation!r}: too many axes under '...'")

    def expand(part: str, ndim: int | None) -> _Labels:
        if "..." not in part:
            return list(part)
        head, _, tail = part.partition("...")
        n = ndim_ellipsis if ndim is None else ndim - len(head) - len(tail)
        if n < 0:
            raise EinsumError(f"einsum: {equation!r}: operand has too few axes for {part!r}")
        return [*head, *fresh[ndim_ellipsis - n :], *tail]

    inputs = [expand(p, t.ndim) for p, t in zip(parts, args, strict=True)]
    sizes: dict[str, int] = {}
    for labels, t in zip(inputs, args, strict=True):
        if len(labels) != t.ndim:
            raise EinsumError(f"einsum: {equation!r}: {''.join(labels)!r} labels a {t.ndim}-d operand")
        for lb, n in zip(labels, t.shape, strict=True):
            if sizes.get(lb, n) != n and n != 1 and sizes[lb] != 1:
                raise EinsumError(f"einsum: {equation!r}: label {lb!r} has sizes {sizes[lb]} and {n}")
            sizes[lb] = max(sizes.get(lb, 1), int(n))
    if arrow:
        output = expand(rhs, None)
        missing = [lb for lb in output if lb not in sizes]
        if missing or len(set(output)) != len(output):
            raise EinsumError(f"einsum: {equation!r}: output labels must occur once, in an operand")
    else:
        counts: dict[str, int] = {}
        for labels in inputs:
            for lb in labels:
                counts[lb] = counts.get(lb, 0) + 1
        output = [*fresh] + sorted(lb for lb, n in counts.items() if n == 1 and lb not in fresh)
    return inputs, output, sizes


def _take_diagonals(t: Tensor, labels: _Labels) -> tuple[Tensor, _Labels]:
    """Each label repeated within the operand: its diagonal (``ii->i``), kept as the first axis."""
    while len(set(labels)) < len(labels):
        lb = next(lb for lb in labels if labels.count(lb) > 1)
        axes = [i for i, x in enumerate(labels) if x == lb]
        others = [i for i in range(len(labels)) if i not in axes]
        n = t.shape[axes[0]]
        k = len(axes)
        # the repeated axes last, flattened: the diagonal is every (n^k - 1)/(n - 1)-th element
        moved = transpose(t, [*others, *axes]) if others + axes != list(range(len(labels))) else t
        flat = reshape(moved, [*(t.shape[i] for i in others), n**k])
        step = sum(n**j for j in range(k))
        index = Tensor(np.arange(n, dtype=np.int32) * step)
        diag = flat[(slice(None),) * len(others) + (index,)]
        t, labels = diag, [*(labels[i] for i in others), lb]
    return t, labels


def _sum_out(t: Tensor, labels: _Labels, drop: _Labels) -> tuple[Tensor, _Labels]:
    if not drop:
        return t, labels
    axes = [i for i, lb in enumerate(labels) if lb in drop]
    return reduce_sum(t, axis=axes), [lb for lb in labels if lb not in drop]


def _contract(
    a: Tensor, la: _Labels, b: Tensor, lb: _Labels, keep: set[str], sizes: dict[str, int]
) -> tuple[Tensor, _Labels]:
    """``a`` and ``b`` multiplied, summing the labels they share that ``keep`` (the output and the
    operands still to come) does not need: one batched matrix multiplication."""
    batch = [x for x in la if x in lb and x in keep]
    summed = [x for x in la if x in lb and x not in keep]
    left = [x for x in la if x not in lb]
    right = [x for x in lb if x not in la]
    a = _arrange(a, la, [*batch, *left, *summed], sizes)
    b = _arrange(b, lb, [*batch, *summed, *right], sizes)
    nb, m, k, n = (math.prod(sizes[x] for x in group) for group in (batch, left, summed, right))
    product = matmul(reshape(a, [nb, m, k]), reshape(b, [nb, k, n]))
    shape = [sizes[x] for x in (*batch, *left, *right)]
    return reshape(product, shape), [*batch, *left, *right]


def _arrange(t: Tensor, labels: _Labels, order: _Labels, sizes: dict[str, int]) -> Tensor:
    """``t`` with its axes in ``order`` (size-1 axes of broadcast labels broadcast to full size)."""
    perm = [labels.index(x) for x in order]
    if perm != list(range(len(perm))):
        t = transpose(t, perm)
    want = [sizes[x] for x in order]
    if list(t.shape) != want:
        t = broadcast_to(t, want)
    return t
