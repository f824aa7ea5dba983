"""The worked examples of docs/ARCHITECTURE.md's "How to add an op": MegEngine operators added end to
end (dialect op, reference kernel checked against torch, the ``.mge`` row, the frontend function, the
gradient rule). Their C kernels need no test here: the units' ``examples`` run on every target that
reaches them, under ASan/UBSan too (tests/test_kernel_conformance.py)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import compiler as xm
import compiler.functional as F
from backends.c.build import RunError
from backends.mge import oprs
from backends.mge import schema as S
from backends.mge.container import parse_file
from backends.mge.lowering import lower_func
from backends.mge.reader import read_mge
from backends.mge.records import Metadata
from backends.mge.serialize import serialize_v2
from compiler import jit
from compiler.autodiff import GradManager
from compiler.core import apply
from compiler.lite import Network
from dialects import tensor as T
from semantics.kernels import KERNELS, ResultSpec
from tests.codegen_util import compile_fn, require


def _randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _dump_read_run(
    fn: Callable[..., Any], inputs: list[np.ndarray], **dump: Any
) -> tuple[bytes, list[np.ndarray]]:
    """Trace ``fn``, dump it, read the file back and run it: (file bytes, outputs)."""
    traced = jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(x) for x in inputs])
    buf = io.BytesIO()
    traced.dump(buf, **dump)
    return buf.getvalue(), list(Network(buf.getvalue())(*inputs).values())


# ----------------------------------------------------------------------------------------------
# Cumsum


def _torch_cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    t = torch.from_numpy(x).double()
    if reverse:
        t = t.flip(axis)
    y = torch.cumsum(t, axis) - (t if exclusive else 0)
    return (y.flip(axis) if reverse else y).numpy()


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_reference_matches_torch(exclusive: bool, reverse: bool) -> None:
    x = _randn(3, 4, 5)
    for axis in range(3):
        (y,) = KERNELS[T.CumsumOp]([x], [ResultSpec(x.shape, np.dtype(np.float32))], axis=axis,
                                   exclusive=exclusive, reverse=reverse)  # fmt: skip
        assert y.dtype == np.float32 and y.shape == x.shape
        np.testing.assert_allclose(y, _torch_cumsum(x, axis, exclusive, reverse), rtol=1e-5, atol=1e-5)
    n = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    (yi,) = KERNELS[T.CumsumOp]([n], [ResultSpec(n.shape, np.dtype(np.int32))], axis=1,
                                exclusive=exclusive, reverse=reverse)  # fmt: skip
    np.testing.assert_array_equal(yi, _torch_cumsum(n, 1, exclusive, reverse).astype(np.int32))


def test_cumsum_frontend_is_megengines() -> None:
    """``F.cumsum(inp, axis)``: inclusive, forward, the input's dtype; MegEngine's docstring example."""
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    np.testing.assert_array_equal(F.cumsum(xm.tensor(x), axis=0).numpy(), [[1, 2, 3], [5, 7, 9]])
    np.testing.assert_array_equal(F.cumsum(xm.tensor(x), axis=1).numpy(), [[1, 3, 6], [4, 9, 15]])
    assert F.cumsum(xm.tensor(x), 1).dtype == np.int32
    f = _randn(2, 7)
    np.testing.assert_allclose(F.cumsum(xm.tensor(f), -1).numpy(), np.cumsum(f, -1), rtol=1e-6)
    with pytest.raises(ValueError, match="cumsum: axis 2 is out of range"):
        F.cumsum(xm.tensor(f), 2)
    with pytest.raises(ValueError, match="cumsum: needs a numeric input, got bool"):
        F.cumsum(xm.tensor(f) > 0, 0)


def test_cumsum_mge_row_and_param_numbers() -> None:
    """The row's param table is MegEngine 1.13's ``param.Cumsum`` (tag 24: axis = INT_MAX,
    exclusive = true, reverse = false; the field order and defaults are also checked against
    MegEngine's own tables by test_enum_numbers.py), under registry name ``CumsumV1``."""
    row = oprs.BY_KIND["Cumsum"]
    assert row.regname == "CumsumV1" and row.ir_ops == (T.CumsumOp,)
    assert S.PARAMS["Cumsum"].tag == 24 and S.PARAMS_BY_TAG[24] is S.PARAMS["Cumsum"]
    assert [(n, d) for n, _, d in S.PARAMS["Cumsum"].fields] == [
        ("axis", S.INT_MAX), ("exclusive", True), ("reverse", False)
    ]  # fmt: skip
    assert "CumsumV1" not in oprs.REFUSED


@pytest.mark.parametrize("dump_format", [None, "FBS"])
def test_cumsum_dump_reads_back(dump_format: str | None) -> None:
    x = _randn(2, 3, 4)

    def fn(a: xm.Tensor) -> tuple[xm.Tensor, ...]:
        flags = apply(T.CumsumOp, [a], label="cumsum", axis=2, exclusive=True, reverse=True)[0]
        return F.cumsum(a, 1) * 2.0, flags

    data, (y, z) = _dump_read_run(fn, [x], **({"dump_format": dump_format} if dump_format else {}))
    np.testing.assert_array_equal(y, np.cumsum(x, 1) * 2.0)
    np.testing.assert_allclose(z, _torch_cumsum(x, 2, True, True), rtol=1e-5, atol=1e-6)
    raw = [o for o in parse_file(data)[0].oprs if o.kind == "Cumsum"]
    assert [o.type_name for o in raw] == ["CumsumV1", "CumsumV1"]
    assert sorted((o.param("Cumsum") for o in raw), key=lambda p: p["axis"]) == [
        {"axis": 1, "exclusive": False, "reverse": False},
        {"axis": 2, "exclusive": True, "reverse": True},
    ]


def test_cumsum_negative_axis_in_a_file_is_normalised() -> None:
    """A file may hold a negative axis (MegEngine's imperative op takes one): read as ndim + axis."""
    x = _randn(2, 3, 4)
    traced = jit.trace(lambda a: F.cumsum(a, 2), symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    (fn,) = list(traced.module.ops)
    graph = lower_func(fn)
    (opr,) = [o for o in graph.oprs if o.kind == "Cumsum"]
    opr.params = [("Cumsum", {**opr.params[0][1], "axis": -1})]
    data = serialize_v2(graph, Metadata())
    assert next(o for o in parse_file(data)[0].oprs if o.kind == "Cumsum").param("Cumsum")["axis"] == -1
    (op,) = [o for o in read_mge(data).walk() if isinstance(o, T.CumsumOp)]
    assert op.params()["axis"] == 2
    np.testing.assert_array_equal(list(Network(data)(x).values())[0], np.cumsum(x, 2))


def test_cumsum_gradient_matches_torch() -> None:
    x = _randn(3, 6)
    g = _randn(3, 6, seed=1)
    p = xm.Parameter(x)
    gm = GradManager().attach([p])
    with gm:
        gm.backward(F.cumsum(p, 1), xm.tensor(g))
    t = torch.from_numpy(x).requires_grad_()
    torch.cumsum(t, 1).backward(torch.from_numpy(g))
    np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# IndexingOneHot


def _picks(shape: tuple[int, ...], axis: int, seed: int = 1) -> np.ndarray:
    rest = shape[:axis] + shape[axis + 1 :]
    return np.random.default_rng(seed).integers(0, shape[axis], rest).astype(np.int32)


def test_indexing_one_hot_reference_matches_torch_gather() -> None:
    x = _randn(3, 4, 5)
    for axis in range(3):
        idx = _picks(x.shape, axis)
        out = tuple(1 if a == axis else d for a, d in enumerate(x.shape))
        (y,) = KERNELS[T.IndexingOneHotOp]([x, idx], [ResultSpec(out, np.dtype(np.float32))], axis=axis)
        want = torch.gather(torch.from_numpy(x), axis, torch.from_numpy(idx.astype(np.int64)).unsqueeze(axis))
        np.testing.assert_array_equal(y, want.numpy())
    with pytest.raises(ValueError, match="index out of range for axis 1 of size 4"):
        KERNELS[T.IndexingOneHotOp]([x, np.full((3, 5), -1, np.int32)], [], axis=1)


def test_indexing_one_hot_frontend_is_megengines() -> None:
    """MegEngine's docstring example, keepdims, negative axis, and the traced op is the operator."""
    val = F.indexing_one_hot(xm.tensor([[1.0, 2.0]]), xm.tensor([0]))
    np.testing.assert_array_equal(val.numpy(), np.array([1.0], np.float32))
    x = _randn(2, 5, 3)
    idx = _picks(x.shape, 1)
    kept = F.indexing_one_hot(xm.tensor(x), xm.tensor(idx), axis=-2, keepdims=True).numpy()
    np.testing.assert_array_equal(kept, np.take_along_axis(x, idx[:, None, :], 1))
    traced = jit.trace(lambda s, i: F.indexing_one_hot(s, i, axis=1), symbolic=True, capture_as_const=True)
    traced(xm.tensor(x), xm.tensor(idx))
    ops = [type(o) for o in traced.module.walk() if isinstance(o, T.MgbOp)]
    assert T.IndexingOneHotOp in ops and T.ElemwiseOp not in ops and T.ReduceOp not in ops
    with pytest.raises(ValueError, match=r"index has shape \(2, 5\), expected \(2, 3\)"):
        F.indexing_one_hot(xm.tensor(x), xm.tensor(np.zeros((2, 5), np.int32)))
    with pytest.raises(ValueError, match="indices must be integers"):
        F.indexing_one_hot(xm.tensor(x), xm.tensor(idx.astype(np.float32)))
    with pytest.raises(ValueError, match="2 or more dimensions"):
        F.indexing_one_hot(xm.tensor(np.ones(3, np.float32)), xm.tensor(np.int32(0)), axis=0)


@pytest.mark.parametrize("dump_format", [None, "FBS"])
def test_indexing_one_hot_dump_reads_back(dump_format: str | None) -> None:
    """Written as MegEngine's IndexingOneHot (param.Axis, tag 2) then the AxisAddRemove of the squeeze,
    as MegEngine's tracer writes F.indexing_one_hot; read back to the same numbers."""
    x = _randn(2, 5, 3)
    idx = _picks(x.shape, 2, seed=3)
    fn = lambda s, i: F.indexing_one_hot(s, i, axis=2) * 3.0  # noqa: E731
    data, (y,) = _dump_read_run(fn, [x, idx], **({"dump_format": dump_format} if dump_format else {}))
    np.testing.assert_array_equal(y, np.take_along_axis(x, idx[:, :, None], 2)[:, :, 0] * 3.0)
    kinds = [o.kind for o in parse_file(data)[0].oprs]
    raw = next(o for o in parse_file(data)[0].oprs if o.kind == "IndexingOneHot")
    assert raw.type_name == "IndexingOneHot" and raw.param("Axis") == {"axis": 2}
    assert kinds[kinds.index("IndexingOneHot") + 1] == "AxisAddRemove"
    assert "IndexingOneHot" not in oprs.REFUSED and "IndexingSetOneHot" in oprs.REFUSED


def test_indexing_one_hot_c_kernel_out_of_range_fails_the_run() -> None:
    """An index the reference refuses fails the compiled run too, naming the kernel (issue 16: it was a
    silent NaN); the kernel never reads outside src, and the next run is clean."""
    require("x86-avx2")
    x = _randn(2, 4)
    pick = lambda s, i: F.indexing_one_hot(s, i, axis=1)  # noqa: E731
    compiled = compile_fn(pick, [x, np.array([1, 0], np.int32)], "x86-avx2")
    with pytest.raises(
        RunError, match=r"indexing_one_hot_\w+: index (4|-1) is out of range for an axis of size 4"
    ):
        compiled.run([x, np.array([4, -1], np.int32)])
    (got,) = compiled.run([x, np.array([3, 0], np.int32)])
    np.testing.assert_array_equal(got, [x[0, 3], x[1, 0]])


def test_indexing_one_hot_gradient_matches_torch() -> None:
    x = _randn(3, 6, 2)
    idx = _picks(x.shape, 1)
    g = _randn(3, 2, seed=5)
    p = xm.Parameter(x)
    gm = GradManager().attach([p])
    with gm:
        gm.backward(F.indexing_one_hot(p, xm.tensor(idx), axis=1), xm.tensor(g))
    t = torch.from_numpy(x).requires_grad_()
    picked = torch.gather(t, 1, torch.from_numpy(idx.astype(np.int64)).unsqueeze(1)).squeeze(1)
    picked.backward(torch.from_numpy(g))
    np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())
