"""A ``.mge`` whose operand shapes do not broadcast (one input shape changed in the file) is refused
at load with the operator and the byte offset, not numpy's ValueError from a reference kernel."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

import compiler as xm
from backends.mge.fbs import MgeFormatError
from compiler import jit
from compiler.lite import Network


def test_operands_that_do_not_broadcast_are_a_format_error() -> None:
    traced = jit.trace(lambda a, b: a + b, symbolic=True, capture_as_const=True)
    traced(xm.tensor(np.ones((2, 3), np.float32)), xm.tensor(np.ones((1, 3), np.float32)))
    buf = io.BytesIO()
    traced.dump(buf, arg_names=["a", "b"])
    shape_of_b = struct.pack("<3I", 2, 1, 3)  # a flatbuffers vector: length 2, then (1, 3)
    assert buf.getvalue().count(shape_of_b) == 1
    bad = buf.getvalue().replace(shape_of_b, struct.pack("<3I", 2, 4, 3))
    refusal = r"Elemwise.*\(2, 3\), \(4, 3\) cannot be broadcast.*byte offset"
    with pytest.raises(MgeFormatError, match=refusal):
        Network(bad)
