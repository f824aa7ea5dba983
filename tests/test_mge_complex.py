"""MegEngine 1.13's complex numbers (``F.complex``, ``real``, ``imag``, ``polar``): a complex64
tensor is a pair of float32 tensors with the arithmetic MegEngine supports on it. Values, reprs and
gradients against real MegEngine (tests/data/mge_names/complex.npz, record.py there) and torch."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
from compiler.autodiff import GradManager
from compiler.core import OpError
from compiler.jit import trace

DATA = dict(np.load(os.path.join(os.path.dirname(__file__), "data", "mge_names", "complex.npz")))


def _zw() -> tuple[mge.Tensor, mge.Tensor]:
    z = F.complex(mge.tensor(DATA["re"]), mge.tensor(DATA["im"]))
    return z, F.complex(mge.tensor(DATA["im"]), mge.tensor(DATA["r"]))


def test_values_and_arithmetic_match_megengine() -> None:
    z, w = _zw()
    assert isinstance(z, mge.Tensor) and z.dtype == np.complex64 and z.shape == (2, 3)
    np.testing.assert_array_equal(z.numpy(), DATA["z"])
    polar = F.polar(mge.tensor(DATA["r"]), mge.tensor(DATA["theta"])).numpy()
    np.testing.assert_allclose(polar, DATA["polar"], rtol=1e-6, atol=1e-7)
    for name, got in (
        ("add", z + w),
        ("sub", z - w),
        ("mul", z * w),
        ("neg", -z),
        ("reshape", z.reshape(3, 2)),
    ):
        np.testing.assert_allclose(got.numpy(), DATA[name], rtol=1e-6, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(F.real(z * w).numpy(), DATA["real"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(F.imag(z * w).numpy(), DATA["imag"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose((z * w).numpy(), DATA["z"] * (DATA["im"] + 1j * DATA["r"]), rtol=1e-6)


def test_repr_is_megengines() -> None:
    z = F.complex(mge.tensor([1.0, 2.0]), mge.tensor([3.0, 4.0]))
    assert repr(z) == str(DATA["repr"])
    p = F.polar(mge.tensor([1.0, 2.0]), mge.tensor([np.pi / 2, 5 * np.pi / 4]))
    assert repr(p) == str(DATA["repr_polar"])


def _loss(a: mge.Tensor, b: mge.Tensor, c: mge.Tensor, d: mge.Tensor) -> mge.Tensor:
    p = F.complex(a, b) * F.polar(c, d)
    return (F.real(p) * 2 + F.imag(p) * 3).sum()


def test_gradients_match_megengine_and_torch() -> None:
    names = ("re", "im", "r", "theta")
    ts = [mge.tensor(DATA[n]) for n in names]
    gm = GradManager().attach(ts)
    with gm:
        gm.backward(_loss(*ts))
    tt = [torch.tensor(DATA[n].astype(np.float64), requires_grad=True) for n in names]
    p = torch.complex(tt[0], tt[1]) * torch.polar(tt[2], tt[3])
    (p.real * 2 + p.imag * 3).sum().backward()
    for t, torch_t, name in zip(ts, tt, names, strict=True):
        np.testing.assert_allclose(t.grad.numpy(), DATA["grad_" + name], rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(t.grad.numpy(), torch_t.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_traced_graph_holds_float_ops_only(tmp_path: str) -> None:
    """As in MegEngine, a complex value never reaches a graph: a dump holds its float parts' ops."""
    from compiler.lite import Network

    @trace(symbolic=True, capture_as_const=True)
    def fwd(a: mge.Tensor, b: mge.Tensor) -> mge.Tensor:
        z = F.complex(a, b)
        return F.imag(z * z)

    a, b = DATA["re"], DATA["im"]
    want = fwd(mge.tensor(a), mge.tensor(b)).numpy()
    np.testing.assert_allclose(want, 2 * a * b, rtol=1e-6)
    path = os.path.join(tmp_path, "c.mge")
    fwd.dump(path, arg_names=["a", "b"], output_names=["out"])
    np.testing.assert_allclose(Network(path)(a=a, b=b)["out"], want, rtol=1e-6)


def test_what_megengine_refuses_is_refused() -> None:
    z, _ = _zw()
    for call in (lambda: z / 2, lambda: z.sum(), lambda: z.astype("float32"), lambda: F.concat([z, z])):
        with pytest.raises(OpError, match="complex"):
            call()
    with pytest.raises(OpError, match="real must be a float32 tensor, got int32"):
        F.complex(mge.tensor([1, 2]), mge.tensor([3, 4]))
    with pytest.raises(OpError, match="one shape"):
        F.complex(mge.tensor([1.0, 2.0]), mge.tensor([[3.0], [4.0]]))
    with pytest.raises(OpError, match="real: needs a complex tensor"):
        F.real(mge.tensor([1.0]))
    assert F.complex([1.0, 2.0], [3.0, 4.0]).numpy().tolist() == [1 + 3j, 2 + 4j]
