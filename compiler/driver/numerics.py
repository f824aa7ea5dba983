"""Per-pass numeric verification: which pass of a pipeline changed what a model computes.

    report = verify_pipeline(module, passes)            # random inputs (seed 0)
    if not report.ok:
        print(report)                                   # the pass, its options, worst output, IR
        report.write_failing_ir("failing/")             # before.mlir / after.mlir
    report = verify_compile(net, "x86-avx2", [x])       # every pass of compile(), then the C code

The reference interpreter (``semantics``, the single definition of each op's semantics)
runs the module before the first pass and after every pass, on the same inputs. Each stage is
compared with the previous stage the reference could run; the first pass whose outputs differ by
more than the tolerance stops the run. Stages the reference cannot run (the kernel dialect, after
``kernel-select``) are skipped with a note. For a compile, the generated code is the last stage: the
compiled model runs on the same inputs and is compared with the last reference stage.

Tolerances (:class:`Tolerance`) depend on the dtypes involved:

* float32: ``|got - want| <= rtol * |want| + atol * scale`` with ``rtol = atol = 1e-5`` and
  ``scale`` the output's largest finite magnitude (reassociation changes the last bits of every
  element, relative to the magnitudes summed rather than to each element);
* float16 anywhere in either stage (``f16-io-f32-comp``, ``f16-io-comp``): ``rtol = atol = 1e-2``
  (float16 has an 11-bit significand; a few roundings of ~5e-4 each);
* quantized outputs, and float outputs dequantized from a quantized value: at most
  ``quantized_steps = 1`` quantization step of that value. One step, not zero: fusing an
  elementwise op into a conv's epilogue replaces two requantizations by one, and round-half-even
  SIMD requantization differs from the reference's half-away-from-zero on ties; both move a value
  by exactly one step. Two steps would hide a pass that drops a zero point or rounds a scale.
* other integer outputs (indices, shapes): exact.

Generated code (:data:`CODE_TOLERANCE`) gets ``1e-4`` for float32: kernels sum in a different
order, use FMA and Winograd transforms (``docs/ARCHITECTURE.md``: ~1e-5 of the output's scale).

Random inputs (:func:`random_inputs`) respect the input dtypes: float inputs are standard normal,
quantized inputs uniform integers over the whole storage range, other integer inputs uniform in
``[0, 4)`` (small enough to be valid indices along most axes), booleans fair coins.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, Float16Type, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass

from dialects import tensor as T
from dialects.dtypes import QuantizedType, numpy_dtype, quantized_numpy_dtype
from dialects.errors import XmgeError
from dialects.weights import full_weights
from semantics import KERNELS, run_module
from semantics.interpreter import InterpreterError
from semantics.quant_kernels import dequantize

SMALL_INTEGER_INPUT_RANGE = (0, 4)


class NumericsError(XmgeError, ValueError):
    """Bad input to the numeric check (an unknown input name, an unreadable file, a wrong shape)."""


class NumericsMismatch(NumericsError):
    """A pass (or the generated code) changed what the model computes; ``report`` says where."""

    def __init__(self, report: VerifyReport) -> None:
        self.report = report
        failing = report.failing
        what = failing.spec if failing is not None else "?"
        worst = f": {failing.worst}" if failing is not None and failing.worst is not None else ""
        note = f" ({failing.note})" if failing is not None and failing.note and not worst else ""
        super().__init__(f"numerics changed by {what}{worst}{note}")


# ----------------------------------------------------------------------------------------------
# Tolerances


@dataclass(frozen=True)
class Tolerance:
    """How far a stage's outputs may move from the previous stage's (see the module docstring)."""

    float32_rtol: float = 1e-5
    float32_atol: float = 1e-5
    """times the output's scale (its largest finite magnitude)"""
    float16_rtol: float = 1e-2
    float16_atol: float = 1e-2
    """times the output's scale"""
    quantized_steps: int = 1

    def float_bounds(self, float16: bool) -> tuple[float, float]:
        """``(rtol, atol relative to the output's scale)`` for float outputs."""
        return (self.float16_rtol, self.float16_atol) if float16 else (self.float32_rtol, self.float32_atol)

    def describe(self, float16: bool, step: float | None) -> str:
        rtol, atol = self.float_bounds(float16)
        kind = "float16" if float16 else "float32"
        text = f"{kind}: rtol {rtol:g}, atol {atol:g} x scale"
        if step is not None:
            text += f", or {self.quantized_steps} quantization step(s) of {step:.6g}"
        return text


REFERENCE_TOLERANCE = Tolerance()
CODE_TOLERANCE = Tolerance(float32_rtol=1e-4, float32_atol=1e-4)


# ----------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class OutputError:
    """The worst element of one output: the one whose error uses most of its allowance."""

    output: str
    """the output's name (``output_names``) or ``output <i>``"""
    index: tuple[int, ...]
    got: float
    want: float
    error: float
    allowed: float
    rule: str
    """the tolerance rule that applied, in words"""
    step: float | None = None
    """the quantization step of the output, when it has one"""

    @property
    def ratio(self) -> float:
        if self.error == 0:
            return 0.0
        return self.error / self.allowed if self.allowed > 0 else math.inf

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0

    def __str__(self) -> str:
        steps = f" ({self.error / self.step:.3g} steps)" if self.step else ""
        return (
            f"{self.output}[{', '.join(map(str, self.index))}]: got {self.got:.9g}, want {self.want:.9g}, "
            f"error {self.error:.3g}{steps} > allowed {self.allowed:.3g} ({self.rule})"
            if not self.ok
            else f"{self.output}[{', '.join(map(str, self.index))}]: error {self.error:.3g}{steps} "
            f"<= allowed {self.allowed:.3g} ({self.rule})"
        )


@dataclass
class StageResult:
    """One stage of the pipeline: the IR after a pass (or the input, or the generated code)."""

    name: str
    """the pass name, ``input`` for the module before any pass, ``code (<target>)`` for a compile"""
    options: dict[str, Any] = field(default_factory=dict)
    """the pass's dataclass fields"""
    status: str = "ok"
    """``ok``, ``failed`` or ``skipped`` (the reference cannot run this stage's IR)"""
    worst: OutputError | None = None
    note: str = ""

    @property
    def max_error(self) -> float:
        """The error of the worst element (the one using most of its allowance), 0 if none."""
        return self.worst.error if self.worst is not None else 0.0

    @property
    def tolerance(self) -> float:
        """The allowance of the worst element."""
        return self.worst.allowed if self.worst is not None else 0.0

    @property
    def spec(self) -> str:
        """The pass as ``-p`` spells it, options included: ``name{opt=value,...}``."""
        if not self.options:
            return self.name
        opts = ",".join(f"{k.replace('_', '-')}={_option_text(v)}" for k, v in self.options.items())
        return f"{self.name}{{{opts}}}"

    def line(self) -> str:
        """One line of the stage table."""
        head = f"  {self.status:7}  {self.spec}: "
        if self.worst is None:
            return head + (self.note or "no outputs compared")
        w = self.worst
        where = f"{w.output}[{', '.join(map(str, w.index))}]"
        measured = "exact" if w.error == 0 else f"error {w.error:.3g} (allowed {w.allowed:.3g}) at {where}"
        return head + measured + (f"; {self.note}" if self.note else "")


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_pipeline` / :func:`verify_compile`."""

    stages: list[StageResult]
    inputs: list[np.ndarray]
    failing: StageResult | None = None
    ir_before: str = ""
    """the IR before the failing pass (weights elided), empty when nothing failed"""
    ir_after: str = ""
    module: ModuleOp | None = None
    """the module after the last pass that ran (the failing one, if any)"""
    reference_module: ModuleOp | None = None
    """the last stage the reference interpreter could run (the C code is compared with it)"""
    compiled: Any = None
    """the ``CompiledModel`` of :func:`verify_compile`"""
    failing_files: dict[str, str] = field(default_factory=dict)
    """file name -> text that :meth:`write_failing_ir` writes (``before.mlir``, ``after.mlir``,
    ``model.c`` for generated code), IR with full weights"""

    @property
    def ok(self) -> bool:
        return self.failing is None

    @property
    def failing_pass(self) -> str | None:
        return self.failing.name if self.failing is not None else None

    def __str__(self) -> str:
        lines = ["numeric verification, stage by stage (each compared with the previous one):"]
        lines += [s.line() for s in self.stages]
        if self.failing is None:
            lines.append("all stages agree within tolerance")
            return "\n".join(lines)
        f = self.failing
        lines.append(f"FAILED at pass {f.name}")
        lines.append(f"  options: {_options_text(f.options)}")
        if f.worst is not None:
            lines.append(f"  worst output: {f.worst.output} at index {f.worst.index}")
            lines.append(f"  {f.worst}")
        if f.note:
            lines.append(f"  {f.note}")
        if self.ir_before:
            lines += [
                f"IR before {f.name}:",
                self.ir_before.rstrip(),
                f"IR after {f.name}:",
                self.ir_after.rstrip(),
            ]
        return "\n".join(lines)

    def write_failing_ir(self, directory: str | os.PathLike[str]) -> list[str]:
        """Write ``before.mlir`` and ``after.mlir`` of the failing pass (full weights, so that
        ``xmge-opt before.mlir -p <pass>`` reproduces it) into ``directory``, each atomically
        (for generated code: the last reference stage, the kernel IR and ``model.c``).
        Returns the paths; nothing is written when no stage failed."""
        if self.failing is None:
            return []
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise NumericsError(f"cannot create the directory {os.fspath(directory)}: {exc}") from None
        paths = []
        for name, text in self.failing_files.items():
            path = os.path.join(os.fspath(directory), name)
            write_atomically(path, text)
            paths.append(path)
        return paths


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return ",".join(map(str, value))
    return str(value)


def _options_text(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in options.items()) if options else "(none)"


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(path)[1], dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def pass_options(p: ModulePass) -> dict[str, Any]:
    """A pass's options: its dataclass fields and their values."""
    if not dataclasses.is_dataclass(p):
        return {}
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}


# ----------------------------------------------------------------------------------------------
# Inputs


def entry_function(module: ModuleOp) -> func.FuncOp:
    """The function the reference interpreter runs (the module's first ``func.func``)."""
    for op in module.ops:
        if isinstance(op, func.FuncOp):
            return op
    raise NumericsError("the module has no func.func to verify")


def input_names(fn: func.FuncOp) -> list[str]:
    return _names(fn, "input_names", "input", len(fn.function_type.inputs.data))


def output_names(fn: func.FuncOp) -> list[str]:
    return _names(fn, "output_names", "output", len(fn.function_type.outputs.data))


def _names(fn: func.FuncOp, attribute: str, kind: str, count: int) -> list[str]:
    attr = fn.attributes.get(attribute)
    names = [a.data for a in attr.data if isinstance(a, StringAttr)] if isinstance(attr, ArrayAttr) else []
    if len(names) != count:
        names = []
    return [n or f"{kind} {i}" for i, n in enumerate(names)] or [f"{kind} {i}" for i in range(count)]


def _tensor_type(t: Attribute, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise NumericsError(f"{what} has type {t}, not a tensor; the reference interpreter cannot feed it")
    return t


def random_input(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """One seeded random array of type ``t`` (see the module docstring for the distributions)."""
    shape = tuple(t.get_shape())
    element = t.element_type
    if isinstance(element, QuantizedType):
        lo, hi = element.qrange
        storage = rng.integers(lo, hi, size=shape, endpoint=True).astype(element.storage)
        q = quantized_numpy_dtype(element.kind.data, element.scale_value, element.zero_point_value)
        return storage.view(q)
    dtype = numpy_dtype(element)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    lo, hi = SMALL_INTEGER_INPUT_RANGE
    return rng.integers(lo, hi, size=shape).astype(dtype)


def random_inputs(module: ModuleOp, seed: int = 0) -> list[np.ndarray]:
    """Seeded random inputs for the module's entry function, one per argument, in order."""
    fn = entry_function(module)
    rng = np.random.default_rng(seed)
    names = input_names(fn)
    return [
        random_input(_tensor_type(t, f"input {names[i]!r}"), rng)
        for i, t in enumerate(fn.function_type.inputs.data)
    ]


def parse_input_specs(specs: Sequence[str]) -> dict[str, str]:
    """``["name=file.npy", ...]`` (``--input``) -> ``{name: path}``."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise NumericsError(f"--input {spec!r}: expected NAME=FILE.npy")
        if name in out:
            raise NumericsError(f"--input {name} is given twice")
        out[name] = path
    return out


def load_inputs(module: ModuleOp, files: Mapping[str, str], seed: int = 0) -> list[np.ndarray]:
    """Inputs for the entry function: ``files`` (input name -> ``.npy`` path) where given, seeded
    random arrays for the rest. Unknown names, unreadable files and wrong shapes are errors."""
    fn = entry_function(module)
    names = input_names(fn)
    unknown = sorted(set(files) - set(names))
    if unknown:
        raise NumericsError(f"no input named {', '.join(unknown)}; the inputs are {', '.join(names)}")
    inputs = random_inputs(module, seed)
    for i, name in enumerate(names):
        if name not in files:
            continue
        try:
            array = np.load(files[name], allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise NumericsError(f"input {name}: cannot read {files[name]}: {exc}") from None
        want = inputs[i]
        if array.shape != want.shape:
            raise NumericsError(f"input {name} must have shape {want.shape}, {files[name]} has {array.shape}")
        inputs[i] = _as_input_dtype(array, want.dtype, name)
    return inputs


def _as_input_dtype(array: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
    """A loaded array in the input's dtype; quantized inputs take integer storage values."""
    if array.dtype == dtype:
        return array
    if dtype.metadata is not None:  # quantized: storage values, range-checked
        if array.dtype.kind not in "iu":
            raise NumericsError(
                f"input {name} is quantized: give its integer storage values, not {array.dtype}"
            )
        info = np.iinfo(dtype)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise NumericsError(f"input {name}: values outside [{info.min}, {info.max}] of its storage")
        return array.astype(dtype.base).view(dtype)
    return array.astype(dtype)


# ----------------------------------------------------------------------------------------------
# Comparing two stages


def reference_can_run(module: ModuleOp) -> str | None:
    """None if the reference interpreter runs ``module``'s entry function, else why not."""
    fn = entry_function(module)
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp | T.ConstOp) or type(op) in KERNELS:
            continue
        return f"the reference interpreter has no kernel for {op.name}"
    return None


def _element_types(fn: func.FuncOp) -> set[Attribute]:
    found: set[Attribute] = set()
    values: list[SSAValue] = [*fn.body.block.args]
    for op in fn.walk():
        values += op.results
    for v in values:
        element = getattr(v.type, "element_type", None)
        if element is not None:
            found.add(element)
    return found


def involves_float16(*modules: ModuleOp) -> bool:
    """Whether any value of the modules' entry functions is float16."""
    return any(Float16Type() in _element_types(entry_function(m)) for m in modules)


def quantization_step(value: SSAValue, hops: int = 4) -> float | None:
    """The quantization step of an output: its own scale if quantized, else the scale of the
    quantized value it was computed from through single-operand ops (a dequantizing ``typecvt``,
    relayouts, reshapes), else None."""
    for _ in range(hops + 1):
        if isinstance(value.type, TensorType) and isinstance(value.type.element_type, QuantizedType):
            return value.type.element_type.scale_value
        owner = value.owner
        if not isinstance(owner, Operation) or len(owner.operands) != 1:
            return None
        value = owner.operands[0]
    return None


class _StageMismatch(Exception):
    """A stage's outputs cannot be compared with the previous stage's at all."""


def compare_outputs(
    got: Sequence[np.ndarray],
    want: Sequence[np.ndarray],
    names: Sequence[str],
    steps: Sequence[float | None],
    float16: bool,
    tolerance: Tolerance,
) -> OutputError | None:
    """The worst element over all outputs (largest error / allowance), or None without outputs."""
    if len(got) != len(want):
        raise _StageMismatch(f"the stage returns {len(got)} outputs, the previous stage {len(want)}")
    worst: OutputError | None = None
    for name, g, w, step in zip(names, got, want, steps, strict=True):
        if g.shape != w.shape:
            raise _StageMismatch(f"output {name} has shape {g.shape}, the previous stage's {w.shape}")
        candidate = _worst_element(name, g, w, step, float16, tolerance)
        if candidate is not None and (worst is None or candidate.ratio > worst.ratio):
            worst = candidate
    return worst


def _worst_element(
    name: str, got: np.ndarray, want: np.ndarray, step: float | None, float16: bool, tolerance: Tolerance
) -> OutputError | None:
    if want.size == 0:
        return None
    g = np.asarray(dequantize(got), np.float64)
    w = np.asarray(dequantize(want), np.float64)
    plain_integer = step is None and want.dtype.kind in "iub" and got.dtype.kind in "iub"
    with np.errstate(invalid="ignore", over="ignore"):
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        error = np.where(same, 0.0, np.abs(g - w))
        error = np.where(np.isnan(error), np.inf, error)
    finite = np.abs(w[np.isfinite(w)])
    scale = float(finite.max()) if finite.size else 0.0
    if plain_integer:
        allowed = np.zeros_like(w)
        rule = "integer: exact"
    else:
        rtol, atol = tolerance.float_bounds(float16)
        allowed = rtol * np.where(np.isfinite(w), np.abs(w), 0.0) + atol * scale
        if step is not None:
            # a step computed in float32 may land a few ulps beyond the exact multiple
            allowed = np.maximum(allowed, tolerance.quantized_steps * step * (1 + 1e-6))
        rule = tolerance.describe(float16, step)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(error == 0, 0.0, np.where(allowed > 0, error / allowed, np.inf))
    flat = int(np.argmax(ratio))
    index = tuple(int(i) for i in np.unravel_index(flat, want.shape))
    return OutputError(
        output=name,
        index=index,
        got=float(g.flat[flat]),
        want=float(w.flat[flat]),
        error=float(error.flat[flat]),
        allowed=float(allowed.flat[flat]),
        rule=rule,
        step=step,
    )


def _run(module: ModuleOp, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(o) for o in run_module(module, inputs)]


def _output_info(module: ModuleOp) -> tuple[list[str], list[float | None]]:
    fn = entry_function(module)
    ret = fn.body.block.last_op
    values = list(ret.operands) if isinstance(ret, func.ReturnOp) else []
    return output_names(fn), [quantization_step(v) for v in values]


# ----------------------------------------------------------------------------------------------
# The pipeline


def verify_pipeline(
    module: ModuleOp,
    passes: Sequence[ModulePass],
    inputs: Sequence[np.ndarray] | None = None,
    seed: int = 0,
    tolerance: Tolerance | None = None,
    *,
    ctx: Context | None = None,
    in_place: bool = False,
    progress: bool | None = None,
) -> VerifyReport:
    """Run ``passes`` one by one, the reference interpreter after each, and stop at the first pass
    whose outputs differ from the previous runnable stage beyond ``tolerance`` (default
    :data:`REFERENCE_TOLERANCE`), or that raises, or whose IR does not verify.

    ``inputs`` default to :func:`random_inputs` (``seed``). The module is left untouched unless
    ``in_place`` (then it holds the IR after the last pass that ran, as a pass pipeline leaves it).
    """
    tol = tolerance or REFERENCE_TOLERANCE
    ctx = ctx or Context()
    current = module if in_place else module.clone()
    arrays = list(inputs) if inputs is not None else random_inputs(current, seed)
    report = VerifyReport(stages=[], inputs=arrays, module=current)

    reference: list[np.ndarray] | None = None
    reference_module: ModuleOp | None = None
    first = StageResult("input")
    why_not = reference_can_run(current)
    if why_not is None:
        try:
            reference = _run(current, arrays)
        except InterpreterError as exc:
            raise NumericsError(f"the input IR fails on the reference interpreter: {exc}") from None
        reference_module = current.clone()
        first.note = "reference outputs computed"
    else:
        first.status, first.note = "skipped", why_not
    report.stages.append(first)

    from compiler.progress import track

    # a line per pass on a terminal (``progress``: as compile's); no 'done' line after a failure
    for p in track(passes, "verify", detail=lambda p: p.name, enabled=progress):
        stage = StageResult(p.name, pass_options(p))
        report.stages.append(stage)
        before = current.clone()
        try:
            p.apply(ctx, current)
            current.verify()
        except Exception as exc:  # any failure of a pass is that pass's fault, reported as such
            _fail(
                report, stage, before, current, f"the pass failed: {type(exc).__name__}: {_first_line(exc)}"
            )
            return report
        why_not = reference_can_run(current)
        if why_not is not None:
            stage.status, stage.note = "skipped", why_not
            continue
        try:
            outputs = _run(current, arrays)
        except InterpreterError as exc:
            _fail(report, stage, before, current, f"the reference interpreter fails after it: {exc}")
            return report
        if reference is None or reference_module is None:
            stage.note = "first stage the reference can run: nothing to compare with"
        else:
            names, steps = _output_info(current)
            float16 = involves_float16(reference_module, current)
            try:
                stage.worst = compare_outputs(outputs, reference, names, steps, float16, tol)
            except _StageMismatch as exc:
                _fail(report, stage, before, current, str(exc))
                return report
            if stage.worst is not None and not stage.worst.ok:
                _fail(report, stage, before, current, "")
                return report
        reference, reference_module = outputs, current.clone()
    report.reference_module = reference_module
    return report


def _fail(report: VerifyReport, stage: StageResult, before: ModuleOp, after: ModuleOp, note: str) -> None:
    stage.status = "failed"
    stage.note = note
    report.failing = stage
    report.ir_before, report.ir_after = str(before), str(after)
    with full_weights():
        report.failing_files = {"before.mlir": str(before), "after.mlir": str(after)}


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


# ----------------------------------------------------------------------------------------------
# Generated code


def verify_compiled(
    module_before_lowering: ModuleOp,
    compiled: Any,
    inputs: Sequence[np.ndarray],
    tolerance: Tolerance | None = None,
) -> StageResult:
    """Run ``compiled`` (a ``CompiledModel``) on ``inputs`` and compare it with the reference
    interpreter on ``module_before_lowering`` (the last stage the reference can run) within
    ``tolerance`` (default :data:`CODE_TOLERANCE`)."""
    tol = tolerance or CODE_TOLERANCE
    stage = StageResult(f"code ({compiled.target})")
    want = _run(module_before_lowering, inputs)
    got = [np.asarray(o) for o in compiled.run(list(inputs))]
    names, steps = _output_info(module_before_lowering)
    float16 = involves_float16(module_before_lowering, compiled.final_module())
    if len(got) == len(want):  # the runtime hands back float32 buffers: compare in the IR's dtypes
        got = [g.astype(w.dtype) if w.dtype.metadata is None else g for g, w in zip(got, want, strict=True)]
    try:
        stage.worst = compare_outputs(got, want, names, steps, float16, tol)
    except _StageMismatch as exc:
        stage.status, stage.note = "failed", str(exc)
        return stage
    if stage.worst is not None and not stage.worst.ok:
        stage.status = "failed"
    return stage


def verify_compile(
    model: Any,
    target: Any = None,
    example_inputs: Sequence[Any] | None = None,
    *,
    inputs: Sequence[np.ndarray] | None = None,
    seed: int = 0,
    threads: int = 1,
    tolerance: Tolerance | None = None,
    code_tolerance: Tolerance | None = None,
    name: str | None = None,
    progress: bool | None = None,
) -> VerifyReport:
    """``compile(model, target, example_inputs, verify=True)``: every pass ``compile`` runs
    (the inference pipeline for the target, then the kernel passes), then the generated code.
    ``progress`` as :func:`compile`'s: a line per pass checked (default: on a terminal).

    ``inputs`` default to ``example_inputs``, else seeded random inputs. The report's ``compiled``
    holds the ``CompiledModel`` when every pass agreed."""
    from compiler.driver.compile import compile, compile_passes, resolve_target, to_module

    tgt = resolve_target(target)
    module = to_module(model, example_inputs)
    given = inputs if inputs is not None else example_inputs
    arrays = [np.asarray(getattr(x, "numpy", lambda x=x: x)()) for x in given] if given is not None else None
    report = verify_pipeline(module, compile_passes(tgt, threads), arrays, seed, tolerance, progress=progress)
    if not report.ok:
        return report
    compiled = compile(module, tgt, threads=threads, name=name, progress=progress)
    report.compiled = compiled
    if tgt.backend is None or tgt.backend.kernels is None:  # nothing generated: the reference ran it all
        return report
    if report.reference_module is None:
        report.stages.append(
            StageResult(
                f"code ({tgt})", status="skipped", note="no stage ran on the reference to compare with"
            )
        )
        return report
    stage = verify_compiled(report.reference_module, compiled, report.inputs, code_tolerance)
    report.stages.append(stage)
    if stage.status == "failed":
        report.failing = stage
        final = compiled.final_module()
        report.ir_before, report.ir_after = str(report.reference_module), str(final)
        with full_weights():
            report.failing_files = {"before.mlir": str(report.reference_module), "after.mlir": str(final)}
        if compiled.source:
            report.failing_files["model.c"] = compiled.source
    return report


# ----------------------------------------------------------------------------------------------
# Command line (xmge-opt --verify-numerics)


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--verify-numerics`` options of ``xmge-opt`` (read by :func:`verify_for_cli`)."""
    group = parser.add_argument_group("numeric verification")
    group.add_argument(
        "--verify-numerics",
        action="store_true",
        help="run the reference interpreter after every pass and stop at the first pass that changes "
        "the outputs beyond the dtype's tolerance",
    )
    group.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input for --verify-numerics (others are seeded random arrays)",
    )
    group.add_argument("--verify-seed", type=int, default=0, metavar="N", help="seed of the random inputs")
    group.add_argument(
        "--dump-failing-ir",
        metavar="DIR",
        help="with --verify-numerics: write the IR before and after the failing pass to DIR/before.mlir "
        "and DIR/after.mlir",
    )


def verify_for_cli(
    module: ModuleOp,
    passes: Sequence[ModulePass],
    args: argparse.Namespace,
    *,
    ctx: Context | None = None,
    out: IO[str] | None = None,
) -> VerifyReport:
    """``xmge-opt --verify-numerics``: run ``passes`` on ``module`` in place under
    :func:`verify_pipeline`, print the stage table to ``out`` (stderr by default), write the failing
    IR to ``--dump-failing-ir``, and raise :class:`NumericsMismatch` (one line: the pass, its
    options, the worst output) when a pass changed the numerics. Options: :func:`add_verify_arguments`."""
    out = out if out is not None else sys.stderr
    inputs = load_inputs(module, parse_input_specs(args.input), args.verify_seed)
    report = verify_pipeline(module, passes, inputs, args.verify_seed, ctx=ctx, in_place=True)
    out.write(f"{report}\n")
    if not report.ok:
        if args.dump_failing_ir:
            for path in report.write_failing_ir(args.dump_failing_ir):
                out.write(f"wrote {path}\n")
        raise NumericsMismatch(report)
    return report


__all__ = [
    "CODE_TOLERANCE",
    "REFERENCE_TOLERANCE",
    "NumericsError",
    "NumericsMismatch",
    "OutputError",
    "StageResult",
    "Tolerance",
    "VerifyReport",
    "load_inputs",
    "parse_input_specs",
    "random_inputs",
    "add_verify_arguments",
    "verify_for_cli",
    "verify_compile",
    "verify_compiled",
    "verify_pipeline",
]
