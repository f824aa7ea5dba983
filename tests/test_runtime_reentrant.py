"""The C runtime is per instance and reentrant (issue 26): one loaded model called from many threads at
once gives, for every input, the single-threaded answer bit for bit (in Python through ctypes, which
releases the GIL, and from a C program with pthreads under ThreadSanitizer); an index error in one
call never fails another; inputs are taken without silent conversions; one library holds several
shape variants and picks one by the inputs' shapes."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Sequence

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.c.backend import X86
from backends.c.build import (
    RUNTIME_DIR,
    Build,
    InputError,
    LoadedModel,
    RunError,
    build,
    checked_input,
    pack_weights,
    runtime_sources,
)
from compiler.driver.compile import CompiledModel
from passes.lowering.plan import weights_blob
from tests.codegen_util import compile_fn, require

TARGET = "x86-avx2"


def resnet_fn(rng: np.random.Generator, c: int = 8, classes: int = 10) -> Callable[..., object]:
    """A small ResNet: a 3x3 stem, two basic blocks (the second strided, with a 1x1 projection),
    global average pooling and a linear head."""

    def conv(ic: int, oc: int, k: int) -> tuple[object, object]:
        w = rng.standard_normal((oc, ic, k, k)).astype(np.float32) / np.sqrt(ic * k * k)
        return xm.tensor(w), xm.tensor(rng.standard_normal((1, oc, 1, 1)).astype(np.float32) * 0.1)

    stem, a1, a2 = conv(3, c, 3), conv(c, c, 3), conv(c, c, 3)
    b1, b2, proj = conv(c, 2 * c, 3), conv(2 * c, 2 * c, 3), conv(c, 2 * c, 1)
    head_w = xm.tensor(rng.standard_normal((classes, 2 * c)).astype(np.float32) / np.sqrt(2 * c))
    head_b = xm.tensor(rng.standard_normal((classes,)).astype(np.float32))

    def fn(x):  # type: ignore[no-untyped-def]
        y = F.relu(F.conv2d(x, *stem, padding=1))
        z = F.relu(F.conv2d(y, *a1, padding=1))
        y = F.relu(F.conv2d(z, *a2, padding=1) + y)
        z = F.relu(F.conv2d(y, *b1, stride=2, padding=1))
        y = F.relu(F.conv2d(z, *b2, padding=1) + F.conv2d(y, *proj, stride=2))
        y = F.flatten(F.adaptive_avg_pool2d(y, (1, 1)), 1)
        return F.linear(y, head_w, head_b)

    return fn


def compile_variants(
    fn: Callable[..., object], example_inputs: Sequence[Sequence[np.ndarray]], prefix: str, threads: int = 1
) -> tuple[Build, bytes, list[CompiledModel]]:
    """One library of prefix ``prefix`` holding a variant of ``fn`` per example input list; its build,
    the packed weights blob and the single-variant compiled models."""
    compiled = [compile_fn(fn, list(inputs), TARGET, threads) for inputs in example_inputs]
    modules = [c.final_module() for c in compiled]
    blob, offsets = pack_weights([weights_blob(m) for m in modules])
    source, cflags = X86.emit(compiled[0].target, modules, prefix=prefix, weights_offsets=offsets)
    return build(source, cflags), blob, compiled


@pytest.fixture(scope="module")
def resnet() -> tuple[Build, bytes, CompiledModel]:
    require(TARGET)
    fn = resnet_fn(np.random.default_rng(26))
    b, blob, (compiled,) = compile_variants(fn, [[np.zeros((1, 3, 16, 16), np.float32)]], "rn_reentrant")
    return b, blob, compiled


def _distinct_inputs(n: int, shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def test_library_is_named_after_its_prefix_and_exports_only_prefixed_symbols(resnet) -> None:  # type: ignore[no-untyped-def]
    b, _, _ = resnet
    assert os.path.basename(b.library) == "librn_reentrant.so" and b.symbols == "rn_reentrant"
    nm = subprocess.run(["nm", "-D", "--defined-only", b.library], capture_output=True, text=True, check=True)
    names = [line.split()[-1] for line in nm.stdout.splitlines() if line.split()[-2] in "TDBRV"]
    foreign = [n for n in names if not n.startswith("rn_reentrant_") and n not in ("_init", "_fini")]
    assert not foreign, foreign
    assert {"rn_reentrant_api", "rn_reentrant_run", "rn_reentrant_create", "rn_reentrant_desc"} <= set(names)


def test_8_python_threads_x_200_calls_match_single_threaded(resnet) -> None:  # type: ignore[no-untyped-def]
    """Was issue 26: every call shared the instance's one arena, so concurrent calls (ctypes releases
    the GIL) overwrote each other's activations: 95 wrong results in 1,000 calls from 2 threads."""
    b, blob, _ = resnet
    model = LoadedModel(b.library, blob, 1)
    threads, calls = 8, 200
    inputs = _distinct_inputs(threads * calls, (1, 3, 16, 16), 1)
    want = [model.run([x])[0] for x in inputs]
    assert model.num_arenas() == 1  # one caller: the arena allocated by create, nothing more
    mismatches: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def worker(t: int) -> None:
        try:
            start.wait()
            for k in range(t, threads * calls, threads):
                if not np.array_equal(model.run([inputs[k]])[0], want[k]):
                    mismatches.append(k)
        except BaseException as exc:  # reported below, on the main thread
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert not errors, errors[0]
    assert not mismatches, f"{len(mismatches)} of {threads * calls} concurrent results differ"
    assert 1 <= model.num_arenas() <= threads
    model.close()


def test_serialised_instance_is_also_correct(resnet) -> None:  # type: ignore[no-untyped-def]
    """max_arenas=1: the instance runs one call at a time, the others wait (never share the arena)."""
    b, blob, _ = resnet
    model = LoadedModel(b.library, blob, 1, max_arenas=1)
    inputs = _distinct_inputs(64, (1, 3, 16, 16), 2)
    want = [model.run([x])[0] for x in inputs]
    got: dict[int, np.ndarray] = {}

    def worker(t: int) -> None:
        for k in range(t, len(inputs), 4):
            got[k] = model.run([inputs[k]])[0]

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert all(np.array_equal(got[k], want[k]) for k in range(len(inputs)))
    assert model.num_arenas() == 1


ONE_HOT_ROWS = 34000  # above the 32768 elements from which the one-hot kernel runs on OpenMP threads


def _one_hot_model() -> tuple[Callable[..., object], list[np.ndarray]]:
    rng = np.random.default_rng(5)
    w = xm.tensor(rng.standard_normal((1, 4)).astype(np.float32))

    def fn(x, idx):  # type: ignore[no-untyped-def]
        y = F.relu(x * w)
        return F.indexing_one_hot(y, idx, axis=1) + F.sum(y, axis=1)

    x = rng.standard_normal((ONE_HOT_ROWS, 4)).astype(np.float32)
    idx = rng.integers(0, 4, (ONE_HOT_ROWS,)).astype(np.int32)
    return fn, [x, idx]


@pytest.fixture(scope="module")
def one_hot() -> tuple[LoadedModel, list[np.ndarray]]:
    require(TARGET)
    fn, inputs = _one_hot_model()
    b, blob, _ = compile_variants(fn, [inputs], "onehot_reentrant", threads=2)
    with open(os.path.join(b.directory, "model.c")) as f:
        source = f.read()
    # the kernel that fails runs in a parallel region: the failure is met on an OpenMP worker
    assert f"num_threads(nt) if(nt > 1 && {ONE_HOT_ROWS} > 32768)" in source
    return LoadedModel(b.library, blob, 2), inputs


def test_index_error_in_one_thread_never_fails_another(one_hot) -> None:  # type: ignore[no-untyped-def]
    """Was issue 26: the run-failure flag was process-wide, so an out-of-range index in one thread made
    a good call in another raise RunError. Now the flag lives in each call's context, which reaches
    the kernels' OpenMP threads."""
    model, (x, idx) = one_hot
    bad = idx.copy()
    bad[ONE_HOT_ROWS - 7] = 40  # in the second half of the rows: the second OpenMP thread's share
    want = model.run([x, idx])[0]
    with pytest.raises(
        RunError, match=r"indexing_one_hot\w*: index 40 is out of range for an axis of size 4"
    ):
        model.run([x, bad])
    problems: list[str] = []

    def good_caller() -> None:
        for _ in range(150):
            try:
                if not np.array_equal(model.run([x, idx])[0], want):
                    problems.append("a good call gave a different answer")
            except RunError as exc:
                problems.append(f"a good call failed: {exc}")

    def bad_caller() -> None:
        for _ in range(150):
            try:
                model.run([x, bad])
                problems.append("a bad call did not fail")
            except RunError as exc:
                if "index 40" not in str(exc):
                    problems.append(f"a bad call failed for another reason: {exc}")

    pool = [threading.Thread(target=f) for f in (good_caller, bad_caller, good_caller, bad_caller)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert not problems, problems[:3]


def test_inputs_are_not_silently_converted(one_hot) -> None:  # type: ignore[no-untyped-def]
    model, (x, idx) = one_hot
    want = model.run([x, idx])[0]
    # lossless: a Python int list, int64 in range, float64 (rounded to float32 like astype)
    assert np.array_equal(model.run([x.astype(np.float64), idx.tolist()])[0], want)
    assert np.array_equal(model.run([x, idx.astype(np.int64)])[0], want)
    big = idx.astype(np.int64)
    big[3] = 2**32 + 1  # would wrap to 1, a valid index: a silently wrong answer
    with pytest.raises(InputError, match=r"input \w+: values in \[\d+, 4294967297\] do not fit .*int32"):
        model.run([x, big])
    with pytest.raises(InputError, match=r"input \w+: float values \(float64\) given for a int32 input"):
        model.run([x, idx + 0.7])
    with pytest.raises(InputError, match="must have shape"):
        model.run([x[:3], idx])
    with pytest.raises(InputError, match="overflow its storage dtype float32"):
        model.run([np.full(x.shape, 1e300), idx])
    with pytest.raises(InputError, match="takes 2 inputs, got 1"):
        model.run([x])


def test_checked_input_rules() -> None:
    i8, f32 = np.dtype(np.int8), np.dtype(np.float32)
    q = checked_input("q", np.array([[1.0, -3.0]], np.float32), i8, quantized=True)
    assert q.dtype == i8 and q.tolist() == [[1, -3]]
    with pytest.raises(InputError, match="input q: non-integral values given for a quantized"):
        checked_input("q", np.array([1.5], np.float32), i8, quantized=True)
    with pytest.raises(InputError, match=r"input q: values in \[1, 300\] do not fit its storage dtype int8"):
        checked_input("q", np.array([1.0, 300.0]), i8, quantized=True)
    with pytest.raises(InputError, match="input b: values other than 0 and 1"):
        checked_input("b", np.array([0, 2]), np.dtype(bool))
    assert checked_input("b", [1, 0], np.dtype(bool)).tolist() == [True, False]
    with pytest.raises(InputError, match="not all exactly representable"):
        checked_input("x", np.array([2**24 + 1]), f32)
    t = checked_input("x", np.arange(6, dtype=np.float32).reshape(2, 3).T, f32)  # a strided view: copied
    assert t.flags.c_contiguous and t.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert checked_input("s", np.float64(2.5), f32).shape == ()
    with pytest.raises(InputError, match="cannot take complex128 values as float32"):
        checked_input("c", np.array([1j]), f32)


def test_zero_dim_input_keeps_its_shape() -> None:
    """``np.ascontiguousarray`` makes a 0-d array 1-d: a scalar input was refused."""
    require(TARGET)
    rng = np.random.default_rng(3)

    def fn(x, s):  # type: ignore[no-untyped-def]
        return x * s + s

    x, s = rng.standard_normal((4, 8)).astype(np.float32), np.array(1.5, np.float32)
    b, blob, (compiled,) = compile_variants(fn, [[x, s]], "scalar_in")
    model = LoadedModel(b.library, blob, 1)
    assert model.inputs[1][1] == ()
    got = model.run([x, s])[0]
    np.testing.assert_allclose(got, x * s + s, rtol=1e-6)
    np.testing.assert_array_equal(model.run([x, 1.5])[0], got)  # a Python float, 0-d
    np.testing.assert_array_equal(compiled.run([x, s])[0], got)


def test_one_library_two_shape_variants() -> None:
    require(TARGET)
    fn = resnet_fn(np.random.default_rng(7))
    shapes = [(1, 3, 16, 16), (4, 3, 16, 16)]
    b, blob, compiled = compile_variants(fn, [[np.zeros(s, np.float32)] for s in shapes], "rn_variants")
    model = LoadedModel(b.library, blob, 1)
    assert [v.inputs[0][1] for v in model.variants] == shapes
    for s, single in zip(shapes, compiled, strict=True):
        x = _distinct_inputs(1, s, sum(s))[0]
        np.testing.assert_array_equal(model.run([x])[0], single.run([x])[0])
    with pytest.raises(
        InputError,
        match=r"no compiled variant for input shapes \(2,3,16,16\); "
        r"this library holds \(1,3,16,16\), \(4,3,16,16\)$",
    ):
        model.run([np.zeros((2, 3, 16, 16), np.float32)])
    # each variant's slice of the blob is that variant's own weights
    for v, single in zip(model.variants, compiled, strict=True):
        assert blob[v.weights_offset : v.weights_offset + v.weights_size] == single.weights
    assert pack_weights([b"x" * 10, b"y" * 3, b"x" * 10]) == (b"x" * 10 + bytes(54) + b"y" * 3, [0, 64, 0])


# -- C callers: pthreads under ThreadSanitizer, and the pool-vs-serialised measurement ----------

C_THREADS = r"""
#define _POSIX_C_SOURCE 199309L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "xm_runtime.h"

enum { kCalls = CALLS, kInputs = 16 };
static xm_model* model;
static const xm_variant* v;
static float* inputs[kInputs];
static float* want[kInputs];
static int callers;
static int bad;

static void* worker(void* arg) {
  const long t = (long)arg;
  float* out = (float*)malloc(v->outputs[0].nbytes);
  for (int k = 0; k < kCalls; ++k) {
    const int i = (int)((t * 7 + k) % kInputs);
    const void* in[1] = {inputs[i]};
    void* outs[1] = {out};
    if (xm_run(model, in, outs) || (CHECK && memcmp(out, want[i], v->outputs[0].nbytes)))
      __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
  }
  free(out);
  return NULL;
}

int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* w = malloc(n ? n : 1);
  if (fread(w, 1, n, f) != (size_t)n) return 2;
  fclose(f);
  callers = atoi(argv[2]);
  model = xm_create(w, (unsigned long)n, 1, atoi(argv[3]));
  if (!model) { fprintf(stderr, "%s\n", xm_last_error()); return 2; }
  free(w);
  v = &xm_api_get()->variants[0];
  srand(3);
  for (int i = 0; i < kInputs; ++i) {
    const unsigned long m = v->inputs[0].nbytes / 4;
    inputs[i] = (float*)malloc(v->inputs[0].nbytes);
    want[i] = (float*)malloc(v->outputs[0].nbytes);
    for (unsigned long j = 0; j < m; ++j) inputs[i][j] = 2.f * rand() / (float)RAND_MAX - 1.f;
    const void* in[1] = {inputs[i]};
    void* outs[1] = {want[i]};
    if (xm_run(model, in, outs)) return 2;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const clock_t c0 = clock();
  pthread_t th[64];
  for (long t = 0; t < callers; ++t) pthread_create(&th[t], NULL, worker, (void*)t);
  for (int t = 0; t < callers; ++t) pthread_join(th[t], NULL);
  const double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double wall = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("callers %d arenas %d runs %d wall %.4f cpu %.4f bad %d\n", callers, xm_num_arenas(model),
         callers * kCalls, wall, cpu, bad);
  for (int i = 0; i < kInputs; ++i) { free(inputs[i]); free(want[i]); }
  xm_destroy(model);
  return bad ? 1 : 0;
}
"""


def build_c_caller(
    b: Build, workdir: str, cflags: Sequence[str], *, calls: int, check: bool, sanitize: Sequence[str] = ()
) -> str:
    """The C_THREADS program linked with the model's sources in ``workdir``."""
    with open(os.path.join(b.directory, "model.c")) as f:
        model_c = f.read()
    sources = {"model.c": model_c, **runtime_sources(), "callers.c": C_THREADS}
    for name, text in sources.items():
        with open(os.path.join(workdir, name), "w") as f:
            f.write(text)
    exe = os.path.join(workdir, "callers")
    cmd = [
        "gcc", *cflags, *sanitize, f"-DXM_PREFIX={b.symbols}", f"-DCALLS={calls}", f"-DCHECK={int(check)}",
        f"-I{RUNTIME_DIR}", "model.c", "xm_runtime.c", "callers.c", "-o", exe, "-pthread", "-lm",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def _weights_file(workdir: str, blob: bytes) -> str:
    p = os.path.join(workdir, "weights.bin")
    with open(p, "wb") as f:
        f.write(blob)
    return p


def test_c_pthreads_one_instance_under_thread_sanitizer(resnet, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, blob, compiled = resnet
    flags = [f for f in compiled.cflags if f not in ("-O3",)] + ["-O1", "-g"]
    exe = build_c_caller(b, str(tmp_path), flags, calls=40, check=True, sanitize=["-fsanitize=thread"])
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1 exitcode=66")
    proc = subprocess.run(
        [exe, _weights_file(str(tmp_path), blob), "4", "0"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "WARNING: ThreadSanitizer" not in proc.stderr
    assert "bad 0" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("channels, size", [(8, 16), (16, 32)])
def test_pool_vs_serialised_throughput(tmp_path, channels: int, size: int) -> None:  # type: ignore[no-untyped-def]
    """The figures in xm_runtime.h's header: runs/s of 1, 2 and 4 C callers on one instance of a small
    ResNet with the arena pool (max_arenas 0) and serialised (1). Prints them; asserts only
    correctness."""
    require(TARGET)
    fn = resnet_fn(np.random.default_rng(26), c=channels)
    shape = (1, 3, size, size)
    b, blob, (compiled,) = compile_variants(fn, [[np.zeros(shape, np.float32)]], f"rn_bench{channels}")
    exe = build_c_caller(b, str(tmp_path), compiled.cflags, calls=200, check=True)
    wpath = _weights_file(str(tmp_path), blob)
    for max_arenas in ("0", "1"):
        for callers in ("1", "2", "4"):
            best = None
            for _ in range(3):
                out = subprocess.run(
                    [exe, wpath, callers, max_arenas], capture_output=True, text=True, check=True
                )
                words = out.stdout.split()
                runs, wall, cpu = int(words[5]), float(words[7]), float(words[9])
                if best is None or wall < best[1]:
                    best = (runs, wall, cpu, words[3])
            assert best is not None
            runs, wall, cpu, arenas = best
            print(
                f"max_arenas {max_arenas} callers {callers}: {runs / wall:.0f} runs/s wall, "
                f"{cpu / runs * 1e6:.0f} us CPU/run, arenas {arenas}"
            )
