"""MegEngine's quantization flow: ``quantize_qat`` turns a float model's quantizable modules into
QAT modules (fake-quantized training/calibration), ``quantize`` turns those into int8 modules.

    quantize_qat(model, qconfig=ema_fakequant_qconfig)   # float -> QAT, in place
    model(x) ...                                          # calibrate / fine-tune
    quantize(model)                                       # QAT -> quantized, in place
    model.eval(); y = model(x)

Which modules convert is decided by name, as MegEngine does: every class exported by
``compiler.module.quantized`` has a float class and a QAT class of the same name.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from compiler.module.module import Module
from compiler.quantization.qconfig import QConfig, ema_fakequant_qconfig


def _get_quantable_module_names() -> list[str]:
    """Names of the module classes that have a quantized form (MegEngine's helper of the same name)."""
    from compiler.module import quantized as Quantized
    from compiler.module.quantized.module import QuantizedModule

    return [
        n
        for n in Quantized.__all__
        if isinstance(getattr(Quantized, n), type)
        and issubclass(getattr(Quantized, n), QuantizedModule)
        and getattr(Quantized, n) is not QuantizedModule
    ]


def _conversion_tables() -> tuple[dict[type, type], dict[type, type]]:
    import compiler.module as Float
    from compiler.module import qat as QAT
    from compiler.module import quantized as Quantized

    names = _get_quantable_module_names()
    float_to_qat = {getattr(Float, n): getattr(QAT, n) for n in names}
    qat_to_quantized = {getattr(QAT, n): getattr(Quantized, n) for n in names}
    return float_to_qat, qat_to_quantized


def _children_with_parents(root: Module) -> Iterator[tuple[Module, str, Module]]:
    """(parent, key, child) for every sub-module, parents before children, each child once."""
    seen = {id(root)}
    stack = [root]
    while stack:
        parent = stack.pop(0)
        for key, child in parent._flatten_items(Module):
            if id(child) in seen:
                continue
            seen.add(id(child))
            yield parent, key, child
            stack.append(child)


def _replace(parent: Module, key: str, new: Module) -> None:
    """Put ``new`` where ``parent``'s ``key`` ("name" or "name.index" for list/dict items) was."""
    name, _, rest = key.partition(".")
    if not rest:
        setattr(parent, name, new)
        return
    container: Any = getattr(parent, name)
    path = rest.split(".")
    for part in path[:-1]:
        container = container[int(part)] if isinstance(container, list | tuple) else container[part]
    last = path[-1]
    if isinstance(container, list):
        container[int(last)] = new
    elif isinstance(container, dict):
        real_key = next(k for k in container if str(k) == last)
        container[real_key] = new
    else:
        raise TypeError(f"cannot replace {key!r} inside a {type(container).__name__}; use a list or dict")


def _convert(
    module: Module, table: dict[type, type], build: Callable[[type, Module], Module], skip_nested: bool
) -> None:
    targets = []
    converted: set[int] = set()
    for parent, key, child in _children_with_parents(module):
        if type(child) not in table:
            continue
        if skip_nested and (id(parent) in converted or type(parent) in table):
            continue  # only the outermost quantizable module converts (ConvBn2d, not its conv)
        if getattr(child, "quantize_disabled", False):
            continue
        converted.add(id(child))
        targets.append((parent, key, child))
    for parent, key, child in targets:
        _replace(parent, key, build(table[type(child)], child))


def _convert_copy(
    caller: str,
    module: Module,
    inplace: bool,
    table: dict[type, type],
    mapping: dict | None,
    build: Callable[[type, Module], Module],
    skip_nested: bool,
) -> Module:
    """``_convert`` for the public entry points: ``module`` itself or (not ``inplace``) a deep copy,
    with the user's ``mapping`` overriding the built-in ``table``."""
    if not isinstance(module, Module):
        raise TypeError(f"{caller}: expected a Module, got {type(module).__name__}")
    if not inplace:
        module = copy.deepcopy(module)
    _convert(module, {**table, **(mapping or {})}, build, skip_nested)
    return module


def quantize_qat(
    module: Module,
    inplace: bool = True,
    qconfig: QConfig = ema_fakequant_qconfig,
    mapping: dict | None = None,
) -> Module:
    """Replace each quantizable float sub-module (Conv2d, ConvBn2d, ConvBnRelu2d, ConvRelu2d, Linear,
    Elemwise, Concat, QuantStub, DequantStub, and ``mapping``'s extra classes) by its QAT version,
    then give every QAT module ``qconfig``. Sub-trees marked ``disable_quantize()`` stay float."""
    float_to_qat, _ = _conversion_tables()
    module = _convert_copy(
        "quantize_qat", module, inplace, float_to_qat, mapping, lambda cls, m: cls.from_float_module(m), True
    )
    propagate_qconfig(module, qconfig)
    return module


def quantize(module: Module, inplace: bool = True, mapping: dict | None = None) -> Module:
    """Replace each QAT sub-module by its int8 version (MegEngine's ``quantize``)."""
    _, qat_to_quantized = _conversion_tables()
    return _convert_copy(
        "quantize", module, inplace, qat_to_quantized, mapping, lambda cls, m: cls.from_qat_module(m), False
    )


def _propagate(module: Module, method: str, *args: Any) -> None:
    from compiler.module.qat.module import QATModule

    for m in list(module.modules()):
        if isinstance(m, QATModule):
            getattr(m, method)(*args)


def propagate_qconfig(module: Module, qconfig: QConfig) -> None:
    _propagate(module, "set_qconfig", qconfig)


def reset_qconfig(module: Module, qconfig: QConfig, inplace: bool = True) -> Module:
    """Rebuild every QAT module's observers and fake quantizers from ``qconfig``, carrying over
    their current quantization parameters where the new parts accept them."""
    from compiler.module.qat.module import QATModule

    if not inplace:
        module = copy.deepcopy(module)

    def build(factory: Any, qparams: Any) -> Any:
        inst = None if factory is None else factory()
        if inst is not None and qparams is not None and hasattr(inst, "set_qparams"):
            inst.set_qparams(qparams)
        return inst

    for m in list(module.modules()):
        if not isinstance(m, QATModule):
            continue
        if m.with_weight:
            params = m.get_weight_qparams()
            m.weight_observer = build(qconfig.weight_observer, params)
            m.weight_fake_quant = build(qconfig.weight_fake_quant, params)
        if m.with_act:
            params = m.get_activation_qparams()
            m.act_observer = build(qconfig.act_observer, params)
            m.act_fake_quant = build(qconfig.act_fake_quant, params)
    return module


def hook_qat_module(module: Module, func: Callable[..., Any]) -> list[Callable[[], None]]:
    from compiler.module.qat.module import QATModule

    return [m.register_forward_hook(func) for m in module.modules() if isinstance(m, QATModule)]


def enable_fake_quant(module: Module) -> None:
    _propagate(module, "set_fake_quant", True)


def disable_fake_quant(module: Module) -> None:
    _propagate(module, "set_fake_quant", False)


def enable_observer(module: Module) -> None:
    _propagate(module, "set_observer", True)


def disable_observer(module: Module) -> None:
    _propagate(module, "set_observer", False)


__all__ = [
    "apply_easy_quant",
    "disable_fake_quant",
    "disable_observer",
    "enable_fake_quant",
    "enable_observer",
    "hook_qat_module",
    "propagate_qconfig",
    "quantize",
    "quantize_qat",
    "reset_qconfig",
]


def _cosine(x: Any, y: Any) -> float:
    """Mean over the batch of the cosine similarity of each sample (all other axes flattened)."""
    import numpy as np

    a = np.asarray(x.numpy(), np.float64).reshape(x.shape[0], -1)
    b = np.asarray(y.numpy(), np.float64).reshape(y.shape[0], -1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.mean(np.sum(a * b, axis=1) / np.where(den == 0, 1.0, den)))


def apply_easy_quant(
    module: Module, data: Any, start: float = 0.8, stop: float = 1.2, num: int = 40
) -> Module:
    """EasyQuant (https://arxiv.org/abs/2006.16669): for each QAT layer with a ``PassiveObserver``,
    try ``num`` scales between ``start`` and ``stop`` times the current one, first for the weights
    and then for the activations, and keep the scale whose fake-quantized output is most similar
    (cosine) to the float output on ``data``."""
    import numpy as np

    import compiler.functional as F
    from compiler.logger import get_logger

    batch = data.shape[0]

    def search(mod: Module, inputs: tuple[Any, ...], outputs: Any, where: str) -> Any:
        mod._forward_hooks.clear()  # the calls below must not search again
        normal_in = [t[:batch] for t in inputs]
        fake_in = [t[batch:] for t in inputs]
        disable_fake_quant(mod)
        normal_out = mod(*normal_in)
        enable_fake_quant(mod)
        ob = getattr(mod, where, None)
        if ob is None or getattr(ob, "orig_scale", None) is None:
            return None
        best, best_scale = 0.0, 0.0
        for scale in np.linspace(start * ob.orig_scale, stop * ob.orig_scale, num):
            ob.scale = float(scale)
            sim = _cosine(normal_out, mod(*fake_in))
            if sim > best:
                best, best_scale = sim, float(scale)
        if best_scale == 0.0:
            get_logger(__name__).warning("EasyQuant finds no better scale")
        else:
            ob.scale = best_scale
        return F.concat([normal_out, outputs[batch:]])

    both = F.concat([data, data])
    import functools

    hook_qat_module(module, functools.partial(search, where="weight_observer"))
    module(both)
    hook_qat_module(module, functools.partial(search, where="act_observer"))
    module(both)
    return module
