""".mge params validated against the operator's dtypes (issue 28)."""

from __future__ import annotations

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
