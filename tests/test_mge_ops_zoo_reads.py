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


def test_resize_in_nchw88_reads_between_relayouts() -> None:
    """MegEngine's enable_nchw88 dumps resize the blocked tensor in place (Resize format NCHW88,
    as in RetinaNet and the DCGAN/WGAN generators): built from xmge's NCHW88 dump by feeding the
    Resize the blocked conv output and the next conv the blocked resize output."""
    from xdsl.context import Context

    import compiler.functional as F
    from dialects import enums
    from passes.inference.pipeline import pipeline_for

    rng = np.random.RandomState(0)
    w1 = xm.tensor(rng.randn(16, 8, 3, 3).astype(np.float32))
    w2 = xm.tensor(rng.randn(8, 16, 3, 3).astype(np.float32) * 0.1)

    def fn(x: xm.Tensor) -> xm.Tensor:
        y = F.relu(F.conv2d(x, w1, padding=1))
        y = F.vision.interpolate(y, size=(10, 12), mode="bilinear")
        return F.conv2d(y, w2, padding=1)

    x = rng.randn(1, 8, 5, 6).astype(np.float32)
    traced = jit.trace(fn, symbolic=True, capture_as_const=True)
    want = traced(xm.tensor(x)).numpy()
    module = traced.module.clone()
    for p in pipeline_for(enable_nchw88=True):
        p.apply(Context(), module)
    (func,) = list(module.ops)
    graph = lower_func(func)
    producer = {v: o for o in graph.oprs for v in o.outputs}
    (resize,) = [o for o in graph.oprs if o.kind == "Resize"]
    convs = [o for o in graph.oprs if o.kind in ("ConvBias", "Convolution")]
    # xmge wrote blocked -> Dimshuffle -> Reshape -> Resize -> Reshape -> Dimshuffle -> conv
    blocked_in = producer[producer[resize.inputs[0]].inputs[0]].inputs[0]
    assert producer[blocked_in] is convs[0]
    plain_in, out = resize.inputs[0], resize.outputs[0]
    # xmge's own relayouts after the resize stay in the file, unused (var ids stay in sequence),
    # fed the plain var so that they still read
    for o in graph.oprs:
        o.inputs = [plain_in if v == out else v for v in o.inputs]
    resize.inputs[0] = blocked_in
    resize.params = [("Resize", {**resize.params[0][1], "format": enums.number(enums.Format.NCHW88)})]
    convs[1].inputs[0] = resize.outputs[0]
    data = serialize_v2(graph, Metadata())
    (got,) = Network(data)(x).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
