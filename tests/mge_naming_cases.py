"""Models whose dumped operator and var names tests/test_mge_dump_naming.py checks against what
MegEngine 1.13 wrote for the same code (tests/data/dump_naming/record.py runs these on MegEngine).
``mge`` is the package: ``megengine`` there, ``compiler`` here."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np


def _models(mge: Any) -> dict[str, tuple[Callable[..., Any], dict[str, Any]]]:
    F, M = mge.functional, mge.module

    class Simple(M.Module):
        def __init__(self, name: str | None = None) -> None:
            super().__init__(name)
            self.k = mge.Parameter(2.0, name="k")
            self.lin = M.Linear(3, 3)
            self.l0 = [M.Linear(3, 3) for _ in range(2)]
            self.l1 = tuple(self.l0)  # the same modules again: they keep their first names

        def forward(self, x: Any) -> Any:
            y = self.lin(self.k * x)
            y.name = "after_lin"
            y = self.l1[1](y)
            return F.relu(y) + F.relu(x)

    inner = M.Linear(3, 3, name="inn")

    class Outer(M.Module):  # calls a module that is not its child: named by the call stack
        def __init__(self) -> None:
            super().__init__(name="outer")
            self.a = M.ReLU()

        def forward(self, x: Any) -> Any:
            return inner(self.a(x))

    class Mid(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.r = M.ReLU(name="rr")
            self.seq = M.Sequential(M.Linear(3, 3), M.ReLU())

        def forward(self, x: Any) -> Any:
            return self.seq(self.r(x))

    class Top(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mid = Mid()
            self.d = {"b": M.ReLU(), "a": M.ReLU()}

        def forward(self, x: Any) -> Any:
            return self.d["a"](self.mid(x)) + self.d["b"](x)

    class Quantized(M.Module):
        def __init__(self) -> None:
            super().__init__(name="q")
            self.quant = M.QuantStub()
            self.linear = M.Linear(3, 3, bias=True, name="user-linear")
            self.dequant = M.DequantStub()
            self.linear.weight.name = "user-weight"

        def forward(self, x: Any) -> Any:
            return self.dequant(self.linear(self.quant(x)))

    class Biases(M.Module):  # zero biases: 30 elements are two constants, 3 elements one
        def __init__(self) -> None:
            super().__init__()
            self.a1, self.a2 = M.Linear(3, 30), M.Linear(30, 30)
            self.l1, self.l2 = M.Linear(30, 3), M.Linear(3, 3)

        def forward(self, x: Any) -> Any:
            return self.l2(self.l1(self.a2(self.a1(x))))

    q = Quantized()
    mge.quantization.quantize_qat(q)
    mge.quantization.quantize(q)
    q.eval()

    def arith(x: Any) -> Any:
        return F.relu(2 * x) + x * 3 - 1

    keep = {"keep_opr_name": True, "keep_var_name": 2, "arg_names": ("x",)}
    return {
        "named_top": (Simple("top"), keep),
        "unnamed_top": (Simple(), keep),
        "outer": (Outer(), keep),
        "nested": (Top(), keep),
        "quantized": (q, keep),
        "biases": (Biases(), keep),
        "arith_not_keep_opr_name": (arith, {"keep_opr_name": False, "keep_var_name": 2, "arg_names": ("x",)}),
        "arith_keep_var_0": (arith, {"keep_opr_name": True, "keep_var_name": 0, "arg_names": ("x",)}),
        "named_input": (arith, {"keep_opr_name": True, "keep_var_name": 2, "input_name": "data"}),
    }


def dumped_names(mge: Any) -> dict[str, list[list[Any]]]:
    """Per case: each operator of the loaded dump (constants included, in execution order) as
    [name, input var names, output var names]."""
    import importlib

    def sub(name: str) -> Any:
        return importlib.import_module(f"{mge.__name__}.{name}")

    cgtools, G = sub("utils.comp_graph_tools"), sub("core.tensor.megbrain_graph")
    trace, AutoNaming = sub("jit").trace, sub("utils.naming").AutoNaming
    out: dict[str, list[list[Any]]] = {}
    for case, (fn, options) in _models(mge).items():
        opts = dict(options)
        input_name = opts.pop("input_name", None)
        for symbolic in (False, True):
            AutoNaming.clear()
            traced = trace(fn, symbolic=symbolic, capture_as_const=True)
            x = mge.Tensor(np.ones((2, 3), np.float32), name=input_name)
            traced(x).numpy()
            buf = io.BytesIO()
            traced.dump(buf, optimize_for_inference=False, **opts)
            buf.seek(0)
            outputs = G.load_graph(buf).output_vars_list
            ops = cgtools.get_oprs_seq(outputs, prune_immtensor=False)
            out[f"{case}_{'symbolic' if symbolic else 'imperative'}"] = [
                [op.name, [v.name for v in op.inputs], [v.name for v in op.outputs]] for op in ops
            ]
    return out
