"""``compiler.compile``: a model to native code for a target, callable from Python.

    compiled = xm.compile(net, target="x86-avx2", example_inputs=[x])    # a Module, with inputs
    compiled = xm.compile(traced_fn, target="x86-avx512")                 # a jit.trace already called
    compiled = xm.compile("model.mge", target="x86-avx2")                 # a MegEngine file (or bytes)
    y = compiled(x)                          # numpy in, numpy out
    compiled.save("out/")                    # sources, library, weights, runner
    print(compiled.ir("kernel-plan-memory")) # IR after any stage; compiled.stages lists them

Stages: ``tensor`` (the input graph), ``inference`` (BN folding, arithmetic and conv-bias fusion),
``kernel-select``, ``kernel-fuse-epilogue``, ``kernel-pack-weights``, ``kernel-plan-memory`` (the
pass names), and ``c`` (the generated source). ``ref`` compiles nothing and runs the reference
interpreter.

The command-line drivers call :func:`compile_file` (``xmge compile``) and :func:`benchmark`
(``xmge bench``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass

from compiler.targets import Target, host_target, parse_target


class CompileError(ValueError):
    pass


class EmulationWarning(UserWarning):
    """A model runs under an emulator: its results are exact, its timings meaningless."""


# ----------------------------------------------------------------------------------------------
# Front ends: anything compile() accepts -> a tensor-dialect module


def to_module(model: Any, example_inputs: Sequence[Any] | None = None) -> ModuleOp:
    """The ``mgb`` module of a traced function, a Module or function (traced on ``example_inputs``),
    a ``.mge`` path or its bytes, or a ``ModuleOp``."""
    from compiler.jit import trace
    from compiler.module.module import Module
    from compiler.tensor import Tensor

    if isinstance(model, ModuleOp):
        return model
    if isinstance(model, bytes | bytearray | memoryview):
        from backends.mge.reader import read_mge

        return read_mge(bytes(model))
    if isinstance(model, str | os.PathLike):
        from backends.mge.reader import read_mge

        with open(model, "rb") as f:
            return read_mge(f.read())
    if isinstance(model, trace):
        if example_inputs is not None:
            model(*[x if isinstance(x, Tensor) else Tensor(np.asarray(x)) for x in example_inputs])
        return model.module
    if isinstance(model, Module) or callable(model):
        if example_inputs is None:
            raise CompileError("compile: a Module or function needs example_inputs to be traced")
        if isinstance(model, Module):
            model.eval()
        traced = trace(lambda *xs: model(*xs), symbolic=True, capture_as_const=True)
        traced(
            *[x if isinstance(x, Tensor) else Tensor(np.asarray(x, dtype=np.float32)) for x in example_inputs]
        )
        return traced.module
    raise CompileError(f"compile: cannot compile a {type(model).__name__}")


def inference_clean(module: ModuleOp, target: Target | None = None) -> ModuleOp:
    """Graph clean-ups before kernel selection: mgb canonicalisation, BN folding, arithmetic and
    conv-bias-nonlinearity fusion (the ``optimize_for_inference`` rewrites), plus the target's
    layout and float16 options (``Target.inference_options``: NCHW44 on ARM, ...)."""
    from passes.inference import pipeline_for

    out = module.clone()
    ctx = Context()
    options = target.inference_options() if target is not None else {}
    for p in pipeline_for(enable_fuse_conv_bias_nonlinearity=True, **options):
        p.apply(ctx, out)
    out.verify()
    return out


def kernel_passes(target: Target, threads: int) -> list[ModulePass]:
    from passes.lowering import FuseEpiloguePass, LowerToKernelPass, PackWeightsPass, PlanMemoryPass
    from passes.lowering.widen import WidenF16Pass

    float16 = {"enable_ioc16", "enable_io16xc32"} & set(target.inference_options())
    return [
        *([WidenF16Pass(str(target))] if float16 else []),
        LowerToKernelPass(str(target)),
        FuseEpiloguePass(),
        PackWeightsPass(),
        PlanMemoryPass(threads),
    ]


# ----------------------------------------------------------------------------------------------
# The compiled model


class CompiledModel:
    """A model compiled for one target: call it on numpy arrays."""

    def __init__(
        self, target: Target, stages: dict[str, ModuleOp | str], threads: int, times: dict[str, float]
    ) -> None:
        self.target = target
        self._stages = stages
        self.threads = threads
        self.times = times
        fn = next(f for f in self._final_module().ops if isinstance(f, func.FuncOp))
        self.input_types = [t for t in fn.function_type.inputs.data]
        self.output_types = [t for t in fn.function_type.outputs.data]
        self._loaded: Any = None
        self.build: Any = None
        self.weights = b""
        self.source = ""
        if target.backend == "c":
            self._build_c()

    # -- stages ----------------------------------------------------------------------------------
    @property
    def stages(self) -> list[str]:
        return list(self._stages)

    def _final_module(self) -> ModuleOp:
        mods = [m for m in self._stages.values() if isinstance(m, ModuleOp)]
        return mods[-1]

    def ir(self, stage: str = "kernel-plan-memory") -> str:
        """The IR after ``stage`` (or the generated C for ``"c"``); weights are elided."""
        if stage not in self._stages:
            raise KeyError(f"no stage {stage!r}; stages: {', '.join(self._stages)}")
        got = self._stages[stage]
        return got if isinstance(got, str) else str(got)

    # -- memory plan -----------------------------------------------------------------------------
    def plan(self) -> Any:
        from dialects.kernel import plan_of

        fn = next(f for f in self._final_module().ops if isinstance(f, func.FuncOp))
        return plan_of(fn)

    @property
    def arena_size(self) -> int:
        p = self.plan()
        return p.arena.data if p is not None else 0

    @property
    def workspace_size(self) -> int:
        p = self.plan()
        return p.workspace.data if p is not None else 0

    @property
    def weights_size(self) -> int:
        p = self.plan()
        return p.weights.data if p is not None else 0

    # -- build and run ---------------------------------------------------------------------------
    def _build_c(self) -> None:
        from backends.c.build import build
        from passes.lowering.plan import weights_blob

        module = self._final_module()
        emitter = self.target.emitter()()
        t0 = time.perf_counter()
        self.source = emitter.emit(module)
        self._stages["c"] = self.source
        self.weights = weights_blob(module)
        self.times["emit"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if self.target.arch == "arm":
            from backends.c.cross import cross_build

            self.build = cross_build(self.source, emitter.cflags)
        else:
            self.build = build(self.source, emitter.cflags)
        self.times["build"] = time.perf_counter() - t0
        self.cflags = emitter.cflags

    @property
    def emulated(self) -> bool:
        """Whether running this model goes through an emulator (an ARM build on an x86 host)."""
        return self.target.arch == "arm"

    def _runtime(self) -> Any:
        if self._loaded is None:
            from backends.c.build import LoadedModel

            if self.build is None:
                raise CompileError(f"target {self.target} has no built library")
            self._loaded = LoadedModel(self.build.library, self.weights, self.threads)
        return self._loaded

    def run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Outputs for ``inputs`` (numpy arrays or Tensors), as a list of arrays."""
        arrays = [np.asarray(getattr(x, "numpy", lambda x=x: x)(), dtype=np.float32) for x in inputs]
        if self.target.backend == "reference":
            from backends.reference import run_module

            return [np.asarray(o) for o in run_module(self._final_module(), arrays)]
        if self.emulated:
            from backends.c.cross import EMULATION_NOTE

            if not getattr(self, "_noted", False):
                warnings.warn(EMULATION_NOTE, EmulationWarning, stacklevel=3)
                self._noted = True
            return self.run_runner(arrays)
        return self._runtime().run(arrays)

    def __call__(self, *inputs: Any) -> Any:
        outs = self.run(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_runner(
        self, inputs: Sequence[np.ndarray], *, sanitize: bool = False, iters: int = 1
    ) -> list[np.ndarray]:
        """Run the standalone runner program on ``inputs`` (a sanitizer build with ``sanitize``)."""
        from backends.c.build import build

        if sanitize and self.emulated:
            raise CompileError("sanitizer builds run on the host only, not under qemu")
        b = build(self.source, self.cflags, sanitize=sanitize) if sanitize else self.build
        with tempfile.TemporaryDirectory(prefix="xmge-run-") as d:
            wpath = os.path.join(d, "weights.bin")
            with open(wpath, "wb") as f:
                f.write(self.weights)
            cmd = [*b.launcher, b.runner, wpath, "-n", str(iters), "-w", "0", "-t", str(self.threads)]
            for i, x in enumerate(inputs):
                p = os.path.join(d, f"in{i}.bin")
                np.ascontiguousarray(x, dtype=np.float32).tofile(p)
                cmd += ["-i", p]
            outs = [os.path.join(d, f"out{i}.bin") for i in range(len(self.output_types))]
            for p in outs:
                cmd += ["-o", p]
            env = dict(
                os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1"
            )
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                raise CompileError(
                    f"runner failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
                )
            shapes = [tuple(t.get_shape()) for t in self.output_types]  # type: ignore[union-attr]
            return [np.fromfile(p, np.float32).reshape(s) for p, s in zip(outs, shapes, strict=True)]

    # -- saving ----------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> str:
        """Write ``model.c``, the runtime sources, ``libxmge_model.so``, ``runner``, ``weights.bin``,
        ``model.json`` (I/O, sizes, target) and ``kernel.mlir`` into ``directory``."""
        if self.build is None:
            raise CompileError(f"target {self.target} produces no files to save")
        from backends.c.build import runtime_sources

        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "model.c"), "w") as f:
            f.write(self.source)
        for name, text in runtime_sources().items():
            with open(os.path.join(directory, name), "w") as f:
                f.write(text)
        binaries = directory
        if self.emulated:  # cross-built binaries aside: `make` on the device builds its own
            from backends.c.cross import project_files

            binaries = os.path.join(directory, "prebuilt")
            os.makedirs(binaries, exist_ok=True)
            for name, text in project_files(str(self.target), self.cflags).items():
                with open(os.path.join(directory, name), "w") as f:
                    f.write(text)
        for src in (self.build.library, self.build.runner):
            shutil.copy2(src, os.path.join(binaries, os.path.basename(src)))
        with open(os.path.join(directory, "weights.bin"), "wb") as f:
            f.write(self.weights)
        with open(os.path.join(directory, "kernel.mlir"), "w") as f:
            f.write(self.ir("kernel-plan-memory"))
        meta = {
            "target": str(self.target),
            "threads": self.threads,
            "arena_bytes": self.arena_size,
            "workspace_bytes": self.workspace_size,
            "weights_bytes": self.weights_size,
            "inputs": [_describe(t) for t in self.input_types],
            "outputs": [_describe(t) for t in self.output_types],
            "cflags": list(self.cflags),
            "run": "./runner weights.bin -t THREADS -n ITERS [-i input0.bin ...] [-o output0.bin ...]",
            **({"build": "make  (or: cmake -B build && cmake --build build)"} if self.emulated else {}),
        }
        with open(os.path.join(directory, "model.json"), "w") as f:
            json.dump(meta, f, indent=2)
        return os.fspath(directory)


def _describe(t: Any) -> dict[str, Any]:
    from dialects.dtypes import dtype_name

    assert isinstance(t, TensorType)
    return {"shape": list(t.get_shape()), "dtype": dtype_name(t.element_type)}


# ----------------------------------------------------------------------------------------------
# Entry points


def compile(  # noqa: A001 - the public name mirrors the issue's API
    model: Any,
    target: str | Target | None = None,
    example_inputs: Sequence[Any] | None = None,
    *,
    threads: int = 1,
) -> CompiledModel:
    """Compile ``model`` (a traced function, a Module or function with ``example_inputs``, a ``.mge``
    path or bytes, or a tensor-dialect ``ModuleOp``) for ``target`` (default: this machine's best)."""
    tgt = target if isinstance(target, Target) else (parse_target(target) if target else host_target())
    if threads < 1:
        raise CompileError(f"threads must be >= 1, got {threads}")
    unsupported = [o for o in tgt.options if tgt.arch == "x86" and o != "io16xc32"]
    if tgt.options and tgt.arch not in ("arm", "x86") or unsupported:
        raise CompileError(
            f"target options {', '.join(unsupported or tgt.options)} are not implemented by the C "
            f"backend for {tgt.arch} yet"
        )
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    module = to_module(model, example_inputs)
    times["frontend"] = time.perf_counter() - t0
    stages: dict[str, ModuleOp | str] = {"tensor": module}
    t0 = time.perf_counter()
    current = inference_clean(module, tgt)
    times["inference"] = time.perf_counter() - t0
    stages["inference"] = current
    if tgt.backend != "reference":
        if tgt.backend != "c":
            raise CompileError(f"target {tgt}: the {tgt.backend} backend is not implemented yet")
        ctx = Context()
        current = current.clone()
        for p in kernel_passes(tgt, threads):
            t0 = time.perf_counter()
            p.apply(ctx, current)
            times[p.name] = time.perf_counter() - t0
            current.verify()
            stages[p.name] = current.clone()
    return CompiledModel(tgt, stages, threads, times)


def compile_file(path: str, target: str, out_dir: str, *, threads: int = 1) -> CompiledModel:
    """``xmge compile MODEL.mge --target T -o DIR``: compile a ``.mge`` file and save it to ``out_dir``."""
    compiled = compile(path, target, threads=threads)
    compiled.save(out_dir)
    return compiled


def benchmark(
    run: Callable[[], Any], *, warmup: int = 3, iters: int = 20, min_seconds: float = 0.0
) -> dict[str, float]:
    """Median / min / mean latency in milliseconds of ``run()`` (``xmge bench`` uses it for every
    backend it compares)."""
    for _ in range(warmup):
        run()
    times = []
    start = time.perf_counter()
    while len(times) < iters or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {
        "median_ms": times[len(times) // 2],
        "min_ms": times[0],
        "mean_ms": sum(times) / len(times),
        "runs": len(times),
    }


__all__ = ["CompileError", "CompiledModel", "benchmark", "compile", "compile_file", "to_module"]


def profile(compiled: CompiledModel, inputs: Sequence[Any], iters: int = 10) -> list[tuple[str, float]]:
    """Per-kernel time (ms per run, summed over calls of the same kernel), slowest first: the model is
    rebuilt with a timer around every call (``xmge bench --profile`` prints this)."""
    import ctypes

    from backends.c.build import LoadedModel, build

    emitter = compiled.target.emitter()(profile=True)
    b = build(emitter.emit(compiled._final_module()), emitter.cflags)
    m = LoadedModel(b.library, compiled.weights, compiled.threads)
    arrays = [np.asarray(x, np.float32) for x in inputs]
    m.run(arrays)
    names_p, ms_p = ctypes.POINTER(ctypes.c_char_p)(), ctypes.POINTER(ctypes.c_double)()
    m.lib.xm_profile.restype = ctypes.c_int
    n = m.lib.xm_profile(ctypes.byref(names_p), ctypes.byref(ms_p))
    for i in range(n):
        ms_p[i] = 0.0
    for _ in range(iters):
        m.run(arrays)
    totals: dict[str, float] = {}
    for i in range(n):
        name = names_p[i].decode()
        totals[name] = totals.get(name, 0.0) + ms_p[i] / iters
    m.close()
    return sorted(totals.items(), key=lambda kv: -kv[1])
