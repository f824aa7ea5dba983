"""Mixing up ``.pkl`` and ``.mge`` (MegEngine's guide warns about it) gets a one-line pointer to the
right loader: ``compiler.load`` of a ``.mge``, ``xmge run`` / Lite of a pickle, and
``load_state_dict`` of a path."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.module as M
from compiler import jit
from compiler.serialization import NotAPickleError


def _mge(tmp_path: Path) -> Path:
    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: Any) -> Any:
        return x * 2

    f(xm.tensor(np.ones((2,), np.float32)))
    path = tmp_path / "convnet.mge"
    f.dump(str(path), arg_names=["data"])
    return path


def test_load_of_a_mge_file_says_what_it_is(tmp_path: Path) -> None:
    path = _mge(tmp_path)
    with pytest.raises(
        NotAPickleError, match=r"is a MegEngine \.mge graph, not a pickle: run it with compiler.lite"
    ):
        xm.load(str(path))
    with pytest.raises(NotAPickleError, match="not a pickle"):
        xm.load(io.BytesIO(path.read_bytes()))


def test_running_a_pickle_as_a_mge_says_to_use_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from compiler.driver.cli import main

    pkl = tmp_path / "model.pkl"
    xm.save(M.Linear(2, 2).state_dict(), str(pkl))
    assert main(["run", str(pkl)]) != 0
    err = capsys.readouterr().err
    assert "a Python pickle" in err and "compiler.load" in err and err.count("\n") == 1


def test_load_state_dict_of_a_path_says_to_load_it_first(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"got the path 'model.pkl', not a state dict: load the file first"):
        M.Linear(2, 2).load_state_dict("model.pkl")  # type: ignore[arg-type]


def test_unknown_dump_options_suggest_the_right_name() -> None:
    from passes.inference.options import InferenceOptionError, parse_options

    with pytest.raises(InferenceOptionError, match=r"'enable_nchw88x': did you mean 'enable_nchw88'\?"):
        parse_options({"enable_nchw88x": True})
    with pytest.raises(InferenceOptionError, match=r"'enable-nchw88': did you mean 'enable_nchw88'\?"):
        parse_options({"enable-nchw88": True})
    with pytest.raises(InferenceOptionError) as err:
        parse_options({"foo": True})
    assert "did you mean" not in str(err.value)


def test_target_host_is_this_machine() -> None:
    from compiler.driver.compile import resolve_target
    from compiler.driver.targets import host_target

    assert resolve_target("host") == host_target() == resolve_target(None)


def test_list_targets_and_compile_defaults_to_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from compiler.driver.cli import main
    from compiler.driver.targets import host_target

    assert main(["--list-targets"]) == 0
    out = capsys.readouterr().out
    assert f"host (the default): {host_target()}" in out and "+OPTION" in out
    path = _mge(tmp_path)
    assert main(["compile", str(path), "-o", str(tmp_path / "pkg")]) == 0
    assert f"for {host_target()}" in capsys.readouterr().out
