"""The code base stays ruff clean (the rules are in pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_check_is_clean() -> None:
    ruff = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the test extra)")
    folders = [
        d
        for d in ("compiler", "dialects", "passes", "backends", "tests", "bench")
        if os.path.isdir(os.path.join(ROOT, d))
    ]
    result = subprocess.run(
        [ruff, "check", "--output-format", "concise", *folders], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
