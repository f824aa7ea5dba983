"""Passes: their FileCheck files, the registry, and a numeric check of every pass on the reference
interpreter (outputs before and after agree on random inputs)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import Builtin, ModuleOp, TensorType
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.passes import ModulePass, PassPipeline
from xdsl.transforms.canonicalize import CanonicalizePass

import compiler as xm
import compiler.functional as F
from dialects import tensor as T
from dialects.dtypes import numpy_dtype
from passes import BUILTIN_PASSES, builtin_passes, describe
from passes.canonicalize import MgbCanonicalizePass, compose_dimshuffles
from passes.dce import MgbDeadCodeEliminationPass
from passes.inference.param_fuse import ParamFusePass
from passes.pattern_pass import PatternPass
from semantics import run_module
from tests.filecheck.runner import execute, filecheck_files, run_lines

RUNS = [r for f in filecheck_files("passes") for r in run_lines(f)]


@pytest.mark.parametrize("run", RUNS, ids=[r.id for r in RUNS])
def test_filecheck(run) -> None:
    ok, transcript = execute(run)
    assert ok, transcript


# -- registry ----------------------------------------------------------------------------------


def test_registry_is_keyed_by_each_pass_name() -> None:
    table = builtin_passes()
    assert {"mgb-canonicalize", "mgb-dce"} <= set(table)
    for name, cls in table.items():
        assert cls.name == name
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert describe(cls) and not describe(cls).startswith(cls.__name__ + "(")


def test_pipeline_spec_builds_passes_with_options() -> None:
    factories = {c.name: (lambda c=c: c) for c in BUILTIN_PASSES}
    pipe = PassPipeline.parse_spec(factories, "mgb-canonicalize{dce=false},mgb-dce{consts=false}")
    assert pipe.passes == (MgbCanonicalizePass(dce=False), MgbDeadCodeEliminationPass(consts=False))


def test_pattern_passes_declare_patterns_not_options() -> None:
    """``PatternPass.PATTERNS`` is a class constant: it adds no option, and the pattern passes'
    options are exactly the fields they declare (what ``--list-passes`` prints)."""
    pattern_passes = [c for c in BUILTIN_PASSES if issubclass(c, PatternPass)]
    names = {c.name for c in pattern_passes}
    assert {"arith-fuse", "fold-batch-norm", "mgb-canonicalize", "param-fuse"} <= names
    for cls in pattern_passes:
        assert cls().patterns(), cls.name
        assert "PATTERNS" not in {f.name for f in dataclasses.fields(cls)}
    assert [f.name for f in dataclasses.fields(ParamFusePass)] == ["max_growth"]
    assert ParamFusePass(max_growth=7).patterns()[0].max_growth == 7  # type: ignore[attr-defined]


def test_pattern_pass_without_patterns_is_refused_by_name() -> None:
    @dataclasses.dataclass(frozen=True)
    class Empty(PatternPass):
        name = "empty-pattern-pass"

    with pytest.raises(NotImplementedError, match="'empty-pattern-pass'.*declares no patterns"):
        Empty().apply(Context(), ModuleOp([]))


def test_compose_dimshuffles_matches_numpy(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 4))
    for p in itertools.permutations(range(3)):
        for q in itertools.permutations(range(3)):
            merged = np.transpose(x, compose_dimshuffles(p, q))
            assert np.array_equal(np.transpose(np.transpose(x, p), q), merged)


# -- numerics ----------------------------------------------------------------------------------


def _ctx() -> Context:
    ctx = Context()
    for d in (Builtin, Func, T.Mgb):
        ctx.load_dialect(d)
    return ctx


def _random_inputs(fn: func.FuncOp, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for t in fn.function_type.inputs.data:
        assert isinstance(t, TensorType)
        arrays.append(rng.standard_normal(tuple(t.get_shape())).astype(numpy_dtype(t.element_type)))
    return arrays


def assert_same_numerics(before: ModuleOp, after: ModuleOp, rng: np.random.Generator) -> None:
    """Every function of ``before`` and ``after`` computes the same outputs (float32 within 1e-5)."""
    fns = [op for op in before.ops if isinstance(op, func.FuncOp)]
    assert fns
    for fn in fns:
        inputs = _random_inputs(fn, rng)
        want = run_module(before, inputs, entry=fn.sym_name.data)
        got = run_module(after, inputs, entry=fn.sym_name.data)
        assert len(want) == len(got)
        for w, g in zip(want, got, strict=True):
            assert w.shape == g.shape and w.dtype == g.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"@{fn.sym_name.data}")


def _count(module: ModuleOp, *kinds: type) -> int:
    return sum(isinstance(op, kinds) for op in module.walk())


PASSES: list[ModulePass] = [
    MgbCanonicalizePass(),
    MgbCanonicalizePass(dce=False),
    MgbDeadCodeEliminationPass(),
    MgbDeadCodeEliminationPass(consts=False),
    CanonicalizePass(),  # xDSL's, reaching our patterns through the ops' trait
]


@pytest.mark.parametrize("pass_", PASSES, ids=str)
@pytest.mark.parametrize("path", filecheck_files("passes"), ids=lambda p: p.rsplit("/", 1)[-1])
def test_pass_preserves_numerics_on_filecheck_inputs(
    pass_: ModulePass, path: str, rng: np.random.Generator
) -> None:
    with open(path) as f:
        before = Parser(_ctx(), f.read(), path).parse_module()
    after = before.clone()
    pass_.apply(_ctx(), after)
    after.verify()
    assert_same_numerics(before, after, rng)


def _traced_net() -> ModuleOp:
    """A small traced model with shape shuffles the canonicalizer can remove."""
    import compiler.module as M
    from compiler import jit

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = M.Conv2d(3, 4, 3, padding=1)
            self.fc = M.Linear(4 * 6 * 6, 5)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = F.relu(self.conv(x))
            y = F.transpose(F.transpose(y, (0, 2, 3, 1)), (0, 3, 1, 2))  # identity after merging
            y = F.reshape(F.reshape(y, (2, -1)), (2, 4 * 6 * 6))
            y = y.astype("float16").astype("float32")  # rounds: must stay
            return F.softmax(self.fc(y), axis=1)

    net = Net().eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data, *, net):  # type: ignore[no-untyped-def]
        return net(data)

    infer(xm.tensor(np.zeros((2, 3, 6, 6), np.float32)), net=net)
    return infer.module


def test_canonicalize_and_dce_on_a_traced_model(rng: np.random.Generator) -> None:
    before = _traced_net()
    after = before.clone()
    MgbCanonicalizePass().apply(_ctx(), after)
    MgbDeadCodeEliminationPass().apply(_ctx(), after)
    after.verify()
    assert _count(before, T.DimshuffleOp) == 2 and _count(after, T.DimshuffleOp) == 0
    # the user's reshape(y, (2, -1)) keeps its -1 (mgb.reshape_to); the static one after it goes
    reshapes = [_count(m, T.ReshapeOp) + _count(m, T.ReshapeToOp) for m in (before, after)]
    assert reshapes[1] == 1 < reshapes[0]
    assert _count(after, T.TypeCvtOp) == _count(before, T.TypeCvtOp) == 2
    assert_same_numerics(before, after, rng)


def test_dce_removes_exactly_the_dead_ops(rng: np.random.Generator) -> None:
    module = _traced_net()
    block = next(op for op in module.walk() if isinstance(op, func.FuncOp)).body.block
    n_before = len(list(block.ops))
    x = block.args[0]
    dead = [T.ElemwiseOp.make([x], mode=T.enums.ElemwiseMode.RELU)]
    dead.append(T.ReduceOp.make([dead[0].output], mode=T.enums.ReduceMode.SUM, axis=1))
    dead.append(T.ConstOp.from_numpy(np.ones(3, np.float32)))
    block.insert_ops_before(dead, block.first_op)
    MgbDeadCodeEliminationPass().apply(_ctx(), module)
    assert len(list(block.ops)) == n_before
    assert all(op.parent is None for op in dead)
