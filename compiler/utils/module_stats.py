"""MegEngine's ``utils.module_stats``: a model's parameter sizes, operation counts (flops) and
activation sizes, measured by running it once with forward hooks on the layers that compute.

``module_stats(model, input_shapes=(1, 3, 224, 224))`` (or ``inputs=``) returns
``(total_stats, stats_details)``: totals (``param_size`` in bytes, ``param_dims``, ``flops``,
``act_size``, ``act_dims``) and one record per parameter, counted layer and activation. Flops are
MegEngine's formulas: a convolution's output elements times (input channels per group x kernel
elements + bias), a normalization's input elements times 7, a pooling's output elements times the
kernel elements, a linear layer's output elements times its input features plus the bias.
``register_flops`` adds a formula for a layer class, ``register_hook_module`` makes a class
counted at all.
"""

from __future__ import annotations

import collections.abc
import contextlib
import functools
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

import compiler.functional as F
import compiler.module as M
from compiler.core.tensor.dtype import get_dtype_bit
from compiler.logger import get_logger
from compiler.module import batchnorm, layers
from compiler.module.module import Module
from compiler.tensor import Tensor

__all__ = ["hook_modules", "module_stats", "register_flops", "register_hook_module"]

logger = get_logger(__name__)

FlopsFn = Callable[[Module, Sequence[Any], Sequence[Any]], float]
_flops_fns: dict[type, FlopsFn] = {}


def register_flops(*modules: type) -> Callable[[FlopsFn], FlopsFn]:
    """Register ``fn(module, inputs, outputs) -> flops`` for instances of ``modules``."""

    def register(fn: FlopsFn) -> FlopsFn:
        for cls in modules:
            _flops_fns[cls] = fn
        return fn

    return register


def _numel(shape: Sequence[int]) -> int:
    return int(np.prod(shape))


@register_flops(M.Conv1d, M.Conv2d, M.Conv3d, M.LocalConv2d)
def flops_convNd(module: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> float:
    bias = 1 if module.bias is not None else 0
    per_output = float(module.in_channels // module.groups) * _numel(module.kernel_size) + bias
    return _numel(outputs[0].shape) * per_output


@register_flops(M.ConvTranspose2d, M.ConvTranspose3d)
def flops_convNdTranspose(module: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> float:
    bias = 1 if module.bias is not None else 0
    scatter = _numel(inputs[0].shape) * (module.out_channels // module.groups * _numel(module.kernel_size))
    return scatter + _numel(outputs[0].shape) * bias


@register_flops(batchnorm._BatchNorm, M.LayerNorm, M.GroupNorm, M.InstanceNorm)
def flops_norm(module: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> float:
    return _numel(inputs[0].shape) * 7


@register_flops(M.AvgPool2d, M.MaxPool2d)
def flops_pool(module: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> float:
    k = module.kernel_size
    kernel = _numel(k) if isinstance(k, tuple | list) else k**2
    return _numel(outputs[0].shape) * kernel


@register_flops(layers._AdaptivePool2d)
def flops_adaptivePool(module: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> float:
    # the window a uniform adaptive pooling of this input size would take
    h, w = inputs[0].shape[2], inputs[0].shape[3]
    stride_h = np.floor(h / (h - 1)) if h > 1 else 1
    stride_w = np.floor(w / (w - 1)) if w > 1 else 1
    kernel_h = h - (h - 1) * stride_h
    kernel_w = w - (w - 1) * stride_w
    return _numel(outputs[0].shape) * kernel_h * kernel_w


@register_flops(M.Linear)
def flops_linear(module: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> float:
    bias = module.out_features if module.bias is not None else 0
    return _numel(outputs[0].shape) * module.in_features + bias


@register_flops(M.BatchMatMulActivation)
def flops_batchmatmul(module: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> float:
    bias = 1 if module.bias is not None else 0
    x, w = inputs[0], module.weight
    batch, n, p = x.shape
    return n * (p + bias) * w.shape[-1] * batch


# what is hooked; QAT and quantized layers subclass these, so they are counted too
hook_modules: list[type] = [
    M.Conv1d,
    M.Conv2d,
    M.Conv3d,
    M.ConvTranspose2d,
    M.ConvTranspose3d,
    M.LocalConv2d,
    M.Linear,
    M.BatchMatMulActivation,
    batchnorm._BatchNorm,
    M.LayerNorm,
    M.GroupNorm,
    M.InstanceNorm,
    M.AvgPool2d,
    M.MaxPool2d,
    layers._AdaptivePool2d,
]


def register_hook_module(module: type | Sequence[type]) -> None:
    """Count instances of ``module`` (a Module class, or a list or tuple of them) too."""
    if isinstance(module, tuple | list):
        for m in module:
            register_hook_module(m)
    elif isinstance(module, type) and issubclass(module, Module):
        hook_modules.append(module)
    else:
        raise TypeError(
            f"register_hook_module: expected a Module class or a list/tuple of them, got {module!r}"
        )


def _nbits(dtype: Any) -> int:
    return get_dtype_bit(np.dtype(dtype).name)


def _fmt(num: float, suffix: str = "B") -> str:
    for unit in ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"):
        if abs(num) < 1024.0:
            return f"{num:3.3f} {unit}{suffix}"
        num /= 1024.0
    return f"{num:.1f} Yi{suffix}"


def _param_record(name: str, param: Tensor) -> dict[str, Any]:
    data = np.asarray(param.numpy(), dtype=np.float64)
    nbits = _nbits(param.dtype)
    dims = _numel(param.shape)
    return {
        "name": name,
        "dtype": np.dtype(param.dtype),
        "shape": tuple(param.shape),
        "mean": f"{data.mean() if data.size else 0.0:.3g}",
        "std": f"{data.std() if data.size else 0.0:.3g}",
        "param_dim": dims,
        "nbits": nbits,
        "size": dims * nbits // 8,
    }


def _activation_record(name: str, class_name: str, out: Tensor, with_values: bool) -> dict[str, Any]:
    nbits = _nbits(out.dtype)
    dims = _numel(out.shape)
    record = {
        "name": name,
        "class_name": class_name,
        "dtype": np.dtype(out.dtype),
        "shape": tuple(out.shape),
        "act_dim": dims,
        "nbits": nbits,
        "size": dims * nbits // 8,
    }
    if with_values:
        data = np.asarray(out.numpy(), dtype=np.float64)
        record["mean"] = f"{data.mean() if data.size else 0.0:.3g}"
        record["std"] = f"{data.std() if data.size else 0.0:.3g}"
    return record


def _flops_record(module: Module, inputs: Sequence[Any], outputs: Any) -> dict[str, Any] | None:
    outs = outputs if isinstance(outputs, tuple | list) else (outputs,)
    for cls in type(module).__mro__:
        fn = _flops_fns.get(cls)
        if fn is not None:
            return {
                "input_shapes": [tuple(i.shape) for i in inputs if hasattr(i, "shape")],
                "output_shapes": [tuple(o.shape) for o in outs if hasattr(o, "shape")],
                "flops_num": fn(module, inputs, outs),
            }
    return None


def _summarize(records: list[dict[str, Any]], key: str, bar_length_max: int) -> int:
    """Fill in cumulative sizes, ratios and bars; returns the total of ``key``."""
    total = sum(int(r[key]) for r in records)
    peak = max([r[key] for r in records] + [0])
    running = 0
    for r in records:
        running += int(r[key])
        r["ratio"] = r[key] / total if total else 0.0
        r["percentage"] = f"{r['ratio'] * 100:.2f}%"
        r["bar"] = "#" * (int(r[key] / peak * bar_length_max) if peak else 0)
        r["cum"] = running
    return total


def _table(title: str, records: list[dict[str, Any]], columns: Sequence[str]) -> str:
    rows = [list(columns)] + [[str(r.get(c, "")) for c in columns] for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return f"{title}\n" + "\n".join(lines)


@contextlib.contextmanager
def _eval_mode(model: Module) -> Iterator[Module]:
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


def _as_tensors(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return Tensor(x)
    if isinstance(x, collections.abc.Mapping):
        return {k: _as_tensors(v) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_as_tensors(v) for v in x))
    if isinstance(x, collections.abc.Sequence) and not isinstance(x, str):
        return [_as_tensors(v) for v in x]
    return Tensor(x, dtype=np.float32)


def module_stats(
    model: Module,
    inputs: Any = None,
    input_shapes: Any = None,
    cal_params: bool = True,
    cal_flops: bool = True,
    cal_activations: bool = True,
    logging_to_stdout: bool = True,
    bar_length_max: int = 20,
) -> tuple[Any, Any]:
    """Run ``model`` once in eval mode (on ``inputs``, or zeros of ``input_shapes``) and measure
    it. Parameters are counted once each, whether their layer is called or only reads them
    (``conv.calc_conv(x, conv.weight, conv.bias)``). With ``logging_to_stdout`` the tables are
    logged. Returns ``(total_stats, stats_details)``."""
    with_values = inputs is not None
    if inputs is not None:
        args = _as_tensors(list(inputs) if isinstance(inputs, tuple | list) else [inputs])
    elif input_shapes:
        shapes = input_shapes if isinstance(input_shapes[0], tuple | list) else [input_shapes]
        args = [F.zeros(tuple(s), dtype=np.float32) for s in shapes]
    else:
        raise ValueError("module_stats: give inputs or input_shapes to run the model with")

    params: list[dict[str, Any]] = []
    flops: list[dict[str, Any]] = []
    activations: list[dict[str, Any]] = []
    recorded: set[int] = set()
    names = {id(m): name for name, m in model.named_modules()}

    def record_param(owner: Module, suffix: str, value: Any) -> None:
        if cal_params and isinstance(value, Tensor) and id(value) not in recorded:
            recorded.add(id(value))
            params.append(_param_record(names.get(id(owner), "") + suffix, value))

    def hook(module: Module, ins: Sequence[Any], outs: Any, name: str = "") -> None:
        class_name = type(module).__name__
        if cal_flops:
            record = _flops_record(module, ins, outs)
            if record is not None:
                record.update(name=name, class_name=class_name)
                flops.append(record)
        record_param(module, "-w", getattr(module, "weight", None))
        record_param(module, "-b", getattr(module, "bias", None))
        if cal_activations:
            out = outs[0] if isinstance(outs, tuple | list) else outs
            if isinstance(out, Tensor):
                activations.append(_activation_record(name, class_name, out, with_values))

    handles = [
        m.register_forward_hook(functools.partial(hook, name=name))
        for name, m in model.named_modules()
        if isinstance(m, tuple(hook_modules))
    ]
    original = Module.__getattribute__

    def reading(module: Module, item: str) -> Any:
        # a layer whose weight is read without calling it still has its parameters counted
        value = original(module, item)
        if item in ("weight", "bias") and id(module) in names:
            record_param(module, "-w" if item == "weight" else "-b", value)
        return value

    try:
        Module.__getattribute__ = reading  # type: ignore[method-assign]
        with _eval_mode(model):
            model(*args)
    finally:
        Module.__getattribute__ = original  # type: ignore[method-assign]
        for h in handles:
            h.remove()

    total_param_dims = sum(int(p["param_dim"]) for p in params)
    total_param_size = _summarize(params, "size", bar_length_max) if cal_params else 0
    total_flops = _summarize(flops, "flops_num", bar_length_max) if cal_flops else 0
    total_act_dims = sum(int(a["act_dim"]) for a in activations)
    total_act_size = _summarize(activations, "size", bar_length_max) if cal_activations else 0
    summary = {"#params": len(params)}
    if cal_params:
        summary.update(total_param_dims=_fmt(total_param_dims, ""), total_param_size=_fmt(total_param_size))
        if logging_to_stdout:
            logger.info(
                _table(
                    "param stats",
                    params,
                    ("name", "dtype", "shape", "mean", "std", "param_dim", "size", "percentage", "bar"),
                )
            )
    if cal_flops:
        summary["total_flops"] = _fmt(total_flops, "OPs")
        if logging_to_stdout:
            logger.info(
                _table(
                    "op stats",
                    flops,
                    ("name", "class_name", "input_shapes", "output_shapes", "flops_num", "percentage", "bar"),
                )
            )
    if cal_activations:
        summary.update(total_act_dims=_fmt(total_act_dims, ""), total_act_size=_fmt(total_act_size))
        if logging_to_stdout:
            logger.info(
                _table(
                    "activation stats",
                    activations,
                    ("name", "class_name", "shape", "act_dim", "size", "percentage", "bar"),
                )
            )
    if cal_flops and cal_params and total_param_size:
        summary["flops/param_size"] = f"{total_flops / total_param_size:3.3f}"
    logger.info(_table("summary", [{"item": k, "value": v} for k, v in summary.items()], ("item", "value")))

    params.append({"name": "total", "param_dim": total_param_dims, "size": _fmt(total_param_size)})
    flops.append({"name": "total", "flops": _fmt(total_flops, "OPs")})
    activations.append({"name": "total", "act_dim": total_act_dims, "size": _fmt(total_act_size)})
    return (
        _TotalStats(total_param_size, total_param_dims, total_flops, total_act_size, total_act_dims),
        _StatsDetails(params, flops, activations),
    )


_TotalStats = namedtuple("total_stats", ["param_size", "param_dims", "flops", "act_size", "act_dims"])
_StatsDetails = namedtuple("module_stats", ["params", "flops", "activations"])
