"""Kernel choice by measurement on the machine at hand (MegEngine's fast-run, TVM's tuning).

``tune(model, target)`` (``compile(..., tune=True)``, ``xmge tune``) decides, for every op that more
than one kernel family ``match``es, which family is fastest on the op's real shapes here, and (for
the host target, whose layout is not fixed by the user) whether the whole graph runs faster in plain
NCHW or in blocked NCHW88 (the blocked layout forces relayouts around ops without blocked kernels,
so that choice is made on the whole model, never per op). The registry exposes no other variants
(tile sizes are fixed inside a template; Winograd is a family of its own, so it is a candidate).

How it measures. Ops are grouped by :func:`passes.lowering.select.op_signature`, so the repeated
layers of a model are timed once. Candidate assignments are compiled as whole models: round ``r``
gives every pending signature its ``r``-th candidate (round 0 is today's priority choice), and each
round is one profiling build (a timer around every kernel call). A handful of rounds therefore
covers every candidate of every op: ResNet-50 needs two builds per layout. The round libraries run
interleaved, one run each in turn, and every call's time is attributed to the op it came from (its
``scope`` is tagged); a round whose candidates all take over twice the priority choice's time in
their first two runs is not timed further. An op's cost in a round is its own call plus the calls of
its direct producers and consumers that have a single candidate, because a family that fuses a
neighbour's work (an epilogue, an expand convolution) makes that neighbour's call vanish. The
cheapest candidate wins when it is at least :data:`MIN_GAIN` faster than the priority choice (the
machine may be shared and noisy; a smaller difference keeps today's choice). At one thread the call
timers read the thread's CPU time and each call's median run counts, so time other processes take
the core does not count; at more threads they read the wall clock and each call's fastest run counts
(load only ever adds time).

Numerics. Every round's output is compared once with the reference interpreter's (float32 at
``CODE_TOLERANCE``; float16 and bfloat16 targets at the float16 bounds) before its candidates may
win; a round that fails disqualifies every non-default candidate it held (noted in the report).

Layouts and the untuned baseline. Each layout's tuned model and the untuned model (the target's
priority choices) are timed whole, interleaved (:func:`whole_model_ms`; a round's library is re-used
where it holds exactly those choices, else the model is built); the fastest that beats the untuned
model by :data:`MIN_GAIN` is kept, else the priority choices are written, so a tuned compile is
never slower than an untuned one as measured.

Results go to a :class:`compiler.tuning.TuningFile` (one entry per measured signature, the layout
under ``layout:<model key>``); a later tune or compile with the same file re-uses them without
timing. ``budget_s`` bounds the tuning time: before each layout's profiling rounds and before the
whole-model comparison, work the time spent so far says would overrun it is skipped (its signatures
keep the priority choice and are not written, so a later run can measure them), and repeated runs
stop at the budget; one layout's round builds, once started, are not interrupted (the first layout's
rounds always run: nothing has been measured to estimate them).

Not thread-safe: tuning builds use process-wide profile counters; tune one model at a time.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue

from dialects import kernel as K
from dialects import tensor as T
from dialects.errors import XmgeError
from passes.lowering.kernels import VIEW_OPS
from passes.lowering.select import op_signature
from passes.target import LAYOUT_FEATURES, Target

# a candidate must beat the priority choice by this fraction of its time to replace it
MIN_GAIN = 0.03
# a round's timed runs take about this long (each library runs at least MIN_REPS times)
ROUND_SECONDS = 0.6
MIN_REPS, MAX_REPS = 5, 41
TAG = "xmge-tune:"


class TuneError(XmgeError, ValueError):
    """Tuning cannot run: a target this machine cannot execute, several input shapes, ..."""


@dataclass
class SignatureResult:
    """What tuning found for one op signature."""

    signature: str
    ops: int  # ops of the model with this signature
    candidates: tuple[str, ...]  # the families that match, priority order ([0]: the untuned choice)
    chosen: str
    ms: dict[str, float] = field(default_factory=dict)  # median cost per timed candidate
    rejected: dict[str, str] = field(default_factory=dict)  # family -> why it could not win
    reused: bool = False  # taken from the tuning file, not timed


@dataclass
class TuneReport:
    """A tuning run: what was measured, what won, and how long it took."""

    target: Target  # the target compiles use (the winning layout)
    threads: int
    seconds: float = 0.0
    builds: int = 0  # profiling and whole-model builds made for timing
    timed: bool = False  # whether anything was timed (False: every choice came from the file)
    signatures: dict[str, list[SignatureResult]] = field(default_factory=dict)  # per layout target
    layouts_ms: dict[str, float] = field(default_factory=dict)  # tuned whole model per layout target
    untuned_ms: float | None = None
    tuned_ms: float | None = None
    clock: str = ""
    budget_hit: bool = False
    notes: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # wall seconds per phase of the run

    def summary(self) -> str:
        """A few lines for people: per layout, the signatures whose choice moved; the layouts; time."""
        lines = [f"tuned for {self.target} on {self.threads} thread(s) in {self.seconds:.1f} s "
                 f"({self.builds} timing builds{'' if self.timed else ', nothing timed: all from the file'})"]
        for tgt, results in self.signatures.items():
            moved = [r for r in results if r.chosen != r.candidates[0]]
            lines.append(f"  {tgt}: {len(results)} op signature(s) with several kernels, "
                         f"{len(moved)} moved off the priority choice")
            for r in moved:
                times = ", ".join(f"{f} {ms:.3f}" for f, ms in r.ms.items())
                lines.append(f"    {r.chosen} x{r.ops} ({times} ms)  {r.signature[:90]}")
        if self.layouts_ms:
            lines.append("  whole model, " + self.clock + ": " + ", ".join(
                f"{t} {ms:.2f} ms" for t, ms in self.layouts_ms.items()))
        if self.untuned_ms is not None and self.tuned_ms is not None:
            lines.append(f"  untuned {self.untuned_ms:.2f} ms, tuned {self.tuned_ms:.2f} ms "
                         f"({self.untuned_ms / self.tuned_ms:.2f}x)")
        if self.phases:
            lines.append("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items()))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Facts about a model and its candidates


def model_key(module: ModuleOp) -> str:
    """A short hash of a model's structure (op kinds, types, attributes; not the weights' values):
    the key its whole-graph layout choice is stored under."""
    h = hashlib.sha256()
    for op in module.walk():
        if isinstance(op, T.ConstOp):
            h.update(f"const {op.result_types[0]}\n".encode())
        elif not isinstance(op, ModuleOp | func.FuncOp):
            h.update((op_signature(op) + "\n").encode())
    return h.hexdigest()[:16]


def op_signatures(module: ModuleOp) -> set[str]:
    """The signatures of the ops of ``module`` that kernel-select lowers (constants and views aside)."""
    return {
        op_signature(op)
        for fn in module.ops if isinstance(fn, func.FuncOp)
        for op in _compute_ops(fn)
    }  # fmt: skip


def layout_entry(module: ModuleOp) -> str:
    from compiler.tuning import LAYOUT_PREFIX

    return LAYOUT_PREFIX + model_key(module)


def with_layout(target: Target, layout: str) -> Target:
    """``target`` with its activation layout replaced by ``layout`` (``nchw`` or a layout feature)."""
    from compiler.driver.targets import parse_target

    features = [f for f in target.features if f not in LAYOUT_FEATURES]
    if layout != "nchw":
        features.insert(1 if features else 0, layout)
    options = "".join("+" + o for o in target.options)
    return parse_target(target.arch + "".join("-" + f for f in features) + options)


def layout_alternatives(target: Target) -> list[Target]:
    """The targets a whole-graph layout choice compares for ``target``: plain NCHW and NCHW88 on
    x86 (the ones this machine runs), ``target`` first; other architectures keep their layout."""
    from compiler.driver.targets import runs_here

    if target.arch != "x86" or target.layout not in ("nchw", "nchw88"):
        return [target]
    other = with_layout(target, "nchw" if target.layout == "nchw88" else "nchw88")
    return [target, other] if runs_here(other) else [target]


def _compute_ops(fn: func.FuncOp) -> list[Operation]:
    return [
        op for op in fn.body.block.ops
        if not isinstance(op, (func.ReturnOp, T.ConstOp, K.WeightOp, *VIEW_OPS))
    ]


def candidates(op: Operation, target: Target) -> list[str]:
    """The kernel families that can run ``op`` on ``target``, in priority order (the first is the
    one kernel-select picks without a tuning file)."""
    reg = target.kernels
    out = []
    for family in reg.families(type(op)):
        unit = reg.first(family, target.isas)
        if unit is not None and unit.match(op) is not None:
            out.append(family)
    return out


@dataclass
class _Graph:
    """A layout's inference-clean graph with every compute op tagged, its signatures and neighbours."""

    module: ModuleOp  # tagged: each compute op's ``scope`` is TAG + its index
    sigs: list[str]  # per op index
    cands: dict[str, list[str]]  # signature -> candidate families
    neighbours: list[set[int]]  # per op index: producers and consumers (through views)
    by_sig: dict[str, list[int]] = field(default_factory=dict)  # signature -> op indices


def _through_views_up(v: SSAValue) -> Operation | None:
    op = v.owner
    while isinstance(op, VIEW_OPS):
        op = op.operands[0].owner
    return op if isinstance(op, Operation) else None


def _users_through_views(op: Operation) -> list[Operation]:
    out, todo = [], [u.operation for r in op.results for u in r.uses]
    while todo:
        u = todo.pop()
        if isinstance(u, VIEW_OPS):
            todo += [w.operation for r in u.results for w in r.uses]
        else:
            out.append(u)
    return out


def _graph(module: ModuleOp, target: Target) -> _Graph:
    from compiler.driver.compile import inference_clean
    from passes.lowering.widen import WidenF16Pass

    clean = inference_clean(module, target)
    # kernel-select widens float16 ops first; signatures are taken where it takes them
    WidenF16Pass(target).apply_for(clean, target)
    fn = next(f for f in clean.ops if isinstance(f, func.FuncOp))
    ops = _compute_ops(fn)
    index = {op: i for i, op in enumerate(ops)}
    sigs = [op_signature(op) for op in ops]
    cands: dict[str, list[str]] = {}
    for op, s in zip(ops, sigs, strict=True):
        if s not in cands:
            cands[s] = candidates(op, target)
    neighbours: list[set[int]] = []
    for op in ops:
        near = {index[p] for v in op.operands if (p := _through_views_up(v)) in index}
        near |= {index[u] for u in _users_through_views(op) if u in index}
        neighbours.append(near)
    for i, op in enumerate(ops):
        op.attributes["scope"] = StringAttr(f"{TAG}{i}")
    by_sig: dict[str, list[int]] = {}
    for i, s in enumerate(sigs):
        by_sig.setdefault(s, []).append(i)
    return _Graph(clean, sigs, cands, neighbours, by_sig)


# ----------------------------------------------------------------------------------------------
# Timing


@dataclass
class _Round:
    choices: dict[str, str]
    loaded: Any = None
    tags: list[int | None] = field(default_factory=list)  # per profiled call: the op index it came from
    per_call: list[np.ndarray] = field(default_factory=list)  # one array of call times per run
    worst: Any = None  # compiler.driver.numerics.OutputError of its output against the reference
    ok: bool = True
    pruned: bool = False  # not timed past its first runs: all its candidates were far slower


def _kernel_module(graph: _Graph, target: Target, threads: int, choices: dict[str, str]) -> ModuleOp:
    from compiler.driver.compile import kernel_passes

    current = graph.module.clone()
    ctx = Context()
    for p in kernel_passes(target, threads, tuple(sorted(choices.items()))):
        p.apply(ctx, current)
    return current


# the profiling build's timer (backends/c/runtime/xm_kernels.h reads CLOCK_MONOTONIC) made to read
# the calling thread's CPU time: at one thread every kernel runs on it, and on a shared machine the
# time other processes take the core from it then does not count
_WALL_CLOCK = "#define XM_PROFILE_CLOCK 1"
_THREAD_CLOCK = (
    "#include <time.h>\n"
    "static inline double xm_now_ms(void) {\n"
    "  struct timespec ts;\n"
    "  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);\n"
    "  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;\n"
    "}"
)


def _profile_build(
    module: ModuleOp, target: Target, prefix: str, cpu_clock: bool
) -> tuple[Callable[[], Any], list[int | None], bytes]:
    """Emit ``module`` with a timer around each call (``cpu_clock``: the thread's CPU time);
    returns a build thunk (run it on a worker thread: gcc is a subprocess), the op index of each
    call and the weights."""
    from backends.c.build import pack_weights
    from passes.lowering.plan import weights_blob

    backend = target.backend
    assert backend is not None
    weights, _ = pack_weights([weights_blob(module)])
    source, cflags = backend.emit(target, module, profile=True, prefix=prefix)
    if cpu_clock and source.count(_WALL_CLOCK) == 1:
        source = source.replace(_WALL_CLOCK, _THREAD_CLOCK)
    fn = next(f for f in module.ops if isinstance(f, func.FuncOp))
    tags: list[int | None] = []
    for op in fn.body.block.ops:
        if isinstance(op, K.CallOp):
            scope = op.attributes.get("scope")
            text = scope.data if isinstance(scope, StringAttr) else ""
            tags.append(int(text[len(TAG):]) if text.startswith(TAG) else None)
    return (lambda: backend.build(target, source, cflags)), tags, weights


class _Profiled:
    """A profiling build loaded: ``run`` returns the outputs and the time of each call (ms)."""

    def __init__(self, target: Target, build: Any, weights: bytes, threads: int, output_types: Sequence[Any]):
        import ctypes

        from backends.c.backend import with_element_types

        backend = target.backend
        assert backend is not None
        self.model = backend.load(build, weights, threads)
        self._types = output_types
        self._with_types = with_element_types
        names_p, layers_p = ctypes.POINTER(ctypes.c_char_p)(), ctypes.POINTER(ctypes.c_char_p)()
        ms_p = ctypes.POINTER(ctypes.c_double)()
        fn = self.model.symbol("profile")  # the emitter's table: kernel names, layer names, times
        fn.restype = ctypes.c_int
        n = fn(ctypes.byref(names_p), ctypes.byref(layers_p), ctypes.byref(ms_p))
        self.ms = np.ctypeslib.as_array(ms_p, shape=(max(n, 1),))[:n]

    def run(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
        self.ms[:] = 0.0
        outs = self.model.run(inputs)
        return self._with_types(outs, self._types), self.ms.copy()

    def close(self) -> None:
        self.model.close()


def _reps(seconds_per_run: float, libraries: int) -> int:
    per = seconds_per_run * max(libraries, 1)
    return int(min(MAX_REPS, max(MIN_REPS, ROUND_SECONDS * max(libraries, 1) / max(per, 1e-6))))


def whole_model_ms(runners: dict[str, Callable[[], Any]], threads: int) -> tuple[dict[str, float], str]:
    """Time (ms) of each runner, runs interleaved one by one. One thread: the median CPU time of the
    calling thread (the model runs on it; other processes' load does not count); more: the fastest
    wall-clock run (a shared machine only ever adds time: a descheduled thread stalls the others)."""
    clock = time.thread_time if threads == 1 else time.perf_counter
    for run in runners.values():
        run()
    t0 = time.perf_counter()
    for run in runners.values():
        run()
    reps = _reps((time.perf_counter() - t0) / max(len(runners), 1), len(runners))
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(reps):
        for k, run in runners.items():
            c0 = clock()
            run()
            times[k].append((clock() - c0) * 1e3)
    what = "median CPU ms of the calling thread" if threads == 1 else "fastest wall ms"
    reduce = np.median if threads == 1 else np.min
    return {k: float(reduce(v)) for k, v in times.items()}, f"{what}, {reps} interleaved runs"


# ----------------------------------------------------------------------------------------------
# The tuner


class _Budget:
    def __init__(self, seconds: float | None) -> None:
        self.start = time.perf_counter()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def allows(self, cost: float) -> bool:
        return self.seconds is None or self.elapsed() + cost <= self.seconds


def tune(
    model: Any,
    target: str | Target | None = None,
    example_inputs: Sequence[Any] | None = None,
    *,
    threads: int = 1,
    graph: int = 0,
    budget_s: float | None = None,
    tuning_file: str | os.PathLike[str] | Any | None = None,
    progress: bool | None = None,
    name: str | None = None,
    optimized: bool = False,
) -> tuple[Any, TuneReport]:
    """Measure the kernel (and, for the host target, layout) choices of ``model`` on this machine.

    Returns the :class:`compiler.tuning.TuningFile` (the file's earlier entries plus the new ones;
    saved to ``tuning_file`` when it is a path) and a :class:`TuneReport`. Signatures already in
    ``tuning_file`` (a path or a ``TuningFile`` made on this CPU, ISA set and thread count) are not
    timed again.
    ``optimized`` times fewer runs (MegEngine Lite's OPTIMIZED profiling: faster, noisier)."""
    from compiler.driver.compile import CompileError, resolve_target, to_module
    from compiler.driver.numerics import random_inputs
    from compiler.driver.package import c_identifier, default_name
    from compiler.driver.targets import runs_here
    from compiler.progress import progress as progress_reporter
    from compiler.tuning import TuningFile, checked, key_for, load_for

    if threads < 1:
        raise CompileError(f"threads must be >= 1, got {threads}")
    if budget_s is not None and budget_s <= 0:
        raise TuneError(f"tune: the budget must be > 0 seconds, got {budget_s}")
    auto = target is None or (isinstance(target, str) and target.strip() in ("host", "native"))
    tgt = resolve_target(target)
    if tgt.backend is None or tgt.backend.kernels is None:
        raise TuneError(f"tune: target {tgt} generates no kernels: there is nothing to choose")
    if tgt.backend.emulated or not runs_here(tgt):
        raise TuneError(f"tune: target {tgt} does not run on this machine; tuning measures here")
    budget = _Budget(budget_s)
    prefix = c_identifier(name) if name is not None else default_name(model)
    key = key_for(tgt, threads)
    existing = None
    if isinstance(tuning_file, TuningFile):  # choices in memory: re-used, nothing is saved
        existing, tuning_file = checked(tuning_file, key, "tuning"), None
    elif tuning_file is not None:
        existing = load_for(tuning_file, key)
    tf = TuningFile(key, dict(existing.choices) if existing is not None else {})
    report = TuneReport(tgt, threads)
    with progress_reporter("tune", enabled=progress) as rep:
        rep.stage("frontend")
        module = to_module(model, example_inputs, graph)
        inputs = _inputs(module, example_inputs if example_inputs is not None else random_inputs(module))
        report.phases["frontend"] = budget.elapsed()
        layouts = layout_alternatives(tgt) if auto else [tgt]
        state = _Tuner(module, inputs, threads, prefix, tf, report, budget, rep, optimized)
        try:
            for lt in layouts:
                state.tune_layout(lt)
            state.choose_layout(layouts)
        finally:
            state.stage("", "done")
            state.close()
        report.seconds = budget.elapsed()
    if tuning_file is not None and report.timed:
        if existing is None and Path(tuning_file).is_file():
            report.notes.append(
                f"{tuning_file} held choices made under another key (CPU, ISA set or thread count): "
                "replaced (a tuning file holds one key: use one file per thread count)"
            )
        tf.save(tuning_file)
    return tf, report


def _inputs(module: ModuleOp, example_inputs: Sequence[Any]) -> list[np.ndarray]:
    from compiler.driver.compile import _input_array

    fn = next(f for f in module.ops if isinstance(f, func.FuncOp))
    return [
        _input_array(getattr(x, "numpy", lambda x=x: x)(), t, f"input {i}")
        for i, (x, t) in enumerate(zip(example_inputs, fn.function_type.inputs.data, strict=False))
    ]


class _Tuner:
    """The state of one tuning run (see the module docstring for the method)."""

    def __init__(
        self,
        module: ModuleOp,
        inputs: list[np.ndarray],
        threads: int,
        prefix: str,
        tf: Any,
        report: TuneReport,
        budget: _Budget,
        rep: Any,
        optimized: bool,
    ) -> None:
        self.module = module
        self.inputs = inputs
        self.threads = threads
        self.prefix = prefix
        self.tf = tf
        self.report = report
        self.budget = budget
        self.rep = rep
        self.optimized = optimized
        self._want: list[np.ndarray] | None = None
        self.round_seconds: float | None = None  # what one profiling round cost (the budget's estimate)
        self.defaults: dict[str, dict[str, str]] = {}  # layout target -> signature -> priority choice
        self.rounds: dict[str, list[_Round]] = {}  # layout target -> its loaded profiling rounds
        self.failed: set[str] = set()  # layout targets whose graph does not compile
        self._builds = 0
        self._phase: tuple[str, float] | None = None

    def stage(self, text: str, phase: str) -> None:
        """Show ``text`` as the progress stage and charge the time from now on to ``phase``."""
        now = time.perf_counter()
        if self._phase is not None:
            name, since = self._phase
            self.report.phases[name] = self.report.phases.get(name, 0.0) + now - since
        self._phase = (phase, now)
        if text:
            self.rep.stage(text)

    def close(self) -> None:
        for rounds in self.rounds.values():
            for r in rounds:
                if r.loaded is not None:
                    r.loaded.close()
                    r.loaded = None

    # -- the reference ----------------------------------------------------------------------------
    def want(self) -> list[np.ndarray]:
        if self._want is None:
            from semantics import run_module

            before = self._phase[0] if self._phase else "reference"
            self.stage("reference outputs", "reference")
            self._want = [np.asarray(o) for o in run_module(self.module, self.inputs)]
            self.stage("", before)
        return self._want

    def check(self, got: Sequence[np.ndarray], target: Target) -> Any:
        from compiler.driver.numerics import CODE_TOLERANCE, _output_info, compare_outputs

        names, steps = _output_info(self.module)
        loose = target.float16 or "bf16" in target.options
        return compare_outputs(list(got), self.want(), names, steps, loose, CODE_TOLERANCE)

    # -- one layout ---------------------------------------------------------------------------------
    def tune_layout(self, target: Target) -> None:
        report = self.report
        self.stage(f"{target}: candidates", "candidates")
        try:
            g = _graph(self.module, target)
        except XmgeError as exc:
            self.failed.add(str(target))
            report.notes.append(f"{target}: not compiled ({str(exc).splitlines()[0]})")
            return
        multi = {s: c for s, c in g.cands.items() if len(c) > 1}
        self.defaults[str(target)] = {s: c[0] for s, c in multi.items()}
        counts: dict[str, int] = {}
        for s in g.sigs:
            counts[s] = counts.get(s, 0) + 1
        results = []
        pending: dict[str, list[str]] = {}
        for s, c in multi.items():
            known = self.tf.choices.get(s)
            if known in c:
                results.append(SignatureResult(s, counts[s], tuple(c), known, reused=True))
            else:
                pending[s] = c
        report.signatures[str(target)] = results
        if not pending:
            return
        n_rounds = max(len(c) for c in pending.values())
        if not self.budget.allows((self.round_seconds or 0.0) * n_rounds):
            report.budget_hit = True
            report.notes.append(f"{target}: {len(pending)} op signature(s) not timed (budget)")
            return
        fixed = {s: self.tf.choices[s] for s in multi if s not in pending}
        rounds = [
            _Round({**fixed, **{s: c[r] for s, c in pending.items() if r < len(c)}}) for r in range(n_rounds)
        ]
        t0 = time.perf_counter()
        self.rounds[str(target)] = rounds
        self._build_rounds(g, target, rounds)
        self._time_rounds(g, pending, rounds)
        self.round_seconds = (time.perf_counter() - t0) / n_rounds
        report.timed = True
        report.builds += len(rounds)
        self._decide(g, target, pending, rounds, counts, results)

    def _build_rounds(self, g: _Graph, target: Target, rounds: list[_Round]) -> None:
        """Lower every round and build its profiling library (gcc runs on worker threads while the
        next round is lowered); load each and check its output once against the reference."""
        fn = next(f for f in self.module.ops if isinstance(f, func.FuncOp))
        out_types = list(fn.function_type.outputs.data)
        workers = max(1, min(len(rounds), os.cpu_count() or 1, 4))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            jobs = []
            for r in rounds:
                self._builds += 1
                self.stage(f"{target}: lowering round {len(jobs) + 1}/{len(rounds)}", "lowering")
                km = _kernel_module(g, target, self.threads, r.choices)
                build, r.tags, weights = _profile_build(
                    km, target, f"{self.prefix}_tune{self._builds}", cpu_clock=self.threads == 1
                )
                jobs.append((pool.submit(build), weights))
            self.want()  # the reference runs while gcc builds
            self.stage(f"{target}: building {len(rounds)} profiling libraries", "gcc")
            for r, (job, weights) in zip(rounds, jobs, strict=True):
                r.loaded = _Profiled(target, job.result(), weights, self.threads, out_types)
        self.stage(f"{target}: checking {len(rounds)} rounds against the reference", "timing")
        for i, r in enumerate(rounds):
            outs, ms = r.loaded.run(self.inputs)
            r.per_call.append(ms)
            r.worst = self.check(outs, target)
            r.ok = r.worst is None or r.worst.ok
            verdict = "agrees with the reference" if r.ok else "DIFFERS from the reference"
            self.rep.advance(f"{target} round {i + 1}: {verdict}")

    def _time_rounds(self, g: _Graph, pending: dict[str, list[str]], rounds: list[_Round]) -> None:
        """Interleaved runs of the rounds; a round whose candidates all cost over twice the priority
        choice in two runs each (or whose output differs) is not timed further."""
        t0 = time.perf_counter()
        for r in rounds:
            r.per_call.append(r.loaded.run(self.inputs)[1])
        per_run = (time.perf_counter() - t0) / len(rounds)
        early = [_op_times(g, r, np.min) for r in rounds]
        live = [rounds[0]]
        for i, r in enumerate(rounds[1:], 1):
            sigs = [s for s, c in pending.items() if i < len(c)]
            if r.ok and any(_cost(g, s, early[i]) <= 2.0 * _cost(g, s, early[0]) for s in sigs):
                live.append(r)
            else:
                r.pruned = r.ok
        reps = _reps(per_run, len(live))
        if self.optimized:
            reps = max(3, reps // 3)
        if len(live) > 1:
            self.stage(f"timing {len(live)} rounds x {reps} runs", "timing")
            for rep in range(reps):
                if rep >= MIN_REPS - 2 and not self.budget.allows(0.0):
                    break  # over budget: what was timed so far decides (at least MIN_REPS runs)
                for r in live:
                    r.per_call.append(r.loaded.run(self.inputs)[1])

    def _decide(
        self,
        g: _Graph,
        target: Target,
        pending: dict[str, list[str]],
        rounds: list[_Round],
        counts: dict[str, int],
        results: list[SignatureResult],
    ) -> None:
        # one thread: medians of CPU times; more: the fastest wall time of each call (see whole_model_ms)
        per_op = [_op_times(g, r, np.median if self.threads == 1 else np.min) for r in rounds]
        default_bad = not rounds[0].ok
        if default_bad:
            self.report.notes.append(
                f"{target}: the priority kernels already differ from the reference beyond tolerance "
                f"({rounds[0].worst}); a candidate may win only without a larger error"
            )
        for s, cands in pending.items():
            res = SignatureResult(s, counts[s], tuple(cands), cands[0])
            for r_i, fam in enumerate(cands):
                rnd = rounds[r_i]
                res.ms[fam] = _cost(g, s, per_op[r_i])
                if r_i == 0:
                    continue
                if not rnd.ok and (not default_bad or rnd.worst.ratio > rounds[0].worst.ratio):
                    res.rejected[fam] = f"output differs from the reference: {rnd.worst}"
                elif rnd.pruned:
                    res.rejected[fam] = "over twice the priority choice's time in its first runs"
            allowed = [f for f in cands if f not in res.rejected]
            best = min(allowed, key=lambda f: res.ms[f])
            if res.ms[best] < (1.0 - MIN_GAIN) * res.ms[cands[0]]:
                res.chosen = best
            self.tf.choices[s] = res.chosen
            results.append(res)

    # -- the whole-graph choice and the untuned baseline ----------------------------------------------
    def choose_layout(self, layouts: list[Target]) -> None:
        report = self.report
        usable = [t for t in layouts if str(t) not in self.failed]
        if not usable:
            raise TuneError(f"tune: no target compiles this model ({'; '.join(report.notes)})")
        entry = layout_entry(self.module)
        stored = self.tf.choices.get(entry) if len(layouts) > 1 else None
        stored_target = next((t for t in usable if t.layout == stored), None)
        if not report.timed and (len(usable) == 1 or stored_target is not None):
            report.target = stored_target or usable[0]
            return

        def moved(t: Target) -> bool:
            return any(self.tf.choices.get(s, d) != d for s, d in self.defaults.get(str(t), {}).items())

        base = usable[0]
        if len(usable) == 1 and not moved(base):
            report.target = base
            return
        runners: dict[str, Callable[[], Any]] = {}
        untuned_key = f"{base} untuned"
        wanted = [(str(t), t, True) for t in usable] + ([(untuned_key, base, False)] if moved(base) else [])
        to_build = [w for w in wanted if self._round_for(w[1], w[2]) is None]
        if not self.budget.allows((self.round_seconds or 0.0) * len(to_build)):
            report.budget_hit = True
            report.notes.append("whole-model comparison skipped (budget): the untuned choices are kept")
            self._revert(usable)
            report.target = base
            return
        self.stage("whole-model timing: " + ", ".join(str(t) for t in usable), "whole model")
        x = self.inputs
        with ThreadPoolExecutor(max_workers=max(1, min(len(to_build), os.cpu_count() or 1, 4))) as pool:
            # gcc of one model runs while the next is lowered
            built = {k: pool.submit(self._build_whole, t, tuned=tuned) for k, t, tuned in to_build}
            for k, t, tuned in wanted:
                r = self._round_for(t, tuned)
                if r is not None:
                    runners[k] = lambda r=r: r.loaded.run(x)
                else:
                    model = built[k].result()
                    runners[k] = lambda m=model: m.run(x)
        report.builds += len(to_build)
        report.timed = True
        ms, report.clock = whole_model_ms(runners, self.threads)
        report.layouts_ms = {k: v for k, v in ms.items() if k != untuned_key}
        report.untuned_ms = ms.get(untuned_key, ms[str(base)])

        def acceptable(t: Target) -> bool:
            # anything other than the untuned model must beat it by MIN_GAIN, as a kernel choice
            # must (at several threads the clock is the wall's, and a shared machine is noisy)
            return (t is base and not moved(base)) or report.layouts_ms[str(t)] <= (
                1.0 - MIN_GAIN
            ) * report.untuned_ms

        ranked = sorted(usable, key=lambda t: report.layouts_ms[str(t)])
        chosen = next((t for t in ranked if acceptable(t)), None)
        if chosen is None:
            report.notes.append(
                f"tuned {min(report.layouts_ms.values()):.2f} ms is not faster than untuned "
                f"{report.untuned_ms:.2f} ms: the priority choices are kept"
            )
            self._revert(usable)
            chosen = base
        report.target = chosen
        tuned_ms = report.layouts_ms[str(chosen)]
        report.tuned_ms = tuned_ms if chosen is not base or moved(base) else report.untuned_ms
        if len(layouts) > 1:
            self.tf.choices[entry] = chosen.layout

    def _round_for(self, target: Target, tuned: bool) -> _Round | None:
        """A loaded profiling round of ``target`` that holds exactly the tuned (or the priority)
        choices: timing it needs no new build (its call timers cost nanoseconds per kernel)."""
        defaults = self.defaults.get(str(target), {})
        want = {s: (self.tf.choices.get(s, d) if tuned else d) for s, d in defaults.items()}
        for r in self.rounds.get(str(target), []):
            if r.loaded is not None and {s: r.choices.get(s, d) for s, d in defaults.items()} == want:
                return r
        return None

    def _revert(self, targets: list[Target]) -> None:
        """Write the priority choices for every tuned signature of ``targets``."""
        for t in targets:
            for s, d in self.defaults.get(str(t), {}).items():
                self.tf.choices[s] = d
            for r in self.report.signatures.get(str(t), []):
                r.chosen = r.candidates[0]

    def _build_whole(self, target: Target, *, tuned: bool) -> Any:
        """The model compiled for ``target`` as ``compile()`` would build it (same prefix, so the
        final compile finds the library in the build cache)."""
        from compiler.driver.compile import CompiledModel, _lower

        choices = self.tf.as_option() if tuned else ()
        stages = _lower(self.module, target, self.threads, {}, None, choices)
        m = CompiledModel(target, stages, self.threads, {}, name=self.prefix)
        self.rep.advance(f"built {target}{'' if tuned else ' (untuned)'}")
        return m


def _op_times(g: _Graph, r: _Round, reduce: Callable[..., Any]) -> np.ndarray:
    """Time per op index of round ``r``: each call's runs reduced (median, min) and summed per op."""
    med = reduce(np.array(r.per_call), axis=0)
    t = np.zeros(len(g.sigs))
    for tag, ms in zip(r.tags, med, strict=True):
        if tag is not None:
            t[tag] += ms
    return t


def _cost(g: _Graph, sig: str, per_op: np.ndarray) -> float:
    """An op signature's cost in one round: its ops' calls plus those of their single-candidate
    neighbours (whose work a candidate may absorb or leave behind)."""
    total = 0.0
    for i in g.by_sig[sig]:
        total += per_op[i] + sum(per_op[n] for n in g.neighbours[i] if len(g.cands[g.sigs[n]]) == 1)
    return float(total)


__all__ = [
    "MIN_GAIN",
    "SignatureResult",
    "TuneError",
    "TuneReport",
    "candidates",
    "layout_alternatives",
    "layout_entry",
    "model_key",
    "op_signatures",
    "tune",
    "whole_model_ms",
    "with_layout",
]
