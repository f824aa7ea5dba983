import io
import threading
from pathlib import Path

import pytest

from compiler.progress import progress, progress_enabled


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XMGE_PROGRESS", raising=False)
    out = _Tty()
    with progress("compile", total=4, stream=out) as p:
        p.stage("lowering")
        for i in range(4):
            p.advance(f"kernel k{i}")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[xmge compile] lowering 0/4 (0%)"
    assert lines[4] == "[xmge compile] lowering 4/4 (100%) kernel k3"
    assert lines[-1].startswith("[xmge compile] 4/4 (100%) done in ")


def test_nothing_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XMGE_PROGRESS", raising=False)
    out = io.StringIO()  # not a terminal
    with progress("fuzz", total=2, stream=out) as p:
        p.advance()
    assert out.getvalue() == ""


def test_env_and_explicit_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMGE_PROGRESS", "0")
    assert not progress_enabled(stream=_Tty())
    assert progress_enabled(True, stream=_Tty())
    monkeypatch.setenv("XMGE_PROGRESS", "1")
    assert progress_enabled(stream=io.StringIO())
    assert not progress_enabled(False, stream=io.StringIO())


def test_thread_safe_counting() -> None:
    out = io.StringIO()
    with progress("tune", total=800, enabled=True, stream=out) as p:
        threads = [threading.Thread(target=lambda: [p.advance() for _ in range(100)]) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert p.done == 800
    lines = out.getvalue().splitlines()
    assert len(lines) == 801
    # Lines never interleave: every line is complete and the counts rise one by one.
    counts = [int(line.split()[2].split("/")[0]) for line in lines[:-1]]
    assert counts == list(range(1, 801))


def _tiny_compile(progress_flag: bool | None) -> None:
    import numpy as np

    import compiler as xm
    import compiler.functional as F

    x = np.ones((1, 4), np.float32)
    xm.compile(lambda t: F.relu(t), example_inputs=[x], progress=progress_flag)


def test_compile_reports_stages_and_can_be_silenced(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XMGE_PROGRESS", "1")
    _tiny_compile(None)
    err = capsys.readouterr().err
    assert "[xmge compile] frontend" in err
    assert "(100%)" in err and "done in" in err
    _tiny_compile(False)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("XMGE_PROGRESS", "0")
    _tiny_compile(None)
    assert capsys.readouterr().err == ""


def test_xmge_compile_progress_and_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    import compiler as xm
    import compiler.functional as F
    from compiler import jit
    from compiler.driver.cli import main as xmge

    fn = jit.trace(lambda x: F.relu(x) * 2.0, capture_as_const=True)
    fn(xm.tensor(np.ones((1, 4), np.float32)))
    fn.dump(str(tmp_path / "m.mge"), arg_names=["data"])
    monkeypatch.setenv("XMGE_PROGRESS", "1")  # stands in for a terminal
    assert xmge(["compile", str(tmp_path / "m.mge"), "-o", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    assert "[xmge compile]" in captured.err and "compiled" in captured.out
    assert xmge(["compile", str(tmp_path / "m.mge"), "-o", str(tmp_path / "b"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    assert (tmp_path / "b").is_dir()


def test_hub_help_returns_the_entrys_docstring() -> None:
    import compiler.hub.mobilenet_v2 as mobilenet
    import compiler.hub.resnet as resnet
    import compiler.hub.resnext as resnext
    import compiler.hub.shufflenet_v2 as shufflenet

    for mod in (resnet, resnext, mobilenet, shufflenet):
        for name in dir(mod):
            fn = getattr(mod, name)
            if callable(fn) and getattr(fn, "__module__", "") == mod.__name__ and name[0].islower():
                if not name.startswith("_") and fn.__doc__ is None:
                    raise AssertionError(f"hub entry {mod.__name__}.{name} has no docstring for hub.help()")
    assert "ResNet-18" in (resnet.resnet18.__doc__ or "")
