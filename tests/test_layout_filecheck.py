"""The FileCheck tests of the layout dialect and passes (tests/filecheck/layout), run in-process,
and a numeric check of every pass on those inputs (reference interpreter before and after)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType
from xdsl.parser import Parser
from xdsl.passes import ModulePass

from dialects.dtypes import numpy_dtype
from passes.layout import LAYOUT_PASSES, PaddingChannelPass
from semantics import run_module
from tests.filecheck.runner import HERE, execute, filecheck_files, run_lines
from tests.test_layout import ctx

RUNS = [r for f in filecheck_files("layout") for r in run_lines(f)]
PASS_INPUTS = [f"{HERE}/layout/{name}.mlir" for name in ("float_layouts", "int8_layouts", "padding_channel")]


@pytest.mark.parametrize("run", RUNS, ids=[r.id for r in RUNS])
def test_filecheck(run) -> None:  # type: ignore[no-untyped-def]
    ok, transcript = execute(run)
    assert ok, transcript


def _inputs(fn: func.FuncOp, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for t in fn.function_type.inputs.data:
        assert isinstance(t, TensorType)
        dtype = numpy_dtype(t.element_type)
        shape = tuple(t.get_shape())
        out.append(
            rng.integers(-60, 60, shape).astype(dtype)
            if dtype.kind == "i"
            else rng.standard_normal(shape).astype(dtype)
        )
    return out


PASSES: list[ModulePass] = [cls() for cls in LAYOUT_PASSES] + [PaddingChannelPass("nchw88")]


@pytest.mark.parametrize("pass_", PASSES, ids=str)
@pytest.mark.parametrize("path", PASS_INPUTS, ids=lambda p: p.rsplit("/", 1)[-1])
def test_pass_keeps_numerics_on_filecheck_inputs(
    pass_: ModulePass, path: str, rng: np.random.Generator
) -> None:
    with open(path) as f:
        before = Parser(ctx(), f.read(), path).parse_module()
    after = before.clone()
    pass_.apply(ctx(), after)
    after.verify()
    for fn in (op for op in before.ops if isinstance(op, func.FuncOp)):
        xs = _inputs(fn, rng)
        want = run_module(before, xs, entry=fn.sym_name.data)
        got = run_module(after, xs, entry=fn.sym_name.data)
        for w, g in zip(want, got, strict=True):
            assert w.shape == g.shape and w.dtype == g.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"@{fn.sym_name.data}")
