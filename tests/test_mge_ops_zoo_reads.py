"""The zoo's reads of issue 32: a Linspace whose start/stop are int32 (a BERT-style dump; MegEngine
casts them to float32), written in MegEngine's form with xmge's writer."""

from __future__ import annotations

import numpy as np

import compiler as xm
from backends.mge.container import parse_file
from backends.mge.lowering import lower_func
from backends.mge.records import Metadata
from backends.mge.serialize import serialize_v2
from compiler import jit
from compiler.core import apply
from compiler.lite import Network
from dialects import tensor as T


def test_linspace_with_int32_start_and_stop_reads_as_megengine_casts() -> None:
    def fn(start: xm.Tensor, stop: xm.Tensor) -> xm.Tensor:
        (y,) = apply(T.LinspaceOp, [start.astype("float32"), stop.astype("float32")], label="linspace", num=7)
        return y

    start, stop = np.array([2], np.int32), np.array([14], np.int32)
    traced = jit.trace(fn, symbolic=True, capture_as_const=True)
    traced(xm.tensor(start), xm.tensor(stop))
    (func,) = list(traced.module.ops)
    graph = lower_func(func)
    # MegEngine's graph feeds the int32 vars to Linspace directly: bypass the casts xmge's writer
    # adds (they stay in the file, unused: var ids must stay in sequence)
    casts = {o.outputs[0]: o for o in graph.oprs if o.kind == "TypeCvt"}
    (lin,) = [o for o in graph.oprs if o.kind == "Linspace"]
    lin.inputs = [casts[v].inputs[0] if v in casts else v for v in lin.inputs]
    data = serialize_v2(graph, Metadata())
    oprs = parse_file(data)[0].oprs
    (raw,) = [o for o in oprs if o.kind == "Linspace"]
    producers = {v: o.kind for o in oprs for v in o.outputs}
    assert [producers[v] for v in raw.inputs[:2]] == ["Host2DeviceCopy", "Host2DeviceCopy"]
    (got,) = Network(data)(start, stop).values()
    np.testing.assert_array_equal(got, np.linspace(2.0, 14.0, 7, dtype=np.float32))
