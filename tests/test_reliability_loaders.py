"""Pickle bombs and broken pickles get one-line xmge errors before anything is allocated (issue 28)."""

from __future__ import annotations

import io
import pickle
import time

import pytest

import compiler as xm
from compiler.serialization import CorruptPickleError
from dialects import limits
from dialects.errors import XmgeError

BYTEARRAY_16G = b"\x80\x04c__builtin__\nbytearray\n\x8a\x05\x00\x00\x00\x00\x04\x85R."
SET_RANGE_1E9 = b"\x80\x04c__builtin__\nset\nc__builtin__\nrange\nJ\x00\xca\x9a;\x85R\x85R."


@pytest.mark.parametrize(("data", "what"), [(BYTEARRAY_16G, "bytearray"), (SET_RANGE_1E9, "set")])
def test_pickle_bombs_are_refused_under_the_budget(data: bytes, what: str) -> None:
    start = time.process_time()
    pattern = rf"REDUCE {what}\(\) before byte \d+: .*XMGE_MAX_TENSOR_BYTES"
    with pytest.raises(limits.LimitExceeded, match=pattern):
        xm.load(io.BytesIO(data))
    assert time.process_time() - start < 1.0


def test_pickle_budget_is_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    small = b"\x80\x04c__builtin__\nbytearray\nK\x10\x85R."
    assert xm.load(io.BytesIO(small)) == bytearray(16)
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "8")
    with pytest.raises(limits.LimitExceeded, match="limit of 8 "):
        xm.load(io.BytesIO(small))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "ends in the middle"),
        (b"\x80\x04\xff.", "unknown pickle opcode 0xff"),
        (b"0.", "more values than the pickle stack holds"),
        (pickle.dumps({"a": [1, 2, 3]})[:-3], "not a valid pickle"),
    ],
)
def test_broken_pickles_get_clear_errors(data: bytes, why: str) -> None:
    with pytest.raises(CorruptPickleError, match=why) as info:
        xm.load(io.BytesIO(data))
    assert isinstance(info.value, XmgeError) and "\n" not in str(info.value)
