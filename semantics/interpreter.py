"""Runs a ``func.func`` of ``mgb`` ops with the reference kernels."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from dialects import tensor as T
from dialects.dtypes import numpy_dtype
from dialects.errors import XmgeError
from semantics.kernels import KERNELS, ResultSpec
from semantics.quant_kernels import conform


class InterpreterError(XmgeError, RuntimeError):
    """Running IR failed; the message names the op."""


def result_specs(op: Operation) -> list[ResultSpec]:
    specs = []
    for r in op.results:
        t = r.type
        assert isinstance(t, TensorType)
        specs.append(ResultSpec(tuple(t.get_shape()), numpy_dtype(t.element_type)))
    return specs


def _describe(op: Operation) -> str:
    name = op.attributes.get("name")
    where = f" ({name.data})" if name is not None and hasattr(name, "data") else ""
    return f"{op.name}{where}"


def _input_name(fn: func.FuncOp, i: int, arg: SSAValue) -> str:
    hint = arg.name_hint
    return f"input {i}" + (f" '{hint}'" if hint else "") + f" of @{fn.sym_name.data}"


def check_exact_conversion(value: np.ndarray, want: np.dtype, what: str) -> None:
    """InterpreterError unless every element of ``value`` keeps its value as ``want``: an int64
    index 2**32+1 must not wrap into int32, a float 1.7 must not truncate into an int input.
    Float to narrower float (rounding) is a normal conversion; quantized inputs are checked by
    their scale elsewhere."""
    want = np.dtype(want)
    have = value.dtype
    if have == want or want.kind not in "iub" or value.size == 0:
        return
    if have.kind not in "iufb":
        # extension number types (ml_dtypes' int4/int2/float8 ... that ONNX arrays use) are checked
        # by their values; anything else (strings, objects) is refused
        if have.kind in "OSUM" or not hasattr(have, "type"):
            raise InterpreterError(f"{what} must be {want}, got an array of {have}")
        try:
            value = value.astype(np.float64)
        except (TypeError, ValueError):
            raise InterpreterError(f"{what} must be {want}, got an array of {have}") from None
        have = value.dtype
    if want.kind == "b":
        if have.kind != "b" and not np.isin(value, (0, 1)).all():
            raise InterpreterError(f"{what} is bool: got values other than 0 and 1 ({have})")
        return
    if have.kind == "f":
        finite = np.isfinite(value)
        if not finite.all() or not (value == np.trunc(value)).all():
            bad = value[~finite | (value != np.trunc(np.where(finite, value, 0)))].flat[0]
            raise InterpreterError(f"{what} is {want}: got the non-integer value {bad} ({have})")
    info = np.iinfo(want)
    low, high = value.min(), value.max()
    if low < info.min or high > info.max:
        bad = low if low < info.min else high
        limits = f"[{info.min}, {info.max}]"
        raise InterpreterError(f"{what} is {want}: the value {bad} ({have}) is outside {limits}")


def _resized_specs(op: T.MgbOp, args: Sequence[np.ndarray], declared: list[ResultSpec]) -> list[ResultSpec]:
    """Result specs of ``op`` for operands whose run-time shapes differ from their types: a size
    that depends on data (``mgb.cond_take``'s count) flows on through the ops whose shape inference
    follows their operands; an op without inference keeps its declared result shapes."""
    types = [
        TensorType(v.type.element_type, a.shape)  # type: ignore[attr-defined]
        for a, v in zip(args, op.operands, strict=True)
    ]
    try:
        inferred = type(op).infer(types, **op.params())
    except NotImplementedError:
        return declared
    except T.ShapeInferenceError as exc:
        raise InterpreterError(f"{_describe(op)}: with run-time operand shapes: {exc}") from exc
    return [
        ResultSpec(tuple(t.get_shape()), d.dtype) for t, d in zip(inferred, declared, strict=True)
    ]


# called after each op with the op, its result values and the seconds its kernel took
Observer = Callable[[Operation, list[np.ndarray], float], None]


def run_function(
    fn: func.FuncOp, inputs: Sequence[np.ndarray], observe: Observer | None = None
) -> list[np.ndarray]:
    """Run ``fn`` on numpy inputs; returns its results as numpy arrays. ``observe`` sees every op's
    results as they are computed (Lite's per-operator dumps and profile use it)."""
    block = fn.body.block
    if len(inputs) != len(block.args):
        raise InterpreterError(f"@{fn.sym_name.data} takes {len(block.args)} inputs, got {len(inputs)}")
    env: dict[SSAValue, np.ndarray] = {}
    for i, (arg, value) in enumerate(zip(block.args, inputs, strict=True)):
        t = arg.type
        assert isinstance(t, TensorType)
        want_shape, want_dtype = tuple(t.get_shape()), numpy_dtype(t.element_type)
        value = np.asarray(value)
        if value.shape != want_shape:
            raise InterpreterError(
                f"input {i} of @{fn.sym_name.data} must have shape {want_shape}, got {value.shape}"
            )
        check_exact_conversion(value, want_dtype, _input_name(fn, i, arg))
        env[arg] = conform(value.astype(want_dtype, copy=False), want_dtype)
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]
        if isinstance(op, T.ConstOp):
            env[op.output] = op.numpy()
            continue
        kernel = KERNELS.get(type(op))  # type: ignore[arg-type]
        if kernel is None:
            raise InterpreterError(f"{op.name}: the reference interpreter has no kernel for this op")
        assert isinstance(op, T.MgbOp)
        args = [env[v] for v in op.operands]
        specs = result_specs(op)
        if any(a.shape != tuple(v.type.get_shape()) for a, v in zip(args, op.operands, strict=True)):  # type: ignore[attr-defined]
            specs = _resized_specs(op, args, specs)
        t0 = time.perf_counter()
        try:
            outs = kernel(args, specs, **op.params())
        except (NotImplementedError, ValueError, TypeError) as exc:
            raise InterpreterError(f"{_describe(op)}: {exc}") from exc
        for r, v, spec in zip(op.results, outs, specs, strict=True):
            env[r] = conform(v, spec.dtype)
        if observe is not None:
            observe(op, [env[r] for r in op.results], time.perf_counter() - t0)
    raise InterpreterError(f"@{fn.sym_name.data} has no func.return")


def run_module(module: ModuleOp, inputs: Sequence[np.ndarray], entry: str | None = None) -> list[np.ndarray]:
    """Run the function ``entry`` (default: the first function) of ``module``."""
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
    if not funcs:
        raise InterpreterError("the module has no func.func to run")
    if entry is None:
        return run_function(funcs[0], inputs)
    for f in funcs:
        if f.sym_name.data == entry:
            return run_function(f, inputs)
    raise InterpreterError(f"no function @{entry}; the module has {[f.sym_name.data for f in funcs]}")
