"""In CI the ARM tests must run, not skip: CI installs the cross compiler and qemu (``make
toolchains``), so a missing tool there is a broken CI image, not a reason to skip silently.

Outside CI (``CI`` unset or not ``true``) the ARM tests skip with the reason, as ``make test``'s
``-rs`` summary shows.
"""

from __future__ import annotations

import os

import pytest

from backends.c.cross import toolchain_problem

# the sysroot gcc-aarch64-linux-gnu brings; qemu needs it to run dynamically linked binaries
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def test_ci_has_the_arm_toolchain() -> None:
    if not in_ci():
        pytest.skip("not a CI run (CI != true): ARM tests may skip where the toolchain is missing")
    problem = toolchain_problem()
    assert problem is None, f"CI=true but the ARM tests would skip: {problem}"
    assert os.path.isdir(AARCH64_SYSROOT), f"CI=true but there is no aarch64 sysroot at {AARCH64_SYSROOT}"
