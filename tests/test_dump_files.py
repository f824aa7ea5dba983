"""``trace.dump`` writes its file as ``save`` does: atomically, with the user's umask (or the mode of
the file it replaces), and an error about a missing directory names the user's path."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from compiler import jit


@pytest.fixture
def traced() -> jit.trace:
    fn = jit.trace(lambda x: F.relu(x) * 2, symbolic=True, capture_as_const=True)
    fn(xm.tensor(np.ones((1, 3, 4, 4), np.float32)))
    return fn


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_dump_gets_the_umask(traced: jit.trace, tmp_path: Path, umask_022: None) -> None:
    out = tmp_path / "model.mge"
    traced.dump(str(out))
    assert _mode(out) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["model.mge"]  # no temporary left behind


def test_replaced_dump_keeps_its_mode(traced: jit.trace, tmp_path: Path, umask_022: None) -> None:
    out = tmp_path / "model.mge"
    out.write_bytes(b"old")
    out.chmod(0o600)
    traced.dump(str(out))
    assert _mode(out) == 0o600
    assert out.read_bytes()[:4] != b"old"


def test_dump_into_a_missing_directory_names_the_users_path(traced: jit.trace, tmp_path: Path) -> None:
    out = tmp_path / "missing" / "model.mge"
    with pytest.raises(OSError) as info:
        traced.dump(str(out))
    assert str(out) in str(info.value)
    assert ".tmp" not in str(info.value)
