"""The per-unit conformance harness (XNNPACK's tester pattern): every C and CUDA kernel unit declares a
few small, odd-shaped example ops (``examples``, built with ``backends/c/examples.py``); here each
example is lowered on the first harness target whose kernel-select picks the unit for it, the examples
of one target are compiled into one library (one gcc run per target and test session, cached by
content; CUDA in chunks of at most 64 inputs and outputs, its runtime's limit), run (AArch64 under
qemu, CUDA through its CPU harness, an x86 extension this CPU lacks built only), and every output
compared with the reference interpreter (``semantics``); the x86 ones once more under ASan/UBSan at
-O1. A registered unit that no example makes kernel-select pick fails the run, naming the unit and
what to add; so does an example none of its units accepts.

Adding a kernel unit needs no test file: give it ``examples`` (or an ``examples_reason``) and, where
no target below reaches its ISA, a target in :data:`TARGETS`.
"""

from __future__ import annotations

import re
import warnings
import zlib
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

import backends.c.examples as E
from backends.c.build import build
from backends.c.cross import EmulationWarning, toolchain_problem
from backends.c.kernels import KERNELS as C_KERNELS
from backends.cuda.build import nvcc
from backends.cuda.kernels import KERNELS as CUDA_KERNELS
from backends.targets import parse_target, runs_here
from compiler.driver.compile import CompiledModel, inference_passes, kernel_passes
from dialects import kernel as K
from passes.lowering.kernels import Example, KernelRegistry, KernelRegistryError, KernelUnit, missing_examples
from passes.target import Target
from semantics import run_module

# Every target the harness compiles for, in the order a unit's examples try them: the host's x86
# targets first (they run natively), then the x86 extension levels this CPU may lack (built, run
# where it has them), then AArch64 under qemu (+plain-c reaches the portable units the NEON ones
# override). A unit on an ISA none of these reach is reported as never exercised.
TARGETS = (
    "x86-avx2",
    "x86-avx2-nchw88",
    "x86-avx512",
    "x86-avx512-nchw88",
    "x86-avx512-vnni",
    "x86-avx512-vnni-vbmi",
    "x86-avx512+bf16",
    "x86-avx512-nchw88+bf16",
    "x86-avx512-fp16+ioc16",
    "x86-avx512-amx",
    "x86-avx512-amx+bf16",
    "x86-avx512-vnni-amx-vbmi",
    "arm-nchw44",
    "arm-nchw44-dot",
    "arm-nchw44-dot-i8mm",
    "arm-fp16+ioc16",
    "arm+plain-c",
    "arm-nchw44+plain-c",
    "arm-nchw44-dot+plain-c",
    "cuda",
    "cuda-nchw4",
    "cuda-nchw32",
)
# each backend's registry: a unit is reached by the targets of its own backend only
REGISTRIES = {"c": C_KERNELS, "cuda": CUDA_KERNELS}
FAMILY = re.compile(r'= "(\w+)" \["(\w+)"\]')


def _lower(module: ModuleOp, target: Target) -> dict[str, ModuleOp | str]:
    """The stages ``compile()`` keeps, through the target's inference and kernel passes."""
    stages: dict[str, ModuleOp | str] = {"tensor": module}
    current = module.clone()
    ctx = Context()
    for p in inference_passes(target):
        p.apply(ctx, current)
    stages["inference"] = current.clone()
    for p in kernel_passes(target, 1):
        p.apply(ctx, current)
        stages[p.name] = current.clone()
    return stages


def _picked_by_select(ex: Example, target: Target) -> set[tuple[str, str]]:
    """The units of the ``kernel.def``s left after kernel-select and epilogue fusion when ``ex``
    alone is compiled for ``target`` (packing and planning change no choice)."""
    module = _built(ex)[0].clone()
    ctx = Context()
    for p in inference_passes(target):
        p.apply(ctx, module)
    for p in kernel_passes(target, 1):
        if p.name == "kernel-pack-weights":
            break
        p.apply(ctx, module)
    return {(d.family.data, d.isa.data) for d in module.walk() if isinstance(d, K.KernelDefOp)}


@cache
def _built(ex: Example) -> tuple[ModuleOp, list[np.ndarray]]:
    return ex.build(np.random.default_rng(zlib.crc32(ex.name.encode())))


def _backend(target: str) -> str:
    return "cuda" if target.startswith("cuda") else "c"


def _units() -> list[tuple[str, KernelUnit]]:
    return [(name, u) for name, reg in REGISTRIES.items() for u in reg.units()]


def _key(backend: str, u: KernelUnit) -> tuple[str, str, str]:
    return (backend, u.family, u.isa)


@dataclass
class Plan:
    """Which examples each target runs, and what kernel-select picked for each (example, target)."""

    runs: dict[str, list[Example]] = field(default_factory=dict)
    picked: dict[tuple[str, str], set[tuple[str, str]]] = field(default_factory=dict)
    tried: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def exercised(self) -> set[tuple[str, str, str]]:
        """The units (backend, family, ISA) kernel-select picked for the examples that run."""
        return {
            (_backend(t), *k) for t, exs in self.runs.items() for ex in exs for k in self.picked[(ex.name, t)]
        }


@cache
def _target(text: str) -> Target:
    return parse_target(text)


@cache
def plan() -> Plan:
    """Each unit's examples go to the first target of :data:`TARGETS` that reaches the unit (its
    family's first unit on the target's ISAs) and whose kernel-select picks it for the example."""
    out = Plan(runs={t: [] for t in TARGETS})
    for backend, unit in _units():
        registry = REGISTRIES[backend]
        reaching = [
            t
            for t in TARGETS
            if _backend(t) == backend and registry.first(unit.family, _target(t).isas) is unit
        ]
        out.tried[_key(backend, unit)] = reaching
        for ex in unit.examples:
            for t in reaching:
                if (ex.name, t) not in out.picked:
                    try:
                        out.picked[(ex.name, t)] = _picked_by_select(ex, _target(t))
                    except Exception as exc:  # noqa: BLE001 - reported with the example and target
                        out.picked[(ex.name, t)] = set()
                        out.errors.append(
                            f"{ex.name} on {t}: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                        )
                        break
                if (unit.family, unit.isa) in out.picked[(ex.name, t)]:
                    if ex not in out.runs[t]:
                        out.runs[t].append(ex)
                    break
    return out


def test_every_unit_declares_examples() -> None:
    """The registry refuses a unit without examples or a reason; this names them all at once."""
    missing = [
        missing_examples(u, "backends.c.examples")
        for _, u in _units()
        if not u.examples and not u.examples_reason
    ]
    assert not missing, "\n".join(missing)


def test_the_registry_refuses_a_unit_without_examples() -> None:
    """A unit added without examples fails at import, saying what to add and where."""

    class Bare(KernelUnit):
        family = "bare"

    with pytest.raises(
        KernelRegistryError,
        match=r"'bare' on ISA 'generic' .*Bare\) declares no examples: add "
        r"a class attribute `examples = \(E\.<builder>\(\.\.\.\),\)` with `import "
        r"backends\.c\.examples as E`.* or `examples_reason",
    ):
        KernelRegistry([Bare()], examples_from="backends.c.examples")

    class Reasoned(Bare):
        examples_reason = "nothing to run"

    assert KernelRegistry([Reasoned()], examples_from="backends.c.examples").units()[0].family == "bare"
    assert KernelRegistry([Bare()]).units()  # registries that ask for no examples (CUDA's) take it


def test_example_names_are_distinct() -> None:
    """A name identifies one example (its seed and its line in a failure): two different examples
    under one name would hide one. Units of a family across ISAs share one tuple, which is fine."""
    seen: dict[str, Example] = {}
    for _, u in _units():
        for ex in u.examples:
            other = seen.setdefault(ex.name, ex)
            assert other is ex or other.build.__code__ is ex.build.__code__, ex.name


def test_every_unit_is_exercised() -> None:
    """kernel-select picks every registered unit for at least one of its examples on some target."""
    p = plan()
    exercised = p.exercised()
    lines = []
    for backend, u in _units():
        if _key(backend, u) in exercised or (u.examples_reason and not u.examples):
            continue
        cls = type(u)
        reach = ", ".join(p.tried[_key(backend, u)]) or "none"
        names = "; ".join(ex.name for ex in u.examples) or "none"
        lines.append(
            f"kernel unit {u.family!r} on ISA {u.isa!r} ({cls.__module__}.{cls.__qualname__}) was never "
            f"picked by kernel-select. Its examples: {names}. Targets reaching it: {reach}. Add to its "
            f"`examples` an op its match() accepts (builders in backends/c/examples.py)"
            + (
                " and a target reaching its ISA to TARGETS in tests/test_kernel_conformance.py"
                if reach == "none"
                else ""
            )
        )
    assert not lines, "\n".join(lines + ["lowering errors:", *p.errors] if p.errors else lines)


def test_every_example_is_accepted() -> None:
    """Each example is picked by one of the units declaring it on a target reaching that unit (an
    example no unit takes would test nothing, and its unit's edge would go unchecked)."""
    p = plan()
    declared: dict[str, list[tuple[str, KernelUnit]]] = {}
    for backend, u in _units():
        for ex in u.examples:
            declared.setdefault(ex.name, []).append((backend, u))
    dead = []
    for name, units in declared.items():
        if not any(
            (u.family, u.isa) in p.picked.get((name, t), set()) for b, u in units for t in p.tried[_key(b, u)]
        ):
            where = "; ".join(
                f"{t}: "
                + (", ".join(f"{f} [{i}]" for f, i in sorted(p.picked.get((name, t), set()))) or "error")
                for t in dict.fromkeys(t for b, u in units for t in p.tried[_key(b, u)])
            )
            owners = ", ".join(f"{u.family} [{u.isa}] ({b})" for b, u in units)
            dead.append(
                f"example {name!r} of {owners} is picked by none of them; kernel-select chose: {where}"
            )
    assert not dead, "\n".join(dead)


def test_examples_lower_without_errors() -> None:
    assert not plan().errors, "\n".join(plan().errors)


# ----------------------------------------------------------------------------------------------
# Running the examples


# the CUDA runtime's limit on a model's inputs and outputs (the C runtime has none)
CUDA_IO_LIMIT = 64
Part = tuple[Example, ModuleOp, list[np.ndarray], slice]


@cache
def compiled(target: str) -> list[tuple[CompiledModel, list[np.ndarray], list[Part]]]:
    """The target's examples as few libraries as the runtime allows (one for a C target)."""
    chunks: list[list[Example]] = [[]]
    ins = outs = 0
    for ex in plan().runs[target]:
        fn = _built(ex)[0].body.block.first_op
        n_in, n_out = len(fn.function_type.inputs.data), len(fn.function_type.outputs.data)  # type: ignore[union-attr]
        if _backend(target) == "cuda" and chunks[-1] and max(ins + n_in, outs + n_out) > CUDA_IO_LIMIT:
            chunks.append([])
            ins = outs = 0
        chunks[-1].append(ex)
        ins, outs = ins + n_in, outs + n_out
    out = []
    for examples in chunks:
        built = [_built(ex) for ex in examples]
        module, inputs, slices = E.batch(built)
        model = CompiledModel(_target(target), _lower(module, _target(target)), 1, {}, name="conformance")
        parts = [(ex, m, i, sl) for ex, (m, i), sl in zip(examples, built, slices, strict=True)]
        out.append((model, inputs, parts))
    return out


def _tolerance(target: Target) -> float:
    if "bf16" in target.options:
        return 3e-2
    if target.float16:
        return 1e-2
    return 1e-4


def _compare(target: str, got: list[np.ndarray], parts: list, what: str) -> None:
    tol = _tolerance(_target(target))
    bad = []
    for ex, module, ins, sl in parts:
        want = run_module(module, ins)
        for i, (g, w) in enumerate(zip(got[sl], want, strict=True)):
            w = np.asarray(w)
            if g.shape != w.shape:
                bad.append(f"{ex.name}: output {i} has shape {g.shape}, the reference {w.shape}")
                continue
            if w.dtype.kind == "f":
                scale = max(1.0, float(np.abs(w).max(initial=0)))
                ok = np.allclose(np.asarray(g, np.float64), w, rtol=tol, atol=tol * scale, equal_nan=True)
            else:
                ok = np.array_equal(g.view(w.dtype) if g.dtype.itemsize == w.dtype.itemsize else g, w)
            if not ok:
                err = np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max()
                units = ", ".join(f"{f} [{isa}]" for f, isa in sorted(plan().picked[(ex.name, target)]))
                bad.append(
                    f"{ex.name}: output {i} differs from the reference by up to {err:g} (units: {units})"
                )
    assert not bad, f"{target} ({what}):\n" + "\n".join(bad)


def _require_built(target: str) -> None:
    if not plan().runs[target]:
        pytest.skip(f"no unit's examples run on {target}")
    if target.startswith("arm") and (why := toolchain_problem()) is not None:
        pytest.skip(why)


@pytest.mark.parametrize("target", TARGETS)
def test_examples_match_the_reference(target: str) -> None:
    """Every example placed on ``target``, in one library, against the reference interpreter (built
    only, not run, where this CPU lacks the target's instructions; CUDA compiled by nvcc where it is
    installed and run through the CPU harness without a GPU)."""
    _require_built(target)
    for model, inputs, parts in compiled(target):
        if _backend(target) == "cuda":
            assert (model.build.library is not None) == (nvcc() is not None), "nvcc built nothing"
        if not runs_here(model.target) and not model.emulated:
            pytest.skip(f"built only: this CPU cannot run {target}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmulationWarning)
            got = model.run(inputs)
        _compare(target, got, parts, "the CPU harness" if _backend(target) == "cuda" else "native run")


SANITIZED = [t for t in TARGETS if t.startswith("x86")]


@pytest.mark.slow
@pytest.mark.parametrize("target", SANITIZED)
def test_examples_under_sanitizers(target: str) -> None:
    """The same library built with ASan / UBSan at -O1 (the optimiser's view is the -O3 run's), run
    on two threads by the standalone runner."""
    _require_built(target)
    for model, inputs, parts in compiled(target):
        if not runs_here(model.target):
            pytest.skip(f"this CPU cannot run {target}")
        cflags = ["-O1" if f.startswith("-O") else f for f in model.cflags]
        artifact = build(model.source, cflags, sanitize=True)
        shapes = [tuple(t.get_shape()) for t in model.output_types]
        got = model.backend.run_runner(artifact, model.weights, inputs, shapes, threads=2)  # type: ignore[attr-defined]
        _compare(target, got, parts, "ASan/UBSan -O1, 2 threads")
