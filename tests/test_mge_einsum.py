"""``F.einsum`` against numpy (MegEngine's own test compares with numpy the same way) and its
gradient against torch; traced, it dumps as the ops it is composed of."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import compiler.functional as F
from compiler import Tensor
from compiler.autodiff import GradManager
from compiler.functional.einsum import EinsumError
from compiler.jit import trace

CASES = [
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("kj, ji", [(4, 5), (5, 3)]),
    ("...ij->...ji", [(2, 3, 4, 5)]),
    ("ik, k->i", [(2, 3), (3,)]),
    ("i, j->ij", [(2,), (3,)]),
    ("pqrs, tuqvr->pstuv", [(2, 3, 4, 5), (6, 7, 3, 8, 4)]),
    ("ik, jkl, il->ij", [(2, 3), (4, 3, 5), (2, 5)]),
    ("i...k, k...j", [(2, 3, 4, 5), (5, 3, 4, 6)]),
    ("ii", [(8, 8)]),
    ("iijk->jik", [(3, 3, 3, 3)]),
    ("i...i->i...", [(3, 7, 6, 3)]),
    ("iajbjci, jxjyizi->abcxyz", [(2, 3, 5, 4, 5, 6, 2), (5, 2, 5, 3, 2, 7, 2)]),
    ("bij, bjk->bik", [(1, 2, 3), (4, 3, 2)]),  # a size-1 batch broadcasts
]


@pytest.mark.parametrize("equation,shapes", CASES)
def test_einsum_matches_numpy(equation: str, shapes: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(0)
    inputs = [rng.integers(100, size=s).astype(np.float32) for s in shapes]
    got = F.einsum(equation, *map(Tensor, inputs)).numpy()
    np.testing.assert_array_equal(got, np.einsum(equation, *inputs))


def test_einsum_gradient_matches_torch() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    x, y = Tensor(a), Tensor(b)
    gm = GradManager().attach([x, y])
    with gm:
        out = F.einsum("bii, ij->bj", x, y)
        gm.backward(out.sum())
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.einsum("bii,ij->bj", ta, tb).sum().backward()
    np.testing.assert_allclose(out.numpy(), torch.einsum("bii,ij->bj", ta, tb).detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_traced_einsum_dumps() -> None:
    f = trace(lambda a, b: F.einsum("ik,kj->ij", a, b), symbolic=True, capture_as_const=True)
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(f(Tensor(a), Tensor(b)).numpy(), a @ b)
    buf = io.BytesIO()
    f.dump(buf)
    assert buf.getvalue()


@pytest.mark.parametrize(
    "equation,shapes,match",
    [
        ("ij,jk", [(2, 3)], "names 2 operands"),
        ("i1->i", [(2,)], "labels must be letters"),
        ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' has sizes 3 and 4"),
        ("ij->k", [(2, 3)], "output labels"),
    ],
)
def test_einsum_errors_name_the_problem(equation: str, shapes: list[tuple[int, ...]], match: str) -> None:
    with pytest.raises(EinsumError, match=match):
        F.einsum(equation, *(Tensor(np.ones(s, np.float32)) for s in shapes))
