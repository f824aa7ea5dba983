"""Saved packages (``compiler.driver.package``): written atomically, loaded back without a C compiler
(bit-identical), refused when damaged or for another CPU; several input shapes in one package; the
build cache verified before reuse; SIGKILL at random moments during a save and during a compile that
fills the cache (a handful here, 30 each with ``-m slow``)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import compiler as xm
from backends.c.build import CACHE_MANIFEST, RUNTIME_OBJECTS, cache_entry_problem, remove_stale_temporaries
from compiler.driver import package
from compiler.driver.compile import CompiledModel, CompileError, compile
from compiler.driver.demo import randomise_statistics
from compiler.driver.package import (
    MANIFEST,
    PackageError,
    c_identifier,
    load_compiled,
    remove_stale_work,
    sha256_file,
)
from compiler.hub.convnet import ConvNet
from compiler.hub.mini_resnet import MiniResNet
from tests.codegen_util import require

ROOT = Path(__file__).resolve().parents[1]
TARGET = "x86-avx2-nchw88"


def _model(seed: int = 0, cls: type = MiniResNet) -> Any:
    net = cls()
    randomise_statistics(net, np.random.default_rng(seed), spread=0.3)
    return net


def _mini(batch: int = 1, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def net() -> Any:
    require(TARGET)
    return _model()


@pytest.fixture(scope="module")
def mini(net: Any) -> CompiledModel:
    return compile(net, TARGET, [_mini()])


@pytest.fixture(scope="module")
def batches(net: Any) -> CompiledModel:
    return compile(net, TARGET, [_mini()], batch_sizes=[1, 2], name="Mini ResNet-18")


# -- the package and its loader ----------------------------------------------------------------
def test_save_writes_a_complete_package_that_loads_bit_identically(
    mini: CompiledModel, tmp_path: Path
) -> None:
    x = _mini(seed=5)
    want = mini(x)
    out = tmp_path / "pkg"
    assert mini.save(out) == str(out)
    names = set(os.listdir(out))
    assert {
        "libminiresnet.so",
        "weights.bin",
        MANIFEST,
        "model.c",
        "runner",
        "Makefile",
        "CMakeLists.txt",
    } <= names
    assert {"README.md", "kernel.mlir", "xm_runtime.h", "xm_runtime.c"} <= names
    meta = json.loads((out / MANIFEST).read_text())
    assert meta["format"] == "xmge-package" and meta["format_version"] == 1
    assert meta["xmge_version"] == xm.__version__ and meta["name"] == "miniresnet"
    assert meta["target"] == TARGET and {"avx2", "fma"} <= set(meta["cpu_features"])
    assert meta["variants"][0]["inputs"][0]["shape"] == [1, 3, 32, 32]
    assert meta["variants"][0]["outputs"][0]["dtype"] == "float32"
    # every file but the manifest, each with its hash
    listed = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(meta["files"]) == listed
    assert all(meta["files"][f] == sha256_file(str(out / f)) for f in listed)
    model = load_compiled(out)
    assert model.shapes == [((1, 3, 32, 32),)]
    got = model(x)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    # no temporary left beside it
    assert os.listdir(tmp_path) == ["pkg"]


def test_save_replaces_a_package_and_refuses_other_folders(mini: CompiledModel, tmp_path: Path) -> None:
    other = compile(_model(seed=7), TARGET, [_mini()])
    out = tmp_path / "pkg"
    mini.save(out)
    other.save(out)
    x = _mini(seed=2)
    assert np.array_equal(load_compiled(out)(x), other(x))
    assert os.listdir(tmp_path) == ["pkg"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(PackageError, match="not an xmge package.*refusing"):
        mini.save(mine)
    assert (mine / "notes.txt").read_text() == "keep me"


def test_the_x86_package_builds_with_its_makefile(mini: CompiledModel, tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    mini.save(out)
    build = tmp_path / "build"
    shutil.copytree(out, build)
    for f in ("libminiresnet.so", "runner"):
        (build / f).unlink()
    subprocess.run(["make"], cwd=build, check=True, capture_output=True)
    assert (build / "libminiresnet.so").is_file()
    x = _mini(seed=3)
    x.tofile(build / "in0.bin")
    cmd = ["./runner", "weights.bin", "-n", "1", "-i", "in0.bin", "-o", "out0.bin"]
    subprocess.run(cmd, cwd=build, check=True, capture_output=True)
    got = np.fromfile(build / "out0.bin", np.float32).reshape(1, 10)
    np.testing.assert_allclose(got, mini(x), rtol=1e-5, atol=1e-6)
    assert "cmake -B build" in (out / "README.md").read_text()
    assert "add_library(miniresnet SHARED" in (out / "CMakeLists.txt").read_text()


LOAD_SCRIPT = """
import subprocess, sys, numpy as np
def refuse(*a, **k):
    raise AssertionError(f"a process was started: {a[:1]}")
subprocess.Popen = refuse
import compiler as xm
model = xm.load_compiled(sys.argv[1])
np.save(sys.argv[3], model(np.load(sys.argv[2])))
"""


def test_load_in_a_fresh_process_runs_no_compiler(mini: CompiledModel, tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    mini.save(out)
    x = _mini(seed=9)
    np.save(tmp_path / "x.npy", x)
    # a PATH whose compilers only leave a mark, and no process may be started at all
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for cc in ("gcc", "cc", "clang", "aarch64-linux-gnu-gcc"):
        (bin_dir / cc).write_text(f"#!/bin/sh\ntouch {tmp_path}/compiler-ran\nexit 1\n")
        (bin_dir / cc).chmod(0o755)
    env = dict(os.environ, PATH=str(bin_dir), PYTHONPATH=str(ROOT), XMGE_CACHE_DIR=str(tmp_path / "cache"))
    cmd = [sys.executable, "-c", LOAD_SCRIPT, str(out), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]
    subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=tmp_path)
    assert not (tmp_path / "compiler-ran").exists() and not (tmp_path / "cache").exists()
    assert np.array_equal(np.load(tmp_path / "y.npy"), mini(x))


def _damage(out: Path, what: str) -> str:
    """Damage the package at ``out``; the file name the error must give."""
    meta = json.loads((out / MANIFEST).read_text())
    if what == "truncated weights":
        data = (out / "weights.bin").read_bytes()
        (out / "weights.bin").write_bytes(data[: len(data) // 2])
        return "weights.bin"
    if what == "patched library":
        data = bytearray((out / "libminiresnet.so").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (out / "libminiresnet.so").write_bytes(bytes(data))
        return "libminiresnet.so"
    if what == "missing library":
        (out / "libminiresnet.so").unlink()
        return "libminiresnet.so: missing"
    if what == "no manifest":
        (out / MANIFEST).unlink()
        return "model.json: missing"
    if what == "bad manifest":
        (out / MANIFEST).write_text("{not json")
        return "model.json: unreadable"
    if what == "newer format":
        meta["format_version"] = 99
        (out / MANIFEST).write_text(json.dumps(meta))
        return "format version 99"
    if what == "another cpu":
        meta["cpu_features"].append("avx10_9")
        (out / MANIFEST).write_text(json.dumps(meta))
        return "lacks: avx10_9"
    if what == "files outside":
        meta["files"]["../../etc/passwd"] = "0" * 64
        (out / MANIFEST).write_text(json.dumps(meta))
        return "outside the package"
    if what == "arm package":
        meta["target"] = "arm-nchw44-dot"
        (out / MANIFEST).write_text(json.dumps(meta))
        return "arm package"
    raise AssertionError(what)


@pytest.mark.parametrize(
    "what",
    [
        "truncated weights", "patched library", "missing library", "no manifest", "bad manifest",
        "newer format", "another cpu", "arm package", "files outside",
    ],
)  # fmt: skip
def test_a_damaged_or_foreign_package_is_refused_naming_the_file(
    mini: CompiledModel, tmp_path: Path, what: str
) -> None:
    out = tmp_path / "pkg"
    mini.save(out)
    needle = _damage(out, what)
    with pytest.raises(PackageError) as info:
        load_compiled(out)
    message = str(info.value)
    assert needle in message and "\n" not in message, message


def test_the_cli_runs_and_benches_a_package(mini: CompiledModel, tmp_path: Path) -> None:
    from compiler.driver.cli import main

    out = tmp_path / "pkg"
    mini.save(out)
    x = _mini(seed=4)
    np.save(tmp_path / "x.npy", x)
    name = mini.input_names[0]
    assert main(["run", str(out), "-i", f"{name}={tmp_path / 'x.npy'}", "-o", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as z:
        assert np.array_equal(z[mini.output_names[0]], mini(x))
    assert main(["bench", str(out), "--iters", "2"]) == 0
    _damage(out, "truncated weights")
    assert main(["run", str(out), "-i", f"{name}={tmp_path / 'x.npy'}"]) == 1


# -- names and shape variants ------------------------------------------------------------------
def test_names_are_c_identifiers() -> None:
    assert c_identifier("Mini ResNet-18") == "mini_resnet_18"
    assert c_identifier("3x3 net") == "m_3x3_net"
    assert c_identifier("---") == "xmge_model"
    assert c_identifier("a" * 80) == "a" * 64


def test_one_package_holds_several_batch_sizes(batches: CompiledModel, net: Any, tmp_path: Path) -> None:
    assert batches.name == "mini_resnet_18"
    assert batches.shapes == [((1, 3, 32, 32),), ((2, 3, 32, 32),)]
    single = {b: compile(net, TARGET, [_mini(b)]) for b in (1, 2)}
    out = tmp_path / "pkg"
    batches.save(out)
    model = load_compiled(out)
    assert model.shapes == batches.shapes and model.name == "mini_resnet_18"
    for b in (1, 2):
        x = _mini(b, seed=10 + b)
        want = single[b](x)
        assert np.array_equal(batches(x), want) and np.array_equal(model(x), want)
    for m, error in ((batches, CompileError), (model, PackageError)):
        with pytest.raises(error) as info:
            m(_mini(3))
        message = str(info.value)
        assert "(3, 3, 32, 32)" in message and "(1, 3, 32, 32)" in message and "(2, 3, 32, 32)" in message
        assert "\n" not in message


def test_shapes_of_a_mge_file_and_bad_requests(tmp_path: Path) -> None:
    require(TARGET)
    net = _model(cls=ConvNet)
    x = np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32)
    traced = xm.jit.trace(lambda t: net(t), symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    path = tmp_path / "convnet.mge"
    traced.dump(str(path))
    compiled = compile(str(path), TARGET, shapes=[(1, 1, 28, 28), (3, 1, 28, 28)])
    assert compiled.name == "convnet" and len(compiled.shapes) == 2
    x3 = np.random.default_rng(1).standard_normal((3, 1, 28, 28)).astype(np.float32)
    np.testing.assert_allclose(compiled(x3)[1], compiled(x3[1:2])[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(CompileError, match="count and rank"):
        compile(str(path), TARGET, shapes=[(1, 28, 28)])
    with pytest.raises(CompileError, match="not both"):
        compile(str(path), TARGET, shapes=[(1, 1, 28, 28)], batch_sizes=[2])


# -- the build cache ---------------------------------------------------------------------------
def _entries(root: Path) -> list[Path]:
    """The model entries of a cache (not the runtime objects they link: ``rt-<hash>``)."""
    return [p for p in root.iterdir() if p.is_dir() and ".tmp" not in p.name and not p.name.startswith("rt-")]


def _runtime_entries(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir() and ".tmp" not in p.name and p.name.startswith("rt-")]


def test_a_damaged_cache_entry_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require(TARGET)
    monkeypatch.setenv("XMGE_CACHE_DIR", str(tmp_path))
    net, x = _model(cls=ConvNet), np.ones((1, 1, 28, 28), np.float32)
    want = compile(net, TARGET, [x])(x)
    (entry,) = _entries(tmp_path)
    assert cache_entry_problem(str(entry), ("libconvnet.so", "runner")) is None
    assert compile(net, TARGET, [x]).build.cached
    lib = entry / "libconvnet.so"
    # a truncated .so planted in the cache (a new file: this process maps the old one)
    (entry / "cut.so").write_bytes(lib.read_bytes()[:1000])
    os.replace(entry / "cut.so", lib)
    assert "does not match" in str(cache_entry_problem(str(entry), ("libconvnet.so",)))
    again = compile(net, TARGET, [x])
    assert not again.build.cached and np.array_equal(again(x), want)
    (entry / CACHE_MANIFEST).unlink()  # an entry without its record is not trusted either
    assert not compile(net, TARGET, [x]).build.cached
    assert compile(net, TARGET, [x]).build.cached


def test_stale_build_temporaries_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{'0' * 24}.{dead.pid}.tmpabc123"
    live = tmp_path / f"{'1' * 24}.{os.getpid()}.tmpdef456"
    legacy_old, legacy_new = tmp_path / f"{'2' * 24}.abcd1234", tmp_path / f"{'3' * 24}.abcd1234"
    for d in (stale, live, legacy_old, legacy_new):
        d.mkdir()
    old = time.time() - 2 * 3600
    os.utime(legacy_old, (old, old))
    assert sorted(remove_stale_temporaries(str(tmp_path))) == sorted([stale.name, legacy_old.name])
    assert live.is_dir() and legacy_new.is_dir()


# -- SIGKILL at random moments -----------------------------------------------------------------
def _check_package_or_absent(out: Path, x: np.ndarray, answers: list[np.ndarray]) -> str:
    """``out`` holds a complete package of one of the models whose ``answers`` to ``x`` are given (it
    loads and answers as that one does), or nothing."""
    if not out.exists():
        return "absent"
    got = load_compiled(out)(x)
    assert any(np.array_equal(got, want) for want in answers), "a package of neither model"
    return "complete"


def _kill_saves(tmp_path: Path, rounds: int) -> list[str]:
    a = compile(_model(seed=1), TARGET, [_mini()])
    b = compile(_model(seed=2), TARGET, [_mini()])
    x = _mini(seed=8)
    answers = [a(x), b(x)]
    out = tmp_path / "pkg"
    rng = random.Random(1234)
    states = []
    for _ in range(rounds):
        pid = os.fork()
        if pid == 0:  # the writer: saves one model then the other until killed
            try:
                while True:
                    a.save(out)
                    b.save(out)
            finally:
                os._exit(1)
        if not states:  # the first kill waits for a first whole save, however loaded the machine
            deadline = time.monotonic() + 60
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        states.append(_check_package_or_absent(out, x, answers))
        remove_stale_work(str(tmp_path))  # what the next save does first
        assert not [n for n in os.listdir(tmp_path) if ".xmge-" in n]
        _check_package_or_absent(out, x, answers)
    a.save(out)
    assert np.array_equal(load_compiled(out)(x), answers[0])
    return states


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_sigkill_during_save_leaves_a_package_or_none(
    mini: CompiledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    if swap == "two renames":  # a kernel or file system without renameat2(RENAME_EXCHANGE)
        monkeypatch.setattr(package, "_exchange", lambda a, b: False)
    states = _kill_saves(tmp_path, 3)
    assert states.count("complete") >= 1


@pytest.mark.slow
@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_sigkill_during_save_30_times(
    mini: CompiledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    if swap == "two renames":
        monkeypatch.setattr(package, "_exchange", lambda a, b: False)
    _kill_saves(tmp_path, 30)


COMPILE_SCRIPT = """
import sys, numpy as np
from compiler.driver.compile import compile
from compiler.driver.demo import randomise_statistics
from compiler.hub.convnet import ConvNet
net = ConvNet()
randomise_statistics(net, np.random.default_rng(int(sys.argv[1])), spread=0.3)
x = np.ones((1, 1, 28, 28), np.float32)
got = compile(net, "x86-avx2", [x], threads=int(sys.argv[3]))(x)
np.save(sys.argv[2], np.stack([got, compile(net, "ref", [x])(x)]))
"""


def _kill_compiles(tmp_path: Path, rounds: int) -> None:
    """Kill compiles that fill an empty cache at random moments (the process group: gcc too), then
    check every entry left is whole and the next compile gives the right answer."""
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(ROOT), XMGE_CACHE_DIR=str(cache))
    rng = random.Random(99)
    for i in range(rounds):
        # a thread count of its own per round: a new source, so the cache is filled each time
        cmd = [sys.executable, "-c", COMPILE_SCRIPT, "0", str(tmp_path / "y.npy"), str(2 + i)]
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 4.0))
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for entry in _entries(cache) if cache.exists() else []:
            assert cache_entry_problem(str(entry), ("libconvnet.so", "runner")) is None, entry
        for entry in _runtime_entries(cache) if cache.exists() else []:
            assert cache_entry_problem(str(entry), RUNTIME_OBJECTS) is None, entry
    time.sleep(0.5)  # orphaned compiler processes of the group are gone by now
    subprocess.run(
        [sys.executable, "-c", COMPILE_SCRIPT, "0", str(tmp_path / "y.npy"), "2"], env=env, check=True
    )
    got, want = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert not [n for n in os.listdir(cache) if ".tmp" in n]


def test_sigkill_during_a_compile_never_leaves_a_damaged_cache_entry(tmp_path: Path) -> None:
    require("x86-avx2")
    _kill_compiles(tmp_path, 2)


@pytest.mark.slow
def test_sigkill_during_a_compile_30_times(tmp_path: Path) -> None:
    require("x86-avx2")
    _kill_compiles(tmp_path, 30)


# -- MegEngine Lite on packages and variants ---------------------------------------------------
def _convnet_file(tmp_path: Path) -> tuple[Path, Any]:
    net = _model(cls=ConvNet)
    traced = xm.jit.trace(lambda t: net(t), symbolic=True, capture_as_const=True)
    traced(xm.tensor(np.zeros((1, 1, 28, 28), np.float32)))
    path = tmp_path / "convnet.mge"
    traced.dump(str(path))
    return path, net


def _lite_forward(network: Any, x: np.ndarray) -> np.ndarray:
    name = network.get_input_name(0)
    network.get_io_tensor(name).set_data_by_copy(x)
    network.forward()
    return network.get_io_tensor(network.get_output_name(0)).to_numpy()


def test_lite_loads_a_package_and_compiles_known_shapes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import compiler.driver.compile as driver
    from compiler.lite import LiteIO, LiteLayout, LiteNetwork, LiteNetworkIO

    require(TARGET)
    path, _ = _convnet_file(tmp_path)
    x1 = np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32)
    x4 = np.random.default_rng(1).standard_normal((4, 1, 28, 28)).astype(np.float32)
    x2 = x4[:2].copy()
    compiled = compile(str(path), TARGET, shapes=[(1, 1, 28, 28), (2, 1, 28, 28)])
    compiled.save(tmp_path / "pkg")
    lite = LiteNetwork()
    lite.load(str(tmp_path / "pkg"))
    assert np.array_equal(_lite_forward(lite, x1), compiled(x1))
    assert np.array_equal(_lite_forward(lite, x2), compiled(x2))
    with pytest.raises(PackageError, match=r"holds \[\(1, 1, 28, 28\)\], \[\(2, 1, 28, 28\)\]"):
        _lite_forward(lite, x4)
    # with a target, shapes known before load are variants of one compile: no compile at forward
    io = LiteNetworkIO([LiteIO(lite.get_input_name(0), layout=LiteLayout([4, 1, 28, 28], "float32"))])
    net = LiteNetwork(io=io, target=TARGET, shapes=[[(2, 1, 28, 28)]])
    net.load(str(path))

    def no_compile(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("compiled again at forward time")

    monkeypatch.setattr(driver, "compile", no_compile)
    np.testing.assert_array_equal(_lite_forward(net, x1), compiled(x1))
    np.testing.assert_array_equal(_lite_forward(net, x2), compiled(x2))
    np.testing.assert_allclose(_lite_forward(net, x4)[:2], compiled(x2), rtol=1e-5, atol=1e-6)


# -- many threads on one model -----------------------------------------------------------------
def _hammer(model: Any, inputs: list[np.ndarray], wants: list[np.ndarray], threads: int, calls: int) -> int:
    """``threads`` threads each make ``calls`` calls on ``model`` with distinct inputs; how many
    outputs differ (bit for bit) from the single-threaded output for the same input."""
    import threading

    wrong = [0] * threads
    start = threading.Barrier(threads)

    def work(k: int) -> None:
        start.wait()
        for i in range(calls):
            j = (k * 7 + i) % len(inputs)
            if not np.array_equal(model(inputs[j]), wants[j]):
                wrong[k] += 1

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(wrong)


def test_one_model_from_8_threads_is_bit_identical(net: Any, tmp_path: Path) -> None:
    compiled = compile(net, TARGET, [_mini()])  # fresh: its first call loads the library, under a lock
    rng = np.random.default_rng(21)
    inputs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(16)]
    reference = compile(net, TARGET, [_mini()])
    wants = [reference(x) for x in inputs]
    assert _hammer(compiled, inputs, wants, 8, 200) == 0
    compiled.save(tmp_path / "pkg")
    assert _hammer(load_compiled(tmp_path / "pkg"), inputs, wants, 8, 200) == 0


@pytest.mark.slow
def test_resnet50_package_loads_in_well_under_a_second(tmp_path: Path) -> None:
    from compiler.hub.resnet import resnet50

    require(TARGET)
    net = resnet50()
    randomise_statistics(net, np.random.default_rng(0), spread=0.3)
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    compiled = compile(net, TARGET, [x])
    compiled.save(tmp_path / "pkg")
    np.save(tmp_path / "x.npy", x)
    script = LOAD_SCRIPT.replace(
        "model = xm.load_compiled(sys.argv[1])",
        "import time\nt0 = time.perf_counter()\nmodel = xm.load_compiled(sys.argv[1])\n"
        "print(time.perf_counter() - t0)",
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        "-c",
        script,
        str(tmp_path / "pkg"),
        str(tmp_path / "x.npy"),
        str(tmp_path / "y.npy"),
    ]
    proc = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    seconds = float(proc.stdout.split()[-1])
    assert seconds < 0.9, seconds  # 0.3-0.4 s measured on the loaded 2-core machine (112 MiB weights)
    assert np.array_equal(np.load(tmp_path / "y.npy"), compiled(x))


# -- two packages in one C program -------------------------------------------------------------
TWO_MODELS_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "xm_api.h"
XM_DECLARE_API(net_a); /* linked: -lnet_a */

static void* slurp(const char* path, unsigned long* n) {
  FILE* f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  fseek(f, 0, SEEK_END); *n = (unsigned long)ftell(f); fseek(f, 0, SEEK_SET);
  void* p = malloc(*n ? *n : 1);
  if (fread(p, 1, *n, f) != *n) exit(2);
  fclose(f);
  return p;
}

static int run(const xm_api* api, const char* weights, const char* in, const char* out) {
  unsigned long nw, nx;
  void* w = slurp(weights, &nw);
  void* x = slurp(in, &nx);
  xm_model* m = api->create(w, nw, 1, 0);
  free(w);
  if (!m) { fprintf(stderr, "%s: %s\n", api->prefix, api->last_error()); return 1; }
  const xm_variant* v = &api->variants[0];
  if (nx != v->inputs[0].nbytes) return 1;
  void* y = malloc(v->outputs[0].nbytes);
  const void* ins[1] = {x};
  void* outs[1] = {y};
  if (api->run(m, ins, outs)) { fprintf(stderr, "%s\n", api->last_error()); return 1; }
  FILE* f = fopen(out, "wb");
  fwrite(y, 1, v->outputs[0].nbytes, f);
  fclose(f);
  api->destroy(m);
  free(x); free(y);
  return 0;
}

int main(int argc, char** argv) {
  /* argv: pkgA/weights.bin pkgB/libnet_b.so pkgB/weights.bin x.bin ya.bin yb.bin */
  if (argc != 7) return 2;
  void* h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL); /* the other package, found by name */
  const xm_api* b = xm_api_from_handle(h, "net_b");
  if (!b) { fprintf(stderr, "no net_b_api in %s\n", argv[2]); return 1; }
  return run(net_a_api(), argv[1], argv[4], argv[5]) || run(b, argv[3], argv[4], argv[6]);
}
"""


def test_a_c_program_runs_two_saved_packages(net: Any, tmp_path: Path) -> None:
    a = compile(net, TARGET, [_mini()], name="net_a")
    b = compile(_model(seed=3), TARGET, [_mini()], name="net_b")
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    assert (tmp_path / "a" / "libnet_a.so").is_file() and (tmp_path / "b" / "libnet_b.so").is_file()
    (tmp_path / "main.c").write_text(TWO_MODELS_C)
    cmd = [
        "gcc",
        "-O1",
        "main.c",
        "-I",
        "a",
        "-L",
        "a",
        "-lnet_a",
        "-Wl,-rpath,$ORIGIN/a",
        "-ldl",
        "-o",
        "main",
    ]
    subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)
    x = _mini(seed=6)
    x.tofile(tmp_path / "x.bin")
    args = ["./main", "a/weights.bin", "b/libnet_b.so", "b/weights.bin", "x.bin", "ya.bin", "yb.bin"]
    subprocess.run(args, cwd=tmp_path, check=True, capture_output=True)
    for name, model in (("ya.bin", a), ("yb.bin", b)):
        assert np.array_equal(np.fromfile(tmp_path / name, np.float32).reshape(1, 10), model(x)), name


@pytest.mark.slow
def test_resnet18_package_with_batch_1_and_4_at_224(tmp_path: Path) -> None:
    from compiler.hub.resnet import resnet18

    require(TARGET)
    net = resnet18()
    randomise_statistics(net, np.random.default_rng(0), spread=0.3)
    rng = np.random.default_rng(1)
    x4 = rng.standard_normal((4, 3, 224, 224)).astype(np.float32)
    compiled = compile(net, TARGET, [x4[:1]], shapes=[(1, 3, 224, 224), (4, 3, 224, 224)], name="resnet18")
    compiled.save(tmp_path / "pkg")
    model = load_compiled(tmp_path / "pkg")
    y1, y4 = model(x4[:1]), model(x4)
    assert np.array_equal(y1, compiled(x4[:1])) and np.array_equal(y4, compiled(x4))
    want = compile(net, "ref", [x4])(x4)
    np.testing.assert_allclose(y4, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
    np.testing.assert_allclose(y1[0], y4[0], rtol=1e-4, atol=1e-4 * float(np.abs(y4).max()))
    with pytest.raises(PackageError, match=r"holds \[\(1, 3, 224, 224\)\], \[\(4, 3, 224, 224\)\]"):
        model(x4[:2])


def test_xmge_compile_names_the_package(tmp_path: Path) -> None:
    from compiler.driver.cli import main

    require(TARGET)
    path, _ = _convnet_file(tmp_path)
    out = tmp_path / "pkg"
    assert main(["compile", str(path), "--target", TARGET, "-o", str(out), "--name", "My Net"]) == 0
    meta = json.loads((out / MANIFEST).read_text())
    assert meta["name"] == meta["prefix"] == "my_net" and meta["library"] == "libmy_net.so"
    assert (out / "libmy_net.so").is_file() and "-DXM_PREFIX=my_net" in (out / "Makefile").read_text()
    assert main(["compile", str(path), "--target", TARGET, "-o", str(out)]) == 0  # replaced in one step
    assert json.loads((out / MANIFEST).read_text())["name"] == "convnet"
    assert sorted(os.listdir(out.parent)) == ["convnet.mge", "pkg"]


def test_a_failed_save_leaves_the_previous_package(
    mini: CompiledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    out = tmp_path / "pkg"
    mini.save(out)
    other = compile(_model(seed=11), TARGET, [_mini()])

    def full_disk(path: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(package, "_fsync_path", full_disk)  # the disk fills while the files are flushed
    with pytest.raises(OSError, match="No space left"):
        other.save(out)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["pkg"]
    x = _mini(seed=12)
    assert np.array_equal(load_compiled(out)(x), mini(x))
