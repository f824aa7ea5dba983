"""Every golden MegEngine file (tests/data: convnet in every dump option incl. NCHW44 / NCHW88 /
float16 dumps, int8, mini_resnet, multi_io incl. the two-graph append file) compiles for every x86
target, float16 ones (``+io16xc32``) on blocked NCHW44/NCHW88 dumps included; where MegEngine's own
outputs exist, the compiled model reproduces them."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, StringAttr

from compiler.driver.compile import CompileError, compile
from compiler.driver.targets import parse_target, runs_here

DATA = os.path.join(os.path.dirname(__file__), "data")
FILES = sorted(
    os.path.relpath(p, DATA)
    for case in ("convnet", "int8", "mini_resnet", "multi_io")
    for p in glob.glob(os.path.join(DATA, case, "*.mge"))
)
X86 = ["x86-avx2", "x86-avx2-nchw88", "x86-avx512", "x86-avx512-nchw88"]
TARGETS = [*X86, *(t + "+io16xc32" for t in X86)]


def _input_names(compiled) -> list[str]:  # type: ignore[no-untyped-def]
    fn = next(op for op in compiled._stages["tensor"].ops if isinstance(op, func.FuncOp))
    names = fn.attributes.get("input_names")
    assert isinstance(names, ArrayAttr)
    return [n.data for n in names.data if isinstance(n, StringAttr)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("path", FILES)
def test_golden_file_compiles(path: str, target: str) -> None:
    case, variant = os.path.split(path)
    # named after the case, not the file (the default, checked below): the dumps of a case that
    # optimize to one graph then generate one source, built once for the matrix (the build cache)
    compiled = compile(os.path.join(DATA, path), target, name=case)
    expected = os.path.join(DATA, case, f"expected_{variant[:-4]}.npz")
    f16 = "16" in variant or "io16xc32" in target
    if not os.path.exists(expected) or not runs_here(parse_target(target)):
        return
    inputs = np.load(os.path.join(DATA, case, "inputs.npz"))
    got = compiled.run([inputs[n] for n in _input_names(compiled)])
    want = list(np.load(expected).values())
    assert len(got) == len(want)
    tol = 5e-2 if f16 else 1e-4
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())))


def test_append_file_graph_index() -> None:
    """A two-graph file compiles graph 0 by default and any other on request; a missing one is a
    one-line error."""
    path = os.path.join(DATA, "multi_io", "append.mge")
    first, second = compile(path, "x86-avx2"), compile(path, "x86-avx2", graph=1)
    assert first.source != second.source
    # a file's model is named after the file: its C prefix and library
    assert first.name == "append" and os.path.basename(first.build.library) == "libappend.so"
    with pytest.raises(CompileError, match=r"no graph 2; the model has 2"):
        compile(path, "x86-avx2", graph=2)
