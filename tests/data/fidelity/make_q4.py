"""Made tests/data/fidelity/q4.mge with MegEngine 1.13.0: 4-bit constants kept as ImmutableTensors."""

import megengine as mge
import megengine.functional as F
import numpy as np
from megengine.core.tensor.dtype import qint4, quint4
from megengine.jit import trace

rs = np.random.RandomState(3)
ws = rs.randint(-8, 8, size=(2, 3, 5)).astype(np.int8)
wu = rs.randint(0, 16, size=(2, 3, 5)).astype(np.uint8)
a = mge.tensor(ws.astype(np.float32) * 0.5, dtype=qint4(0.5))
b = mge.tensor((wu.astype(np.float32) - 3) * 0.25, dtype=quint4(0.25, 3))


@trace(symbolic=True, capture_as_const=True)
def f(x):
    s = F.concat([x.astype(qint4(0.5)), a], axis=0).astype("float32")
    u = F.concat([x.astype(quint4(0.25, 3)), b], axis=0).astype("float32")
    return s, u


x = mge.tensor(rs.randn(2, 3, 5).astype(np.float32))
outs = f(x)
f.dump("q4.mge", arg_names=["x"], output_names=["s4", "u4"], optimize_for_inference=False)
np.savez("q4_expected.npz", s4=outs[0].numpy(), u4=outs[1].numpy())
np.savez("q4_inputs.npz", x=x.numpy())
