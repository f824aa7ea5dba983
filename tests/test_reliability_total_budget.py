"""The total-bytes budget covers a whole pickle load: many arrays, each under the per-tensor cap,
are refused together once their sum passes XMGE_MAX_TOTAL_BYTES."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

from compiler import serialization
from dialects import limits


def _arrays(n: int, size: int) -> bytes:
    return pickle.dumps([np.zeros(size, dtype=np.uint8) for _ in range(n)], protocol=2)


def test_many_small_arrays_refused_by_total(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, "1000")
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "400")
    with pytest.raises(limits.LimitExceeded, match="all tensors together") as info:
        serialization.load(io.BytesIO(_arrays(4, 300)))
    assert limits.MAX_TOTAL_BYTES_ENV in str(info.value)


def test_arrays_under_total_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, "1000")
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "400")
    out = serialization.load(io.BytesIO(_arrays(3, 300)))
    assert [a.nbytes for a in out] == [300, 300, 300]


def test_bytearrays_and_arrays_share_total(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, "1000")
    data = pickle.dumps([np.zeros(600, dtype=np.uint8), bytearray(600)], protocol=2)
    with pytest.raises(limits.LimitExceeded, match="all tensors together"):
        serialization.load(io.BytesIO(data))
