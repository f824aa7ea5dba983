"""``xmge-opt``: pass selection, listing, weights, error reporting, the .mge frontend hook and
plugins (``--load-plugin`` with a file or a module, and installed ``xmge.passes`` entry points)."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.filecheck.runner import HERE, Result, _run_xmge_opt

BIN = os.path.dirname(sys.executable)
ROUNDTRIP = os.path.join(HERE, "dialects", "mgb_roundtrip.mlir")

SCOPED = """
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = mgb.elemwise relu %x {scope = "act"} : (tensor<2xf32>) -> tensor<2xf32>
  %1 = mgb.reshape %0 {scope = "flat"} : (tensor<2xf32>) -> tensor<2xf32>
  func.return %1 : tensor<2xf32>
}
"""

PLUGIN = '''
"""A test plugin."""
from dataclasses import dataclass

from xdsl.passes import ModulePass


@dataclass(frozen=True)
class StripScopesPass(ModulePass):
    """Drops the scope attributes the tracer records (except one)."""

    name = "{name}"
    keep: str = ""

    def apply(self, ctx, op) -> None:
        for o in op.walk():
            scope = o.attributes.get("scope")
            if scope is not None and scope.data != self.keep:
                del o.attributes["scope"]
'''


def opt(*args: str, stdin: str = "") -> Result:
    return _run_xmge_opt(list(args), stdin)


def write_plugin(directory: Path, module: str, pass_name: str) -> Path:
    path = directory / f"{module}.py"
    path.write_text(PLUGIN.replace("{name}", pass_name))
    return path


def install_entry_point(directory: Path, module: str, pass_name: str, target: str | None = None) -> None:
    """Install a distribution into ``directory`` the way pip lays one out (module + dist-info with
    entry_points.txt), so importlib.metadata finds it once ``directory`` is on sys.path."""
    write_plugin(directory, module, pass_name)
    dist = directory / f"{module}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[xmge.passes]\n{pass_name} = {target or module + ':StripScopesPass'}\n"
    )


# -- plugins -----------------------------------------------------------------------------------


def test_load_plugin_file(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "strip_plugin", "test-strip-scopes")
    r = opt("--load-plugin", str(path), "-p", "test-strip-scopes{keep=flat}", stdin=SCOPED)
    assert r.code == 0, r.stderr
    assert 'scope = "act"' not in r.stdout and 'scope = "flat"' in r.stdout


def test_load_plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_plugin(tmp_path, "xmge_strip_module", "test-strip-module")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = opt("--load-plugin", "xmge_strip_module", "-p", "test-strip-module", stdin=SCOPED)
    assert r.code == 0, r.stderr
    assert "scope" not in r.stdout and "mgb.elemwise relu" in r.stdout


def test_entry_point_plugin_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_entry_point(tmp_path, "xmge_strip_ep", "test-strip-ep")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = opt("-p", "mgb-canonicalize,test-strip-ep", stdin=SCOPED)
    assert r.code == 0, r.stderr
    assert "scope" not in r.stdout and "mgb.reshape" not in r.stdout
    listing = opt("--list-passes").stdout
    assert "test-strip-ep" in listing and "Drops the scope attributes" in listing
    assert "entry point 'test-strip-ep = xmge_strip_ep:StripScopesPass' (xmge.passes)" in listing
    assert "keep: str = " in listing


def test_entry_point_plugin_through_the_console_script(tmp_path: Path) -> None:
    install_entry_point(tmp_path, "xmge_strip_cli", "test-strip-cli")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [os.path.join(BIN, "xmge-opt"), "-p", "test-strip-cli"], input=SCOPED, env=env,
        capture_output=True, text=True, check=True,
    ).stdout
    assert "mgb.elemwise relu %x : " in out and "scope" not in out


def test_plugin_name_clash_is_an_error_naming_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_plugin(tmp_path, "clash_plugin", "mgb-dce")
    r = opt("--load-plugin", str(path), stdin=SCOPED)
    assert r.code == 1
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "plugin pass 'mgb-dce' from plugin" in r.stderr and "clash_plugin.py" in r.stderr
    assert "clashes with the built-in pass 'mgb-dce' from passes.dce.MgbDeadCodeEliminationPass" in r.stderr

    install_entry_point(tmp_path, "xmge_clash_ep", "dce")  # xDSL's dce
    monkeypatch.syspath_prepend(str(tmp_path))
    r = opt(stdin=SCOPED)
    assert r.code == 1
    assert "plugin pass 'dce' from entry point 'dce = xmge_clash_ep:StripScopesPass'" in r.stderr
    assert "clashes with the built-in pass 'dce' from xDSL" in r.stderr


def test_broken_entry_point_fails_only_when_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_entry_point(tmp_path, "xmge_broken_ep", "test-broken", target="xmge_broken_ep:Missing")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert opt("-p", "mgb-dce", stdin=SCOPED).code == 0
    r = opt("-p", "test-broken", stdin=SCOPED)
    assert r.code == 1 and "cannot load plugin pass 'test-broken' (xmge_broken_ep:Missing)" in r.stderr


def test_bad_plugin_file_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "nopass.py").write_text("X = 1\n")
    r = opt("--load-plugin", str(tmp_path / "nopass.py"), stdin=SCOPED)
    assert r.code == 1 and "defines no ModulePass subclass" in r.stderr
    r = opt("--load-plugin", str(tmp_path / "missing.py"), stdin=SCOPED)
    assert r.code == 1 and "missing.py does not exist" in r.stderr


# -- driver behaviour ---------------------------------------------------------------------------


def test_list_passes_shows_descriptions_and_options() -> None:
    r = opt("--list-passes")
    assert r.code == 0
    lines = r.stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.split()[:1] == ["mgb-dce"])
    assert "Erases unused side-effect-free ops" in lines[i]
    assert lines[i + 1].split() == ["consts:", "bool", "=", "true"]
    assert any(line.split()[:1] == ["mgb-canonicalize"] for line in lines)
    assert any(line.split()[:1] == ["cse"] for line in lines)  # xDSL's passes are there too


def test_unknown_pass_is_a_one_line_error() -> None:
    r = opt("-p", "mgb-dec", stdin=SCOPED)
    assert r.code == 1 and r.stdout == ""
    assert r.stderr == (
        "xmge-opt: error: unknown pass 'mgb-dec'; did you mean mgb-dce? "
        "run xmge-opt --list-passes to see them all\n"
    )


def test_bad_option_and_bad_pipeline_are_one_line_errors() -> None:
    r = opt("-p", "mgb-dce{const=false}", stdin=SCOPED)
    assert r.code == 1 and r.stderr.count("\n") == 1 and '"const"' in r.stderr
    r = opt("-p", "mgb-dce{", stdin=SCOPED)
    assert r.code == 1 and r.stderr.startswith("xmge-opt: error: malformed pass pipeline")


def test_malformed_ir_is_a_one_line_error_with_location() -> None:
    r = opt(stdin="func.func @f(%x: tensor<2xf32>) {\n  %0 = mgb.elemwise relu %x :\n}\n")
    assert r.code == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("xmge-opt: error: stdin:3:1: ")


def test_invalid_ir_is_a_one_line_error() -> None:
    bad = """
    func.func @main(%x: tensor<2xf32>) -> tensor<3xf32> {
      %0 = mgb.elemwise relu %x : (tensor<2xf32>) -> tensor<3xf32>
      func.return %0 : tensor<3xf32>
    }
    """
    r = opt(stdin=bad)
    assert r.code == 1
    assert r.stderr.startswith("xmge-opt: error: mgb.elemwise: result types tensor<3xf32> do not match")
    assert r.stderr.count("\n") == 1


def test_print_between_passes() -> None:
    r = opt("-p", "mgb-canonicalize{dce=false},mgb-dce", "--print-between-passes", stdin=SCOPED)
    assert r.code == 0
    between, final = r.stdout.split("\n\n\n\n")
    assert between.startswith("IR after mgb-canonicalize:") and "mgb.elemwise relu" in between
    assert "mgb.reshape" not in between and "mgb.reshape" not in final


def test_mge_frontend_uses_the_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func
    from xdsl.parser import Parser

    from dialects.tensor import Mgb

    seen: list[bytes] = []

    def read_mge(data: bytes):  # type: ignore[no-untyped-def]
        seen.append(data)
        ctx = Context()
        for d in (Builtin, Func, Mgb):
            ctx.load_dialect(d)
        return Parser(ctx, SCOPED).parse_module()

    reader = types.ModuleType("backends.mge.reader")
    reader.read_mge = read_mge  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "backends.mge.reader", reader)
    (tmp_path / "net.mge").write_bytes(b"mgv2\x00fake")
    r = opt(str(tmp_path / "net.mge"), "-p", "mgb-canonicalize")
    assert r.code == 0, r.stderr
    assert seen == [b"mgv2\x00fake"] and "mgb.elemwise relu" in r.stdout and "mgb.reshape" not in r.stdout


def test_mge_frontend_without_reader_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "backends.mge.reader", None)  # import now raises ImportError
    (tmp_path / "net.mge").write_bytes(b"mgv2")
    r = opt(str(tmp_path / "net.mge"))
    assert r.code == 1 and r.stderr.count("\n") == 1
    assert "cannot read .mge files: the MegEngine reader (backends.mge.reader) is unavailable" in r.stderr


def test_console_script_round_trip_with_filecheck() -> None:
    """The installed executables, as lit runs them."""
    cmd = f"{BIN}/xmge-opt {ROUNDTRIP} | {BIN}/xmge-opt | {BIN}/filecheck {ROUNDTRIP}"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_lit_runs_every_filecheck_file() -> None:
    done = subprocess.run([f"{BIN}/lit", "-q", HERE], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr



DIALECT_PLUGIN = '''
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def


@irdl_op_definition
class NoopOp(IRDLOperation):
    name = "{name}.noop"
    x = operand_def(TensorType)
    y = result_def(TensorType)


DIALECT = Dialect("{name}", [NoopOp])
'''


def _install_dialect(directory: Path, module: str, dialect: str) -> None:
    (directory / f"{module}.py").write_text(DIALECT_PLUGIN.replace("{name}", dialect))
    dist = directory / f"{module}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[xmge.dialects]\n{dialect} = {module}:DIALECT\n")


def test_dialect_plugin_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_dialect(tmp_path, "xmge_xq_dialect", "xq")
    monkeypatch.syspath_prepend(str(tmp_path))
    ir = '''
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = "xq.noop"(%x) : (tensor<2xf32>) -> tensor<2xf32>
      func.return %0 : tensor<2xf32>
    }
    '''
    r = opt(stdin=ir)
    assert r.code == 0, r.stderr
    assert '"xq.noop"(%x)' in r.stdout


def test_dialect_plugin_clash_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_dialect(tmp_path, "xmge_mgb_clash", "mgb")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = opt(stdin=SCOPED)
    assert r.code == 1 and r.stderr.count("\n") == 1
    assert "plugin dialect 'mgb' from entry point 'mgb = xmge_mgb_clash:DIALECT'" in r.stderr
    assert "clashes with the dialect 'mgb' from xmge (dialects.tensor)" in r.stderr
