"""Writes a load_and_run test-case file with MegEngine 1.13's AssertEqual checks
(``trace.dump(input_data=...)`` with the default ``no_assert=False``), for
tests/test_dump_input_data.py; run with ``/work/shared/tools/megengine-oracle/mgepy
tests/data/assert_equal/record.py``. The inputs are fixed .npy files, so the file is reproducible."""

import os
import tempfile

import megengine.functional as F
import numpy as np
from megengine import tensor
from megengine.jit import trace

HERE = os.path.dirname(os.path.abspath(__file__))


@trace(symbolic=True, capture_as_const=True)
def f(a, b):
    return F.relu(a * 2 + b), a - b


f(tensor(np.ones((2, 3), "float32")), tensor(np.ones((2, 3), "float32")))
with tempfile.TemporaryDirectory() as tmp:
    np.save(os.path.join(tmp, "a.npy"), np.arange(6, dtype="float32").reshape(2, 3) - 2)
    np.save(os.path.join(tmp, "b.npy"), np.full((2, 3), 0.5, "float32"))
    spec = f"x:{os.path.join(tmp, 'a.npy')};y:{os.path.join(tmp, 'b.npy')}"
    out = os.path.join(os.path.dirname(HERE), "mge_input_data_assert.mge")  # beside the no_assert one
    f.dump(out + ".tmp", arg_names=["x", "y"], output_names=["o1", "o2"], input_data=[spec], maxerr=1e-3)
    os.replace(out + ".tmp", out)
print("wrote", out)
