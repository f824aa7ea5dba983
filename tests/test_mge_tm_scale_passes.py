"""traced_module.optimize's FuseAddMul and BackwardFoldScale (MegEngine 1.13): the rewritten graph
(checked with FileCheck on its printed form), its outputs (equal to the original's), and the cases
where folding would change a result and must not happen."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
import compiler.module as M
import compiler.traced_module as tm
from tests.filecheck.runner import _run_filecheck

RNG = np.random.default_rng(11)


def filecheck(text: str, checks: str, tmp_path) -> None:
    path = tmp_path / "checks.txt"
    path.write_text(checks)
    result = _run_filecheck([str(path)], text)
    assert result.code == 0, result.stderr + "\n--- input ---\n" + text


class AddMul(M.Module):
    def forward(self, x):  # MegEngine's docstring example: becomes x + 3
        x = x + 1
        x = 2 + x
        x = x * 4
        x = x * 0.25
        return x


class FunctionalChain(M.Module):
    def forward(self, x):
        y = F.sub(F.add(x, 5.0), 1.5)
        y = F.div(F.mul(y, 3.0), 2.0)
        return F.neg(F.neg(y))


def test_fuse_add_mul_megengine_example(tmp_path):
    x = mge.tensor(RNG.standard_normal((2, 3)).astype(np.float32))
    traced = tm.trace_module(AddMul(), x)
    out = tm.optimize(traced, "FuseAddMul")
    filecheck(
        str(out.graph),
        """
        CHECK:      AddMul.Graph (self, x) {
        CHECK-NEXT: radd_out = x.__add__(3.0, )
        CHECK-NEXT: return radd_out
        """,
        tmp_path,
    )
    np.testing.assert_array_equal(out(x).numpy(), traced(x).numpy())
    assert len(traced.graph._exprs) == 4  # the original is unchanged


def test_fuse_add_mul_functional_forms(tmp_path):
    x = mge.tensor(RNG.standard_normal((4,)).astype(np.float32))
    traced = tm.trace_module(FunctionalChain(), x)
    out = tm.optimize(traced, ["FuseAddMul"])
    filecheck(
        str(out.graph),
        """
        CHECK:      (self, x) {
        CHECK-NEXT: = x.__add__(3.5, )
        CHECK-NEXT: = {{.*}}.__mul__(1.5, )
        CHECK-NEXT: return
        """,
        tmp_path,
    )
    np.testing.assert_allclose(out(x).numpy(), traced(x).numpy(), rtol=1e-6)


class IntChain(M.Module):
    def forward(self, x):
        return (x // 1) * 2 * 3


def test_fuse_add_mul_leaves_integers_alone():
    x = mge.tensor(np.arange(4, dtype=np.int32))
    traced = tm.trace_module(IntChain(), x)
    assert len(tm.optimize(traced, "FuseAddMul").graph._exprs) == len(traced.graph._exprs)


class Fold(M.Module):
    def __init__(self, scale: float = 3.0, expose: bool = False) -> None:
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1)
        self.relu = M.ReLU()
        self.scale, self.expose = scale, expose

    def forward(self, x):  # MegEngine's docstring example
        x = self.relu(self.conv(x))
        x1 = x + 3
        x2 = x + 4
        y = (x1 + x2) * self.scale
        return (y, x) if self.expose else y


def _input():
    return mge.tensor(RNG.standard_normal((1, 3, 5, 5)).astype(np.float32))


def test_backward_fold_scale_megengine_example(tmp_path):
    net = Fold()
    net.eval()
    x = _input()
    traced = tm.trace_module(net, x)
    out = tm.optimize(traced, "BackwardFoldScale")
    filecheck(
        str(out.graph),
        """
        CHECK:      conv_out = conv(x, )
        CHECK:      relu_out = relu(conv_out, )
        CHECK-NEXT: add_out = relu_out.__add__(9.0, )
        CHECK-NEXT: add_out_1 = relu_out.__add__(12.0, )
        CHECK-NEXT: add_out_2 = add_out.__add__(add_out_1, )
        CHECK-NEXT: return add_out_2
        CHECK-NOT:  __mul__
        """,
        tmp_path,
    )
    np.testing.assert_allclose(out(x).numpy(), traced(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.conv.weight.numpy(), net.conv.weight.numpy() * 3, rtol=1e-6)
    np.testing.assert_allclose(out.conv.bias.numpy(), net.conv.bias.numpy() * 3, rtol=1e-6)


@pytest.mark.parametrize(
    "net, why",
    [
        (Fold(scale=-2.0), "relu does not commute with a negative scale"),
        (Fold(expose=True), "relu_out is an output"),
    ],
)
def test_backward_fold_scale_refuses_changing_results(net, why):
    net.eval()
    x = _input()
    traced = tm.trace_module(net, x)
    out = tm.optimize(traced, ["BackwardFoldScale"])
    assert any(getattr(e, "method", None) == "__mul__" for e in out.graph._exprs), why
    for a, b in zip(out(x), traced(x), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


class FunctionalConv(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = mge.Parameter(RNG.standard_normal((2, 3, 3, 3)).astype(np.float32))
        self.b = mge.Parameter(RNG.standard_normal((1, 2, 1, 1)).astype(np.float32))

    def forward(self, x):
        y = F.conv2d(x, self.w, self.b)
        return F.reshape(F.max_pool2d(y, 2), (1, -1)) * 0.5


def test_backward_fold_scale_into_functional_conv(tmp_path):
    x = mge.tensor(RNG.standard_normal((1, 3, 6, 6)).astype(np.float32))
    traced = tm.trace_module(FunctionalConv(), x)
    out = tm.optimize(traced, "BackwardFoldScale")
    filecheck(str(out.graph), "CHECK: nn.conv2d(\nCHECK-NOT: __mul__\n", tmp_path)
    np.testing.assert_allclose(out(x).numpy(), traced(x).numpy(), rtol=1e-5, atol=1e-6)


class IndexedScale(M.Module):
    """Scales read from an integer tensor attribute (``self.scale[0]``, a value computed only from
    constants), one of them as ``c + y`` called on the constant."""

    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 3, 1)
        self.conv2 = M.Conv2d(3, 3, 1)
        self.scale = mge.Tensor([3, 4])

    def forward(self, x):
        a = F.relu(self.conv(x)) * self.scale[0]
        b = F.relu(self.conv2(x)) * self.scale[1]
        y = self.scale[0] + F.add(a + b, 4)
        return F.relu(y) * 3


def test_backward_fold_scale_reads_computed_constants():
    net = IndexedScale()
    x = mge.tensor(RNG.standard_normal((1, 3, 5, 5)).astype(np.float32))
    want = net(x).numpy()
    traced = tm.trace_module(net, x)
    folded = tm.optimize(traced, "BackwardFoldScale")
    assert folded.graph.get_method_by_type("__mul__").as_list() == []
    np.testing.assert_allclose(folded(x).numpy(), want, rtol=1e-5, atol=1e-4)
