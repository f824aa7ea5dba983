from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator

import numpy as np
import pytest

from backends.c.build import OPT_LEVEL_ENV

DATA = os.path.join(os.path.dirname(__file__), "data")

# Most of the suite's time is gcc on generated whole-model C, built to check the answers, not the
# optimiser's view of a kernel: those builds run at -O1 (about half of -O3's gcc time on a model.c,
# the same ISA flags). The files below test kernels, the runtime or speed, where -O3's code (its
# vectorisation, its FMA contraction) is what ships, and keep the emitter's -O3; a module or test
# can also say so itself with ``@pytest.mark.opt_level("-O3")`` (or any level). A level set in the
# environment when the run starts (``XMGE_OPT_LEVEL=-O3 make test``) holds for every test instead.
CORRECTNESS_OPT_LEVEL = "-O1"
USER_OPT_LEVEL = os.environ.get(OPT_LEVEL_ENV)
FULL_OPT_FILES = (
    "test_x86_*.py",
    "test_arm_*.py",
    "test_codegen_*.py",
    "test_kernel_conformance.py",  # the per-unit harness: each kernel unit's -O3 build (PLAN.md section 4)
    "test_int8_kernels_exact.py",
    "test_int8_rounding.py",
    "test_epilogue_fusion.py",
    "test_op_examples.py",
    "test_runtime_reentrant.py",
    "test_runtime_link.py",
    "test_threads_adapt.py",
    "test_tuning.py",
)


def opt_level(node: pytest.Item | pytest.Collector) -> str | None:
    """The ``$XMGE_OPT_LEVEL`` a test or module builds at: its ``opt_level`` marker, else -O1 unless its
    file is a kernel-level one (``None``: the emitter's flags, -O3)."""
    marker = node.get_closest_marker("opt_level")
    if marker is not None:
        return marker.args[0] if marker.args else None
    name = os.path.basename(str(node.path))
    if any(fnmatch.fnmatch(name, pattern) for pattern in FULL_OPT_FILES):
        return None
    return CORRECTNESS_OPT_LEVEL


def _set_opt_level(level: str | None) -> str | None:
    old = os.environ.get(OPT_LEVEL_ENV)
    if USER_OPT_LEVEL is not None:
        return old
    if level is None:
        os.environ.pop(OPT_LEVEL_ENV, None)
    else:
        os.environ[OPT_LEVEL_ENV] = level
    return old


# module scope, so module-scoped fixtures (the builds most files share) see the module's level;
# autouse fixtures are set up before the other fixtures of their scope
@pytest.fixture(autouse=True, scope="module")
def _module_opt_level(request: pytest.FixtureRequest) -> Iterator[None]:
    old = _set_opt_level(opt_level(request.node))
    yield
    _set_opt_level(old)


@pytest.fixture(autouse=True)
def _test_opt_level(request: pytest.FixtureRequest) -> Iterator[None]:
    old = _set_opt_level(opt_level(request.node))
    yield
    _set_opt_level(old)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def data_path(*parts: str) -> str:
    return os.path.join(DATA, *parts)
