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


min_max_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(MinMaxObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)

ema_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)

sync_ema_fakequant_qconfig = QConfig(
    weight_observer=partial(SyncMinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(SyncExponentialMovingAverageObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)

ema_lowbit_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint4"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint4"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint4"),
    act_fake_quant=partial(FakeQuantize, dtype="qint4"),
)

calibration_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(HistogramObserver, dtype="qint8"),
    weight_fake_quant=None,
    act_fake_quant=None,
)

tqt_qconfig = QConfig(
    weight_observer=None,
    act_observer=None,
    weight_fake_quant=partial(TQT, dtype="qint8_narrow"),
    act_fake_quant=partial(TQT, dtype="qint8"),
)

passive_qconfig = QConfig(
    weight_observer=partial(PassiveObserver, dtype="qint8_narrow"),
    act_observer=partial(PassiveObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)

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
