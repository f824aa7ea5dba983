"""traced_module.wrap and register_supported_type (MegEngine 1.13 semantics): a wrapped function is
one CallFunction in the graph, replays, saves and loads; a registered container type carries
tensors through a traced module's inputs and outputs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
import compiler.module as M
import compiler.traced_module as tm
from compiler.traced_module.expr import CallFunction


def scaled_gelu(x, scale=2.0):  # several ops inside: recorded as one call once wrapped
    return F.gelu(x) * scale + F.sigmoid(x)


tm.wrap(scaled_gelu)
_ORIGINAL = scaled_gelu


@tm.wrap
def offset(x, y):
    return x - y * 0.5


def unwrapped(x):
    return F.relu(x) + 1


class Net(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = M.Linear(4, 4)

    def forward(self, x):
        return unwrapped(offset(scaled_gelu(self.fc(x), scale=3.0), x))


def _funcs(traced):
    return [e.func_key for e in traced.graph.exprs() if isinstance(e, CallFunction)]


def test_wrapped_functions_are_single_calls_that_replay(tmp_path):
    net = Net()
    x = mge.tensor(np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32))
    traced = tm.trace_module(net, x)
    funcs = _funcs(traced)
    assert (__name__, "scaled_gelu") in funcs and (__name__, "offset") in funcs
    # the wrapped bodies are not recorded; the unwrapped function is, op by op
    assert not any(q in ("gelu", "sigmoid") for _, q in funcs)
    assert any(q == "relu" for _, q in funcs)
    assert "scaled_gelu(" in str(traced.graph)
    np.testing.assert_allclose(traced(x).numpy(), net(x).numpy(), rtol=1e-6)
    path = tmp_path / "net.tm"
    mge.save(traced, path)
    np.testing.assert_allclose(mge.load(path)(x).numpy(), net(x).numpy(), rtol=1e-6)
    # the module's globals are restored after tracing
    assert globals()["scaled_gelu"] is _ORIGINAL


def test_wrap_only_at_module_level_and_only_functions():
    with pytest.raises(tm.TracedModuleError, match="top level of a module"):
        tm.wrap(unwrapped)
    with pytest.raises(TypeError):
        tm.wrap(42)


def test_a_graph_naming_an_unwrapped_function_does_not_replay(tmp_path):
    net = Net()
    x = mge.tensor(np.ones((1, 4), np.float32))
    mge.save(tm.trace_module(net, x), tmp_path / "net.tm")
    # a fresh process that never wrapped the function: the file cannot make it call it
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys; sys.path.insert(0, {!r}); import compiler as mge, numpy as np\n"
        "m = mge.load({!r})\n"
        "try:\n    m(mge.tensor(np.ones((1, 4), np.float32)))\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    ).format(root, str(tmp_path / "net.tm"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "not xmge functional API" in out.stdout + out.stderr


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


tm.register_supported_type(Pair, lambda p: ([p.a, p.b], None), lambda vals, ctx: Pair(*vals))


class PairNet(M.Module):
    def forward(self, p):
        return Pair(p.a + p.b, p.a * p.b)


def test_registered_container_type_carries_tensors():
    a = mge.tensor(np.arange(3, dtype=np.float32))
    b = mge.tensor(np.full(3, 2.0, np.float32))
    traced = tm.trace_module(PairNet(), Pair(a, b))
    assert len(traced.graph.inputs) == 3  # self, a, b: the tensors inside the Pair are inputs
    out = traced(Pair(b, a))
    assert isinstance(out, Pair)
    np.testing.assert_array_equal(out.a.numpy(), (a + b).numpy())
    np.testing.assert_array_equal(out.b.numpy(), (a * b).numpy())
    with pytest.raises(TypeError, match="both"):
        tm.register_supported_type(Pair, lambda p: ([], None))
