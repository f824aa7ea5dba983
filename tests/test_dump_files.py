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


def test_dump_refuses_batch_norm_in_training_mode(tmp_path: Path) -> None:
    import compiler.module as M

    net = M.Sequential(M.Conv2d(3, 4, 3), M.BatchNorm2d(4))  # still in training mode
    fn = jit.trace(lambda x: net(x), symbolic=True, capture_as_const=True)
    fn(xm.tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)))
    with pytest.raises(ValueError, match=r"training mode.*eval\(\)"):
        fn.dump(str(tmp_path / "train.mge"))
    assert not (tmp_path / "train.mge").exists()
    net.eval()
    fn = jit.trace(lambda x: net(x), symbolic=True, capture_as_const=True)
    fn(xm.tensor(np.ones((2, 3, 6, 6), np.float32)))
    fn.dump(str(tmp_path / "eval.mge"))  # the same net in inference mode dumps


def test_help_shows_megengines_dump_parameters() -> None:
    import inspect

    params = inspect.signature(jit.trace.dump).parameters
    for name in ("file", "arg_names", "output_names", "append", "keep_var_name", "keep_opr_name",
                 "strip_info_file", "optimize_for_inference", "user_info", "dump_format"):  # fmt: skip
        assert name in params, name
    assert "enable_nchw44" in (jit.trace.dump.__doc__ or "")
