"""``compiler.driver.compile``: a model to native code for a target, callable from Python.

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
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

from backends.c.cross import EmulationWarning
from compiler.driver.targets import Target, host_target, parse_target
from dialects.errors import XmgeError
from passes.target import Backend


class CompileError(XmgeError, ValueError):
    pass


# ----------------------------------------------------------------------------------------------
# Front ends: anything compile() accepts -> a tensor-dialect module


def read_model_file(path: str | os.PathLike[str]) -> ModuleOp:
    """The ``mgb`` module of a model file: ONNX for a ``.onnx`` name (``backends.onnx.reader``, needs
    the ``onnx`` package), a MegEngine ``.mge`` graph otherwise."""
    if os.fspath(path).lower().endswith(".onnx"):
        from backends.onnx.reader import read_onnx

        return read_onnx(os.fspath(path))
    from backends.mge.reader import read_mge

    with open(path, "rb") as f:
        return read_mge(f.read())


def to_module(model: Any, example_inputs: Sequence[Any] | None = None, graph: int = 0) -> ModuleOp:
    """The ``mgb`` module of a traced function, a Module or function (traced on ``example_inputs``),
    a ``.mge`` or ``.onnx`` path, ``.mge`` bytes, or a ``ModuleOp``; of a file with several graphs
    (``append=True``), graph number ``graph`` only (MegEngine's loaders read the first)."""
    return select_graph(_to_module(model, example_inputs), graph)


def select_graph(module: ModuleOp, graph: int) -> ModuleOp:
    """``module`` with only its ``graph``-th function (a one-line :class:`CompileError` if absent)."""
    fns = [op for op in module.ops if isinstance(op, func.FuncOp)]
    if not 0 <= graph < max(1, len(fns)):
        raise CompileError(f"compile: no graph {graph}; the model has {len(fns)} (0..{len(fns) - 1})")
    if len(fns) <= 1:
        return module
    out = module.clone()
    for i, fn in enumerate([op for op in out.ops if isinstance(op, func.FuncOp)]):
        if i != graph:
            out.body.block.erase_op(fn)
    return out


def _to_module(model: Any, example_inputs: Sequence[Any] | None = None) -> ModuleOp:
    from compiler.jit import trace
    from compiler.module.module import Module
    from compiler.tensor import Tensor

    if isinstance(model, ModuleOp):
        return model
    if isinstance(model, bytes | bytearray | memoryview):
        from backends.mge.reader import read_mge

        return read_mge(bytes(model))
    if isinstance(model, str | os.PathLike):
        return read_model_file(model)
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
            *[x if isinstance(x, Tensor) else Tensor(_example_array(x)) for x in example_inputs]
        )
        return traced.module
    raise CompileError(f"compile: cannot compile a {type(model).__name__}")


def _example_array(x: Any) -> np.ndarray:
    """An example input as the tracer should see it: floats as float32, integers (token ids,
    indices) as int32, as MegEngine's default dtypes are."""
    a = np.asarray(x)
    if a.dtype.kind in "iub":
        return a.astype(np.int32) if a.dtype.kind != "b" else a
    return a.astype(np.float32)


def _input_array(x: Any, declared: Any) -> np.ndarray:
    """A run-time input in the dtype the backend expects: the model's own integer or bool dtype for
    integer inputs, float32 for float (and quantized) ones, which the backends convert themselves."""
    from dialects.dtypes import numpy_dtype

    try:
        want = numpy_dtype(declared.element_type)
    except (AttributeError, ValueError):
        want = np.dtype(np.float32)
    if want.kind in "iub" and getattr(want, "metadata", None) is None:
        return np.asarray(x, dtype=want)
    return np.asarray(x, dtype=np.float32)


def inference_passes(target: Target | None = None) -> list[ModulePass]:
    """The graph clean-ups ``compile()`` runs before kernel selection: mgb canonicalisation, BN
    folding, arithmetic and conv-bias-nonlinearity fusion (the ``optimize_for_inference``
    rewrites), plus the target's layout and float16 options (``Target.inference_options``)."""
    from passes.inference import pipeline_for

    options = target.inference_options() if target is not None else {}
    return list(pipeline_for(enable_fuse_conv_bias_nonlinearity=True, **options))


def inference_clean(module: ModuleOp, target: Target | None = None) -> ModuleOp:
    """``module`` after :func:`inference_passes` (a copy; the input is left as it was)."""
    out = module.clone()
    ctx = Context()
    for p in inference_passes(target):
        p.apply(ctx, out)
    out.verify()
    return out


def compile_passes(target: Target, threads: int) -> list[ModulePass]:
    """Every pass ``compile()`` runs for ``target``, in order (the numeric bisect replays them)."""
    generates_kernels = target.backend is not None and target.backend.kernels is not None
    return [*inference_passes(target), *(kernel_passes(target, threads) if generates_kernels else [])]


def kernel_passes(target: Target, threads: int) -> list[ModulePass]:
    from passes.lowering import FuseEpiloguePass, LowerToKernelPass, PackWeightsPass, PlanMemoryPass
    from passes.lowering.widen import WidenF16Pass

    return [
        *([WidenF16Pass(target)] if target.float16 else []),
        LowerToKernelPass(target),
        FuseEpiloguePass(target),
        PackWeightsPass(target),
        PlanMemoryPass(threads, target),
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
        fn = next(f for f in self.final_module().ops if isinstance(f, func.FuncOp))
        self.input_types = [t for t in fn.function_type.inputs.data]
        self.output_types = [t for t in fn.function_type.outputs.data]
        self._loaded: Any = None
        self.build: Any = None
        self.weights = b""
        self.source = ""
        self.cflags: tuple[str, ...] = ()
        if self.backend.kernels is not None:
            self._build()

    # -- stages ----------------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        assert self.target.backend is not None
        return self.target.backend

    @property
    def stages(self) -> list[str]:
        return list(self._stages)

    def final_module(self) -> ModuleOp:
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

        fn = next(f for f in self.final_module().ops if isinstance(f, func.FuncOp))
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
    def _build(self) -> None:
        from passes.lowering.plan import weights_blob

        module = self.final_module()
        t0 = time.perf_counter()
        self.source, self.cflags = self.backend.emit(self.target, module)
        self._stages["c"] = self.source
        self.weights = weights_blob(module)
        self.times["emit"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.build = self.backend.build(self.target, self.source, self.cflags)
        self.times["build"] = time.perf_counter() - t0

    @property
    def emulated(self) -> bool:
        """Whether running this model goes through an emulator (an ARM build on an x86 host)."""
        return self.backend.emulated

    def loaded(self) -> Any:
        """The built library loaded into this process (once)."""
        if self._loaded is None:
            if self.build is None:
                raise CompileError(f"target {self.target} has no built library")
            self._loaded = self.backend.load(self.build, self.weights, self.threads)
        return self._loaded

    def run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Outputs for ``inputs`` (numpy arrays or Tensors), as a list of arrays."""
        arrays = [
            _input_array(getattr(x, "numpy", lambda x=x: x)(), t)
            for x, t in zip(inputs, self.input_types, strict=False)
        ]
        return self.backend.run(self, arrays)

    def __call__(self, *inputs: Any) -> Any:
        outs = self.run(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_runner(
        self, inputs: Sequence[np.ndarray], *, sanitize: bool = False, iters: int = 1
    ) -> list[np.ndarray]:
        """Run the standalone runner program on ``inputs`` (a sanitizer build with ``sanitize``)."""
        if self.build is None:
            raise CompileError(f"target {self.target} has no runner")
        artifact = (
            self.backend.build(self.target, self.source, self.cflags, sanitize=True)
            if sanitize
            else self.build
        )
        shapes = [tuple(t.get_shape()) for t in self.output_types]  # type: ignore[union-attr]
        return self.backend.run_runner(
            artifact, self.weights, inputs, shapes, threads=self.threads, iters=iters
        )

    # -- saving ----------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> str:
        """Write the backend's files (``model.c``, the runtime sources, ``libxmge_model.so``,
        ``runner``), ``weights.bin``, ``model.json`` (I/O, sizes, target) and ``kernel.mlir`` into
        ``directory``."""
        if self.build is None:
            raise CompileError(f"target {self.target} produces no files to save")
        os.makedirs(directory, exist_ok=True)
        extras = self.backend.save(self, os.fspath(directory))
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
            **extras,
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


def resolve_target(target: str | Target | None) -> Target:
    """A :class:`Target` from what users pass: a Target, its textual form, or None for this machine's
    best (anything else is a :class:`TargetError` naming it)."""
    if isinstance(target, Target):
        return target
    return host_target() if target is None else parse_target(target)


def compile(  # noqa: A001 - the public name mirrors the issue's API
    model: Any,
    target: str | Target | None = None,
    example_inputs: Sequence[Any] | None = None,
    *,
    threads: int = 1,
    graph: int = 0,
    verify: bool = False,
) -> CompiledModel:
    """Compile ``model`` (a traced function, a Module or function with ``example_inputs``, a ``.mge``
    or ``.onnx`` path, ``.mge`` bytes, or a tensor-dialect ``ModuleOp``) for ``target`` (default:
    this machine's best); ``graph`` picks one graph of a file written with ``append=True``
    (default: the first).

    With ``verify``, the reference interpreter runs after every pass and on the generated code (on
    ``example_inputs``, else seeded random inputs), and the first pass that changes the numbers
    beyond its dtype's tolerance raises :class:`compiler.driver.numerics.NumericsMismatch`, whose
    text names the pass, its options, the worst output and the IR before and after it."""
    if verify:
        from compiler.driver.numerics import NumericsMismatch, verify_compile

        module = to_module(model, example_inputs, graph)
        report = verify_compile(module, target, example_inputs, threads=threads)
        if not report.ok:
            raise NumericsMismatch(report)
        return report.compiled
    tgt = resolve_target(target)
    if threads < 1:
        raise CompileError(f"threads must be >= 1, got {threads}")
    backend = tgt.backend
    if backend is None:
        raise CompileError(f"target {tgt}: the {tgt.arch} backend is not implemented yet")
    unsupported = [o for o in tgt.options if o not in backend.options]
    if unsupported:
        raise CompileError(
            f"target options {', '.join(unsupported)} are not implemented by the {backend.name} backend "
            f"for {tgt.arch} yet"
        )
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    module = to_module(model, example_inputs, graph)
    times["frontend"] = time.perf_counter() - t0
    stages: dict[str, ModuleOp | str] = {"tensor": module}
    t0 = time.perf_counter()
    try:
        current = inference_clean(module, tgt)
    except VerifyException as exc:
        options = ", ".join(tgt.inference_options()) or "no options"
        raise CompileError(
            f"target {tgt}: the inference passes ({options}) made IR that does not verify: "
            f"{str(exc).strip().splitlines()[0]}"
        ) from None
    times["inference"] = time.perf_counter() - t0
    stages["inference"] = current
    if backend.kernels is not None:
        ctx = Context()
        current = current.clone()
        for p in kernel_passes(tgt, threads):
            t0 = time.perf_counter()
            p.apply(ctx, current)
            times[p.name] = time.perf_counter() - t0
            current.verify()
            stages[p.name] = current.clone()
    return CompiledModel(tgt, stages, threads, times)


def compile_file(path: str, target: str, out_dir: str, *, threads: int = 1, graph: int = 0) -> CompiledModel:
    """``xmge compile MODEL.mge --target T -o DIR [--graph N]``: compile a ``.mge`` file (graph ``N``
    of an ``append=True`` file) and save it to ``out_dir``."""
    compiled = compile(path, target, threads=threads, graph=graph)
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


__all__ = [
    "CompileError",
    "CompiledModel",
    "EmulationWarning",
    "benchmark",
    "compile",
    "compile_file",
    "profile",
    "to_module",
]


def profile(compiled: CompiledModel, inputs: Sequence[Any], iters: int = 10) -> list[tuple[str, float]]:
    """Per-kernel time (ms per run, summed over calls of the same kernel), slowest first: the model is
    rebuilt with a timer around every call (``xmge bench --profile`` prints this)."""
    return compiled.backend.profile(compiled, inputs, iters)
