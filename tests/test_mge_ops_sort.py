"""F.topk / F.sort / F.argsort / F.cond_take / F.pixel_shuffle against torch and MegEngine's documented
rules, with gradients where MegEngine has them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
from dialects.errors import XmgeError


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randn(*shape).astype("float32")


@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("shape", [(9,), (3, 7)])
def test_topk_matches_torch(descending: bool, shape: tuple[int, ...]) -> None:
    x = _data(*shape)
    v, i = F.topk(mge.tensor(x), 3, descending=descending)
    tv, ti = torch.topk(torch.tensor(x), 3, largest=descending)
    np.testing.assert_allclose(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    assert i.dtype == np.int32


def test_topk_kth_only_and_no_sort() -> None:
    x = _data(4, 6)
    v, i = F.topk(mge.tensor(x), 2, descending=False, kth_only=True)
    assert v.shape == (4,)
    np.testing.assert_allclose(v.numpy(), np.sort(x, 1)[:, 1])
    np.testing.assert_allclose(np.take_along_axis(x, i.numpy()[:, None].astype(int), 1)[:, 0], v.numpy())
    v1, _ = F.topk(mge.tensor(x[0]), 2, kth_only=True)
    assert v1.shape == ()
    v, i = F.topk(mge.tensor(x), 3, no_sort=True)
    np.testing.assert_allclose(np.sort(v.numpy(), 1), np.sort(x, 1)[:, -3:])
    # k beyond the row takes the whole row, as MegEngine 1.13 does; k = 0 is refused
    v, _ = F.topk(mge.tensor(x), 7)
    np.testing.assert_allclose(v.numpy(), -np.sort(-x, 1))
    with pytest.raises(XmgeError, match="topk"):
        F.topk(mge.tensor(x), 0)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_matches_torch(dim: int) -> None:
    x = np.round(_data(4, 3, 5), 1)  # rounded: ties exercise the stable order
    for desc in (False, True):
        v, i = F.sort(mge.tensor(x), descending=desc, dim=dim)
        tv, ti = torch.sort(torch.tensor(x), dim=dim, descending=desc, stable=True)
        np.testing.assert_allclose(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_argsort_1d_2d() -> None:
    x = _data(3, 5)
    np.testing.assert_array_equal(F.argsort(mge.tensor(x)).numpy(), np.argsort(x, 1, kind="stable"))
    np.testing.assert_array_equal(F.argsort(mge.tensor(x[1]), descending=True).numpy(), np.argsort(-x[1]))
    with pytest.raises(XmgeError, match="argsort"):
        F.argsort(mge.tensor(_data(2, 2, 2)))


def test_topk_and_sort_gradients_match_torch() -> None:
    x = _data(3, 6)
    p = mge.Parameter(x)
    gm = mge.autodiff.GradManager().attach([p])
    with gm:
        v, _ = F.topk(p, 2)
        s, _ = F.sort(p, descending=True, dim=0)
        gm.backward((v * v).sum() + (s * mge.tensor(np.arange(18, dtype="float32").reshape(3, 6))).sum())
    t = torch.tensor(x, requires_grad=True)
    tv = torch.topk(t, 2)[0]
    ts = torch.sort(t, dim=0, descending=True)[0]
    ((tv * tv).sum() + (ts * torch.arange(18.0).reshape(3, 6)).sum()).backward()
    np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def _sort_model(a: mge.Tensor, n: mge.Tensor) -> tuple[mge.Tensor, ...]:
    outs: list[mge.Tensor] = []
    for desc in (False, True):
        outs += F.sort(a, descending=desc)
        outs += F.topk(a, 3, descending=desc)
        outs += F.topk(a, 2, descending=desc, kth_only=True)
        outs.append(F.argsort(n, descending=desc))
    return tuple(outs)


def _sort_inputs() -> list[np.ndarray]:
    a = np.round(_data(5, 11), 1)  # rounded: ties check the stable order
    a[1, 3] = np.nan
    n = np.random.RandomState(1).randint(-4, 4, (3, 9)).astype(np.int32)
    return [a, n]


def test_sort_reference_puts_nan_last_as_torch() -> None:
    a = _sort_inputs()[0]
    for desc in (False, True):
        v, i = F.sort(mge.tensor(a), descending=desc)
        tv, ti = torch.sort(torch.tensor(a), descending=desc, stable=True)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())


@pytest.mark.parametrize("kth_only", [False, True])
def test_sort_and_topk_dump_as_megengine_oprs_and_read_back(kth_only: bool) -> None:
    """TopK (k an int32 input, param.TopK mode) and Argsort (param.Argsort order) rows."""
    from backends.mge.container import parse_file
    from tests.test_op_examples import _dump_read_run

    x = _data(4, 9)

    def fn(a: mge.Tensor) -> tuple[mge.Tensor, ...]:
        v, i = F.topk(a, 3, kth_only=kth_only)
        s, j = F.sort(a, descending=True)
        return (v, s, j) if kth_only else (v, i, s, j)

    data, got = _dump_read_run(fn, [x])
    oprs = {o.kind: o for g in parse_file(data) for o in g.oprs}
    assert len(oprs["TopK"].outputs) == (1 if kth_only else 2)
    want = [np.asarray(t.numpy()) for t in fn(mge.tensor(x))]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)
    assert "Argsort" in oprs


@pytest.mark.parametrize("target", ["x86-avx2", "x86-avx512"])
def test_sort_c_kernel_equals_reference(target: str) -> None:
    """Ties (stable order), NaN and int32 keys through the SortRows C kernel, bit for bit (its
    random-input examples and the ASan/UBSan run are in tests/test_kernel_conformance.py)."""
    from tests.codegen_util import require

    require(target)
    inputs = _sort_inputs()
    got = mge.compile(_sort_model, target, inputs)(*inputs)
    want = mge.compile(_sort_model, "ref", inputs)(*inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
