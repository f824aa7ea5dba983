"""Several compiled models in one program (issue 26): every exported symbol of a model carries its
prefix, so two models' objects or libraries link into one C program (no ``multiple definition``, no
silent interposition) and both run correctly; the same through ``dlopen`` and the generic
``xm_api`` descriptor, and from C++ through ``xmge.hpp`` (dlopen'd and linked, with a library of two
shape variants picked by ``reshape``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from backends.c.build import Build, LoadedModel, runtime_sources
from tests.codegen_util import require
from tests.test_runtime_reentrant import TARGET, compile_variants, resnet_fn

MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "xm_api.h"

XM_DECLARE_API(net_a);
XM_DECLARE_API(net_b);

static void* slurp(const char* path, unsigned long* n) {
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
  fseek(f, 0, SEEK_END);
  *n = (unsigned long)ftell(f);
  fseek(f, 0, SEEK_SET);
  void* p = malloc(*n ? *n : 1);
  if (fread(p, 1, *n, f) != *n) exit(2);
  fclose(f);
  return p;
}

/* runs `api` on the raw inputs DIR/in0.bin ... and writes DIR/out0.bin ... */
static int run(const xm_api* api, const char* dir) {
  char path[512];
  unsigned long n;
  snprintf(path, sizeof path, "%s/weights.bin", dir);
  void* w = slurp(path, &n);
  xm_model* m = api->create(w, n, 1, 0);
  free(w);
  if (!m) { fprintf(stderr, "%s: %s\n", api->prefix, api->last_error()); return 1; }
  const xm_variant* v = &api->variants[0];
  const void* in[8];
  void* out[8];
  for (int i = 0; i < v->num_inputs; ++i) {
    snprintf(path, sizeof path, "%s/in%d.bin", dir, i);
    in[i] = slurp(path, &n);
    if (n != v->inputs[i].nbytes) { fprintf(stderr, "bad input size\n"); return 1; }
  }
  for (int i = 0; i < v->num_outputs; ++i) out[i] = malloc(v->outputs[i].nbytes);
  if (api->run(m, in, out)) { fprintf(stderr, "%s: %s\n", api->prefix, api->last_error()); return 1; }
  for (int i = 0; i < v->num_outputs; ++i) {
    snprintf(path, sizeof path, "%s/out%d.bin", dir, i);
    FILE* f = fopen(path, "wb");
    fwrite(out[i], 1, v->outputs[i].nbytes, f);
    fclose(f);
    free(out[i]);
  }
  for (int i = 0; i < v->num_inputs; ++i) free((void*)in[i]);
  api->destroy(m);
  printf("%s ok\n", api->prefix);
  return 0;
}

#ifdef XM_DLOPEN
#include <dlfcn.h>
int main(int argc, char** argv) {
  for (int k = 0; k < 2; ++k) {
    char lib[512];
    snprintf(lib, sizeof lib, "%s/lib%s.so", argv[1 + 2 * k], argv[2 + 2 * k]);
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    const xm_api* api = xm_api_from_handle(h, argv[2 + 2 * k]);
    if (!api || run(api, argv[1 + 2 * k])) return 1;
  }
  return 0;
}
#else
int main(int argc, char** argv) {
  (void)argc;
  return run(net_a_api(), argv[1]) || run(net_b_api(), argv[2]);
}
#endif
"""

MAIN_CPP = r"""
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include "xmge.hpp"

XM_DECLARE_API(net_b);

static void load(xmge::Tensor& t, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  f.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  if (f.gcount() != static_cast<std::streamsize>(t.nbytes())) throw xmge::Error("short input " + path);
}

static void save(const xmge::Tensor& t, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  try {
    const std::string a = argv[1], b = argv[2], v = argv[3];
    xmge::Network net_a(a + "/libnet_a.so", a + "/weights.bin");        // dlopen by path
    xmge::Network net_b(net_b_api(), b + "/weights.bin");               // linked
    load(net_a.input(0), a + "/in0.bin");
    for (size_t i = 0; i < net_b.num_inputs(); ++i)
      load(net_b.input(i), b + "/in" + std::to_string(i) + ".bin");
    net_a.forward();
    net_b.forward();
    save(net_a.output(0), a + "/cpp_out0.bin");
    save(net_b.output(0), b + "/cpp_out0.bin");
    // two shape variants in one library: reshape picks the other one
    xmge::Network net_v(v + "/libnet_v.so", v + "/weights.bin");
    xmge::Tensor& in = net_v.input("arg_0");
    in.reshape({2, 3, 16, 16});
    load(in, v + "/in0.bin");
    net_v.forward();
    std::cout << "variant " << net_v.variant() << " output " << net_v.output(0).shape()[0] << "\n";
    save(net_v.output(0), v + "/cpp_out0.bin");
    in.reshape({3, 3, 16, 16});
    try {
      net_v.forward();
      std::cout << "no error\n";
    } catch (const xmge::Error& e) {
      std::cout << "error: " << e.what() << "\n";
    }
    try {
      net_v.input("nope");
    } catch (const xmge::Error& e) {
      std::cout << "error: " << e.what() << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "failed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
"""


def _mlp_fn(rng: np.random.Generator):  # type: ignore[no-untyped-def]
    w1 = xm.tensor(rng.standard_normal((12, 24)).astype(np.float32))
    w2 = xm.tensor(rng.standard_normal((24, 5)).astype(np.float32))

    def fn(x, y):  # type: ignore[no-untyped-def]
        return F.matmul(F.relu(F.matmul(x, w1) + y), w2)

    return fn


def _package(directory: Path, b: Build, blob: bytes, inputs: list[np.ndarray]) -> Path:
    """A folder like a saved package: sources, library, weights, raw inputs."""
    directory.mkdir()
    shutil.copy(os.path.join(b.directory, "model.c"), directory / "model.c")
    shutil.copy(b.library, directory / os.path.basename(b.library))
    for name, text in runtime_sources().items():
        (directory / name).write_text(text)
    (directory / "weights.bin").write_bytes(blob)
    for i, x in enumerate(inputs):
        x.tofile(directory / f"in{i}.bin")
    return directory


def _tool(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def packages(tmp_path_factory):  # type: ignore[no-untyped-def]
    require(TARGET)
    root = tmp_path_factory.mktemp("link")
    rng = np.random.default_rng(11)
    xa = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32)]
    xb = [rng.standard_normal((3, 12)).astype(np.float32), rng.standard_normal((3, 24)).astype(np.float32)]
    xv = [rng.standard_normal((2, 3, 16, 16)).astype(np.float32)]
    out = {}
    for name, fn, inputs, shapes in (
        ("net_a", resnet_fn(np.random.default_rng(1)), xa, [xa]),
        ("net_b", _mlp_fn(np.random.default_rng(2)), xb, [xb]),
        ("net_v", resnet_fn(np.random.default_rng(3)), xv, [[np.zeros((1, 3, 16, 16), np.float32)], xv]),
    ):
        b, blob, compiled = compile_variants(fn, shapes, name)
        model = LoadedModel(b.library, blob, 1)
        want = model.run(inputs)
        model.close()
        out[name] = (_package(root / name, b, blob, inputs), b, compiled, want)
    return root, out


def _objects(pkg: Path, prefix: str, cflags: tuple[str, ...]) -> list[str]:
    # every model's own xm_parallel.o: their weak OpenMP entry points give the program one pool
    srcs = ("model.c", "xm_runtime.c", "xm_parallel.c")
    for src in srcs:
        _tool(["gcc", *cflags, f"-DXM_PREFIX={prefix}", "-c", src, "-o", src[:-2] + ".o"], pkg)
    return [str(pkg / (src[:-2] + ".o")) for src in srcs]


def _check_outputs(pkg: Path, want: list[np.ndarray], stem: str = "out") -> None:
    for i, w in enumerate(want):
        got = np.fromfile(pkg / f"{stem}{i}.bin", w.dtype).reshape(w.shape)
        np.testing.assert_array_equal(got, w)


def test_two_models_link_statically_into_one_c_program(packages) -> None:  # type: ignore[no-untyped-def]
    root, pk = packages
    (a, _, ca, wa), (b, _, cb, wb) = pk["net_a"], pk["net_b"]
    objs = _objects(a, "net_a", ca[0].cflags) + _objects(b, "net_b", cb[0].cflags)
    (root / "main.c").write_text(MAIN_C)
    _tool(["gcc", "-O1", f"-I{a}", "main.c", *objs, "-o", "static_main", "-fopenmp", "-pthread", "-lm"], root)
    proc = subprocess.run([str(root / "static_main"), str(a), str(b)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["net_a ok", "net_b ok"]
    _check_outputs(a, wa)
    _check_outputs(b, wb)
    # the same model twice is the linker's error, never a silent choice of one
    dup = subprocess.run(
        ["gcc", "main.c", f"-I{a}", *objs, *objs[:1], "-o", "dup", "-fopenmp", "-lm"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert dup.returncode != 0 and "multiple definition of `net_a_desc'" in dup.stderr


def test_two_model_libraries_link_and_dlopen(packages) -> None:  # type: ignore[no-untyped-def]
    root, pk = packages
    (a, _, _, wa), (b, _, _, wb) = pk["net_a"], pk["net_b"]
    (root / "main.c").write_text(MAIN_C)
    _tool(
        ["gcc", "-O1", f"-I{a}", "main.c", f"-L{a}", "-lnet_a", f"-L{b}", "-lnet_b", f"-Wl,-rpath,{a}:{b}",
         "-o", "shared_main"], root,
    )  # fmt: skip
    for f in a.glob("out*.bin"):
        f.unlink()
    proc = subprocess.run([str(root / "shared_main"), str(a), str(b)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    _check_outputs(a, wa)
    _check_outputs(b, wb)
    _tool(["gcc", "-O1", "-DXM_DLOPEN", f"-I{a}", "main.c", "-o", "dlopen_main", "-ldl"], root)
    for f in [*a.glob("out*.bin"), *b.glob("out*.bin")]:
        f.unlink()
    proc = subprocess.run(
        [str(root / "dlopen_main"), str(a), "net_a", str(b), "net_b"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    _check_outputs(a, wa)
    _check_outputs(b, wb)


def test_cpp_header_runs_two_models_and_picks_variants(packages) -> None:  # type: ignore[no-untyped-def]
    root, pk = packages
    (a, _, _, wa), (b, _, cb, wb), (v, _, _, wv) = pk["net_a"], pk["net_b"], pk["net_v"]
    objs = _objects(b, "net_b", cb[0].cflags)
    (root / "main.cpp").write_text(MAIN_CPP)
    _tool(
        ["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{a}", "main.cpp", *objs,
         "-o", "cpp_main", "-fopenmp", "-pthread", "-ldl", "-lm"], root,
    )  # fmt: skip
    proc = subprocess.run([str(root / "cpp_main"), str(a), str(b), str(v)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    _check_outputs(a, wa, "cpp_out")
    _check_outputs(b, wb, "cpp_out")
    _check_outputs(v, wv, "cpp_out")
    lines = proc.stdout.splitlines()
    assert lines[0] == "variant 1 output 2"
    assert lines[1] == (
        "error: net_v: no compiled variant for input shapes (3,3,16,16); "
        "this library holds (1,3,16,16), (2,3,16,16)"
    )
    assert lines[2] == "error: no input named nope (the model has arg_0)"
