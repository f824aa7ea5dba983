"""MegEngine's observers: modules that watch the values passing through them and derive
quantization parameters (scale, zero point) for a quantized dtype.

Statistics are gathered from the concrete values with numpy: observing is bookkeeping beside the
computation (it returns its input unchanged), never part of a traced graph.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any

import numpy as np

from compiler.module.module import Module
from compiler.quantization.utils import QParams, QuantMode, _DtypeModule, create_qparams
from compiler.tensor import Tensor

_FLOAT_MAX = float(np.finfo(np.float32).max)


class Observer(_DtypeModule, metaclass=ABCMeta):
    """Base class: ``forward(x)`` records statistics of ``x`` (when enabled) and returns ``x``.
    Abstract, as MegEngine's: a subclass defines ``get_qparams`` (and ``_observe``, what
    ``forward`` calls with the values as numpy)."""

    def train(self, mode: bool = True, recursive: bool = True) -> Module:
        # MegEngine ties observing to training mode: eval() freezes the statistics (enable_observer
        # overrides)
        super().train(mode, recursive)
        self.enabled = mode
        return self

    def forward(self, x: Tensor) -> Tensor:
        if self.enabled:
            self._observe(np.asarray(x.numpy(), np.float32))
        return x

    def _observe(self, values: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define _observe()")

    @abstractmethod
    def get_qparams(self) -> QParams: ...


class MinMaxObserver(Observer):
    """Running min and max; symmetric scale ``max(|min|, |max|) / ((qmax - qmin) / 2)``, asymmetric
    ``(max - min) / (qmax - qmin)`` with a zero point, both at least ``eps``."""

    def __init__(
        self, mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 1e-5, dtype: str = "qint8", **kwargs: Any
    ) -> None:
        super().__init__(dtype, **kwargs)
        self.mode, self.scale_limit = mode, eps
        self.min_val = Tensor(np.float32(_FLOAT_MAX))
        self.max_val = Tensor(np.float32(-_FLOAT_MAX))

    def _observe(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        self.min_val._reset(np.minimum(self.min_val.numpy(), values.min()))
        self.max_val._reset(np.maximum(self.max_val.numpy(), values.max()))

    def _calculate_qparams(self, min_val: float, max_val: float) -> QParams:
        lo, hi = min(0.0, min_val), max(0.0, max_val)
        if self.mode == QuantMode.SYMMERTIC:
            scale = max(max(-lo, hi) / ((self.qmax - self.qmin) / 2), self.scale_limit)
            return create_qparams(self.mode, self.dtype, scale)
        scale = max((hi - lo) / (self.qmax - self.qmin), self.scale_limit)
        zero_point = self.qmin - round(lo / scale)
        return create_qparams(self.mode, self.dtype, scale, float(zero_point))

    def get_qparams(self) -> QParams:
        return self._calculate_qparams(float(self.min_val.numpy()), float(self.max_val.numpy()))


class SyncMinMaxObserver(MinMaxObserver):
    """MinMaxObserver synchronised across data-parallel workers; xmge runs one process, so the
    local statistics are the global ones."""


class ExponentialMovingAverageObserver(MinMaxObserver):
    """min/max as exponential moving averages: ``m = momentum * m + (1 - momentum) * batch``
    (the first batch sets them directly)."""

    def __init__(
        self,
        momentum: float = 0.9,
        mode: QuantMode = QuantMode.SYMMERTIC,
        eps: float = 1e-5,
        dtype: str = "qint8",
        **kwargs: Any,
    ) -> None:
        super().__init__(mode, eps, dtype, **kwargs)
        self.momentum = float(momentum)
        self.runtime_momentum = 0.0  # first batch: take its statistics as they are

    def set_momentum(self, momentum: float) -> None:
        self.momentum = float(momentum)

    def _observe(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        m = self.runtime_momentum
        self.min_val._reset(np.float32(self.min_val.numpy() * m + (1 - m) * values.min()))
        self.max_val._reset(np.float32(self.max_val.numpy() * m + (1 - m) * values.max()))
        self.runtime_momentum = self.momentum


class SyncExponentialMovingAverageObserver(ExponentialMovingAverageObserver):
    """See :class:`SyncMinMaxObserver`: one process, local statistics are global."""


class HistogramObserver(MinMaxObserver):
    """Min/max plus a histogram of the values; the symmetric range is the threshold (searched over
    the histogram's bin edges) that minimises the expected squared error of clipping plus rounding,
    so rare outliers do not stretch the scale."""

    def __init__(
        self,
        bins: int = 2048,
        upsample_rate: int = 128,
        mode: QuantMode = QuantMode.SYMMERTIC,
        eps: float = 1e-5,
        dtype: str = "qint8",
        **kwargs: Any,
    ) -> None:
        super().__init__(mode, eps, dtype, **kwargs)
        self.bins, self.upsample_rate = bins, upsample_rate
        self._magnitudes: np.ndarray = np.zeros(bins, np.float64)
        self._edge = 0.0  # histogram of |x| over [0, _edge]

    def _observe(self, values: np.ndarray) -> None:
        super()._observe(values)
        mags = np.abs(values.reshape(-1)).astype(np.float64)
        if mags.size == 0:
            return
        top = float(mags.max())
        if top > self._edge:
            # re-bin the old counts onto the wider range (each old bin's mass at its centre)
            if self._edge > 0 and self._magnitudes.any():
                centres = (np.arange(self.bins) + 0.5) * (self._edge / self.bins)
                self._magnitudes = np.histogram(centres, self.bins, (0.0, top), weights=self._magnitudes)[0]
            self._edge = top
        if self._edge > 0:
            self._magnitudes += np.histogram(mags, self.bins, (0.0, self._edge))[0]

    def _best_threshold(self) -> float:
        width = self._edge / self.bins
        centres = (np.arange(self.bins) + 0.5) * width
        levels = (self.qmax - self.qmin) / 2
        best, best_err = self._edge, np.inf
        for k in range(max(self.bins // 16, 1), self.bins + 1):
            t = k * width
            step = t / levels
            inside = centres <= t
            rounding = (step * step / 12.0) * self._magnitudes[inside].sum()
            clipping = (((centres[~inside] - t) ** 2) * self._magnitudes[~inside]).sum()
            err = rounding + clipping
            if err < best_err:
                best, best_err = t, err
        return best

    def get_qparams(self) -> QParams:
        if self.mode != QuantMode.SYMMERTIC or self._edge == 0:
            return super().get_qparams()
        t = self._best_threshold()
        return self._calculate_qparams(-t, t)


class PassiveObserver(Observer):
    """Holds given quantization parameters (``set_qparams``) instead of observing; its ``scale``
    can be set directly (EasyQuant searches it)."""

    def __init__(self, dtype: str = "qint8", **kwargs: Any) -> None:
        super().__init__(dtype, **kwargs)
        self.qparams: QParams | None = None
        self.orig_scale: float | None = None

    def set_qparams(self, qparams: QParams) -> None:
        self.qparams = qparams
        self.orig_scale = (
            None if qparams.scale is None else float(np.asarray(qparams.scale.numpy()).reshape(-1)[0])
        )

    @property
    def scale(self) -> Tensor | None:
        return None if self.qparams is None else self.qparams.scale

    @scale.setter
    def scale(self, value: float) -> None:
        if self.qparams is None:
            self.qparams = create_qparams(QuantMode.SYMMERTIC, self.dtype, value)
        else:
            self.qparams.scale = Tensor(np.float32(value))

    def _observe(self, values: np.ndarray) -> None:
        return None  # passive: the parameters are set, not measured

    def get_qparams(self) -> QParams:
        if self.qparams is None:
            raise ValueError("PassiveObserver has no quantization parameters; call set_qparams first")
        return self.qparams


__all__ = [
    "ExponentialMovingAverageObserver",
    "HistogramObserver",
    "MinMaxObserver",
    "Observer",
    "PassiveObserver",
    "SyncExponentialMovingAverageObserver",
    "SyncMinMaxObserver",
]
