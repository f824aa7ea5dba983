"""``compiler.driver.compile``: a model to native code for a target, callable from Python.

    compiled = xm.compile(net, target="x86-avx2", example_inputs=[x])    # a Module, with inputs
    compiled = xm.compile(traced_fn, target="x86-avx512")                 # a jit.trace already called
    compiled = xm.compile("model.mge", target="x86-avx2")                 # a MegEngine file (or bytes)
    y = compiled(x)                          # numpy in, numpy out
    compiled.save("out/")                    # a package, atomically: library, weights, sources, model.json
    model = xm.load_compiled("out/")         # back without compiling (compiler.driver.package)
    xm.compile(net, "x86-avx2", [x], batch_sizes=[1, 4], name="net")   # one variant per input shape
    print(compiled.ir("kernel-plan-memory")) # IR after any stage; compiled.stages lists them

Stages: ``tensor`` (the input graph), ``inference`` (BN folding, arithmetic and conv-bias fusion),
``kernel-select``, ``kernel-fuse-epilogue``, ``kernel-fuse-moves``, ``kernel-pack-weights``,
``kernel-plan-memory`` (the pass names), and ``c`` (the generated source). ``ref`` compiles
nothing and runs the reference interpreter.

The command-line drivers call :func:`compile_file` (``xmge compile``) and :func:`benchmark`
(``xmge bench``).
"""

from __future__ import annotations

import copy
import os
import threading
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
from compiler.progress import ProgressReporter
from dialects.errors import XmgeError
from passes.target import Backend, KernelTime


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
        traced(*[x if isinstance(x, Tensor) else Tensor(_example_array(x)) for x in example_inputs])
        return traced.module
    raise CompileError(f"compile: cannot compile a {type(model).__name__}")


def _example_array(x: Any) -> np.ndarray:
    """An example input as the tracer should see it: floats as float32, integers (token ids,
    indices) as int32, as MegEngine's default dtypes are."""
    a = np.asarray(x)
    if a.dtype.kind in "iub":
        return a.astype(np.int32) if a.dtype.kind != "b" else a
    return a.astype(np.float32)


def _input_array(x: Any, declared: Any, name: str) -> np.ndarray:
    """A run-time input in the dtype the backend expects (:func:`compiler.driver.package.input_array`)."""
    from compiler.driver.package import input_array
    from dialects.dtypes import numpy_dtype

    try:
        want = numpy_dtype(declared.element_type)
    except (AttributeError, ValueError):
        want = np.dtype(np.float32)
    return input_array(x, want, name)


def native_layouts(target: Target) -> str:
    """The blocked layouts ``target``'s architecture has kernels for (comma-separated): its own
    layout and every layout feature the architecture offers (x86: nchw88; ARM: nchw44; CUDA: the
    int8 layouts)."""
    from backends.targets import ARCHES
    from passes.target import LAYOUT_FEATURES

    arch = ARCHES.get(target.arch)
    offered = [f for f in (arch.features if arch else ()) if f in LAYOUT_FEATURES]
    return ",".join(sorted({target.layout, *offered} - {"nchw"}))


def inference_passes(target: Target | None = None) -> list[ModulePass]:
    """The graph clean-ups ``compile()`` runs before kernel selection: mgb canonicalisation, BN
    folding, arithmetic and conv-bias-nonlinearity fusion (the ``optimize_for_inference``
    rewrites), plus the target's layout and float16 options (``Target.inference_options``)."""
    from passes.inference import pipeline_for
    from passes.layout import RelayoutBackPass

    options = target.inference_options() if target is not None else {}
    # a graph dumped in a layout the target has no kernels for runs in NCHW (then the target's own layout)
    back = [RelayoutBackPass(keep=native_layouts(target))] if target is not None and target.isas else []
    # kernels take static shapes: shapes the graph computes are fixed to the traced ones first
    from passes.inference import SpecializeShapesPass

    return [SpecializeShapesPass(), *back, *pipeline_for(enable_fuse_conv_bias_nonlinearity=True, **options)]


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


def kernel_passes(
    target: Target, threads: int, choices: tuple[tuple[str, str], ...] = ()
) -> list[ModulePass]:
    from passes.lowering import (
        FuseEpiloguePass,
        FuseMovesPass,
        LowerToKernelPass,
        PackWeightsPass,
        PlanMemoryPass,
    )
    from passes.lowering.bf16_activations import Bf16ActivationsPass, takes_part
    from passes.lowering.widen import WidenF16Pass

    return [
        *([WidenF16Pass(target)] if target.float16 else []),
        LowerToKernelPass(target, choices=choices),
        FuseEpiloguePass(target),
        FuseMovesPass(target),
        *([Bf16ActivationsPass(target)] if takes_part(target) else []),
        PackWeightsPass(target),
        PlanMemoryPass(threads, target),
    ]


# ----------------------------------------------------------------------------------------------
# The compiled model


class CompiledModel:
    """A model compiled for one target: call it on numpy arrays. Safe to call from several threads
    at once (each call runs on its own per-call state of the one loaded library).

    ``variants`` holds the stages of every input-shape signature the model was compiled for
    (``compile(..., shapes=...)``); the first is the model's own (``stages``, ``ir``)."""

    def __init__(
        self,
        target: Target,
        stages: dict[str, ModuleOp | str],
        threads: int,
        times: dict[str, float],
        *,
        name: str = "xmge_model",
        variants: Sequence[dict[str, ModuleOp | str]] = (),
    ) -> None:
        self.target = target
        self._stages = stages
        self._variants = [stages, *variants]
        self.threads = threads
        self.times = times
        self.name = name
        fn = next(f for f in self.final_module().ops if isinstance(f, func.FuncOp))
        self.input_types = [t for t in fn.function_type.inputs.data]
        self.output_types = [t for t in fn.function_type.outputs.data]
        self.input_names = _names(fn, "input_names", "input", len(self.input_types))
        self.output_names = _names(fn, "output_names", "output", len(self.output_types))
        self._loaded: Any = None
        self._lock = threading.Lock()
        self.build: Any = None
        self.weights = b""
        self.source = ""
        self.cflags: tuple[str, ...] = ()
        self.weights_offsets: list[int] = [0] * len(self._variants)
        # the tuning file entries this model was compiled with (saved as the package's tuning.json)
        self.tuning: Any = None
        self.tune_report: Any = None  # compiler.driver.tuner.TuneReport of compile(tune=True)
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

    def final_module(self, variant: int = 0) -> ModuleOp:
        mods = [m for m in self._variants[variant].values() if isinstance(m, ModuleOp)]
        return mods[-1]

    @property
    def shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        """The input-shape signature of every variant (one unless compiled with ``shapes=``)."""
        return [
            tuple(tuple(t.get_shape()) for t in _io_types(self.final_module(i))[0])
            for i in range(len(self._variants))
        ]

    def variant_for(self, shapes: Sequence[Sequence[int]]) -> int:
        """The variant serving inputs of ``shapes`` (a one-line :class:`CompileError` listing the
        shapes the model holds otherwise)."""
        from compiler.driver.package import shapes_text

        want = tuple(tuple(int(d) for d in s) for s in shapes)
        held = self.shapes
        if want in held:
            return held.index(want)
        raise CompileError(
            f"{self.name}: compiled for input shapes {shapes_text(held)}, got {shapes_text([want])}"
        )

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
        """One library for every variant (symbols prefixed with the model's name), and one weights
        blob holding each variant's weights at its offset (identical ones once)."""
        from backends.c.build import pack_weights
        from passes.lowering.plan import weights_blob

        modules = [self.final_module(i) for i in range(len(self._variants))]
        t0 = time.perf_counter()
        self.weights, self.weights_offsets = pack_weights([weights_blob(m) for m in modules])
        self.source, self.cflags = self.backend.emit(
            self.target,
            modules[0] if len(modules) == 1 else modules,
            prefix=self.name,
            weights_offsets=self.weights_offsets,
        )
        self._stages["c"] = self.source
        self.times["emit"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.build = self.backend.build(self.target, self.source, self.cflags)
        self.times["build"] = time.perf_counter() - t0

    @property
    def emulated(self) -> bool:
        """Whether running this model goes through an emulator (an ARM build on an x86 host)."""
        return self.backend.emulated

    def with_threads(self, threads: int) -> CompiledModel:
        """This model run on ``threads`` threads per call: the same build, its own loaded instance
        (so its own copy of the weights in memory)."""
        if threads < 1:
            raise CompileError(f"threads must be >= 1, got {threads}")
        other = copy.copy(self)
        other.threads = threads
        other._loaded = None
        other._lock = threading.Lock()
        return other

    def loaded(self) -> Any:
        """The built library loaded into this process (once, whichever thread asks first)."""
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    if self.build is None:
                        raise CompileError(f"target {self.target} has no built library")
                    self._loaded = self.backend.load(self.build, self.weights, self.threads)
        return self._loaded

    def run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Outputs for ``inputs`` (numpy arrays or Tensors), as a list of arrays."""
        if len(inputs) != len(self.input_types):
            from backends.c.build import InputError

            raise InputError(
                f"{self.name}: the model takes {len(self.input_types)} input(s) "
                f"({', '.join(self.input_names)}), got {len(inputs)}"
            )
        arrays = [
            _input_array(getattr(x, "numpy", lambda x=x: x)(), t, name)
            for x, t, name in zip(inputs, self.input_types, self.input_names, strict=True)
        ]
        variant = self.variant_for([a.shape for a in arrays]) if len(self._variants) > 1 else 0
        if variant != 0 and self.emulated:
            raise CompileError(
                f"{self.name}: under emulation only the first variant {self.shapes[0]} runs here; "
                "the saved package's runner takes -v VARIANT on the device"
            )
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
        """Write the package ``directory`` atomically (:mod:`compiler.driver.package`): the backend's
        files (``model.c``, the runtime sources, the library, ``runner``, Makefile, CMakeLists.txt,
        README.md), ``weights.bin``, ``kernel.mlir``, ``tuning.json`` (a tuned model's kernel choices,
        with the CPU they were measured on) and the manifest ``model.json``. A kill at any
        moment leaves the previous package or none, never part of one. ``compiler.load_compiled``
        loads it back without compiling."""
        from compiler.driver.package import write_package

        if self.build is None:
            raise CompileError(f"target {self.target} produces no files to save")

        def fill(work: str) -> dict[str, Any]:
            extras = self.backend.save(self, work)
            with open(os.path.join(work, "weights.bin"), "wb") as f:
                f.write(self.weights)
            with open(os.path.join(work, "kernel.mlir"), "w") as f:
                f.write(self.ir("kernel-plan-memory"))
            if self.tuning is not None and self.tuning.choices:
                from compiler.tuning import PACKAGE_FILE

                with open(os.path.join(work, PACKAGE_FILE), "w") as f:
                    f.write(self.tuning.to_json())
                extras = {**extras, "tuning": PACKAGE_FILE}
            return self.manifest(extras)

        return write_package(directory, fill)

    def manifest(self, extras: dict[str, Any] | None = None) -> dict[str, Any]:
        """``model.json`` without its file hashes (``save`` adds those)."""
        import platform

        from compiler import __version__
        from compiler.driver.package import FORMAT, FORMAT_VERSION

        needed = getattr(self.backend, "cpu_flags_needed", None)
        variants = []
        for i in range(len(self._variants)):
            ins, outs = _io_types(self.final_module(i))
            plan = _plan(self.final_module(i))
            variants.append(
                {
                    "inputs": [_describe(t, n) for t, n in zip(ins, self.input_names, strict=True)],
                    "outputs": [_describe(t, n) for t, n in zip(outs, self.output_names, strict=True)],
                    "weights_offset": self.weights_offsets[i],
                    "arena_bytes": plan.arena.data if plan is not None else 0,
                    "workspace_bytes": plan.workspace.data if plan is not None else 0,
                    "weights_bytes": plan.weights.data if plan is not None else 0,
                }
            )
        machine = {"arm": "aarch64", "x86": "x86_64"}.get(self.target.arch, platform.machine().lower())
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "xmge_version": __version__,
            "name": self.name,
            "prefix": getattr(self.build, "symbols", self.name),
            "target": str(self.target),
            "machine": machine,
            "cpu_features": sorted(needed(self.target)) if needed is not None else [],
            "threads": self.threads,
            "weights": "weights.bin",
            "variants": variants,
            # the first variant's, where one-shape tools look
            "inputs": variants[0]["inputs"],
            "outputs": variants[0]["outputs"],
            "arena_bytes": variants[0]["arena_bytes"],
            "workspace_bytes": variants[0]["workspace_bytes"],
            "weights_bytes": variants[0]["weights_bytes"],
            "cflags": list(self.cflags),
            "run": "./runner weights.bin -t THREADS -n ITERS [-i input0.bin ...] [-o output0.bin ...]",
            **(extras or {}),
        }


def _io_types(module: ModuleOp) -> tuple[list[Any], list[Any]]:
    fn = next(f for f in module.ops if isinstance(f, func.FuncOp))
    return list(fn.function_type.inputs.data), list(fn.function_type.outputs.data)


def _plan(module: ModuleOp) -> Any:
    from dialects.kernel import plan_of

    return plan_of(next(f for f in module.ops if isinstance(f, func.FuncOp)))


def _names(fn: func.FuncOp, key: str, kind: str, count: int) -> list[str]:
    """The graph's input or output names (``input_names`` / ``output_names``), else ``input0``..."""
    from xdsl.dialects.builtin import ArrayAttr

    a = fn.attributes.get(key)
    names = [getattr(x, "data", "") for x in a.data] if isinstance(a, ArrayAttr) else []
    if len(names) != count or not all(names):
        return [f"{kind}{i}" for i in range(count)]
    return names


def _describe(t: Any, name: str) -> dict[str, Any]:
    from dialects.dtypes import dtype_name

    assert isinstance(t, TensorType)
    return {"name": name, "shape": list(t.get_shape()), "dtype": dtype_name(t.element_type)}


# ----------------------------------------------------------------------------------------------
# Entry points


def resolve_target(target: str | Target | None) -> Target:
    """A :class:`Target` from what users pass: a Target, its textual form, or None (or ``"host"``)
    for this machine's best (anything else is a :class:`TargetError` naming it)."""
    if isinstance(target, Target):
        return target
    if target is None or (isinstance(target, str) and target.strip() in ("host", "native")):
        return host_target()
    return parse_target(target)


def compile(  # noqa: A001 - the public name mirrors the issue's API
    model: Any,
    target: str | Target | None = None,
    example_inputs: Sequence[Any] | None = None,
    *,
    threads: int = 1,
    graph: int = 0,
    verify: bool = False,
    name: str | None = None,
    shapes: Sequence[Any] | None = None,
    batch_sizes: Sequence[int] | None = None,
    progress: bool | None = None,
    tuning_file: str | os.PathLike[str] | Any | None = None,
    tune: bool = False,
    tune_budget_s: float | None = None,
) -> CompiledModel:
    """Compile ``model`` (a traced function, a Module or function with ``example_inputs``, a ``.mge``
    or ``.onnx`` path, ``.mge`` bytes, or a tensor-dialect ``ModuleOp``) for ``target`` (default:
    this machine's best); ``graph`` picks one graph of a file written with ``append=True``
    (default: the first).

    ``name`` is the model's C prefix and package name (default: from the file's or the Module's name,
    made a C identifier). ``shapes`` (one shape per entry for a one-input model, else one list of
    shapes per entry) or ``batch_sizes`` (the example's shapes with another first dimension) compile
    one variant per input-shape signature into the one model; a call picks the variant by the shapes
    it is given.

    With ``verify``, the reference interpreter runs after every pass and on the generated code (on
    ``example_inputs``, else seeded random inputs), and the first pass that changes the numbers
    beyond its dtype's tolerance raises :class:`compiler.driver.numerics.NumericsMismatch`, whose
    text names the pass, its options, the worst output and the IR before and after it.

    ``progress`` writes stage lines to a terminal's stderr (default: only when stderr is a terminal
    and ``XMGE_PROGRESS`` is not ``0``; ``False`` turns it off).

    ``tuning_file`` (:mod:`compiler.tuning`; a path or a ``TuningFile``) names kernel families
    measured fastest per op on this machine; kernel-select tries them first. A file from another
    CPU, ISA set or thread count is ignored with a warning; without one, the registry's priorities
    decide. A package folder saved from a tuned compile works as ``tuning_file`` too (its
    ``tuning.json``). For the host target (``target`` None or ``"host"``) the file's whole-graph
    layout choice for this model is applied.

    ``tune`` measures the choices on this machine first (:func:`compiler.driver.tuner.tune`: every kernel
    family that matches each op, and for the host target plain NCHW against NCHW88), within
    ``tune_budget_s`` seconds; with ``tuning_file`` the choices already there are re-used without
    timing and the new ones are saved to it. The result's ``tune_report`` says what was measured."""
    from compiler.driver.package import c_identifier, default_name
    from compiler.progress import progress as progress_reporter

    prefix = c_identifier(name) if name is not None else default_name(model)
    if tune:
        return _compile_tuned(
            model, target, example_inputs, threads, graph, name, shapes, batch_sizes, progress,
            tuning_file, tune_budget_s, verify,
        )  # fmt: skip
    if verify:
        from compiler.driver.numerics import NumericsMismatch, verify_compile

        if shapes is not None or batch_sizes is not None:
            raise CompileError("compile: verify=True checks one input shape; drop shapes= / batch_sizes=")
        with progress_reporter("compile", enabled=progress) as rep:
            rep.stage("frontend")
            module = to_module(model, example_inputs, graph)
            rep.stage("verifying every pass against the reference")
            report = verify_compile(
                module, target, example_inputs, threads=threads, name=prefix, progress=progress
            )
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
    tuning = None
    if tuning_file is not None:
        from compiler.tuning import TuningFile, checked, key_for, load_for

        key = key_for(tgt, threads)
        tuning = (
            checked(tuning_file, key, "tuning") if isinstance(tuning_file, TuningFile)
            else load_for(tuning_file, key)
        )  # fmt: skip
    auto = target is None or (isinstance(target, str) and target.strip() in ("host", "native"))
    times: dict[str, float] = {}
    with progress_reporter("compile", enabled=progress) as rep:
        return _compile_stages(
            model, example_inputs, graph, tgt, threads, shapes, batch_sizes, prefix, times, rep, tuning, auto
        )


def _compile_tuned(
    model: Any,
    target: str | Target | None,
    example_inputs: Sequence[Any] | None,
    threads: int,
    graph: int,
    name: str | None,
    shapes: Sequence[Any] | None,
    batch_sizes: Sequence[int] | None,
    progress: bool | None,
    tuning_file: str | os.PathLike[str] | None,
    budget_s: float | None,
    verify: bool,
) -> CompiledModel:
    """``compile(..., tune=True)``: measure, then compile with the measured choices."""
    from compiler.driver.package import c_identifier, default_name
    from compiler.driver.tuner import tune
    from compiler.progress import progress as progress_reporter

    if shapes is not None or batch_sizes is not None:
        raise CompileError(
            "compile: tune=True measures one input shape; tune, then compile with shapes= and tuning_file="
        )
    if verify:
        raise CompileError("compile: give tune=True or verify=True, not both")
    prefix = c_identifier(name) if name is not None else default_name(model)
    tuning, report = tune(
        model, target, example_inputs, threads=threads, graph=graph, budget_s=budget_s,
        tuning_file=tuning_file, progress=progress, name=prefix,
    )  # fmt: skip
    times: dict[str, float] = {"tune": report.seconds}
    with progress_reporter("compile", enabled=progress) as rep:
        compiled = _compile_stages(
            model, example_inputs, graph, report.target, threads, None, None, prefix, times, rep, tuning
        )
    compiled.tune_report = report
    return compiled


def _compile_stages(
    model: Any,
    example_inputs: Sequence[Any] | None,
    graph: int,
    tgt: Target,
    threads: int,
    shapes: Sequence[Any] | None,
    batch_sizes: Sequence[int] | None,
    prefix: str,
    times: dict[str, float],
    rep: ProgressReporter,
    tuning: Any = None,
    auto: bool = False,
) -> CompiledModel:
    """``tuning``: a :class:`compiler.tuning.TuningFile` made under this target's key (or None);
    ``auto``: the target is the host default, so the file's layout choice may replace its layout."""
    backend = tgt.backend
    assert backend is not None
    rep.stage("frontend")
    t0 = time.perf_counter()
    module = to_module(model, example_inputs, graph)
    entry = ""
    if tuning is not None:
        from compiler.driver.tuner import layout_entry, with_layout

        entry = layout_entry(module)
        layout = tuning.layout(entry)
        if auto and layout is not None and layout != tgt.layout:
            other = with_layout(tgt, layout)
            if other.backend is not None and other.backend.runs_here(other):
                tgt = other
    modules = [module]
    if shapes is not None or batch_sizes is not None:
        if backend.kernels is None:
            raise CompileError(f"target {tgt} generates no code: shapes= / batch_sizes= need a code target")
        signatures = shape_signatures(_arg_shapes(module), shapes, batch_sizes)
        modules = [modules_for_shapes(model, example_inputs, graph, module, sig) for sig in signatures]
    times["frontend"] = time.perf_counter() - t0
    choices: tuple[tuple[str, str], ...] = tuning.as_option() if tuning is not None else ()
    per_module = 1 + (len(kernel_passes(tgt, threads)) if backend.kernels is not None else 0)
    rep.set_total(per_module * len(modules))
    stages = [_lower(m, tgt, threads, times, rep, choices) for m in modules]
    compiled = CompiledModel(tgt, stages[0], threads, times, name=prefix, variants=stages[1:])
    if tuning is not None:
        from compiler.driver.tuner import op_signatures

        used = {entry}.union(*(op_signatures(st["inference"]) for st in stages))  # type: ignore[arg-type]
        compiled.tuning = tuning.restricted(used)
    return compiled


def _lower(
    module: ModuleOp,
    tgt: Target,
    threads: int,
    times: dict[str, float],
    rep: ProgressReporter | None = None,
    choices: tuple[tuple[str, str], ...] = (),
) -> dict[str, ModuleOp | str]:
    """The stages of ``module`` through the inference and (for a code-generating target) kernel passes."""
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
    times["inference"] = times.get("inference", 0.0) + time.perf_counter() - t0
    stages["inference"] = current
    if rep is not None:
        rep.advance("inference passes")
    if tgt.backend is not None and tgt.backend.kernels is not None:
        ctx = Context()
        current = current.clone()
        for p in kernel_passes(tgt, threads, choices):
            t0 = time.perf_counter()
            p.apply(ctx, current)
            times[p.name] = times.get(p.name, 0.0) + time.perf_counter() - t0
            current.verify()
            stages[p.name] = current.clone()
            if rep is not None:
                rep.advance(p.name)
    return stages


Signature = tuple[tuple[int, ...], ...]


def _arg_shapes(module: ModuleOp) -> Signature:
    fn = next(f for f in module.ops if isinstance(f, func.FuncOp))
    return tuple(tuple(t.get_shape()) for t in fn.function_type.inputs.data)  # type: ignore[attr-defined]


def shape_signatures(
    own: Signature, shapes: Sequence[Any] | None, batch_sizes: Sequence[int] | None
) -> list[Signature]:
    """The input-shape signatures ``shapes`` / ``batch_sizes`` ask for (duplicates dropped, in order),
    checked against the model's own inputs ``own`` (count and rank)."""
    if shapes is not None and batch_sizes is not None:
        raise CompileError("compile: give shapes= or batch_sizes=, not both")
    wanted: list[Signature] = []
    if batch_sizes is not None:
        for b in batch_sizes:
            if int(b) < 1 or any(len(s) == 0 for s in own):
                raise CompileError(f"compile: batch size {b}: every input needs a first dimension, >= 1")
            wanted.append(tuple((int(b), *s[1:]) for s in own))
    else:
        for entry in shapes or ():
            items = list(entry)
            one = bool(items) and all(isinstance(d, int | np.integer) for d in items)
            sig = (tuple(int(d) for d in items),) if one else tuple(tuple(int(d) for d in s) for s in items)
            wanted.append(sig)
    if not wanted:
        raise CompileError("compile: shapes= / batch_sizes= is empty")
    for sig in wanted:
        if len(sig) != len(own) or any(len(a) != len(b) for a, b in zip(sig, own, strict=False)):
            raise CompileError(
                f"compile: input shapes {[list(s) for s in sig]} do not fit the model's inputs "
                f"{[list(s) for s in own]} (count and rank must match)"
            )
        if any(d < 1 for s in sig for d in s):
            raise CompileError(f"compile: input shapes {[list(s) for s in sig]} have a dimension < 1")
    return list(dict.fromkeys(wanted))


def modules_for_shapes(
    model: Any, example_inputs: Sequence[Any] | None, graph: int, module: ModuleOp, sig: Signature
) -> ModuleOp:
    """``model`` as a tensor-dialect module whose inputs have the shapes ``sig``: a Module or function
    traced again on the example inputs resized to them, a ``.mge`` file's graph read again with its
    inputs declared so (the reader folds every shape computation for them), an ONNX file read with
    those input shapes. A ``ModuleOp`` has fixed shapes: only its own are accepted."""
    from compiler.jit import trace

    if sig == _arg_shapes(module):
        return module
    if isinstance(model, ModuleOp):
        raise CompileError(
            f"compile: a ModuleOp has fixed input shapes {[list(s) for s in _arg_shapes(module)]}; "
            "give the Module, the function or the model file for other shapes"
        )
    if isinstance(model, str | os.PathLike) and os.fspath(model).lower().endswith(".onnx"):
        from backends.onnx.reader import read_onnx

        fn = next(f for f in module.ops if isinstance(f, func.FuncOp))
        names = _names(fn, "input_names", "input", len(sig))
        return select_graph(read_onnx(os.fspath(model), dict(zip(names, sig, strict=True))), 0)
    if isinstance(model, str | os.PathLike | bytes | bytearray | memoryview):
        from backends.mge.container import parse_file
        from backends.mge.reader import graph_to_func
        from compiler.lite import _with_input_shapes

        if isinstance(model, str | os.PathLike):
            with open(model, "rb") as f:
                data = f.read()
        else:
            data = bytes(model)
        fn = next(f for f in module.ops if isinstance(f, func.FuncOp))
        try:
            raw = _with_input_shapes(parse_file(data)[graph], sig)
            new = ModuleOp([graph_to_func(raw, fn.sym_name.data)])
            new.verify()
        except (ValueError, VerifyException) as exc:
            raise CompileError(
                f"compile: the model cannot run with input shapes {[list(s) for s in sig]}: "
                f"{str(exc).splitlines()[0]}"
            ) from None
        return new
    if example_inputs is None:
        raise CompileError("compile: shapes= on a Module or function needs example_inputs to trace it again")
    resized = [
        np.resize(_example_array(getattr(x, "numpy", lambda x=x: x)()), shape)
        for x, shape in zip(example_inputs, sig, strict=True)
    ]
    fn_or_model = model.function if isinstance(model, trace) else model
    return to_module(fn_or_model, resized, 0)


def compile_file(
    path: str,
    target: str,
    out_dir: str,
    *,
    threads: int = 1,
    graph: int = 0,
    name: str | None = None,
    progress: bool | None = None,
    tuning_file: str | None = None,
) -> CompiledModel:
    """``xmge compile MODEL.mge --target T -o DIR [--graph N] [--name PREFIX] [--tuning-file F]``:
    compile a ``.mge`` file (graph ``N`` of an ``append=True`` file) and save it to ``out_dir`` as a
    package."""
    compiled = compile(
        path, target, threads=threads, graph=graph, name=name, progress=progress, tuning_file=tuning_file
    )
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
    "profile_layers",
    "to_module",
]


def profile(compiled: CompiledModel, inputs: Sequence[Any], iters: int = 10) -> list[tuple[str, float]]:
    """Per-kernel time (ms per run, summed over calls of the same kernel), slowest first: the model is
    rebuilt with a timer around every call."""
    totals: dict[str, float] = {}
    for row in profile_layers(compiled, inputs, iters):
        totals[row.kernel] = totals.get(row.kernel, 0.0) + row.ms
    return sorted(totals.items(), key=lambda kv: -kv[1])


def profile_layers(compiled: CompiledModel, inputs: Sequence[Any], iters: int = 10) -> list[KernelTime]:
    """Every kernel call's time (ms per run) with the model's name of the operator it computes
    (``layer1.0.conv1.Convolution``; a fused call carries the name of the operator whose result it
    writes), in the order a run makes the calls (``xmge bench --profile`` prints these)."""
    return compiled.backend.profile(compiled, inputs, iters)
