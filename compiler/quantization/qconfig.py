"""MegEngine's ``QConfig``: which observer and fake quantizer each QAT module builds for its
weight and its activation (classes or ``functools.partial``s, never instances)."""

from __future__ import annotations

from collections import namedtuple
from functools import partial
from typing import Any

from compiler.module.module import Module
from compiler.quantization.fake_quant import TQT, FakeQuantize
from compiler.quantization.observer import (
    ExponentialMovingAverageObserver,
    HistogramObserver,
    MinMaxObserver,
    PassiveObserver,
    SyncExponentialMovingAverageObserver,
    SyncMinMaxObserver,
)


class QConfig(
    namedtuple("QConfig", ["weight_observer", "act_observer", "weight_fake_quant", "act_fake_quant"])
):
    def __new__(
        cls, weight_observer: Any, act_observer: Any, weight_fake_quant: Any, act_fake_quant: Any
    ) -> QConfig:
        if isinstance(act_observer, Module) or isinstance(weight_observer, Module):
            raise ValueError(
                "QConfig takes observer classes (e.g. partial(MinMaxObserver, dtype='qint8')), "
                "not observer instances"
            )
        return super().__new__(cls, weight_observer, act_observer, weight_fake_quant, act_fake_quant)


def _qconfig(
    weight_observer: type | None,
    act_observer: type | None,
    fake_quant: type | None = FakeQuantize,
    weight_dtype: str = "qint8_narrow",
    act_dtype: str = "qint8",
) -> QConfig:
    """A preset: the weight side in ``weight_dtype``, the activation side in ``act_dtype`` (None: no
    observer / no fake quantizer on either side)."""

    def on(cls: type | None, dtype: str) -> Any:
        return None if cls is None else partial(cls, dtype=dtype)

    return QConfig(
        weight_observer=on(weight_observer, weight_dtype),
        act_observer=on(act_observer, act_dtype),
        weight_fake_quant=on(fake_quant, weight_dtype),
        act_fake_quant=on(fake_quant, act_dtype),
    )


min_max_fakequant_qconfig = _qconfig(MinMaxObserver, MinMaxObserver)
ema_fakequant_qconfig = _qconfig(MinMaxObserver, ExponentialMovingAverageObserver)
sync_ema_fakequant_qconfig = _qconfig(SyncMinMaxObserver, SyncExponentialMovingAverageObserver)
ema_lowbit_fakequant_qconfig = _qconfig(
    MinMaxObserver, ExponentialMovingAverageObserver, weight_dtype="qint4", act_dtype="qint4"
)
calibration_qconfig = _qconfig(MinMaxObserver, HistogramObserver, fake_quant=None)
tqt_qconfig = _qconfig(None, None, fake_quant=TQT)
passive_qconfig = _qconfig(PassiveObserver, PassiveObserver)

easyquant_qconfig = passive_qconfig

__all__ = [
    "QConfig",
    "calibration_qconfig",
    "easyquant_qconfig",
    "ema_fakequant_qconfig",
    "ema_lowbit_fakequant_qconfig",
    "min_max_fakequant_qconfig",
    "passive_qconfig",
    "sync_ema_fakequant_qconfig",
    "tqt_qconfig",
]
