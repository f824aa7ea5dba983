"""The C backends: x86 (gcc on the host, loaded with ctypes) and AArch64 (cross gcc, run under qemu).

Each is one object implementing :class:`passes.target.Backend`: the ISA search order and layout its
targets imply, the emitter, the build, loading and running, per-kernel profiles and saving. Both share
one kernel registry (:data:`backends.c.kernels.KERNELS`); a target's ISA order decides which of its
templates serve.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from backends.c.build import (
    RUN_FAILED_PREFIX,
    RUN_FAILED_STATUS,
    Build,
    LoadedModel,
    RunError,
    build,
    runtime_sources,
    storage_dtype,
)
from backends.c.emitter import CEmitter
from backends.c.isas import ISA_EMITTERS
from backends.c.kernels import KERNELS
from backends.c.symbols import DEFAULT_PREFIX
from dialects import kernel as K
from dialects.dtypes import numpy_dtype
from passes.lowering.kernels import KernelRegistry
from passes.target import BackendError, KernelTime, Target, TargetError, float16_options

X86_AVX2 = frozenset({"avx2", "fma"})
X86_AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})


class CBackendBase:
    """What every C-family backend shares (:class:`passes.target.Backend`): emit through the target's
    emitter, build, load with ctypes, run the standalone runner, profile and save. A subclass names
    its targets' ISA order, layout options, emitter and CPU needs (and overrides building or running
    where its code cannot run on the host)."""

    name: str
    options: tuple[str, ...]
    emulated: bool = False

    kernels: KernelRegistry = KERNELS

    def isas(self, features: Sequence[str], options: Sequence[str]) -> tuple[str, ...]:
        raise NotImplementedError

    def inference_options(self, features: Sequence[str], options: Sequence[str]) -> dict[str, bool]:
        raise NotImplementedError

    def runs_here(self, target: Target) -> bool:
        raise NotImplementedError

    def emitter(self, target: Target) -> type[CEmitter]:
        raise NotImplementedError

    def cpu_flags_needed(self, target: Target) -> frozenset[str]:
        """The ``/proc/cpuinfo`` flags the host code of ``target`` executes instructions of."""
        return frozenset()

    def extra_cflags(self, target: Target, emitter: CEmitter) -> tuple[str, ...]:
        """Compiler flags beyond the emitter's that ``target``'s ISAs need."""
        return ()

    def emit(
        self,
        target: Target,
        module: Any,
        *,
        profile: bool = False,
        prefix: str = DEFAULT_PREFIX,
        weights_offsets: Sequence[int] | None = None,
    ) -> tuple[str, tuple[str, ...]]:
        """The model's source and compiler flags; ``module`` may be a list of variants (one per input
        shape) for one library, ``prefix`` names its exported symbols (:meth:`CEmitter.emit`)."""
        emitter = self.emitter(target)(profile=profile)
        source = emitter.emit(module, prefix=prefix, weights_offsets=weights_offsets)
        return source, (*emitter.cflags, *self.extra_cflags(target, emitter))

    def build(self, target: Target, source: str, cflags: Sequence[str], *, sanitize: bool = False) -> Build:
        return build(source, cflags, sanitize=sanitize)

    def load(self, artifact: Build, weights: bytes, threads: int) -> LoadedModel:
        return LoadedModel(artifact.library, weights, threads)

    def run(self, model: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return with_element_types(model.loaded().run(inputs), model.output_types)

    def run_runner(
        self,
        artifact: Build,
        weights: bytes,
        inputs: Sequence[np.ndarray],
        output_shapes: Sequence[tuple[int, ...]],
        *,
        threads: int,
        iters: int = 1,
    ) -> list[np.ndarray]:
        """Run the standalone ``runner`` program of ``artifact`` on ``inputs``: each input is written
        and each output read in its storage dtype (the runner's ``--describe``)."""
        in_types, out_types = runner_io(artifact)
        if len(inputs) != len(in_types):
            raise BackendError(f"the model takes {len(in_types)} inputs, got {len(inputs)}")
        if [shape for _, shape in out_types] != [tuple(s) for s in output_shapes]:
            raise BackendError(
                f"the runner's outputs {[shape for _, shape in out_types]} are not {list(output_shapes)}"
            )
        with tempfile.TemporaryDirectory(prefix="xmge-run-") as d:
            wpath = os.path.join(d, "weights.bin")
            with open(wpath, "wb") as f:
                f.write(weights)
            cmd = [
                *artifact.launcher,
                artifact.runner,
                wpath,
                "-n",
                str(iters),
                "-w",
                "0",
                "-t",
                str(threads),
            ]
            for i, (x, (dt, shape)) in enumerate(zip(inputs, in_types, strict=True)):
                a = np.require(x, dt, "C")  # ascontiguousarray would make a 0-d input 1-d
                if a.shape != shape:
                    raise BackendError(f"input {i} must have shape {shape}, got {a.shape}")
                p = os.path.join(d, f"in{i}.bin")
                a.tofile(p)
                cmd += ["-i", p]
            outs = [os.path.join(d, f"out{i}.bin") for i in range(len(output_shapes))]
            for p in outs:
                cmd += ["-o", p]
            env = dict(
                os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1"
            )
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode == RUN_FAILED_STATUS and RUN_FAILED_PREFIX in proc.stderr:
                reason = proc.stderr.split(RUN_FAILED_PREFIX, 1)[1].splitlines()[0]
                raise RunError(reason)
            if proc.returncode != 0:
                raise BackendError(
                    f"runner failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
                )
            return [np.fromfile(p, dt).reshape(s) for p, (dt, s) in zip(outs, out_types, strict=True)]

    def profile(self, model: Any, inputs: Sequence[Any], iters: int) -> list[KernelTime]:
        """Every kernel call's time (ms per run, the mean of ``iters`` runs after one untimed run),
        in the order a run makes the calls, from a rebuild with a timer around every call."""
        source, cflags = self.emit(model.target, model.final_module(), profile=True)
        m = self.load(self.build(model.target, source, cflags), model.weights, model.threads)
        try:
            arrays = [np.asarray(x, np.float32) for x in inputs]
            m.run(arrays)
            names_p = ctypes.POINTER(ctypes.c_char_p)()
            layers_p = ctypes.POINTER(ctypes.c_char_p)()
            ms_p = ctypes.POINTER(ctypes.c_double)()
            table = m.symbol("profile")
            table.restype = ctypes.c_int
            n = table(ctypes.byref(names_p), ctypes.byref(layers_p), ctypes.byref(ms_p))
            for i in range(n):
                ms_p[i] = 0.0
            for _ in range(iters):
                m.run(arrays)
            defs = K.defs_of(model.final_module())
            rows = []
            for i in range(n):
                sym = names_p[i].decode()
                layer = layers_p[i].decode("utf-8", "replace")
                rows.append(KernelTime(layer, sym, defs[sym].family.data, ms_p[i] / iters))
            return rows
        finally:
            m.close()

    def save(self, model: Any, directory: str) -> dict[str, Any]:
        """``model.c``, the runtime sources, the build files (Makefile, CMakeLists.txt, README.md), the
        library and the runner; returns model.json's extras."""
        self._write_sources(model, directory)
        self._copy_binaries(model, directory)
        return {
            "library": os.path.basename(model.build.library),
            "runner": os.path.basename(model.build.runner),
            "build": "make  (or: cmake -B build && cmake --build build)",
        }

    def _write_sources(self, model: Any, directory: str) -> None:
        from backends.c.build import prefix_flags
        from backends.c.project import project_files

        runtime = runtime_sources()
        library = os.path.basename(model.build.library)
        files = {
            "model.c": model.source,
            **runtime,
            **project_files(
                str(model.target),
                [*model.cflags, *prefix_flags(model.build.symbols), "-pthread"],
                arch=model.target.arch,
                name=model.build.symbols,
                library=library,
                lib_sources=["model.c", *(n for n in runtime if n.endswith(".c") and n != "runner.c")],
                headers=[n for n in runtime if n.endswith((".h", ".hpp"))],
            ),
        }
        for name, text in files.items():
            _write(os.path.join(directory, name), text)

    def _copy_binaries(self, model: Any, directory: str) -> None:
        import shutil

        for src in (model.build.library, model.build.runner):
            shutil.copyfile(src, os.path.join(directory, os.path.basename(src)))
            shutil.copymode(src, os.path.join(directory, os.path.basename(src)))


class X86Backend(CBackendBase):
    """x86-64 with AVX2 (+ AVX-512): templates searched ``avx512``, ``avx2``, ``generic``."""

    name = "c-x86"
    options: tuple[str, ...] = ("io16xc32", "ioc16", "bf16")
    def isas(self, features: Sequence[str], options: Sequence[str]) -> tuple[str, ...]:
        from backends.c.templates.x86.x86_isa import extension_isas, option_rows

        base = ("avx512", "avx2", "generic") if "avx512" in features else ("avx2", "generic")
        option_rows(features, options)  # an option no row of the target serves is an error
        if "bf16" in options and {"ioc16", "io16xc32"} & set(options):
            raise TargetError("x86 +bf16 kernels are float32 (bfloat16 inputs): no +ioc16 or +io16xc32")
        if "bf16" in options and "nchw88" in features and "amx" in features:
            # the AVX512-BF16 row has NCHW88 kernels (conv2d_nchw88_bf16), the AMX-BF16 tiles do not
            raise TargetError("x86 +bf16 on AMX tiles is plain NCHW: drop nchw88 (x86-avx512-amx+bf16)")
        extensions = extension_isas(tuple(features), tuple(options))
        if extensions and "avx512" not in features:
            raise TargetError(f"x86 features {', '.join(extensions)} need the avx512 feature")
        if "ioc16" in options and "fp16" not in features:
            raise TargetError(
                "x86 +ioc16 (float16 compute) needs the fp16 feature (AVX512-FP16): x86-avx512-fp16+ioc16"
            )
        if "ioc16" in options and "nchw88" in features:
            raise TargetError("x86 +ioc16 kernels are plain NCHW: drop nchw88 (x86-avx512-fp16+ioc16)")
        return (*extensions, *base)

    def inference_options(self, features: Sequence[str], options: Sequence[str]) -> dict[str, bool]:
        layout = {"enable_nchw88": True} if "nchw88" in features else {}
        # the fp16 feature only says the CPU computes in float16 (the host target names it): the float16
        # mode is the target's option alone, unlike arm-fp16
        return {**layout, **float16_options((), options)}

    def runs_here(self, target: Target) -> bool:
        from backends.targets import cpu_flags

        return self.cpu_flags_needed(target) <= cpu_flags()

    def cpu_flags_needed(self, target: Target) -> frozenset[str]:
        """The ``/proc/cpuinfo`` flags code for ``target`` executes instructions of."""
        from backends.c.templates.x86.x86_isa import EXTENSIONS, option_rows

        needed = X86_AVX2 | (X86_AVX512 if "avx512" in target.features else frozenset())
        needed = needed.union(*(e.cpu_flags for e in EXTENSIONS if e.feature in target.features))
        return needed.union(*(o.cpu_flags for o in option_rows(target.features, target.options)))

    def emitter(self, target: Target) -> type[CEmitter]:
        return ISA_EMITTERS[target.isas[0]]

    def extra_cflags(self, target: Target, emitter: CEmitter) -> tuple[str, ...]:
        from backends.c.templates.x86.x86_isa import extension_cflags

        return tuple(f for f in extension_cflags(target.isas) if f not in emitter.cflags)


class ArmBackend(CBackendBase):
    """AArch64 NEON: cross-built with ``aarch64-linux-gnu-gcc``, run under ``qemu-aarch64 -cpu max``.
    Templates searched (``i8mm`` ``dot`` | ``fp16``), ``neon``, ``generic``; ``+plain-c``: ``generic``
    only."""

    name = "c-arm"
    options = ("ioc16", "io16xc32", "fuse-z", "plain-c")
    emulated = True

    def isas(self, features: Sequence[str], options: Sequence[str]) -> tuple[str, ...]:
        if "plain-c" in options:
            return ("generic",)
        if "i8mm" in features and "dot" not in features:
            raise TargetError("arm feature i8mm extends the dot-product target: write arm-nchw44-dot-i8mm")
        extension = tuple(f for f in ("i8mm", "dot", "fp16") if f in features)
        return (*extension, "neon", "generic")

    def inference_options(self, features: Sequence[str], options: Sequence[str]) -> dict[str, bool]:
        # every ARM kernel family is NCHW44 (int8 convolutions NCHW44_DOT with ``dot``)
        layout = {}
        if {"nchw44", "dot", "fp16"} & set(features):
            layout = {"enable_nchw44_dot" if "dot" in features else "enable_nchw44": True}
        return {**layout, **float16_options(features, options)}

    def runs_here(self, target: Target) -> bool:
        return False

    def emitter(self, target: Target) -> type[CEmitter]:
        from backends.c.arm import ArmPlainEmitter

        return ArmPlainEmitter if target.isas[0] == "generic" else ISA_EMITTERS[target.isas[0]]

    def build(self, target: Target, source: str, cflags: Sequence[str], *, sanitize: bool = False) -> Build:
        from backends.c.cross import cross_build

        if sanitize:
            raise BackendError("sanitizer builds run on the host only, not under qemu")
        return cross_build(source, cflags)

    def run(self, model: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        from backends.c.cross import EMULATION_NOTE, EmulationWarning

        warnings.warn(EMULATION_NOTE, EmulationWarning, stacklevel=4)
        return with_element_types(model.run_runner(inputs), model.output_types)

    def profile(self, model: Any, inputs: Sequence[Any], iters: int) -> list[KernelTime]:
        raise BackendError(
            f"target {model.target} runs under qemu: its timings mean nothing, count instructions"
        )

    def save(self, model: Any, directory: str) -> dict[str, Any]:
        # cross-built binaries aside (prebuilt/): `make` on the device builds its own
        self._write_sources(model, directory)
        prebuilt = os.path.join(directory, "prebuilt")
        os.makedirs(prebuilt, exist_ok=True)
        self._copy_binaries(model, prebuilt)
        return {
            "library": "prebuilt/" + os.path.basename(model.build.library),
            "runner": "prebuilt/" + os.path.basename(model.build.runner),
            "build": "make  (or: cmake -B build && cmake --build build)",
        }

    def cpu_flags_needed(self, target: Target) -> frozenset[str]:
        """The ``/proc/cpuinfo`` (AArch64) flags code for ``target`` executes instructions of."""
        flags = {"asimd"}
        flags |= {"asimddp"} if "dot" in target.features else set()
        flags |= {"i8mm"} if "i8mm" in target.features else set()
        flags |= {"fphp", "asimdhp"} if "fp16" in target.features else set()
        return frozenset(flags)


IoTable = tuple[list[tuple[np.dtype, tuple[int, ...]]], list[tuple[np.dtype, tuple[int, ...]]]]


def runner_io(artifact: Build) -> IoTable:
    """(storage dtype, shape) of each input and output of a built runner, from ``runner --describe``
    (run once per build: a build directory is named after its content)."""
    key = (artifact.launcher, artifact.runner)
    if key not in _RUNNER_IO:
        cmd = [*artifact.launcher, artifact.runner, "--describe"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BackendError(f"runner --describe failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        table: IoTable = ([], [])
        for line in proc.stdout.splitlines():
            kind, _name, dtype, nbytes, *dims = line.split()
            shape = tuple(int(v) for v in dims)
            table[kind == "output"].append((storage_dtype(dtype, shape, int(nbytes)), shape))
        _RUNNER_IO[key] = table
    return _RUNNER_IO[key]


_RUNNER_IO: dict[tuple[tuple[str, ...], str], IoTable] = {}


def with_element_types(arrays: Sequence[np.ndarray], types: Sequence[Any]) -> list[np.ndarray]:
    """Outputs in storage dtypes viewed with their exact numpy dtypes (a quantized output carries its
    scale and zero point as the reference's does)."""
    out = []
    for a, t in zip(arrays, types, strict=True):
        dt = numpy_dtype(t.element_type)
        out.append(a.view(dt) if dt.itemsize == a.dtype.itemsize and dt.kind == a.dtype.kind else a)
    return out


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


X86 = X86Backend()
ARM = ArmBackend()
