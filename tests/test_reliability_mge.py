""".mge params validated against the operator's dtypes (issue 28)."""

from __future__ import annotations

import math
import re

import pytest

from backends.mge.fbs import MgeFormatError
from backends.mge.reader import read_mge
from dialects import enums
from tests.conftest import data_path


def test_float_conv_bias_claiming_nchw44_dot_is_refused() -> None:
    with open(data_path("convnet", "nchw44.mge"), "rb") as f:
        data = f.read()
    read_mge(data)  # the float32 NCHW44 original loads
    nchw44, dot = enums.number(enums.Format.NCHW44), enums.number(enums.Format.NCHW44_DOT)
    # one byte changed: the format field of a ConvBias param (params follow the weights)
    for i in range(len(data) - 1, -1, -1):
        if data[i] != nchw44:
            continue
        mutated = data[:i] + bytes([dot]) + data[i + 1 :]
        try:
            read_mge(mutated)
        except MgeFormatError as exc:
            if "NCHW44_DOT" in str(exc):
                assert "ConvBias" in str(exc) and "8-bit integer" in str(exc) and "f32" in str(exc)
                return
    pytest.fail("no single-byte format change was refused")


def test_int8_tensors_are_sized_at_the_reference_working_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference widens int8 to int64/float64: a padded int8 input is capped at 8 bytes an
    element, so a huge int8 padding cannot pass the cap and then allocate 8x in the reference."""
    with open(data_path("int8", "fbs_v1.mge"), "rb") as f:
        data = f.read()
    read_mge(data)
    cap = 10368  # every int8 tensor of the file fits at 1 byte an element; not all at 8
    monkeypatch.setenv("XMGE_MAX_TENSOR_BYTES", str(cap))
    with pytest.raises(MgeFormatError, match=r"ConvBias.* would need \d+ bytes") as info:
        read_mge(data)
    m = re.search(r"of shape \(([\d, ]+)\) would need (\d+) bytes", str(info.value))
    assert m is not None
    elements = math.prod(int(d) for d in m.group(1).split(","))
    assert int(m.group(2)) == 8 * elements and elements <= cap
