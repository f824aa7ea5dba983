"""Symbolic shapes in traces and CondTake's data-dependent count, against real MegEngine 1.13.

``tests/data/symbolic_shape`` holds MegEngine's dumps of the cases in its ``record.py`` (traced
with symbolic shapes, MegEngine's default) and what MegEngine's Lite runtime computed on them and on
xmge's dumps of the same cases, at other input shapes and with other data than traced."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.mge.container import parse_file
from compiler import jit
from compiler.core import _trace_option
from compiler.lite import Network
from compiler.tensor import Tensor
from dialects import tensor as T
from passes.inference.specialize_shapes import DataDependentShapeError
from semantics import run_module

DATA = os.path.join(os.path.dirname(__file__), "data", "symbolic_shape")
_spec = importlib.util.spec_from_file_location("symbolic_shape_record", os.path.join(DATA, "record.py"))
assert _spec is not None and _spec.loader is not None
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)
CASES = list(record.CASES)


def _sets(name: str) -> list[dict[str, np.ndarray]]:
    return record.CASES[name][2]


def _outputs(net: Network, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(net(**inputs).values())


def _check(net: Network, name: str, stored: Any) -> None:
    for k, inputs in enumerate(_sets(name)):
        got = _outputs(net, inputs)
        want = [stored[f"{k}/{i}"] for i in range(len(got))]
        assert f"{k}/{len(got)}" not in stored, f"{name}: fewer outputs than MegEngine's"
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape, f"{name} input set {k}: shape {g.shape}, MegEngine {w.shape}"
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _kinds(path_or_bytes: str | bytes) -> set[str]:
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else open(path_or_bytes, "rb").read()
    return {o.type_name for o in parse_file(data)[0].oprs}


@pytest.mark.parametrize("name", CASES)
def test_megengine_dump_runs_at_other_shapes(name: str) -> None:
    """xmge's loader runs MegEngine's symbolic-shape dumps on every input set, as MegEngine does."""
    _check(Network(os.path.join(DATA, name + ".mge")), name, np.load(os.path.join(DATA, name + ".npz")))


@pytest.mark.parametrize("name", CASES)
def test_xmge_dump_runs_at_other_shapes(name: str, tmp_path: Any) -> None:
    """xmge's dump of the case keeps the shape computations (and CondTake) as MegEngine operators:
    real MegEngine ran it on every input set (stored), and so does xmge's loader."""
    path = str(tmp_path / (name + ".mge"))
    record.traced(xm, name).dump(path, arg_names=record.CASES[name][1])
    kinds = _kinds(path)
    assert ("CondTake" in kinds) == name.startswith("cond_take")
    if not name.startswith("cond_take"):
        assert "GetVarShapeV1" in kinds or "GetVarShape" in kinds, kinds
    _check(Network(path), name, np.load(os.path.join(DATA, name + ".xmge.npz")))


def test_shape_is_a_tensor_in_traces_only_by_default() -> None:
    x = xm.tensor(np.zeros((2, 3), np.float32))
    assert x.shape == (2, 3) and not _trace_option.use_symbolic_shape()
    seen: dict[str, Any] = {}

    @jit.trace(symbolic=True, capture_as_const=True)
    def sym(a: Tensor) -> Tensor:
        seen["sym"] = a.shape
        return a.reshape(a.shape[1], -1)

    @jit.trace(symbolic=True, capture_as_const=True, symbolic_shape=False)
    def static(a: Tensor) -> Tensor:
        seen["static"] = a.shape
        return a.reshape(a.shape[1], -1)

    np.testing.assert_array_equal(sym(x).numpy(), static(x).numpy())
    assert isinstance(seen["sym"], Tensor) and seen["sym"].dtype == np.int32
    assert seen["sym"].numpy().tolist() == [2, 3]
    assert seen["static"] == (2, 3)
    assert not _trace_option.use_symbolic_shape()  # restored after the call
    names = {op.name for op in sym.module.walk()}
    assert {"mgb.get_var_shape", "mgb.reshape_to"} <= names
    assert "mgb.get_var_shape" not in {op.name for op in static.module.walk()}
    assert x._tuple_shape == (2, 3) and len(x) == 2


def test_set_symbolic_shape_eagerly() -> None:
    """MegEngine's switch outside traces: x.shape is an int32 Tensor; 0-d tensors keep ()."""
    prev = jit.tracing.set_symbolic_shape(True)
    try:
        x = xm.tensor(np.ones((2, 3, 4), np.float32))
        s = x.shape
        assert isinstance(s, Tensor) and s.numpy().tolist() == [2, 3, 4]
        assert s[0].shape == () and int(s[0] * 2) == 4
        assert xm.tensor(1.0).shape == ()
        # .shape is a Tensor here too: _tuple_shape is the tuple
        assert F.zeros(s)._tuple_shape == (2, 3, 4) and x.reshape(s[0], -1)._tuple_shape == (2, 12)
        assert (x.shape == (2, 3, 1)).numpy().tolist() == [True, True, False]
    finally:
        assert jit.tracing.set_symbolic_shape(prev) is True


def test_replay_checks_shape_ops_and_retraces_new_shapes() -> None:
    calls = []

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(a: Tensor) -> Tensor:
        calls.append(1)
        return F.broadcast_to(F.ones((1,)), (a.shape[0] * 2, None)) + a.sum(axis=0, keepdims=True)

    for shape in ((2, 3), (2, 3), (4, 5)):
        out = f(xm.tensor(np.ones(shape, np.float32)))
        assert out.shape == (shape[0] * 2, shape[1])
    assert len(calls) == 3  # the body runs on every call, as MegEngine's
    assert "mgb.broadcast_to" in {op.name for op in f.module.walk()}


def test_compile_specializes_shape_ops() -> None:
    """compile fixes the computed shapes to the traced ones: the kernels see static shapes."""
    from compiler.driver.compile import compile as xcompile
    from compiler.driver.compile import inference_clean

    f = record.traced(xm, "shape_ops")
    clean = inference_clean(f.module)
    assert not {"mgb.get_var_shape", "mgb.reshape_to", "mgb.broadcast_to"} & {op.name for op in clean.walk()}
    x = _sets("shape_ops")[0]["x"]
    want = run_module(f.module, [x])
    got = xcompile(f, "x86-avx2")(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_cond_take_traced_matches_megengine_and_has_gradient() -> None:
    x = xm.tensor(record.X)
    gm = xm.autodiff.GradManager().attach([x])
    with gm:
        v, i = F.cond_take(x > 0.3, x)
        gm.backward((v * v).sum())
    stored = np.load(os.path.join(DATA, "cond_take.npz"))
    np.testing.assert_array_equal(v.numpy() * 2, stored["0/0"])
    np.testing.assert_array_equal(i.numpy(), stored["0/1"])
    want = np.where(record.X > 0.3, 2 * record.X, 0)
    np.testing.assert_allclose(x.grad.numpy(), want)


def test_interpreter_takes_the_count_from_the_data() -> None:
    """A traced CondTake replayed on other data (without_host) gives that data's count, and the
    ops after it follow."""

    @jit.trace(symbolic=True, capture_as_const=True, without_host=True)
    def f(a: Tensor, t: Tensor) -> Any:
        v, i = F.cond_take(a > t, a)
        return v * 2 + 1, i

    t = np.array([0.3], np.float32)
    f(xm.tensor(record.X), xm.tensor(t))
    v, i = f(xm.tensor(record.X), xm.tensor(np.array([2.5], np.float32)))
    stored = np.load(os.path.join(DATA, "cond_take.npz"))
    np.testing.assert_array_equal(v.numpy(), stored["1/0"] + 1)
    np.testing.assert_array_equal(i.numpy(), stored["1/1"])


def test_read_cond_take_is_dynamic() -> None:
    from backends.mge.reader import read_mge

    module = read_mge(open(os.path.join(DATA, "cond_take_reshape.mge"), "rb").read())
    (take,) = [op for op in module.walk() if isinstance(op, T.CondTakeOp)]
    assert [r.type.get_shape() for r in take.results] == [(-1,), (-1,)]


@pytest.mark.parametrize("source", ["trace", "megengine"])
def test_compile_refuses_cond_take(source: str) -> None:
    from compiler.driver.compile import compile as xcompile

    model = record.traced(xm, "cond_take") if source == "trace" else os.path.join(DATA, "cond_take.mge")
    with pytest.raises(DataDependentShapeError, match=r"^mgb\.cond_take.*depends on the mask's values"):
        xcompile(model, "x86-avx2")


def test_shape_operand_errors_are_one_line() -> None:
    @jit.trace(symbolic=True, capture_as_const=True)
    def f(a: Tensor) -> Tensor:
        return a.reshape(a.shape[0] * 5, -1)

    with pytest.raises(xm.core.OpError, match="reshape: cannot reshape"):
        f(xm.tensor(np.zeros((2, 3), np.float32)))
