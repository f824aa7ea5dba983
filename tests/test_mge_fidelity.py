"""Where xmge's .mge files follow MegEngine's own more closely than operator types: TypeCvts after
a layout pass, the names MegEngine's tracer gives duplicated ops, NHWCD4 weights in a
MultipleDeviceTensorWithFormatHolder, and 4-bit tensors packed two to a byte.

Reference data: the golden dumps in tests/data/<case>/ and, in tests/data/fidelity/, listings of
files MegEngine 1.13.0 made (each JSON names the script that made it).
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

import compiler as xm
import compiler.functional as F
import compiler.module as M
from backends.mge.container import parse_file
from compiler import jit
from tests.conftest import data_path
from tests.test_mge_layouts import _int8_model, case_variant, golden_sig, sigs


def fidelity(name: str) -> Any:
    with open(data_path("fidelity", name)) as f:
        return json.load(f)


# ----------------------------------------------------------------------------------------------
# 1. TypeCvt after NCHW44: the relayout moves above the TypeCvt (ShuffleShuffleRemovePass)


def test_int8_nchw44_dequantizes_after_the_relayout() -> None:
    tr = _int8_model()
    for variant in ("nchw44", "nchw44_dot"):
        v = case_variant("int8", variant)
        buf = io.BytesIO()
        tr.dump(buf, **v["dump_kwargs"])
        data = buf.getvalue()
        assert sigs(data) == [golden_sig(o) for o in v["oprs"]]
        g = parse_file(data)[0]
        # the graph output is the TypeCvt's var; MegEngine names it asFloat32(reshape[462])[464]
        # (a generated name with node ids of its optimizer run, see docs/mge-names.md)
        assert g.oprs[-1].kind == "TypeCvt" and g.oprs[-1].outputs == g.outputs
        assert [g.var_names[o] for o in g.outputs] == ["TypeCvt"]


def test_float_typecvt_after_nchw44_like_megengine() -> None:
    gold = fidelity("float_typecvt_nchw44.json")

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = M.Conv2d(8, 8, 3, padding=1)

        def forward(self, x: Any) -> Any:
            return F.relu(self.conv(x)).astype("float16")

    net = Net()
    net.conv.bias = xm.Parameter(np.full((1, 8, 1, 1), 0.1, np.float32))  # a zero bias is folded away
    net.eval()
    tr = jit.trace(lambda x: net(x), symbolic=True, capture_as_const=True)
    tr(xm.tensor(np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)))
    buf = io.BytesIO()
    tr.dump(buf, arg_names=["data"], enable_nchw44=True)
    g = parse_file(buf.getvalue())[0]
    kinds = [o.kind for o in g.oprs]
    want = [t for t, _ in gold["oprs"]]
    conv = want.index("ConvBias")
    assert kinds[kinds.index("ConvBias") :] == want[conv:]
    assert want[-1] == "TypeCvt" and [g.var_names[o] for o in g.outputs] == gold["outputs"] == ["TypeCvt"]
