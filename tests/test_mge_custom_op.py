"""``megengine.core.ops.custom.load``: loading a compiled library runs its code, so xmge does it only
on an explicit opt-in, and says in one line why a library registers no operator (xmge does not
implement MegEngine's C++ custom-op API). Libraries are built here with gcc; each has a constructor
that leaves a marker file, which shows whether its code ran."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from compiler.core.ops import custom
from compiler.core.ops.custom import CustomOpError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

PLAIN = """
#include <stdio.h>
__attribute__((constructor)) static void ran(void) { FILE* f = fopen(MARKER, "w"); if (f) fclose(f); }
int answer(void) { return 42; }
"""
# what a CUSTOM_OP_REG library references: MegEngine's custom::CustomOp (libmegengine_shared)
MEGENGINE_STYLE = (
    PLAIN
    + """
extern void _ZN6custom8CustomOpC1ERKSsj(void* self, const void* name, unsigned version);
void register_op(void* self) { _ZN6custom8CustomOpC1ERKSsj(self, 0, 1); }
"""
)


def _build(tmp_path: str, name: str, source: str) -> tuple[str, str]:
    marker = os.path.join(tmp_path, name + ".ran")
    src, lib = os.path.join(tmp_path, name + ".c"), os.path.join(tmp_path, name + ".so")
    with open(src, "w") as f:
        f.write(f'#define MARKER "{marker}"\n' + source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True, capture_output=True)
    return lib, marker


def test_no_code_runs_without_the_opt_in(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(custom.ENV_OPT_IN, raising=False)
    lib, marker = _build(tmp_path, "plain", PLAIN)
    with pytest.raises(CustomOpError, match="runs its code; pass allow_code=True"):
        custom.load(lib)
    assert not os.path.exists(marker)
    assert isinstance(CustomOpError("x"), RuntimeError)


def test_megengine_api_library_is_refused_before_it_runs(tmp_path: str) -> None:
    lib, marker = _build(tmp_path, "mge_style", MEGENGINE_STYLE)
    with pytest.raises(CustomOpError, match="MegEngine's C\\+\\+ custom-op API"):
        custom.load(lib, allow_code=True)
    assert not os.path.exists(marker)


def test_opted_in_library_runs_and_registers_nothing(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lib, marker = _build(tmp_path, "plain", PLAIN)
    monkeypatch.setenv(custom.ENV_OPT_IN, "1")
    with pytest.raises(CustomOpError, match="registers no custom operator"):
        custom.load(lib)
    assert os.path.exists(marker)  # the opt-in did let its code run


def test_missing_or_broken_libraries_name_the_file(tmp_path: str) -> None:
    with pytest.raises(CustomOpError, match="no such library .*absent.so"):
        custom.load(os.path.join(tmp_path, "absent.so"), allow_code=True)
    broken = os.path.join(tmp_path, "broken.so")
    with open(broken, "wb") as f:
        f.write(b"not an ELF file")
    with pytest.raises(CustomOpError, match="cannot load .*broken.so"):
        custom.load(broken, allow_code=True)
