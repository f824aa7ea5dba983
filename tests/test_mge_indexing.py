"""Traced assignment, advanced indexing and arange with traced bounds: the frontend emits MegEngine's
operators (SetSubtensor, IndexingMultiAxisVec, IndexingSetMultiAxisVec, Linspace), which dump to
.mge and read back; numerics match eager execution and PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import compiler as xm
from backends.mge.container import parse_file
from backends.mge.reader import read_mge
from compiler import functional as F
from compiler import jit
from semantics.interpreter import run_module
from tests.mge_helpers import dump_bytes


def _model(x: Any, idx: Any) -> Any:
    y = x * 2.0
    y[0, 1:3] = 7.0  # SetSubtensor (basic slicing, value broadcast)
    y[idx] = y[idx] + 1.0  # IndexingMultiAxisVec + IndexingSetMultiAxisVec
    z = y[:, idx]  # IndexingMultiAxisVec on axis 1
    n = F.arange(x.shape[1])  # a Linspace... with the bound a python int: a constant
    m = F.arange(x[0, 0], 5.0)  # a start computed from the input: Linspace (x[0, 0] is 0)
    return z.sum(axis=1) + n[: z.shape[0]] + m[: z.shape[0]]


def _torch_model(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    y = x * 2.0
    y[0, 1:3] = 7.0
    y.index_put_((idx,), y[idx] + 1.0)
    z = y[:, idx]
    n = torch.arange(x.shape[1], dtype=torch.float32)
    m = torch.arange(float(x[0, 0]), 5.0, dtype=torch.float32)
    return z.sum(dim=1) + n[: z.shape[0]] + m[: z.shape[0]]


@pytest.fixture(scope="module")
def case() -> tuple[Any, np.ndarray, np.ndarray]:
    x = np.arange(20, dtype=np.float32).reshape(4, 5) / 7
    idx = np.array([2, 0, 3], np.int32)

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(a: Any, b: Any) -> Any:
        return _model(a, b)

    f(xm.tensor(x), xm.tensor(idx))
    return f, x, idx


def test_traced_indexing_matches_eager_and_torch(case: tuple[Any, np.ndarray, np.ndarray]) -> None:
    f, x, idx = case
    eager = _model(xm.tensor(x), xm.tensor(idx)).numpy()
    want = _torch_model(torch.from_numpy(x.copy()), torch.from_numpy(idx.astype(np.int64))).numpy()
    np.testing.assert_allclose(eager, want, rtol=1e-6)
    np.testing.assert_allclose(f(xm.tensor(x), xm.tensor(idx)).numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("fmt", ["FBS_V2", "FBS"])
def test_dump_and_read_back(case: tuple[Any, np.ndarray, np.ndarray], fmt: str) -> None:
    f, x, idx = case
    data = dump_bytes(f, arg_names=["x", "idx"], dump_format=fmt)
    kinds = {o.kind for o in parse_file(data)[0].oprs}
    assert {"SetSubtensor", "IndexingMultiAxisVec", "IndexingSetMultiAxisVec", "Linspace"} <= kinds, kinds
    (got,) = run_module(read_mge(data), [x, idx])
    want = _torch_model(torch.from_numpy(x.copy()), torch.from_numpy(idx.astype(np.int64))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_incr_ops_and_repeated_indices_against_torch() -> None:
    from dialects import tensor as T
    from semantics.kernels import KERNELS, ResultSpec

    x = np.random.default_rng(0).standard_normal((4, 5, 6)).astype(np.float32)
    i, j = np.array([1, 1, -1], np.int32), np.array([0, 5, 2], np.int32)
    v = np.ones((3, 5), np.float32)
    spec = [ResultSpec(x.shape, np.dtype(np.float32))]
    (got,) = KERNELS[T.IndexingIncrMultiAxisVecOp]([x, v, i, j], spec, axes=(0, 2))
    # torch: x[i, :, j] += v accumulating over the repeated (1, *) rows, as index_put_(accumulate)
    t = torch.from_numpy(x.copy()).permute(0, 2, 1)  # indexed axes first: index_put_ on (i, j)
    t.index_put_((torch.tensor([1, 1, -1]), torch.tensor([0, 5, 2])), torch.from_numpy(v), accumulate=True)
    np.testing.assert_allclose(got, t.permute(0, 2, 1).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        KERNELS[T.IndexingMultiAxisVecOp](
            [x, np.array([4], np.int32)], [ResultSpec((1, 5, 6), np.dtype(np.float32))], axes=(0,)
        )
    (lin,) = KERNELS[T.LinspaceOp]([np.float32([1.0]), np.float32([2.0])], [], num=5, endpoint=False)
    np.testing.assert_allclose(lin, torch.linspace(1.0, 2.0, 6)[:5].numpy(), rtol=1e-6)
