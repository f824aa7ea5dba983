"""Runs a ``func.func`` of ``mgb`` ops with the reference kernels."""

from __future__ import annotations

from collections.abc import Sequence

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


def run_function(fn: func.FuncOp, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``fn`` on numpy inputs; returns its results as numpy arrays."""
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
        specs = result_specs(op)
        try:
            outs = kernel([env[v] for v in op.operands], specs, **op.params())
        except (NotImplementedError, ValueError, TypeError) as exc:
            raise InterpreterError(f"{_describe(op)}: {exc}") from exc
        for r, v, spec in zip(op.results, outs, specs, strict=True):
            env[r] = conform(v, spec.dtype)
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
