"""Damaged files give MgeFormatError naming the problem and offset: no crash, hang or huge allocation."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from backends.mge.fbs import MgeFormatError
from backends.mge.reader import read_mge
from tests.conftest import data_path


def _golden(case: str, variant: str) -> bytes:
    with open(data_path(case, f"{variant}.mge"), "rb") as f:
        return f.read()


def _load(data: bytes) -> None:
    try:
        read_mge(data)
    except MgeFormatError as exc:
        assert "offset" in str(exc) or exc.offset is None
        assert str(exc)


@pytest.mark.parametrize("cut", [0, 3, 7, 11, 100, 3000, -1])
def test_truncated(cut: int) -> None:
    data = _golden("multi_io", "named")
    with pytest.raises(MgeFormatError):
        read_mge(data[:cut])
    v1 = _golden("convnet", "fbs_v1")
    with pytest.raises(MgeFormatError):
        read_mge(v1[:cut])


def test_wrong_identifier_and_random_bytes() -> None:
    data = bytearray(_golden("multi_io", "named"))
    data[8:12] = b"mgv9"
    with pytest.raises(MgeFormatError, match="not a MegEngine .mge graph"):
        read_mge(bytes(data))
    with pytest.raises(MgeFormatError, match="test-case file"):
        read_mge(b"mgbtest0" + bytes(100))
    rng = np.random.default_rng(0)
    for _ in range(50):
        with pytest.raises(MgeFormatError):
            read_mge(rng.bytes(int(rng.integers(1, 4000))))


def test_absurd_sizes_and_offsets() -> None:
    data = bytearray(_golden("multi_io", "named"))
    big = bytearray(data)
    struct.pack_into("<I", big, 0, 0xFFFFFFF0)  # size prefix
    with pytest.raises(MgeFormatError, match="truncated"):
        read_mge(bytes(big))
    root = bytearray(data)
    struct.pack_into("<I", root, 4, 0x7FFFFFF0)  # root table offset
    with pytest.raises(MgeFormatError, match="outside the buffer"):
        read_mge(bytes(root))
    v1 = bytearray(_golden("convnet", "fbs_v1"))
    struct.pack_into("<Q", v1, 16, 2**62)  # offset_to_fbs
    with pytest.raises(MgeFormatError, match="truncated"):
        read_mge(bytes(v1))


def test_unknown_operator_is_named_with_position() -> None:
    data = bytearray(_golden("multi_io", "named"))
    i = data.find(b"PoolingV1") if b"PoolingV1" in data else data.find(b"Elemwise")
    # change a type id: find the Elemwise type_id bytes (H_short("Elemwise")) and corrupt them
    from backends.mge.schema import h_short

    tid = struct.pack("<Q", h_short("Elemwise"))
    j = data.find(tid)
    assert j > 0 and i > 0
    data[j : j + 8] = struct.pack("<Q", 12345)
    with pytest.raises(MgeFormatError, match=r"operator #\d+ \(Elemwise\): unknown operator type"):
        read_mge(bytes(data))


def _mutations(data: bytes, rng: np.random.Generator, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        b = bytearray(data)
        kind = rng.integers(0, 4)
        if kind == 0:
            for _ in range(int(rng.integers(1, 8))):
                b[int(rng.integers(0, len(b)))] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            p = int(rng.integers(0, len(b) - 4))
            struct.pack_into(
                "<I",
                b,
                p,
                int(rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, len(b), int(rng.integers(0, 2**32))])),
            )
        elif kind == 2:
            b = b[: int(rng.integers(0, len(b)))]
        else:
            p = int(rng.integers(0, len(b)))
            b[p:p] = rng.bytes(int(rng.integers(1, 16)))
        out.append(bytes(b))
    return out


def fuzz(n_per_file: int, seed: int = 0) -> int:
    """Mutate small golden files; every load must succeed or raise MgeFormatError. Returns #cases."""
    rng = np.random.default_rng(seed)
    count = 0
    for case, variant in [("multi_io", "named"), ("multi_io", "append"), ("multi_io", "named_fuse")]:
        for m in _mutations(_golden(case, variant), rng, n_per_file):
            _load(m)
            count += 1
    return count


def test_fuzz_mutated_golden_files_bounded() -> None:
    assert fuzz(150) == 450


def test_elemwise_mode_of_another_arity_on_constants_is_a_format_error() -> None:
    # found by the long fuzz run: one byte turned an Elemwise's mode into COND_LEQ_MOV (3 inputs) on
    # two shape constants; the reader folded it by calling the mode's function with two arguments
    # (TypeError) instead of rejecting the operator
    data = bytearray(_golden("int8", "nchw44"))
    offset = 1488  # the mode field of operator #18 (Elemwise) in this file
    assert data[offset] == 21, "tests/data/int8/nchw44.mge changed: find the Elemwise mode byte again"
    data[offset] = 34
    with pytest.raises(MgeFormatError, match=r"Elemwise.*takes 3 inputs, got 2.*byte offset"):
        read_mge(bytes(data))
