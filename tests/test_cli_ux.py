"""The command line a new MegEngine user meets (issue 31, items 4 and 5): one default target
(``host``) everywhere, ``--list-targets``, load_and_run's ``--input NAME:FILE``/``--iter``/
``--warmup-iter``, run timing, and option names that get suggestions instead of silence."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.targets import host_target, parse_target
from compiler import jit
from compiler.driver.cli import main as xmge
from passes.inference.options import InferenceOptionError, parse_options


def _tiny_model(path: Path) -> Path:
    fn = jit.trace(lambda x: F.relu(x) * 2.0, capture_as_const=True)
    fn(xm.tensor(np.ones((1, 4), np.float32)))
    fn.dump(str(path), arg_names=["data"])
    return path


def test_host_is_a_target_name() -> None:
    assert str(parse_target("host")) == str(host_target())
    assert str(parse_target(" host ")) == str(host_target())


def test_list_targets_names_every_arch_and_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    assert xmge(["--list-targets"]) == 0
    out = capsys.readouterr().out
    assert f"host (the default): {host_target()}" in out
    for arch in ("ref", "x86", "arm", "cuda"):
        assert f"\n  {arch} " in out
    assert "nchw88" in out and "io16xc32" in out


def test_list_targets_works_after_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert xmge(["compile", "--list-targets"]) == 0
    assert "host (the default)" in capsys.readouterr().out


def test_compile_target_is_optional_and_defaults_to_host() -> None:
    import argparse

    import compiler.driver.cli as cli

    seen: dict[str, object] = {}

    def fake_handler(args: argparse.Namespace) -> int:
        seen.update(vars(args))
        return 0

    # parse only: the handler records what compile would get (compiling is test_compile.py's job)
    real = cli.cmd_compile
    cli.cmd_compile = fake_handler
    try:
        assert xmge(["compile", "m.mge", "-o", "out"]) == 0
    finally:
        cli.cmd_compile = real
    assert seen["target"] is None  # compile_file -> compile(): None is host_target()


def test_run_accepts_load_and_run_input_spelling_and_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _tiny_model(tmp_path / "m.mge")
    x = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    argv = ["run", str(model), "--input", f"data:{tmp_path / 'x.npy'}", "-o", str(tmp_path / "o.npz")]
    assert xmge(argv) == 0
    out = capsys.readouterr().out
    assert "ran once on the reference interpreter in" in out and " ms" in out
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_allclose(next(iter(z.values())), np.maximum(x, 0) * 2.0)


def test_run_iter_and_warmup_iter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _tiny_model(tmp_path / "m.mge")
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    argv = ["run", str(model), "--input", f"data={tmp_path / 'x.npy'}", "--iter", "3", "--warmup-iter", "2"]
    assert xmge(argv) == 0
    out = capsys.readouterr().out
    assert "ran 3 times on the reference interpreter (after 2 warm-up): median" in out


def test_run_input_with_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _tiny_model(tmp_path / "m.mge")
    assert xmge(["run", str(model), "--input", "data:nope.npy"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.npy" in err[0] and "data:nope.npy" not in err[0].split("error: ")[1][:5]


def test_bench_accepts_iter_and_warmup_iter_spellings() -> None:
    import argparse

    import compiler.driver.cli as cli

    seen: dict[str, object] = {}

    def fake(args: argparse.Namespace) -> int:
        seen.update(vars(args))
        return 0

    real = cli.cmd_bench
    cli.cmd_bench = fake
    try:
        assert xmge(["bench", "m.mge", "--iter", "7", "--warmup-iter", "1"]) == 0
    finally:
        cli.cmd_bench = real
    assert seen["iters"] == 7 and seen["warmup_iter"] == 1 and seen["target"] is None


@pytest.mark.parametrize(
    "spelling", [["--enable", "nchw88"], ["--enable", "enable_nchw88"], ["--enable-nchw88"]]
)
def test_convert_enable_spellings(
    spelling: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _tiny_model(tmp_path / "m.mge")
    out, plain = tmp_path / "o.mge", tmp_path / "plain.mge"
    assert xmge(["convert", str(model), "-o", str(out), *spelling]) == 0
    assert xmge(["convert", str(model), "-o", str(plain)]) == 0
    assert "converted" in capsys.readouterr().out
    # the option reaches the file (its optimize_options metadata word), not only the parser
    assert out.read_bytes() != plain.read_bytes()


def test_convert_misspelt_enable_suggests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _tiny_model(tmp_path / "m.mge")
    assert xmge(["convert", str(model), "-o", str(tmp_path / "o.mge"), "--enable", "nchw88x"]) == 1
    err = capsys.readouterr().err
    assert "unknown option --enable nchw88x: did you mean nchw88?" in err
    assert "enable_enable" not in err and not (tmp_path / "o.mge").exists()


def test_dump_unknown_option_suggests_the_closest() -> None:
    with pytest.raises(InferenceOptionError, match=r"'enable_nchw88x': did you mean 'enable_nchw88'\?"):
        parse_options({"enable_nchw88x": True})
    with pytest.raises(InferenceOptionError, match=r"unknown options: \['zzz'\]$"):
        parse_options({"zzz": True})


def test_enable_option_without_optimize_for_inference_warns(tmp_path: Path) -> None:
    fn = jit.trace(lambda x: F.relu(x), capture_as_const=True)
    fn(xm.tensor(np.ones((1, 2), np.float32)))
    with pytest.warns(
        UserWarning, match="enable_fuse_conv_bias_nonlinearity ignored: optimize_for_inference=False"
    ):
        fn.dump(
            str(tmp_path / "m.mge"), optimize_for_inference=False, enable_fuse_conv_bias_nonlinearity=True
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn.dump(str(tmp_path / "n.mge"), optimize_for_inference=False)
