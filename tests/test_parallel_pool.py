"""The runtime's own OpenMP thread pool (``backends/c/runtime/xm_parallel.c``, issue 33): a model library
serves its kernels' parallel regions itself (no libgomp, the entry points bound inside the library);
barrier-free regions run by late join (the caller takes over shares no worker started) and regions
with barriers as gangs; outputs are those of one thread bit for bit whatever the wait policy, on one
usable CPU, after fork, and with several caller threads (under ThreadSanitizer)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import compiler.functional as F
from backends.c.build import RUNTIME_DIR, runtime_sources
from compiler.tensor import Tensor
from tests.codegen_util import compile_fn, require
from tests.test_runtime_reentrant import C_THREADS

TARGET = "x86-avx512-nchw88"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model(rng: np.random.Generator) -> tuple[object, list[np.ndarray]]:
    """Regions with barriers (a padded dense 3x3 convolution: copy, then compute; a Winograd one:
    three steps) and without (1x1, depthwise, the input's relayout to NCHW88: above
    RELAYOUT_MIN_PARALLEL), each
    large enough for two threads."""
    w1 = (rng.standard_normal((40, 24, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((56, 40, 3, 3)) * 0.2).astype(np.float32)
    w3 = (rng.standard_normal((64, 56, 1, 1)) * 0.2).astype(np.float32)
    w4 = (rng.standard_normal((64, 1, 1, 3, 3)) * 0.2).astype(np.float32)

    def f(x: Tensor) -> Tensor:
        y = F.relu(F.conv2d(x, Tensor(w1), padding=1, stride=2))
        y = F.relu(F.conv2d(y, Tensor(w2), padding=1))
        y = F.relu(F.conv2d(y, Tensor(w3)))
        return F.conv2d(y, Tensor(w4), padding=1, groups=64)

    return f, [rng.standard_normal((1, 24, 80, 72)).astype(np.float32)]


@pytest.fixture(scope="module")
def built():  # type: ignore[no-untyped-def]
    require(TARGET)
    fn, inputs = _model(np.random.default_rng(33))
    one = compile_fn(fn, inputs, TARGET, threads=1)
    two = compile_fn(fn, inputs, TARGET, threads=2)
    return one, two, inputs, one.run(inputs)[0]


def test_library_serves_openmp_itself(built) -> None:  # type: ignore[no-untyped-def]
    _, two, _, _ = built
    lib = two.build.library
    assert "GOMP_barrier" in two.source or "#pragma omp parallel" in two.source
    dynamic = subprocess.run(["nm", "-D", lib], capture_output=True, text=True, check=True).stdout
    assert not [line for line in dynamic.splitlines() if "omp" in line.lower()], dynamic
    needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    assert "gomp" not in needed
    local = subprocess.run(["nm", lib], capture_output=True, text=True, check=True).stdout.split()
    for sym in ("GOMP_parallel", "GOMP_barrier", "omp_get_thread_num", "omp_get_num_threads"):
        assert sym in local


SCRIPT = """
import os, sys
sys.path.insert(0, {root!r})
import numpy as np
from backends.c.build import LoadedModel
w = open({weights!r}, "rb").read()
x = np.load({x!r})
want = np.load({want!r})
{setup}
m = LoadedModel({lib!r}, w, 2)
for _ in range(60):
    assert np.array_equal(m.run([x])[0], want)
{after}
print("ok")
"""


def _run_script(tmp_path, two, inputs, want, *, setup: str = "", after: str = "", env=None):  # type: ignore[no-untyped-def]
    (tmp_path / "w.bin").write_bytes(two.weights)
    np.save(tmp_path / "x.npy", inputs[0])
    np.save(tmp_path / "want.npy", want)
    script = SCRIPT.format(
        root=ROOT, weights=str(tmp_path / "w.bin"), x=str(tmp_path / "x.npy"),
        want=str(tmp_path / "want.npy"), lib=two.build.library, setup=textwrap.dedent(setup),
        after=textwrap.dedent(after),
    )  # fmt: skip
    env = {**os.environ, "XMGE_ADAPT_THREADS": "0", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("spin_us", ["0", "5", "3000"])
def test_outputs_identical_whatever_the_wait(built, tmp_path, spin_us: str) -> None:  # type: ignore[no-untyped-def]
    """XMGE_SPIN_US=0: every wait sleeps on the futex at once (the wake-up paths); 3000: the default."""
    _, two, inputs, want = built
    _run_script(tmp_path, two, inputs, want, env={"XMGE_SPIN_US": spin_us})


def test_two_threads_on_one_usable_cpu(built, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Both threads on CPU 0 (taskset-like): the caller takes over the shares the worker cannot start,
    and the run finishes with the same bits."""
    _, two, inputs, want = built
    _run_script(tmp_path, two, inputs, want, setup="os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})")


def test_forked_child_runs_the_model(built, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The child has none of the parent's workers: its pool starts afresh."""
    _, two, inputs, want = built
    after = """
    pid = os.fork()
    if pid == 0:
        ok = all(np.array_equal(m.run([x])[0], want) for _ in range(20))
        os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0
    """
    _run_script(tmp_path, two, inputs, want, after=after)


def _stats_library(two, tmp_path) -> str:  # type: ignore[no-untyped-def]
    """The model rebuilt with the pool's diagnostic counters (XM_PARALLEL_STATS)."""
    for name, text in {"model.c": two.source, **runtime_sources()}.items():
        (tmp_path / name).write_text(text)
    lib = tmp_path / f"lib{two.build.symbols}.so"
    cmd = [
        "gcc", *two.cflags, f"-DXM_PREFIX={two.build.symbols}", "-DXM_PARALLEL_STATS", "-shared", "model.c",
        "xm_runtime.c", "xm_parallel.c", "-o", str(lib), "-pthread", "-lm",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(lib)


def test_late_join_and_gang_regions(built, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A region is a gang until a run of it called no barrier; from then on it runs by late join,
    and one with barriers stays a gang."""
    from backends.c.build import LoadedModel

    _, two, inputs, want = built
    monkeypatch.setenv("XMGE_ADAPT_THREADS", "0")
    lib = _stats_library(two, tmp_path)
    m = LoadedModel(lib, two.weights, 2)
    stats = ctypes.CDLL(lib).xm_parallel_stats
    buf = (ctypes.c_long * 6)()
    np.testing.assert_array_equal(m.run(inputs)[0], want)
    stats(buf, 6)
    first = list(buf)  # serial, late, gang, taken, short, barriers
    assert first[1] == 0 and first[2] >= 4, first  # nothing known yet: every region a gang
    regions = first[1] + first[2]
    # a region learns it has no barrier from a run on two threads (on a busy machine a gang may get
    # one): run until the three barrier-free regions (1x1, depthwise, relayout) run by late join
    for _ in range(300):
        np.testing.assert_array_equal(m.run(inputs)[0], want)
        stats(buf, 6)
        run = list(buf)
        assert run[1] + run[2] == regions, (first, run)
        if run[1] >= 3:
            break
    assert run[1] == 3 and run[2] == regions - 3, run  # the barrier regions (3x3 dense, Winograd) stay gangs
    m.close()


def test_c_callers_on_a_two_thread_instance_under_thread_sanitizer(built, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """4 C threads call one instance created with 2 threads: one caller's regions use the pool,
    the others' run on their callers; ThreadSanitizer sees no race."""
    _, two, _, _ = built
    for name, text in {"model.c": two.source, **runtime_sources()}.items():
        (tmp_path / name).write_text(text)
    program = C_THREADS.replace("xm_create(w, (unsigned long)n, 1,", "xm_create(w, (unsigned long)n, 2,")
    assert program != C_THREADS
    (tmp_path / "callers.c").write_text(program)
    flags = [f for f in two.cflags if f != "-O3"] + ["-O1", "-g", "-fsanitize=thread"]
    cmd = [
        "gcc", *flags, f"-DXM_PREFIX={two.build.symbols}", "-DCALLS=15", "-DCHECK=1", f"-I{RUNTIME_DIR}",
        "model.c", "xm_runtime.c", "xm_parallel.c", "callers.c", "-o", "callers", "-pthread", "-lm",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (tmp_path / "w.bin").write_bytes(two.weights)
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1 exitcode=66", XMGE_ADAPT_THREADS="0")
    run = subprocess.run(
        [str(tmp_path / "callers"), str(tmp_path / "w.bin"), "4", "0"], capture_output=True, text=True,
        env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert "WARNING: ThreadSanitizer" not in run.stderr
    assert "bad 0" in run.stdout


DLCLOSE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "xm_api.h"

int main(int argc, char** argv) {
  FILE* f = fopen(argv[2], "rb");
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* w = malloc(n ? n : 1);
  if (fread(w, 1, n, f) != (size_t)n) return 2;
  fclose(f);
  float* first = NULL;
  for (int round = 0; round < 3; ++round) {
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    const xm_api* api = ((xm_api_fn)dlsym(h, argv[3]))();
    const xm_variant* v = &api->variants[0];
    float* in = calloc(1, v->inputs[0].nbytes);
    float* out = malloc(v->outputs[0].nbytes);
    for (unsigned long i = 0; i < v->inputs[0].nbytes / 4; ++i) in[i] = (float)(i % 13) * 0.1f - 0.6f;
    xm_model* m = api->create(w, (unsigned long)n, 2, 0);
    const void* ins[1] = {in};
    void* outs[1] = {out};
    for (int k = 0; k < 20; ++k) if (api->run(m, ins, outs)) return 3;
    if (!first) { first = malloc(v->outputs[0].nbytes); memcpy(first, out, v->outputs[0].nbytes); }
    else if (memcmp(first, out, v->outputs[0].nbytes)) return 4;
    api->destroy(m);
    free(in);
    free(out);
    dlclose(h);  /* the pool's destructor joins its workers before the code goes */
  }
  printf("ok\n");
  return 0;
}
"""


def test_dlopen_run_dlclose_cycles(built, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A library unloaded after 2-thread runs and loaded again, three times: no worker is left
    running unmapped code."""
    _, two, _, _ = built
    (tmp_path / "main.c").write_text(DLCLOSE_C)
    (tmp_path / "w.bin").write_bytes(two.weights)
    proc = subprocess.run(
        ["gcc", "-O1", f"-I{RUNTIME_DIR}", "main.c", "-o", "main", "-ldl"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, XMGE_ADAPT_THREADS="0")
    run = subprocess.run(
        [str(tmp_path / "main"), two.build.library, str(tmp_path / "w.bin"), f"{two.build.symbols}_api"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
