"""MegEngine's ``quantization`` package, plus xmge's one-call post-training quantizer.

* MegEngine's flow: ``quantize_qat(model, qconfig=...)`` (float -> QAT modules with observers and
  fake quantizers), calibrate or fine-tune, ``quantize(model)`` (QAT -> int8 modules); QConfigs,
  observers and fake quantizers as in MegEngine (:mod:`.qconfig`, :mod:`.observer`,
  :mod:`.fake_quant`, :mod:`.utils`).
* Post-training in one call: ``quantize(float_model, calibration_batches)`` traces the float
  model and builds an int8 model from its graph (:mod:`.ptq`).
"""

from __future__ import annotations

from typing import Any

from compiler.module.module import Module
from compiler.quantization import quantize as _megengine_flow
from compiler.quantization.fake_quant import TQT, FakeQuantize
from compiler.quantization.observer import (
    ExponentialMovingAverageObserver,
    HistogramObserver,
    MinMaxObserver,
    Observer,
    PassiveObserver,
    SyncExponentialMovingAverageObserver,
    SyncMinMaxObserver,
)
from compiler.quantization.ptq import (
    QuantizedModel,
    minmax_observer,
    percentile_observer,
    quantize_calibrated,
    trace_float,
)
from compiler.quantization.qconfig import (
    QConfig,
    calibration_qconfig,
    easyquant_qconfig,
    ema_fakequant_qconfig,
    ema_lowbit_fakequant_qconfig,
    min_max_fakequant_qconfig,
    passive_qconfig,
    sync_ema_fakequant_qconfig,
    tqt_qconfig,
)
from compiler.quantization.quantize import (
    disable_fake_quant,
    disable_observer,
    enable_fake_quant,
    enable_observer,
    hook_qat_module,
    propagate_qconfig,
    quantize_qat,
    reset_qconfig,
)
from compiler.quantization.utils import QParams, QuantMode, create_qparams, fake_quant_tensor


def quantize(module: Module, *args: Any, **kwargs: Any) -> Module:
    """MegEngine's ``quantize(module, inplace=True, mapping=None)`` (QAT -> int8 modules), or,
    given calibration batches as the second argument, :func:`quantize_calibrated`."""
    first = args[0] if args else None
    if (first is not None and not isinstance(first, bool)) or {"calibration", "observer", "percentile"} & set(
        kwargs
    ):
        return quantize_calibrated(module, *args, **kwargs)
    return _megengine_flow.quantize(module, *args, **kwargs)


__all__ = [
    "TQT",
    "ExponentialMovingAverageObserver",
    "FakeQuantize",
    "HistogramObserver",
    "MinMaxObserver",
    "Observer",
    "PassiveObserver",
    "QConfig",
    "QParams",
    "QuantMode",
    "QuantizedModel",
    "SyncExponentialMovingAverageObserver",
    "SyncMinMaxObserver",
    "calibration_qconfig",
    "create_qparams",
    "disable_fake_quant",
    "disable_observer",
    "easyquant_qconfig",
    "ema_fakequant_qconfig",
    "ema_lowbit_fakequant_qconfig",
    "enable_fake_quant",
    "enable_observer",
    "fake_quant_tensor",
    "hook_qat_module",
    "min_max_fakequant_qconfig",
    "minmax_observer",
    "passive_qconfig",
    "percentile_observer",
    "propagate_qconfig",
    "quantize",
    "quantize_calibrated",
    "quantize_qat",
    "reset_qconfig",
    "sync_ema_fakequant_qconfig",
    "tqt_qconfig",
    "trace_float",
]
