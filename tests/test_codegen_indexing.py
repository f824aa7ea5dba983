"""The C kernels of modifying slices, advanced indexing and ``linspace`` (``backends/c/templates/
indexing.py``) against the reference interpreter, bit for bit: one model holds every form
(``set_subtensor`` / ``incr_subtensor`` with negative steps and dropped axes; gathers, sets and
increments by int32 index tensors given at run time, with negative and repeated indices, on one axis,
on consecutive axes and on separated axes with broadcast indices) on odd shapes, for float32,
float16, int32, int8 and qint8 elements, and ``linspace`` with and without its endpoint. x86
targets run natively (and under ASan/UBSan), ARM targets under qemu, ``cuda`` through nvcc (and the
CPU harness without a GPU). An out-of-range index fails the run as it fails the reference's
(``RunError`` naming the kernel, in process and from the runner) and touches no memory outside the
tensors meanwhile (checked under the sanitizers). The reference itself is checked against PyTorch."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import compiler.functional as F
from backends.c.build import RunError
from backends.c.cross import toolchain_problem
from backends.c.kernels import KERNELS
from backends.cuda.build import nvcc
from compiler import dtype as D
from compiler.core import apply
from compiler.driver.compile import CompiledModel, EmulationWarning
from compiler.tensor import Tensor
from dialects import kernel as K
from dialects import tensor as T
from passes.lowering.kernels import VIEW_OPS
from semantics import run_module
from semantics.interpreter import InterpreterError
from semantics.kernels import KERNELS as REFERENCE_KERNELS
from semantics.kernels import ResultSpec
from tests.codegen_util import compile_fn, require

X86 = ["x86-avx2", "x86-avx2-nchw88", "x86-avx512", "x86-avx512-nchw88", "x86-avx2+io16xc32"]
ARM = ["arm-nchw44", "arm-fp16"]
ARM_PROBLEM = toolchain_problem()


def _incr_slice(x: Tensor, value: Tensor, **p: Any) -> Tensor:
    (out,) = apply(T.IncrSubtensorOp, [x, value], label="incr", **p)
    return out


def _incr_vec(x: Tensor, value: Tensor, indices: list[Tensor], axes: tuple[int, ...]) -> Tensor:
    (out,) = apply(T.IndexingIncrMultiAxisVecOp, [x, value, *indices], label="scatter_add", axes=axes)
    return out


def _linspace(start: Tensor, stop: Tensor, num: int, endpoint: bool) -> Tensor:
    (out,) = apply(T.LinspaceOp, [start, stop], label="linspace", num=num, endpoint=endpoint)
    return out


def indexing_model(
    rng: np.random.Generator, small: bool = False, out_of_range: bool = False
) -> tuple[Callable[..., Any], list[np.ndarray]]:
    """(function, inputs): every form of the six ops; the index tensors are inputs (run-time values)
    with negative and repeated entries; ``out_of_range``: some entries out of range too."""
    n0, n1, n2 = (3, 5, 4) if small else (5, 7, 9)
    x = rng.standard_normal((n0, n1, n2)).astype(np.float32)
    # axis 1: repeated and negative entries; axes 0 and 2 broadcast against each other ((2, 1), (3,))
    i1 = np.array([1, -1, 3, 1, -5, 1], np.int32)
    i0 = rng.integers(-n0, n0, (2, 1)).astype(np.int32)
    i2 = np.array([0, n2 - 1, -n2], np.int32)
    if out_of_range:
        i1[0], i0[1, 0], i2[1] = n1 + 3, -n0 - 2, 2**31 - 1
    start, stop = np.array([-1.25], np.float32), np.array([2.5], np.float32)

    def fn(a, j1, j0, j2, lo, hi):  # type: ignore[no-untyped-def]
        outs = []
        # static slices: a negative step and a dropped axis; incr over a strided slice
        w = a * 1.0
        w[1:3, ::-2] = a[0:2, 0::2] * 2.0
        w[-1, 1:-1:2, 2] = a[0, 1:-1:2, 0] * 0.0 + 1.5
        outs.append(w)
        sel = a[0:2, ::2, 1:]
        outs.append(_incr_slice(a, sel * 3.0, axes=(0, 1, 2), starts=(1, 0, 0), stops=(3, n1, n2 - 1),
                                steps=(1, 2, 1), drop=(0, 0, 0)))  # fmt: skip
        outs.append(_incr_slice(a, a[0, ::-3], axes=(0, 1), starts=(2, -1), stops=(3, -n1 - 1),
                                steps=(1, -3), drop=(1, 0)))  # fmt: skip
        # gathers: one axis, consecutive axes, separated axes (the index shape goes in front)
        g1 = a[:, j1]
        outs += [g1, a[j0], a[:, j1[:3], j2], a[j0, :, j2]]
        # set: a repeated index keeps its last value; incr: repeated indices accumulate
        s = a * 1.0
        s[:, j1] = g1 * -2.0 + 0.5
        outs.append(s)
        sep = a * 1.0
        sep[j0, :, j2] = a[j0, :, j2] + 10.0
        outs.append(sep)
        outs.append(_incr_vec(a, g1 * 0.25, [j1], (1,)))
        outs.append(_incr_vec(a, a[:, j1[:3], j2] + 1.0, [j1[:3], j2], (1, 2)))
        # other element types: int32, float16 (sums rounded to float16), int8, qint8 (data movement)
        ai = (a * 1000.0).astype("int32")
        si = (a * 3000.0).astype("int32")
        si[:, j1] = ai[:, j1]
        outs += [ai[j0, :, j2], si, _incr_vec(ai, ai[:, j1], [j1], (1,)), _incr_slice(ai, ai[0:2], axes=(0,),
                 starts=(1,), stops=(3,), steps=(1,), drop=(0,))]  # fmt: skip
        ah = a.astype("float16")
        sh = ah * 1.0
        sh[j0, :, j2] = ah[j0, :, j2] * 2.0
        outs += [
            ah[:, j1].astype("float32"), sh.astype("float32"),
            _incr_vec(ah, ah[:, j1] * 0.125, [j1], (1,)).astype("float32"),
            _incr_slice(ah, ah[1:, :, 1::4], axes=(0, 2), starts=(0, 1), stops=(n0 - 1, n2), steps=(1, 4),
                        drop=(0, 0)).astype("float32"),
        ]  # fmt: skip
        a8 = (a * 20.0).astype("int8")
        s8 = (a * 30.0).astype("int8")
        s8[:, j1] = a8[:, j1]
        outs += [a8[j0, :, j2], s8]
        q = a.astype(D.qint8(0.05))
        qs = (a * 0.5).astype(D.qint8(0.05))
        qs[j0] = q[j0]
        outs += [q[:, j1].astype("float32"), qs.astype("float32")]
        # linspace: run-time bounds, with and without the endpoint, one and no value
        outs += [_linspace(lo, hi, 7, True), _linspace(lo, hi, 6, False), _linspace(hi, lo, 1, True),
                 _linspace(lo, hi, 0, True), F.arange(lo, hi * 2.0, 0.75)]  # fmt: skip
        return tuple(outs)

    return fn, [x, i1, i0, i2, start, stop]


def _compare(got: list[np.ndarray], want: list[Any], what: str) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        assert g.shape == w.shape, f"{what}: output {i}: shape {g.shape} != {w.shape}"
        np.testing.assert_array_equal(g, w, err_msg=f"{what}: output {i}")


def _run(compiled: CompiledModel, inputs: list[np.ndarray], *, sanitize: bool = False) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        return compiled.run_runner(inputs, sanitize=True) if sanitize else compiled.run(inputs)


def _check(target: str, small: bool = False, sanitize: bool = False) -> CompiledModel:
    fn, inputs = indexing_model(np.random.default_rng(7), small)
    compiled = compile_fn(fn, inputs, target)
    # float16 targets (arm-fp16: the whole graph in float16): the reference runs the graph the
    # inference passes made
    stage = "inference" if "fp16" in target or "io16" in target else "tensor"
    want = run_module(compiled._stages[stage], inputs)  # type: ignore[arg-type]
    _compare(_run(compiled, inputs, sanitize=sanitize), want, target)
    return compiled


def test_every_op_has_a_c_kernel_family() -> None:
    """Issue 11: every op of the dialect (the reader's and the tracer's) has a C kernel family
    (constants become weights, reshapes views)."""
    from tests.test_coverage_contract import REFUSED

    refused = REFUSED["x86"]  # each with its reason (roi_pooling, correlation: reference only)
    missing = [op.name for op in T.TENSOR_OPS
               if op is not T.ConstOp and op not in VIEW_OPS and op not in refused
               and not KERNELS.families(op)]  # fmt: skip
    assert not missing


@pytest.mark.parametrize("target", X86)
def test_x86(target: str) -> None:
    require(target)
    compiled = _check(target)
    ir = compiled.ir("kernel-plan-memory")
    for family in ("modify_subtensor", "indexing", "linspace"):
        assert f'"{family}"' in ir


def test_x86_sanitized() -> None:
    require("x86-avx2")
    _check("x86-avx2", small=True, sanitize=True)


def test_out_of_range_indices_fail_the_run() -> None:
    """Was issue 16: the kernels clamped an out-of-range index where the reference raises, a silently
    different answer. Now the run fails naming the kernel and the index, in process and from the
    runner (under ASan/UBSan: no access outside the tensors meanwhile), and the next run is clean."""
    require("x86-avx2")
    fn, good = indexing_model(np.random.default_rng(8), small=True)
    compiled = compile_fn(fn, good, "x86-avx2")
    _, bad = indexing_model(np.random.default_rng(8), small=True, out_of_range=True)
    with pytest.raises(InterpreterError, match="index out of range"):
        run_module(compiled._stages["tensor"], bad)  # type: ignore[arg-type]
    x, i1, i0, i2, lo, hi = good
    n0, n1, n2 = x.shape
    # one bad index at a time: each index operand's check names it (the first failure of a run wins)
    for k, (value, size) in enumerate([(n1 + 3, n1), (-n0 - 2, n0), (2**31 - 1, n2)]):
        indices = [i1.copy(), i0.copy(), i2.copy()]
        indices[k].flat[1] = value
        with pytest.raises(
            RunError, match=rf"indexing_\w+: index {value} is out of range for an axis of size {size}"
        ):
            compiled.run([x, *indices, lo, hi])
    with pytest.raises(RunError, match="out of range"):
        _run(compiled, bad, sanitize=True)
    want = run_module(compiled._stages["tensor"], good)  # type: ignore[arg-type]
    _compare(_run(compiled, good), want, "a good run after a failed one")


def test_modifying_ops_run_in_place() -> None:
    """Where ``src`` dies at the call, the planner puts the result over it (no second buffer)."""
    require("x86-avx2")
    x = np.arange(5 * 6, dtype=np.float32).reshape(5, 6)
    idx = np.array([4, -1, 0], np.int32)

    def fn(a, i):  # type: ignore[no-untyped-def]
        s = a * 2.0
        s[i] = a[i] + 1.0
        t = s * 1.0
        t[1:4, ::2] = a[1:4, 1::2]
        return t * 3.0

    compiled = compile_fn(fn, [x, idx], "x86-avx2")
    want = run_module(compiled._stages["tensor"], [x, idx])  # type: ignore[arg-type]
    _compare(compiled.run([x, idx]), want, "in place")
    module = compiled._stages["kernel-plan-memory"]
    families = {d.sym: d.family.data for d in K.defs_of(module).values()}  # type: ignore[arg-type]
    calls = [op for op in module.walk() if isinstance(op, K.CallOp)]  # type: ignore[union-attr]
    modifying = [c for c in calls if families[c.callee.string_value()] in ("indexing", "modify_subtensor")
                 and c.definition().param_values().get("inplace")]  # fmt: skip
    assert len(modifying) == 2
    for call in modifying:
        src = call.args[0].owner
        assert isinstance(src, K.CallOp) and src.places == call.places, call


@pytest.mark.skipif(ARM_PROBLEM is not None, reason=f"ARM toolchain: {ARM_PROBLEM}")
@pytest.mark.parametrize("target", ARM)
def test_arm(target: str) -> None:
    _check(target, small=True)


@pytest.mark.skipif(nvcc() is None, reason="nvcc is not installed")
def test_cuda() -> None:
    """The CUDA renders (nvcc -Werror for sm_80 / sm_90; run on the GPU, or the CPU harness)."""
    _check("cuda", small=True)


# -- the reference against PyTorch -------------------------------------------------------------------


def _ref(op: type[T.MgbOp], args: list[np.ndarray], out: np.ndarray, **p: Any) -> np.ndarray:
    (y,) = REFERENCE_KERNELS[op](args, [ResultSpec(out.shape, out.dtype)], **p)
    return np.asarray(y)


def test_reference_matches_torch() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    i1 = np.array([2, -1, 2, 0, 2], np.int32)
    i0, i2 = np.array([[1], [-4]], np.int32), np.array([0, 4, -2], np.int32)
    tx = torch.from_numpy(x)
    t1, t0, t2 = (torch.from_numpy(i.astype(np.int64)) for i in (i1, i0, i2))
    # gathers (numpy and torch agree on where separated index dimensions go)
    got = _ref(T.IndexingMultiAxisVecOp, [x, i0, i2], np.empty((2, 3, 6), np.float32), axes=(0, 2))
    np.testing.assert_array_equal(got, tx[t0, :, t2].numpy())
    # increments with repeated indices: torch's index_add_ sums every repeat
    v = rng.standard_normal((4, 5, 5)).astype(np.float32)
    got = _ref(T.IndexingIncrMultiAxisVecOp, [x, v, i1], x, axes=(1,))
    want = tx.clone().index_add_(1, t1 % x.shape[1], torch.from_numpy(v))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)
    # slices: set and incr
    v = rng.standard_normal((2, 3, 5)).astype(np.float32)
    params = {"axes": (0, 1), "starts": (1, 0), "stops": (3, 6), "steps": (1, 2), "drop": (0, 0)}
    tw = tx.clone()
    tw[1:3, 0:6:2] = torch.from_numpy(v)
    np.testing.assert_array_equal(_ref(T.SetSubtensorOp, [x, v], x, **params), tw.numpy())
    tw = tx.clone()
    tw[1:3, 0:6:2] += torch.from_numpy(v)
    np.testing.assert_array_equal(_ref(T.IncrSubtensorOp, [x, v], x, **params), tw.numpy())
    # linspace (torch computes from both ends: equal within a float32 rounding)
    lo, hi = np.array([-1.25], np.float32), np.array([2.5], np.float32)
    got = _ref(T.LinspaceOp, [lo, hi], np.empty(9, np.float32), num=9, endpoint=True)
    np.testing.assert_allclose(got, torch.linspace(-1.25, 2.5, 9, dtype=torch.float64).float().numpy(),
                               rtol=1e-7, atol=1e-7)  # fmt: skip
