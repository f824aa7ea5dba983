"""The C build cache compiles the runtime (xm_runtime.c, runner.c) once per flag set and links it into
every model built with those flags; ``$XMGE_OPT_LEVEL`` replaces the optimisation level of a build."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from backends.c.build import (
    OPT_LEVEL_ENV,
    RUNTIME_OBJECTS,
    BuildError,
    LoadedModel,
    build,
    cache_entry_problem,
    with_opt_level,
)
from compiler.driver.compile import compile
from compiler.driver.targets import parse_target, runs_here
from tests.conftest import USER_OPT_LEVEL

MODEL = os.path.join(os.path.dirname(__file__), "data", "convnet", "plain.mge")
TARGET = "x86-avx2"


@pytest.fixture(scope="module")
def convnet() -> tuple[str, tuple[str, ...], bytes, np.ndarray, np.ndarray]:
    """(model.c, cflags, weights, an input, the output) of the golden convnet."""
    if not runs_here(parse_target(TARGET)):
        pytest.skip(f"{TARGET} does not run on this machine")
    m = compile(MODEL, TARGET)
    x = np.random.default_rng(0).standard_normal(m.input_types[0].get_shape()).astype(np.float32)
    return m.source, m.cflags, m.weights, x, m.run([x])[0]


def _variant(source: str, k: int) -> str:
    """``source`` made distinct for the cache (another key, the same symbols and flags)."""
    return f"{source}\n/* variant {k} */\n"


def _runtime_entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.name.startswith("rt-") and ".tmp" not in p.name)


def _model_entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if not p.name.startswith("rt-") and ".tmp" not in p.name)


def _run(b, weights: bytes, x: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    m = LoadedModel(b.library, weights, 1)
    try:
        return m.run([x])[0]
    finally:
        m.close()


def test_models_of_one_flag_set_share_one_runtime_build(
    convnet: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, cflags, weights, x, want = convnet
    monkeypatch.setenv("XMGE_CACHE_DIR", str(tmp_path))
    first = build(_variant(source, 1), cflags)
    (rt,) = _runtime_entries(tmp_path)
    stamps = {o: os.stat(rt / o).st_mtime_ns for o in RUNTIME_OBJECTS}
    second = build(_variant(source, 2), cflags)
    assert not first.cached and not second.cached and first.directory != second.directory
    assert _runtime_entries(tmp_path) == [rt] and len(_model_entries(tmp_path)) == 2
    assert {o: os.stat(rt / o).st_mtime_ns for o in RUNTIME_OBJECTS} == stamps  # not compiled again
    for b in (first, second):
        np.testing.assert_array_equal(_run(b, weights, x), want)
        assert os.access(b.runner, os.X_OK)
    # other flags: a runtime of their own
    build(_variant(source, 1), [*cflags, "-DXM_TEST_FLAG=1"])
    assert len(_runtime_entries(tmp_path)) == 2


def test_a_damaged_runtime_entry_is_rebuilt(
    convnet: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, cflags, weights, x, want = convnet
    monkeypatch.setenv("XMGE_CACHE_DIR", str(tmp_path))
    build(_variant(source, 1), cflags)
    (rt,) = _runtime_entries(tmp_path)
    (rt / "cut.o").write_bytes((rt / "xm_runtime.o").read_bytes()[:100])
    os.replace(rt / "cut.o", rt / "xm_runtime.o")
    assert cache_entry_problem(str(rt), RUNTIME_OBJECTS) is not None
    b = build(_variant(source, 2), cflags)
    assert cache_entry_problem(str(rt), RUNTIME_OBJECTS) is None
    np.testing.assert_array_equal(_run(b, weights, x), want)


def test_concurrent_first_builds_share_the_runtime(
    convnet: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Builds racing into an empty cache (as pytest-xdist workers do) all succeed and leave one whole
    runtime entry and no temporaries."""
    source, cflags, weights, x, want = convnet
    monkeypatch.setenv("XMGE_CACHE_DIR", str(tmp_path))
    builds: dict[int, object] = {}
    errors: list[BaseException] = []

    def one(k: int) -> None:
        try:
            builds[k] = build(_variant(source, k), cflags)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    (rt,) = _runtime_entries(tmp_path)
    assert cache_entry_problem(str(rt), RUNTIME_OBJECTS) is None
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]
    for b in builds.values():
        np.testing.assert_array_equal(_run(b, weights, x), want)


def test_opt_level_override(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ["-O3", "-std=gnu11", "-mavx2", "-O2"]
    monkeypatch.delenv(OPT_LEVEL_ENV, raising=False)
    assert with_opt_level(flags) == flags
    monkeypatch.setenv(OPT_LEVEL_ENV, "-O1")
    assert with_opt_level(flags) == ["-O1", "-std=gnu11", "-mavx2"]
    assert with_opt_level(["-mavx2"]) == ["-O1", "-mavx2"]
    monkeypatch.setenv(OPT_LEVEL_ENV, "-O9")
    with pytest.raises(BuildError, match=r"\$XMGE_OPT_LEVEL='-O9' is not one of -O0, -O1"):
        with_opt_level(flags)


def test_sanitizer_builds_keep_their_level(
    convnet: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, cflags, weights, x, want = convnet
    monkeypatch.setenv("XMGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(OPT_LEVEL_ENV, "-O1")
    first = build(source, cflags, sanitize=True)
    monkeypatch.setenv(OPT_LEVEL_ENV, "-O3")
    assert build(source, cflags, sanitize=True).directory == first.directory  # one build: -O1 both


def test_opt_level_is_part_of_the_cache_key(
    convnet: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, cflags, weights, x, want = convnet
    monkeypatch.setenv("XMGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(OPT_LEVEL_ENV, "-O0")
    b0 = build(source, cflags)
    monkeypatch.setenv(OPT_LEVEL_ENV, "-O1")
    b1 = build(source, cflags)
    assert not b1.cached and b0.directory != b1.directory
    assert len(_runtime_entries(tmp_path)) == 2
    np.testing.assert_allclose(_run(b0, weights, x), want, rtol=1e-5, atol=1e-5)
    assert build(source, cflags).cached


@pytest.mark.opt_level("-O2")
def test_a_marker_sets_the_level_of_a_test() -> None:
    assert os.environ.get(OPT_LEVEL_ENV) == (USER_OPT_LEVEL or "-O2")


def test_model_level_files_build_at_O1() -> None:
    """tests/conftest.py: files outside FULL_OPT_FILES (this one) build at -O1, kernel-level ones at
    the emitter's -O3."""
    assert os.environ.get(OPT_LEVEL_ENV) == (USER_OPT_LEVEL or "-O1")
